//! A refused charge walks the threads' stocks only when some stock may hold the refusing
//! tenant's bytes: refused again with nothing stocked meanwhile, it does not walk; once an
//! idle thread has stocked bytes of the tenant, the next refusal walks again and finds them
//! (no spurious failure). Alone in its binary: another test's drains would move the counts.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;

use slabcg::accounting::testing::drain_walks;
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const L: Layout = match Layout::from_size_align(4096, 8) {
    Ok(l) => l,
    Err(_) => panic!(),
};

fn alloc_in(t: &Tenant) -> *mut u8 {
    let _in = t.enter();
    // SAFETY: a valid layout.
    unsafe { GLOBAL.alloc(L) }
}

fn free(p: *mut u8) {
    // SAFETY: allocated with L and freed once.
    unsafe { GLOBAL.dealloc(p, L) };
}

#[test]
fn refusals_walk_only_when_a_stock_may_hold_the_tenant() {
    // The idle thread's stock must stay as it is until a refusal finds it.
    slabcg::accounting::hooks::set_idle_decay(false);
    const MAX: u64 = 1 << 20;
    let t = Tenant::new("refusals");
    t.set_max(MAX);
    let n = (MAX / 4096) as usize;
    let mut ps = Vec::with_capacity(n);
    for _ in 0..n {
        let p = alloc_in(&t);
        assert!(!p.is_null());
        ps.push(p as usize);
    }
    // The first refusal walks (this thread's stock was filled for the tenant).
    let w0 = drain_walks();
    assert!(alloc_in(&t).is_null());
    let w1 = drain_walks();
    assert!(w1 > w0, "the first refusal drains");
    // Nothing was stocked since: refused again without a walk.
    for _ in 0..10 {
        assert!(alloc_in(&t).is_null());
    }
    assert_eq!(
        drain_walks(),
        w1,
        "refusals with nothing stocked walked the threads"
    );
    // Another thread takes 32 blocks' worth, frees them (they stay charged in its stocks)
    // and goes idle.
    for p in ps.drain(n - 32..) {
        free(p as *mut u8);
    }
    let (tx, rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let t2 = t.clone();
    let idler = std::thread::spawn(move || {
        let mine: Vec<usize> = (0..32).map(|_| alloc_in(&t2) as usize).collect();
        assert!(mine.iter().all(|&p| p != 0));
        for p in mine {
            free(p as *mut u8);
        }
        tx.send(()).unwrap();
        gate_rx.recv().unwrap();
    });
    rx.recv().unwrap();
    assert!(
        t.current() >= MAX - 4096,
        "the idle thread's stocks hold the freed bytes"
    );
    // This thread gets all 32 blocks back: its refusals drain the idle thread's stocks.
    for i in 0..32 {
        let p = alloc_in(&t);
        assert!(!p.is_null(), "block {i} of 32 refused spuriously");
        ps.push(p as usize);
    }
    assert!(
        drain_walks() > w1,
        "the idle thread's stock was found by a walk"
    );
    assert!(alloc_in(&t).is_null());
    assert_eq!(t.current_exact(), MAX);
    gate_tx.send(()).unwrap();
    idler.join().unwrap();
    for p in ps {
        free(p as *mut u8);
    }
    assert_eq!(t.current_exact(), 0);
}
