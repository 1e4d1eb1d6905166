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

/// Interval length. Long next to the time between a free and the allocation that reuses its
/// memory in a busy program (microseconds to milliseconds); short enough that a program
/// that shrank for good sees its resident set follow within a second.
pub const INTERVAL_MS: u64 = 500;

/// A low-water mark over the current interval.
///
/// Invariant: `low` is at most every value the pool held since `tick` (its owner calls
/// [`observe`](Self::observe) after every decrease).
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

    /// When an interval is over at `now` (ms, `sys::now_ms`): the amount that stayed idle
    /// through it (at most `amount`, what the pool holds now), which the caller gives back,
    /// and a new interval begins with the low-water mark at `amount` (the caller observes
    /// what is left after giving back). `None` while the interval runs.
    pub fn due(&mut self, now: u64, amount: usize) -> Option<usize> {
        if now.wrapping_sub(self.tick) < INTERVAL_MS {
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
}
