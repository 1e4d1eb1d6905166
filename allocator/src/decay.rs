//! The pace at which idle memory goes back to the OS: memory freed by the program is kept
//! for reuse, and what stayed unused through a whole interval is given back at the end of
//! it, as jemalloc's decay and mimalloc's purge delay do. Giving pages back at once costs a
//! page fault (and the kernel clearing the page) per page when the program allocates again a
//! moment later, which is the common case: a program that frees a batch usually builds the
//! next one.
//!
//! Each pool of idle memory (a cache's empty slabs, the mapping cache) keeps a [`Decay`]: the
//! least amount it held since the interval began, its *low-water mark*. Memory below that mark
//! was idle for the whole interval; memory above it was reused meanwhile. The owner checks
//! the clock on its slow paths (never on a fast path, no timer thread) and gives the
//! low-water amount back when an interval is over, so idle memory is gone one to two
//! intervals after its last use, provided the program still allocates or frees on that
//! path; `trim()` gives everything back at once. Each pool also bounds what it keeps, so a
//! burst of frees cannot keep more than that bound even for one interval.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Set while the background decay thread runs (`decay_thread.rs`): then giving idle memory
/// back is that thread's job alone, and no allocation or free path does it (the sweep's
/// slow-path entry, the caches' checks on their refills and flushes). A runaway request's
/// 70 MB given back with `madvise` on a request thread took that thread off its requests
/// for milliseconds: the others' p99 went from 0.8 ms to 12 ms. The mapping cache still
/// checks on large allocations and frees, which unmap on their own thread anyway.
static BACKGROUND: AtomicBool = AtomicBool::new(false);

/// Says whether the background decay thread runs (`decay_thread.rs`, and its fork child).
pub fn set_background(on: bool) {
    BACKGROUND.store(on, Ordering::Relaxed);
}

/// Whether the background decay thread gives idle memory back ([`set_background`]). A
/// relaxed load: a path that misses a change makes one check more or one fewer.
#[inline]
pub fn background() -> bool {
    BACKGROUND.load(Ordering::Relaxed)
}

/// The default interval length. Long next to the time between a free and the allocation
/// that reuses its memory in a busy program (microseconds to milliseconds); short enough
/// that a program that shrank for good sees its resident set follow within a second.
pub const INTERVAL_MS: u64 = 500;

/// The interval in force: [`INTERVAL_MS`] unless the program set another
/// ([`set_interval`]).
static INTERVAL: AtomicU64 = AtomicU64::new(INTERVAL_MS);

/// The shortest and longest intervals [`set_interval`] takes.
const INTERVAL_RANGE_MS: (u64, u64) = (10, 3_600_000);

/// Sets the decay interval (milliseconds, clamped to 10 ms-1 h) and returns the one in force
/// now. A longer one keeps freed memory through longer pauses in its reuse, as jemalloc's
/// `dirty_decay_ms` (10 s by default) does: a service that a tenant's runaway requests hit
/// every second or so keeps their memory for the next one instead of giving it back and
/// faulting it in again each time (the madvise and the page clearing cost the other
/// requests' latency); the memory then goes back one to two intervals after the runaways
/// stop. Pools already inside an interval keep the start they had.
///
/// ```
/// let was = slabcg_allocator::set_decay_interval_ms(5_000);
/// assert_eq!(was, 5_000);
/// slabcg_allocator::set_decay_interval_ms(slabcg_allocator::DEFAULT_DECAY_INTERVAL_MS);
/// ```
pub fn set_interval(ms: u64) -> u64 {
    let ms = ms.clamp(INTERVAL_RANGE_MS.0, INTERVAL_RANGE_MS.1);
    INTERVAL.store(ms, Ordering::Relaxed);
    ms
}

/// The decay interval in force (milliseconds). A relaxed load: the interval only paces.
#[inline]
pub fn interval_ms() -> u64 {
    INTERVAL.load(Ordering::Relaxed)
}

/// A low-water mark over the current interval.
///
/// Invariant: for a pool used as a stack (items taken from the top, or out of the middle
/// with those above moving down), its bottom `low` items stayed in it, untouched, since
/// `tick`: `low` is at most every value the pool held since then (its owner calls
/// [`observe`](Self::observe) after every decrease), less one for each item taken out from
/// under it ([`removed_at`](Self::removed_at)).
pub struct Decay {
    low: usize,
    tick: u64,
}

impl Decay {
    pub const fn new() -> Decay {
        Decay { low: 0, tick: 0 }
    }

