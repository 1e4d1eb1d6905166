# Sourced by scripts/preload-*.sh: the allocators, preloaded the same way, and a timer.
#   alloc_env NAME   -> prints "LD_PRELOAD=..." (nothing for sys)
#   timed OUT NAME CMD...  -> runs CMD with allocator NAME, stdout to OUT, "secs rss_kb" to OUT.time
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib_mi=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2
lib_je=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
need_pkgs=()
[ -e "$lib_mi" ] || need_pkgs+=(libmimalloc2.0)
[ -e "$lib_je" ] || need_pkgs+=(libjemalloc2)
[ -x /usr/bin/time ] || need_pkgs+=(time)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  apt-get install -y -q "${need_pkgs[@]}" >/dev/null
fi
# SLABCG_LIB=path measures another build of libslabcg.so (e.g. the initial-exec TLS build of
# BENCHMARKS.md section 9) instead of target/release's, which is built here.
if [ -n "${SLABCG_LIB:-}" ]; then
  lib_slabcg="$SLABCG_LIB"
else
  (cd "$root" && cargo build -q --release -p slabcg-capi)
  lib_slabcg="$root/target/release/libslabcg.so"
fi
allocs=(slabcg mimalloc jemalloc sys)
declare -A lib=([slabcg]="$lib_slabcg" [mimalloc]="$lib_mi" [jemalloc]="$lib_je" [sys]="")
# SLABCG_BASE_LIB=path adds a fifth allocator, "slabcg-base": another build of libslabcg.so
# to compare with this one (e.g. `cargo build --release -p slabcg-capi --no-default-features`,
# general-dynamic TLS, copied aside; or the library of an earlier commit).
if [ -n "${SLABCG_BASE_LIB:-}" ]; then
  allocs=(slabcg slabcg-base mimalloc jemalloc sys)
  lib[slabcg-base]="$SLABCG_BASE_LIB"
fi

# The allocator order of round R: rotated by one each round, so that none always runs first.
order() {
  local r="$1" k
  for ((k = 0; k < ${#allocs[@]}; k++)); do
    echo "${allocs[$(( (k + r) % ${#allocs[@]} ))]}"
  done
}

timed() {
  local out="$1" a="$2"
  shift 2
  local status=0
  env ${lib[$a]:+LD_PRELOAD=${lib[$a]}} /usr/bin/time -f "%e %M" -o "$out.time" "$@" > "$out" 2>"$out.err" || status=$?
  return $status
}

# Medians per allocator of lines "ALLOC SECS RSS_KB" in FILE: a markdown row per allocator.
summarize() {
  python3 - "$1" "$2" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    a, secs, rss = line.split()[:3]
    rows[a].append((float(secs), int(rss)))
unit = sys.argv[2]
print(f"| allocator | {unit} (median) | peak RSS MiB (median) | runs |")
print("|---|---|---|---|")
for a in ["slabcg", "slabcg-base", "mimalloc", "jemalloc", "sys"]:
    if a in rows:
        v = rows[a]
        print(f"| {a if a != 'sys' else 'glibc'} | {statistics.median(s for s, _ in v):.3f} | "
              f"{statistics.median(m for _, m in v) / 1024:.1f} | {len(v)} |")
PY
}
