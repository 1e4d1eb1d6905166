//! slabcg-allocator: the slab allocator under `slabcg`.
//!
//! # Design note
//!
//! Vocabulary (see DESIGN.md): an OS page is 4 KiB; a **slab** is 2^order OS pages cut into
//! equal **slots** `stride` bytes apart; a **cache** owns the slabs of one object layout; a
//! **size class** is a cache the global allocator uses for every request rounding up to it;
//! a **large allocation** has its own mapping. Slabs are cut from 4 MiB aligned **segments**
//! whose header holds the slab descriptors, so a pointer finds its slab by masking.
//!
//! Call tree of the fast paths (everything else is `#[cold]` or out of line):
//! ```text
//! GlobalAlloc::alloc   → global::alloc_impl → fast_class (size ≤ 128 KiB, align ≤ 8)
//!                        → no tenant:  ThreadCache::bin(c, Kind::Plain).pop()
//!                        → in a tenant: charge::alloc_small → ThreadCache::tagged_pop
//!                                       (ObjectStock::pop)
//! GlobalAlloc::dealloc → global::dealloc_impl → fast_class
//!                        → accounting never used, or plain segment: bin(c, Kind::Plain).push()
//!                        → accounted segment: charge::free_small → owner word (owner.rs,
//!                          the class's OwnerGeom in the thread cache) → tagged_push
//! ```
//! C's `free` (crate `slabcg-capi`) carries no layout: `raw::free` finds the class from the
//! segment header (or takes the large path outside segments), then joins `free_class`.
//!
//! Misses go to `init::{alloc_slow, free_slow}` (a thread's first one sets up the process
//! and the thread; then `thread_cache::{refill_pop, flush_push}` refill / flush half a bin
//! through the cache's parked batches, then its slabs) and, for charged objects, through
//! the accounting's byte stock (`charge::alloc_small_charging`, `free_small_uncharging`).
//!
//! Layers, bottom to top (each file uses only files below it; `modcycles.py` checks):
//! 1. `sys`, `lock`, `invariant` (reporting broken invariants), `size_class` (the table,
//!    `Kind`), `slab` (slab layout, `FreeObj`), `unmapped`;
//! 2. `segment` (4 MiB segments, their headers and map; a header names its cache by
//!    `CacheId`), `free_mark`;
//! 3. `cache` (`SlabCache`: slabs, lists, parked batches), `class_caches` (the size
//!    classes' plain and accounted caches);
//! 4. `owner` (owner words: `OwnerGeom`, `owner_word`, `class_owner_word`,
//!    `is_accounted`), `bin` (`Bin`, `ClassBins`);
//! 5. `object_stock` (`ObjectStock`, the armed list, the drain protocol);
//! 6. `thread_cache` (`ThreadCache`, embedding the bins and the object stock; the registry);
//! 7. `large` (large allocations, the mapping cache), `stats`;
//! 8. `init` (process and thread setup, fork handlers, the slow-path entries);
//! 9. `charge` (the accounting hooks), `dedicated`, `bulk`;
//! 10. `global` (`SlabAlloc`), `raw` (C entry points).
//!
//! Who touches what:
//! - a thread's [`thread_cache`] bins: only that thread (bin counts are read racily by
//!   stats); a drainer also reads its tagged bins' counts and, under the thread's object
//!   stock lock, writes its tag (the object-stock protocol, [`object_stock`]);
//! - the armed list of object stocks that may hold charged objects
//!   (`object_stock::ArmedList`): its lock; a stock joins when its thread retags, a drainer
//!   takes the list and puts back those still armed;
//! - a cache's lists, parked batches and slab descriptors: any thread, under the cache's
//!   spin lock;
//! - segment headers: written once at creation, read by any thread;
//! - owner words of accounted slots: the thread that allocates or frees the slot;
//! - large headers: the owner of the allocation; the mapping cache (freed large mappings):
//!   any thread, under its lock.
//!
//! Invariants are written as equations on the structures' docs and walked by their `check`
//! functions (`invariant.rs`): rate-limited in debug builds, and by the stress tests through
//! [`check_invariants`].

pub mod bin;
pub mod bulk;
pub mod cache;
pub mod charge;
pub mod class_caches;
pub mod dedicated;
#[cfg(test)]
mod fault_tests;
mod free_mark;
pub mod global;
pub mod init;
mod invariant;
pub mod large;
pub mod lock;
#[cfg(all(test, loom))]
mod loom_tests;
pub mod object_stock;
pub mod owner;
pub mod raw;
pub mod segment;
pub mod size_class;
pub mod slab;
pub mod stats;
pub mod sys;
pub mod thread_cache;
mod unmapped;

/// The caches behind the size classes under their old module name (`class_caches`).
pub use class_caches as classes;

pub use dedicated::{Cache, CacheBuilder, CacheError, CacheInfo};
pub use global::SlabAlloc;
pub use slab::{MetaPlacement, SlabLayout};
pub use stats::{stats, trim, AllocStats, ClassStats};

/// Walks every invariant the allocator states as an equation (`Bin::check`,
/// `SlabCache::check`, `ObjectStock::check`, the mapping cache's) and aborts with a message
/// on the first that does not hold: every size class's caches, every dedicated cache, the
/// calling thread's cache and object stock, and the mapping cache. For the stress tests,
/// at points where they know their own thread is off the allocator's paths; other threads
/// may keep allocating. Expensive: a walk of every free list.
#[doc(hidden)]
pub fn check_invariants() {
    for c in class_caches::PLAIN
        .iter()
        .chain(class_caches::ACCOUNTED.iter())
    {
        c.check();
    }
    cache::for_each_dedicated(|c| c.check());
    thread_cache::with(|tc| {
        if thread_cache::is_live(tc) {
            tc.check();
        }
    });
    large::check();
}
