//! Accounting through the real allocator: every allocation made inside `tenant.enter()` is
//! charged to the tenant with its usable size, and uncharged on free by whichever thread.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread;

use slabcg::accounting::hooks::{self, StatIdx};
use slabcg::{Cache, SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

// Tests in this binary share the allocator and run in parallel; they use their own tenants,
// so tenant figures are unaffected by each other.

#[path = "../allocator/tests/common/mod.rs"]
mod rng;
use rng::Rng;

#[derive(Clone, Copy)]
struct Obj {
    p: usize,
    layout: Layout,
    usable: u64,
    /// Index of the tenant charged.
    t: usize,
}

fn alloc_in(t: &Tenant, layout: Layout) -> *mut u8 {
    let _g = t.enter();
    // SAFETY: valid layout.
    unsafe { GLOBAL.alloc(layout) }
}

/// Forks `rounds` times; each child runs `child(round)`, which says whether its checks
/// held, and leaves with `_exit`, killed by an alarm after 20 s if it hangs. Asserts that
/// every child exited cleanly (a hang or a failed check fails the test).
fn fork_rounds(rounds: usize, child: impl Fn(usize) -> bool) {
    for round in 0..rounds {
        // SAFETY: the child runs `child` and leaves with _exit, never returning into the test.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: plain libc call in the child.
            unsafe { libc::alarm(20) };
            let ok = child(round);
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(if ok { 0 } else { 3 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child {round}: status {status:#x}"
        );
    }
}

fn free(o: Obj) {
    // SAFETY: allocated with this layout, freed once.
    unsafe { GLOBAL.dealloc(o.p as *mut u8, o.layout) }
}

fn random_layout(rng: &mut Rng) -> Layout {
    let r = rng.next();
    let size = match r % 20 {
        0 => 130_000 + (r >> 8) as usize % 400_000,
        1..=4 => (r >> 8) as usize % 9000,
        _ => 1 + (r >> 8) as usize % 700,
    };
    Layout::from_size_align(size, 1 << ((r >> 50) % 6)).unwrap()
}

#[test]
fn exact_ledger_with_cross_thread_frees_and_nested_scopes() {
    let parent = Tenant::new("ledger-parent");
    let tenants = [
        parent.clone(),
        parent.child("a"),
        parent.child("b"),
        Tenant::new("ledger-c"),
    ];
    const THREADS: usize = 4;
    let (tx, rx) = mpsc::channel::<Vec<Obj>>();
    let barrier = Arc::new(Barrier::new(THREADS));
    let hs: Vec<_> = (0..THREADS)
        .map(|i| {
            let tenants = tenants.clone();
            let tx = tx.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut rng = Rng(0xACC0 + i as u64);
                let mut live: Vec<Obj> = Vec::with_capacity(5000);
                let mut handoff: Vec<Obj> = Vec::with_capacity(5000);
                for step in 0..6000 {
                    let t = (rng.next() % 4) as usize;
                    let layout = random_layout(&mut rng);
                    // Nested scopes: the inner scope wins while it lives.
                    let p = if step % 7 == 0 {
                        let _outer = tenants[(t + 1) % 4].enter();
                        alloc_in(&tenants[t], layout)
                    } else {
                        alloc_in(&tenants[t], layout)
                    };
                    assert!(!p.is_null());
                    // SAFETY: p is live.
                    let usable = unsafe { SlabAlloc::usable_size(p) } as u64;
                    assert!(usable >= layout.size() as u64);
                    let o = Obj {
                        p: p as usize,
                        layout,
                        usable,
                        t,
                    };
                    match rng.next() % 4 {
                        0 => handoff.push(o),
                        1 if !live.is_empty() => {
                            let k = rng.next() as usize % live.len();
                            free(live.swap_remove(k));
                            live.push(o);
                        }
                        _ => live.push(o),
                    }
                    if live.len() > 3000 {
                        free(live.swap_remove(0));
                    }
                }
                // Hand some objects to another thread to be freed there.
                tx.send(handoff).unwrap();
                barrier.wait();
                live
            })
        })
        .collect();
    drop(tx);
    let mut all: Vec<Obj> = Vec::new();
    for h in hs {
        all.extend(h.join().unwrap());
    }
    // Free half of the handed-off objects on a different thread than the allocating one.
    let handoffs: Vec<Vec<Obj>> = rx.iter().collect();
    let freer = thread::spawn(move || {
        let mut keep = Vec::new();
        for (i, batch) in handoffs.into_iter().enumerate() {
            for (j, o) in batch.into_iter().enumerate() {
                if (i + j) % 2 == 0 {
                    free(o);
                } else {
                    keep.push(o);
                }
            }
        }
        keep
    });
    all.extend(freer.join().unwrap());

    let ledger = |all: &[Obj], idx: &[usize]| -> u64 {
        all.iter()
            .filter(|o| idx.contains(&o.t))
            .map(|o| o.usable)
            .sum()
    };
    // parent's subtree is tenants 0, 1, 2 (hierarchical); c is alone.
    assert_eq!(tenants[1].current_exact(), ledger(&all, &[1]));
    assert_eq!(tenants[2].current_exact(), ledger(&all, &[2]));
    assert_eq!(tenants[0].current_exact(), ledger(&all, &[0, 1, 2]));
    assert_eq!(tenants[3].current_exact(), ledger(&all, &[3]));
    assert!(tenants[0].peak() >= tenants[0].current_exact());
    for o in all {
        free(o);
    }
    for t in &tenants {
        assert_eq!(t.current_exact(), 0, "tenant {}", t.name());
    }
}

#[test]
fn current_never_exceeds_max_while_racing() {
    const MAX: u64 = 2 << 20;
    let t = Tenant::new("racing");
    t.set_max(MAX);
    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let t = t.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let c = t.current();
                assert!(c <= MAX, "current {c} > max {MAX}");
                n += 1;
            }
            n
        })
    };
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let t = t.clone();
            thread::spawn(move || {
                let mut rng = Rng(77 + i);
                let mut held: Vec<(usize, Layout)> = Vec::with_capacity(10_000);
                let mut refused = 0;
                for _ in 0..30_000 {
                    let l = Layout::from_size_align(1 + rng.next() as usize % 6000, 8).unwrap();
                    let p = alloc_in(&t, l);
                    if p.is_null() {
                        refused += 1;
                        for _ in 0..held.len() / 2 {
                            let (p, l) = held.swap_remove(rng.next() as usize % held.len());
                            // SAFETY: live, allocated with l.
                            unsafe { GLOBAL.dealloc(p as *mut u8, l) };
                        }
                    } else {
                        held.push((p as usize, l));
                    }
                }
                for (p, l) in held {
                    // SAFETY: live, allocated with l.
                    unsafe { GLOBAL.dealloc(p as *mut u8, l) };
                }
                refused
            })
        })
        .collect();
    let refused: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    assert!(observer.join().unwrap() > 0);
    assert!(refused > 0, "the workload must run into the limit");
    let ev = t.events();
    assert!(
        ev.max >= refused && ev.oom >= refused,
        "{ev:?} refused {refused}"
    );
    assert_eq!(t.current_exact(), 0);
    assert!(t.peak() <= MAX);
}

