//! Lowering a tenant's `max` takes back what stocks hold pre-charged. Alone in its binary:
//! the test needs bytes to stay in the stocks until it lowers the limit, and another test's
//! drain would take them first.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;
use std::thread;

use slabcg::{SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn alloc_in(t: &Tenant, layout: Layout) -> *mut u8 {
    let _g = t.enter();
    // SAFETY: a valid layout.
    unsafe { GLOBAL.alloc(layout) }
}

/// Allocates in `t` until refused, checking `current <= 4096` after each; the blocks.
fn fill(t: &Tenant, layout: Layout) -> Vec<usize> {
    let mut held = Vec::with_capacity(100);
    loop {
        let p = alloc_in(t, layout);
        if p.is_null() {
            return held;
        }
        held.push(p as usize);
        assert!(t.current() <= 4096, "{} over the lowered max", t.current());
    }
}

fn free(p: usize, layout: Layout) {
    // SAFETY: allocated with this layout, freed once.
    unsafe { GLOBAL.dealloc(p as *mut u8, layout) }
}

/// Lowering `max` takes back the bytes pre-charged into stocks (this thread's and an idle
/// thread's): they were spent without a look at `max`, so the tenant grew far past a
/// lowered limit (63 KiB of objects under a 4 KiB max).
#[test]
fn lowering_max_takes_back_stocked_bytes() {
    let t = Tenant::new("lower-max");
    let layout = Layout::from_size_align(1000, 8).unwrap();
    // Leave a batch of pre-charged bytes in this thread's stock and in an idle thread's.
    let (tx, rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let idle = {
        let t = t.clone();
        thread::spawn(move || {
            let p = alloc_in(&t, layout);
            free(p as usize, layout);
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
            // After the limit went down: whatever this thread's stock held is gone.
            let held = fill(&t, layout);
            let peak = t.current_exact();
            for p in held {
                free(p, layout);
            }
            peak
        })
    };
    rx.recv().unwrap();
    let p = alloc_in(&t, layout);
    free(p as usize, layout);
    assert!(
        t.current() > 8192,
        "no batch in the stocks: {}",
        t.current()
    );
    t.set_max(4096);
    assert!(t.current() <= 4096, "stocked bytes kept: {}", t.current());
    assert!(t.charge(60_000, StatItem::Sock).is_err());
    let held = fill(&t, layout);
    assert!(t.current_exact() <= 4096 && !held.is_empty());
    for p in held {
        free(p, layout);
    }
    go_tx.send(()).unwrap();
    let peak = idle.join().unwrap();
    assert!(peak <= 4096 && peak > 0, "the idle thread reached {peak}");
    assert_eq!(t.current_exact(), 0);
}
