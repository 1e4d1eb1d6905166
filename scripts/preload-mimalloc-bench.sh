#!/usr/bin/env bash
# The C workloads of mimalloc-bench under LD_PRELOAD: slabcg against Debian's mimalloc and
# jemalloc (and glibc's malloc, "sys"), runs alternated, medians of time and peak RSS.
#
#   scripts/preload-mimalloc-bench.sh /path/to/mimalloc-bench [ROUNDS] [TEST...]
#
# The checkout is not part of this repository (get it from github.com/daanx/mimalloc-bench);
# only its bench/ sources are used, built here with gcc/g++ as its CMakeLists.txt does.
# Each program's exit status must be 0, and the deterministic ones (cfrac, barnes) must
# print what they print with glibc's malloc (espresso prints nothing, the others timings).
# Prints a markdown table: the score is the wall time, or for the fixed-duration benchmarks
# mimalloc-bench's "relative time" from the program's own throughput (larson, rptest,
# xmalloc-test, glibc-thread); lower is better. SLABCG_LIB=path: see preload-common.sh.
set -euo pipefail
mb="${1:?usage: $0 MIMALLOC_BENCH_CHECKOUT [ROUNDS] [TEST...]}"
mb="$(cd "$mb" && pwd)"
rounds="${2:-3}"
shift $(( $# >= 2 ? 2 : 1 ))
procs="$(nproc)"
source "$(dirname "$0")/preload-common.sh"

b="$mb/bench"
out="$mb/out-slabcg"
mkdir -p "$out"
cflags="-O3 -DNDEBUG -w"
build() { # name, compiler and arguments
  local name="$1"; shift
  [ -x "$out/$name" ] || "$@" -o "$out/$name"
}
build cfrac gcc $cflags -std=gnu89 -DNOMEMOPT=1 $(for f in cfrac pops pconst pio pabs pneg pcmp podd phalf padd psub pmul pdivmod psqrt ppowmod atop ptoa itop utop ptou errorp pfloat pidiv pimod picmp primes pcfrac pgcd; do echo "$b/cfrac/$f.c"; done) -lm
build espresso gcc $cflags -std=gnu89 $(ls "$b"/espresso/*.c) -lm
build barnes gcc $cflags -std=gnu89 "$b"/barnes/{code,code_io,load,grav,getparam,util}.c -lm
build larson g++ $cflags -DCPP=1 "$b/larson/larson.cpp" -lpthread
build alloc-test g++ $cflags -DBENCH=4 "$b/alloc-test/test_common.cpp" "$b/alloc-test/allocator_tester.cpp" -lpthread
build cache-scratch g++ $cflags "$b/cache-scratch/cache-scratch.cpp" -lpthread
build xmalloc-test gcc $cflags "$b/xmalloc-test/xmalloc-test.c" -lpthread
build malloc-large g++ $cflags "$b/malloc-large/malloc-large.cpp" -lpthread
build mstress gcc $cflags "$b/mstress/mstress.c" -lpthread
build rptest gcc $cflags -I"$b/rptest" "$b"/rptest/{rptest,thread,timer}.c -lpthread -lm
build glibc-simple gcc $cflags "$b/glibc-bench/bench-malloc-simple.c" -lpthread
build glibc-thread gcc $cflags "$b/glibc-bench/bench-malloc-thread.c" -lpthread

declare -A cmd=(
  [cfrac]="./cfrac 17545186520507317056371138836327483792789528"
  [espresso]="./espresso $b/espresso/largest.espresso"
  [barnes]="./barnes"
  [larsonN]="./larson 5 8 1000 5000 100 4141 $procs"
  [alloc-test1]="./alloc-test 1"
  [alloc-testN]="./alloc-test $procs"
  [cache-scratch1]="./cache-scratch 1 1000 1 2000000 $procs"
  [cache-scratchN]="./cache-scratch $procs 1000 1 2000000 $procs"
  [xmalloc-testN]="./xmalloc-test -w $procs -t 5 -s 64"
  [malloc-large]="./malloc-large"
  [mstressN]="./mstress $procs 50 25"
  [rptestN]="./rptest $procs 0 1 2 500 1000 100 8 16000"
  [glibc-simple]="./glibc-simple"
  [glibc-thread]="./glibc-thread $procs"
)
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(cfrac espresso barnes larsonN alloc-test1 alloc-testN cache-scratch1 cache-scratchN xmalloc-testN malloc-large mstressN rptestN glibc-simple glibc-thread)
res="$out/results.txt"
: > "$res"
cd "$out"
for ((r = 0; r < rounds; r++)); do
  for t in "${tests[@]}"; do
    # Alternate: each round starts with the next allocator.
    for a in $(order "$r"); do
      input=/dev/null
      [ "$t" = barnes ] && input="$b/barnes/input"
      status=0
      env ${lib[$a]:+LD_PRELOAD=${lib[$a]}} /usr/bin/time -f "%e %M" -o "$t-$a.time" \
        ${cmd[$t]} < "$input" > "$t-$a.out" 2>&1 || status=$?
      read -r secs rss < "$t-$a.time" || true
      score="$secs"
      case "$t" in
        larson*) score=$(sed -n 's/.* time: \([0-9.]*\).*/\1/p' "$t-$a.out") ;;
        rptest*) score=$(sed -n 's/.*\.\.\.\([0-9]*\) memory ops.*/\1/p' "$t-$a.out" | awk '{printf "%.3f", 2000000 / $1}') ;;
        xmalloc*) score=$(sed -n 's/rtime: \([0-9.]*\).*/\1/p' "$t-$a.out") ;;
        glibc-thread) score=$(sed -n 's/^ *\([0-9.]*\).*/\1/p' "$t-$a.out" | head -1 | awk '{printf "%.3f", 1e9 / $1}') ;;
      esac
      ok=ok
      [ "$status" = 0 ] || ok="exit-$status"
      # Deterministic output, kept per run and compared with glibc's at the end.
      case "$t" in cfrac|barnes) cp "$t-$a.out" "$t-$a-$r.det" ;; esac
      echo "$t $a ${score:-nan} $rss $ok" | tee -a "$res"
    done
  done
