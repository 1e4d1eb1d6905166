//! The body of the idle-stock tests (`tests/idle_stock.rs`, `tests/idle_stock_mprotect.rs`).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use slabcg::{SlabAlloc, Tenant};

fn alloc_in(global: &SlabAlloc, t: &Tenant, layout: Layout) -> *mut u8 {
    let _g = t.enter();
    // SAFETY: valid layout.
    unsafe { global.alloc(layout) }
}

/// Two threads leave pre-charged bytes and charged objects in their stocks and block; this
/// thread must still allocate exactly up to the limit. `global` is the test binary's global
/// allocator.
pub fn no_spurious_failure(global: &'static SlabAlloc) {
    // The idle threads' stocks must stay as they are until this thread's refusals drain them.
    slabcg::accounting::hooks::set_idle_decay(false);
    const MAX: u64 = 1 << 20;
    let t = Tenant::new("idle-stock");
    t.set_max(MAX);
    // Two threads charge and free in the tenant so that their stocks keep pre-charged bytes,
    // then block without exiting.
    let release = Arc::new(Mutex::new(()));
    let gate = release.lock().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let idlers: Vec<_> = (0..2)
        .map(|_| {
            let t = t.clone();
            let release = release.clone();
            let ready_tx = ready_tx.clone();
            thread::spawn(move || {
                let l = Layout::from_size_align(1000, 8).unwrap();
                let ps: Vec<usize> = (0..200).map(|_| alloc_in(global, &t, l) as usize).collect();
                for p in ps {
                    // SAFETY: live, allocated with l.
                    unsafe { global.dealloc(p as *mut u8, l) };
                }
                ready_tx.send(()).unwrap();
                drop(release.lock().unwrap());
            })
        })
        .collect();
    ready_rx.recv().unwrap();
    ready_rx.recv().unwrap();
    assert!(t.current() > 0, "idle stocks should hold pre-charged bytes");
    // This thread can still allocate up to the limit, exactly.
    let l = Layout::from_size_align(4096, 8).unwrap();
    let n = (MAX / 4096) as usize;
    let mut ps = Vec::with_capacity(n);
    for i in 0..n {
        let p = alloc_in(global, &t, l);
        assert!(!p.is_null(), "allocation {i} of {n} failed spuriously");
        ps.push(p as usize);
    }
    // One more byte does not fit.
    assert!(alloc_in(global, &t, Layout::from_size_align(8, 8).unwrap()).is_null());
    assert_eq!(t.current_exact(), MAX);
    for p in ps {
        // SAFETY: live, allocated with l.
        unsafe { global.dealloc(p as *mut u8, l) };
    }
    drop(gate);
    for h in idlers {
        h.join().unwrap();
    }
    assert_eq!(t.current_exact(), 0);
}
