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
//!                                       (ObjectStock::pop_class; a slot a transfer left
//!                                       with another owner word: alloc_small_refused)
//! GlobalAlloc::dealloc → global::dealloc_impl → fast_class
//!                        → accounting never used, or plain segment: bin(c, Kind::Plain).push()
//!                        → accounted segment: charge::free_small → owner word (owner.rs,
//!                          the class's OwnerGeom in the thread cache) → tagged_push
//! Cache::alloc         → front_at(at).key() compared with the core's address, plus
//!                        front::ACCOUNTED for an accounted cache (dedicated; front.rs: one
//!                        compare for whose front and which kind): plain, bin.pop();
//!                        accounted, in a tenant: ObjectStock::pop of the kept bin, else
//!                        byte-stock charge, pop_of(key), owner word
//! Cache::free          → the same key compare; accounted: owner_word_if_slot (header and
//!                        slot checks) → ObjectStock::push into the kept bin, else uncharge
//!                        → front_at(at).push_of; plain: bin.push()
//! CacheBox drop        → Cache::free_owned: key compare, owner word from the handle's
//!                        copies (no checks: only a box frees its slot), one push into the kept bin
//!                        (owner is the tag) or the bin (unaccounted); else free_owned_slow
//!                        misses: init::{front_alloc_slow, front_free_slow}
//! ```
//! C's `free` (crate `slabcg-capi`) carries no layout: `raw::free` finds the class from the
//! segment header (or takes the large path outside segments), then joins `free_class`.
//!
//! Misses go to `init::{alloc_slow, free_slow}` (a thread's first one sets up the process
//! and the thread; then `thread_cache::{refill_pop, flush_push}` refill / flush half a bin,
//! a consumer's whole bin, through the cache's parked batches, then its slabs) and, for
//! charged objects, through the accounting's byte stock (`charge::alloc_small_charging`,
//! `free_small_uncharging`; the latter first gives back half a full tagged bin, or adopts a
//! run of another tenant's frees: `ThreadCache::keep_slow`).
//!
//! Layers, bottom to top (each file uses only files below it; `modcycles.py` checks):
//! 1. `sys`, `lock`, `invariant` (reporting broken invariants), `size_class` (the table,
//!    `Kind`), `addr_map` (which addresses are segments and live large blocks), `link`
//!    (`FreeObj`, free-list links: plain, or encoded in `hardened` builds), `slab` (slab
//!    layout), `unmapped`, `decay` (the pace at which idle memory goes back to the OS:
//!    low-water marks over intervals);
//! 2. `segment` (4 MiB segments, their headers and map; a header names its cache by
//!    `CacheId`), `free_mark`;
//! 3. `cache` (`SlabCache`: slabs, lists, parked batches), `class_caches` (the size
//!    classes' plain and accounted caches);
//! 4. `owner` (owner words: `OwnerGeom`, `owner_word`, `class_owner_word`,
//!    `is_accounted`), `bin` (`Bin`, `ClassBins`), `front` (`FrontBin`, the dedicated
//!    caches' per-thread bins, and the table of front indexes);
//! 5. `object_stock` (`ObjectStock`, the armed list, the drain protocol);
//! 6. `thread_cache` (`ThreadCache`, embedding the bins and the object stock; the registry);
//! 7. `large` (large allocations, the mapping cache), `stats`, `sweep` (the process-wide
//!    decay sweep), `decay_thread` (the optional background thread that runs it);
//! 8. `init` (process and thread setup, fork handlers, the slow-path entries);
//! 9. `charge` (the accounting hooks), `dedicated`, `bulk` (bulk allocation for dedicated
//!    caches and size classes), `typed` (`TypedCache`, `CacheBox`);
//! 10. `global` (`SlabAlloc`), `raw` (C entry points);
//! 11. `tenant_alloc` (the allocator-api2 `Allocator` for `TenantAlloc` and `&Cache`).
//!
//! Who touches what:
//! - a thread's front bins of dedicated caches: only that thread; their tag and count are
//!   read racily by stats, and a drainer reads a front's kept count and tag under the
//!   thread's object stock lock (a front's tag changes only under it); the table of front indexes: any building or dropping thread,
//!   by compare-and-swap;
//! - a thread's `thread_cache` bins: only that thread (bin counts are read racily by
//!   stats); a drainer also reads its tagged bins' counts and, under the thread's object
//!   stock lock, writes its tag (the object-stock protocol, `object_stock`);
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
//! `testing::check_invariants`.
//!
//! # Public API
//!
//! Every module above is private. The API is what the crate root re-exports: [`SlabAlloc`],
//! [`stats`] / [`trim`] and their [`AllocStats`] / [`ClassStats`], the pace at which freed
//! memory goes back ([`set_decay_interval_ms`], [`DEFAULT_DECAY_INTERVAL_MS`],
//! [`start_decay_thread`]), dedicated caches
//! ([`Cache`], [`CacheBuilder`], [`CacheError`], [`CacheInfo`], [`SlabLayout`],
//! [`MetaPlacement`]) and typed ones ([`TypedCache`], [`CacheBox`]), bulk allocation for the
//! size classes ([`alloc_bulk`], [`free_bulk`]), the allocator-api2 `Allocator` for
//! [`TenantAlloc`] and `&Cache` (with the [`allocator_api2`] crate it implements), the
//! size-class table as far as a reader of [`AllocStats::classes`]
//! needs it ([`class_for`], [`class_size`], [`NUM_CLASSES`], [`MAX_SMALL`]), and [`raw`], the
//! layout-free entry points of C ABI front-ends (`slabcg-capi`). The hidden `testing` module
//! re-exports the few internals that the workspace's own tests and benches look at; it is
//! not part of the API.