    /// Records the pool's current amount (after a decrease; an increase needs no call).
    #[inline]
    pub fn observe(&mut self, amount: usize) {
        self.low = self.low.min(amount);
    }

    /// An item at position `i` from the bottom was taken out from under the others (they
    /// moved down one). One below the mark leaves the bottom `low - 1` items untouched: the
    /// one that moved down to `low - 1` was above the mark, so it may have been reused. One
    /// at or above the mark changes nothing below it.
    #[inline]
    pub fn removed_at(&mut self, i: usize) {
        self.taken_out(i, 1);
    }

    /// [`removed_at`](Self::removed_at) for a pool counted in bytes: `len` of them at
    /// `at` from the bottom were taken out from under the others (they moved down by
    /// `len`). What was below the mark stays idle, less what was taken: the mark goes down
    /// by `len`, but not below `at`, since what moved down to there was above it.
    #[inline]
    pub fn taken_out(&mut self, at: usize, len: usize) {
        if at < self.low {
            self.low = at.max(self.low - len.min(self.low));
        }
    }

    /// When an interval is over at `now` (ms, `sys::now_ms`): the amount that stayed idle
    /// through it (at most `amount`, what the pool holds now), which the caller gives back,
    /// and a new interval begins with the low-water mark at `amount` (the caller observes
    /// what is left after giving back). `None` while the interval runs.
    pub fn due(&mut self, now: u64, amount: usize) -> Option<usize> {
        // A clock read older than the tick (taken before the pool's lock, which another
        // caller with a later read got first) is inside the interval that caller began.
        if now.saturating_sub(self.tick) < interval_ms() {
            return None;
        }
        let idle = self.low.min(amount);
        self.tick = now;
        self.low = amount;
        Some(idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only what stayed below the low-water mark through a whole interval is due, once per
    /// interval.
    #[test]
    fn only_memory_idle_for_a_whole_interval_is_due() {
        let mut d = Decay::new();
        let t = 1_000_000;
        assert_eq!(d.due(t, 0), Some(0), "the first check starts an interval");
        // Grows to 80, dips to 30 mid-interval, back up to 80.
        d.observe(30);
        assert_eq!(
            d.due(t + INTERVAL_MS - 1, 80),
            None,
            "the interval still runs"
        );
        assert_eq!(d.due(t + INTERVAL_MS, 80), Some(0), "low 0: it began empty");
        d.observe(80);
        d.observe(30);
        assert_eq!(d.due(t + 2 * INTERVAL_MS, 80), Some(30));
        d.observe(50);
        assert_eq!(
            d.due(t + 2 * INTERVAL_MS + 1, 50),
            None,
            "once per interval"
        );
        assert_eq!(
            d.due(t + 3 * INTERVAL_MS, 50),
            Some(50),
            "untouched: all of it"
        );
    }

    /// Bytes taken out from under the mark (the mapping cache's best fit): what stayed
    /// below it stays idle, what moved down to it does not.
    #[test]
    fn bytes_taken_from_under_the_mark_leave_the_rest_idle() {
        let t = 1_000_000;
        // Extents A (100) and B (30), oldest first; the interval begins with both idle and
        // then C (50) is freed: the mark stays at 130.
        let fresh = || {
            let mut d = Decay::new();
            d.due(t, 130);
            d
        };
        // A taken: B stays idle, C (moved down to 30..80) does not.
        let mut d = fresh();
        d.taken_out(0, 100);
        assert_eq!(d.due(t + INTERVAL_MS, 80), Some(30));
        // B taken: A stays idle, C moved down to 100..150 does not.
        let mut d = fresh();
        d.taken_out(100, 30);
        assert_eq!(d.due(t + INTERVAL_MS, 150), Some(100));
        // C taken: above the mark, nothing changes.
        let mut d = fresh();
        d.taken_out(130, 50);
        assert_eq!(d.due(t + INTERVAL_MS, 130), Some(130));
        // 40 cut off the front of A: its other 60 and B stay idle.
        let mut d = fresh();
        d.taken_out(0, 40);
        assert_eq!(d.due(t + INTERVAL_MS, 140), Some(90));
        // Only A idle (B freed in the interval too), then A taken: B, just freed, is not.
        let mut d = Decay::new();
        d.due(t, 100);
        d.taken_out(0, 100);
        assert_eq!(d.due(t + INTERVAL_MS, 30), Some(0));
    }
}
