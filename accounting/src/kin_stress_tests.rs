//! Stress of the per-thread caches of children's counts (`kin_cache.rs`): births, deaths,
//! kills, evictions, refreshes and thread exits of several threads at once, on more parents
//! than a thread has ways, with children dying on other threads than their births', chains
//! of deaths, handles taken and dropped so that the last one goes (a kill) while the other
//! threads count, and short-lived threads exiting with their entries. At the end the counts
//! are exact (handles and adopted, shared plus cached), every parent dies with its last
//! child, and its node is freed.
//!
//! Longer or other runs: `KIN_ROUNDS` (400), `KIN_WORKERS` (4), `KIN_PARENTS` (6, more than
//! a thread's 4 ways), `KIN_HOLD` (a worker takes or drops a held handle one round in 8),
//! `KIN_SEED` (the churn test prints the one it used).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::hooks::{self, ObjCgId, StatIdx};
use crate::kin_cache;
use crate::node::Node;
use crate::tests::serial;
use crate::Tenant;

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

fn charge(id: ObjCgId) {
    // SAFETY: the callers hold a handle on the tenant of `id`.
    assert!(unsafe { hooks::charge(id, 64, StatIdx::slab(0)) });
}

fn uncharge(id: ObjCgId) {
    // SAFETY: 64 bytes `charge` charged to `id`, given back once.
    unsafe { hooks::uncharge(id, 64, StatIdx::slab(0)) };
}

fn rounds() -> usize {
    std::env::var("KIN_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(miri) { 4 } else { 400 })
}

struct Shared<'a> {
    anchors: &'a [Tenant],
    /// Children (and handles) to be dropped by another thread than the one that made them.
    pool: Mutex<Vec<Tenant>>,
    /// Objcgs with 64 bytes charged, given back late (after their tenant's death, mostly).
    late: Mutex<Vec<ObjCgId>>,
    births: AtomicUsize,
}

impl Shared<'_> {
    fn take_some(&self, n: usize) -> Vec<Tenant> {
        let mut p = self.pool.lock().unwrap();
        let at = p.len().saturating_sub(n);
        p.split_off(at)
    }
    fn give_late(&self, n: usize) {
        let ids: Vec<ObjCgId> = {
            let mut l = self.late.lock().unwrap();
            let at = l.len().saturating_sub(n);
            l.split_off(at)
        };
        ids.into_iter().for_each(uncharge);
    }
}

fn worker(sh: &Shared<'_>, seed: u64, rounds: usize) {
    let mut r = rng(seed);
    // A charge registers this thread's stock (an entry needs it).
    charge(sh.anchors[0].objcg_id());
    uncharge(sh.anchors[0].objcg_id());
    // Handles this thread keeps for a while (fewer kills: the entries live longer, get
    // evicted and refreshed).
    let hold: u64 = std::env::var("KIN_HOLD").map_or(8, |s| s.parse().unwrap());
    let mut held: Vec<Option<Tenant>> = (0..sh.anchors.len()).map(|_| None).collect();
    for round in 0..rounds {
        if hold > 0 && r().is_multiple_of(hold) {
            let j = (r() % held.len() as u64) as usize;
            held[j] = match held[j].take() {
                Some(h) => {
                    drop(h);
                    None
                }
                None => sh.anchors[j].parent(),
            };
        }
        let i = (r() % sh.anchors.len() as u64) as usize;
        let p = sh.anchors[i].parent().expect("a parent with a live child");
        assert!(p.node.is_alive(), "a parent with a live child died");
        // Now and then a burst: past the range of an entry's births (2,047), to die on
        // other threads, whose entries' deaths go past theirs.
        let n = if !cfg!(miri) && r().is_multiple_of(200) {
            2_500
        } else {
            1 + (r() % 24) as usize
        };
        let mut kids: Vec<Tenant> = (0..n).map(|j| p.child(&format!("c{j}"))).collect();
        sh.births.fetch_add(n, Ordering::Relaxed);
        let mut p = Some(p);
        if r().is_multiple_of(2) {
            // The handle goes before the children (maybe the last one: a kill).
            drop(p.take());
        } else if r().is_multiple_of(8) {
            // Dropped by another thread.
            sh.pool.lock().unwrap().push(p.take().unwrap());
        }
        for c in &kids {
            match r() % 4 {
                0 => {
                    charge(c.objcg_id());
                    sh.late.lock().unwrap().push(c.objcg_id());
                }
                1 => {
                    charge(c.objcg_id());
                    uncharge(c.objcg_id());
                }
                _ => {}
            }
        }
        // Grandchildren: a chain of deaths, maybe on another thread.
        if r().is_multiple_of(4) {
            let g = kids[0].child("g");
            charge(g.objcg_id());
            sh.late.lock().unwrap().push(g.objcg_id());
            if r().is_multiple_of(2) {
                sh.pool.lock().unwrap().push(g);
            }
        }
        if n > 100 {
            sh.pool.lock().unwrap().append(&mut kids);
        } else {
            let away = kids.len() / 3;
            let mut away: Vec<Tenant> = kids.drain(..away).collect();
            sh.pool.lock().unwrap().append(&mut away);
        }
        // Shuffled-ish: deaths in another order than births.
        while !kids.is_empty() {
            let k = (r() % kids.len() as u64) as usize;
            drop(kids.swap_remove(k));
        }
        drop(p);
        let m = if r().is_multiple_of(50) { 3_000 } else { 12 };
        drop(sh.take_some(m));
        if round % 4 == 0 {
            sh.give_late(16);
        }
    }
}

