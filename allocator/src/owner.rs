//! Owner words: where an accounted slot records the objcg it is charged to, and how a slot
//! address finds that word.
//!
//! Owner metadata of slot `i` of a slab is the u32 at
//! `slab_start + meta_offset + i * meta_stride` (see `slab.rs`): one formula whatever the
//! placement (leftover tail, per-slot padding, or the carved array). Any accounted cache
//! finds it from the segment header ([`owner_word`]); a size class, whose slots have no
//! padding, also from a copy of its geometry that the thread cache keeps next to the class's
//! bins ([`OwnerGeom`], [`class_owner_word`]), so that a free reads no header.
//!
//! Whether a slot is accounted at all is one bit of its address ([`is_accounted`]).

use core::sync::atomic::AtomicU32;

use crate::cache::SlabCache;
use crate::segment::{is_segment, segment_of, Segment, ACCOUNTED_BIT};
use crate::slab::SlabLayout;

/// Where the owner words of an accounted size class's slots are: the owner word of slot `p`
/// is the u32 at `(p & !slab_mask) + meta_offset + 4 * ((p & slab_mask) * recip >> 40)`
/// (slabs are aligned to their size; size classes have no padding, so their owner words
/// always form a 4-byte array).
#[derive(Clone, Copy)]
pub(crate) struct OwnerGeom {
    pub(crate) slab_mask: usize,
    pub(crate) recip: u64,
    pub(crate) meta_offset: usize,
}

impl OwnerGeom {
    /// The geometry of the accounted cache with layout `l` (a size class's).
    pub(crate) const fn of_layout(l: &SlabLayout) -> OwnerGeom {
        OwnerGeom {
            slab_mask: l.slab_bytes() - 1,
            recip: l.recip,
            meta_offset: l.meta_offset,
        }
    }

    /// The owner word of slot `p`.
    ///
    /// # Safety
    /// `p` must be a slot of the accounted cache these are the geometry of.
    #[inline(always)]
    pub(crate) unsafe fn word(&self, p: *mut u8) -> *const AtomicU32 {
        let in_slab = p as usize & self.slab_mask;
        let idx = ((in_slab as u64 * self.recip) >> 40) as usize;
        // SAFETY: p is a slot of an accounted segment of this class, whose slabs are aligned
        // to their size; for a slot start the owner word lies inside p's slab
        // (slab.rs: `metadata_fits_where_promised`).
        unsafe { (p.sub(in_slab).add(self.meta_offset) as *const AtomicU32).add(idx) }
    }
}

/// The owner word of slot `p`, for any accounted cache (size class or dedicated), from its
/// segment header.
///
/// # Safety
/// `p` must be a slot of an accounted segment.
#[inline(always)]
pub(crate) unsafe fn owner_word(p: *mut u8) -> *const AtomicU32 {
    let seg: *mut Segment = segment_of(p);
    // SAFETY: p lies in a live accounted segment; its header is immutable after creation,
    // and for a slot start the metadata address lies inside p's slab (slab.rs:
    // `metadata_fits_where_promised`).
    unsafe {
        let h = &*seg;
        let l = &h.layout;
        // Slabs are aligned to their size (segment::geometry).
        debug_assert!((*h.cache).accounted && h.slabs_offset.is_multiple_of(l.slab_bytes()));
        let in_slab = p as usize & (l.slab_bytes() - 1);
        p.sub(in_slab)
            .add(l.meta_offset + l.slot_index(in_slab) * l.meta_stride) as *const AtomicU32
    }
}

/// [`owner_word`] for a slot of size class `c`, from the class's geometry `g` (the thread
/// cache's copy, `ClassBins::owner`, in the same cache line as the bins the free touches
/// next) instead of the segment header: size classes are multiples of 8 aligned to 8, so
/// their slots have no padding and their owner words always form a 4-byte array, whose index
/// scales in the address.
///
/// # Safety
/// `p` must be a slot of the accounted cache of class `c`, and `g` that cache's geometry.
#[inline(always)]
pub(crate) unsafe fn class_owner_word(p: *mut u8, c: usize, g: &OwnerGeom) -> *const AtomicU32 {
    // SAFETY: p is a slot of the accounted cache of class c (caller's contract).
    let w = unsafe { g.word(p) };
    // Checked against the header only where there is one of this class to read: an
    // invalid free (foreign pointer, wrong layout) must reach the fatal checks, not panic.
    debug_assert!(
        !is_slot_of(
            p,
            crate::class_caches::cache(c, crate::size_class::Kind::Accounted)
        )
            // SAFETY: p lies in a segment of the accounted cache of class c.
            || core::ptr::eq(w, unsafe { owner_word(p) })
    );
    w
}

/// True when slot `p` belongs to an accounted segment: one bit of its address
/// (`segment::ACCOUNTED_BIT`), no load. Only meaningful for slots (size classes).
#[inline(always)]
pub fn is_accounted(p: *mut u8) -> bool {
    let acct = p as usize & ACCOUNTED_BIT != 0;
    debug_assert!(
        !is_segment(p)
            // SAFETY: is_segment says p lies in a live segment, whose header is immutable and
            // names its cache's id, a static.
            || acct == unsafe { (*(*segment_of(p)).cache).accounted }
    );
    acct
}

/// Whether `p` lies in a segment of `cache` (for debug checks that must not read the header
/// of a pointer the allocator never handed out).
pub(crate) fn is_slot_of(p: *mut u8, cache: &SlabCache) -> bool {
    is_segment(p)
        // SAFETY: is_segment says p lies in a live segment, whose header is immutable.
        && cache.owns(unsafe { (*segment_of(p)).cache })
}

#[cfg(test)]
mod tests {
    use crate::class_caches::ACCOUNTED;
    use crate::slab::FreeObj;

    /// `SlabCache::checked_owner_word` (the uncharging frees' route) finds the word
    /// `owner_word` and the thread cache's class geometry compute, for every slot of a
    /// fresh slab of every accounted class.
    #[test]
    fn checked_owner_word_is_owner_word() {
        for (c, cache) in ACCOUNTED.iter().enumerate() {
            let n = cache.layout.objects;
            let chain = cache.refill(n, n);
            assert_eq!(chain.count, n, "class {c}: a slab's worth of slots");
            let mut o = chain.head;
            while !o.is_null() {
                let p = o as *mut u8;
                // SAFETY: p is a slot of this accounted cache, just taken from its slabs.
                unsafe {
                    let w = cache.checked_owner_word(p) as *const _;
                    assert!(core::ptr::eq(w, super::owner_word(p)), "class {c}");
                    let g = super::OwnerGeom::of_layout(&cache.layout);
                    assert!(core::ptr::eq(w, g.word(p)), "class {c}");
                    o = FreeObj::next(o);
                }
            }
            // SAFETY: the chain just taken, untouched, given back whole.
            unsafe { cache.flush(chain.head, chain.count) };
        }
    }
}
