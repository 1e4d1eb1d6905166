//! The timed loops of `examples/pair_probe.rs` and `examples/pair_probe_peer.rs`: batches of
//! 4 allocations then 4 frees (the seed 003 unit), ns per alloc+free pair.

use std::alloc::Layout;
use std::time::Instant;

#[path = "batch4.rs"]
mod batch4;
use batch4::batch4;

/// ns per pair of `batches` batches of `l`. Always inlined, so each caller below gets its own
/// copy: one with the layout known only at run time, one with it a constant.
#[inline(always)]
fn timed(l: Layout, batches: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..batches {
        batch4(l);
    }
    t.elapsed().as_nanos() as f64 / (batches * 4) as f64
}

/// The layout known only at run time: every allocation goes through the `__rust_alloc` call.
#[inline(never)]
pub fn run(size: usize, batches: usize) -> f64 {
    timed(Layout::from_size_align(size, 8).unwrap(), batches)
}

/// `run` with the layout a compile-time constant: with the release profile's thin LTO the
/// allocator's fast path is inlined into the loop and folded for the size (as for a `Box` of
/// a sized type, and as in the seeds bench), so the plain pair is much shorter than through
/// the `__rust_alloc` call that `run` makes, while accounting adds the same instructions.
#[inline(never)]
pub fn run_const<const SIZE: usize>(batches: usize) -> f64 {
    timed(Layout::from_size_align(SIZE, 8).unwrap(), batches)
}

/// `run` or, with `constant`, `run_const` (32 or 4096 bytes only).
pub fn run_mode(constant: bool, size: usize, batches: usize) -> f64 {
    match (constant, size) {
        (true, 32) => run_const::<32>(batches),
        (true, 4096) => run_const::<4096>(batches),
        (true, _) => panic!("const mode takes 32 or 4096"),
        (false, _) => run(size, batches),
    }
}