#[test]
fn reparenting_moves_the_charge_to_the_parent() {
    let parent = Tenant::new("reparent-parent");
    let l = Layout::from_size_align(100, 8).unwrap();
    let big = Layout::from_size_align(300_000, 8).unwrap();
    let (ps, big_p) = {
        let child = parent.child("doomed");
        let ps: Vec<usize> = (0..1000).map(|_| alloc_in(&child, l) as usize).collect();
        let big_p = alloc_in(&child, big) as usize;
        assert_eq!(child.current_exact(), 1000 * 112 + 303_104);
        (ps, big_p)
        // the child's last handle is dropped here
    };
    assert_eq!(parent.current_exact(), 1000 * 112 + 303_104);
    // Free on another thread, after the child is gone.
    thread::spawn(move || {
        for p in ps {
            // SAFETY: live, allocated with l.
            unsafe { GLOBAL.dealloc(p as *mut u8, l) };
        }
        // SAFETY: live, allocated with big.
        unsafe { GLOBAL.dealloc(big_p as *mut u8, big) };
    })
    .join()
    .unwrap();
    assert_eq!(parent.current_exact(), 0);
}

#[test]
fn thread_exit_returns_its_stock() {
    let t = Tenant::new("exiting");
    let t2 = t.clone();
    thread::spawn(move || {
        let l = Layout::from_size_align(64, 8).unwrap();
        let ps: Vec<usize> = (0..100).map(|_| alloc_in(&t2, l) as usize).collect();
        for p in ps {
            // SAFETY: live, allocated with l.
            unsafe { GLOBAL.dealloc(p as *mut u8, l) };
        }
    })
    .join()
    .unwrap();
    // Not current_exact(): the exiting thread must have given its stock back by itself.
    assert_eq!(t.current(), 0);
}

