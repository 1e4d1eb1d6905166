#!/usr/bin/env bash
# Opt-in checks that CI does not run (they need a nightly toolchain or take minutes):
#   1. Miri over the accounting crate's unit and integration tests (undefined behaviour,
#      data races, use after free in objcg reclamation). membarrier is replaced by SeqCst
#      fences on both sides under Miri (accounting/src/sys.rs).
#   2. The loom model of the object-stock protocol (allocator/tests/loom_object_stock.rs).
# Needs: `rustup toolchain install nightly --component miri` (Miri), network for the loom crate.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== Miri: slabcg-accounting (lib + tests/accounting.rs)"
cargo +nightly miri setup >/dev/null
cargo +nightly miri test -p slabcg-accounting --lib --test accounting

echo "== loom: object-stock protocol model"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p slabcg-allocator --test loom_object_stock --release
