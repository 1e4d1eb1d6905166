#!/usr/bin/env bash
# redis-server under LD_PRELOAD with redis-benchmark on loopback: requests per second of
# each command and the server's peak RSS, slabcg against mimalloc, jemalloc and glibc, runs
# alternated (ROUNDS, default 3). Before the benchmark each server loads the same
# deterministic data set, whose DEBUG DIGEST must be the same under every allocator.
#
#   scripts/preload-redis.sh [ROUNDS] [REQUESTS]
#
# Debian's redis-server links libjemalloc itself and calls plain malloc/free/realloc/
# malloc_usable_size: a preloaded allocator's symbols take precedence, so "jemalloc" here
# is redis's own build, and the others replace it (its mallctl statistics then read 0).
set -euo pipefail
rounds="${1:-3}"
requests="${2:-100000}"
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  apt-get install -y -q redis-server redis-tools >/dev/null
fi
source "$(dirname "$0")/preload-common.sh"
port=6399
# The server (one thread) on CPU 0 and the client on the others, so that the two do not take
# turns on one core; without that, runs of one build varied 2x on a 2-vCPU VM.
pin_server=() pin_client=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  pin_server=(taskset -c 0)
  pin_client=(taskset -c "1-$(( $(nproc) - 1 ))")
fi
work="$(mktemp -d)"
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
# The data set: 20000 strings, 200 lists, 200 hashes, 200 sets of varied sizes.
python3 - > "$work/load.txt" <<'PY'
for i in range(20000):
    print(f"SET key:{i} {'v' * (i % 300)}{i}")
for l in range(200):
    print(f"RPUSH list:{l} " + " ".join(str(j * l) for j in range(l % 50 + 1)))
    print(f"HSET hash:{l} " + " ".join(f"f{j} {'x' * j}" for j in range(l % 40 + 1)))
    print(f"SADD set:{l} " + " ".join(f"m{j * 7 % 101}" for j in range(l % 60 + 1)))
for i in range(0, 20000, 7):
    print(f"APPEND key:{i} tail{i}")
for i in range(0, 20000, 11):
    print(f"DEL key:{i}")
PY
res="$work/res"
: > "$res"
for ((r = 0; r < rounds; r++)); do
  for a in $(order "$r"); do
    env ${lib[$a]:+LD_PRELOAD=${lib[$a]}} /usr/bin/time -f "%e %M" -o "$work/$a.time" \
      "${pin_server[@]}" redis-server --port $port --bind 127.0.0.1 --save "" --appendonly no \
      --enable-debug-command yes --daemonize no > "$work/$a.log" 2>&1 &
    for _ in $(seq 100); do
      redis-cli -p $port ping 2>/dev/null | grep -q PONG && break
      sleep 0.1
    done
    redis-cli -p $port < "$work/load.txt" > /dev/null
    digest=$(redis-cli -p $port debug digest)
    "${pin_client[@]}" redis-benchmark -p $port -q -n "$requests" -c 50 -r 100000 -d 64 \
      -t set,get,incr,lpush,lpop,sadd,hset,mset > "$work/$a.bench" 2>&1
    redis-cli -p $port shutdown nosave > /dev/null 2>&1 || true
    wait
    read -r secs rss < "$work/$a.time"
    # "SET: 81234.56 requests per second, p50=..." -> one "name=rps" per command.
    rps=$(tr '\r' '\n' < "$work/$a.bench" | sed -n 's/^\([A-Z_]*\)[^:]*: \([0-9.]*\) requests per second.*/\1=\2/p' | tr '\n' ' ')
    echo "$a $rss $digest $rps" | tee -a "$res"
  done
done
digests=$(awk '{print $3}' "$res" | sort -u | wc -l)
echo "distinct data-set digests: $digests (1 = all identical)"
[ "$digests" = 1 ] || { echo "DIGESTS DIFFER"; exit 1; }
python3 - "$res" <<'PY'
import sys, statistics, collections
rps = collections.defaultdict(lambda: collections.defaultdict(list))
rss = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    a, kb = f[0], int(f[1])
    rss[a].append(kb)
    for kv in f[3:]:
        k, v = kv.split("=")
        rps[k][a].append(float(v))
allocs = [a for a in ["slabcg", "slabcg-base", "mimalloc", "jemalloc", "sys"] if a in rss]
names = {"sys": "glibc", "jemalloc": "jemalloc (redis's own)"}
print("| command (requests/s, median) | " + " | ".join(names.get(a, a) for a in allocs) + " | slabcg / mimalloc |")
print("|---" * (len(allocs) + 2) + "|")
for k in rps:
    m = {a: statistics.median(rps[k][a]) for a in allocs if a in rps[k]}
    print(f"| {k} | " + " | ".join(f"{m[a]:.0f}" for a in allocs) + f" | {m['slabcg'] / m['mimalloc']:.2f} |")
print("| server peak RSS MiB | " + " | ".join(f"{statistics.median(rss[a]) / 1024:.1f}" for a in allocs) + " | |")
PY
