//! Verified heap objects: every object the workloads allocate is stamped with a tag at its
//! head, its size after the tag (when it fits), and a size-dependent word in its last bytes; the
//! stamp is checked right before the object is freed. A corrupt stamp means the allocator
//! handed out overlapping memory (or someone wrote past an object), and the workload fails.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Alignment of every workload object (what a typical Rust `Box<[u64]>` asks for).
pub const ALIGN: usize = 8;

/// The smallest size whose object also records its own size (see [`Block::into_raw`]).
pub const SELF_DESCRIBING_MIN: usize = 24;

#[inline]
fn tail_word(tag: u64, size: usize) -> u64 {
    tag.rotate_left(17) ^ (size as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Write the stamp of (`tag`, `size`) into `p`.
///
/// # Safety
/// `p` must be valid for writes of `size` bytes.
#[inline]
pub unsafe fn stamp(p: *mut u8, size: usize, tag: u64) {
    let head = tag.to_le_bytes();
    // SAFETY (all three writes): `p..p+size` is writable (caller); each write stays inside it.
    unsafe {
        core::ptr::copy_nonoverlapping(head.as_ptr(), p, size.min(8));
        if size >= SELF_DESCRIBING_MIN {
            p.add(8).cast::<u64>().write_unaligned(size as u64);
        }
        if size > 8 {
            // the last min(8, size - 8) bytes carry (the start of) the tail word
            let t = tail_word(tag, size).to_le_bytes();
            let n = (size - 8).min(8);
            core::ptr::copy_nonoverlapping(t.as_ptr(), p.add(size - n), n);
        }
    }
}

/// Whether `p` still carries the stamp of (`tag`, `size`).
///
/// # Safety
/// `p` must be valid for reads of `size` bytes.
#[inline]
pub unsafe fn check(p: *const u8, size: usize, tag: u64) -> bool {
    let head = tag.to_le_bytes();
    let n = size.min(8);
    // SAFETY: as in `stamp`, every read stays inside `p..p+size`.
    unsafe {
        if core::slice::from_raw_parts(p, n) != &head[..n] {
            return false;
        }
        if size >= SELF_DESCRIBING_MIN && p.add(8).cast::<u64>().read_unaligned() != size as u64 {
            return false;
        }
        if size > 8 {
            let t = tail_word(tag, size).to_le_bytes();
            let n = (size - 8).min(8);
            if core::slice::from_raw_parts(p.add(size - n), n) != &t[..n] {
                return false;
            }
        }
    }
    true
}

/// One live, stamped heap object allocated through the global allocator.
/// Dropping it frees it without checking; [`Block::free`] checks first.
#[derive(Debug)]
pub struct Block {
    ptr: NonNull<u8>,
    size: usize,
    tag: u64,
}

// SAFETY: a Block owns its memory exclusively; handing it to another thread (which then
// frees it: a remote free) is exactly what the workloads want to exercise.
unsafe impl Send for Block {}

impl Block {
    /// Allocate `size` (> 0) bytes and stamp them with `tag`.
    #[inline]
    pub fn new(size: usize, tag: u64) -> Block {
        let layout = Layout::from_size_align(size, ALIGN).expect("bad layout");
        // SAFETY: size > 0 is checked by the assert below before use; layout is valid.
        assert!(size > 0);
        let p = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(p) else {
            handle_alloc_error(layout)
        };
        // SAFETY: fresh allocation of `size` bytes.
        unsafe { stamp(ptr.as_ptr(), size, tag) };
        Block { ptr, size, tag }
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The object's tag.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Start of the object.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether the stamp is intact.
    #[inline]
    pub fn check(&self) -> bool {
        // SAFETY: we own `size` live bytes at `ptr`.
        unsafe { check(self.ptr.as_ptr(), self.size, self.tag) }
    }

    /// Check the stamp, then free. Returns whether the stamp was intact.
    #[inline]
    pub fn free(self) -> bool {
        let ok = self.check();
        drop(self);
        ok
    }

    /// Give up ownership as a bare pointer (the object describes itself: tag, size, tail).
    /// Panics if `size < SELF_DESCRIBING_MIN`.
    pub fn into_raw(self) -> *mut u8 {
        assert!(self.size >= SELF_DESCRIBING_MIN);
        let p = self.ptr.as_ptr();
        core::mem::forget(self);
        p
    }

    /// Take back ownership of an object given up with [`Block::into_raw`].
    ///
    /// # Safety
    /// `p` must come from `into_raw` and not have been taken back yet. A damaged size word
    /// makes this read out of bounds, so call it only on objects nobody else wrote.
    pub unsafe fn from_raw(p: *mut u8) -> Block {
        // SAFETY: a self-describing object has its tag at 0 and size at 8 (caller).
        let (tag, size) = unsafe {
            (
                p.cast::<u64>().read_unaligned(),
                p.add(8).cast::<u64>().read_unaligned() as usize,
            )
        };
        Block {
            ptr: NonNull::new(p).expect("null"),
            size,
            tag,
        }
    }
}

impl Drop for Block {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this exact layout, freed only here.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.size, ALIGN),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_roundtrip_and_detects_damage() {
        for size in [1, 7, 8, 9, 15, 16, 23, 24, 25, 100, 4096] {
            let b = Block::new(size, 0xDEAD_BEEF_0000_0000 ^ size as u64);
            assert!(b.check(), "size {size}");
            // damage the last byte: detected whenever a tail word exists or it is in the head
            // SAFETY: inside the object.
            unsafe { *b.as_ptr().add(size - 1) ^= 0xFF };
            assert!(!b.check(), "size {size}");
            assert!(!b.free());
        }
    }

    #[test]
    fn raw_roundtrip() {
        let b = Block::new(64, 42);
        let p = b.into_raw();
        // SAFETY: from into_raw, once.
        let b = unsafe { Block::from_raw(p) };
        assert_eq!((b.size(), b.tag()), (64, 42));
        assert!(b.free());
    }
}
