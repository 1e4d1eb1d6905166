//! Slab layout: how many OS pages a slab spans, how its slots are laid out, and where the owner
//! metadata of accounted slabs lives.
//!
//! A slab is `2^slab_shift` bytes (4 KiB ..= 1 MiB) cut into `objects` slots of `stride` bytes
//! from its start; what is left after the last slot is the leftover tail:
//!
//! ```text
//!   slab_bytes == objects * stride + leftover
//! ```
//!
//! The leftover of a size class up to 64 bytes is at least [`VECTOR_TAIL`] (64 bytes): a
//! vector `memcmp` reads up to a vector from a short string's address, past its data, and a
//! read that reaches a page not present costs a microcode assist each time (the constant's
//! docs).
//!
//! The order is chosen like SLUB's `calculate_order` (seed 004): the smallest slab that holds
//! at least `min_objects` slots with a leftover of at most 1/16 of the slab, relaxing to 1/8 and
//! 1/4. Odd sizes therefore pack: a 2312-byte object gets 14 per 32 KiB (leftover 400 bytes)
//! instead of one per 4 KiB. Size classes ([`SlabLayout::for_class`]) first try 1/64 and
//! 1/32 in slabs of up to 128 KiB: their tail waste is paid by every program, and SLUB's
//! 1/16 let 16 of the classes up to 6 KiB (320, 384, 640, 768 bytes...) waste 6.25% of every
//! slab (32 MB of a JSON-like program's 650 MB peak, in class 640's 8 KiB slabs). Slabs are
//! carved a slot at a time, so a larger slab costs no memory before its slots are used; the
//! 128 KiB bound keeps the empty-slab reserve (`cache.rs`, 128 KiB) at one slab's worth or
//! more and the objects per slab at most about a hundred, so that a slab still empties when
//! most of its objects are freed.
//!
//! Owner metadata (seed 002): an accounted slab records the objcg id (4 bytes) of every slot.
//! It goes, in order of preference,
//! - into per-slot padding when 4 bytes fit there after both the object and a free slot's
//!   8-byte free-list link ([`MetaPlacement::Padding`]),
//! - into the leftover tail when `4 * objects` fits there ([`MetaPlacement::Leftover`]),
//! - else into an array near the end of the slab, paid for by fewer slots
//!   ([`MetaPlacement::External`]: the kernel allocates this array separately; we carve it
//!   from the slab so it needs no allocation, and report the slots it costs).
//!
//! Every placement is reached through one accessor, `slab_start + meta_offset + index *
//! meta_stride`, so the fast path never branches on placement. Slabs of unaccounted caches
//! carry no metadata ([`MetaPlacement::None`]).

use crate::sys::PAGE;
use core::sync::atomic::AtomicU32;

/// A free slot: the link of a free list (a slab's, a thread bin's, a batch's) lives in the
/// slot's first word (`link.rs`: plain, or encoded in hardened builds).
pub use crate::link::FreeObj;

/// Bytes of owner metadata per slot: a u32 objcg id.
pub const META_BYTES: usize = 4;
/// Bytes of a free slot's first word, the free-list link.
const LINK_BYTES: usize = core::mem::size_of::<*mut u8>();
/// The largest slab.
pub const MAX_SLAB_SHIFT: u32 = 20;
/// Bytes that end the slabs of the size classes up to [`VECTOR_TAIL_MAX_OBJECT`] unused.
/// glibc's vector `memcmp` (2.36, EVEX/AVX-512) compares up to 32 bytes with one masked
/// load from the string's address, whatever lies past the data; 64 leaves room for a
/// 64-byte vector.
/// A masked load whose masked-off bytes reach a page that is not present (the next slab,
/// fresh or released to the OS) takes a fault-suppression assist of hundreds of cycles,
/// every time: with the last slot flush against the slab's end, a `BTreeMap` of short
/// `String` keys spent twice as long in `memcmp` as with mimalloc (BENCHMARKS.md, section
/// 6). With the tail, such a read from any byte of a small slot stays in the slab; a small
/// class's slab is one page (4 KiB), present while any of its slots is.
pub const VECTOR_TAIL: usize = 64;
/// The largest size class whose slabs end with [`VECTOR_TAIL`]: the classes of short strings,
/// whose own start can lie within a vector of the slab's end. It costs them at most 64 bytes
/// of a 4 KiB slab (1.6%); a larger slot's start is 64 bytes or more from the end.
pub const VECTOR_TAIL_MAX_OBJECT: usize = 64;
const MIN_SLAB_SHIFT: u32 = 12;

