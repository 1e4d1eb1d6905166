//! The size-class table (the kmalloc-N caches of the global allocator).
//!
//! Classes are 8-byte steps up to 64 bytes, then four classes per doubling (sizes
//! `2^k * {5/4, 6/4, 7/4, 8/4}`) up to [`MAX_SMALL`] = 128 KiB, as jemalloc and mimalloc do:
//!
//! ```text
//!   8 16 24 32 40 48 56 64 | 80 96 112 128 | 160 192 224 256 | 320 384 448 512 | 640 ... 1024
//!   | 1280 ... 2048 | ... | 81920 98304 114688 131072
//! ```
//!
//! 52 classes. Internal waste `(class - request) / class` is below 20% for every request
//! above 64 bytes (the worst case is one byte above a power of two: `2^k + 1` rounds up to
//! `1.25 * 2^k`, wasting just under 20%), and 7.9% on average over all request sizes
//! 65..=128 KiB; the test `waste_bounds` computes both. Requests above `MAX_SMALL`, or aligned
//! above a page, are large allocations with their own mapping.

/// Which of a size class's two caches: the plain one (kmalloc-N) or its accounted twin
/// (kmalloc-cg-N), whose slots carry owner words (`class_caches`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Unaccounted objects.
    Plain,
    /// Objects charged to a tenant, or free slots that will be.
    Accounted,
}

impl Kind {
    /// Both kinds, plain first.
    pub const BOTH: [Kind; 2] = [Kind::Plain, Kind::Accounted];

    /// Whether this is the accounted twin.
    #[inline(always)]
    pub const fn is_accounted(self) -> bool {
        matches!(self, Kind::Accounted)
    }
}

/// Number of size classes.
pub const NUM_CLASSES: usize = 52;
/// The largest request served from a size class.
pub const MAX_SMALL: usize = 128 * 1024;
/// Requests up to this size use the lookup table: one load.
pub const LUT_MAX: usize = 1024;

const fn build_sizes() -> [u32; NUM_CLASSES] {
    let mut s = [0u32; NUM_CLASSES];
    let mut i = 0;
    while i < 8 {
        s[i] = 8 * (i as u32 + 1);
        i += 1;
    }
    let mut k = 6;
    while i < NUM_CLASSES {
        let mut q = 5;
        while q <= 8 {
            s[i] = (1u32 << k) / 4 * q;
            i += 1;
            q += 1;
        }
        k += 1;
    }
    s
}

/// Size in bytes of each class.
pub static CLASS_SIZES: [u32; NUM_CLASSES] = build_sizes();

const fn class_of_slow(size: usize) -> usize {
    if size <= 64 {
        if size == 0 {
            // A zero-size request gets 16 bytes, so that it is aligned for every alignment
            // `class_for` serves (16 and less) without walking up the table.
            1
        } else {
            size.div_ceil(8) - 1
        }
    } else {
        let s = size - 1;
        let k = (usize::BITS - 1 - s.leading_zeros()) as usize;
        8 + (k - 6) * 4 + ((s >> (k - 2)) - 4)
    }
}

const fn build_lut() -> [u8; LUT_MAX + 1] {
    let mut t = [0u8; LUT_MAX + 1];
    let mut i = 0;
    while i < t.len() {
        t[i] = class_of_slow(i) as u8;
        i += 1;
    }
    t
}

/// `LUT[size]` is the class of `size` for `size <= LUT_MAX`: indexed by the size itself, so
/// the lookup is one load with no rounding (1 KiB of table instead of 129 bytes, two
/// instructions off every allocation and free up to 1 KiB). A `const`, not a `static`: each
/// user gets a crate-local copy addressed RIP-relative, so the fast path does not first load
/// the table's address from the GOT.
const LUT: [u8; LUT_MAX + 1] = build_lut();

/// Class of a request whose size (rounded up to its alignment where that exceeds 8) is
/// at most [`LUT_MAX`]. One table load.
#[inline(always)]
pub fn class_of_small(size: usize) -> usize {
    debug_assert!(size <= LUT_MAX);
    // The index is in bounds for size <= LUT_MAX; `get` keeps a bad caller from reading out of
    // bounds without a panic path (the fallback is never taken for valid input).
    match LUT.get(size) {
        Some(&c) => c as usize,
        None => class_of_slow(size),
    }
}

/// The size C's `malloc` asks for a request of `n` bytes: above 8, rounded up to 16 so that
/// the block is 16-aligned (`alignof(max_align_t)` on x86-64; every class whose size is a
/// multiple of 16 is 16-aligned). Saturates, so a huge request stays huge and fails.
#[inline(always)]
pub const fn c_size(n: usize) -> usize {
    if n <= 8 {
        n
    } else {
        n.saturating_add(15) & !15
    }
}

const fn build_c_lut() -> [u8; LUT_MAX + 1] {
    let mut t = [0u8; LUT_MAX + 1];
    let mut i = 0;
    while i < t.len() {
        t[i] = class_of_slow(c_size(i)) as u8;
        i += 1;
    }
    t
}

