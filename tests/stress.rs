//! A short run of the randomized multi-tenant workload (`tests/common/stress.rs`): several
//! threads, every allocation path, cross-thread frees, Sock charges, a tight limit with a
//! reclaim callback, drains racing the work, and tenants dropped while they own objects; at
//! every epoch each tenant's exact usage must equal the ledger, also in forked children.
//! `cargo run --release --example stress` runs it for minutes. Alone in its binary, so that
//! no other test's tenants or drains interfere.

use slabcg::SlabAlloc;

#[path = "common/stress.rs"]
mod stress;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn randomized_tenants_match_the_ledger() {
    let report = stress::run(&stress::Config {
        threads: 3,
        epochs: 5,
        ops_per_epoch: 20_000,
        live_cap: 400,
        large_percent: 2,
        fork_every: 2,
        seed: 0x5eed_cafe,
    });
    assert!(report.ops > 0 && report.checks == 5 && report.forks == 2);
    // The tight tenant must have refused something, run its reclaim callback and gone above
    // its high, or the limit paths went untested.
    println!("{report:?}");
    assert!(
        report.refused > 0 && report.reclaimed > 0 && report.high_events > 0,
        "{report:?}"
    );
}
