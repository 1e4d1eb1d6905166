//! Batches of same-size objects (after glibc's `benchtests/bench-malloc-simple.c`).
//!
//! Each thread runs `iterations` passes; a pass, for every size in [`SIZES`] and every
//! count in [`COUNTS`], allocates `count` objects of that size, then checks and frees them
//! all (in allocation order). Every thread works alone; with 1 thread (the default) this is
//! the single-thread fast path.

use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};

/// Object sizes of a pass.
pub const SIZES: [usize; 7] = [16, 32, 64, 128, 256, 512, 1024];
/// Batch lengths of a pass.
pub const COUNTS: [usize; 4] = [1, 25, 100, 400];

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads.
    pub threads: usize,
    /// Passes per thread.
    pub iterations: usize,
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0);
    let (total, corrupt) = crate::cli::run_workers("glibc_simple", cfg.threads, |t| {
        let mut o = Outcome::default();
        let mut bad = 0u64;
        let mut live: Vec<Block> = Vec::with_capacity(*COUNTS.iter().max().unwrap());
        for it in 0..cfg.iterations {
            for &size in &SIZES {
                for &count in &COUNTS {
                    for k in 0..count {
                        live.push(Block::new(
                            size,
                            ((it * 1000 + k) as u64) << 8 | t as u64 | 1,
                        ));
                    }
                    o.allocs += count as u64;
                    o.frees += count as u64;
                    for b in live.drain(..) {
                        bad += u64::from(!b.free());
                    }
                }
            }
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
            iterations: 3,
        })
        .unwrap();
        let per_pass: usize = SIZES.len() * COUNTS.iter().sum::<usize>();
        assert_eq!(o.allocs, (2 * 3 * per_pass) as u64);
        assert_eq!(o.frees, o.allocs);
    }
}
