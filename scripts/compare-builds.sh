#!/usr/bin/env bash
# Two builds of the bench-suite workloads against each other, alternated: median time and
# peak RSS (/usr/bin/time) of each, and the ratios new / old.
#   scripts/compare-builds.sh OLD_DIR NEW_DIR [ROUNDS]
# OLD_DIR and NEW_DIR are cargo target dirs, each built with, for example,
#   cargo build --release -p slabcg-bench-suite --features slabcg --target-dir DIR \
#     --bin larson --bin xmalloc ... --bin json_groupby
# (check out the old commit for one of them). Workloads missing from either dir are skipped.
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
for w in larson xmalloc cache_scratch cache_thrash mstress rptest alloc_test glibc_simple \
    glibc_thread malloc_large server json_groupby; do
    [ -x "$old/release/$w" ] && [ -x "$new/release/$w" ] || continue
    arg=""
    [ "$w" = json_groupby ] && arg=300000
    for _ in $(seq "$rounds"); do
        for v in old new; do
            dir=$old
            [ "$v" = new ] && dir=$new
            /usr/bin/time -f "$w $v %e %M" "$dir/release/$w" $arg 2>&1 >/dev/null | tail -1
        done
    done
done | python3 -c '
import sys, statistics as st, collections
d = collections.defaultdict(list)
order = []
for line in sys.stdin:
    w, v, t, m = line.split()
    if w not in order:
        order.append(w)
    d[(w, v)].append((float(t), int(m)))
print("| workload | time old, s | new | new / old | peak RSS old, MiB | new | new / old |")
print("|---|--:|--:|--:|--:|--:|--:|")
for w in order:
    o, n = d[(w, "old")], d[(w, "new")]
    to, tn = st.median(x[0] for x in o), st.median(x[0] for x in n)
    mo, mn = st.median(x[1] for x in o) / 1024, st.median(x[1] for x in n) / 1024
    print("| %s | %.2f | %.2f | %.2fx | %.1f | %.1f | %.3fx |" % (w, to, tn, tn / to if to else 0, mo, mn, mn / mo))
'
