//! Shared by the randomized workloads (`stress.rs`, `churn.rs`): allocating and checking a
//! fresh block, stamps that tell whether a block kept its contents, the size a block must be
//! charged, and the panic hook.

use std::alloc::{self, Layout};

use slabcg::allocator::{class_for, class_size};
use slabcg::SlabAlloc;

/// Writes `stamp` into the first bytes of the block and a byte derived from it at its end.
///
/// # Safety
/// `p` must hold at least `size` writable bytes.
pub unsafe fn write_stamp(p: *mut u8, size: usize, stamp: u64) {
    let bytes = stamp.to_le_bytes();
    let n = size.min(8);
    // SAFETY: p holds size bytes (caller's contract), and n <= size.
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

/// The allocator's usable size of `p`.
///
/// # Safety
/// `p` must be a live allocation of the global `SlabAlloc`.
unsafe fn usable(p: *mut u8) -> u64 {
    // SAFETY: caller's contract.
    unsafe { SlabAlloc::usable_size(p) as u64 }
}

/// Makes a failed check on any thread end the process at once, with its message and a
/// backtrace written straight to stderr: other threads could otherwise wait for the failed
/// one forever (at a barrier), and the test harness's output capture is lost with the process.
pub fn abort_on_panic() {
    std::panic::set_hook(Box::new(|info| {
        use std::io::Write;
        let trace = std::backtrace::Backtrace::force_capture();
        let _ = write!(std::io::stderr(), "{info}\n{trace}\n");
        std::process::abort();
    }));
}

/// Allocates `layout` (zeroed or not) through the global allocator, in the caller's scope;
/// null when refused.
pub fn allocate(layout: Layout, zeroed: bool) -> *mut u8 {
    assert_ne!(layout.size(), 0, "the workloads allocate at least a byte");
    // SAFETY: a layout of non-zero size (checked above).
    unsafe {
        if zeroed {
            alloc::alloc_zeroed(layout)
        } else {
            alloc::alloc(layout)
        }
    }
}

/// Takes in a block `allocate(layout, zeroed)` just returned: checks that it is aligned,
/// that it is zero when asked zeroed (its first 4 KiB and its last byte) and that its
/// usable size is the one it must be charged; stamps it with `stamp`. Returns the usable
/// size.
///
/// # Safety
/// `p` must be that block (non-null, live, `layout.size()` bytes), not used since.
pub unsafe fn take_fresh(p: *mut u8, layout: Layout, zeroed: bool, stamp: u64) -> u64 {
    assert_eq!(p as usize % layout.align(), 0, "misaligned block");
    let size = layout.size();
    if zeroed {
        // SAFETY: p holds size bytes (caller's contract).
        let head = unsafe { std::slice::from_raw_parts(p, size.min(4096)) };
        assert!(head.iter().all(|&b| b == 0), "alloc_zeroed: dirty block");
        // SAFETY: as above.
        assert_eq!(unsafe { *p.add(size - 1) }, 0, "alloc_zeroed: dirty end");
    }
    // SAFETY (both): p is a live allocation of size bytes (caller's contract).
    let usable = unsafe {
        write_stamp(p, size, stamp);
        usable(p)
    };
    assert_eq!(usable, expected_usable(layout), "usable size of {layout:?}");
    usable
}

/// After `old` (stamped `old_stamp`) was reallocated to `new_size` bytes at `p`: checks the
/// bytes it kept, stamps the block with `stamp` and checks its charged size. Returns its
/// layout and usable size.
///
/// # Safety
/// `p` must hold at least `new_size` writable bytes.
pub unsafe fn restamp_resized(
    p: *mut u8,
    old: Layout,
    old_stamp: u64,
    new_size: usize,
    stamp: u64,
) -> (Layout, u64) {
    let kept = new_size.min(old.size());
    // SAFETY (both): p holds new_size >= kept bytes (caller's contract), copied from the old
    // block.
    unsafe {
        check_stamp(p, kept, old_stamp, kept == old.size());
        write_stamp(p, new_size, stamp);
    }
    let layout = Layout::from_size_align(new_size, old.align()).unwrap();
    // SAFETY: p is a live allocation (caller's contract).
    let usable = unsafe { usable(p) };
    assert_eq!(usable, expected_usable(layout), "usable size of {layout:?}");
    (layout, usable)
}
