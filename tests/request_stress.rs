//! A new tenant per request on 16 threads (oversubscribed on 2 cores), requests dying with
//! live objects that other threads free in their own requests' scopes, checked against the
//! ledger at every round (`tests/common/request_stress.rs`). `cargo run --release --example
//! request_stress` runs it for as long as asked. Alone in its binary, so that no other test's
//! tenants take the dead requests' objcg ids or drain meanwhile.

use slabcg::SlabAlloc;

#[path = "common/request_stress.rs"]
mod request_stress;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn a_tenant_per_request_on_16_threads_matches_the_ledger() {
    let report = request_stress::run(&request_stress::Config {
        threads: 16,
        rounds: 8,
        requests_per_round: 150,
        seed: 0x7e9a_57e5,
    });
    println!("{report:?}");
    assert_eq!(report.requests, 16 * 8 * 150);
    assert_eq!(report.checks, 8);
    // The tight customer's limit refused some requests' allocations, and requests freed the
    // objects that dead ones left: or the paths this test is for went untested.
    assert!(
        report.refused > 0 && report.freed_from_pool > 0,
        "{report:?}"
    );
    // The pool held the objects of hundreds of dead requests (more than a thread's 256
    // forwarding entries), and live requests were checked too.
    assert!(
        report.max_pool > 2000 && report.request_checks > 0,
        "{report:?}"
    );
    // Dedicated caches' objects were freed in bulk too.
    assert!(report.bulk_frees > 0, "{report:?}");
}
