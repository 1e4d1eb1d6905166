//! The tenant-per-request stress of `tests/request_stress.rs`, for as long as you like:
//!
//! ```sh
//! cargo run --release --example request_stress -- [SECONDS] [THREADS]
//! ```
//! Defaults: 60 s, 16 threads. Each run serves 20 rounds of 500 requests per thread, each
//! request a new child tenant of one of three customers (one with a tight limit) that dies
//! with live objects other threads free later; every round ends with each customer's exact
//! usage checked against the ledger. Any disagreement, a lost stamp or an objcg of a dead
//! request left at the end stops the process with the failed check.

use slabcg::SlabAlloc;

#[path = "../tests/common/repeat.rs"]
mod repeat;
#[path = "../tests/common/request_stress.rs"]
mod request_stress;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn main() {
    let seconds: u64 = repeat::arg(0, 60);
    let threads: usize = repeat::arg(1, 16);
    repeat::repeat_for(seconds, 0x7e9a, |seed| {
        let r = request_stress::run(&request_stress::Config {
            threads,
            rounds: 20,
            requests_per_round: 500,
            seed,
        });
        format!(
            "{} requests, {} allocations, {} refused by the tight limit, {} dead requests' \
             objects freed by others (pool up to {}), {} ledger checks, {} live requests checked",
            r.requests,
            r.allocations,
            r.refused,
            r.freed_from_pool,
            r.max_pool,
            r.checks,
            r.request_checks
        )
    });
}
