//! Entry points for callers that know no [`Layout`]: C's malloc family
//! (crate `slabcg-capi`, `libslabcg.so`).
//!
//! The crate's one documented public module: the API for C ABI front-ends (a `malloc`/`free`/`realloc`
//! shim over the allocator that `SlabAlloc` installs); [`free`] also takes blocks of the
//! global allocator.
//!
//! A C `free` carries no size, so [`free`] finds the class from the address instead: a
//! pointer inside a segment (one bitmap load, `segment::is_segment`) is a slot of the cache
//! named in the segment header (with `hardened`, checked to be a slot's start); any other
//! pointer must be a large allocation, whose header page precedes it and is marked live in
//! `addr_map` (so an address slabcg never handed out, such as a direct `mmap`, is reported
//! with the fatal message before that page is read). The Rust paths
//! (`GlobalAlloc::dealloc`) are untouched: they still compute the class from the layout and
//! never read a segment header.
//!
//! Sizes here are what the slot or mapping holds, so a block keeps the category its
//! allocation gave it: a slot of class `c` is described by the layout
//! `(class_size(c), 8)`, which maps back to `c`, and a large block above [`MAX_SMALL`] by
//! `(usable, PAGE)`, which maps back to "large".

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;

use crate::global::{alloc_impl, free_class};
#[cfg(feature = "hardened")]
use crate::segment::Segment;
pub use crate::size_class::c_size;
use crate::size_class::{c_class_of_small, class_for, class_size, Kind, MAX_SMALL};
use crate::sys::PAGE;
use crate::{charge, large, segment, thread_cache, SlabAlloc};
use slabcg_accounting::hooks;

/// Allocates `size` bytes aligned to `align` (a power of two), charged to the current tenant
/// when the thread is in one. Null when the request cannot be served or a tenant's limit
/// refused it. A zero `size` gets the smallest slot of its alignment.
#[inline]
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    alloc_impl(size, align)
}

/// C `malloc(n)`'s fast path: a slot of the class of [`c_size`]`(n)` from this thread's bin,
/// when `n` is at most 1 KiB, the thread is in no tenant and the bin holds one; null
/// otherwise, and the caller then takes [`alloc`]`(c_size(n), 8)`, which serves every case.
/// With initial-exec TLS words (feature `ie-tls`, the C library's default) it makes no call,
/// so a caller that tail-calls its slow path needs no stack frame: a
/// third of the instructions of a C malloc+free pair were frame set-up and a second pass
/// over what the general path had already decided (callgrind, `capi/examples/pairs.c`).
#[inline(always)]
pub fn c_malloc_fast(n: usize) -> *mut u8 {
    let Some(c) = c_class_of_small(n) else {
        return ptr::null_mut();
    };
    if hooks::current_objcg() != 0 {
        return ptr::null_mut();
    }
    let tc = thread_cache::get_if_touched();
    if tc.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a non-null `get_if_touched` is this thread's cache, which lives as long as the
    // thread. Before the thread is set up and after its teardown its bins are empty with no
    // room (capacity 0), so the pop finds nothing and the push of `c_free_fast` fails.
    unsafe { (*tc).bin(c, Kind::Plain).pop() }
}

/// The class of `p` when it lies in a plain size-class segment, else None: the byte map
/// (`addr_map::plain_class`).
#[cfg(not(any(miri, feature = "no-class-map")))]
#[inline(always)]
fn plain_class(p: *mut u8) -> Option<usize> {
    crate::addr_map::plain_class(p)
}

/// [`plain_class`] under Miri and with `no-class-map`, which have no byte map: the bitmap and
/// the segment header (15 instructions where the map takes 3, BENCHMARKS.md section 9).
#[cfg(any(miri, feature = "no-class-map"))]
#[inline(always)]
fn plain_class(p: *mut u8) -> Option<usize> {
    if !segment::is_segment(p) {
        return None;
    }
    // SAFETY: p lies in a segment, whose header is written before its bit is set.
    let c = unsafe { (*segment::segment_of(p)).plain_class };
    (c != u32::MAX).then_some(c as usize)
}