#[test]
fn realloc_zeroed_and_large_follow_the_rules() {
    let a = Tenant::new("realloc-a");
    let b = Tenant::new("realloc-b");
    let l = Layout::from_size_align(100, 8).unwrap();
    let p = {
        let _g = a.enter();
        // SAFETY: valid layout.
        unsafe { GLOBAL.alloc_zeroed(l) }
    };
    assert_eq!(a.current_exact(), 112);
    // Same class under another tenant: stays in place and with its owner.
    let p2 = {
        let _g = b.enter();
        // SAFETY: live, allocated with l.
        unsafe { GLOBAL.realloc(p, l, 110) }
    };
    assert_eq!(p2, p);
    assert_eq!((a.current_exact(), b.current_exact()), (112, 0));
    // Moving under b: b is charged the new block, a uncharged the old.
    let l2 = Layout::from_size_align(110, 8).unwrap();
    let p3 = {
        let _g = b.enter();
        // SAFETY: live, allocated with l2 (same class as l).
        unsafe { GLOBAL.realloc(p2, l2, 5000) }
    };
    assert_eq!((a.current_exact(), b.current_exact()), (0, 5120));
    // Large: grow by mremap, the owner pays the difference.
    let l3 = Layout::from_size_align(5000, 8).unwrap();
    let p4 = {
        let _g = b.enter();
        // SAFETY: live, allocated with l3.
        unsafe { GLOBAL.realloc(p3, l3, 200_000) }
    };
    assert_eq!(b.current_exact(), 200_704);
    let l4 = Layout::from_size_align(200_000, 8).unwrap();
    // Resized in place (by mremap) from outside any scope: the owner, b, is charged.
    // SAFETY: live, allocated with l4.
    let p5 = unsafe { GLOBAL.realloc(p4, l4, 1 << 20) };
    assert_eq!(b.current_exact(), 1 << 20);
    // SAFETY: live, allocated with size 1 MiB.
    unsafe { GLOBAL.dealloc(p5, Layout::from_size_align(1 << 20, 8).unwrap()) };
    assert_eq!(b.current_exact(), 0);
}

#[test]
fn unscoped_allocations_belong_to_root() {
    let t = Tenant::new("unscoped");
    let v: Vec<u8> = vec![1; 10_000];
    assert_eq!(t.current_exact(), 0);
    assert!(Tenant::root().current() >= 10_000);
    drop(v);
}

#[test]
fn object_stock_retags_and_stays_exact() {
    // One thread alternates long runs in two tenants, so its object stock is retagged from
    // one to the other; objects of both stay live across the switches and are freed later.
    let a = Tenant::new("retag-a");
    let b = Tenant::new("retag-b");
    let l = Layout::from_size_align(48, 8).unwrap();
    let mut live: Vec<(usize, usize)> = Vec::with_capacity(4000);
    let mut ledger = [0u64; 2];
    for round in 0..8 {
        let t = round % 2;
        let tenant = if t == 0 { &a } else { &b };
        for i in 0..300 {
            let p = alloc_in(tenant, l);
            assert!(!p.is_null());
            if i % 3 == 0 {
                live.push((p as usize, t));
                ledger[t] += 48;
            } else {
                // Freed at once, inside the same tenant: it goes to the object stock.
                let _g = tenant.enter();
                // SAFETY: live, allocated with l.
                unsafe { GLOBAL.dealloc(p, l) };
            }
        }
        assert_eq!(a.current_exact(), ledger[0], "round {round}");
        assert_eq!(b.current_exact(), ledger[1], "round {round}");
    }
    for (p, t) in live {
        // SAFETY: live, allocated with l.
        unsafe { GLOBAL.dealloc(p as *mut u8, l) };
        ledger[t] -= 48;
    }
    assert_eq!((a.current_exact(), b.current_exact()), (0, 0));
}

