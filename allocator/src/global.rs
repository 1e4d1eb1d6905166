//! `SlabAlloc`: the `GlobalAlloc` front end.
//!
//! Fast paths (always inlined into the caller):
//! ```text
//! alloc(layout)   size <= 128 KiB && align <= 8 → class (table or lzcnt) → thread bin pop
//!                 → miss: init::alloc_slow (refill)              other layouts: alloc_other
//! dealloc(p, l)   same class computation → thread bin push
//!                 → full: free_plain_slow → init::free_slow (flush half, or all)
//!                                                                other layouts: dealloc_other
//! ```
//! Rust hands `dealloc` the layout, so a free finds its class without touching the object's
//! slab. A request's category (size class or large) is a pure function of its layout, so
//! `dealloc` with the allocation's layout always finds the allocation; `realloc` keeps that
//! true by moving a block whose new layout changes category.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;
use core::sync::atomic::Ordering;

use crate::size_class::{class_for, class_of_small, Kind, LUT_MAX, MAX_SMALL};
use slabcg_accounting::hooks;

use crate::{charge, init, large, owner, segment, sys, thread_cache};

/// The slabcg global allocator. Install with
/// `#[global_allocator] static GLOBAL: SlabAlloc = SlabAlloc::new();`
pub struct SlabAlloc {
    _private: (),
}

impl SlabAlloc {
    /// The allocator handle; all state is process-wide, so every `SlabAlloc` is the same
    /// allocator. A `const fn`, for the `static` of `#[global_allocator]`.
    pub const fn new() -> SlabAlloc {
        SlabAlloc { _private: () }
    }

    /// Bytes usable at `ptr`, which is at least the size it was allocated with (like
    /// `malloc_usable_size`).
    ///
    /// # Safety
    /// `ptr` must be a live allocation made by `SlabAlloc`.
    pub unsafe fn usable_size(ptr: *const u8) -> usize {
        let p = ptr as *mut u8;
        if segment::is_segment(p) {
            // SAFETY: p lies in a live segment; its header is readable.
            unsafe { (*segment::segment_of(p)).layout.object_size }
        } else {
            // SAFETY: caller's contract: a live allocation outside segments is large.
            unsafe { large::usable_size(p) }
        }
    }
}

impl Default for SlabAlloc {
    fn default() -> Self {
        Self::new()
    }
}

/// The class of a request of at most 128 KiB aligned to at most 8, or None for everything
/// else (which takes the out-of-line `*_other` paths). Every size class is a multiple of 8,
/// so no rounding is needed here; 16-byte and larger alignments are rarer in Rust programs
/// and pay one call.
#[inline(always)]
pub(crate) fn fast_class(size: usize, align: usize) -> Option<usize> {
    // The table case first, so the commonest requests pay two compares, not three.
    if align > 8 {
        None
    } else if size <= LUT_MAX {
        Some(class_of_small(size))
    } else if size <= MAX_SMALL {
        Some(crate::size_class::class_of(size))
    } else {
        None
    }
}

/// Allocates a slot of class `c`, charged to the current tenant when there is one.
#[inline(always)]
pub(crate) fn alloc_class(c: usize) -> *mut u8 {
    let cg = hooks::current_objcg();
    if cg != 0 {
        return charge::alloc_small(c, cg);
    }
    let p = thread_cache::with(|tc| tc.bin(c, Kind::Plain).pop());
    if !p.is_null() {
        return p;
    }
    init::alloc_slow(c, Kind::Plain)
}

/// Frees slot `p` of class `c`.
///
/// # Safety
/// `p` must be a live slot of class `c` (plain or accounted).
#[inline(always)]
pub(crate) unsafe fn free_class(p: *mut u8, c: usize) {
    // An accounted slot has `segment::ACCOUNTED_BIT` set in its address. Until some thread
    // has entered a tenant scope no object can be accounted, so that bit alone does not send
    // a free to the owner lookup: the per-thread mask is 0 until then (see
    // `thread_cache::activate`), and a foreign pointer (an invalid free) with the bit set
    // reaches the bin flush, which validates every slot. After that, such a pointer goes to
    // the owner lookup, which reads the word it computes (possibly faulting on unmapped
    // memory); the uncharging path validates the slot before writing anything, while one kept
    // in the object stock (its word happened to equal this thread's tag) is caught only when
    // the stock is flushed.
    if p as usize & thread_cache::with(|tc| tc.acct_mask.load(Ordering::Relaxed)) != 0 {
        debug_assert!(owner::is_accounted(p));
        // SAFETY: caller's contract; the address says the slot is accounted.
        return unsafe { charge::free_small(p, c) };
    }
    // SAFETY: caller's contract.
    if unsafe { thread_cache::with(|tc| tc.bin(c, Kind::Plain).push(p)) } {
        return;
    }
    // SAFETY: caller's contract.
    unsafe { free_plain_slow(p, c) }
}

