//! Large allocations: requests above the largest size class, or aligned above a page. Each
//! gets its own mapping, with a one-page header just before the object:
//!
//! ```text
//!   base                     ptr = base + PAGE (aligned as asked)
//!   [ LargeHeader ... pad ]  [ object: usable bytes, a page multiple ]
//!   map_len == PAGE + usable
//! ```
//!
//! Growing and shrinking use `mremap`, which moves page tables instead of copying bytes. A
//! fresh mapping reads as zero, so `alloc_zeroed` needs no memset.

use core::ptr;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::sys::{self, PAGE};

const MAGIC: usize = 0x51ab_c91a_56e0_0001;

#[repr(C)]
struct LargeHeader {
    magic: usize,
    /// Bytes mapped from the header (which is the mapping's start) on.
    map_len: usize,
    /// Owner objcg id (0 = uncharged); written by the charge hooks.
    owner: AtomicU32,
}

/// Live large allocations and their mapped bytes, for `stats()`.
pub static COUNT: AtomicUsize = AtomicUsize::new(0);
pub static MAPPED: AtomicUsize = AtomicUsize::new(0);

#[inline]
fn header(p: *mut u8) -> *mut LargeHeader {
    p.wrapping_sub(PAGE) as *mut LargeHeader
}

pub fn usable_for(size: usize) -> Option<usize> {
    let s = size.max(1).checked_add(PAGE - 1)? & !(PAGE - 1);
    if s > isize::MAX as usize / 2 {
        return None;
    }
    Some(s)
}

/// Maps a large allocation of at least `size` bytes aligned to `align`. Null when impossible.
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    let Some(usable) = usable_for(size) else {
        return ptr::null_mut();
    };
    let map_len = PAGE + usable;
    let p = if align <= PAGE {
        let base = sys::map(map_len);
        if base.is_null() {
            return base;
        }
        // SAFETY: the mapping is map_len >= 2 * PAGE bytes.
        unsafe { base.add(PAGE) }
    } else {
        // Map extra, then cut so that the object is aligned and the header page precedes it.
        let Some(total) = map_len.checked_add(align) else {
            return ptr::null_mut();
        };
        let raw = sys::map(total);
        if raw.is_null() {
            return raw;
        }
        let p = (raw as usize + PAGE + align - 1) & !(align - 1);
        let base = p - PAGE;
        let head = base - raw as usize;
        let tail = total - head - map_len;
        // SAFETY: both ranges are page-aligned parts of the mapping just made, outside
        // [base, base + map_len).
        unsafe {
            if head != 0 {
                sys::unmap(raw, head);
            }
            if tail != 0 {
                sys::unmap((base + map_len) as *mut u8, tail);
            }
        }
        p as *mut u8
    };
    // SAFETY: the header page is mapped, writable and ours.
    unsafe {
        ptr::write(
            header(p),
            LargeHeader {
                magic: MAGIC,
                map_len,
                owner: AtomicU32::new(0),
            },
        );
    }
    COUNT.fetch_add(1, Ordering::Relaxed);
    MAPPED.fetch_add(map_len, Ordering::Relaxed);
    p
}

/// Checks the header of a large allocation, aborting with a message when it is not one.
///
/// # Safety
/// `p` must be readable one page below (true of every pointer this module returned).
unsafe fn checked(p: *mut u8) -> *mut LargeHeader {
    if p as usize & (PAGE - 1) != 0 {
        sys::fatal("free of a pointer that slabcg did not allocate (large, misaligned)");
    }
    let h = header(p);
    // SAFETY: the caller guarantees the header page is readable.
    if unsafe { (*h).magic } != MAGIC {
        sys::fatal("free of a pointer that slabcg did not allocate, or a double free (large)");
    }
    h
}

/// Unmaps a large allocation.
///
/// # Safety
/// `p` must be a live large allocation.
pub unsafe fn free(p: *mut u8) {
    // SAFETY: caller's contract.
    unsafe {
        let h = checked(p);
        let len = (*h).map_len;
        (*h).magic = 0;
        COUNT.fetch_sub(1, Ordering::Relaxed);
        MAPPED.fetch_sub(len, Ordering::Relaxed);
        sys::unmap(h as *mut u8, len);
    }
}

/// Usable bytes of a large allocation.
///
/// # Safety
/// `p` must be a live large allocation.
pub unsafe fn usable_size(p: *mut u8) -> usize {
    // SAFETY: caller's contract.
    unsafe { (*checked(p)).map_len - PAGE }
}

/// The owner word of a large allocation (for the charge hooks).
///
/// # Safety
/// `p` must be a live large allocation.
pub unsafe fn owner(p: *mut u8) -> &'static AtomicU32 {
    // SAFETY: caller's contract; the header lives as long as the allocation, and the caller
    // does not keep the reference past the free.
    unsafe { &(*checked(p)).owner }
}

/// Resizes a page-aligned large allocation in place or by `mremap`. Null when the OS refuses
/// (the allocation is then unchanged).
///
/// # Safety
/// `p` must be a live large allocation aligned to at most PAGE.
pub unsafe fn realloc(p: *mut u8, new_size: usize) -> *mut u8 {
    let Some(usable) = usable_for(new_size) else {
        return ptr::null_mut();
    };
    let new_len = PAGE + usable;
    // SAFETY: caller's contract: p is live and its header readable.
    unsafe {
        let h = checked(p);
        let old_len = (*h).map_len;
        if new_len == old_len {
            return p;
        }
        if new_len < old_len {
            sys::unmap((h as *mut u8).add(new_len), old_len - new_len);
            (*h).map_len = new_len;
            MAPPED.fetch_sub(old_len - new_len, Ordering::Relaxed);
            return p;
        }
        let nb = sys::remap(h as *mut u8, old_len, new_len);
        if nb.is_null() {
            return nb;
        }
        let nh = nb as *mut LargeHeader;
        (*nh).map_len = new_len;
        MAPPED.fetch_add(new_len - old_len, Ordering::Relaxed);
        nb.add(PAGE)
    }
}
