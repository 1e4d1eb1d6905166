//! The caches behind the size classes: for every class a plain cache (kmalloc-N) and an
//! accounted twin (kmalloc-cg-N) whose slabs carry owner metadata. Keeping charged objects on
//! their own slabs, as the kernel does, means slabs of unaccounted objects never pay for
//! metadata and the free path learns whether an object is charged from its segment header.

use crate::cache::CacheCore;
use crate::size_class::{CLASS_SIZES, NUM_CLASSES};
use crate::slab::SlabLayout;

const fn build(accounted: bool) -> [CacheCore; NUM_CLASSES] {
    let mut caches = [const { CacheCore::new(placeholder_layout(), 0, false) }; NUM_CLASSES];
    let mut c = 0;
    while c < NUM_CLASSES {
        let layout = match SlabLayout::new(CLASS_SIZES[c] as usize, 8, accounted, false) {
            Some(l) => l,
            None => panic!("size class does not fit a slab"),
        };
        caches[c] = CacheCore::new(layout, c as u32, accounted);
        c += 1;
    }
    caches
}

const fn placeholder_layout() -> SlabLayout {
    match SlabLayout::new(8, 8, false, false) {
        Some(l) => l,
        None => panic!("8-byte layout"),
    }
}

/// kmalloc-N: unaccounted objects of class N.
pub static PLAIN: [CacheCore; NUM_CLASSES] = build(false);
/// kmalloc-cg-N: charged objects of class N, with owner metadata.
pub static ACCOUNTED: [CacheCore; NUM_CLASSES] = build(true);

/// The cache for class `c`, plain or accounted.
#[inline(always)]
pub fn cache(c: usize, accounted: bool) -> &'static CacheCore {
    if accounted {
        &ACCOUNTED[c]
    } else {
        &PLAIN[c]
    }
}