/// Where an accounted slab keeps its per-slot owner metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaPlacement {
    /// Not accounted: no metadata.
    None,
    /// In the slab's unused tail, at no cost.
    Leftover,
    /// In each slot's alignment padding, at no cost.
    Padding,
    /// In an array near the slab's end that costs slots (see `SlabLayout::meta_cost_slots`).
    External,
}

/// The geometry of every slab of one cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabLayout {
    /// Bytes the user asked for per object (the usable size).
    pub object_size: usize,
    /// Distance between slots: `object_size` rounded up to `align`.
    pub stride: usize,
    /// Alignment of every slot.
    pub align: usize,
    /// log2 of the slab size.
    pub slab_shift: u32,
    /// `slab_bytes - 1`, kept so that a fast path finds a slot's offset in its slab with one
    /// load and an `and`.
    pub slab_mask: usize,
    /// Slots per slab.
    pub objects: usize,
    /// `slab_bytes - objects * stride`.
    pub leftover: usize,
    /// Owner metadata placement.
    pub meta: MetaPlacement,
    /// Offset of slot 0's metadata from the slab start.
    pub meta_offset: usize,
    /// Distance between two slots' metadata.
    pub meta_stride: usize,
    /// Slots given up to make room for [`MetaPlacement::External`] metadata.
    pub meta_cost_slots: usize,
    /// `ceil(2^40 / stride)`: `offset * recip >> 40 == offset / stride` for every offset
    /// inside a slab (offset < 2^20 and stride <= 2^20 keep the error below one).
    pub recip: u64,
    /// The inverse of `stride`'s odd part modulo 2^64, and its power of two's exponent
    /// (`stride == odd << stride_shift`): [`slot_start`](Self::slot_start) tells a slot
    /// start from any other offset with one multiply, one rotate and one compare.
    pub stride_inv: u64,
    /// `stride.trailing_zeros()`.
    pub stride_shift: u32,
    /// `ceil(2^40 * meta_stride / stride)`: for a slot start at `offset == index * stride`,
    /// `offset * meta_recip >> 40 == index * meta_stride` ([`meta_step`](Self::meta_step)),
    /// one multiply instead of two on a dedicated cache's free (the error,
    /// `offset / 2^40`, stays below one as for `recip`; 0 without metadata).
    pub meta_recip: u64,
}

/// [`SlabLayout::meta_step`] with the layout's `meta_recip`: shared with [`OwnerSteps`].
#[inline(always)]
const fn meta_step(offset: usize, meta_recip: u64) -> usize {
    ((offset as u64 * meta_recip) >> 40) as usize
}

/// What finding a slot's owner word takes from a [`SlabLayout`], copied into a dedicated
/// cache's handle (`Cache`) so that its free reaches the word without loading the layout
/// from the cache's core first: one dependent load fewer on the way to the owner compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OwnerSteps {
    slab_mask: usize,
    meta_offset: usize,
    meta_recip: u64,
}

