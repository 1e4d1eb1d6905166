#!/usr/bin/env bash
# The long fuzz run of the allocator and tenant model (fuzz/fuzz_targets/model.rs, whose
# interpreter and shadow model, tests/common/fuzz_model.rs, `cargo test --test fuzz_replay`
# also runs over the committed corpus). Installs cargo-fuzz if missing; needs nightly.
#
#   scripts/fuzz.sh [SECONDS] [JOBS]     default: 600 s, 1 job
#
# Builds without a sanitizer (slabcg maps its own memory, so ASan would not see its blocks)
# and with debug assertions (the allocator's and the accounting's invariant checks). New
# inputs go to fuzz/corpus/model/; a finding goes to fuzz/artifacts/model/ (reproduce it
# with `cargo +nightly fuzz run -s none -a model <file>`, or copy it into the corpus and
# run the replay test). The target prints the running total of actions each million; the
# log is fuzz/fuzz-<date>.log. Afterwards the corpus is cut to the inputs that cover every
# edge (counters off: `cargo fuzz cmin` keeps some 1,400 files), which is what is committed:
#   mkdir /tmp/min && fuzz/target/x86_64-unknown-linux-gnu/release/model -merge=1 \
#       -use_counters=0 /tmp/min fuzz/corpus/model   # then replace fuzz/corpus/model
# (keep the regress-* inputs: model bugs the fuzzer found).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
jobs=${2:-1}
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz
fi
log="fuzz/fuzz-$(date -u +%Y%m%dT%H%M%S).log"
cargo +nightly fuzz build -s none -a model
set +e
par=()
if [ "$jobs" -gt 1 ]; then
    # Each job logs to fuzz-<n>.log in the current directory (libFuzzer's -jobs).
    par=(-jobs="$jobs" -workers="$jobs")
fi
cargo +nightly fuzz run -s none -a model fuzz/corpus/model -- \
    -max_total_time="$secs" -max_len=4096 "${par[@]}" -print_final_stats=1 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
total=$(grep -o 'fuzz_model: [0-9]* actions in [0-9]* inputs (at exit)' "$log" | tail -1 || true)
echo "== ${total:-no action count (see $log)}"
exit "$rc"
