#!/usr/bin/env bash
# Two builds of examples/tenant_service against each other under oha, alternated: requests
# per second and p99 of each round, then the medians and their ratio new / old.
#   scripts/ab-service.sh OLD_BIN NEW_BIN [ROUNDS] [SECONDS] [CONNECTIONS] [KB]
# Each binary is a `cargo build --release --example tenant_service` (check out the old
# commit for one; copy the binary out of target/ before building the other). Defaults: 5
# rounds of 8 s after 2 s of warm-up, 32 connections, kb=16 from three customers, as the
# throughput table of scripts/load-service.sh. Traffic goes to 127.0.0.1 only.
set -euo pipefail
source "$(dirname "$0")/service-common.sh"
old=$1 new=$2 rounds=${3:-5} dur=${4:-8} conc=${5:-32} kb=${6:-16}
command -v oha >/dev/null || cargo install oha --locked
port=3917
url="http://127.0.0.1:$port/work\\?kb=$kb&tenant=customer-[1-3]"
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq "$rounds"); do
    for v in old new; do
        bin=$old
        [ "$v" = new ] && bin=$new
        "$bin" --addr "127.0.0.1:$port" 2>/dev/null &
        server=$!
        wait_ready "$port"
        oha -z 2s -c "$conc" --no-tui --output-format quiet --rand-regex-url "$url"
        oha -z "${dur}s" -c "$conc" --no-tui --output-format json --rand-regex-url "$url" |
            python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sys.argv[1], d["summary"]["requestsPerSec"], d["latencyPercentiles"]["p99"] * 1000)
' "$v"
        kill "$server"
        wait "$server" 2>/dev/null || true
        server=
    done
done | tee /dev/stderr | python3 -c '
import sys, statistics as st
d = {"old": [], "new": []}
for line in sys.stdin:
    v, rps, p99 = line.split()
    d[v].append((float(rps), float(p99)))
o = st.median(x[0] for x in d["old"]); n = st.median(x[0] for x in d["new"])
po = st.median(x[1] for x in d["old"]); pn = st.median(x[1] for x in d["new"])
print("req/s old %.0f new %.0f (new / old %.3fx); p99 ms old %.2f new %.2f" % (o, n, n / o, po, pn))
'
