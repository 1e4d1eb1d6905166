//! No spurious failure: in its own test binary so no concurrent test drains the idle
//! stocks before the test looks at them.

mod common;

use common::{charge, give_back};
use slabcg_accounting::hooks::{self, StatIdx};
use slabcg_accounting::Tenant;
use std::sync::mpsc;
use std::thread;

const KIB: u64 = 1024;

/// A tenant whose bytes sit in other, idle threads' stocks can still charge to its limit.
#[test]
fn no_spurious_failure_with_idle_stocks() {
    // The idle threads' stocks must stay as they are until the refusals drain them.
    slabcg_accounting::hooks::set_idle_decay(false);
    let t = Tenant::new("idle");
    // Room for the six threads' batches (256 KiB each, the kernel's charge batch): a batch
    // is taken only where it fits below the limit.
    let max = 4096 * KIB;
    t.set_max(max);
    let (done_tx, done_rx) = mpsc::channel();
    let mut releases = Vec::new();
    let mut hs = Vec::new();
    for _ in 0..6 {
        let t = t.clone();
        let done_tx = done_tx.clone();
        let (rel_tx, rel_rx) = mpsc::channel::<()>();
        releases.push(rel_tx);
        hs.push(thread::spawn(move || {
            {
                let _g = t.enter();
                let id = hooks::current_objcg();
                // Leaves a batch of pre-charged bytes in this thread's stock.
                assert!(charge(id, 64, StatIdx::slab(0)));
                give_back(id, 64, StatIdx::slab(0));
            }
            done_tx.send(()).unwrap();
            rel_rx.recv().unwrap(); // idle, blocked
        }));
    }
    for _ in 0..6 {
        done_rx.recv().unwrap();
    }
    assert!(
        t.current() >= 6 * slabcg_accounting::testing::charge_batch(),
        "stocks hold batches: {}",
        t.current()
    );
    // The whole limit is still available to this thread.
    let _g = t.enter();
    let id = hooks::current_objcg();
    for _ in 0..(max / 4096) {
        assert!(
            charge(id, 4096, StatIdx::slab(2)),
            "spurious failure at {}",
            t.current()
        );
    }
    assert!(!charge(id, 4096, StatIdx::slab(2)));
    assert_eq!(t.events().oom, 1);
    assert_eq!(t.current(), max);
    for _ in 0..(max / 4096) {
        give_back(id, 4096, StatIdx::slab(2));
    }
    drop(_g);
    releases.into_iter().for_each(|r| r.send(()).unwrap());
    hs.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(t.current_exact(), 0);
}
