#!/usr/bin/env bash
# Load runs of examples/tenant_service with oha (wrk as a cross-check): requests per second
# and p50/p99 latency of slabcg with tenants (with and without the heavy lane), slabcg
# without tenants, mimalloc and jemalloc (the same service built with each allocator), runs
# alternated; then slabcg with tenants while a runaway tenant is killed over and over,
# against the same load without it.
#
#   scripts/load-service.sh [ROUNDS] [SECONDS] [CONNECTIONS] [KB] [RATE]   (defaults 3 10 32 16 4000)
#
# The throughput table runs the load flat out (oha -c CONNECTIONS). The runaway table runs it
# at a fixed RATE (requests per second, below what the 2-core machine serves), alone and
# beside a loop of runaway requests, each killed at the tenant's limit after it passed its
# high and moved to the heavy lane (threads at nice 19); then beside the same runaways in a
# server without the lane (`--heavy-bytes off`), and beside two CPU-only controls as long as
# a runaway (`/spin`), on the main workers and on the heavy lane.
#
# The loops send one request every GAP seconds (env GAP, default 1) after the last answer,
# their curl at nice CLIENT_NICE (default 19): a curl process takes 7-9 ms of CPU per request
# on the 2-vCPU VM of BENCHMARKS.md (`perf stat`), more than a runaway's slice on a main
# worker, and at nice 0 the server's workers waited behind it. A client elsewhere costs the
# server nothing; CLIENT_NICE=0 measures as the runs before this did.
# ONLY_RUNAWAY=1 skips the throughput table and wrk. HEAVY_SCHED=idle runs the heavy lane of
# the runaway table's servers under SCHED_IDLE instead of nice 19 (`--heavy-sched`).
#
# Installs oha (cargo install) and wrk (apt-get) if missing. Traffic goes to 127.0.0.1 only.
# Raw results: target/load-service/*.json; the summary table is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/service-common.sh
ROUNDS=${1:-3}
DUR=${2:-10}
CONC=${3:-32}
KB=${4:-16}
RATE=${5:-4000}
GAP=${GAP:-1}
CLIENT_NICE=${CLIENT_NICE:-19}
HEAVY_SCHED=${HEAVY_SCHED:-nice}
ONLY_RUNAWAY=${ONLY_RUNAWAY:-0}
PORT=${PORT:-3917}
OUT=target/load-service
mkdir -p "$OUT/bin"
rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT/only-runaway"

command -v oha >/dev/null || cargo install oha --locked
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }

build() { # name, cargo features
  cargo build -q --release --example tenant_service ${2:+--features "$2"}
  cp target/release/examples/tenant_service "$OUT/bin/$1"
}
build slabcg ""
build mimalloc service-mimalloc
build jemalloc service-jemalloc

SERVER=
start() { # binary, args...
  local bin=$1; shift
  "$OUT/bin/$bin" --addr "127.0.0.1:$PORT" "$@" 2>>"$OUT/server.txt" &
  SERVER=$!
  wait_ready "$PORT"
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; }
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true' EXIT

URL="http://127.0.0.1:$PORT/work\\?kb=$KB&tenant=customer-[1-3]"
load() { # output file, extra oha flags
  local out=$1; shift
  oha -z "${DUR}s" -c "$CONC" "$@" --no-tui --output-format json --rand-regex-url "$URL" >"$out"
}

# The load at a fixed rate, with a loop of one kind of request beside it, one every GAP s.
# The loop's codes and times go to a file, and the last answer's body beside it.
beside() { # output file, request path, file for the loop's status codes and times
  rm -f "$OUT/stop"
  ( renice -n "$CLIENT_NICE" -p "$BASHPID" >/dev/null
    while [ ! -e "$OUT/stop" ]; do
      curl -s --max-time 60 -o "$OUT/$3.body" -w '%{http_code} %{time_total}\n' \
        "http://127.0.0.1:$PORT/$2" || true
      sleep "$GAP"
    done >>"$OUT/$3" ) &
  local loop=$!
  load "$OUT/$1" -q "$RATE" --latency-correction
  touch "$OUT/stop"; wait "$loop"
}

