#!/usr/bin/env bash
# slabcg's accounted pair against mimalloc's unaccounted one, in the same loop
# (examples/pair_probe.rs and examples/pair_probe_peer.rs, 4 allocations then 4 frees per
# batch): runs the two binaries alternately ROUNDS times, each run short, so that both sides of
# a round see the same machine state, and prints the median and spread of the per-round
# ratios slabcg-in-a-tenant / mimalloc.
#
# usage: scripts/vs-mimalloc.sh [ROUNDS] [BATCHES] [SIZE] [const]
#   defaults: 20 rounds of 2000000 batches of 32 B, layout known at run time (through the
#   `__rust_alloc` call); `const`: compile-time layout (slabcg inlined by LTO, mimalloc a C
#   call either way).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-20}
BATCHES=${2:-2000000}
SIZE=${3:-32}
MODE=${4:-}
cargo build --release --example pair_probe --example pair_probe_peer >&2
DIR=${CARGO_TARGET_DIR:-target}/release/examples
for ((i = 1; i <= ROUNDS; i++)); do
    # shellcheck disable=SC2086
    peer=$("$DIR/pair_probe_peer" "$BATCHES" "$SIZE" $MODE | awk '{print $(NF-1)}')
    # shellcheck disable=SC2086
    ours=$("$DIR/pair_probe" "$BATCHES" tenant "$SIZE" $MODE | awk '{print $(NF-1)}')
    echo "$ours $peer"
done | awk -v size="$SIZE" -v mode="${MODE:-run-time}" '
    { r[NR] = $1 / $2; o[NR] = $1; p[NR] = $2; printf "round %d: slabcg tenant %.2f ns, mimalloc %.2f ns, ratio %.3f\n", NR, $1, $2, $1 / $2 }
    function med(a, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        n = NR; m = med(r, n)
        printf "%s B, %s layout, %d rounds: slabcg-in-a-tenant / mimalloc ratio min %.3f median %.3f max %.3f; median ns %.2f vs %.2f\n", size, mode, n, r[1], m, r[n], med(o, n), med(p, n)
    }'
