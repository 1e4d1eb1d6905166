#!/usr/bin/env bash
# CPython's own test suite, a subset of its modules, with slabcg preloaded, then with
# glibc's malloc: slabcg must fail no module that glibc's malloc passes. Prints regrtest's
# summary and the wall time and peak RSS of each run.
#
#   scripts/preload-python-tests.sh [MODULE...]
#
# Uses the python3 on PATH when it ships its tests (pyenv and python.org builds do), else
# Debian's /usr/bin/python3 with libpython3.X-testsuite installed on the spot.
set -euo pipefail
mods=("$@")
[ ${#mods[@]} -gt 0 ] || mods=(test_json test_re test_dict test_set test_list test_bytes
  test_unicode test_str test_threading test_fork1 test_os test_pickle test_gc test_weakref
  test_hashlib test_zlib test_sqlite3 test_ctypes test_mmap test_struct test_array
  test_deque test_subprocess test_signal test_concurrent_futures)
source "$(dirname "$0")/preload-common.sh"
py="$(command -v python3 || true)"
[ -n "$py" ] && py="$("$py" -c 'import sys; print(sys.executable)')"
if [ -z "$py" ] || ! "$py" -c 'import test.test_json' 2>/dev/null; then
  py=/usr/bin/python3
  ver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  "$py" -c 'import test.test_json' 2>/dev/null || apt-get install -y -q "libpython$ver-testsuite" >/dev/null
fi
# Only modules this Python has (test_str is 3.12's name of test_unicode).
have=()
for m in "${mods[@]}"; do
  "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('test.$m') is None)" 2>/dev/null && have+=("$m")
done
echo "$("$py" --version) at $py: ${#have[@]} modules"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for a in slabcg sys; do
  s=0
  timed "$work/$a.out" "$a" "$py" -m test -q "${have[@]}" || s=$?
  echo "== $a (exit $s): $(cat "$work/$a.out.time" | tail -1) (seconds, peak RSS KiB)"
  grep -E '^(Total tests|Total test files|Result):' "$work/$a.out" || true
  # The modules that failed: the indented names after "N test(s) failed:".
  sed -n '/tests* failed:$/,/^$/p' "$work/$a.out" | grep '^ ' | tr -s ' ' '\n' | grep -v '^$' | sort -u > "$work/$a.failed"
  echo "failed modules: $(tr '\n' ' ' < "$work/$a.failed")"
done
# Pass when slabcg fails no module that glibc's malloc passes (a module that fails with
# both, such as one the sandbox breaks, is the machine's, not the allocator's).
if cmp -s "$work/slabcg.failed" "$work/sys.failed"; then
  echo "same result with slabcg and with glibc's malloc"
else
  echo "DIFFERENT RESULTS"; diff "$work/sys.failed" "$work/slabcg.failed" || true
  exit 1
fi
