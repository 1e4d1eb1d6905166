#!/usr/bin/env bash
# Where a runaway's cost to the other customers goes (issue 16): the load of
# `scripts/load-service.sh`'s runaway table (oha at a fixed RATE, `GET /work?kb=KB` from three
# customers), in a slabcg server alone and beside the loop of runaways (tenant "evil", each
# killed at its 64 MiB limit on the heavy lane), rounds alternated, while `perf` records the
# scheduler for a window in the middle of each run. Per run it prints the load's p99, the
# server's main workers' scheduling delay (wake-up to running: its p99, the waits over 1 ms,
# the total, and what ran on the CPU while they waited over 1 ms), their CPU time per 1,000
# requests, the heavy lane's CPU time, and the server's syscalls that would say memory work
# or lock contention (`sched_yield` is what the spin lock calls when a holder was preempted;
# `madvise`, `mmap`, `munmap`).
#
#   scripts/runaway-sched.sh [ROUNDS] [SECONDS] [RATE] [KB] [-- SERVER ARGS...]
#   (defaults 3 12 4000 16; the window is SECONDS - 6)
#
# The runaways' client runs at nice CLIENT_NICE (default 19), as in load-service.sh.
# Needs `perf` with tracepoints (installs Debian's linux-perf if missing; run as root).
# Raw data: target/runaway-sched/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/service-common.sh
# Up to four numbers, then `--` and the server's arguments.
nums=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do nums+=("$1"); shift; done
[ $# -gt 0 ] && shift
ROUNDS=${nums[0]:-3}
DUR=${nums[1]:-12}
RATE=${nums[2]:-4000}
KB=${nums[3]:-16}
PORT=${PORT:-3921}
CLIENT_NICE=${CLIENT_NICE:-19}
OUT=target/runaway-sched
WINDOW=$(( DUR - 6 ))
(( WINDOW >= 2 )) || { echo "SECONDS must be at least 8" >&2; exit 2; }
mkdir -p "$OUT"
rm -f "$OUT"/*

command -v oha >/dev/null || cargo install oha --locked
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf; }
cargo build -q --release --example tenant_service
BIN=target/release/examples/tenant_service

SERVER=
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true' EXIT
run() { # mode (quiet|runaway), round, server args...
  local mode=$1 round=$2 tag=$1.$2
  shift 2
  "$BIN" --addr "127.0.0.1:$PORT" "$@" 2>>"$OUT/server.txt" &
  SERVER=$!
  wait_ready "$PORT"
  echo "$SERVER" >"$OUT/pid.$tag"
  local url="http://127.0.0.1:$PORT/work\\?kb=$KB&tenant=customer-[1-3]"
  oha -z 2s -c 32 --no-tui --output-format quiet --rand-regex-url "$url"
  rm -f "$OUT/stop"
  local loop=
  if [ "$mode" = runaway ]; then
    ( renice -n "$CLIENT_NICE" -p "$BASHPID" >/dev/null
      while [ ! -e "$OUT/stop" ]; do
        curl -s --max-time 60 -o /dev/null -w '%{http_code} %{time_total}\n' \
          "http://127.0.0.1:$PORT/work?kb=1000000&tenant=evil" || true
        sleep 1
      done >>"$OUT/codes.$tag" ) &
    loop=$!
  fi
  oha -z "${DUR}s" -c 32 -q "$RATE" --latency-correction --no-tui --output-format json \
    --rand-regex-url "$url" >"$OUT/oha.$tag.json" &
  local load=$!
  sleep 3
  perf record -q -e syscalls:sys_enter_sched_yield -e syscalls:sys_enter_madvise \
    -e syscalls:sys_enter_mmap -e syscalls:sys_enter_munmap -p "$SERVER" \
    -o "$OUT/sys.$tag.data" -- sleep "$WINDOW" >/dev/null 2>&1 &
  local sys=$!
  perf sched record -o "$OUT/sched.$tag.data" -- sleep "$WINDOW" >/dev/null 2>&1
  wait "$sys" "$load"
  touch "$OUT/stop"
  [ -n "$loop" ] && wait "$loop"
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
  SERVER=
  perf sched timehist -i "$OUT/sched.$tag.data" >"$OUT/timehist.$tag.txt" 2>/dev/null
  perf script -i "$OUT/sys.$tag.data" -F comm,event >"$OUT/sys.$tag.txt" 2>/dev/null || true
  echo "round $round: $mode done" >&2
}
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then run quiet "$r" "$@"; run runaway "$r" "$@"
  else run runaway "$r" "$@"; run quiet "$r" "$@"; fi
done

python3 - "$OUT" "$ROUNDS" "$WINDOW" <<'EOF'
import collections, json, re, statistics, sys
out, rounds, window = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
row = re.compile(r'\s*([\d.]+)\s+\[(\d+)\]\s+(.*?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)')
def stats(tag):
    pid = int(open(f"{out}/pid.{tag}").read())
    d = json.load(open(f"{out}/oha.{tag}.json"))
    delays, cpu, lane, runs, waits = [], 0.0, 0.0, collections.defaultdict(list), []
    for line in open(f"{out}/timehist.{tag}.txt"):
        m = row.match(line)
        if not m:
            continue
        t, on, comm, run = float(m.group(1)), int(m.group(2)), m.group(3).strip(), float(m.group(8))
        ours = int(m.group(5) or m.group(4)) == pid
        # Each row ends a run of `run` ms on CPU `on` at `t`, after `sd` ms waiting to run.
        runs[on].append((t - run / 1e3, t, comm + (" (server)" if ours else "")))
        if not ours:
            continue
        sd = float(m.group(7))
        if comm == "tokio-rt-worker":
            delays.append(sd); cpu += run
            if sd > 1.0:
                waits.append((on, t - (run + sd) / 1e3, t - run / 1e3))
        elif comm.startswith("heavy-lane"):
            lane += run
    # What ran on the CPU while a main worker waited over 1 ms to run there.
    behind = collections.Counter()
    for on, a, b in waits:
        for s0, s1, who in runs[on]:
            if s1 > a and s0 < b:
                behind[who] += (min(s1, b) - max(s0, a)) * 1e3
    delays.sort()
    sys_calls = collections.Counter(l.split()[-1].rstrip(":").split("sys_enter_")[-1]
                                    for l in open(f"{out}/sys.{tag}.txt") if l.strip())
    reqs = d["summary"]["requestsPerSec"] * window
    return {"p99": d["latencyPercentiles"]["p99"] * 1e3,
            "sd99": delays[int(len(delays) * 0.99)] if delays else 0,
            "over1": sum(x > 1 for x in delays), "sdsum": sum(delays),
            "cpu": cpu / reqs * 1e3, "lane": lane, "sys": dict(sys_calls),
            "behind": ", ".join(f"{w} {ms:.1f}" for w, ms in behind.most_common(3)) or "-"}
print("| run | load p99 ms | workers' sched delay p99 ms | waits > 1 ms | delay total ms | "
      "workers' CPU ms / 1k requests | lane CPU ms | syscalls | ran while they waited > 1 ms (ms) |")
print("|---|---|---|---|---|---|---|---|---|")
s = {}
for r in range(1, rounds + 1):
    for mode in ("quiet", "runaway"):
        x = s[(mode, r)] = stats(f"{mode}.{r}")
        print(f"| {mode} {r} | {x['p99']:.3f} | {x['sd99']:.3f} | {x['over1']} | {x['sdsum']:.0f} | "
              f"{x['cpu']:.1f} | {x['lane']:.0f} | {x['sys'] or '-'} | {x['behind']} |")
med = lambda mode, k: statistics.median(s[(mode, r)][k] for r in range(1, rounds + 1))
for k, name in (("p99", "load p99"), ("sd99", "sched delay p99"), ("sdsum", "sched delay total"),
                ("cpu", "workers' CPU per request")):
    print(f"{name}: {med('quiet', k):.3f} -> {med('runaway', k):.3f} "
          f"({(med('runaway', k) / med('quiet', k) - 1) * 100:+.1f}%, medians of {rounds})")
EOF