/// C `free(p)`'s fast path: true when `p` went into this thread's bin, a plain slot of a
/// size class with room in its bin; false, with nothing done, for everything else (null,
/// large blocks, accounted slots, a dedicated cache's, a full or closed bin, every pointer in
/// `hardened` builds), and the caller then takes [`free`]. Like [`c_malloc_fast`], no call.
///
/// # Safety
/// As [`free`].
#[inline(always)]
pub unsafe fn c_free_fast(p: *mut u8) -> bool {
    // Hardened builds check every sizeless free for a slot's start (`slot_class`).
    if cfg!(feature = "hardened") {
        return false;
    }
    // An accounted slot and a dedicated cache's take the general path, which uncharges or
    // reports; so do large blocks, foreign pointers and null.
    let Some(class) = plain_class(p) else {
        return false;
    };
    let tc = thread_cache::get_if_touched();
    if tc.is_null() {
        return false;
    }
    // SAFETY: tc is this thread's cache, as in `c_malloc_fast`; p is a live plain slot of
    // class `class` (the caller's contract and the map), given up.
    unsafe { (*tc).bin(class, Kind::Plain).push(p) }
}

/// As [`alloc`], with the block zeroed (a large block comes from a fresh mapping, which is
/// zero already).
#[inline]
pub fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
    if align.is_power_of_two() && class_for(size, align).is_none() {
        return charge::alloc_large(size, align, true);
    }
    let p = alloc_impl(size, align);
    if !p.is_null() {
        // SAFETY: p holds at least size writable bytes.
        unsafe { ptr::write_bytes(p, 0, size) };
    }
    p
}

/// The size class of slot `p`, from its segment header; with `hardened`, after checking that
/// `p` is the start of a slot (a pointer into the middle of a block would otherwise go into
/// a bin and could be handed out again before a flush reports it).
///
/// # Safety
/// `p` must lie in a segment (`segment::is_segment`).
#[inline(always)]
unsafe fn slot_class(p: *mut u8) -> usize {
    let seg = segment::segment_of(p);
    // SAFETY: segments are never unmapped and their header is written once at creation,
    // before any slot of theirs is handed out; the cache it names is never freed.
    let class = unsafe { (*(*seg).cache).class };
    // The check cost 20 instructions per C malloc+free pair (105 -> 125, callgrind,
    // capi/examples/pairs.c, before the C fast paths), a fifth of the path: the hardened build makes it on every
    // free; the default one, like mimalloc's and jemalloc's, trusts the pointer here and
    // reports a slot's middle when its slab's frees are checked (the bin's flush).
    #[cfg(feature = "hardened")]
    // SAFETY: as above; `p` lies in `seg` (the caller's contract).
    let start = unsafe { Segment::is_slot_start(seg, p) };
    #[cfg(not(feature = "hardened"))]
    let start = true;
    // One test for both reports on the common path.
    if class == u32::MAX || !start {
        bad_sizeless_free(class);
    }
    class as usize
}

#[cold]
#[inline(never)]
fn bad_sizeless_free(class: u32) -> ! {
    if class == u32::MAX {
        crate::sys::fatal("free() of an object of a dedicated cache (free it with Cache::free)")
    }
    crate::sys::fatal("free of a pointer that is not the start of a slot")
}

/// Frees `p` (null: nothing), whatever its size and alignment.
///
/// # Safety
/// `p` must be null or a live block returned by [`alloc`], [`alloc_zeroed`], [`realloc`] or
/// the global allocator of this copy of the crate, freed once. A pointer this allocator did
/// not hand out (outside its segments and large blocks; with `hardened`, not the start of a
/// slot too) is reported at once, the process aborting with a message; other invalid and
/// double frees where the slow paths can tell, as `GlobalAlloc::dealloc` does.
#[inline]
pub unsafe fn free(p: *mut u8) {
    if p.is_null() {
        return;
    }
    if segment::is_segment(p) {
        // SAFETY: p is a live slot (caller's contract) of the class its header names.
        unsafe { free_class(p, slot_class(p)) }
    } else {
        // SAFETY: a live block outside every segment is a large allocation.
        unsafe { charge::free_large(p) }
    }
}

/// Bytes usable at `p` (at least what was asked for); 0 for null.
///
/// # Safety
/// `p` must be null or a live block of this allocator.
pub unsafe fn usable_size(p: *mut u8) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: caller's contract.
    unsafe { SlabAlloc::usable_size(p) }
}

