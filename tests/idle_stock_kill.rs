//! No spurious kill: under `OomPolicy::Kill`, a tenant whose charges sit in idle threads'
//! stocks allocates up to its limit without killing anyone; only the first charge that
//! really does not fit kills (and goes through the overdraft). Alone in its test binary, as
//! `idle_stock.rs`: another test's drain would empty the idle stocks.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use slabcg::{OomPolicy, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn alloc_in(t: &Tenant, layout: Layout) -> *mut u8 {
    let _g = t.enter();
    // SAFETY: valid layout.
    unsafe { GLOBAL.alloc(layout) }
}

#[test]
fn no_kill_while_idle_threads_hold_stock() {
    // The idle threads' stocks must stay as they are until the refusals drain them.
    slabcg::accounting::hooks::set_idle_decay(false);
    const MAX: u64 = 1 << 20;
    let t = Tenant::new("idle-stock-kill");
    t.set_max(MAX);
    t.set_oom_policy(OomPolicy::Kill);
    let release = Arc::new(Mutex::new(()));
    let gate = release.lock().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let idlers: Vec<_> = (0..4)
        .map(|_| {
            let (t, release, ready_tx) = (t.clone(), release.clone(), ready_tx.clone());
            thread::spawn(move || {
                let l = Layout::from_size_align(1000, 8).unwrap();
                let ps: Vec<usize> = (0..200).map(|_| alloc_in(&t, l) as usize).collect();
                for p in ps {
                    // SAFETY: live, allocated with l.
                    unsafe { GLOBAL.dealloc(p as *mut u8, l) };
                }
                ready_tx.send(()).unwrap();
                drop(release.lock().unwrap());
            })
        })
        .collect();
    for _ in 0..4 {
        ready_rx.recv().unwrap();
    }
    assert!(t.current() > 0, "idle stocks should hold pre-charged bytes");
    let l = Layout::from_size_align(4096, 8).unwrap();
    let n = (MAX / 4096) as usize;
    let mut ps = Vec::with_capacity(n + 1);
    for i in 0..n {
        let p = alloc_in(&t, l);
        assert!(!p.is_null(), "allocation {i} of {n} failed");
        ps.push(p as usize);
    }
    assert_eq!(
        t.events().oom_kill,
        0,
        "killed while idle stocks held the bytes"
    );
    assert!(!t.is_killed());
    assert_eq!(t.current_exact(), MAX);
    // One more does not fit: the tenant is the victim, and the charge goes through.
    let p = alloc_in(&t, l);
    assert!(
        !p.is_null(),
        "the overdraft lets the charge in flight through"
    );
    ps.push(p as usize);
    assert!(t.is_killed());
    assert_eq!(t.events().oom_kill, 1);
    assert_eq!(t.current_exact(), MAX + 4096);
    for p in ps {
        // SAFETY: live, allocated with l.
        unsafe { GLOBAL.dealloc(p as *mut u8, l) };
    }
    drop(gate);
    for h in idlers {
        h.join().unwrap();
    }
    assert_eq!(t.current_exact(), 0);
}
