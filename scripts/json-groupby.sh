#!/usr/bin/env bash
# The JSON-like Rust program of issue 20 (bench-suite/src/bin/json_groupby.rs) built with
# each allocator and run alternated: wall time, peak RSS and minor page faults per run
# (GNU time), and the checksum, which every allocator must print the same.
#
#   scripts/json-groupby.sh [ROUNDS] [RECORDS]      (defaults 5 and 600000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
N=${2:-600000}
ALLOCS="slabcg mimalloc jemalloc system"
[ -x /usr/bin/time ] || { apt-get update -qq && apt-get install -y -qq time; }
for a in $ALLOCS; do
  feat=(); [ "$a" = system ] || feat=(--features "$a")
  CARGO_TARGET_DIR="target/bench-suite/$a" cargo build -q --release -p slabcg-bench-suite \
    "${feat[@]}" --bin json_groupby
done
OUT=target/json-groupby.tsv
: >"$OUT"
for r in $(seq "$ROUNDS"); do
  for a in $ALLOCS; do
    line=$( { /usr/bin/time -f "TIME %e %M %R %S" "target/bench-suite/$a/release/json_groupby" "$N"; } 2>&1 )
    sum=$(sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' <<<"$line")
    read -r _ secs rss flt sys < <(grep '^TIME' <<<"$line")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$a" "$secs" "$rss" "$flt" "$sys" "$sum" >>"$OUT"
  done
done
sums=$(cut -f7 "$OUT" | sort -u | wc -l)
[ "$sums" = 1 ] || { echo "checksums differ between allocators:" >&2; cat "$OUT" >&2; exit 1; }
echo "allocator  median_s  median_peak_MiB  median_minflt  median_sys_s   ($ROUNDS rounds, $N records)"
for a in $ALLOCS; do
  med() { grep -P "\t$a\t" "$OUT" | cut -f"$1" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
  printf '%-10s %8s  %15.0f  %13s  %12s\n' "$a" "$(med 3)" "$(awk -v k="$(med 4)" 'BEGIN {print k / 1024}')" "$(med 5)" "$(med 6)"
done
