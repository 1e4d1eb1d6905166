//! Stamps that tell whether a block kept its contents, and the size a block must be charged:
//! shared by the randomized workloads (`stress.rs`, `churn.rs`).

use std::alloc::Layout;

use slabcg::allocator::size_class::{class_for, class_size};
use slabcg::SlabAlloc;

/// Writes `stamp` into the first bytes of the block and a byte derived from it at its end.
///
/// # Safety
/// `p` must hold at least `size` writable bytes.
pub unsafe fn write_stamp(p: *mut u8, size: usize, stamp: u64) {
    let bytes = stamp.to_le_bytes();
    let n = size.min(8);
    // SAFETY: p holds size >= n bytes (caller's contract).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, n);
        *p.add(size - 1) = end_byte(stamp, size);
    }
}

fn end_byte(stamp: u64, size: usize) -> u8 {
    if size <= 8 {
        // The last byte is part of the prefix.
        stamp.to_le_bytes()[size - 1]
    } else {
        (stamp as u8) ^ 0x5a
    }
}

/// Panics unless the block still holds `stamp` (its first `min(size, 8)` bytes, and the end
/// byte when `whole`).
///
/// # Safety
/// `p` must hold at least `size` readable bytes.
pub unsafe fn check_stamp(p: *const u8, size: usize, stamp: u64, whole: bool) {
    let bytes = stamp.to_le_bytes();
    let n = size.min(8);
    // SAFETY: p holds size >= n bytes (caller's contract).
    let prefix = unsafe { std::slice::from_raw_parts(p, n) };
    assert_eq!(prefix, &bytes[..n], "block at {p:?} lost its stamp");
    if whole {
        // SAFETY: as above.
        assert_eq!(
            unsafe { *p.add(size - 1) },
            end_byte(stamp, size),
            "block at {p:?}: end"
        );
    }
}

/// What a block of `layout` must be charged, from the size classes (not from the allocator's
/// own `usable_size`): its class's size, or for a large block the size rounded up to pages.
pub fn expected_usable(layout: Layout) -> u64 {
    match class_for(layout.size(), layout.align()) {
        Some(c) => class_size(c) as u64,
        None => layout.size().next_multiple_of(4096) as u64,
    }
}

pub fn usable(p: *mut u8) -> u64 {
    // SAFETY: p is a live allocation of the global SlabAlloc.
    unsafe { SlabAlloc::usable_size(p) as u64 }
}
