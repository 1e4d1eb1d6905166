#!/usr/bin/env bash
# How fast examples/tenant_service gives back a burst's memory while a steady load goes on:
# the resident set every half second after one runaway request (tenant "evil", killed at its
# 64 MiB limit) or, with `--no-tenants`, one large request (kb=60000, about 100 MB, answered).
#
#   scripts/runaway-rss.sh BIN [--no-tenants] [SECONDS] [RATE]   (defaults 15 s, 1000 req/s)
#
# BIN is a `cargo build --release --example tenant_service` (copy it out of target/ to keep
# an older build; the service's decay interval is its `--decay-ms`, 5 s by default). Prints
# "t=SECONDS rss=KB" lines from just after the burst's answer came back. mimalloc and
# jemalloc builds (`--features service-mimalloc|service-jemalloc`) have no tenants to kill a
# runaway: measure them with --no-tenants. Traffic goes to 127.0.0.1 only.
set -euo pipefail
source "$(dirname "$0")/service-common.sh"
bin=$1
shift
flags=()
if [ "${1:-}" = --no-tenants ]; then
    flags=(--no-tenants)
    shift
fi
secs=${1:-15} rate=${2:-1000}
command -v oha >/dev/null || cargo install oha --locked
port=3931
"$bin" --addr "127.0.0.1:$port" ${flags[@]+"${flags[@]}"} 2>/dev/null &
server=$!
load=
trap 'kill "$server" $load 2>/dev/null || true' EXIT
wait_ready "$port"
# Longer than the sampling, whatever the burst takes; stopped when the sampling ends.
oha -z "$((secs + 30))s" -q "$rate" --no-tui --output-format quiet \
    "http://127.0.0.1:$port/work?kb=16&tenant=steady" &
load=$!
sleep 1
kb=1000000
[ ${#flags[@]} -gt 0 ] && kb=60000
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/work?kb=$kb&tenant=evil")
echo "burst answered $code"
rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
for i in $(seq 0 $((secs * 2))); do
    echo "t=$(awk "BEGIN {print $i / 2}") rss=$(rss)"
    sleep 0.5
done
