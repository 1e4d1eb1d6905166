//! `high` follows what a tenant uses, not what threads pre-charged for it: a charge that
//! takes usage above `high` first takes back the refills idle threads' stocks hold for the
//! tenant, so a request whose task ran on several workers is not put under pressure by
//! the refills it left on each (the tenant service's heavy lane is chosen by that
//! pressure). Alone in its test binary: another test's drain would empty the idle stocks.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const HIGH: u64 = 1 << 20;

fn alloc_in(t: &Tenant, l: Layout) -> usize {
    let _g = t.enter();
    // SAFETY: `l` has a non-zero size.
    let p = unsafe { GLOBAL.alloc(l) };
    assert!(!p.is_null());
    p as usize
}

fn free(p: usize, l: Layout) {
    // SAFETY: `p` is live, allocated with `l`.
    unsafe { GLOBAL.dealloc(p as *mut u8, l) };
}

#[test]
fn crossing_high_takes_back_what_idle_stocks_hold() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let t = Tenant::new("high-drain");
    t.set_high(HIGH);
    // Three threads charge a little in the tenant (each stock takes a refill), free it (the
    // stock keeps it) and block without exiting.
    let release = Arc::new(Mutex::new(()));
    let gate = release.lock().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let idlers: Vec<_> = (0..3)
        .map(|_| {
            let (t, release, ready_tx) = (t.clone(), release.clone(), ready_tx.clone());
            thread::spawn(move || {
                let l = Layout::from_size_align(1000, 8).unwrap();
                let ps: Vec<usize> = (0..50).map(|_| alloc_in(&t, l)).collect();
                ps.into_iter().for_each(|p| free(p, l));
                ready_tx.send(()).unwrap();
                drop(release.lock().unwrap());
            })
        })
        .collect();
    (0..3).for_each(|_| ready_rx.recv().unwrap());
    let stocked = t.current();
    assert!(
        stocked >= HIGH / 2,
        "the idle stocks should hold refills: {stocked}"
    );
    assert!(!t.under_pressure());
    // This thread's objects alone stay well under `high`; with the idle refills they would
    // pass it.
    let l = Layout::from_size_align(4096, 8).unwrap();
    let ps: Vec<usize> = (0..(HIGH / 2 / 4096)).map(|_| alloc_in(&t, l)).collect();
    assert!(
        !t.under_pressure(),
        "under pressure at {} bytes counted, {} in use",
        t.current(),
        t.current_exact()
    );
    assert!(t.current() <= HIGH);
    assert_eq!(
        t.events().high,
        0,
        "a crossing made by the idle refills alone counts no event"
    );
    // Objects that really pass it still raise the pressure.
    let more: Vec<usize> = (0..(HIGH / 2 / 4096) + 8)
        .map(|_| alloc_in(&t, l))
        .collect();
    assert!(t.under_pressure());
    assert!(t.events().high >= 1);
    ps.into_iter().chain(more).for_each(|p| free(p, l));
    drop(gate);
    idlers.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(t.current_exact(), 0);
    assert!(!t.under_pressure());
}
