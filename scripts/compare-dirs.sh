#!/usr/bin/env bash
# Builds of the bench-suite workloads against each other, alternated in every round: the
# median of each program's own `elapsed_s` (finer than /usr/bin/time's 10 ms), and each
# build's ratio to the first.
#   scripts/compare-dirs.sh ROUNDS DIR1 DIR2 [DIR...] -- WORKLOAD...
# Each DIR is a cargo target dir built with, for example,
#   cargo build --release -p slabcg-bench-suite --bins --features slabcg-tenant --target-dir DIR
# (check out another commit, or another feature, for each). Workloads run with their
# defaults (BENCH_SCALE_PCT scales them, as in bench-suite/run.sh).
set -euo pipefail
rounds=$1
shift
dirs=()
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    dirs+=("$1")
    shift
done
[ "${1:-}" = -- ] && shift
for w in "$@"; do
    for _ in $(seq "$rounds"); do
        for d in "${dirs[@]}"; do
            t=$("$d/release/$w" 2>/dev/null | grep -o 'elapsed_s=[0-9.]*' | cut -d= -f2) ||
                { echo "compare-dirs: $d/release/$w failed or printed no elapsed_s" >&2; exit 1; }
            echo "$w $d $t"
        done
    done
done | python3 -c '
import sys, statistics as st, collections
d = collections.defaultdict(list)
ws, vs = [], []
for line in sys.stdin:
    w, v, t = line.split()
    ws += [w] if w not in ws else []
    vs += [v] if v not in vs else []
    d[(w, v)].append(float(t))
print("| workload | " + " | ".join(vs) + " | " + " | ".join("/ first" for _ in vs[1:]) + " |")
print("|---" * (2 * len(vs)) + "|")
for w in ws:
    m = [st.median(d[(w, v)]) for v in vs]
    print("| %s | " % w + " | ".join("%.4f" % x for x in m) + " | " +
          " | ".join("%.2fx" % (x / m[0]) for x in m[1:]) + " |")
'
