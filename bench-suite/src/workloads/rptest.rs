//! Working sets with cross-thread frees (after rpmalloc's benchmark, "rptest" in
//! mimalloc-bench).
//!
//! Each thread keeps a working set of `working_set` objects with sizes 8..=16000 bytes
//! (skewed to small: size = 8 + u^3 * 15992). Every loop it replaces `batch` random objects;
//! `cross_pct` percent of the old objects are not freed but passed to the next thread, which
//! checks and frees them at the end of its own loop (a remote free for the allocator).
//! An inbox holds at most `inbox_limit` objects: a sender whose partner lags behind waits
//! (yields) until the partner has drained it, or frees locally once the partner has finished,
//! so memory stays bounded however the threads are scheduled.

use super::SizeTable;
use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads.
    pub threads: usize,
    /// Loops per thread.
    pub loops: usize,
    /// Replacements per loop.
    pub batch: usize,
    /// Objects per working set.
    pub working_set: usize,
    /// Percent of frees handed to the next thread.
    pub cross_pct: usize,
    /// Objects an inbox may hold before its sender waits.
    pub inbox_limit: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Config {
    /// The benchmark's setting (`loops` is the knob).
    pub fn bench(threads: usize, loops: usize) -> Self {
        Config {
            threads,
            loops,
            batch: 64,
            working_set: 2000,
            cross_pct: 25,
            inbox_limit: 1024,
            seed: 1234,
        }
    }
}

/// The size distribution.
pub fn sizes(rng: &mut XorShift) -> SizeTable {
    SizeTable::new(rng, |r| {
        let u = r.unit();
        8 + (u * u * u * 15992.0) as usize
    })
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0 && cfg.working_set > 0);
    let done: Vec<AtomicBool> = (0..cfg.threads).map(|_| AtomicBool::new(false)).collect();
    let inboxes: Vec<Mutex<Vec<Block>>> =
        (0..cfg.threads).map(|_| Mutex::new(Vec::new())).collect();
    let (mut total, mut corrupt) = crate::cli::run_workers("rptest", cfg.threads, |t| {
        let mut rng = XorShift::new(cfg.seed + t as u64);
        let table = sizes(&mut rng);
        let mut o = Outcome::default();
        let mut bad = 0u64;
        let mut ws: Vec<Block> = (0..cfg.working_set)
            .map(|_| Block::new(table.pick(&mut rng), super::tag(&mut rng)))
            .collect();
        o.allocs += cfg.working_set as u64;
        let mut outgoing = Vec::new();
        let n = (t + 1) % cfg.threads;
        let next = &inboxes[n];
        for _ in 0..cfg.loops {
            let _request = crate::tenancy::request();
            for _ in 0..cfg.batch {
                let i = rng.below(ws.len());
                let nb = Block::new(table.pick(&mut rng), super::tag(&mut rng));
                o.allocs += 1;
                let old = std::mem::replace(&mut ws[i], nb);
                if rng.below(100) < cfg.cross_pct {
                    outgoing.push(old);
                } else {
                    bad += o.freed(old.free());
                }
            }
            let incoming = std::mem::take(&mut *inboxes[t].lock().unwrap());
            for b in incoming {
                bad += o.freed(b.free());
            }
            while !outgoing.is_empty() {
                {
                    let mut ib = next.lock().unwrap();
                    if ib.len() < cfg.inbox_limit || n == t {
                        ib.append(&mut outgoing);
                        break;
                    }
                }
                if done[n].load(Ordering::Acquire) {
                    for b in outgoing.drain(..) {
                        bad += o.freed(b.free());
                    }
                    break;
                }
                // drain our own inbox while waiting, so two full inboxes cannot
                // wait on each other
                let incoming = std::mem::take(&mut *inboxes[t].lock().unwrap());
                for b in incoming {
                    bad += o.freed(b.free());
                }
                std::thread::yield_now();
            }
        }
        done[t].store(true, Ordering::Release);
        for b in ws {
            bad += o.freed(b.free());
        }
        (o, bad)
    });
    for ib in inboxes {
        for b in ib.into_inner().unwrap() {
            corrupt += total.freed(b.free());
        }
    }
    verdict(total, corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_balances() {
        let cfg = Config {
            threads: 3,
            loops: 50,
            batch: 10,
            working_set: 40,
            cross_pct: 50,
            inbox_limit: 8,
            seed: 5,
        };
        let o = run(&cfg).unwrap();
        assert_eq!(o.allocs, 3 * 40 + 3 * 50 * 10);
        assert_eq!(o.frees, o.allocs);
    }

    #[test]
    fn one_thread_and_a_tiny_inbox() {
        for threads in [1, 2] {
            let cfg = Config {
                threads,
                loops: 200,
                batch: 16,
                working_set: 30,
                cross_pct: 100,
                inbox_limit: 1,
                seed: 8,
            };
            let o = run(&cfg).unwrap();
            assert_eq!(o.frees, o.allocs);
        }
    }

    #[test]
    fn size_range() {
        let t = sizes(&mut XorShift::new(1));
        let (lo, hi) = t.bounds();
        assert!(lo >= 8 && hi <= 16000 && lo < 64 && hi > 4000, "{lo} {hi}");
    }
}
