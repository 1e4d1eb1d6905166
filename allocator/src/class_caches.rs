//! The caches behind the size classes (the table itself is `size_class.rs`): for every class a plain cache (kmalloc-N) and an
//! accounted twin (kmalloc-cg-N) whose slabs carry owner metadata. Keeping charged objects on
//! their own slabs, as the kernel does, means slabs of unaccounted objects never pay for
//! metadata and the free path learns whether an object is charged from one bit of its address
//! (accounted segments sit at odd multiples of 4 MiB, `segment::ACCOUNTED_BIT`).

use slabcg_accounting::hooks::{self, SlabMeta, StatIdx};

use crate::cache::SlabCache;
use crate::size_class::{Kind, CLASS_SIZES, NUM_CLASSES};
use crate::slab::SlabLayout;

const fn build(kind: Kind) -> [SlabCache; NUM_CLASSES] {
    let mut caches = [const { SlabCache::new(placeholder_layout(), 0, false) }; NUM_CLASSES];
    let mut c = 0;
    while c < NUM_CLASSES {
        caches[c] = SlabCache::new(class_layout(c, kind), c as u32, kind.is_accounted());
        c += 1;
    }
    caches
}

/// The layout of class `c`'s plain cache or accounted twin (what `PLAIN[c].layout` and
/// `ACCOUNTED[c].layout` hold), usable in const contexts such as the thread cache's
/// initialiser.
pub const fn class_layout(c: usize, kind: Kind) -> SlabLayout {
    match SlabLayout::for_class(CLASS_SIZES[c] as usize, kind.is_accounted()) {
        Some(l) => l,
        None => panic!("size class does not fit a slab"),
    }
}

const fn placeholder_layout() -> SlabLayout {
    match SlabLayout::new(8, 8, false, false) {
        Some(l) => l,
        None => panic!("8-byte layout"),
    }
}

/// kmalloc-N: unaccounted objects of class N.
pub static PLAIN: [SlabCache; NUM_CLASSES] = build(Kind::Plain);
/// kmalloc-cg-N: charged objects of class N, with owner metadata.
pub static ACCOUNTED: [SlabCache; NUM_CLASSES] = build(Kind::Accounted);

/// The cache of class `c` of this kind.
#[inline(always)]
pub fn cache(c: usize, kind: Kind) -> &'static SlabCache {
    match kind {
        Kind::Plain => &PLAIN[c],
        Kind::Accounted => &ACCOUNTED[c],
    }
}

/// The owner-metadata geometry the accounting needs to report `owner_meta_paid` for objects
/// of an accounted cache with layout `l`. Only an `External` array costs memory: the slab
/// gives up `meta_cost_slots` whole slots to hold `objects` owner words, so that is what its
/// objects pay (more than the 4 bytes per object the words themselves take).
pub(crate) fn owner_meta(l: &SlabLayout) -> SlabMeta {
    SlabMeta {
        object_size: l.object_size,
        paid_per_slab: l.meta_bytes_paid(),
        objects_per_slab: l.objects,
    }
}

/// Tells the accounting the sizes of the size classes and the owner-metadata geometry of
/// their accounted twins (the caches whose objects it is charged for), for `tenant.stat()`.
/// Run once, by `init::init_once`, before any object is charged.
pub(crate) fn register_with_accounting() {
    hooks::set_slab_class_sizes(&CLASS_SIZES);
    for (c, cache) in ACCOUNTED.iter().enumerate() {
        hooks::set_slab_meta(StatIdx::slab(c), owner_meta(&cache.layout));
    }
}