#![warn(missing_docs)]

mod addr_map;
mod bin;
mod bulk;
mod cache;
mod charge;
mod class_caches;
mod decay;
mod decay_thread;
mod dedicated;
#[cfg(test)]
mod fault_tests;
mod free_mark;
mod front;
mod global;
mod handback;
mod init;
mod invariant;
mod large;
mod link;
mod lock;
#[cfg(all(test, loom))]
mod loom_tests;
mod object_stock;
mod owner;
pub mod raw;
mod segment;
mod size_class;
mod slab;
mod stats;
mod sweep;
mod sys;
mod tenant_alloc;
mod thread_cache;
mod typed;
mod unmapped;

/// The crate whose `Allocator` trait [`TenantAlloc`] and `&Cache` implement (the version
/// they were built against; its `vec::Vec` and `boxed::Box` take them).
pub use allocator_api2;
pub use bulk::{alloc_bulk, free_bulk};
pub use decay::{set_interval as set_decay_interval_ms, INTERVAL_MS as DEFAULT_DECAY_INTERVAL_MS};

/// Starts the background decay thread, `slabcg-decay`, unless it runs already: every half
/// decay interval (250 ms by default, [`set_decay_interval_ms`])
/// it gives back the memory that stayed idle through a whole interval, so that memory a
/// burst left behind goes back to the OS one to two intervals after its last use whatever
/// the program does meanwhile. From then on no allocation or free path gives memory back
/// (except the mapping cache's, on large allocations and frees): the `madvise` of a burst's
/// tens of MB runs on this thread, not on a request's. The thread sleeps between sweeps,
/// allocates nothing, and skips a cache whose lock is held. Call it once at startup in a
/// long-running program (a service). `Err` only when the thread could not be spawned;
/// nothing changed then, and a later call tries again. After a `fork`, the child has no
/// such thread until it calls this again (slabcg's fork handlers, registered by this call
/// if nothing did before, reset its flag).
///
/// ```
/// slabcg_allocator::start_decay_thread().expect("a thread");
/// // A second call finds the thread running.
/// slabcg_allocator::start_decay_thread().unwrap();
/// ```
pub fn start_decay_thread() -> std::io::Result<()> {
    // The setup first, which registers the fork handlers whose `fork_child` forgets the
    // thread in a child (it is not there): a program on another global allocator may call
    // this before anything ran the setup, and a child forked then believed the thread ran,
    // so nothing gave memory back there.
    init::init_once();
    decay_thread::start()
}

