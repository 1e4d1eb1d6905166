#!/usr/bin/env bash
# Instruction counts (callgrind, exact and repeatable) of the fast paths and the per-request
# paths, to show a change did not grow them: run before and after, compare the columns.
#   scripts/fastpath-counts.sh [OUT]    # prints "probe args: instructions" lines, and to OUT
# Needs valgrind (apt-get install valgrind; installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || sudo apt-get install -y valgrind >/dev/null
out=${1:-/dev/null}
cargo build --release --quiet --example pair_probe --example request_probe --example lifecycle_probe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "target/release/examples/$@" >/dev/null 2>"$tmp/err"
    local total
    total=$(grep -oP 'Collected : \K[0-9]+' "$tmp/err")
    echo "$*: $total"
}
{
    run pair_probe 1000000 plain 32
    run pair_probe 1000000 tenant 32
    run pair_probe 1000000 plain 32 inlined
    run pair_probe 1000000 tenant 32 inlined
    run pair_probe 1000000 plain 4096
    run pair_probe 1000000 tenant 4096
    run request_probe 20000 random
    run request_probe 20000 fixed
    run request_probe 20000 records
    run request_probe 20000 records-plain
    run lifecycle_probe 20000 1
} | tee "$out"
