//! Invariant walks, mimalloc's `mi_assert_expensive`: each structure states its invariant as
//! an equation in its docs and checks it by walking itself (`Bin::check`,
//! `SlabCache::check`, `ObjectStock::check`, `MappingCache::check`). The allocator runs the
//! first three at natural points of its slow paths in `debug_assertions` builds only,
//! rate-limited ([`due`]), never on a fast path and never in release builds; the stress
//! tests run all four through the hidden `slabcg_allocator::testing::check_invariants`.
//!
//! A broken invariant is reported like an invalid free: a message and an abort
//! (`sys::fatal`), which neither allocates nor unwinds out of the allocator.

use core::sync::atomic::{AtomicU32, Ordering};

/// Reports a broken invariant and aborts.
#[cold]
#[inline(never)]
pub(crate) fn broken(msg: &str) -> ! {
    crate::sys::fatal(msg)
}

/// Whether an automatic walk is due at this visit of `counter`'s point: at the visits whose
/// number is a power of two (1, 2, 4, ...) and every 4,096th after 4,096, so that a test that
/// flushes a million times walks a cache a few hundred times, not a million. Racy counters
/// are fine: a lost update only moves a walk. Always false outside `debug_assertions`,
/// where its callers are compiled out.
#[inline]
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn due(counter: &AtomicU32) -> bool {
    if !cfg!(debug_assertions) {
        return false;
    }
    let n = counter.load(Ordering::Relaxed).wrapping_add(1);
    counter.store(n, Ordering::Relaxed);
    n.is_power_of_two() || n.is_multiple_of(4096)
}
