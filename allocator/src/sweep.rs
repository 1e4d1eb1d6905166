//! The process-wide decay sweep. Each cache gives its idle empty slabs back on its own slow
//! paths (`cache.rs`, `crate::decay`), and the mapping cache its idle mappings on large
//! allocations and frees, so memory of a size the program stopped using stayed resident for
//! good: redis under LD_PRELOAD freed a 100,000-element list (5 MB of 8 KiB nodes) and kept
//! those slabs through every later phase of its benchmark, where mimalloc's purge gave them
//! back. So every half decay interval, the first thread whose allocation slow path notices
//! runs the decay check of every cache and of the mapping cache; memory idle through a whole
//! interval is then gone one to two intervals after its last use, whatever the program does
//! meanwhile, as long as it allocates at all. The slow paths counted are the bin refills
//! and the first allocation under each new tenant: a service with a tenant per request
//! serves its requests from the slots the previous request left, with no refill for as long
//! as the load is steady, and kept a runaway request's 70 MB resident for good before
//! those counted too.
//!
//! The accounted twins and the dedicated caches are swept too: a tenant's burst of
//! accounted objects, or a dedicated cache's, leaves the same idle slabs behind.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::decay::INTERVAL_MS;
use crate::{cache, class_caches, large, sys};

/// When the next sweep is due (`sys::now_ms`).
static NEXT_MS: AtomicU64 = AtomicU64::new(0);

/// Runs the sweep when one is due. Called from the allocation slow path every so many slow
/// paths of a thread (`ThreadCache::tick_slow`). Every check takes its cache's lock with
/// `try_lock` and skips a held one (the next sweep looks again), so the sweep never waits
/// for a cache in use; it takes a lock again only to file the slabs it gave back.
#[cold]
#[inline(never)]
pub fn maybe() {
    let now = sys::now_ms();
    let next = NEXT_MS.load(Ordering::Relaxed);
    if now < next {
        return;
    }
    // One thread per half interval sweeps; a thread that loses the race goes on. Relaxed:
    // the word only paces the sweep, and the caches' locks order what the sweep touches.
    if NEXT_MS
        .compare_exchange(
            next,
            now + INTERVAL_MS / 2,
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return;
    }
    run();
}

/// One sweep, unpaced: the decay check of every cache and of the mapping cache. Tests run
/// it back to back (`testing::sweep_now`) against threads using the same caches.
pub fn run() {
    for c in class_caches::PLAIN.iter().chain(&class_caches::ACCOUNTED) {
        c.decay_idle();
    }
    cache::for_each_dedicated(|c| c.decay_idle());
    large::decay_idle();
}
