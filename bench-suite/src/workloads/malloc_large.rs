//! Large blocks (after mimalloc-bench's malloc-large).
//!
//! Each thread does `iterations` steps over a ring of `live` slots: check and free the block in
//! the next slot, allocate a new block of `min_size..=max_size` bytes (5..25 MiB by default)
//! and write one word into every 4 KiB page of it (so the pages are really faulted in, and
//! an allocator that keeps and reuses them saves those faults). A check reads the head,
//! the tail and every 16th page word.

use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};

/// Bytes between touched words.
pub const PAGE: usize = 4096;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads.
    pub threads: usize,
    /// Steps per thread.
    pub iterations: usize,
    /// Live blocks per thread.
    pub live: usize,
    /// Block sizes.
    pub min_size: usize,
    /// Block sizes.
    pub max_size: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Config {
    /// The benchmark's setting (`iterations` is the knob).
    pub fn bench(threads: usize, iterations: usize) -> Self {
        Config {
            threads,
            iterations,
            live: 8,
            min_size: 5 << 20,
            max_size: 25 << 20,
            seed: 555,
        }
    }
}

struct Big {
    p: *mut u8,
    size: usize,
    tag: u64,
}

impl Big {
    fn new(size: usize, tag: u64) -> Big {
        let layout = Layout::from_size_align(size, 16).expect("layout");
        // SAFETY: non-zero size.
        let p = unsafe { alloc(layout) };
        if p.is_null() {
            handle_alloc_error(layout)
        }
        let mut off = 0;
        while off + 8 <= size {
            // SAFETY: off + 8 <= size.
            unsafe { p.add(off).cast::<u64>().write_unaligned(tag ^ off as u64) };
            off += PAGE;
        }
        // SAFETY: size >= 8 (asserted in run).
        unsafe { p.add(size - 8).cast::<u64>().write_unaligned(!tag) };
        Big { p, size, tag }
    }

    fn free(self) -> bool {
        let mut ok = true;
        let mut off = 0;
        while off + 8 <= self.size {
            // SAFETY: off + 8 <= size.
            ok &=
                unsafe { self.p.add(off).cast::<u64>().read_unaligned() } == self.tag ^ off as u64;
            off += 16 * PAGE;
        }
        // SAFETY: size >= 8; then freed once with the layout of `new`.
        unsafe {
            ok &= self.p.add(self.size - 8).cast::<u64>().read_unaligned() == !self.tag;
            dealloc(self.p, Layout::from_size_align_unchecked(self.size, 16));
        }
        ok
    }
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0 && cfg.live > 0 && cfg.min_size >= 8);
    let (total, corrupt) = crate::cli::run_workers("malloc_large", cfg.threads, |t| {
        let mut rng = XorShift::new(cfg.seed + t as u64);
        let mut ring: Vec<Option<Big>> = (0..cfg.live).map(|_| None).collect();
        let mut o = Outcome::default();
        let mut bad = 0u64;
        for i in 0..cfg.iterations {
            if let Some(b) = ring[i % cfg.live].take() {
                bad += o.freed(b.free());
            }
            let size = rng.range(cfg.min_size, cfg.max_size);
            ring[i % cfg.live] = Some(Big::new(size, super::tag(&mut rng)));
            o.allocs += 1;
        }
        for b in ring.into_iter().flatten() {
            bad += o.freed(b.free());
        }
        (o, bad)
    });
    verdict(total, corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_counts() {
        let cfg = Config {
            threads: 2,
            iterations: 10,
            live: 3,
            min_size: 8,
            max_size: 200_000,
            seed: 1,
        };
        let o = run(&cfg).unwrap();
        assert_eq!((o.allocs, o.frees), (20, 20));
    }
}
