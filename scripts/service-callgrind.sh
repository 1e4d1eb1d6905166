#!/usr/bin/env bash
# Instructions per request of examples/tenant_service under callgrind: the server runs
# under valgrind with instrumentation off; after WARM warm-up requests, instrumentation is
# switched on for N requests of `GET /work?kb=KB` from three customers (oha, 4
# connections), then the profile is dumped. Prints the instructions per request (the
# profile has the rest: `callgrind_annotate --inclusive=yes`).
#
#   scripts/service-callgrind.sh BIN [N] [KB] [-- SERVER ARGS...]   (defaults 2000 16)
#
# BIN is a `cargo build --release --example tenant_service` (add `--features
# service-mimalloc` for the peer; pass `-- --no-tenants` for slabcg alone). The profile is
# target/service-callgrind/<name of BIN>.out.1 (callgrind_annotate reads it). Installs
# valgrind, curl (apt-get) and oha (cargo install) if missing. Traffic to 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/service-common.sh
bin=$1; shift
n=2000 kb=16
if [ $# -gt 0 ] && [ "$1" != -- ]; then n=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != -- ]; then kb=$1; shift; fi
[ "${1:-}" = -- ] && shift
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
command -v oha >/dev/null || cargo install oha --locked
out=target/service-callgrind
mkdir -p "$out"
name=$(basename "$bin")
port=${PORT:-3931}
rm -f "$out/$name.out"*
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/$name.out" \
    "$bin" --addr "127.0.0.1:$port" "$@" 2>"$out/$name.valgrind.txt" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
# Under valgrind the server takes seconds to start.
wait_ready "$port" 300 0.2
url="http://127.0.0.1:$port/work\\?kb=$kb&tenant=customer-[1-3]"
oha -n "${WARM:-300}" -c 4 --no-tui --output-format quiet --rand-regex-url "$url"
callgrind_control -i on "$pid" >/dev/null 2>&1
oha -n "$n" -c 4 --no-tui --output-format quiet --rand-regex-url "$url"
callgrind_control -i off "$pid" >/dev/null 2>&1
callgrind_control -d "$pid" >/dev/null 2>&1
kill "$pid"; wait "$pid" 2>/dev/null || true
trap - EXIT
total=$(callgrind_annotate "$out/$name.out.1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "$name: $total instructions for $n requests: $((total / n)) per request"
