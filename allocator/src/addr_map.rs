//! The process-wide map of the address ranges slabcg handed out blocks from, read without
//! locks: whether an address lies in one of our segments, and whether a page is the header
//! page of a live large allocation. A free of an address this allocator did not hand out
//! (memory of a direct `mmap`, of another allocator, a pointer into the middle of a block)
//! is then told from a real block before anything is read at that address, and reported
//! with a message instead of faulting on a header that is not there.
//!
//! - Segments: one bit per 4 MiB of a 47-bit address space (2^25 bits in 2^19 words, 4 MiB
//!   of zero-filled `.bss` that costs nothing until touched). Segments are never unmapped,
//!   so a bit once set stays set.
//! - Large allocations: one bit per OS page, set for the header page of every live large
//!   allocation, in a two-level radix: 2^17 roots (one per GiB, 1 MiB of `.bss`), each
//!   pointing to a leaf of 2^18 bits (32 KiB) mapped on the first large allocation in that
//!   GiB and never unmapped. Only header pages are marked, so a page-aligned pointer into
//!   the middle of a large block is not taken for a block either.
//!
//! Races. A bit is set after the block's header is written and before the block is handed
//! out, and cleared before its mapping is cached, moved or unmapped. A free that reads the
//! bit concurrently with another thread's free of the same block (which clears it and may
//! unmap the pages) is a double free already: the map is there to turn a free of a foreign
//! address into a message, not to make racing double frees defined; it stays best effort
//! there, as the rest of the double-free detection.

use core::ptr;
#[cfg(not(any(miri, feature = "no-class-map")))]
use core::sync::atomic::AtomicU8;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::sys::PAGE;

/// log2 of the segment size (`segment::SEGMENT_SHIFT`).
pub const SEGMENT_SHIFT: u32 = 22;
/// Bits of the address space slabcg maps in (x86-64 and AArch64 user space).
const ADDR_BITS: u32 = 47;

const SEGMAP_WORDS: usize = 1 << (ADDR_BITS - SEGMENT_SHIFT - 6);
static SEGMAP: [AtomicU64; SEGMAP_WORDS] = [const { AtomicU64::new(0) }; SEGMAP_WORDS];

/// Per 4 MiB of the address space, `class + 1` when a plain size-class segment starts there,
/// else 0 (no segment, or an accounted or dedicated cache's): C's `free` finds out whether
/// a pointer is a plain slot, and its class, from one byte (`raw::c_free_fast`), where the
/// bitmap and the segment header took 15 instructions. 32 MiB of zero-filled `.bss`, one
/// page of it touched per 16 GiB of address space that holds segments. Not under Miri,
/// which would have to model all of it, nor with the feature `no-class-map`, for hosts
/// where 32 MiB of reserved address space counts (`ulimit -v`, strict overcommit).
// A class + 1 fits the byte, and no class wraps to 0 ("not a plain segment").
const _: () = assert!(crate::size_class::NUM_CLASSES < 255);

#[cfg(not(any(miri, feature = "no-class-map")))]
static PLAIN_CLASS: [AtomicU8; 1 << (ADDR_BITS - SEGMENT_SHIFT)] =
    [const { AtomicU8::new(0) }; 1 << (ADDR_BITS - SEGMENT_SHIFT)];

/// Records the segment starting at `seg` (4 MiB aligned), whose header says `plain_class`
/// (`u32::MAX` for an accounted or dedicated cache's).
pub fn insert_segment(seg: usize, plain_class: u32) {
    let i = seg >> SEGMENT_SHIFT;
    #[cfg(not(any(miri, feature = "no-class-map")))]
    if let (Some(b), Ok(c)) = (PLAIN_CLASS.get(i), u8::try_from(plain_class)) {
        // Before the segment's bit: a reader that sees the bit (or any slot of it) sees this.
        b.store(c.wrapping_add(1), Ordering::Release);
    }
    #[cfg(any(miri, feature = "no-class-map"))]
    let _ = plain_class;
    if let Some(w) = SEGMAP.get(i >> 6) {
        w.fetch_or(1 << (i & 63), Ordering::Release);
    }
}

/// The size class of `p` when it lies in a plain size-class segment; None for every other
/// address (accounted and dedicated caches' segments, large blocks, foreign memory, null).
/// Not under Miri nor with `no-class-map` (no map there: `raw::c_free_fast` reads the
/// bitmap and the header).
#[cfg(not(any(miri, feature = "no-class-map")))]
#[inline(always)]
pub fn plain_class(p: *const u8) -> Option<usize> {
    // Acquire: pairs with the store in `insert_segment`, as `is_segment` does. A pointer this
    // thread was handed came after the segment's creation, so the byte is already set.
    let v = PLAIN_CLASS
        .get(p as usize >> SEGMENT_SHIFT)?
        .load(Ordering::Acquire);
    (v as usize).checked_sub(1)
}

