//! A short run of the per-query workload (`tests/common/churn.rs`): thousands of short-lived
//! query tenants in a pool of threads that are replaced every epoch, results freed long after
//! their query ended, Sock bytes left behind and given back through the parent. After every
//! epoch each open query and the service must match the ledger without a drain (thread exit
//! returned every stock); at the end, refusals match the events and objcg ids were recycled.
//! `cargo run --release --example churn` runs it for minutes. Alone in its binary, so that no
//! other test's tenants or drains interfere.

use slabcg::SlabAlloc;

#[path = "common/churn.rs"]
mod churn;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn per_query_tenants_in_a_thread_pool_match_the_ledger() {
    let report = churn::run(&churn::Config {
        threads: 3,
        epochs: 4,
        ops_per_epoch: 15_000,
        open_queries: 10,
        pool_cap: 300,
        service_max: 4 << 20,
        seed: 0xc4a2_7e57,
    });
    println!("{report:?}");
    // Enough queries that leaked ids would have passed the bound, and every path taken.
    assert!(
        report.queries > 4 * report.id_bound as u64
            && report.max_objcg_id <= report.id_bound
            && report.ops > 0
            && report.helper_threads > 0
            && report.refused > 0
            && report.reclaimed > 0
            && report.checks == 4,
        "{report:?}"
    );
}
