#!/usr/bin/env bash
# sqlite3 under LD_PRELOAD: builds a table of ROWS rows (default 300000) with an index,
# queries it (aggregates, LIKE, ORDER BY, GROUP BY, a self-join), and checks that every
# allocator's output is byte for byte glibc's. Runs alternated, ROUNDS each (default 3).
#
#   scripts/preload-sqlite.sh [ROWS] [ROUNDS]
set -euo pipefail
rows="${1:-300000}"
rounds="${2:-3}"
command -v sqlite3 >/dev/null || apt-get install -y -q sqlite3 >/dev/null
source "$(dirname "$0")/preload-common.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/q.sql" <<SQL
pragma cache_size = -65536;
create table t(a integer primary key, b text, c real, d blob);
with recursive s(i) as (select 1 union all select i + 1 from s where i < $rows)
insert into t select i, printf('row-%08d-%s', (i * 7919) % $rows, substr('abcdefghijklmnop', 1 + i % 16)),
  (i % 1000) * 0.25, zeroblob(i % 200) from s;
create index tb on t(b);
create index tc on t(c, a);
select count(*), sum(length(b)), total(c), sum(length(d)) from t;
select b from t where b like 'row-0000777%' order by b;
select c, count(*), min(a), max(a) from t group by c order by count(*) desc, c limit 5;
select count(*) from t x join t y on x.a = y.a + 1 where x.c > y.c;
select group_concat(b, ',') from (select b from t order by b desc limit 20);
update t set b = upper(b) where a % 3 = 0;
delete from t where a % 5 = 0;
select count(*), max(b) from t;
SQL
res="$work/res"
: > "$res"
for ((r = 0; r < rounds; r++)); do
  for a in $(order "$r"); do
    timed "$work/$a.out" "$a" sqlite3 :memory: ".read $work/q.sql"
    echo "$a $(cat "$work/$a.out.time") $(sha256sum < "$work/$a.out" | cut -c1-16)" | tee -a "$res"
  done
done
# Every allocator printed the same thing (one digest in the last column).
digests=$(awk '{print $4}' "$res" | sort -u | wc -l)
echo "distinct outputs: $digests (1 = all identical)"
[ "$digests" = 1 ] || { echo "OUTPUTS DIFFER"; exit 1; }
echo "sqlite3 $(sqlite3 -version | cut -d' ' -f1), $rows rows:"
summarize "$res" "seconds"
