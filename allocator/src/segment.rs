//! Segments: the 4 MiB, 4 MiB-aligned mappings that slabs are cut from.
//!
//! Every segment belongs to one cache, so every slab in it has the same layout. A pointer
//! finds its segment by masking (`ptr & !(SEGMENT - 1)`) and its slab by a shift:
//!
//! ```text
//!   segment: [ header: Segment + SlabDesc[nslabs] | gap | slab 0 | slab 1 | ... | slab nslabs-1 ]
//!   slab k starts at  segment + slabs_offset + (k << slab_shift)
//! ```
//!
//! `slabs_offset` is the first multiple of the slab size after the header, so every slab is
//! aligned to its size and the last one ends at the segment's end; the gap (less than one
//! slab) is never touched.
//!
//! Whether a segment's slots are accounted is written in its address: accounted segments start
//! at odd multiples of `SEGMENT`, plain ones at even multiples, so bit [`ACCOUNTED_BIT`] of any
//! slot says which it is. The free path tests that bit instead of loading the header, so a
//! plain free in a process that uses tenants touches no segment header; nor does an accounted
//! free that keeps its slot charged (the class's owner geometry is in the thread cache). An
//! uncharging free checks the slot against its header, and dedicated caches read the owner
//! geometry from it.
//!
//! Segments are never unmapped (their slabs are released to the OS with madvise instead), so
//! a header stays readable for the life of the process; a global bitmap (`addr_map`) records
//! which 4 MiB address ranges are segments, so a pointer we did not hand out is recognised
//! as such.

use core::ptr;

use crate::slab::{FreeObj, SlabLayout};
use crate::sys::{self, PAGE};

pub const SEGMENT_SHIFT: u32 = crate::addr_map::SEGMENT_SHIFT;
pub const SEGMENT: usize = 1 << SEGMENT_SHIFT;
/// Set in the address of every slot of an accounted segment, clear in every plain one.
pub const ACCOUNTED_BIT: usize = SEGMENT;

/// Bytes of the `PROT_NONE` guard page mapped after every segment: a page in hardened builds
/// (a read or write running off a segment's last slab faults instead of reaching whatever
/// is mapped next), none by default. It lies outside the segment's 4 MiB, so the segment's
/// geometry is the same either way; `stats()` counts it in `mapped` and `guard`.
pub const GUARD: usize = if cfg!(feature = "hardened") { PAGE } else { 0 };

/// What the slots of a cache are, as its segments record it: a field of every cache
/// (`cache::SlabCache::id`). A segment header points here, so that a slot address leads to
/// its size class and to whether it is accounted without this layer knowing caches; the
/// field's address identifies the cache (`SlabCache::owns`).
pub struct CacheId {
    /// Whether slots carry owner metadata (the kmalloc-cg-N twin of a size class).
    pub accounted: bool,
    /// Size class index, or `u32::MAX` for a dedicated cache.
    pub class: u32,
}

/// Which list a slab is on (see [`crate::cache`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum SlabState {
    /// Never used since the segment was mapped (or released and not yet reused): not on a list.
    Fresh = 0,
    /// Some slots handed out, some available: on the cache's partial list.
    Partial = 1,
    /// Every slot handed out: on no list.
    Full = 2,
    /// No slot handed out, pages still resident: on the cache's empty list (the reserve).
    Empty = 3,
    /// No slot handed out, pages given back to the OS: on the cache's released list.
    Released = 4,
}

/// Per-slab bookkeeping, kept in the segment header (not in the slab) so that slots start at
/// the slab's first byte. Mutated only under the owning cache's lock.
///
/// Invariant: `used + |free| + (objects - carved) == objects`, i.e. `|free| == carved - used`.
#[repr(C)]
pub struct SlabDesc {
    /// Slots given back, linked through their first word.
    pub free: *mut FreeObj,
    /// Slots handed out (to thread caches or directly to the program).
    pub used: u32,
    /// Slots `[carved, objects)` were never handed out since the slab was (re)started.
    pub carved: u32,
    pub next: *mut SlabDesc,
    pub prev: *mut SlabDesc,
    pub state: SlabState,
}

