//! The idle-stock decay: with many more threads holding stocks than CPUs, the bytes that
//! idle threads' stocks hold pre-charged (at most the stock budget's slots for one tenant)
//! go back in the background, so `current()` comes back to the exact usage without any
//! drain being asked for.

use std::time::Duration;

use slabcg::{SlabAlloc, Tenant};

#[path = "common/idle_threads.rs"]
mod idle_threads;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn idle_threads_give_their_stocks_back() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (8 * cpus).max(64);
    let t = Tenant::new("decay");
    t.set_max(1 << 30);
    let idle = idle_threads::IdleThreads::start(&t, threads);
    let exact = threads as u64 * idle_threads::KEPT_PER_THREAD;
    let first = t.current();
    // Within the stock budget: its slots hold at most one refill each (the threads free
    // nothing); threads past it charge the counters directly.
    let budget = u64::from(slabcg::accounting::testing::stock_budget_slots());
    let refill = slabcg::accounting::testing::charge_batch();
    assert!(
        first > exact && first <= exact + budget * refill,
        "the stocks hold pre-charged bytes at first, within the budget: {first}"
    );
    let bound = exact;
    // The idle stocks decay within a few intervals; at most 500 naps of 20 ms (10 s) bound
    // the wait against a hang (the assertion is on the bytes, not on the time).
    let mut now = first;
    for _ in 0..500 {
        if now <= bound {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        now = t.current();
    }
    assert!(
        now <= bound,
        "current {now} still above {bound} after 10 s of naps"
    );
    assert_eq!(t.current_exact(), exact);
    idle.finish();
    assert_eq!(t.current_exact(), 0);
}
