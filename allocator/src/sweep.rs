//! The process-wide decay sweep. Each cache gives its idle empty slabs back on its own slow
//! paths (`cache.rs`, `crate::decay`), and the mapping cache its idle mappings on large
//! allocations and frees, so memory of a size the program stopped using stayed resident for
//! good: redis under LD_PRELOAD freed a 100,000-element list (5 MB of 8 KiB nodes) and kept
//! those slabs through every later phase of its benchmark, where mimalloc's purge gave them
//! back. So every half decay interval, the first thread whose allocation slow path notices
//! runs the decay check of every cache and of the mapping cache; memory idle through a whole
//! interval is then gone one to two intervals after its last use, as long as the program
//! takes such slow paths. They are the bin refills and the first allocation under each new
//! tenant (a service with a tenant per request serves its requests from the slots the
//! previous request left, with no refill while the load is steady, and kept a runaway
//! request's 70 MB resident for good before those counted too); a program whose steady
//! state takes none, or that wants no request to pay for a sweep's `madvise`, starts the
//! background thread (`decay_thread.rs`), which then sweeps alone.
//!
//! The accounted twins and the dedicated caches are swept too: a tenant's burst of
//! accounted objects, or a dedicated cache's, leaves the same idle slabs behind.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::decay;
use crate::{cache, class_caches, large, sys};

/// When the next sweep is due (`sys::now_ms`).
static NEXT_MS: AtomicU64 = AtomicU64::new(0);

/// Runs the sweep when one is due, unless the background decay thread runs
/// (`decay::background`: then the sweep is its alone). Called from the allocation slow path
/// every so many slow paths of a thread (`ThreadCache::tick_slow`).
#[cold]
#[inline(never)]
pub fn maybe() {
    if decay::background() {
        return;
    }
    paced();
}

/// Runs the sweep when one is due: at most one thread per half interval. Every check takes
/// its cache's lock with `try_lock` and skips a held one (the next sweep looks again), so
/// the sweep never waits for a cache in use; it takes a lock again only to file the slabs
/// it gave back.
pub(crate) fn paced() {
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
            now + decay::interval_ms() / 2,
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
    // The hand-back's entries that nobody took from since the last sweep: charged memory a
    // tenant's allocating thread no longer wants.
    crate::handback::release_all(true);
    for c in class_caches::PLAIN.iter().chain(&class_caches::ACCOUNTED) {
        c.decay_idle();
    }
    cache::for_each_dedicated(|c| c.decay_idle());
    large::decay_idle();
}
