//! The randomized multi-tenant workload of `tests/stress.rs`, for as long as you like:
//!
//! ```sh
//! cargo run --release --example stress -- [SECONDS] [THREADS] [LARGE_PERCENT] [LIVE_CAP]
//! ```
//! Defaults: 60 s, 8 threads, 2% of allocations large (above 128 KiB), 2000 live objects per
//! thread. More large ones exercise mremap and the large-mapping cache; a small cap keeps
//! slabs emptying and refilling.
//!
//! Runs the workload (`tests/common/stress.rs`) again and again with fresh tenants and seeds
//! until the time is up, and prints a line per run. Any disagreement with the ledger, a block
//! that lost its contents, or `current > max` ends the process with the failed check.

use std::time::{Duration, Instant};

use slabcg::SlabAlloc;

#[path = "../tests/common/stress.rs"]
mod stress;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let large_percent: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    let live_cap: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut run = 0u64;
    while Instant::now() < until {
        let t = Instant::now();
        let seed = 0x5eed ^ run.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let r = stress::run(&stress::Config {
            threads,
            epochs: 8,
            ops_per_epoch: 50_000,
            live_cap,
            large_percent,
            fork_every: 4,
            seed,
        });
        println!(
            "run {run} (seed {seed:#x}): {} ops, {} refused by limits, {} objects freed by the \
             reclaim callback, {} ledger checks ({} also in a forked child), {:.1} s",
            r.ops,
            r.refused,
            r.reclaimed,
            r.checks,
            r.forks,
            t.elapsed().as_secs_f64()
        );
        run += 1;
    }
    println!("ok: {run} runs, every check passed");
}
