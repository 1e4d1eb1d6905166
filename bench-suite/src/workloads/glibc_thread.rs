//! Random replacement in a fixed working set, per thread (after glibc's
//! `benchtests/bench-malloc-thread.c`).
//!
//! Each thread owns 1024 slots and does `iterations` steps: pick a random slot, check and free
//! its object (if any), allocate a new one. Sizes are skewed to small: 4 + u^4 * 32764 bytes,
//! drawn from a precomputed table as glibc's benchmark does.

use super::SizeTable;
use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;

/// Slots per thread.
pub const WORKING_SET: usize = 1024;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads.
    pub threads: usize,
    /// Steps per thread.
    pub iterations: usize,
    /// RNG seed.
    pub seed: u64,
}

/// The size distribution.
pub fn sizes(rng: &mut XorShift) -> SizeTable {
    SizeTable::new(rng, |r| {
        let u = r.unit();
        4 + (u * u * u * u * 32764.0) as usize
    })
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0);
    let (total, corrupt) = crate::cli::run_workers("glibc_thread", cfg.threads, |t| {
        let mut rng = XorShift::new(cfg.seed + t as u64);
        let table = sizes(&mut rng);
        let mut slots: Vec<Option<Block>> = (0..WORKING_SET).map(|_| None).collect();
        let mut o = Outcome::default();
        let mut bad = 0u64;
        for _ in 0..cfg.iterations {
            let i = (rng.next_u64() as usize) & (WORKING_SET - 1);
            if let Some(b) = slots[i].take() {
                bad += o.freed(b.free());
            }
            slots[i] = Some(Block::new(table.pick(&mut rng), super::tag(&mut rng)));
            o.allocs += 1;
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
    fn tiny_run_counts() {
        let o = run(&Config {
            threads: 2,
            iterations: 3000,
            seed: 1,
        })
        .unwrap();
        assert_eq!((o.allocs, o.frees), (6000, 6000));
    }
}