#[test]
fn drains_race_object_stock_churn() {
    // Two threads churn same-tenant alloc/free pairs (object-stock hits), switch tenants now
    // and then (retags) and keep some objects, while a third drains every stock in a loop.
    // Each drain uncharges the workers' tagged bins without touching them, and the workers
    // settle on their next miss. At the end the tenants must be exact, and a tenant whose
    // limit is its ledger must still be able to allocate (nothing stays charged twice).
    let tenants = [Tenant::new("churn-a"), Tenant::new("churn-b")];
    let stop = Arc::new(AtomicBool::new(false));
    let drainer = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                slabcg::drain_all_stocks();
                n += 1;
            }
            n
        })
    };
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let tenants = tenants.clone();
            thread::spawn(move || {
                let mut rng = Rng(0xC4u64 + i);
                let mut kept: Vec<Obj> = Vec::new();
                for round in 0..400 {
                    let t = (round / 50 + i as usize) % 2;
                    let _g = tenants[t].enter();
                    for _ in 0..50 {
                        let size = [16usize, 32, 48, 256, 4096][(rng.next() % 5) as usize];
                        let layout = Layout::from_size_align(size, 8).unwrap();
                        let mut batch = [core::ptr::null_mut::<u8>(); 4];
                        for p in batch.iter_mut() {
                            // SAFETY: valid layout.
                            *p = unsafe { GLOBAL.alloc(layout) };
                            assert!(!p.is_null());
                        }
                        for (k, &p) in batch.iter().enumerate() {
                            if k == 0 && rng.next().is_multiple_of(8) {
                                // SAFETY: p is live.
                                let usable = unsafe { SlabAlloc::usable_size(p) } as u64;
                                kept.push(Obj {
                                    p: p as usize,
                                    layout,
                                    usable,
                                    t,
                                });
                            } else {
                                // SAFETY: live, allocated with layout, freed once.
                                unsafe { GLOBAL.dealloc(p, layout) };
                            }
                        }
                    }
                }
                kept
            })
        })
        .collect();
    let mut kept: Vec<Obj> = Vec::new();
    for w in workers {
        kept.extend(w.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    assert!(drainer.join().unwrap() > 0);
    let ledger = |t: usize| -> u64 { kept.iter().filter(|o| o.t == t).map(|o| o.usable).sum() };
    for (t, tenant) in tenants.iter().enumerate() {
        assert_eq!(
            tenant.current_exact(),
            ledger(t),
            "tenant {}",
            tenant.name()
        );
    }
    // With the limit at the ledger plus one 4 KiB object, that object must fit: the
    // workers' exited threads and the drains left nothing else charged.
    let a = &tenants[0];
    a.set_max(ledger(0) + 4096);
    let p = alloc_in(a, Layout::from_size_align(4096, 8).unwrap());
    assert!(!p.is_null(), "a charge left behind by a drain");
    // SAFETY: live, allocated with this layout.
    unsafe { GLOBAL.dealloc(p, Layout::from_size_align(4096, 8).unwrap()) };
    a.set_max(u64::MAX);
    for o in kept {
        free(o);
    }
    for tenant in &tenants {
        assert_eq!(tenant.current_exact(), 0, "tenant {}", tenant.name());
    }
}

#[test]
fn charges_of_a_dropped_tenant_are_uncharged_through_its_parent() {
    let parent = Tenant::new("sock-parent");
    let child = parent.child("sock-child");
    child.charge(10_000, StatItem::Sock).unwrap();
    // The child also owns a live object, which must still be uncharged from the parent.
    let l = Layout::from_size_align(200, 8).unwrap();
    let p = alloc_in(&child, l);
    assert!(!p.is_null());
    // SAFETY: live.
    let usable = unsafe { SlabAlloc::usable_size(p) } as u64;
    drop(child);
    assert_eq!(parent.current_exact(), 10_000 + usable);
    // On another thread than the charge, as a socket freed elsewhere would be.
    let t = parent.clone();
    thread::spawn(move || t.uncharge(10_000, StatItem::Sock))
        .join()
        .unwrap();
    let stat = parent.stat();
    assert_eq!((stat.current, stat.sock), (usable, 0), "{stat}");
    // SAFETY: live, allocated with l.
    unsafe { GLOBAL.dealloc(p, l) };
    assert_eq!(parent.current_exact(), 0);
}

#[test]
fn refused_large_growth_fails_the_realloc() {
    let t = Tenant::new("realloc-limit");
    t.set_max(1 << 20);
    let l = Layout::from_size_align(512 << 10, 8).unwrap();
    let p = alloc_in(&t, l);
    assert!(!p.is_null());
    // SAFETY: p has 512 KiB.
    unsafe { std::ptr::write_bytes(p, 0x42, 512 << 10) };
    let before = t.current_exact();
    // Outside the owner's scope: growing the block is still the owner's charge, and refused.
    // SAFETY: live, allocated with l.
    let q = unsafe { GLOBAL.realloc(p, l, 4 << 20) };
    assert!(
        q.is_null(),
        "the limit must refuse the growth, not move the block to root"
    );
    assert_eq!(t.current_exact(), before);
    // SAFETY: the failed realloc left p as it was.
    assert!(unsafe { std::slice::from_raw_parts(p, 512 << 10) }
        .iter()
        .all(|&b| b == 0x42));
    // SAFETY: live, allocated with l.
    unsafe { GLOBAL.dealloc(p, l) };
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn fork_while_threads_charge_a_tenant() {
    // Threads allocate in a tenant, drain stocks and exit while the main thread forks; each
    // child must be able to allocate, charge and read exact figures (no lock inherited held).
    let t = Tenant::new("fork");
    // Charged only by the children: the parent's threads may have left live charges in `t`
    // at the moment of a fork (their objects exist in the child too).
    let c = Tenant::new("fork-child");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let t = t.clone();
            let stop = stop.clone();
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = t.clone();
                    thread::spawn(move || {
                        let _g = t.enter();
                        let v: Vec<Vec<u8>> = (0..50).map(|k| vec![1u8; 16 + k * 40]).collect();
                        drop(v);
                        if n % 8 == i {
                            let _ = t.current_exact();
                        }
                    })
                    .join()
                    .unwrap();
                    n += 1;
                }
            })
        })
        .collect();
    // A hung child is the bug this test catches.
    fork_rounds(30, |round| {
        let ok = {
            let _g = c.enter();
            let v: Vec<u8> = vec![round as u8; 100_000];
            let w: Vec<u64> = (0..1000).collect();
            let held = c.current_exact();
            held >= (v.len() + w.len() * 8) as u64
        };
        let _ = t.current_exact();
        ok && c.current_exact() == 0
    });
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
}

