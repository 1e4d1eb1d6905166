//! Random replacement with Pareto-distributed sizes (after ITHare's alloc-test,
//! "alloc-test1/N" in mimalloc-bench).
//!
//! Each thread owns `slots` slots, initially empty. Each step picks a random slot: if it
//! holds an object, check and free it; then, with probability 3/4, allocate a new object
//! whose size follows a Pareto distribution (x_m = 16 bytes, alpha = 1.1, capped at 64 KiB:
//! mostly small, a heavy tail). The slots left at the end are freed.

use super::SizeTable;
use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads.
    pub threads: usize,
    /// Steps per thread.
    pub steps: usize,
    /// Slots per thread.
    pub slots: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Config {
    /// The benchmark's setting (`steps` is the knob).
    pub fn bench(threads: usize, steps: usize) -> Self {
        Config {
            threads,
            steps,
            slots: 8192,
            seed: 99,
        }
    }
}

/// Pareto(x_m, alpha) capped at `cap`.
pub fn pareto(rng: &mut XorShift, xm: f64, alpha: f64, cap: usize) -> usize {
    let u = 1.0 - rng.unit(); // (0, 1]
    ((xm / u.powf(1.0 / alpha)) as usize).min(cap)
}

/// The size distribution.
pub fn sizes(rng: &mut XorShift) -> SizeTable {
    SizeTable::new(rng, |r| pareto(r, 16.0, 1.1, 64 << 10))
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0 && cfg.slots > 0);
    let (total, corrupt) = crate::cli::run_workers("alloc_test", cfg.threads, |t| {
        let mut rng = XorShift::new(cfg.seed + t as u64);
        let table = sizes(&mut rng);
        let mut slots: Vec<Option<Block>> = (0..cfg.slots).map(|_| None).collect();
        let mut o = Outcome::default();
        let mut bad = 0u64;
        for _ in 0..cfg.steps {
            let r = rng.next_u64();
            let i = (((r >> 32) * cfg.slots as u64) >> 32) as usize;
            if let Some(b) = slots[i].take() {
                bad += o.freed(b.free());
            }
            if r & 3 != 0 {
                slots[i] = Some(Block::new(table.pick(&mut rng), super::tag(&mut rng)));
                o.allocs += 1;
            }
        }
        for b in slots.into_iter().flatten() {
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
    fn tiny_run_balances() {
        let o = run(&Config {
            threads: 2,
            steps: 5000,
            slots: 64,
            seed: 1,
        })
        .unwrap();
        assert!(o.allocs > 2 * 5000 / 2);
        assert_eq!(o.allocs, o.frees);
    }

    #[test]
    fn pareto_shape() {
        let mut r = XorShift::new(3);
        let v: Vec<usize> = (0..100_000)
            .map(|_| pareto(&mut r, 16.0, 1.1, 64 << 10))
            .collect();
        let small = v.iter().filter(|&&s| s < 64).count();
        assert!(v.iter().all(|&s| (16..=64 << 10).contains(&s)));
        // P(X < 64) = 1 - (16/64)^1.1 ~= 0.78
        assert!((75_000..81_000).contains(&small), "{small}");
        assert!(v.contains(&(64 << 10)));
    }
}
