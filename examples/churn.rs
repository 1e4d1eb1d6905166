//! The per-query workload of `tests/churn.rs`, for as long as you like:
//!
//! ```sh
//! cargo run --release --example churn -- [SECONDS] [THREADS] [OPEN_QUERIES] [SERVICE_MAX_MIB]
//! ```
//! Defaults: 60 s, 8 threads, 12 open queries per thread (more than a thread's 7 stock
//! slots), a 16 MiB service limit (smaller: more refusals and reclaim).
//!
//! Runs the workload (`tests/common/churn.rs`) again and again with fresh tenants and seeds
//! until the time is up, and prints a line per run. Any disagreement with the ledger, a block
//! that lost its contents, or `current > max` ends the process with the failed check.

use std::time::{Duration, Instant};

use slabcg::SlabAlloc;

#[path = "../tests/common/churn.rs"]
mod churn;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let open_queries: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(12);
    let service_mib: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(16);
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut run = 0u64;
    while Instant::now() < until {
        let t = Instant::now();
        let seed = 0xc4a2 ^ run.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let r = churn::run(&churn::Config {
            threads,
            epochs: 6,
            ops_per_epoch: 60_000,
            open_queries,
            pool_cap: 2000,
            service_max: service_mib << 20,
            seed,
        });
        println!(
            "run {run} (seed {seed:#x}): {} queries, {} helper threads, {} ops, {} refused by \
             limits, {} freed by the reclaim callback, {} ledger checks, largest objcg id {} (bound {}), \
             {:.1} s",
            r.queries,
            r.helper_threads,
            r.ops,
            r.refused,
            r.reclaimed,
            r.checks,
            r.max_objcg_id,
            r.id_bound,
            t.elapsed().as_secs_f64()
        );
        run += 1;
    }
    println!("ok: {run} runs, every check passed");
}