/// A thread that caches a parent's counts and exits with its entry holding births (its
/// children live on, to die elsewhere).
fn short_lived(sh: &Shared<'_>, seed: u64) {
    let mut r = rng(seed);
    let i = (r() % sh.anchors.len() as u64) as usize;
    let p = sh.anchors[i].parent().expect("a parent with a live child");
    charge(p.objcg_id());
    uncharge(p.objcg_id());
    let kids: Vec<Tenant> = (0..20 + (r() % 20) as usize)
        .map(|j| p.child(&format!("s{j}")))
        .collect();
    sh.births.fetch_add(kids.len(), Ordering::Relaxed);
    // Some die here, some elsewhere.
    let mut kids = kids;
    let here = kids.split_off(kids.len() / 2);
    drop(here);
    sh.pool.lock().unwrap().append(&mut kids);
    if r().is_multiple_of(3) {
        sh.pool.lock().unwrap().push(p);
    } else {
        drop(p);
    }
    // Some children taken from the pool die here just before the exit.
    drop(sh.take_some(5));
}

#[test]
fn kin_entries_under_churn() {
    let _serial = serial();
    crate::tenant::drain_all_stocks();
    // More than `WAYS`: evictions.
    let parents: usize = std::env::var("KIN_PARENTS").map_or(6, |s| s.parse().unwrap());
    let rounds = rounds();
    let ps: Vec<Tenant> = (0..parents)
        .map(|i| Tenant::new(&format!("kin-stress-{i}")))
        .collect();
    let weaks: Vec<Weak<Node>> = ps.iter().map(|p| Arc::downgrade(&p.node)).collect();
    let anchors: Vec<Tenant> = ps.iter().map(|p| p.child("anchor")).collect();
    drop(ps);
    let sh = Shared {
        anchors: &anchors,
        pool: Mutex::new(Vec::new()),
        late: Mutex::new(Vec::new()),
        births: AtomicUsize::new(0),
    };
    let seed0 = std::env::var("KIN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            if cfg!(miri) {
                return 1;
            }
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("KIN_SEED={seed0}");
    std::thread::scope(|sc| {
        let sh = &sh;
        let workers: u64 = std::env::var("KIN_WORKERS").map_or(4, |s| s.parse().unwrap());
        for t in 0..workers {
            sc.spawn(move || worker(sh, seed0 + t, rounds));
        }
        sc.spawn(move || {
            for k in 0..rounds.div_ceil(4) {
                std::thread::scope(|s2| {
                    s2.spawn(|| short_lived(sh, seed0 ^ (k as u64 + 1000)));
                    s2.spawn(|| short_lived(sh, seed0 ^ (k as u64 + 5000)));
                });
            }
        });
    });
    drop(std::mem::take(&mut *sh.pool.lock().unwrap()));
    sh.give_late(usize::MAX);
    crate::tenant::drain_all_stocks();
    eprintln!("births: {}", sh.births.load(Ordering::Relaxed));
    for (i, a) in anchors.iter().enumerate() {
        let p = a.parent().unwrap();
        assert_eq!(p.objcg_list().len(), 1, "parent {i}: only its own objcg");
        // This handle and the anchor.
        assert_eq!(
            kin_cache::handles_with_cached(&p.node),
            2,
            "parent {i}: handles with the cached births"
        );
        assert_eq!(p.node.kin.ext.load(Ordering::Relaxed), 1, "parent {i}: ext");
    }
    let alive = |w: &Weak<Node>| w.upgrade().is_some_and(|n| n.is_alive());
    for (a, w) in anchors.into_iter().zip(&weaks) {
        assert!(alive(w));
        drop(a);
        assert!(!alive(w), "a parent outlived its last child");
    }
    crate::tenant::drain_all_stocks();
    for (i, w) in weaks.iter().enumerate() {
        assert!(
            w.upgrade().is_none(),
            "parent {i}'s node is still referenced ({} strong)",
            w.strong_count()
        );
    }
}

