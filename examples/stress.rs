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

use slabcg::SlabAlloc;

#[path = "../tests/common/repeat.rs"]
mod repeat;
#[path = "../tests/common/stress.rs"]
mod stress;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn main() {
    let seconds: u64 = repeat::arg(0, 60);
    let threads: usize = repeat::arg(1, 8);
    let large_percent: u64 = repeat::arg(2, 2);
    let live_cap: usize = repeat::arg(3, 2000);
    repeat::repeat_for(seconds, 0x5eed, |seed| {
        let r = stress::run(&stress::Config {
            threads,
            epochs: 8,
            ops_per_epoch: 50_000,
            live_cap,
            large_percent,
            fork_every: 4,
            seed,
        });
        format!(
            "{} ops, {} refused by limits, {} objects freed by the reclaim callback, {} ledger \
             checks ({} also in a forked child)",
            r.ops, r.refused, r.reclaimed, r.checks, r.forks
        )
    });
}
