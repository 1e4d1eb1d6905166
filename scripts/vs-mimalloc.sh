#!/usr/bin/env bash
# slabcg's accounted pair against mimalloc's unaccounted one, in the same loop
# (examples/pair_probe.rs and examples/pair_probe_peer.rs, 4 allocations then 4 frees per
# batch): runs the two binaries alternately ROUNDS times, each run short, so that both sides of
# a round see the same machine state, and prints the median and spread of the per-round
# ratios slabcg-in-a-tenant / mimalloc.
#
# usage: scripts/vs-mimalloc.sh [ROUNDS] [BATCHES] [SIZE] [const|inlined]
#   defaults: 20 rounds of 2000000 batches of 32 B, layout known at run time (through the
#   `__rust_alloc` call); `const`: compile-time layout (slabcg inlined by LTO, mimalloc a C
#   call either way); `inlined`: each allocator's methods called directly with a run-time
#   layout.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stats.sh
. scripts/stats.sh
ROUNDS=${1:-20}
BATCHES=${2:-2000000}
SIZE=${3:-32}
MODE=${4:-}
cargo build --release --example pair_probe --example pair_probe_peer >&2
DIR=${CARGO_TARGET_DIR:-target}/release/examples
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for ((i = 1; i <= ROUNDS; i++)); do
    # shellcheck disable=SC2086
    peer=$("$DIR/pair_probe_peer" "$BATCHES" "$SIZE" $MODE | awk '{print $(NF-1)}')
    # shellcheck disable=SC2086
    ours=$("$DIR/pair_probe" "$BATCHES" tenant "$SIZE" $MODE | awk '{print $(NF-1)}')
    echo "$ours $peer" | tee -a "$OUT" |
        awk -v i="$i" '{ printf "round %d: slabcg tenant %.2f ns, mimalloc %.2f ns, ratio %.3f\n", i, $1, $2, $1 / $2 }'
done
read -r lo mid hi <<<"$(awk '{ print $1 / $2 }' "$OUT" | median)"
read -r _ ours _ <<<"$(awk '{ print $1 }' "$OUT" | median)"
read -r _ peer _ <<<"$(awk '{ print $2 }' "$OUT" | median)"
echo "$SIZE B, ${MODE:-run-time} layout, $ROUNDS rounds: slabcg-in-a-tenant / mimalloc ratio min $lo median $mid max $hi; median ns $ours vs $peer"