/// A fork while another thread's entry counts births of a parent whose children the
/// forking thread holds: in the child, that entry's counts go to the parent
/// (`drain::fork_child`), so dropping every child and the last handle there kills the
/// parent, as in the parent process.
#[test]
#[cfg_attr(miri, ignore = "fork")]
fn a_fork_child_folds_other_threads_entries() {
    use std::sync::mpsc;

    let _serial = serial();
    let parent = Tenant::new("kin-fork");
    let (tx, rx) = mpsc::channel::<Vec<Tenant>>();
    let (go, wait) = mpsc::channel::<()>();
    let b = {
        let p = parent.clone();
        std::thread::spawn(move || {
            charge(p.objcg_id());
            uncharge(p.objcg_id());
            let kids: Vec<Tenant> = (0..30).map(|i| p.child(&format!("b{i}"))).collect();
            assert!(crate::stock::STOCK.with(|s| s.kin.holds(Arc::as_ptr(&p.node) as *const u8)));
            drop(p);
            tx.send(kids).unwrap();
            wait.recv().unwrap();
        })
    };
    let theirs = rx.recv().unwrap();
    charge(parent.objcg_id());
    uncharge(parent.objcg_id());
    let ours: Vec<Tenant> = (0..20).map(|i| parent.child(&format!("m{i}"))).collect();
    assert_eq!(kin_cache::handles_with_cached(&parent.node), 1 + 50);
    hooks::fork_prepare_tenants();
    hooks::fork_prepare();
    // SAFETY: the child only drops tenants and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        hooks::fork_child();
        hooks::fork_release_tenants();
        // SAFETY: async-signal-safe; a hang ends the child.
        unsafe { libc::alarm(10) };
        let ok = kin_cache::handles_with_cached(&parent.node) == 1 + 50;
        let node = parent.node.clone();
        drop(theirs);
        drop(ours);
        let ok2 = node.is_alive();
        drop(parent);
        let code = if !ok {
            1
        } else if !ok2 {
            2
        } else if node.is_alive() {
            3
        } else {
            0
        };
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(code) };
    }
    hooks::fork_parent();
    hooks::fork_release_tenants();
    assert!(pid > 0);
    let mut status = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's counts were wrong (status {status:#x})"
    );
    let weak = Arc::downgrade(&parent.node);
    drop(theirs);
    drop(ours);
    drop(parent);
    go.send(()).unwrap();
    b.join().unwrap();
    crate::tenant::drain_all_stocks();
    assert!(weak.upgrade().is_none());
}

/// Deaths past the range of an entry (refreshes without a handle, `Enable::No`) racing
/// kills: one thread makes children of a parent and hands them to another, which cached the
/// parent's counts once and now only lets children die (with bytes charged, so each death
/// also adopts its objcg), while a third takes and drops handles on the parent, each drop
/// the last one: a kill that sweeps the dying thread's entry between its refreshes.
#[test]
fn refreshes_by_deaths_race_kills() {
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    let _serial = serial();
    let rounds = if cfg!(miri) { 1 } else { rounds() / 40 + 1 };
    let parent = Tenant::new("kin-refresh-race");
    let weak = Arc::downgrade(&parent.node);
    let anchor = parent.child("anchor");
    drop(parent);
    let stop = AtomicBool::new(false);
    let late = Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        let (tx, rx) = mpsc::sync_channel::<Vec<Tenant>>(2);
        let (anchor, stop, late) = (&anchor, &stop, &late);
        sc.spawn(move || {
            for _ in 0..rounds {
                let p = anchor.parent().unwrap();
                let n = if cfg!(miri) { 12 } else { 2_600 };
                let kids: Vec<Tenant> = (0..n).map(|j| p.child(&format!("r{j}"))).collect();
                drop(p);
                tx.send(kids).unwrap();
            }
        });
        sc.spawn(move || {
            charge(anchor.objcg_id());
            uncharge(anchor.objcg_id());
            for kids in rx {
                // Cache the parent's counts (a handle for the births only).
                let p = anchor.parent().unwrap();
                let mine: Vec<Tenant> = (0..10).map(|j| p.child(&format!("m{j}"))).collect();
                drop(p);
                for (j, c) in kids.into_iter().chain(mine).enumerate() {
                    if j % 2 == 0 {
                        charge(c.objcg_id());
                        late.lock().unwrap().push(c.objcg_id());
                    }
                    drop(c);
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        sc.spawn(move || {
            charge(anchor.objcg_id());
            uncharge(anchor.objcg_id());
            while !stop.load(Ordering::Relaxed) {
                let p = anchor.parent().unwrap();
                // Births through an entry: the caching starts again, for the next kill.
                let k: Vec<Tenant> = (0..9).map(|j| p.child(&format!("k{j}"))).collect();
                drop(p);
                drop(k);
                std::thread::yield_now();
            }
        });
        sc.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let ids: Vec<ObjCgId> = std::mem::take(&mut *late.lock().unwrap());
                ids.into_iter().for_each(uncharge);
                crate::tenant::drain_all_stocks();
                std::thread::yield_now();
            }
        });
    });
    late.into_inner().unwrap().into_iter().for_each(uncharge);
    crate::tenant::drain_all_stocks();
    let p = anchor.parent().unwrap();
    assert_eq!(p.objcg_list().len(), 1);
    assert_eq!(kin_cache::handles_with_cached(&p.node), 2);
    drop(p);
    drop(anchor);
    assert!(
        !weak.upgrade().is_some_and(|n| n.is_alive()),
        "outlived its last child"
    );
    crate::tenant::drain_all_stocks();
    assert!(weak.upgrade().is_none(), "still referenced");
}
