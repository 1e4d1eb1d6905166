//! `SlabAlloc`: the `GlobalAlloc` front end.
//!
//! Fast paths (always inlined into the caller):
//! ```text
//! alloc(layout)   size <= 128 KiB && align <= 8 → class (table or lzcnt) → thread bin pop
//!                 → miss: thread_cache::alloc_slow (refill)      other layouts: alloc_other
//! dealloc(p, l)   same class computation → thread bin push
//!                 → full: thread_cache::free_slow (flush half)   other layouts: dealloc_other
//! ```
//! Rust hands `dealloc` the layout, so a free finds its class without touching the object's
//! slab. A request's category (size class or large) is a pure function of its layout, so
//! `dealloc` with the allocation's layout always finds the allocation; `realloc` keeps that
//! true by moving a block whose new layout changes category.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;
use core::sync::atomic::{AtomicU8, Ordering};

use crate::size_class::{class_for, class_of_small, LUT_MAX, MAX_SMALL};
use slabcg_accounting::hooks;

use crate::{charge, classes, large, segment, sys, thread_cache};

/// The slabcg global allocator. Install with
/// `#[global_allocator] static GLOBAL: SlabAlloc = SlabAlloc::new();`
pub struct SlabAlloc {
    _private: (),
}

impl SlabAlloc {
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
fn fast_class(size: usize, align: usize) -> Option<usize> {
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
fn alloc_class(c: usize) -> *mut u8 {
    let cg = hooks::current_objcg();
    if cg != 0 {
        return charge::alloc_small(c, cg);
    }
    let p = thread_cache::with(|tc| tc.bin(c, false).pop());
    if !p.is_null() {
        return p;
    }
    thread_cache::alloc_slow(c, false)
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
        debug_assert!(charge::is_accounted(p));
        // SAFETY: caller's contract; the address says the slot is accounted.
        return unsafe { charge::free_small(p, c) };
    }
    // SAFETY: caller's contract.
    if unsafe { thread_cache::with(|tc| tc.bin(c, false).push(p)) } {
        return;
    }
    // SAFETY: caller's contract.
    unsafe { thread_cache::free_slow(p, c, false) }
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

static INIT: AtomicU8 = AtomicU8::new(0);

/// Process-wide setup, run by the first thread that takes a slow path: fork handlers.
pub fn init_once() {
    if INIT.load(Ordering::Acquire) == 2 {
        return;
    }
    if INIT
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        if !sys::check_page_size() {
            sys::fatal("the OS page size is larger than the 4 KiB slabcg was built for");
        }
        sys::thread::register_fork_handlers(fork_prepare, fork_parent, fork_child);
        hooks::read_environment();
        classes::register_with_accounting();
        hooks::set_root_usage_source(root_usage);
        hooks::set_object_drain(crate::object_stock::drain_all);
        hooks::set_on_activate(thread_cache::activate);
        if hooks::accounting_active() {
            // A scope was entered before the hook was registered (no allocation had been
            // made yet): catch up.
            thread_cache::activate();
        }
        INIT.store(2, Ordering::Release);
    } else {
        while INIT.load(Ordering::Acquire) != 2 {
            sys::yield_now();
        }
    }
}

/// Bytes allocated outside every tenant scope: what the root tenant holds beyond its
/// children's charges.
fn root_usage() -> hooks::Unscoped {
    let s = crate::stats::stats();
    let unscoped = s.allocated.saturating_sub(s.allocated_charged) as u64;
    let large = (s.large_allocated as u64)
        .saturating_sub(charge::CHARGED_LARGE.load(core::sync::atomic::Ordering::Relaxed) as u64)
        .min(unscoped);
    hooks::Unscoped {
        slab: unscoped - large,
        large,
    }
}

// Fork handlers: take every lock an allocation or free can need, in the order the runtime
// paths nest them (thread registry -> accounting registry -> caches -> large-mapping cache),
// so that the child inherits none of them held by a thread that does not exist there.

/// The caches the fork handlers lock and unlock: every size class and every dedicated cache
/// (none joins during a fork: `cache::register_dedicated`).
fn for_each_cache(mut f: impl FnMut(&crate::cache::SlabCache)) {
    for c in classes::PLAIN.iter().chain(classes::ACCOUNTED.iter()) {
        f(c);
    }
    crate::cache::for_each_dedicated(&mut f);
}

unsafe extern "C" fn fork_prepare() {
    // First: the tenant locks' holders allocate, so they come before every allocator lock.
    hooks::fork_prepare_tenants();
    thread_cache::fork_prepare();
    hooks::fork_prepare();
    for_each_cache(|c| c.lock_for_fork());
    large::fork_prepare();
}

unsafe extern "C" fn fork_parent() {
    // SAFETY (all unlocks below): locked by fork_prepare in this thread.
    unsafe { large::fork_release() };
    for_each_cache(|c| unsafe { c.unlock_after_fork() });
    hooks::fork_parent();
    // SAFETY: as above.
    unsafe { thread_cache::fork_parent() };
    hooks::fork_release_tenants();
}

unsafe extern "C" fn fork_child() {
    // SAFETY (all unlocks below): locked by fork_prepare in the thread that forked, which is
    // the child's only thread.
    unsafe { large::fork_release() };
    for_each_cache(|c| unsafe { c.unlock_after_fork() });
    hooks::fork_child();
    // SAFETY: as above.
    unsafe { thread_cache::fork_child() };
    hooks::fork_release_tenants();
}

#[cfg(test)]
mod tests {
    use core::alloc::Layout;

    use crate::dedicated::Cache;

    /// A dedicated cache cannot be registered while a fork is in progress (between the
    /// prepare handler, which locks every registered cache, and the parent or child handler,
    /// which unlocks them): a cache registered then was never locked, and was unlocked
    /// anyway (releasing a lock another thread held) or inherited locked by the child.
    /// Registration waits for the fork to finish. Runs the handlers without forking.
    #[test]
    fn a_cache_built_during_a_fork_registers_after_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let layout = Layout::from_size_align(40, 8).unwrap();
        let before = Cache::builder("fork-before", layout).build();
        // SAFETY: paired with fork_parent below, in this thread.
        unsafe { super::fork_prepare() };
        assert!(before.core.lock_is_held(), "prepare locks every cache");
        let built = Arc::new(AtomicBool::new(false));
        let builder = {
            let built = built.clone();
            std::thread::spawn(move || {
                let c = Cache::builder("fork-during", layout).build();
                built.store(true, Ordering::SeqCst);
                c
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !built.load(Ordering::SeqCst),
            "a cache was registered during the fork"
        );
        // SAFETY: after fork_prepare in this thread.
        unsafe { super::fork_parent() };
        let during = builder.join().unwrap();
        assert!(!before.core.lock_is_held() && !during.core.lock_is_held());
    }
}