/// The plain bin refused slot `p` of class `c` (full, or closed).
///
/// A thread whose bins are closed (not yet set up, or exiting) has a zero `acct_mask`, so its
/// fast path does not check for accounted objects; this does, before the thread cache's
/// slow path (which would file an accounted slot as a plain one).
///
/// # Safety
/// As [`free_class`].
#[cold]
#[inline(never)]
unsafe fn free_plain_slow(p: *mut u8, c: usize) {
    if hooks::accounting_active() && segment::is_segment(p) && owner::is_accounted(p) {
        // SAFETY: caller's contract; p lies in a segment and its address says accounted.
        return unsafe { charge::free_small(p, c) };
    }
    // SAFETY: caller's contract: a plain slot of class c.
    unsafe { init::free_slow(p, c, Kind::Plain) }
}

/// Allocates `size` bytes aligned to `align`; null when that cannot be served (including a
/// non-power-of-two `align`).
#[inline(always)]
pub(crate) fn alloc_impl(size: usize, align: usize) -> *mut u8 {
    if let Some(c) = fast_class(size, align) {
        return alloc_class(c);
    }
    alloc_other(size, align)
}

#[cold]
#[inline(never)]
fn alloc_other(size: usize, align: usize) -> *mut u8 {
    if !align.is_power_of_two() {
        return ptr::null_mut();
    }
    match class_for(size, align) {
        Some(c) => alloc_class(c),
        None => charge::alloc_large(size, align, false),
    }
}

/// Frees `p`.
///
/// # Safety
/// `p` must be a live allocation made by this allocator with `size` and `align` (or, after a
/// `realloc`, with the layout it returned for), freed once.
#[inline(always)]
unsafe fn dealloc_impl(p: *mut u8, size: usize, align: usize) {
    if let Some(c) = fast_class(size, align) {
        // SAFETY: p is a live slot of class c (GlobalAlloc contract: same layout).
        return unsafe { free_class(p, c) };
    }
    // SAFETY: as above.
    unsafe { dealloc_other(p, size, align) }
}

/// The out-of-line part of [`dealloc_impl`]: layouts aligned above 8 or larger than a size
/// class.
///
/// # Safety
/// As [`dealloc_impl`].
#[cold]
#[inline(never)]
unsafe fn dealloc_other(p: *mut u8, size: usize, align: usize) {
    match class_for(size, align) {
        // SAFETY: p is a live slot of class c (same layout as its allocation).
        Some(c) => unsafe { free_class(p, c) },
        // SAFETY: a layout without a class was allocated by large::alloc.
        None => unsafe { charge::free_large(p) },
    }
}

// SAFETY: every method returns null or a block of at least the layout's size and alignment
// that no other live allocation overlaps (size classes, slabs and large mappings are
// disjoint), never unwinds, and frees only what the caller hands back with its layout.
unsafe impl GlobalAlloc for SlabAlloc {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        alloc_impl(layout.size(), layout.align())
    }

    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded GlobalAlloc contract.
        unsafe { dealloc_impl(ptr, layout.size(), layout.align()) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        if class_for(size, align).is_none() {
            // A fresh mapping is already zero.
            return charge::alloc_large(size, align, true);
        }
        let p = alloc_impl(size, align);
        if !p.is_null() {
            // SAFETY: p has at least size writable bytes.
            unsafe { ptr::write_bytes(p, 0, size) };
        }
        p
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        let old = class_for(layout.size(), align);
        let new = class_for(new_size, align);
        match (old, new) {
            (Some(a), Some(b)) if a == b => return p,
            // Growth may move the block (mremap), which keeps only page alignment; a shrink
            // unmaps the tail in place, so any alignment stays (and, done in place, it
            // needs no new block that a tenant at its limit could refuse).
            (None, None) if align <= sys::PAGE || new_size <= layout.size() => {
                // SAFETY: p is a live large allocation, aligned to <= PAGE or not growing.
                match unsafe { charge::realloc_large(p, new_size) } {
                    charge::LargeResize::Done(q) => return q,
                    // The owner's limit said no: moving the block would only dodge it.
                    charge::LargeResize::Refused => return ptr::null_mut(),
                    charge::LargeResize::Failed => {}
                }
            }
            _ => {}
        }
        // A shrink into a size class of a block of the caller's tenant moves the charge with
        // the block, so that it never meets the limit (std treats a shrink as infallible);
        // null when that does not apply.
        match new {
            Some(b) if new_size < layout.size() && hooks::accounting_active() => {
                // SAFETY: p is a live block of class `a` (or, for `None`, a large block)
                // holding at least new_size bytes to keep (new_size < layout.size()).
                let q = unsafe {
                    match old {
                        Some(a) => charge::realloc_shrink_small(p, a, b, new_size),
                        None => charge::realloc_shrink_large(p, b, new_size),
                    }
                };
                if !q.is_null() {
                    return q;
                }
            }
            _ => {}
        }
        let q = alloc_impl(new_size, align);
        if !q.is_null() {
            // SAFETY: both blocks are live and distinct, and each holds at least the bytes
            // copied; the old block is freed with the layout it was allocated with.
            unsafe {
                ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                dealloc_impl(p, layout.size(), align);
            }
        }
        q
    }
}