/// Resizes `p` to `new_size` bytes (> 0), keeping `min(old usable, new_size)` bytes, aligned
/// to at least 8 (16 when the caller rounds `new_size` to 16 above 8). Null when the block
/// cannot be resized (then it is unchanged, still live): out of memory, or the owner's limit
/// (never for a shrink into a size class of the caller's tenant's block, whose charge moves
/// with it, as in `GlobalAlloc::realloc`). `p` must not be null.
///
/// # Safety
/// `p` must be a live block of this allocator; on success it is freed (or returned).
pub unsafe fn realloc(p: *mut u8, new_size: usize) -> *mut u8 {
    // GlobalAlloc::realloc's bound (new_size rounded to the layout's alignment fits isize).
    if new_size > isize::MAX as usize - PAGE {
        return ptr::null_mut();
    }
    if segment::is_segment(p) {
        // SAFETY: p is a live slot of class c; (class_size(c), 8) maps back to c, so the
        // GlobalAlloc contract (the layout the block was allocated with) holds for the
        // allocator's own category computation.
        return unsafe {
            let c = slot_class(p);
            let layout = Layout::from_size_align_unchecked(class_size(c), 8);
            SlabAlloc::new().realloc(p, layout, new_size)
        };
    }
    // SAFETY: a live block outside every segment is a large allocation.
    let usable = unsafe { large::usable_size(p) };
    if usable > MAX_SMALL && new_size > MAX_SMALL {
        // Large to large: mremap in place or by moving page tables (the block keeps page
        // alignment, all that a C realloc promises).
        // SAFETY: (usable, PAGE) maps back to "large" since usable > MAX_SMALL.
        return unsafe {
            let layout = Layout::from_size_align_unchecked(usable, PAGE);
            SlabAlloc::new().realloc(p, layout, new_size)
        };
    }
    // A shrink into a size class of a block of the caller's tenant moves the charge with
    // the block, so that no limit refuses it (as `GlobalAlloc::realloc` does): a large
    // block, or a small one aligned above a page (`memalign`), which is large too.
    if new_size < usable && hooks::accounting_active() {
        if let Some(c) = class_for(new_size, 8) {
            // SAFETY: p is a live large allocation holding at least new_size bytes to keep,
            // and new_size <= class_size(c).
            let q = unsafe { charge::realloc_shrink_large(p, c, new_size) };
            if !q.is_null() {
                return q;
            }
        }
    }
    // Into a size class, or a small block aligned above a page: a new block of malloc's
    // alignment, not the old one's.
    let q = alloc_impl(new_size, 8);
    if !q.is_null() {
        // SAFETY: both blocks are live and distinct and hold the bytes copied; p is freed
        // once.
        unsafe {
            ptr::copy_nonoverlapping(p, q, usable.min(new_size));
            charge::free_large(p);
        }
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of every category and many alignments come back through the sizeless free,
    /// and the memory is reused afterwards (a wrong class would hand a slot of one size to a
    /// request of another: the later writes would overlap).
    #[test]
    fn sizeless_free_finds_every_category() {
        for round in 0..3 {
            let mut live = Vec::new();
            for &(size, align) in &[
                (0, 8),
                (1, 8),
                (24, 16),
                (100, 64),
                (4000, 4096),
                (100, 8192),
                (200 << 10, 8),
                (3 << 20, 1 << 20),
                (128 << 10, 8),
            ] {
                let p = alloc(size, align);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "{size} {align}");
                // SAFETY: p is live with at least `size` bytes.
                let u = unsafe { usable_size(p) };
                assert!(u >= size);
                // SAFETY: as above.
                unsafe { ptr::write_bytes(p, round as u8, u) };
                live.push((p, u));
            }
            for (p, u) in live {
                // SAFETY: each block is live, written with the round's byte; freed once.
                unsafe {
                    assert_eq!(*p.add(u - 1), round as u8);
                    free(p);
                }
            }
        }
    }

    /// The C entry points' shape: one call per malloc or free. Inlined into the test's loop,
    /// the thread-cache word's read (`fast_tls::get_stable`, which the compiler may reuse)
    /// could be hoisted above the warm-up and read 0 throughout.
    #[inline(never)]
    fn c_malloc(n: usize) -> *mut u8 {
        c_malloc_fast(n)
    }

    /// As [`c_malloc`].
    ///
    /// # Safety
    /// As [`c_free_fast`].
    #[inline(never)]
    unsafe fn c_free(p: *mut u8) -> bool {
        // SAFETY: forwarded contract.
        unsafe { c_free_fast(p) }
    }

    /// The C fast paths serve and take back what the general paths would: a slot of the class
    /// of `c_size(n)`, 16-aligned above 8 bytes, the same slot again after a fast free (the
    /// bin is LIFO); and the free's fast path declines what it must leave to [`free`]: null,
    /// a large block, a dedicated cache's slot, a tenant's (accounted) slot.
    #[test]
    fn c_fast_paths_agree_with_the_general_ones() {
        // The thread's first allocation sets its cache up (with initial-exec TLS words the
        // fast paths decline until then; otherwise its bins are empty and closed until then).
        // SAFETY: a live block, freed once.
        unsafe { free(alloc(8, 8)) };
        let (mut served, mut taken) = (0, 0);
        for n in 0..=1100usize {
            let mut p = c_malloc(n);
            if p.is_null() {
                p = alloc(c_size(n), 8);
            } else {
                served += 1;
                assert!(n <= 1024);
            }
            assert!(!p.is_null());
            if n > 8 {
                assert_eq!(p as usize % 16, 0, "malloc({n})");
            }
            // SAFETY: p is live; freed once, by the fast path or, declined, by `free`.
            unsafe {
                let u = usable_size(p);
                assert!(u >= n);
                if n <= 1024 {
                    assert_eq!(u, class_size(crate::size_class::class_of(c_size(n))), "{n}");
                }
                ptr::write_bytes(p, 0x5a, n);
                if !c_free(p) {
                    free(p);
                    continue;
                }
                taken += 1;
                if n <= 1024 {
                    assert_eq!(c_malloc(n), p, "the bin's head comes back");
                    free(p);
                }
            }
        }
        assert!(
            served > 1000,
            "the malloc fast path served {served} of 1,025"
        );
        if cfg!(feature = "hardened") {
            assert_eq!(taken, 0, "hardened: every C free is checked");
        } else {
            assert!(taken > 1000, "the free fast path took {taken} of 1,101");
        }

        let big = alloc(200 << 10, 8);
        let cache =
            crate::Cache::builder("c-fast-path", core::alloc::Layout::new::<[u64; 4]>()).build();
        let obj = cache.alloc().unwrap().as_ptr();
        let t = slabcg_accounting::Tenant::new("c-fast-path");
        let charged = {
            let _in = t.enter();
            alloc(32, 8)
        };
        assert!(crate::owner::is_accounted(charged));
        // SAFETY: null and three live blocks: each declined with nothing done, then freed
        // once by its own path.
        unsafe {
            assert!(!c_free(ptr::null_mut()));
            assert!(!c_free(big));
            assert!(!c_free(obj));
            assert!(!c_free(charged));
            free(big);
            cache.free(core::ptr::NonNull::new_unchecked(obj));
            free(charged);
        }
        assert_eq!(
            t.current_exact(),
            0,
            "the general free uncharged the tenant's slot"
        );
        assert_eq!(cache.live_objects(), 0);
    }

    /// Realloc between categories keeps the contents and usable sizes cover the request.
    #[test]
    fn realloc_moves_between_categories() {
        let mut p = alloc(10, 8);
        // SAFETY: p holds 10 bytes.
        unsafe { ptr::copy_nonoverlapping(b"0123456789".as_ptr(), p, 10) };
        for n in [20usize, 3000, 300 << 10, 5 << 20, 200 << 10, 64, 10] {
            // SAFETY: p is live; it is replaced by the result.
            let q = unsafe { realloc(p, n) };
            assert!(!q.is_null());
            // SAFETY: q is live with at least n >= 10 bytes.
            unsafe {
                assert!(usable_size(q) >= n);
                assert_eq!(core::slice::from_raw_parts(q, 10), b"0123456789");
            }
            p = q;
        }
        let big = alloc(100, 8192);
        // SAFETY: big is live with 100 bytes; realloc moves it into a class.
        unsafe {
            *big = 7;
            let q = realloc(big, 50);
            assert_eq!(*q, 7);
            free(q);
            free(p);
        }
    }

    #[test]
    fn zeroed_blocks_are_zero_after_reuse() {
        for _ in 0..2 {
            let p = alloc(256, 8);
            // SAFETY: p holds 256 bytes; freed once.
            unsafe {
                ptr::write_bytes(p, 0xff, 256);
                free(p);
            }
            let q = alloc_zeroed(256, 8);
            // SAFETY: q holds 256 bytes.
            assert!(unsafe { core::slice::from_raw_parts(q, 256) }
                .iter()
                .all(|&b| b == 0));
            // SAFETY: q is live.
            unsafe { free(q) };
        }
    }
}
