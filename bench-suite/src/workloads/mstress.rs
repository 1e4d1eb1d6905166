//! Thread churn with objects that outlive their thread (after mimalloc's `test/test-stress.c`,
//! "mstress" in mimalloc-bench).
//!
//! `rounds` times, `threads` threads are created. Each does `steps` random actions on its own
//! list of objects: allocate (size a power of two 32..4096, 1 in 100 up to 256 KiB), check and
//! free one, or swap one with a random slot of a global transfer array (so it gets freed by
//! some other thread, maybe in a later round). When a thread ends it frees half of what it
//! holds and leaves the rest in a global "retained" pool; each thread of the next round starts
//! by freeing its share of that pool. So objects outlive the thread that allocated them and
//! threads are destroyed and recreated while the heap stays populated.

use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads per round.
    pub threads: usize,
    /// Rounds of thread creation.
    pub rounds: usize,
    /// Actions per thread.
    pub steps: usize,
    /// Slots of the transfer array.
    pub transfer_slots: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Config {
    /// The benchmark's setting (`steps` is the knob).
    pub fn bench(threads: usize, steps: usize) -> Self {
        Config {
            threads,
            rounds: 10,
            steps,
            transfer_slots: 1000,
            seed: 42,
        }
    }
}

struct Shared {
    transfer: Vec<AtomicPtr<u8>>,
    retained: Mutex<Vec<Block>>,
    allocs: AtomicU64,
    frees: AtomicU64,
    corrupt: AtomicU64,
}

impl Shared {
    fn free(&self, b: Block) {
        self.frees.fetch_add(1, Ordering::Relaxed);
        if !b.free() {
            self.corrupt.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn size_of(rng: &mut XorShift) -> usize {
    if rng.below(100) == 0 {
        1 << rng.range(13, 18) // 8 KiB .. 256 KiB
    } else {
        1 << rng.range(5, 12) // 32 .. 4096 (self-describing objects need >= 24)
    }
}

fn worker(sh: &Shared, cfg: &Config, round: usize, t: usize) {
    let mut rng = XorShift::new(cfg.seed ^ ((round as u64) << 20) ^ t as u64);
    // take this thread's share of what the previous round left behind
    let inherited = {
        let mut r = sh.retained.lock().unwrap();
        // racy with this round's finishing threads adding to the pool; any share is fine
        let keep = r.len() - r.len().div_ceil(cfg.threads);
        r.split_off(keep)
    };
    for b in inherited {
        sh.free(b);
    }
    let mut mine: Vec<Block> = Vec::with_capacity(cfg.steps / 2 + 1);
    let mut allocs = 0u64;
    for _ in 0..cfg.steps {
        let r = rng.below(100);
        if r < 45 || mine.is_empty() {
            mine.push(Block::new(size_of(&mut rng), super::tag(&mut rng)));
            allocs += 1;
        } else if r < 80 {
            let i = rng.below(mine.len());
            sh.free(mine.swap_remove(i));
        } else {
            let i = rng.below(mine.len());
            let p = mine.swap_remove(i).into_raw();
            let slot = &sh.transfer[rng.below(sh.transfer.len())];
            let old = slot.swap(p, Ordering::AcqRel);
            if !old.is_null() {
                // SAFETY: every non-null slot value came from into_raw and is taken out once
                // (the swap gives it to exactly one thread).
                mine.push(unsafe { Block::from_raw(old) });
            }
        }
    }
    sh.allocs.fetch_add(allocs, Ordering::Relaxed);
    // free half, leave the rest to outlive this thread
    let keep = mine.split_off(mine.len() / 2);
    for b in mine {
        sh.free(b);
    }
    sh.retained.lock().unwrap().extend(keep);
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0 && cfg.transfer_slots > 0);
    let sh = Shared {
        transfer: (0..cfg.transfer_slots)
            .map(|_| AtomicPtr::new(core::ptr::null_mut()))
            .collect(),
        retained: Mutex::new(Vec::new()),
        allocs: AtomicU64::new(0),
        frees: AtomicU64::new(0),
        corrupt: AtomicU64::new(0),
    };
    for round in 0..cfg.rounds {
        std::thread::scope(|s| {
            for t in 0..cfg.threads {
                let sh = &sh;
                s.spawn(move || {
                    let _tenant = crate::tenancy::worker();
                    worker(sh, cfg, round, t)
                });
            }
        });
    }
    for slot in &sh.transfer {
        let p = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: as in `worker`.
            sh.free(unsafe { Block::from_raw(p) });
        }
    }
    for b in std::mem::take(&mut *sh.retained.lock().unwrap()) {
        sh.free(b);
    }
    let o = Outcome {
        allocs: sh.allocs.load(Ordering::Relaxed),
        frees: sh.frees.load(Ordering::Relaxed),
    };
    verdict(o, sh.corrupt.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_balances() {
        let cfg = Config {
            threads: 3,
            rounds: 4,
            steps: 2000,
            transfer_slots: 16,
            seed: 9,
        };
        let o = run(&cfg).unwrap();
        assert!(o.allocs > 4 * 3 * 2000 * 40 / 100);
        assert_eq!(o.allocs, o.frees);
    }
}