impl OwnerSteps {
    /// The owner word of the slot starting at `p`.
    ///
    /// # Safety
    /// `p` must be a slot start of the layout that gave these steps
    /// ([`SlabLayout::owner_steps`]), a layout with owner metadata, in a live region of its
    /// `slab_bytes` aligned to `slab_bytes`: a slab of an accounted cache of that layout.
    #[inline(always)]
    pub(crate) unsafe fn word_of(&self, p: *mut u8) -> *const AtomicU32 {
        let in_slab = p as usize & self.slab_mask;
        let step = meta_step(in_slab, self.meta_recip);
        // SAFETY: p's region starts `in_slab` bytes below it (its alignment), and for a
        // slot start `step` is `index * meta_stride` (`SlabLayout::meta_step`), so the word
        // lies inside the region (`metadata_fits_where_promised`).
        unsafe { p.sub(in_slab).add(self.meta_offset + step) as *const AtomicU32 }
    }
}

impl SlabLayout {
    /// The steps [`OwnerSteps::word_of`] takes for this layout.
    pub(crate) const fn owner_steps(&self) -> OwnerSteps {
        OwnerSteps {
            slab_mask: self.slab_mask,
            meta_offset: self.meta_offset,
            meta_recip: self.meta_recip,
        }
    }

    /// Bytes per slab.
    #[inline(always)]
    pub const fn slab_bytes(&self) -> usize {
        1 << self.slab_shift
    }

    /// Computes the layout of a cache of `object_size`-byte objects aligned to `align` (a
    /// power of two <= PAGE). `accounted` reserves owner metadata. `hwcache_align` rounds
    /// the stride to a 64-byte cache line, as SLAB_HWCACHE_ALIGN does. Returns `None` when the
    /// object does not fit the largest slab.
    pub const fn new(
        object_size: usize,
        align: usize,
        accounted: bool,
        hwcache_align: bool,
    ) -> Option<SlabLayout> {
        Self::build(
            object_size,
            align,
            accounted,
            hwcache_align,
            &SLUB_FRACTIONS,
            0,
        )
    }

    /// The layout of a size class of `object_size` bytes (8-aligned, no cache-line rounding),
    /// packed tighter than [`new`](Self::new): a leftover of at most 1/64 of the slab first,
    /// then 1/32, then SLUB's steps (module docs).
    pub const fn for_class(object_size: usize, accounted: bool) -> Option<SlabLayout> {
        // A larger slot starts at least 64 bytes before the slab's end: a short string read
        // from its start stays inside the slab (`VECTOR_TAIL`).
        let tail = if object_size <= VECTOR_TAIL_MAX_OBJECT {
            VECTOR_TAIL
        } else {
            0
        };
        Self::build(object_size, 8, accounted, false, &CLASS_FRACTIONS, tail)
    }

