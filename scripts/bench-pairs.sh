#!/usr/bin/env bash
# Alloc+free pair microbenchmarks (benches/pairs_*.rs, criterion) for slabcg and its peers,
# summarised as a markdown table of ns/pair and the ratio slabcg / best peer.
#
# usage: scripts/bench-pairs.sh [REPEAT]
#   REPEAT (default 1, or $REPEAT): runs of every bench; the order of the allocators is
#          reversed on every other repetition; the table shows the median over repetitions.
# env:   ALLOCS        allocators to run (default "slabcg mimalloc jemalloc system")
#        CRITERION_ARGS extra arguments for criterion, e.g. "--measurement-time 5"
# out:   target/bench-report/pairs.csv (every measurement), target/bench-report/pairs.md (table)
#
# One repetition takes about 4 x 8 x 3 s plus the build. ns/pair is criterion's median
# estimate for one iteration divided by the pairs in one iteration (4 single-thread,
# 8 two-thread: the wall time of both threads doing N iterations each).
set -euo pipefail
cd "$(dirname "$0")/.."

# One benchmark at a time: scripts/bench-pairs.sh and bench-suite/run.sh share this lock, so
# two runs neither share the CPUs nor overwrite each other's files.
mkdir -p target/bench-report
exec 9>target/bench-report/.lock
if command -v flock >/dev/null && ! flock -n 9; then
    echo "waiting for another benchmark run (target/bench-report/.lock) ..." >&2
    flock 9
fi
REPEAT=${1:-${REPEAT:-1}}
read -r -a ALLOCS <<<"${ALLOCS:-slabcg mimalloc jemalloc system}"
# shellcheck disable=SC2206
EXTRA=(${CRITERION_ARGS:-})
OUT=target/bench-report
CRIT=${CARGO_TARGET_DIR:-target}/criterion
mkdir -p "$OUT"
CSV=$OUT/pairs.csv
echo "rep,allocator,threads,size,ns_per_pair" >"$CSV"

command -v python3 >/dev/null || { echo "bench-pairs.sh needs python3 to read criterion's JSON" >&2; exit 1; }

benches=()
for a in "${ALLOCS[@]}"; do benches+=(--bench "pairs_$a"); done
cargo bench --no-run "${benches[@]}"

collect() { # rep alloc
    python3 - "$CRIT" "$1" "$2" >>"$CSV" <<'PY'
import json, os, sys
crit, rep, alloc = sys.argv[1:]
for threads in ("1t", "2t"):
    gdir = os.path.join(crit, f"pairs-{threads}-{alloc}")
    if not os.path.isdir(gdir):
        continue
    for size in sorted(os.listdir(gdir), key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0)):
        new = os.path.join(gdir, size, "new")
        try:
            est = json.load(open(os.path.join(new, "estimates.json")))
            meta = json.load(open(os.path.join(new, "benchmark.json")))
        except OSError:
            continue
        elems = (meta.get("throughput") or {}).get("Elements") or (4 if threads == "1t" else 8)
        print(f"{rep},{alloc},{threads[0]},{size},{est['median']['point_estimate'] / elems:.3f}")
PY
}

for ((rep = 1; rep <= REPEAT; rep++)); do
    order=("${ALLOCS[@]}")
    if ((rep % 2 == 0)); then
        order=()
        for ((i = ${#ALLOCS[@]} - 1; i >= 0; i--)); do order+=("${ALLOCS[i]}"); done
    fi
    for a in "${order[@]}"; do
        echo "== rep $rep/$REPEAT: pairs_$a" >&2
        rm -rf "$CRIT/pairs-1t-$a" "$CRIT/pairs-2t-$a"
        cargo bench --bench "pairs_$a" -- "${EXTRA[@]}" >&2
        collect "$rep" "$a"
    done
done

python3 - "$CSV" "${ALLOCS[@]}" <<'PY' | tee "$OUT/pairs.md"
import csv, statistics, sys, subprocess, platform
path, allocs = sys.argv[1], sys.argv[2:]
data = {}
for r in csv.DictReader(open(path)):
    data.setdefault((int(r["threads"]), int(r["size"]), r["allocator"]), []).append(float(r["ns_per_pair"]))
reps = max((len(v) for v in data.values()), default=0)
rows = sorted({(t, s) for t, s, _ in data})
peers = [a for a in allocs if a != "slabcg"]
try:
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
except OSError:
    commit = "?"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"### alloc+free pairs, ns/pair (median of {reps} run(s); criterion median per run)\n")
print(f"commit `{commit}`, {cpu}, {len([l for l in open('/proc/cpuinfo') if l.startswith('processor')])} CPUs, {platform.release()}\n")
head = "| threads | size | " + " | ".join(allocs) + (" | slabcg / best peer |" if "slabcg" in allocs and peers else " |")
print(head)
print("|" + "---|" * (head.count("|") - 1))
for t, s in rows:
    med = {a: statistics.median(data[(t, s, a)]) for a in allocs if (t, s, a) in data}
    cells = [f"{med[a]:.2f}" if a in med else "-" for a in allocs]
    line = f"| {t} | {s} | " + " | ".join(cells) + " |"
    if "slabcg" in allocs and peers:
        best = min((med[a], a) for a in peers if a in med) if any(a in med for a in peers) else None
        if best and "slabcg" in med:
            ratio = med["slabcg"] / best[0]
            flag = " **!**" if ratio > 1.1 else ""
            line += f" {ratio:.2f}x ({best[1]}){flag} |"
        else:
            line += " - |"
    print(line)
print("\n(**!** = slabcg more than 1.1x slower than the best peer.) Reproduce: `scripts/bench-pairs.sh`.")
PY