# The runaways: the same load at a fixed rate, alone and then beside a loop of requests from
# tenant "evil" that each run away (1 GB working set) and are killed at 64 MiB; in a server
# with the heavy lane (they pass their 4 MiB high and finish there), then the controls; and
# in one without it (`--heavy-bytes off`); each against the load alone in its own server.
lane_server() { # round
  start slabcg --heavy-sched "$HEAVY_SCHED"
  oha -z 2s -c "$CONC" --no-tui --output-format quiet --rand-regex-url "$URL"
  load "$OUT/quiet.$1.json" -q "$RATE" --latency-correction
  beside "runaway.$1.json" "work?kb=1000000&tenant=evil" runaway-codes.txt
  curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics.$1.txt"
  # The controls: requests that take as long as a runaway did (median so far), spinning the
  # CPU without allocating, at the same pace: on the main workers (what any CPU-bound
  # request costs the others there) and on the heavy lane (what CPU at the lowest priority
  # costs them).
  SPIN_MS=$(awk '{print $2}' "$OUT/runaway-codes.txt" | sort -n | awk '{v[NR]=$1} END {printf "%d", v[int((NR+1)/2)] * 1000}')
  echo "$SPIN_MS" >"$OUT/spin-ms.txt"
  beside "spin.$1.json" "spin?ms=$SPIN_MS" spin-codes.txt
  beside "spinheavy.$1.json" "spin?ms=$SPIN_MS&lane=heavy" spinheavy-codes.txt
  stop
}
nolane_server() { # round
  start slabcg --heavy-bytes off
  oha -z 2s -c "$CONC" --no-tui --output-format quiet --rand-regex-url "$URL"
  load "$OUT/quiet-nolane.$1.json" -q "$RATE" --latency-correction
  beside "nolane.$1.json" "work?kb=1000000&tenant=evil" nolane-codes.txt
  stop
}

# name binary args...
VARIANTS=("slabcg-tenants slabcg" "slabcg-tenants-nolane slabcg --heavy-bytes off"
          "slabcg-no-tenants slabcg --no-tenants" "mimalloc mimalloc --no-tenants"
          "jemalloc jemalloc --no-tenants")
for r in $(seq "$ROUNDS"); do
  # Alternate the order from round to round.
  if (( r % 2 )); then order=(0 1 2 3 4); else order=(4 3 2 1 0); fi
  (( ONLY_RUNAWAY )) && order=()
  for i in "${order[@]}"; do
    read -r name bin args <<<"${VARIANTS[$i]}"
    start "$bin" $args
    oha -z 2s -c "$CONC" --no-tui --output-format quiet --rand-regex-url "$URL"
    load "$OUT/$name.$r.json"
    stop
    echo "round $r: $name done" >&2
  done
  if (( r % 2 )); then lane_server "$r"; nolane_server "$r"; else nolane_server "$r"; lane_server "$r"; fi
  echo "round $r: runaway done" >&2
done

# wrk cross-check, one run each.
(( ONLY_RUNAWAY )) && VARIANTS=()
for v in "${VARIANTS[@]}"; do
  read -r name bin args <<<"$v"
  start "$bin" $args
  wrk -t2 -c"$CONC" -d"${DUR}s" --latency -H "x-tenant: customer-1" \
    "http://127.0.0.1:$PORT/work?kb=$KB" >"$OUT/wrk.$name.txt"
  stop
done

(( ONLY_RUNAWAY )) && touch "$OUT/only-runaway"
python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def runs(name):
    return [json.load(open(f"{out}/{name}.{r}.json")) for r in range(1, rounds + 1)]
def med(xs): return statistics.median(xs)
def row(name, label=None):
    rs = runs(name)
    rps = med([d["summary"]["requestsPerSec"] for d in rs])
    p50 = med([d["latencyPercentiles"]["p50"] for d in rs]) * 1e3
    p99 = med([d["latencyPercentiles"]["p99"] for d in rs]) * 1e3
    ok = all(set(d["statusCodeDistribution"]) == {"200"} for d in rs)
    return label or name, rps, p50, p99, ok
import os
only = os.path.exists(f"{out}/only-runaway")
if not only:
    rows = [row(n) for n in ["slabcg-tenants", "slabcg-tenants-nolane", "slabcg-no-tenants", "mimalloc", "jemalloc"]]
    mi = rows[3][1]
    print("| service built with | req/s (median) | p50 ms | p99 ms | all 200 | req/s / mimalloc |")
    print("|---|---|---|---|---|---|")
    for n, rps, p50, p99, ok in rows:
        print(f"| {n} | {rps:,.0f} | {p50:.2f} | {p99:.2f} | {ok} | {rps / mi:.2f}x |")