    /// `tail`: bytes at the end of every slab that no slot or metadata may use.
    const fn build(
        object_size: usize,
        align: usize,
        accounted: bool,
        hwcache_align: bool,
        fractions: &[(usize, u32)],
        tail: usize,
    ) -> Option<SlabLayout> {
        if object_size == 0 || !align.is_power_of_two() || align > PAGE {
            return None;
        }
        let mut align = if align < 8 { 8 } else { align };
        if hwcache_align && align < 64 && object_size > 32 {
            align = 64;
        }
        let stride = (object_size + align - 1) & !(align - 1);
        if stride > 1 << MAX_SLAB_SHIFT {
            return None;
        }
        // Owner word in the padding, 4-byte aligned, never in the first word: a free slot
        // holds the free-list link there, and its owner word must survive (0 once uncharged,
        // which is how a second free of an accounted object is told from a first).
        let after = if object_size > LINK_BYTES {
            object_size
        } else {
            LINK_BYTES
        };
        let pad_off = (after + META_BYTES - 1) & !(META_BYTES - 1);
        let pad_meta = accounted && pad_off + META_BYTES <= stride;
        // The footprint a slot needs when its metadata does not fit in padding.
        let footprint = if accounted && !pad_meta {
            stride + META_BYTES
        } else {
            stride
        };
        // The slab size is chosen as if there were no tail: the tail costs at most a few slots
        // of the small classes it is for, never a larger slab.
        let slab_shift = choose_shift(footprint, fractions);
        let slab_bytes = 1usize << slab_shift;
        // The bytes slots and metadata may use; the tail after them stays untouched.
        let usable = slab_bytes - tail;
        let natural = usable / stride;
        let (objects, meta, meta_offset, meta_stride) = if !accounted {
            (natural, MetaPlacement::None, 0, 0)
        } else if pad_meta {
            (natural, MetaPlacement::Padding, pad_off, stride)
        } else {
            let n = usable / footprint;
            if n == 0 {
                // A stride of the largest slab leaves no room for the owner word.
                return None;
            }
            let placement = if n == natural {
                MetaPlacement::Leftover
            } else {
                MetaPlacement::External
            };
            // The array ends the slab's usable bytes (before any tail) at the latest, rather
            // than following the last slot: for page-sized strides `n * stride` is page
            // aligned, and owner loads at the same page offset as the slot stores just before
            // them stall on 4 KiB aliasing. Within the slack, its cache set is the layout's
            // own (`coloured_meta_offset`).
            let latest = usable - n * META_BYTES;
            let offset = coloured_meta_offset(latest, n * stride, object_size);
            (n, placement, offset, META_BYTES)
        };
        Some(SlabLayout {
            object_size,
            stride,
            align,
            slab_shift,
            slab_mask: slab_bytes - 1,
            objects,
            leftover: slab_bytes - objects * stride,
            meta,
            meta_offset,
            meta_stride,
            meta_cost_slots: natural - objects,
            recip: (1u64 << 40).div_ceil(stride as u64),
            meta_recip: ((meta_stride as u64) << 40).div_ceil(stride as u64),
            stride_inv: odd_inverse((stride >> stride.trailing_zeros()) as u64),
            stride_shift: stride.trailing_zeros(),
        })
    }

    /// Index of the slot at `offset` bytes from the slab start (no division on the hot path).
    #[inline(always)]
    pub fn slot_index(&self, offset: usize) -> usize {
        ((offset as u64 * self.recip) >> 40) as usize
    }

    /// The index of the slot that starts exactly `offset` bytes into a slab, or None for an
    /// offset inside a slot or past the last one (`offset < 2^20`, as every offset in a slab).
    ///
    /// Why it is exact (divisibility by an inverse, after Granlund and Montgomery): with
    /// `stride == d << k`, `d` odd and `inv * d == 1 (mod 2^64)`, an offset `q * stride`
    /// becomes `q << k` after the multiply and `q` after rotating right by `k`. An offset with
    /// one of its low `k` bits set keeps it through the multiply by the odd `inv`, and the
    /// rotate puts it at the top: at least `2^(64-k) > 2^44`. An offset `m << k` with `m` not
    /// a multiple of `d` gives `m * inv mod 2^(64-k)`, which for such `m` exceeds
    /// `(2^(64-k) - 1) / d`, itself above `2^20 / stride >= objects`. So a result below
    /// `objects` is a slot start's index and nothing else.
    #[inline(always)]
    pub fn slot_start(&self, offset: usize) -> Option<usize> {
        let q = (offset as u64)
            .wrapping_mul(self.stride_inv)
            .rotate_right(self.stride_shift);
        (q < self.objects as u64).then_some(q as usize)
    }

    /// `index * meta_stride` for the slot that starts `offset` bytes into its slab: the
    /// distance from slot 0's owner word to its own.
    #[inline(always)]
    pub fn meta_step(&self, offset: usize) -> usize {
        meta_step(offset, self.meta_recip)
    }

    /// Bytes per slab that owner metadata costs (External placement only): the slots the
    /// slab gave up for its array, not just the array's `4 * objects` bytes, so the figure
    /// agrees with `owner_meta_paid` in the tenant stats.
    pub const fn meta_bytes_paid(&self) -> usize {
        match self.meta {
            MetaPlacement::External => self.meta_cost_slots * self.stride,
            _ => 0,
        }
    }
}

