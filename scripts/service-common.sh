# Sourced by the scripts that drive examples/tenant_service (load-service.sh, ab-service.sh,
# runaway-rss.sh, runaway-sched.sh, service-callgrind.sh).
#   wait_ready PORT [TRIES] [PAUSE]   waits until the server on PORT answers a small request
#                                     (TRIES times PAUSE seconds, default 100 x 0.05); when it
#                                     never does, says so and exits 1 (a run against no server
#                                     would only measure connection errors).
wait_ready() {
    local port=$1 tries=${2:-100} pause=${3:-0.05}
    for _ in $(seq "$tries"); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/work?kb=1&tenant=warmup" && return 0
        sleep "$pause"
    done
    echo "the server did not answer on port $port" >&2
    exit 1
}