/// Tenant lifecycle and reporting calls made inside the scope of a tenant with no room left:
/// their own bookkeeping (a new tenant's node and objcg, lists, the reclaim callback, the
/// refusal's and the report's strings, a dedicated cache's core) is not charged to that
/// tenant. Charged, it would be refused, and those allocations are infallible: the process
/// would abort.
#[test]
fn lifecycle_calls_inside_a_full_tenant() {
    let t = Tenant::new("full");
    t.set_max(64 << 10);
    let smallest = Layout::from_size_align(1, 1).unwrap();
    // Reserved up front: nothing below may allocate in the scope except the calls tested.
    let mut held: Vec<*mut u8> = Vec::with_capacity(80_000);
    let (full, after, err, stat, cache, named) = {
        let _s = t.enter();
        loop {
            // SAFETY: a valid layout.
            let p = unsafe { GLOBAL.alloc(smallest) };
            if p.is_null() || held.len() == held.capacity() {
                break;
            }
            held.push(p);
        }
        let full = t.current_exact();
        let err = t.charge(1 << 20, StatItem::Sock).unwrap_err();
        let kid = t.child("full-kid");
        let grandchild = kid.child("full-grandchild");
        let sibling = Tenant::new("full-sibling");
        t.set_reclaim(|_, _| {});
        let cache = Cache::builder("full-cache", Layout::new::<[u64; 5]>())
            .account(true)
            .build();
        // The public hook directly, with a name taken: its key is made unique under the tree
        // lock (this hung when the key was allocated in this scope: the refused allocation's
        // reclaim step waited for the lock the thread held).
        let last = StatIdx::slab(hooks::MAX_SLAB_CLASSES - 1);
        let named = hooks::set_slab_name(last, "full-cache");
        drop(kid);
        drop(grandchild);
        drop(sibling);
        let stat = t.stat();
        (full, t.current_exact(), err, stat, cache, named)
    };
    assert!(named);
    assert!(held.len() < held.capacity(), "the limit never refused");
    assert_eq!(after, full, "bookkeeping was charged to the scope's tenant");
    assert_eq!(stat.current, full);
    assert_eq!(err.tenant, "full");
    assert_eq!(cache.name(), "full-cache");
    for p in held {
        // SAFETY: allocated above with `smallest`, freed once.
        unsafe { GLOBAL.dealloc(p, smallest) };
    }
    assert_eq!(t.current_exact(), 0);
}

