#!/usr/bin/env bash
# The bench-suite runner: build every workload once per allocator, run them alternating the
# allocators, and write target/bench-report/{raw.csv,report.md,chart.png}.
#
# usage: bench-suite/run.sh [options]
#   --reps N          repetitions of every (workload, allocator) (default 3)
#   --allocs "A B"    allocators (default "mimalloc jemalloc system slabcg slabcg-tenant
#                     slabcg-request"; mimalloc is the reference of every ratio, keep it in;
#                     the slabcg-* builds run with accounting on, src/tenancy.rs)
#   --workloads "W"   workloads (default: all eleven)
#   --threads N       pass N threads to every workload (default: each program's default)
#   --scale-pct P     scale every workload's default size knob by P percent (default 100)
#   --quick           = --reps 1 --scale-pct 10 (smoke test, about 1 minute after builds)
#   --no-build        reuse the binaries already in target/bench-suite/<alloc>/release
#   --report-only     only regenerate report.md / chart.png from raw.csv (and seeds/*.csv)
# env: RUN_TIMEOUT seconds per run (default 300)
#
# Builds: `cargo build --release -p slabcg-bench-suite --features <alloc>` into
# target/bench-suite/<alloc> (system = no feature); the report program into
# target/bench-suite/report. Measures each run's wall time (date, ns) and peak RSS
# (GNU time's %M = the child's ru_maxrss; installed with apt-get if missing).
# Exit status: 0 when every run verified its results, 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

REPS=3
ALLOCS="mimalloc jemalloc system slabcg slabcg-tenant slabcg-request"
WORKLOADS="larson xmalloc cache_scratch cache_thrash mstress rptest alloc_test glibc_simple glibc_thread malloc_large server"
THREADS=""
SCALE=100
BUILD=1
RUN=1
while (($#)); do
    case "$1" in
        --reps) REPS=$2; shift ;;
        --allocs) ALLOCS=$2; shift ;;
        --workloads) WORKLOADS=$2; shift ;;
        --threads) THREADS=$2; shift ;;
        --scale-pct) SCALE=$2; shift ;;
        --quick) REPS=1; SCALE=10 ;;
        --no-build) BUILD=0 ;;
        --report-only) BUILD=0; RUN=0 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
read -r -a ALLOC_LIST <<<"$ALLOCS"
read -r -a WL_LIST <<<"$WORKLOADS"
OUT=target/bench-report
TD=target/bench-suite
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
mkdir -p "$OUT/logs" "$OUT/seeds"

# One benchmark at a time: scripts/bench-pairs.sh and bench-suite/run.sh share this lock, so
# two runs neither share the CPUs nor overwrite each other's files.
if ((BUILD || RUN)); then
    exec 9>target/bench-report/.lock
    if command -v flock >/dev/null && ! flock -n 9; then
        echo "waiting for another benchmark run (target/bench-report/.lock) ..." >&2
        flock 9
    fi
fi
T0=$(date +%s)

features() { [ "$1" = system ] && echo "" || echo "--features $1"; }

if ((BUILD)); then
    for a in "${ALLOC_LIST[@]}"; do
        echo "== build $a" >&2
        # shellcheck disable=SC2046
        cargo build --release --quiet -p slabcg-bench-suite --bins $(features "$a") --target-dir "$TD/$a"
    done
fi
if ((BUILD)) || [ ! -x "$TD/report/debug/report" ]; then
    echo "== build report" >&2
    cargo build --quiet -p slabcg-bench-suite --bin report --features report --target-dir "$TD/report"
fi

if ((RUN)); then
    if [ ! -x /usr/bin/time ]; then
        echo "== installing GNU time" >&2
        (apt-get update -qq && apt-get install -y -qq time) >&2 || { echo "run.sh: need /usr/bin/time" >&2; exit 1; }
    fi
    cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
    mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
    commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
    {
        echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $cpu, $(nproc) CPUs, $mem, Linux $(uname -r);"
        echo "commit \`$commit\`, $(rustc --version)."
        echo "Load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine makes times noisy)."
        echo "Settings: reps=$REPS, scale=${SCALE}%, threads=${THREADS:-program defaults}; allocators: ${ALLOCS}."
        echo "Reproduce: \`bench-suite/run.sh$([ "$REPS" != 3 ] && echo " --reps $REPS")$([ "$SCALE" != 100 ] && echo " --scale-pct $SCALE")$([ -n "$THREADS" ] && echo " --threads $THREADS")\`."
        if grep -qs "TEMPORARY placeholder" allocator/src/*.rs allocator/src/**/*.rs 2>/dev/null; then
            echo
            echo "**slabcg numbers are provisional:** at this commit \`slabcg::SlabAlloc\` is the placeholder that forwards to the system allocator."
        fi
    } >"$OUT/meta.md"

    RAW=$OUT/raw.csv
    echo "rep,workload,allocator,threads,knob,wall_s,max_rss_kb,status,ops,inner_s" >"$RAW"
    fails=0
    nalloc=${#ALLOC_LIST[@]}
    for ((rep = 1; rep <= REPS; rep++)); do
        for wi in "${!WL_LIST[@]}"; do
            w=${WL_LIST[wi]}
            for ((k = 0; k < nalloc; k++)); do
                # rotate the allocator order with every workload and repetition
                a=${ALLOC_LIST[(k + wi + rep - 1) % nalloc]}
                bin=$TD/$a/release/$w
                log=$OUT/logs/$w.$a.$rep
                args=()
                [ -n "$THREADS" ] && args=("$THREADS")
                s=$(date +%s%N)
                set +e
                BENCH_SCALE_PCT=$SCALE timeout "$RUN_TIMEOUT" /usr/bin/time -f "%M" -o "$log.time" "$bin" "${args[@]}" >"$log.out" 2>"$log.err"
                rc=$?
                set -e
                e=$(date +%s%N)
                wall=$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.4f", (e - s) / 1e9 }')
                rss=$(tail -n1 "$log.time" 2>/dev/null | tr -dc 0-9)
                line=$(grep -m1 '^RESULT ' "$log.out" || true)
                field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
                status=ok
                if ((rc != 0)); then
                    status="exit$rc"
                elif [ -z "$line" ]; then
                    status=no-result
                elif [ "$(field allocator)" != "$a" ]; then
                    status="wrong-allocator-$(field allocator)"
                fi
                [ "$status" = ok ] || { fails=$((fails + 1)); echo "!! $w/$a rep $rep: $status ($(head -c 300 "$log.err"))" >&2; }
                echo "$rep,$w,$a,$(field threads),$(field knob),$wall,${rss:-},$status,$(field ops),$(field elapsed_s)" >>"$RAW"
                printf '%-14s %-9s rep %d  %7.3f s  %8s KiB  %s\n' "$w" "$a" "$rep" "$wall" "${rss:--}" "$status" >&2
            done
        done
    done
    echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)." >>"$OUT/meta.md"
fi

"$TD/report/debug/report" "$OUT/raw.csv" "$OUT" >/dev/null
echo "== done in $(( $(date +%s) - T0 )) s: $OUT/report.md, $OUT/chart.png" >&2
if ((RUN)) && ((fails > 0)); then
    echo "run.sh: $fails run(s) failed verification or crashed" >&2
    exit 1
fi
