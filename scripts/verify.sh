#!/usr/bin/env bash
# Opt-in checks that CI does not run (they need a nightly toolchain or take minutes):
#   1. Miri over the accounting crate's unit and integration tests (undefined behaviour,
#      data races, use after free in objcg reclamation). membarrier is replaced by SeqCst
#      fences on both sides under Miri (accounting/src/sys.rs).
#   2. Miri over the allocator crate's unit tests and tests/miri_smoke.rs (the allocator as the
#      global allocator: size classes on two threads, remote frees, realloc, large, dedicated
#      and bulk, accounted allocations in a tenant with a drain). Under Miri, allocator/src/sys
#      has narrow fallbacks for what Miri does not model (partial munmap, madvise, mremap of
#      pieces). Flags: -Zmiri-permissive-provenance, because a slot finds its segment header
#      by masking its address into an integer and back (segment_of), which Miri supports
#      with exposed provenance but warns about; -Zmiri-disable-stacked-borrows, because every
#      thread_cache::with() retags a &ThreadCache of ~4 KiB whose cells and plain fields
#      interleave, which costs ~16 ms under Stacked Borrows (Tree Borrows is no faster): the
#      test harness with no test selected did not finish in 6 minutes. Everything else Miri
#      checks stays on: use after free, out of bounds, uninitialised reads (including reads
#      of memory the allocator unmapped), alignment, data races, leaks. About 5 minutes.
#   3. The loom models, which run the real protocol code on loom's atomics (the `sync` shim
#      of slabcg-sys, `cfg(loom)`): the byte-stock steal protocol (accounting/src/
#      loom_tests.rs: Stock::with_slot against request_steal/take_stolen), the object-stock
#      protocol (allocator/src/loom_tests.rs: ObjectStock::push/pop/reclaim_take/take_own
#      against request_steal/record/recheck), and the spin lock (sys/tests/loom_spin_lock.rs).
#      Membarrier is a SeqCst fence on both sides under loom. Here with up to 4 preemptions
#      per execution (LOOM_MAX_PREEMPTIONS to change it; .ci/run uses 3): about 3 minutes.
# .ci/run runs a bounded part of 1-3 (the OS layer, the accounting tests less the four stress
# tests, the allocator's fault tests and miri_smoke, all three loom models with 3
# preemptions); this script is the long version (the accounting set alone about 6 minutes).
# Needs: `rustup toolchain install nightly --component miri` (Miri), network for the loom crate.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== Miri: slabcg-accounting (lib + tests/accounting.rs)"
cargo +nightly miri setup >/dev/null
cargo +nightly miri test -p slabcg-accounting --lib --test accounting

echo "== Miri: slabcg-sys (lib)"
cargo +nightly miri test -p slabcg-sys --lib

echo "== Miri: slabcg-allocator (lib + tests/miri_smoke.rs)"
MIRIFLAGS="-Zmiri-permissive-provenance -Zmiri-disable-stacked-borrows" \
    cargo +nightly miri test -p slabcg-allocator --lib --test miri_smoke

echo "== loom: byte-stock and object-stock protocols, spin lock"
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-4} CARGO_TARGET_DIR=target/loom \
    cargo test -p slabcg-accounting -p slabcg-allocator --lib --release loom_tests::
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p slabcg-sys --test loom_spin_lock --release
