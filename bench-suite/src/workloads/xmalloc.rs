//! Producer/consumer frees (after xmalloc-test).
//!
//! `threads` producer threads each allocate `per_producer` objects of random size in
//! `min_size..=max_size`, in batches of `batch`, and send each batch over a bounded queue to
//! their partner consumer thread, which checks and frees every object (so every free is a
//! remote free, and the batch vector itself is freed remotely too). Runs 2 x `threads` threads.

use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;
use std::sync::mpsc::sync_channel;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Producer threads (and as many consumers).
    pub threads: usize,
    /// Objects per producer.
    pub per_producer: usize,
    /// Objects per queued batch.
    pub batch: usize,
    /// Batches a queue holds before the producer waits.
    pub queue_depth: usize,
    /// Object sizes.
    pub min_size: usize,
    /// Object sizes.
    pub max_size: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Config {
    /// The benchmark's setting.
    pub fn bench(threads: usize, per_producer: usize) -> Self {
        Config {
            threads,
            per_producer,
            batch: 64,
            queue_depth: 64,
            min_size: 8,
            max_size: 512,
            seed: 77,
        }
    }
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0 && cfg.batch > 0 && cfg.min_size > 0);
    let mut total = Outcome::default();
    let mut corrupt = 0;
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for t in 0..cfg.threads {
            let (tx, rx) = sync_channel::<Vec<Block>>(cfg.queue_depth);
            let cfg = cfg.clone();
            handles.push(s.spawn(move || {
                let _tenant = crate::tenancy::worker();
                let mut rng = XorShift::new(cfg.seed + t as u64);
                let mut made = 0;
                while made < cfg.per_producer {
                    let _request = crate::tenancy::request();
                    let n = cfg.batch.min(cfg.per_producer - made);
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        let size = rng.range(cfg.min_size, cfg.max_size);
                        v.push(Block::new(size, super::tag(&mut rng)));
                    }
                    made += n;
                    tx.send(v).expect("consumer gone");
                }
                (
                    Outcome {
                        allocs: made as u64,
                        frees: 0,
                    },
                    0u64,
                )
            }));
            handles.push(s.spawn(move || {
                let _tenant = crate::tenancy::worker();
                let mut o = Outcome::default();
                let mut bad = 0u64;
                for v in rx {
                    for b in v {
                        o.frees += 1;
                        if !b.free() {
                            bad += 1;
                        }
                    }
                }
                (o, bad)
            }));
        }
        for h in handles {
            let (o, bad) = h.join().expect("xmalloc thread panicked");
            total.add(&o);
            corrupt += bad;
        }
    });
    verdict(total, corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_frees_everything_remotely() {
        let cfg = Config {
            threads: 3,
            per_producer: 1000,
            batch: 7,
            queue_depth: 2,
            min_size: 1,
            max_size: 100,
            seed: 3,
        };
        let o = run(&cfg).unwrap();
        assert_eq!((o.allocs, o.frees), (3000, 3000));
    }
}