q, ra, sp, nl, sh = row("quiet"), row("runaway"), row("spin"), row("nolane"), row("spinheavy")
qn = row("quiet-nolane")
codes = [l.split()[0] for l in open(f"{out}/runaway-codes.txt") if l.strip()]
print()
print(f"| slabcg with tenants, load at a fixed rate | req/s | p50 ms | p99 ms | all 200 |")
print("|---|---|---|---|---|")
print(f"| normal load alone | {q[1]:,.0f} | {q[2]:.2f} | {q[3]:.2f} | {q[4]} |")
print(f"| same load, a runaway killed over and over | {ra[1]:,.0f} | {ra[2]:.2f} | {ra[3]:.2f} | {ra[4]} |")
print(f"| normal load alone, server without the heavy lane (`--heavy-bytes off`) | {qn[1]:,.0f} | {qn[2]:.2f} | {qn[3]:.2f} | {qn[4]} |")
print(f"| same load, the runaways in that server | {nl[1]:,.0f} | {nl[2]:.2f} | {nl[3]:.2f} | {nl[4]} |")
spin_ms = open(f"{out}/spin-ms.txt").read().strip()
print(f"| same load, a {spin_ms} ms CPU-only request at the same pace (control) | {sp[1]:,.0f} | {sp[2]:.2f} | {sp[3]:.2f} | {sp[4]} |")
print(f"| the control on the heavy lane | {sh[1]:,.0f} | {sh[2]:.2f} | {sh[3]:.2f} | {sh[4]} |")
print(f"\nrunaway requests: {len(codes)}, answers: " +
      ", ".join(f"{c} x{codes.count(c)}" for c in sorted(set(codes))))
nlcodes = [l.split()[0] for l in open(f"{out}/nolane-codes.txt") if l.strip()]
print(f"runaway requests without the lane: {len(nlcodes)}, answers: " +
      ", ".join(f"{c} x{nlcodes.count(c)}" for c in sorted(set(nlcodes))))
def per_round(a, b):
    return [json.load(open(f"{out}/{a}.{r}.json"))["latencyPercentiles"]["p99"] /
            json.load(open(f"{out}/{b}.{r}.json"))["latencyPercentiles"]["p99"] - 1 for r in range(1, rounds + 1)]
def pct(xs): return ", ".join(f"{x * 100:+.1f}%" for x in xs)
print(f"p99 moved by {(ra[3] / q[3] - 1) * 100:+.1f}% by the runaways, {(nl[3] / qn[3] - 1) * 100:+.1f}% by them without the heavy lane, {(sp[3] / q[3] - 1) * 100:+.1f}% by the control, {(sh[3] / q[3] - 1) * 100:+.1f}% by the control on the heavy lane (medians of {rounds} rounds)")
print(f"per round, against the same server alone: runaways {pct(per_round('runaway', 'quiet'))}; without the lane {pct(per_round('nolane', 'quiet-nolane'))}")
for f, want in [("runaway-codes.txt", "503"), ("nolane-codes.txt", "503"), ("spin-codes.txt", "200"), ("spinheavy-codes.txt", "200")]:
    got = [l.split()[0] for l in open(f"{out}/{f}") if l.strip()]
    bad = [c for c in got if c != want]
    print(f"{f}: {len(got)} answers, {len(bad)} not {want}" + (f": {sorted(set(bad))}" if bad else ""))
body = open(f"{out}/runaway-codes.txt.body").read()
print("last runaway's answer:", body.strip()[:200])
kills = [int(m.group(1)) for r in range(1, rounds + 1) for m in
         [re.search(r'slabcg_memory_events_total\{tenant="tenants/evil",event="oom_kill"\} (\d+)',
                    open(f"{out}/metrics.{r}.txt").read())] if m]
print(f"oom_kill of tenants/evil per round: {kills}")
print("\nwrk cross-check (one run each, x-tenant: customer-1):")
for n in ([] if only else ["slabcg-tenants", "slabcg-tenants-nolane", "slabcg-no-tenants", "mimalloc", "jemalloc"]):
    t = open(f"{out}/wrk.{n}.txt").read()
    rps = re.search(r"Requests/sec:\s+([\d.]+)", t).group(1)
    p99 = re.search(r"99%\s+(\S+)", t).group(1)
    print(f"- {n}: {float(rps):,.0f} req/s, p99 {p99}")
EOF
