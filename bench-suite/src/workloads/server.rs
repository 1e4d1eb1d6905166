//! A server-like shape (issue 20's first measurement; not a published benchmark).
//!
//! `threads` workers each serve `requests` requests. A request frees what the previous
//! worker handed it, allocates a burst of `burst` objects of mixed sizes (8 B to 32 KiB,
//! log-uniform: half of them under 512 B, a quarter of 4 KiB or more), builds a map of
//! `map_entries` entries (an owned key and value string each) and folds it into a checksum,
//! then frees three quarters of the burst and hands the last quarter to the next worker,
//! which frees it in one of its own requests (what is still queued when a worker has served
//! its last request, at most `queue_depth` batches, it frees after that, outside any
//! request). With `slabcg-request` each request runs in a new child tenant of its worker's,
//! so the handed objects are mostly freed after their request tenant died: the case a
//! service with a tenant per request lives with. `ops` counts the burst objects, not the
//! map's and the vectors' allocations.

use crate::block::Block;
use crate::cli::{verdict, Outcome, WorkResult};
use crate::rng::XorShift;
use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Worker threads (at least 1; with one, a worker hands objects to itself).
    pub threads: usize,
    /// Requests per worker.
    pub requests: usize,
    /// Objects allocated per request.
    pub burst: usize,
    /// Entries (a key and a value string) in each request's map.
    pub map_entries: usize,
    /// Object sizes: log-uniform in `min_size..max_size`.
    pub min_size: usize,
    /// Object sizes.
    pub max_size: usize,
    /// Handed batches a worker's queue holds before the sender waits.
    pub queue_depth: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Config {
    /// The benchmark's setting.
    pub fn bench(threads: usize, requests: usize) -> Self {
        Config {
            threads,
            requests,
            burst: 48,
            map_entries: 16,
            min_size: 8,
            max_size: 32 << 10,
            queue_depth: 16,
            seed: 91,
        }
    }
}

/// Frees what arrived in `inbox` (checking each stamp); returns the corruption tally.
fn drain(inbox: &Receiver<Vec<Block>>, o: &mut Outcome, blocking: bool) -> u64 {
    let mut bad = 0;
    let mut take = |v: Vec<Block>, o: &mut Outcome| {
        for b in v {
            bad += o.freed(b.free());
        }
    };
    if blocking {
        for v in inbox.iter() {
            take(v, o);
        }
    } else {
        while let Ok(v) = inbox.try_recv() {
            take(v, o);
        }
    }
    bad
}

/// One request's burst, map and hand-off: returns the checksum of its map and the
/// corruption tally.
fn serve(
    cfg: &Config,
    rng: &mut XorShift,
    sizes: &super::SizeTable,
    to_next: &SyncSender<Vec<Block>>,
    inbox: &Receiver<Vec<Block>>,
    o: &mut Outcome,
) -> (u64, u64) {
    let mut bad = 0;
    let mut burst: Vec<Block> = Vec::with_capacity(cfg.burst);
    for _ in 0..cfg.burst {
        burst.push(Block::new(sizes.pick(rng), super::tag(rng)));
    }
    o.allocs += cfg.burst as u64;
    let mut map: HashMap<String, String> = HashMap::with_capacity(cfg.map_entries);
    for i in 0..cfg.map_entries {
        let v = rng.next_u64();
        map.insert(format!("field-{i}"), format!("value-{:x}", v >> (v & 31)));
    }
    let sum = map.iter().fold(0u64, |acc, (k, v)| {
        acc.wrapping_add((k.len() as u64) << 32 | v.len() as u64)
    });
    drop(map);
    let keep = cfg.burst / 4;
    let handed: Vec<Block> = burst.drain(cfg.burst - keep..).collect();
    for b in burst {
        bad += o.freed(b.free());
    }
    let mut handed = Some(handed).filter(|h| !h.is_empty());
    // A full queue means the next worker is behind: free what this one was handed while
    // waiting, so two workers waiting on each other's full queue both make progress (a
    // blocking send could deadlock, an unbounded queue let the backlog grow to gigabytes).
    while let Some(h) = handed.take() {
        match to_next.try_send(h) {
            Ok(()) => {}
            Err(TrySendError::Full(h)) => {
                handed = Some(h);
                bad += drain(inbox, o, false);
                std::thread::yield_now();
            }
            // The receiver lives until every worker has sent its last batch.
            Err(TrySendError::Disconnected(_)) => panic!("next worker gone"),
        }
    }
    (sum, bad)
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    // A queue of depth 0 is a rendezvous, which no worker waits on while it serves.
    assert!(
        cfg.threads > 0 && cfg.queue_depth > 0 && cfg.min_size > 0 && cfg.min_size <= cfg.max_size
    );
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..cfg.threads)
        .map(|_| sync_channel(cfg.queue_depth))
        .unzip();
    let mut total = Outcome::default();
    let mut corrupt = 0;
    let mut checksums = Vec::new();
    std::thread::scope(|s| {
        let mut hs = Vec::new();
        for (t, inbox) in rxs.into_iter().enumerate() {
            let to_next = txs[(t + 1) % cfg.threads].clone();
            let cfg = cfg.clone();
            hs.push(s.spawn(move || {
                let _tenant = crate::tenancy::worker();
                let mut rng = XorShift::new(cfg.seed + t as u64);
                let (lo, hi) = ((cfg.min_size as f64).ln(), (cfg.max_size as f64).ln());
                let sizes =
                    super::SizeTable::new(&mut rng, |r| (lo + (hi - lo) * r.unit()).exp() as usize);
                let (mut o, mut bad, mut sum) = (Outcome::default(), 0, 0u64);
                for _ in 0..cfg.requests {
                    let _request = crate::tenancy::request();
                    bad += drain(&inbox, &mut o, false);
                    let (s, b) = serve(&cfg, &mut rng, &sizes, &to_next, &inbox, &mut o);
                    sum = sum.wrapping_add(s);
                    bad += b;
                }
                // Done sending; then free what is still coming until the previous worker is
                // done too (its sender is the inbox's only one), so that nobody waits on a
                // full queue that no one drains.
                drop(to_next);
                bad += drain(&inbox, &mut o, true);
                (o, bad, sum)
            }));
        }
        drop(txs);
        for h in hs {
            let (o, bad, sum) = h.join().expect("server worker panicked");
            total.add(&o);
            corrupt += bad;
            checksums.push(sum);
        }
    });
    std::hint::black_box(checksums);
    verdict(total, corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_frees_everything() {
        for threads in [1, 2, 3] {
            let cfg = Config {
                requests: 200,
                ..Config::bench(threads, 0)
            };
            let o = run(&cfg).unwrap();
            assert_eq!((o.allocs, o.frees), (threads as u64 * 200 * 48, o.allocs));
        }
    }

    #[test]
    fn full_queues_make_progress() {
        // One batch per queue: nearly every hand-off finds the queue full and frees the
        // sender's own inbox while it waits.
        for threads in [1, 2, 3] {
            let cfg = Config {
                requests: 500,
                queue_depth: 1,
                ..Config::bench(threads, 0)
            };
            let o = run(&cfg).unwrap();
            assert_eq!((o.allocs, o.frees), (threads as u64 * 500 * 48, o.allocs));
        }
    }
}