/// The segment header. Written once at creation except `fresh` and `next`, which are
/// mutated under the owning cache's lock.
#[repr(C)]
pub struct Segment {
    /// The cache every slab in this segment belongs to (its [`CacheId`] field).
    pub cache: *const CacheId,
    /// The size class of a plain size-class cache's segment, `u32::MAX` for an accounted or
    /// a dedicated cache's: what `addr_map`'s byte map records for C's `free`
    /// (`raw::c_free_fast`), and what that free reads here under Miri, which has no map.
    pub plain_class: u32,
    /// Offset of slab 0 from the segment start: a multiple of the slab size (`geometry`).
    pub slabs_offset: usize,
    /// Slabs in this segment. In the header's first line with `cache` and `slabs_offset`,
    /// the fields a slot check reads (`SlabCache::check_slot_start`): one line to miss
    /// where the layout in between made two (the uncharging free of a tenant's object).
    pub nslabs: usize,
    /// Copy of the cache's layout, so code that starts from a slot address (`usable_size`,
    /// slot checks, dedicated-cache frees) finds it in this one header.
    pub layout: SlabLayout,
    /// Slabs `[fresh, nslabs)` have never been used.
    pub fresh: usize,
    /// Next segment of the same cache.
    pub next: *mut Segment,
}

// `nslabs`' doc: a slot check's fields share the header's first line (segments are 4 MiB
// aligned).
const _: () = assert!(
    core::mem::offset_of!(Segment, cache) < 64
        && core::mem::offset_of!(Segment, slabs_offset) + 8 <= 64
        && core::mem::offset_of!(Segment, nslabs) + 8 <= 64
);

impl Segment {
    /// Maps and initialises a segment for `cache`. Null when the OS refuses.
    pub fn create(cache: &CacheId, layout: SlabLayout) -> *mut Segment {
        let (_, slabs_offset, nslabs) = geometry(layout.slab_shift);
        // Odd multiples of SEGMENT for accounted segments (ACCOUNTED_BIT).
        let offset = if cache.accounted { ACCOUNTED_BIT } else { 0 };
        // Before the first slot exists (hardened builds' link secret; nothing by default).
        crate::link::draw_secret();
        let seg = sys::map_aligned_at(SEGMENT + GUARD, 2 * SEGMENT, offset) as *mut Segment;
        if seg.is_null() {
            return seg;
        }
        // SAFETY: the guard page is the last page of the mapping just made, past the segment.
        if GUARD != 0 && !unsafe { sys::protect_none((seg as *mut u8).add(SEGMENT), GUARD) } {
            // SAFETY: the whole mapping is ours and unused.
            unsafe { sys::unmap(seg.cast(), SEGMENT + GUARD) };
            return ptr::null_mut();
        }
        // SAFETY: seg is a fresh, zeroed, writable mapping of SEGMENT bytes, large enough for
        // the header (geometry() sized slabs_offset to hold it); the descriptors are valid when
        // zeroed (null lists, state Fresh).
        unsafe {
            ptr::write(
                seg,
                Segment {
                    cache,
                    plain_class: if cache.accounted {
                        u32::MAX
                    } else {
                        cache.class
                    },
                    layout,
                    slabs_offset,
                    nslabs,
                    fresh: 0,
                    next: ptr::null_mut(),
                },
            );
        }
        // SAFETY: the header was written just above.
        crate::addr_map::insert_segment(seg as usize, unsafe { (*seg).plain_class });
        seg
    }

    /// The descriptor of slab `k`.
    ///
    /// # Safety
    /// `seg` must be a live segment and `k < nslabs`.
    #[inline(always)]
    pub unsafe fn desc(seg: *mut Segment, k: usize) -> *mut SlabDesc {
        // SAFETY: the descriptor array follows the header inside slabs_offset bytes.
        unsafe { (seg.add(1) as *mut SlabDesc).add(k) }
    }

