//! Larson & Krishnan's server simulation ("larson" in mimalloc-bench).
//!
//! Each of `threads` lanes owns an array of `slots` live objects of random size in
//! `min_size..=max_size`. A thread of a lane replaces `per_round` random objects (check and
//! free the old one, allocate a new one), then starts a *new* thread, hands it the array and
//! exits; a lane runs `rounds` such threads one after another. So most frees hit objects
//! that an earlier, now dead, thread allocated, as in a server whose worker threads come and
//! go while the connection state lives on. The initial arrays are allocated by the main
//! thread.

use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;
use std::thread::JoinHandle;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent lanes.
    pub threads: usize,
    /// Threads per lane, one after another.
    pub rounds: usize,
    /// Replacements per thread.
    pub per_round: usize,
    /// Objects owned by each lane.
    pub slots: usize,
    /// Object sizes.
    pub min_size: usize,
    /// Object sizes.
    pub max_size: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Config {
    /// The benchmark's setting with `per_round` replacements per thread.
    pub fn bench(threads: usize, per_round: usize) -> Self {
        Config {
            threads,
            rounds: 20,
            per_round,
            slots: 2000,
            min_size: 8,
            max_size: 1000,
            seed: 4141,
        }
    }
}

struct Lane {
    objs: Vec<Block>,
    rng: XorShift,
    out: Outcome,
    corrupt: u64,
}

enum Step {
    Next(JoinHandle<Step>),
    Done(Lane),
}

/// Replacements per request of the `slabcg-request` build.
const PER_REQUEST: usize = 64;

fn run_thread(mut lane: Lane, round: usize, cfg: Config) -> Step {
    let _tenant = crate::tenancy::worker();
    let mut request = crate::tenancy::request();
    let n = lane.objs.len();
    for k in 0..cfg.per_round {
        if k % PER_REQUEST == PER_REQUEST - 1 {
            drop(request);
            request = crate::tenancy::request();
        }
        let i = lane.rng.below(n);
        let size = lane.rng.range(cfg.min_size, cfg.max_size);
        let t = super::tag(&mut lane.rng);
        let old = std::mem::replace(&mut lane.objs[i], Block::new(size, t));
        lane.out.allocs += 1;
        lane.out.frees += 1;
        if !old.free() {
            lane.corrupt += 1;
        }
    }
    drop(request);
    if round + 1 < cfg.rounds {
        Step::Next(std::thread::spawn(move || run_thread(lane, round + 1, cfg)))
    } else {
        Step::Done(lane)
    }
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0 && cfg.rounds > 0 && cfg.slots > 0 && cfg.min_size > 0);
    let mut total = Outcome::default();
    let mut corrupt = 0;
    let mut lanes = Vec::new();
    for t in 0..cfg.threads {
        let mut rng = XorShift::new(cfg.seed ^ (t as u64) << 32);
        let objs: Vec<Block> = (0..cfg.slots)
            .map(|_| {
                let size = rng.range(cfg.min_size, cfg.max_size);
                Block::new(size, super::tag(&mut rng))
            })
            .collect();
        total.allocs += cfg.slots as u64;
        lanes.push(Lane {
            objs,
            rng,
            out: Outcome::default(),
            corrupt: 0,
        });
    }
    let heads: Vec<JoinHandle<Step>> = lanes
        .into_iter()
        .map(|lane| {
            let c = cfg.clone();
            std::thread::spawn(move || run_thread(lane, 0, c))
        })
        .collect();
    for mut h in heads {
        let lane = loop {
            match h.join().map_err(|_| "larson thread panicked".to_string())? {
                Step::Next(next) => h = next,
                Step::Done(lane) => break lane,
            }
        };
        total.add(&lane.out);
        corrupt += lane.corrupt;
        for b in lane.objs {
            total.frees += 1;
            if !b.free() {
                corrupt += 1;
            }
        }
    }
    verdict(total, corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_counts_every_object() {
        let cfg = Config {
            threads: 2,
            rounds: 3,
            per_round: 500,
            slots: 50,
            min_size: 1,
            max_size: 300,
            seed: 1,
        };
        let o = run(&cfg).unwrap();
        assert_eq!(o.allocs, 2 * 50 + 2 * 3 * 500);
        assert_eq!(o.frees, o.allocs);
    }
}