done

# Every run of cfrac and barnes printed what glibc's first run printed (barnes without its
# clock readings).
: > "$out/mismatch.txt"
for t in cfrac barnes; do
  [ -e "$t-sys-0.det" ] || continue
  grep -v -i -E 'time|compute' "$t-sys-0.det" > "$t.ref" || true
  for f in "$t"-*-*.det; do
    grep -v -i -E 'time|compute' "$f" | cmp -s - "$t.ref" || echo "$f" >> "$out/mismatch.txt"
  done
done

python3 - "$res" "$out/mismatch.txt" <<'PY'
import sys, math, statistics, collections
rows = collections.defaultdict(list)
bad = []
for line in open(sys.argv[1]):
    t, a, score, rss, ok = line.split()
    rows[(t, a)].append((float(score), int(rss)))
    if ok != "ok":
        bad.append(line.strip())
tests = list(dict.fromkeys(t for t, _ in rows))
present = {a for _, a in rows}
allocs = [a for a in ["slabcg", "slabcg-base", "mimalloc", "jemalloc", "sys"] if a in present]
ours = [a for a in allocs if a.startswith("slabcg")]
med = {k: (statistics.median(s for s, _ in v), statistics.median(m for _, m in v)) for k, v in rows.items()}
names = [a if a != "sys" else "glibc" for a in allocs]
print("| workload | " + " | ".join(names) + " | " + " | ".join(f"{a} / best peer" for a in ours)
      + " | peak RSS MiB " + " / ".join(names) + " |")
print("|---" * (len(allocs) + len(ours) + 2) + "|")
logs = {a: [] for a in ours}
for t in tests:
    s = {a: med[(t, a)] for a in allocs if (t, a) in med}
    best = min(s[a][0] for a in ("mimalloc", "jemalloc") if a in s)
    ratios = []
    for a in ours:
        r = s[a][0] / best if best > 0 else float("nan")
        logs[a].append(math.log(r))
        ratios.append(f"{r:.2f}x")
    print(f"| {t} | " + " | ".join(f"{s[a][0]:.3f}" for a in allocs) + " | " + " | ".join(ratios)
          + " | " + " / ".join(f"{s[a][1] / 1024:.1f}" for a in allocs) + " |")
for a in ours:
    print(f"\ngeometric mean of {a} / best peer: {math.exp(sum(logs[a]) / len(logs[a])):.3f}x over {len(logs[a])} workloads")
bad += [f"output differs from glibc's: {l.strip()}" for l in open(sys.argv[2]) if l.strip()]
print("failures:", "none" if not bad else "; ".join(bad))
PY