pub use dedicated::{Cache, CacheBuilder, CacheError, CacheInfo};
pub use global::SlabAlloc;
pub use size_class::{class_for, class_size, MAX_SMALL, NUM_CLASSES};
pub use slab::{MetaPlacement, SlabLayout};
pub use stats::{stats, trim, AllocStats, ClassStats};
pub use tenant_alloc::TenantAlloc;
pub use typed::{CacheBox, TypedCache};

/// Internals that the workspace's own tests, examples and benches reach; not a stable API
/// (hidden from the docs, may change in any release).
#[doc(hidden)]
pub mod testing {
    use crate::{cache, class_caches, large};

    /// `tests/owner_meta.rs`: the size classes' accounted caches and their layouts.
    pub use crate::class_caches::ACCOUNTED;
    /// `allocator/tests/contract.rs`: the accounted bit of a segment address.
    pub use crate::segment::{segment_of, ACCOUNTED_BIT};
    /// `tests/object_stock*_caching.rs`, `allocator/tests/trim_fork.rs`: a size's class
    /// without the alignment walk of `class_for`.
    pub use crate::size_class::class_of;
    /// `tests/common/kept_free.rs`: which of a class's two caches a bin serves.
    pub use crate::size_class::Kind;
    /// `allocator/tests/contract.rs`: the class table itself.
    pub use crate::size_class::CLASS_SIZES;
    /// `tests/owner_meta.rs`: the bytes of one owner word.
    pub use crate::slab::META_BYTES;

    /// `allocator/tests/retention.rs`: the decay interval, and the bytes of freed large
    /// extents the mapping cache holds.
    pub use crate::decay::INTERVAL_MS as DECAY_INTERVAL_MS;
    pub fn large_cached() -> usize {
        large::CACHED.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// `allocator/tests/sweep_races.rs`: one decay sweep now, whatever its pace (every
    /// cache's `try_lock` against the threads that use it).
    pub fn sweep_now() {
        crate::sweep::run();
    }

    /// `tests/handback.rs`: what the hand-back holds now and what passed through it, and
    /// its bound in bytes.
    pub use crate::handback::{Counts as HandbackCounts, BYTES_BOUND as HANDBACK_BYTES_BOUND};
    pub fn handback_counts() -> HandbackCounts {
        crate::handback::counts()
    }
    /// `tests/handback.rs`: a function run after each entry the hand-back's release gives
    /// back (None: none), to put chains in the middle of a drain.
    pub fn set_handback_release_hook(f: Option<fn()>) {
        crate::handback::set_release_hook(f)
    }

    /// `tests/common/kept_free.rs`: the calling thread's cache, to count a bin's slots.
    pub mod thread_cache {
        pub use crate::thread_cache::with;
    }

    /// Walks every invariant the allocator states as an equation (`Bin::check`,
    /// `SlabCache::check`, `ObjectStock::check`, the mapping cache's) and aborts with a
    /// message on the first that does not hold: every size class's caches, every dedicated
    /// cache, the calling thread's cache and object stock, and the mapping cache. For the
    /// stress tests (`tests/common/stress.rs`), at points where they know their own thread
    /// is off the allocator's paths; other threads may keep allocating. Expensive: a walk
    /// of every free list.
    pub fn check_invariants() {
        for c in class_caches::PLAIN
            .iter()
            .chain(class_caches::ACCOUNTED.iter())
        {
            c.check();
        }
        cache::for_each_dedicated(|c| c.check());
        crate::thread_cache::with(|tc| {
            if crate::thread_cache::is_live(tc) {
                tc.check();
            }
        });
        large::check();
    }
}
