#!/usr/bin/env bash
# What accounting adds to a single-thread alloc+free pair, in time: runs
# `pair_probe alt ROUNDS BATCHES [const|inlined]` RUNS times (each run interleaves ROUNDS plain rounds
# and ROUNDS rounds inside one tenant, 4 allocations then 4 frees per batch, and reports the
# median of the per-round tenant/plain ratios) and summarises those medians per size.
#
# usage: scripts/acct-overhead.sh [RUNS] [ROUNDS] [BATCHES] [const|inlined]
#   defaults: 8 runs of 30 rounds of 100000 batches (about 4 minutes on 2 cores);
#   `const`:  compile-time layouts (the allocator inlined into the loop) instead of a size
#             known only at run time (every pair through the `__rust_alloc` call);
#   `inlined`: the allocator inlined into the loop with the size known only at run time
#             (the shape of the seeds bench's loop; the criterion `acct_` groups go
#             through the `__rust_alloc` call).
# out: one line per run, then per size: min / median / max of the runs' median ratios.
#
# On a noisy machine the per-run medians still swing by several percent; report the spread,
# not one run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stats.sh
. scripts/stats.sh
RUNS=${1:-8}
ROUNDS=${2:-30}
BATCHES=${3:-100000}
MODE=${4:-}
cargo build --release --example pair_probe >&2
BIN=${CARGO_TARGET_DIR:-target}/release/examples/pair_probe
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for ((i = 1; i <= RUNS; i++)); do
    # shellcheck disable=SC2086
    "$BIN" alt "$ROUNDS" "$BATCHES" $MODE | tee -a "$OUT"
done
echo
echo "over $RUNS runs (${MODE:-run-time} layout): median of round ratios tenant/plain, and the"
echo "runs' median ns/pair (a low ratio with a slow plain pair is a code-placement effect):"
for size in 32 4096; do
    lines=$(grep "^$size B:" "$OUT")
    read -r lo mid hi <<<"$(sed 's/.*median of round ratios //' <<<"$lines" | median)"
    read -r _ pmed _ <<<"$(sed 's/.*plain min [0-9.]* med \([0-9.]*\).*/\1/' <<<"$lines" | median)"
    read -r _ tmed _ <<<"$(sed 's/.*tenant min [0-9.]* med \([0-9.]*\).*/\1/' <<<"$lines" | median)"
    awk -v s="$size" -v lo="$lo" -v m="$mid" -v hi="$hi" -v p="$pmed" -v t="$tmed" 'BEGIN {
        printf "  %5s B: ratio min %.3f median %.3f max %.3f (%+.1f%%); plain %.2f ns, tenant %.2f ns\n",
            s, lo, m, hi, (m - 1) * 100, p, t }'
done
