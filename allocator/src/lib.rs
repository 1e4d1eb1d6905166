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
//!                        → no tenant:  ThreadCache bin.pop()
//!                        → in a tenant: charge::alloc_small → ThreadCache::tagged_pop (object stock)
//! GlobalAlloc::dealloc → global::dealloc_impl → fast_class
//!                        → accounting never used, or plain segment: ThreadCache bin.push()
//!                        → accounted segment: charge::free_small → owner word → tagged_push
//! ```
//! C's `free` (crate `slabcg-capi`) carries no layout: `raw::free` finds the class from the
//! segment header (or takes the large path outside segments), then joins `free_class`.
//!
//! Misses go to `thread_cache::{alloc_slow, free_slow}` (refill / flush half a bin through
//! the cache's transfer cache, then its slabs) and, for charged objects, through the
//! accounting's byte stock (`charge::alloc_small_charging`, `free_small_uncharging`).
//!
//! Who touches what:
//! - a thread's [`thread_cache`] bins: only that thread (bin counts are read racily by
//!   stats); a drainer also reads its tagged bins' counts and, under the thread's `stock`
//!   lock, writes its tag (the object-stock protocol, [`object_stock`]);
//! - the armed list of thread caches whose object stock may hold charged objects
//!   (`object_stock::ArmedList`): its lock; a thread joins when it retags, a drainer takes
//!   the list and puts back those still armed;
//! - a cache's lists, transfer cache and slab descriptors: any thread, under the cache's
//!   spin lock;
//! - segment headers: written once at creation, read by any thread;
//! - owner words of accounted slots: the thread that allocates or frees the slot;
//! - large headers: the owner of the allocation; the large-mapping cache: any thread, under
//!   its lock.

pub mod bin;
pub mod bulk;
pub mod cache;
pub mod charge;
pub mod class_caches;
pub mod dedicated;
mod free_mark;
pub mod global;
pub mod init;
mod invariant;
pub mod large;
pub mod lock;
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
    for c in class_caches::PLAIN.iter().chain(class_caches::ACCOUNTED.iter()) {
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
