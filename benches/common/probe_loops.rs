//! The timed loops of `examples/pair_probe.rs` and `examples/pair_probe_peer.rs`: batches of
//! 4 allocations then 4 frees (the seed 003 unit), ns per alloc+free pair, in three shapes of
//! code (`run_shape`).

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::time::Instant;

#[path = "batch4.rs"]
mod batch4;
use batch4::{batch4, batch4_with};

/// ns per pair of `batches` calls of `batch`. Always inlined, so each caller below gets its
/// own copy of the loop.
#[inline(always)]
fn timed(batches: usize, mut batch: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..batches {
        batch();
    }
    t.elapsed().as_nanos() as f64 / (batches * 4) as f64
}

/// The layout known only at run time: every allocation goes through the `__rust_alloc` call.
#[inline(never)]
pub fn run(size: usize, batches: usize) -> f64 {
    let l = Layout::from_size_align(size, 8).unwrap();
    timed(batches, || batch4(l))
}

/// `run` with the layout a compile-time constant: with the release profile's thin LTO the
/// allocator's fast path is inlined into the loop and folded for the size (as for a `Box` of
/// a sized type, and as in the seeds bench), so the plain pair is much shorter than through
/// the `__rust_alloc` call that `run` makes, while accounting adds the same instructions.
#[inline(never)]
pub fn run_const<const SIZE: usize>(batches: usize) -> f64 {
    let l = Layout::from_size_align(SIZE, 8).unwrap();
    timed(batches, || batch4(l))
}

/// Through `global`'s methods (pass the `#[global_allocator]` static), which are inlined into
/// the loop, with the layout known only at run time: the size class is computed in the loop
/// and both the plain and the accounted paths are inlined into it.
#[inline(never)]
pub fn run_inlined<A: GlobalAlloc>(global: &A, size: usize, batches: usize) -> f64 {
    let l = Layout::from_size_align(black_box(size), 8).unwrap();
    timed(batches, || batch4_with(global, l))
}

/// One timed run in the shape named by `shape`: `const` (`run_const`, 32 or 4096 bytes
/// only), `inlined` (`run_inlined` through `global`), anything else `run`.
pub fn run_shape<A: GlobalAlloc>(global: &A, shape: &str, size: usize, batches: usize) -> f64 {
    match (shape, size) {
        ("const", 32) => run_const::<32>(batches),
        ("const", 4096) => run_const::<4096>(batches),
        ("const", _) => panic!("const mode takes 32 or 4096"),
        ("inlined", _) => run_inlined(global, size, batches),
        _ => run(size, batches),
    }
}
