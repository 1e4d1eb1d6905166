//! The seed 003 unit of work: 4 allocations then 4 frees of one layout. Shared by the
//! accounting benches, the seeds bench and `examples/pair_probe.rs`.

use std::alloc::{alloc, dealloc, GlobalAlloc, Layout};
use std::hint::black_box;

/// The global allocator reached the way ordinary code reaches it: through `alloc` and
/// `dealloc`, which call the `__rust_alloc` symbols (inlined by LTO where it chooses).
pub struct ViaStd;

// SAFETY: forwards to the global allocator, which keeps GlobalAlloc's contract.
unsafe impl GlobalAlloc for ViaStd {
    #[inline(always)]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { alloc(l) }
    }

    #[inline(always)]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { dealloc(p, l) }
    }
}

/// One batch through the global `alloc`/`dealloc` functions.
#[inline(always)]
pub fn batch4(l: Layout) {
    batch4_with(&ViaStd, l)
}

/// One batch through `a`'s methods. With `a` the `#[global_allocator]` static itself, its
/// always-inlined fast paths land in the caller's loop whatever the layout.
#[inline(always)]
pub fn batch4_with<A: GlobalAlloc>(a: &A, l: Layout) {
    // SAFETY: valid non-zero layout; each block freed once with its layout.
    unsafe {
        let p = black_box(a.alloc(l));
        let q = black_box(a.alloc(l));
        let r = black_box(a.alloc(l));
        let s = black_box(a.alloc(l));
        a.dealloc(p, l);
        a.dealloc(q, l);
        a.dealloc(r, l);
        a.dealloc(s, l);
    }
}
