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

use slabcg::SlabAlloc;

#[path = "../tests/common/churn.rs"]
mod churn;
#[path = "../tests/common/repeat.rs"]
mod repeat;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn main() {
    let seconds: u64 = repeat::arg(0, 60);
    let threads: usize = repeat::arg(1, 8);
    let open_queries: usize = repeat::arg(2, 12);
    let service_mib: u64 = repeat::arg(3, 16);
    repeat::repeat_for(seconds, 0xc4a2, |seed| {
        let r = churn::run(&churn::Config {
            threads,
            epochs: 6,
            ops_per_epoch: 60_000,
            open_queries,
            pool_cap: 2000,
            service_max: service_mib << 20,
            seed,
        });
        format!(
            "{} queries, {} helper threads, {} ops, {} refused by limits, {} freed by the \
             reclaim callback, {} ledger checks, largest objcg id {} (bound {})",
            r.queries,
            r.helper_threads,
            r.ops,
            r.refused,
            r.reclaimed,
            r.checks,
            r.max_objcg_id,
            r.id_bound
        )
    });
}