/// Where an owner array goes between `earliest` (the end of the last slot) and `latest` (as
/// late as it may start): on a line boundary, in the L1 set (bits 6..12 of the offset; slabs
/// are page aligned) that `object_size` hashes to when the slack spans a page, else on one
/// of the lines the slack has, chosen by the same hash; at `latest` when no line fits.
///
/// Every slab is aligned to its size, so an array at a fixed distance from the slab's end
/// put the owner words of every large class, in every slab, in the last line of a page: one
/// L1 set of 12 ways for all of them. In the server workload with a tenant per thread
/// (`server 2 20000` under cachegrind) the spread takes 0.66 M of the 3.6 M L1 misses the
/// tenants add; it costs no instruction, since the fast paths add `meta_offset` whatever it
/// is. (Slabs of one class still share their class's set: a colour per slab would cost
/// instructions on every accounted free.) No pick is in set 0, nor in set 63 where the slack
/// spans a page: page-aligned objects start in the first and, for sizes a multiple of a
/// page, end in the last. (Only `latest`, taken when the slack holds no whole line, may lie
/// anywhere.)
const fn coloured_meta_offset(latest: usize, earliest: usize, object_size: usize) -> usize {
    const LINE: usize = 64;
    const SETS: usize = PAGE / LINE;
    let hash = ((object_size as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
    let mut first = (earliest + LINE - 1) & !(LINE - 1);
    // Never a page's first line, where page-aligned slots start (and their stores would
    // alias the owner loads, as above).
    if first.is_multiple_of(PAGE) {
        first += LINE;
    }
    let last = latest & !(LINE - 1);
    if first > last {
        return latest;
    }
    let lines = (last - first) / LINE + 1;
    if lines < SETS {
        let offset = last - (hash % lines) * LINE;
        // `first` is not a page's first line, so a page-aligned pick has a line before it.
        return if offset.is_multiple_of(PAGE) {
            offset - LINE
        } else {
            offset
        };
    }
    let set = 1 + hash % (SETS - 2);
    let offset = (last & !(PAGE - 1)) + set * LINE;
    if offset <= last {
        offset
    } else {
        offset - PAGE
    }
}

/// The inverse of the odd `d` modulo 2^64, by Newton's iteration: `d` is its own inverse
/// modulo 8, and each step doubles the bits that are right (3, 6, 12, 24, 48, 96).
const fn odd_inverse(d: u64) -> u64 {
    let mut inv = d;
    let mut i = 0;
    while i < 5 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(d.wrapping_mul(inv)));
        i += 1;
    }
    inv
}

/// The leftover bounds SLUB's calculate_order tries in turn (1/16, 1/8, 1/4 of the slab),
/// each with the largest slab shift it may take.
const SLUB_FRACTIONS: [(usize, u32); 3] = [
    (16, MAX_SLAB_SHIFT),
    (8, MAX_SLAB_SHIFT),
    (4, MAX_SLAB_SHIFT),
];
/// Those a size class tries (module docs): 1/64 and 1/32 in slabs of up to 128 KiB first.
const CLASS_FRACTIONS: [(usize, u32); 5] = [
    (64, 17),
    (32, 17),
    (16, MAX_SLAB_SHIFT),
    (8, MAX_SLAB_SHIFT),
    (4, MAX_SLAB_SHIFT),
];