/// The reclaim callback runs unscoped: it may allocate (here, to log) while its tenant is
/// full, and what it allocates is not charged to the tenant.
#[test]
fn reclaim_callback_may_allocate_while_its_tenant_is_full() {
    let t = Tenant::new("reclaim-alloc");
    t.set_max(64 << 10);
    let layout = Layout::from_size_align(1024, 8).unwrap();
    let pool: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(Vec::with_capacity(128)));
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    {
        let (pool, log) = (pool.clone(), log.clone());
        t.set_reclaim(move |tenant, needed| {
            log.lock()
                .unwrap()
                .push(format!("{} needs {needed} bytes", tenant.name()));
            if let Some(p) = pool.lock().unwrap().pop() {
                // SAFETY: allocated below with `layout`, handed over once.
                unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
            }
        });
    }
    // Reserved up front: in the scope, only the allocator and the callback allocate.
    let mut held: Vec<usize> = Vec::with_capacity(128);
    let refill = |held: &mut Vec<usize>| {
        let _s = t.enter();
        loop {
            let p = alloc_in(&t, layout);
            if p.is_null() || held.len() == held.capacity() {
                return p.is_null();
            }
            held.push(p as usize);
        }
    };
    // Full, and nothing to reclaim: the callback runs (and logs), the allocation fails.
    assert!(refill(&mut held), "the limit never refused");
    let logged = log.lock().unwrap().len();
    assert!(logged >= 1);
    // Hand some objects to the callback: the next allocations succeed by reclaiming them.
    let given = held.len() / 2;
    pool.lock().unwrap().extend(held.drain(..given));
    let before = held.len();
    assert!(refill(&mut held));
    assert!(held.len() > before && log.lock().unwrap().len() > logged);
    // Exactly the objects still held: nothing the callback allocated is the tenant's.
    let class = t.stat().slab / held.len() as u64;
    assert_eq!(t.current_exact(), held.len() as u64 * class);
    assert!((1024..1100).contains(&class), "class size {class}");
    for p in held {
        // SAFETY: allocated above with `layout`, freed once.
        unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
    }
    for p in pool.lock().unwrap().drain(..) {
        // SAFETY: as above.
        unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
    }
    assert_eq!(t.current_exact(), 0);
}

/// Forks while other threads create, charge and drop tenants (and read their stats): the
/// child must be able to do the same, so no tenant lock may be inherited held, and the root
/// must not be half-built. A child that hangs is killed by an alarm, which fails the test.
#[test]
fn fork_while_threads_create_and_drop_tenants() {
    let parent = Tenant::new("fork-tree");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let (parent, stop) = (parent.clone(), stop.clone());
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let q = parent.child("fork-query");
                    let result = {
                        let _g = q.enter();
                        vec![n as u8; 64]
                    };
                    if n % 16 == i {
                        let _ = q.stat();
                    }
                    drop(q);
                    drop(result);
                    n += 1;
                }
            })
        })
        .collect();
    fork_rounds(200, |round| {
        let t = Tenant::new("fork-tree-child");
        let kid = parent.child("fork-tree-grandchild");
        let ok = {
            let _g = kid.enter();
            let v = vec![round as u8; 10_000];
            kid.current_exact() >= v.len() as u64
        };
        let ok = ok && kid.stat().current == 0;
        drop(kid);
        drop(t);
        slabcg::drain_all_stocks();
        ok
    });
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
}