/// `C_LUT[n]` is the class of a C request of `n <= LUT_MAX` bytes, `class_of(c_size(n))`:
/// the rounding folded into the table, so C's `malloc` finds its class with one load.
const C_LUT: [u8; LUT_MAX + 1] = build_c_lut();

/// The class of a C request of `n` bytes ([`c_size`]), or None above [`LUT_MAX`] (the caller
/// then takes the general path). One table load.
#[inline(always)]
pub fn c_class_of_small(n: usize) -> Option<usize> {
    C_LUT.get(n).map(|&c| c as usize)
}

/// Class of `size`, with no alignment constraint beyond 8. `size` must be <= MAX_SMALL.
#[inline]
pub fn class_of(size: usize) -> usize {
    debug_assert!(size <= MAX_SMALL);
    if size <= LUT_MAX {
        class_of_small(size)
    } else {
        class_of_slow(size)
    }
}

/// The class that serves a request of `size` bytes aligned to `align` (a power of two), or
/// `None` when it must be a large allocation. The returned class's size is a multiple of
/// `align`, so every slot of it is aligned (slabs start on a page boundary). The class is
/// the index of its line in `AllocStats::classes`.
#[inline]
pub fn class_for(size: usize, align: usize) -> Option<usize> {
    debug_assert!(
        align.is_power_of_two(),
        "class_for: align {align} is not a power of two"
    );
    if align > crate::sys::PAGE {
        return None;
    }
    let mask = align - 1;
    let rounded = size.checked_add(mask)? & !mask;
    if rounded > MAX_SMALL {
        return None;
    }
    let mut c = class_of(rounded);
    // Only alignments above 16 can skip classes; the walk ends at a power-of-two class at the
    // latest, and the last class (128 KiB) is a multiple of every alignment <= PAGE.
    // A mask, not `is_multiple_of`: the compiler cannot know `align` is a power of two and
    // would divide (a `div` was 14% of `free_bulk`'s samples).
    while c < NUM_CLASSES && CLASS_SIZES[c] as usize & mask != 0 {
        c += 1;
    }
    if c < NUM_CLASSES {
        Some(c)
    } else {
        None
    }
}

/// Size of class `c` (`c < NUM_CLASSES`), the usable size of its every slot.
#[inline(always)]
pub fn class_size(c: usize) -> usize {
    CLASS_SIZES[c] as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C table is the class of the C size, and every class it names above 8 bytes is a
    /// multiple of 16 (so 16-aligned).
    #[test]
    fn c_table_is_the_class_of_the_c_size() {
        for n in 0..=LUT_MAX {
            let c = c_class_of_small(n).unwrap();
            assert_eq!(c, class_of(c_size(n)), "{n}");
            assert!(CLASS_SIZES[c] as usize >= n.max(1));
            if n > 8 {
                assert_eq!(CLASS_SIZES[c] % 16, 0, "{n}");
            }
        }
        assert_eq!(c_class_of_small(LUT_MAX + 1), None);
        assert_eq!(c_size(usize::MAX), usize::MAX & !15);
    }

    #[test]
    fn table_is_monotonic_and_ends_at_max() {
        for w in CLASS_SIZES.windows(2) {
            assert!(w[0] < w[1]);
        }
        assert_eq!(CLASS_SIZES[NUM_CLASSES - 1] as usize, MAX_SMALL);
        for c in CLASS_SIZES {
            assert_eq!(c % 8, 0);
        }
    }

    #[test]
    fn class_of_is_smallest_fit() {
        assert_eq!(class_size(class_of(0)), 16);
        for size in 1..=MAX_SMALL {
            let c = class_of(size);
            assert!(class_size(c) >= size, "size {size}");
            if c > 0 {
                assert!(class_size(c - 1) < size, "size {size} class {c}");
            }
        }
    }

    #[test]
    fn class_for_respects_alignment() {
        let mut align = 1;
        while align <= 2 * crate::sys::PAGE {
            for size in (0..=MAX_SMALL + 8).step_by(7) {
                match class_for(size, align) {
                    Some(c) => {
                        assert!(class_size(c) >= size);
                        assert_eq!(class_size(c) % align, 0);
                    }
                    None => assert!(align > crate::sys::PAGE || size > MAX_SMALL - align + 1),
                }
            }
            align *= 2;
        }
    }

    #[test]
    fn waste_bounds() {
        let mut worst = 0.0f64;
        let mut sum = 0.0f64;
        let mut n = 0.0f64;
        for size in 65..=MAX_SMALL {
            let c = class_size(class_of(size));
            let w = (c - size) as f64 / c as f64;
            worst = worst.max(w);
            sum += w;
            n += 1.0;
        }
        assert!(worst <= 0.25, "worst waste {worst}");
        assert!(worst < 0.2 + 1e-9, "worst waste {worst}");
        // 7.9% today.
        assert!(sum / n < 0.085, "average waste {}", sum / n);
    }
}
