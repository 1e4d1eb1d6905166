//! Behaviour tests of slabcg-accounting through its public API and hooks.

mod common;

use common::{charge, give_back, Rng};
use slabcg_accounting::hooks::{self, SlabMeta, StatIdx};
use slabcg_accounting::{current_tenant, drain_all_stocks, Events, StatItem, Tenant};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;

const KIB: u64 = 1024;
/// Iterations of the stress loops; fewer under Miri, which runs them ~1000x slower.
const ITERS: usize = if cfg!(miri) { 300 } else { 20_000 };

/// Several threads charge random amounts via the hooks inside nested scopes, and free each
/// other's objects; at quiescence current_exact() equals the ledger, then 0.
#[test]
fn exact_with_threads_and_remote_frees() {
    let parent = Tenant::new("exact-parent");
    let child = parent.child("exact-child");
    let threads = 4;
    // Objects in flight: (objcg id, bytes, stat idx), freed by whichever thread pops them.
    let pool: Arc<Mutex<Vec<(u32, usize, StatIdx)>>> = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(Barrier::new(threads));
    let mut hs = Vec::new();
    for t in 0..threads {
        let (parent, child, pool, barrier) =
            (parent.clone(), child.clone(), pool.clone(), barrier.clone());
        hs.push(thread::spawn(move || {
            let mut rng = Rng::new(t as u64 + 1);
            barrier.wait();
            let _p = parent.enter();
            for i in 0..ITERS {
                let nested = (i / 100) % 2 == 1;
                let _c = nested.then(|| child.enter());
                let id = hooks::current_objcg();
                assert_eq!(
                    id,
                    if nested {
                        child.objcg_id()
                    } else {
                        parent.objcg_id()
                    }
                );
                let n = [8, 64, 512, 4096, 70_000][rng.below(5) as usize] as usize;
                let idx = if n > 4096 {
                    StatIdx::LARGE
                } else {
                    StatIdx::slab(rng.below(4) as usize)
                };
                assert!(charge(id, n, idx));
                let mut p = pool.lock().unwrap();
                p.push((id, n, idx));
                if rng.below(100) < 48 && !p.is_empty() {
                    let k = rng.below(p.len() as u64) as usize;
                    let (id, n, idx) = p.swap_remove(k);
                    drop(p);
                    give_back(id, n, idx);
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    let live = pool.lock().unwrap().clone();
    let sum = |id: Option<u32>| -> u64 {
        live.iter()
            .filter(|o| id.is_none_or(|x| o.0 == x))
            .map(|o| o.1 as u64)
            .sum()
    };
    assert_eq!(parent.current_exact(), sum(None));
    assert_eq!(child.current_exact(), sum(Some(child.objcg_id())));
    let st = parent.stat();
    let large: u64 = live
        .iter()
        .filter(|o| o.2 == StatIdx::LARGE)
        .map(|o| o.1 as u64)
        .sum();
    assert_eq!(st.large, large);
    assert_eq!(st.slab, sum(None) - large);
    // Free everything on other threads.
    let chunks: Vec<Vec<_>> = live
        .chunks(live.len() / 3 + 1)
        .map(|c| c.to_vec())
        .collect();
    let hs: Vec<_> = chunks
        .into_iter()
        .map(|c| {
            thread::spawn(move || c.into_iter().for_each(|(id, n, idx)| give_back(id, n, idx)))
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(parent.current_exact(), 0);
    assert_eq!(child.current_exact(), 0);
    let st = parent.stat();
    assert_eq!((st.slab, st.large), (0, 0));
    assert!(parent.peak() >= sum(None));
}

/// current <= max at every observation while threads race at the limit.
#[test]
fn current_never_exceeds_max() {
    let t = Tenant::new("race");
    let max = 512 * KIB;
    t.set_max(max);
    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let (t, stop) = (t.clone(), stop.clone());
        thread::spawn(move || {
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let c = t.current();
                assert!(c <= max, "current {c} > max {max}");
                seen = seen.max(c);
            }
            seen
        })
    };
    let fails = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..3)
        .map(|k| {
            let (t, fails) = (t.clone(), fails.clone());
            thread::spawn(move || {
                let _g = t.enter();
                let id = hooks::current_objcg();
                let mut rng = Rng::new(100 + k);
                let mut held = Vec::new();
                // Every refusal drains all stocks; under Miri a few dozen are plenty.
                for _ in 0..if cfg!(miri) { 40 } else { ITERS } {
                    let n = (rng.below(8192) + 1) as usize;
                    if charge(id, n, StatIdx::slab(1)) {
                        held.push(n);
                    } else {
                        fails.fetch_add(1, Ordering::Relaxed);
                    }
                    if held.len() > 40 || rng.below(3) == 0 {
                        if let Some(n) = held.pop() {
                            give_back(id, n, StatIdx::slab(1));
                        }
                    }
                }
                for n in held {
                    give_back(id, n, StatIdx::slab(1));
                }
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    stop.store(true, Ordering::Relaxed);
    let seen = observer.join().unwrap();
    assert!(seen <= max);
    assert!(t.peak() <= max);
    assert_eq!(t.current_exact(), 0);
    assert_eq!(t.events().max, fails.load(Ordering::Relaxed));
}

/// A thread's stock is given back when it exits.
#[test]
fn thread_exit_returns_stock() {
    let t = Tenant::new("exit");
    let t2 = t.clone();
    thread::spawn(move || {
        let _g = t2.enter();
        let id = hooks::current_objcg();
        assert!(charge(id, 100, StatIdx::slab(0)));
        assert!(t2.current() >= slabcg_accounting::testing::charge_batch());
        give_back(id, 100, StatIdx::slab(0));
    })
    .join()
    .unwrap();
    assert_eq!(t.current(), 0, "no drain needed");
}

/// Sock charges are batched in the stock and exact after a drain.
#[test]
fn sock_batched_and_exact_after_drain() {
    let t = Tenant::new("sock");
    let hs: Vec<_> = (0..3)
        .map(|_| {
            let t = t.clone();
            thread::spawn(move || {
                for _ in 0..100 {
                    t.charge(1000, StatItem::Sock).unwrap();
                }
                for _ in 0..10 {
                    t.uncharge(1000, StatItem::Sock);
                }
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    // Threads exited, so their stocks were drained already.
    assert_eq!(t.stat().sock, 270_000);
    // Now on this (living) thread: the stat lags within the drift bound until a drain.
    for _ in 0..10 {
        t.charge(1000, StatItem::Sock).unwrap();
    }
    let lag = t.stat().sock;
    assert!((270_000..=280_000).contains(&lag));
    drain_all_stocks();
    let st = t.stat();
    assert_eq!(st.sock, 280_000);
    assert_eq!(st.current, 280_000);
    for _ in 0..280 {
        t.uncharge(1000, StatItem::Sock);
    }
    assert_eq!(t.current_exact(), 0);
    assert_eq!(t.stat().sock, 0);
}

/// ChargeError names the refusing ancestor and the bytes asked.
#[test]
fn charge_error_names_refusing_ancestor() {
    let p = Tenant::new("limited-parent");
    p.set_max(10_000);
    let c = p.child("unlimited-child");
    c.charge(6000, StatItem::Large).unwrap();
    let e = c.charge(6000, StatItem::Large).unwrap_err();
    assert_eq!(e.tenant, "limited-parent");
    assert_eq!(e.bytes, 6000);
    let msg = e.to_string();
    assert!(
        msg.contains("limited-parent") && msg.contains("6000"),
        "{msg}"
    );
    let _: &dyn std::error::Error = &e;
    assert_eq!(p.events().max, 1);
    assert_eq!(p.events().oom, 1);
    assert_eq!(c.events().oom, 0);
    assert!(p.current() <= 10_000);
    c.uncharge(6000, StatItem::Large);
    assert_eq!(p.current_exact(), 0);
}

/// Events count up the tree as cgroup v2's memory.events does (they counted only at the
/// tenant whose limit was involved): a refusal by a middle tenant's `max` is in its events
/// and its ancestors', not its descendants'; `events_local` keeps each tenant's own.
#[test]
fn events_are_hierarchical_and_local_events_are_not() {
    let top = Tenant::new("events-top");
    let mid = top.child("events-mid");
    let leaf = mid.child("events-leaf");
    mid.set_max(10_000);
    leaf.set_high(1000);
    leaf.charge(4000, StatItem::Sock).unwrap();
    assert!(leaf.charge(8000, StatItem::Sock).is_err());
    let e = |max, oom, high| Events {
        high,
        max,
        oom,
        oom_kill: 0,
    };
    assert_eq!(leaf.events(), e(0, 0, 1));
    assert_eq!(leaf.events_local(), e(0, 0, 1));
    assert_eq!(mid.events(), e(1, 1, 1));
    assert_eq!(mid.events_local(), e(1, 1, 0));
    assert_eq!(top.events(), e(1, 1, 1));
    assert_eq!(top.events_local(), e(0, 0, 0));
    let stat = top.stat();
    assert_eq!((stat.events, stat.events_local), (top.events(), e(0, 0, 0)));
    let text = stat.to_string();
    assert!(text.contains("events.max 1\n") && text.contains("events_local.max 0\n"));
    assert_eq!(
        Tenant::root().events(),
        Events::default(),
        "the root counts no events"
    );
    leaf.uncharge(4000, StatItem::Sock);
    assert_eq!(top.current_exact(), 0);
}

/// Going above high never fails; it counts events.high and raises pressure until usage drops.
#[test]
fn high_events_and_pressure() {
    let t = Tenant::new("high");
    t.set_high(100 * KIB);
    t.charge(50 * KIB, StatItem::Large).unwrap();
    assert!(!t.under_pressure());
    t.charge(100 * KIB, StatItem::Large).unwrap();
    assert!(t.under_pressure());
    assert!(t.events().high >= 1);
    assert_eq!(t.events().max, 0);
    t.uncharge(150 * KIB, StatItem::Large);
    drain_all_stocks();
    assert!(!t.under_pressure());
    assert_eq!(t.current(), 0);
}

/// The reclaim callback runs before a charge fails and can make it succeed; a failing
/// charge inside the callback just fails (no recursion).
#[test]
fn reclaim_makes_charge_succeed() {
    let t = Tenant::new("reclaim");
    t.set_max(1024 * KIB);
    let calls = Arc::new(AtomicU64::new(0));
    let inner_failed = Arc::new(AtomicBool::new(false));
    {
        let (calls, inner_failed) = (calls.clone(), inner_failed.clone());
        t.set_reclaim(move |tenant, needed| {
            calls.fetch_add(1, Ordering::Relaxed);
            assert_eq!(tenant.name(), "reclaim");
            assert!(needed >= 256 * KIB);
            // Re-entering a failing charge from the callback just fails.
            if tenant.charge(10 << 20, StatItem::Large).is_err() {
                inner_failed.store(true, Ordering::Relaxed);
            }
            tenant.uncharge(512 * KIB, StatItem::Large);
        });
    }
    t.charge(1024 * KIB, StatItem::Large).unwrap();
    t.charge(256 * KIB, StatItem::Large).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert!(inner_failed.load(Ordering::Relaxed));
    assert_eq!(t.events().oom, 1, "only the inner charge failed");
    assert_eq!(t.current_exact(), 768 * KIB);
    t.uncharge(768 * KIB, StatItem::Large);
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn scopes_nest_and_current_tenant() {
    let a = Tenant::new("scope-a");
    let b = a.child("scope-b");
    assert_eq!(current_tenant(), Tenant::root());
    {
        let _ga = a.enter();
        assert_eq!(current_tenant(), a);
        assert!(hooks::accounting_active());
        {
            let _gb = b.enter();
            assert_eq!(current_tenant(), b);
            assert_eq!(hooks::current_objcg(), b.objcg_id());
        }
        assert_eq!(current_tenant(), a);
    }
    assert_eq!(hooks::current_objcg(), 0);
    assert_eq!(b.parent(), Some(a.clone()));
    assert_eq!(Tenant::root().parent(), None);
    assert_eq!(b.name(), "scope-b");
    assert!(format!("{b:?}").contains("scope-b"));
}

/// Owner metadata is derived at stat time from each slab index's bytes and the geometry the
/// allocator registered for it; indexes without one (and hand-charged slab) count nothing.
#[test]
fn owner_meta_from_registered_geometry() {
    // 64-byte objects, 60 per slab, whose owner array took 4 slots (256 bytes) per slab.
    let ext = SlabMeta {
        object_size: 64,
        paid_per_slab: 256,
        objects_per_slab: 60,
    };
    // Owner words in padding or the leftover tail: free.
    let free = SlabMeta {
        object_size: 2312,
        paid_per_slab: 0,
        objects_per_slab: 14,
    };
    // Rejected: not a slab class index, a zero or too large field.
    assert!(!hooks::set_slab_meta(StatIdx::LARGE, ext));
    assert!(!hooks::set_slab_meta(StatIdx::SLAB_OTHER, ext));
    for bad in [
        SlabMeta {
            object_size: 0,
            ..ext
        },
        SlabMeta {
            objects_per_slab: 0,
            ..ext
        },
        SlabMeta {
            paid_per_slab: 1 << 21,
            ..ext
        },
    ] {
        assert!(!hooks::set_slab_meta(StatIdx::slab(42), bad));
    }
    assert!(hooks::set_slab_meta(StatIdx::slab(40), ext));
    // The first registration wins.
    assert!(!hooks::set_slab_meta(StatIdx::slab(40), free));
    assert!(hooks::set_slab_meta(StatIdx::slab(41), free));

    let parent = Tenant::new("meta-parent");
    let t = parent.child("meta-child");
    let id = t.objcg_id();
    // Two whole slabs of the paid kind, three objects of the free kind, hand-charged slab.
    for _ in 0..120 {
        assert!(charge(id, 64, StatIdx::slab(40)));
    }
    for _ in 0..3 {
        assert!(charge(id, 2312, StatIdx::slab(41)));
    }
    assert!(charge(id, 500, StatIdx::slab(42)));
    t.charge(1000, StatItem::Slab).unwrap();
    for s in [t.stat(), parent.stat()] {
        assert_eq!((s.owner_meta, s.owner_meta_paid), (4 * 123, 2 * 256), "{s}");
        let text = s.to_string();
        for line in ["owner_meta 492", "owner_meta_paid 512"] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
    // Part of a slab: 121 * 256 / 60 = 516.27 rounds to 516; 122 -> 520.53 -> 521.
    assert!(charge(id, 64, StatIdx::slab(40)));
    assert_eq!(t.stat().owner_meta_paid, 516);
    assert!(charge(id, 64, StatIdx::slab(40)));
    assert_eq!(t.stat().owner_meta_paid, 521);
    assert_eq!(t.stat().owner_meta, 4 * 125);
    give_back(id, 122 * 64, StatIdx::slab(40));
    give_back(id, 3 * 2312, StatIdx::slab(41));
    give_back(id, 500, StatIdx::slab(42));
    t.uncharge(1000, StatItem::Slab);
    for s in [t.stat(), parent.stat()] {
        assert_eq!((s.owner_meta, s.owner_meta_paid, s.slab), (0, 0, 0), "{s}");
    }
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn stat_display() {
    static SIZES: [u32; 4] = [8, 16, 32, 64];
    hooks::set_slab_class_sizes(&SIZES);
    let t = Tenant::new("display");
    t.set_max(1 << 20);
    assert!(charge(t.objcg_id(), 32, StatIdx::slab(2)));
    t.charge(100, StatItem::Sock).unwrap();
    drain_all_stocks();
    let s = t.stat();
    assert_eq!(s.slab_classes[2], 32);
    let text = s.to_string();
    for line in [
        "current 132",
        "max 1048576",
        "high max",
        "slab 32",
        "slab_32 32",
        "sock 100",
        "events.oom 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    give_back(t.objcg_id(), 32, StatIdx::slab(2));
    t.uncharge(100, StatItem::Sock);
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn root_is_sum_plus_source() {
    fn source() -> hooks::Unscoped {
        hooks::Unscoped {
            slab: 7,
            large: 4096,
        }
    }
    hooks::set_root_usage_source(source);
    let root = Tenant::root();
    root.set_max(1); // ignored: root is never limited
    assert_eq!(root.max(), u64::MAX);
    assert!(root.current() >= 4103);
    // The report counts the unscoped bytes by kind, so that it adds up.
    let stat = root.stat();
    assert!(stat.slab >= 7 && stat.large >= 4096 && stat.peak >= stat.current);
}

/// A chain of thousands of tenants can be built, charged and dropped from its leaf on a
/// thread with a small stack: releasing the chain is a loop, not a recursion (which
/// overflowed a 2 MiB stack at about 40,000 levels, and this 64 KiB one far sooner).
#[test]
fn a_deep_chain_of_tenants_drops_without_recursion() {
    let depth = if cfg!(miri) { 20 } else { 5_000 };
    let leaf = {
        let mut t = Tenant::new("deep-0");
        for _ in 1..depth {
            t = t.child("deep");
        }
        t
    };
    thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(move || {
            leaf.charge(4096, StatItem::Sock).unwrap();
            let top = {
                let mut t = leaf.clone();
                while let Some(p) = t.parent() {
                    if p == Tenant::root() {
                        break;
                    }
                    t = p;
                }
                t
            };
            assert_eq!(top.name(), "deep-0");
            assert_eq!(top.current_exact(), 4096);
            // Dropped while charged: its charge moves to `top`, level by level.
            drop(leaf);
            assert_eq!(top.current_exact(), 4096);
            top.uncharge(4096, StatItem::Sock);
            assert_eq!(top.current_exact(), 0);
            drop(top);
            drain_all_stocks();
        })
        .unwrap()
        .join()
        .unwrap();
}