/// True when `p` lies in a segment this allocator mapped.
#[inline]
pub fn is_segment(p: *const u8) -> bool {
    let i = p as usize >> SEGMENT_SHIFT;
    match SEGMAP.get(i >> 6) {
        Some(w) => w.load(Ordering::Acquire) & (1 << (i & 63)) != 0,
        None => false,
    }
}

/// log2 of the bytes one leaf of the large map covers (1 GiB).
const LEAF_SHIFT: u32 = 30;
const ROOTS: usize = 1 << (ADDR_BITS - LEAF_SHIFT);
/// Words of one leaf: a bit per page of its GiB.
const LEAF_WORDS: usize = 1 << (LEAF_SHIFT - 12 - 6);
const LEAF_BYTES: usize = LEAF_WORDS * 8;

static LARGE_ROOTS: [AtomicPtr<AtomicU64>; ROOTS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; ROOTS];

/// The word and bit of header page `h` (page aligned), or None outside the address space.
#[inline]
fn large_slot(h: usize) -> Option<(&'static AtomicPtr<AtomicU64>, usize, u64)> {
    let root = LARGE_ROOTS.get(h >> LEAF_SHIFT)?;
    let page = (h >> 12) & ((1 << (LEAF_SHIFT - 12)) - 1);
    Some((root, page >> 6, 1 << (page & 63)))
}

/// Marks `h` as the header page of a live large allocation. False when the leaf for its
/// GiB cannot be mapped (the caller gives the allocation up) or `h` lies above the address
/// space the map covers.
#[must_use]
pub fn insert_large(h: *mut u8) -> bool {
    debug_assert!((h as usize).is_multiple_of(PAGE));
    let Some((root, word, bit)) = large_slot(h as usize) else {
        return false;
    };
    let mut leaf = root.load(Ordering::Acquire);
    if leaf.is_null() {
        // A fresh mapping reads as zero: an empty leaf. Straight from the OS layer, not
        // through the unit tests' fault injection (`sys::fault`), whose mapping counts
        // would shift by one on the first large allocation of a GiB.
        let fresh = slabcg_sys::map(LEAF_BYTES) as *mut AtomicU64;
        if fresh.is_null() {
            return false;
        }
        match root.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => leaf = fresh,
            Err(other) => {
                // SAFETY: `fresh` was mapped just above and nobody else saw it.
                unsafe { slabcg_sys::unmap(fresh.cast(), LEAF_BYTES) };
                leaf = other;
            }
        }
    }
    // SAFETY: a leaf holds LEAF_WORDS words and is never unmapped; word < LEAF_WORDS.
    unsafe { (*leaf.add(word)).fetch_or(bit, Ordering::Release) };
    true
}

/// Clears `h`'s mark: the allocation whose header page it is stops being live. Call before
/// its mapping is cached, moved or unmapped.
pub fn remove_large(h: *mut u8) {
    if let Some((root, word, bit)) = large_slot(h as usize) {
        let leaf = root.load(Ordering::Acquire);
        if !leaf.is_null() {
            // SAFETY: as in `insert_large`.
            unsafe { (*leaf.add(word)).fetch_and(!bit, Ordering::Release) };
        }
    }
}

/// Whether `h` is the header page of a live large allocation (module docs: racing frees of
/// one block are best effort).
#[inline]
pub fn is_large(h: *const u8) -> bool {
    let Some((root, word, bit)) = large_slot(h as usize) else {
        return false;
    };
    let leaf = root.load(Ordering::Acquire);
    // SAFETY: as in `insert_large`.
    !leaf.is_null() && unsafe { (*leaf.add(word)).load(Ordering::Acquire) } & bit != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header page reads as live between its insert and its removal, its neighbours
    /// never do, and addresses outside the map are not large blocks.
    #[test]
    fn large_header_pages_are_marked_exactly() {
        // Made-up addresses in a GiB no test maps (the map only records them).
        let h = 0x6f12_3450_0000usize as *mut u8;
        assert!(!is_large(h));
        assert!(insert_large(h));
        assert!(is_large(h));
        assert!(!is_large(h.wrapping_add(PAGE)));
        assert!(!is_large(h.wrapping_sub(PAGE)));
        remove_large(h);
        assert!(!is_large(h));
        assert!(!is_large((usize::MAX & !(PAGE - 1)) as *const u8));
        assert!(!insert_large((1usize << 48) as *mut u8));
    }
}
