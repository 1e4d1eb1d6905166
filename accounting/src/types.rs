//! The plain types and constants every layer shares (the bottom layer: it imports nothing of
//! the crate). The allocator sees them through `hooks`, which re-exports them.

/// An objcg id as stored in owner metadata. 0 = root / uncharged, never a real objcg.
pub type ObjCgId = u32;

/// Number of slab stat indices the stats can tell apart: the allocator's size classes, then
/// one per accounted dedicated cache (the first `MAX_SLAB_CLASSES - 52` of them with the
/// global allocator's 52 classes).
pub const MAX_SLAB_CLASSES: usize = 128;

/// Number of stat indexes: the slab classes, then `LARGE`, `SOCK`, `SLAB_OTHER`.
pub(crate) const NR_STAT: usize = MAX_SLAB_CLASSES + 3;

/// Stat index: `0..MAX_SLAB_CLASSES` = slab class i, then `LARGE`, `SOCK`, `SLAB_OTHER`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StatIdx(pub u8);

impl StatIdx {
    /// Large allocations (`StatItem::Large`).
    pub const LARGE: StatIdx = StatIdx(MAX_SLAB_CLASSES as u8);
    /// Socket buffers (`StatItem::Sock`).
    pub const SOCK: StatIdx = StatIdx(MAX_SLAB_CLASSES as u8 + 1);
    /// Slab bytes not tied to one size class (`StatItem::Slab` through `Tenant::charge`).
    pub const SLAB_OTHER: StatIdx = StatIdx(MAX_SLAB_CLASSES as u8 + 2);

    /// Slab size class `class`; out-of-range classes map to `SLAB_OTHER`.
    pub const fn slab(class: usize) -> StatIdx {
        if class < MAX_SLAB_CLASSES {
            StatIdx(class as u8)
        } else {
            StatIdx::SLAB_OTHER
        }
    }
}

/// The owner-metadata geometry of the objects charged at one slab stat index, so that
/// `tenant.stat()` can report `owner_meta` / `owner_meta_paid` without the allocator doing
/// anything per object: at stat time, objects = the index's bytes / `object_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabMeta {
    /// Bytes charged per object (its usable size). Every charge at the index must be a
    /// whole number of objects for the object count to be exact.
    pub object_size: usize,
    /// Bytes per slab that owner metadata costs: the slots given up for an array carved from
    /// the slab (`meta_cost_slots * stride`); 0 when the owner words live in per-slot padding
    /// or in the slab's leftover tail.
    pub paid_per_slab: usize,
    /// Objects per slab that share `paid_per_slab`. Each object is reported as paying
    /// `paid_per_slab / objects_per_slab`, summed before rounding, so whole slabs' worth of
    /// objects add up to exactly what their slabs gave up.
    pub objects_per_slab: usize,
}

/// Which threads' object stocks a drain asks the allocator to drain
/// (`hooks::set_object_drain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectDrain {
    /// Every thread's (`current_exact()`, `stat()`, `drain_all_stocks()`): after it, every
    /// tenant is exact.
    All,
    /// Those that may hold charged objects (a refused charge): the threads whose object
    /// stock was tagged for a tenant since a drain last found it settled, which the
    /// allocator keeps on a list of its own. Enough for every object that a drain can ever
    /// find with certainty; the one it may miss, a free preempted between its read of the
    /// tag and its push across two barriers, [`ObjectDrain::All`] still finds.
    Armed,
    /// Those of [`ObjectDrain::Armed`] that stayed armed without a retag since the previous
    /// call (the idle-stock decay, every 100 ms once many threads hold stocks): the charged
    /// objects of threads that went idle go back within two passes, as their byte stocks
    /// do. A busy thread that never retags is drained too, and settles once per two passes.
    Idle,
}

/// Bytes the allocator holds for the program outside every tenant scope, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unscoped {
    /// Slab objects (size classes and dedicated caches).
    pub slab: u64,
    /// Large blocks.
    pub large: u64,
}