    /// Start of slab `k`.
    ///
    /// # Safety
    /// As [`desc`](Self::desc).
    #[inline(always)]
    pub unsafe fn slab_start(seg: *mut Segment, k: usize) -> *mut u8 {
        // SAFETY: the caller guarantees seg is live; the slab lies inside the segment.
        unsafe { (seg as *mut u8).add((*seg).slabs_offset + (k << (*seg).layout.slab_shift)) }
    }

    /// Whether `p` is the start of a slot of one of the segment's slabs (not in its header,
    /// a slab's tail or the middle of a slot). Whether the slot is allocated is not checked.
    ///
    /// # Safety
    /// `seg` must be a live segment and `p` lie inside it.
    #[inline(always)]
    pub unsafe fn is_slot_start(seg: *mut Segment, p: *const u8) -> bool {
        // SAFETY: the caller guarantees seg is live; its header is immutable.
        let (slabs_offset, nslabs, l) =
            unsafe { ((*seg).slabs_offset, (*seg).nslabs, &(*seg).layout) };
        // Below slab 0 (in the header) the offset wraps around and no slab index fits.
        let off = (p as usize - seg as usize).wrapping_sub(slabs_offset);
        let within = off & (l.slab_bytes() - 1);
        (off >> l.slab_shift) < nslabs && l.slot_start(within).is_some()
    }

    /// Segment, slab index and slab start of a descriptor.
    ///
    /// # Safety
    /// `d` must be a descriptor inside a live segment header.
    #[inline]
    pub unsafe fn of_desc(d: *mut SlabDesc) -> (*mut Segment, usize, *mut u8) {
        let seg = (d as usize & !(SEGMENT - 1)) as *mut Segment;
        // SAFETY: d lies in seg's descriptor array.
        unsafe {
            let k = d.offset_from(Segment::desc(seg, 0)) as usize;
            (seg, k, Segment::slab_start(seg, k))
        }
    }
}

/// The segment containing `p` (which may not be a segment at all: check `is_segment`).
#[inline(always)]
pub fn segment_of(p: *const u8) -> *mut Segment {
    (p as usize & !(SEGMENT - 1)) as *mut Segment
}

/// Header size (page rounded), offset of slab 0, and slab count for slabs of `2^slab_shift`
/// bytes.
///
/// Slab 0 starts at the first multiple of the slab size after the header, so every slab is
/// aligned to its size and the offset of `p` in its slab is just `p & (slab_bytes - 1)` (one
/// instruction less in the owner lookup of every accounted free). The alignment costs no
/// slab: `(SEGMENT - h) / slab` rounded down equals `SEGMENT / slab - ceil(h / slab)` for
/// any header size `h`, since the slab size divides SEGMENT. The bytes between the header and
/// slab 0 are never touched.
pub const fn geometry(slab_shift: u32) -> (usize, usize, usize) {
    let slab = 1usize << slab_shift;
    let max_slabs = SEGMENT / slab;
    let header = core::mem::size_of::<Segment>() + max_slabs * core::mem::size_of::<SlabDesc>();
    let header = (header + PAGE - 1) & !(PAGE - 1);
    let slabs_offset = (header + slab - 1) & !(slab - 1);
    (header, slabs_offset, (SEGMENT - slabs_offset) / slab)
}

// Aligning slab 0 keeps every slab count of a page-aligned header.
const _: () = {
    let mut shift = 12;
    while shift <= crate::slab::MAX_SLAB_SHIFT {
        let (header, _, nslabs) = geometry(shift);
        assert!(nslabs == (SEGMENT - header) >> shift && nslabs > 0);
        shift += 1;
    }
};

/// True when `p` lies in a segment this allocator mapped (the bitmap of `addr_map`).
pub use crate::addr_map::is_segment;
