//! The seed 003 unit of work: 4 allocations then 4 frees of one layout. Shared by the
//! accounting benches, the seeds bench and `examples/pair_probe.rs`.

use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;

#[inline(always)]
pub fn batch4(l: Layout) {
    // SAFETY: valid non-zero layout; each block freed once with its layout.
    unsafe {
        let a = black_box(alloc(l));
        let b = black_box(alloc(l));
        let c = black_box(alloc(l));
        let d = black_box(alloc(l));
        dealloc(a, l);
        dealloc(b, l);
        dealloc(c, l);
        dealloc(d, l);
    }
}