/// The slab order for slots of `footprint` bytes: SLUB's calculate_order with our bounds,
/// trying each leftover bound of `fractions` in turn, up to its largest shift.
const fn choose_shift(footprint: usize, fractions: &[(usize, u32)]) -> u32 {
    let max = 1usize << MAX_SLAB_SHIFT;
    let want = max / footprint;
    let min_objects = if want < 8 { want } else { 8 };
    let min_objects = if min_objects == 0 { 1 } else { min_objects };
    let mut f = 0;
    while f < fractions.len() {
        let (frac, max_shift) = fractions[f];
        let mut shift = MIN_SLAB_SHIFT;
        while shift <= max_shift {
            let bytes = 1usize << shift;
            let n = bytes / footprint;
            if n >= min_objects && (bytes - n * footprint) * frac <= bytes {
                return shift;
            }
            shift += 1;
        }
        f += 1;
    }
    // No order wastes less than a quarter: take the one that wastes least.
    let mut best = MAX_SLAB_SHIFT;
    let mut best_waste = usize::MAX;
    let mut shift = MIN_SLAB_SHIFT;
    while shift <= MAX_SLAB_SHIFT {
        let bytes = 1usize << shift;
        let n = bytes / footprint;
        if n >= min_objects {
            let waste = (bytes - n * footprint) * 1024 / bytes;
            if waste < best_waste {
                best_waste = waste;
                best = shift;
            }
        }
        shift += 1;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size_class::{class_size, NUM_CLASSES};

    #[test]
    fn every_class_packs_well() {
        for c in 0..NUM_CLASSES {
            for accounted in [false, true] {
                let l = SlabLayout::for_class(class_size(c), accounted).unwrap();
                assert_eq!(l.slab_bytes(), l.objects * l.stride + l.leftover);
                assert!(l.objects >= 1);
                // Up to VECTOR_TAIL_MAX_OBJECT, the last VECTOR_TAIL bytes hold no slot and no
                // metadata.
                if class_size(c) <= VECTOR_TAIL_MAX_OBJECT {
                    let meta_end = match l.meta {
                        MetaPlacement::Leftover | MetaPlacement::External => {
                            l.meta_offset + l.objects * l.meta_stride
                        }
                        _ => 0,
                    };
                    let used = (l.objects * l.stride).max(meta_end);
                    assert!(used + VECTOR_TAIL <= l.slab_bytes(), "class {c}: {l:?}");
                    // One page: present while any of its slots is (VECTOR_TAIL's docs).
                    assert_eq!(l.slab_bytes(), PAGE, "class {c}: {l:?}");
                }
                // (An accounted slab's leftover holds its owner words.)
                if !accounted {
                    assert!(l.leftover * 4 <= l.slab_bytes(), "class {c}: {l:?}");
                }
                // Classes up to 6 KiB waste at most 1/32 of a plain slab (module docs);
                // every class's slab is at most 128 KiB unless SLUB's order chose more.
                if !accounted && class_size(c) <= 6 << 10 {
                    assert!(l.leftover * 32 <= l.slab_bytes(), "class {c}: {l:?}");
                }
                let slub = SlabLayout::new(class_size(c), 8, accounted, false).unwrap();
                assert!(
                    l.slab_shift <= 17 || l.slab_shift == slub.slab_shift,
                    "class {c}"
                );
            }
        }
        // SLUB's order for the same size, as dedicated caches get it: 6.25% of an 8 KiB slab.
        let slub = SlabLayout::new(640, 8, false, false).unwrap();
        assert_eq!((slub.slab_bytes(), slub.leftover), (8192, 512));
        let class = SlabLayout::for_class(640, false).unwrap();
        assert_eq!((class.slab_bytes(), class.leftover), (32768, 128));
    }

    #[test]
    fn odd_struct_packs_like_seed_004() {
        // The 2312-byte mem_cgroup of seed 004: kmalloc-4096 wastes 1784 bytes per object.
        let l = SlabLayout::new(2312, 8, false, false).unwrap();
        assert!(l.leftover * 16 <= l.slab_bytes());
        let per_32k = (32 * 1024) / l.stride;
        assert_eq!(per_32k, 14);
        assert!(l.objects >= 8);
    }

    #[test]
    fn slot_index_is_exact() {
        for c in 0..NUM_CLASSES {
            let l = SlabLayout::for_class(class_size(c), true).unwrap();
            for i in 0..l.objects {
                for delta in [0, 1, l.stride - 1] {
                    assert_eq!(l.slot_index(i * l.stride + delta), i);
                }
            }
        }
    }

    #[test]
    fn slot_start_finds_exactly_the_slot_starts() {
        // Every offset of a slab, for the classes' layouts and strides of every shape: odd
        // multiples of 8, powers of two, cache-line aligned, page-sized and above.
        let mut layouts: Vec<SlabLayout> = (0..NUM_CLASSES)
            .map(|c| SlabLayout::for_class(class_size(c), true).unwrap())
            .collect();
        for (size, align, hw) in [
            (2312, 8, false),
            (2896, 64, true),
            (1144, 8, false),
            (992, 64, true),
            (24, 8, false),
            (40, 8, false),
            (4096, 4096, false),
            (12_288, 8, false),
            (700_000, 8, false),
        ] {
            layouts.push(SlabLayout::new(size, align, true, hw).unwrap());
        }
        // Under Miri (scripts/verify.sh runs this crate's tests there): every 997th offset
        // and each slot start's neighbours, not all 60 million.
        let step = if cfg!(miri) { 997 } else { 1 };
        for l in layouts {
            assert_eq!(
                l.stride_inv
                    .wrapping_mul((l.stride >> l.stride_shift) as u64),
                1
            );
            let near_starts = (0..=l.objects).flat_map(|i| {
                [
                    i * l.stride,
                    i * l.stride + 1,
                    (i * l.stride).wrapping_sub(1),
                ]
            });
            let offsets = (0..l.slab_bytes()).step_by(step).chain(near_starts);
            for off in offsets.filter(|&o| o < l.slab_bytes()) {
                let want =
                    (off % l.stride == 0 && off / l.stride < l.objects).then_some(off / l.stride);
                assert_eq!(l.slot_start(off), want, "{l:?} offset {off}");
            }
        }
    }

    #[test]
    fn meta_step_is_exact_at_every_slot_start() {
        let dedicated = [
            (2312, 8, false),
            (2896, 64, true),
            (1144, 8, false),
            (992, 64, true),
        ]
        .map(|(size, align, hw)| SlabLayout::new(size, align, true, hw).unwrap());
        let classes = (0..NUM_CLASSES).flat_map(|c| {
            [
                SlabLayout::for_class(class_size(c), true).unwrap(),
                SlabLayout::new(class_size(c), 8, true, false).unwrap(),
                SlabLayout::new(class_size(c) - 4, 8, true, false).unwrap(),
            ]
        });
        let mut placements = [0usize; 2];
        for l in classes.chain(dedicated) {
            placements[usize::from(l.meta == MetaPlacement::Padding)] += 1;
            // A slab-aligned block stands for a slab: `OwnerSteps::word_of` (a dedicated
            // cache's copy of these steps) must land on each slot's word as `meta_step` does.
            let block =
                std::alloc::Layout::from_size_align(l.slab_bytes(), l.slab_bytes()).unwrap();
            // SAFETY: a non-zero size; freed below with the same layout.
            let slab = unsafe { std::alloc::alloc(block) };
            assert!(!slab.is_null());
            // The last slot's word ends inside the slab, so `word_of` stays in the block.
            assert!(l.meta_offset + (l.objects - 1) * l.meta_stride + 4 <= l.slab_bytes());
            for i in 0..l.objects {
                assert_eq!(
                    l.meta_step(i * l.stride),
                    i * l.meta_stride,
                    "{l:?} slot {i}"
                );
                // SAFETY: slot i's start, in the block, which is a slab-sized region aligned
                // as a slab; its word is inside (asserted above).
                let word = unsafe { l.owner_steps().word_of(slab.add(i * l.stride)) };
                assert_eq!(
                    word as usize - slab as usize,
                    l.meta_offset + i * l.meta_stride,
                    "{l:?} slot {i}"
                );
            }
            // SAFETY: allocated above with `block`.
            unsafe { std::alloc::dealloc(slab, block) };
        }
        assert!(
            placements[0] > 0 && placements[1] > 0,
            "both kinds of stride tried"
        );
        assert_eq!(SlabLayout::new(64, 8, false, false).unwrap().meta_recip, 0);
    }

    #[test]
    fn metadata_fits_where_promised() {
        // The size classes' own layouts, and SLUB's order for the same sizes (a dedicated
        // cache of a class's size).
        let layouts = (0..NUM_CLASSES).flat_map(|c| {
            [
                SlabLayout::for_class(class_size(c), true).unwrap(),
                SlabLayout::new(class_size(c), 8, true, false).unwrap(),
            ]
            .map(|l| (c, l))
        });
        for (c, l) in layouts {
            let end = l.meta_offset + (l.objects - 1) * l.meta_stride + META_BYTES;
            assert!(end <= l.slab_bytes(), "class {c}: {l:?}");
            match l.meta {
                MetaPlacement::Leftover => assert_eq!(l.meta_cost_slots, 0),
                MetaPlacement::External => assert!(l.meta_cost_slots > 0),
                m => panic!("unexpected {m:?}"),
            }
            // The metadata never overlaps a slot.
            if l.meta != MetaPlacement::Padding {
                assert!(l.meta_offset >= l.objects * l.stride);
            }
        }
        // Padding: a 100-byte object aligned to 8 has 4 bytes of padding.
        let l = SlabLayout::new(100, 8, true, false).unwrap();
        assert_eq!(l.meta, MetaPlacement::Padding);
        assert_eq!(l.meta_cost_slots, 0);
    }

    /// The owner arrays of the classes with a page of slack or more start in a set of their
    /// own hashing, never the first or last set of a page, and spread over the sets; every
    /// array stays between the last slot and the slab's usable end (`coloured_meta_offset`).
    #[test]
    fn owner_arrays_spread_over_cache_sets() {
        let set = |off: usize| (off / 64) % (PAGE / 64);
        let mut sets = Vec::new();
        for c in 0..NUM_CLASSES {
            let l = SlabLayout::for_class(class_size(c), true).unwrap();
            let tail = if class_size(c) <= VECTOR_TAIL_MAX_OBJECT {
                VECTOR_TAIL
            } else {
                0
            };
            let end = l.meta_offset + l.objects * META_BYTES;
            assert!(l.meta_offset >= l.objects * l.stride, "class {c}: {l:?}");
            assert!(end <= l.slab_bytes() - tail, "class {c}: {l:?}");
            assert_ne!(l.meta_offset % PAGE, 0, "class {c}: {l:?}");
            let latest = l.slab_bytes() - tail - l.objects * META_BYTES;
            if latest - l.objects * l.stride >= PAGE + 64 {
                assert_eq!(l.meta_offset % 64, 0, "class {c}: {l:?}");
                assert!(
                    (1..PAGE / 64 - 1).contains(&set(l.meta_offset)),
                    "class {c}"
                );
                sets.push(set(l.meta_offset));
            }
        }
        let n = sets.len();
        sets.sort_unstable();
        sets.dedup();
        assert!(
            n >= 10 && sets.len() * 3 >= n * 2,
            "{n} arrays in sets {sets:?}"
        );
    }

    /// An owner word in padding lies after the object and after the free-list link (the
    /// first word of a free slot): objects of 4 bytes or less put it at offset 4, which the
    /// link overwrote on every free.
    #[test]
    fn padding_metadata_clears_the_object_and_the_link() {
        for size in 1..=64 {
            for align in [1, 2, 4, 8, 16] {
                let l = SlabLayout::new(size, align, true, false).unwrap();
                if l.meta == MetaPlacement::Padding {
                    assert!(
                        l.meta_offset >= size.max(LINK_BYTES),
                        "{size}/{align}: {l:?}"
                    );
                    assert!(
                        l.meta_offset + META_BYTES <= l.stride,
                        "{size}/{align}: {l:?}"
                    );
                }
            }
        }
    }
}
