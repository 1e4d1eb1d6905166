//! Unit tests that look at internals (refs, the registry, slot counts).

use crate::drain::{drain_all, registered_count};
use crate::hooks::{self, StatIdx};
use crate::objcg;
use crate::stock::{CHARGE_BATCH, NR_SLOTS, STAT_FLUSH, STOCK, STOCK_HIGH, STOCK_LOW};
use crate::{StatItem, Tenant};

/// Taken by every test of this file: they look at this thread's stock or at shared lists,
/// and most of them drain every thread's stock, which would flush what another test is
/// about to check was flushed by an eviction.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `hooks::charge` for this file's tests, which charge only objcgs of tenants they hold a
/// handle on or are in a scope of.
fn charge(id: hooks::ObjCgId, n: usize, idx: StatIdx) -> bool {
    // SAFETY: the callers' discipline above keeps the objcg alive.
    unsafe { hooks::charge(id, n, idx) }
}

/// `refs == alive + slots + bytes` (objcg.rs), checked at quiescence after a drain.
#[test]
fn objcg_refs_equation() {
    let _serial = serial();
    let t = Tenant::new("refs");
    let id = t.objcg_id();
    let oc = objcg::lookup(id).unwrap();
    assert!(charge(id, 1000, StatIdx::slab(0)));
    assert!(charge(id, 24, StatIdx::slab(0)));
    // One slot on this thread: alive + slot + batch bytes.
    assert_eq!(oc.refs(), 1 + 1 + t.current());
    drain_all();
    assert_eq!(oc.refs(), 1 + 1024);
    // SAFETY: uncharges exactly what this test charged to the id above.
    unsafe { hooks::uncharge(id, 1024, StatIdx::slab(0)) };
    drain_all();
    assert_eq!(oc.refs(), 1);
    assert_eq!(t.current(), 0);
}

/// More tenants than slots on one thread: LRU eviction keeps everything exact, and an
/// uncharge miss with every slot taken goes straight to the counter.
#[test]
fn eviction_and_uncharge_miss() {
    let _serial = serial();
    let ts: Vec<Tenant> = (0..NR_SLOTS + 3)
        .map(|i| Tenant::new(&format!("evict{i}")))
        .collect();
    for round in 0..3u64 {
        for t in &ts {
            assert!(charge(t.objcg_id(), 100 + round as usize, StatIdx::slab(1)));
        }
    }
    // Only the object pools are used here, each trimmed to STOCK_HIGH.
    STOCK.with(|s| assert!(s.held_bytes() <= NR_SLOTS as u64 * STOCK_HIGH));
    for t in &ts {
        for round in 0..3u64 {
            // SAFETY: uncharges exactly what this test charged to the id above.
            unsafe { hooks::uncharge(t.objcg_id(), 100 + round as usize, StatIdx::slab(1)) };
        }
    }
    for t in &ts {
        assert_eq!(t.current_exact(), 0, "{}", t.name());
        assert_eq!(t.stat().slab, 0);
    }
}

/// A thread's stock is registered on first slow path and unlinked at exit.
#[test]
fn registry_follows_thread_lifetime() {
    let _serial = serial();
    let t = Tenant::new("registry");
    let (tx, rx) = std::sync::mpsc::channel();
    let (tx2, rx2) = std::sync::mpsc::channel::<()>();
    let t2 = t.clone();
    let h = std::thread::spawn(move || {
        t2.charge(10, StatItem::Slab).unwrap();
        tx.send(registered_count()).unwrap();
        rx2.recv().unwrap();
        t2.uncharge(10, StatItem::Slab);
    });
    let during = rx.recv().unwrap();
    assert!(during >= 1);
    tx2.send(()).unwrap();
    h.join().unwrap();
    assert_eq!(t.current(), 0);
}

/// Large charges bigger than a batch go through and leave at most a batch in the stock.
#[test]
fn large_charge_rounds_batch() {
    let _serial = serial();
    let t = Tenant::new("large");
    let n = 10 * STOCK_HIGH as usize + 3;
    assert!(charge(t.objcg_id(), n, StatIdx::LARGE));
    assert!(t.current() >= n as u64 && t.current() < n as u64 + STOCK_HIGH);
    // SAFETY: uncharges exactly what this test charged to the id above.
    unsafe { hooks::uncharge(t.objcg_id(), n, StatIdx::LARGE) };
    assert!(t.current() <= STOCK_HIGH);
    assert_eq!(t.current_exact(), 0);
}

/// A node counts the dead descendants' objcgs that point at it (`adopted`, which lets a
/// death with none skip the tree lock): exact through reparenting across two levels, and
/// through frees in any order.
#[test]
fn adopted_counts_stay_exact_through_reparenting() {
    let _serial = serial();
    let parent = Tenant::new("lists");
    let mid = parent.child("lists-mid");
    // Fewer under Miri, where every drain is slow.
    let n: usize = if cfg!(miri) { 30 } else { 200 };
    let mut ids = Vec::new();
    for i in 0..n {
        let t = if i % 3 == 0 {
            parent.child("lists-c")
        } else {
            mid.child("lists-c")
        };
        assert!(charge(t.objcg_id(), 64, StatIdx::slab(2)));
        ids.push(t.objcg_id());
        // Dead, kept by the 64 bytes: its objcg now points at the parent (or mid).
        drop(t);
    }
    assert_eq!(mid.objcg_list().len(), 1 + n - n.div_ceil(3));
    // mid dies: its own objcg (freed, as it holds nothing) and the 133 it adopted move to
    // the parent.
    drop(mid);
    crate::drain_all_stocks();
    let mut listed = parent.objcg_list();
    listed.sort_unstable();
    let mut want = ids.clone();
    want.push(parent.objcg_id());
    want.sort_unstable();
    assert_eq!(listed, want);
    // Give the bytes back in a scrambled order; each objcg is uncounted when freed.
    let mut order: Vec<usize> = (0..ids.len()).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    for (k, &i) in order.iter().enumerate() {
        // SAFETY: uncharges exactly the 64 bytes charged to this objcg above, which keep it
        // alive until now.
        unsafe { hooks::uncharge(ids[i], 64, StatIdx::slab(2)) };
        if k % 8 == 7 || k + 1 == order.len() {
            crate::drain_all_stocks();
            let listed = parent.objcg_list();
            assert_eq!(listed.len(), 1 + ids.len() - (k + 1));
            assert!(!listed.contains(&ids[i]));
        }
    }
    assert_eq!(parent.objcg_list(), vec![parent.objcg_id()]);
    assert_eq!(parent.current_exact(), 0);
}

/// A slot evicted from the stock flushes every stat delta it cached, also at stat indices
/// that share a bit of the slot's folded dirty mask (0, 64, 128 and 2, 66, 130), deltas that
/// went back through 0 and came back, and negative ones.
#[test]
fn evicted_slot_flushes_every_stat_delta() {
    let _serial = serial();
    let t = Tenant::new("evict-stats");
    let id = t.objcg_id();
    // For a negative delta: 40 bytes charged on another thread (flushed when it exits),
    // given back here below, so this thread's slot caches -40.
    let neg = StatIdx::slab(3);
    std::thread::scope(|s| {
        s.spawn(|| assert!(charge(id, 40, neg)));
    });
    let idxs = [
        StatIdx::slab(0),
        StatIdx::slab(64),
        StatIdx::LARGE, // 128
        StatIdx::slab(2),
        StatIdx::slab(66),
        StatIdx::SLAB_OTHER, // 130
        StatIdx::slab(5),
    ];
    for (k, &idx) in idxs.iter().enumerate() {
        assert!(charge(id, 100 + k, idx));
    }
    // SAFETY: gives back the 40 bytes charged to `id` on the thread above.
    unsafe { hooks::uncharge(id, 40, neg) };
    // slab(5) back through 0, then up again.
    // SAFETY: gives back bytes charged to `id` for slab(5) just above.
    unsafe { hooks::uncharge(id, 106, StatIdx::slab(5)) };
    assert!(charge(id, 7, StatIdx::slab(5)));
    // Fill every other slot of this thread's stock: `t`'s slot, the least recently used, is
    // evicted by the last one.
    let others: Vec<Tenant> = (0..NR_SLOTS)
        .map(|i| Tenant::new(&format!("evict-stats{i}")))
        .collect();
    for o in &others {
        assert!(charge(o.objcg_id(), 8, StatIdx::slab(1)));
    }
    for (k, &idx) in idxs.iter().enumerate().take(6) {
        assert_eq!(
            t.stat_flushed(idx.0 as usize),
            100 + k as u64,
            "index {}",
            idx.0
        );
    }
    assert_eq!(t.stat_flushed(StatIdx::slab(5).0 as usize), 7);
    // +40 flushed at the other thread's exit, -40 now.
    assert_eq!(t.stat_flushed(neg.0 as usize), 0);
    for (k, &idx) in idxs.iter().enumerate() {
        let n = if idx == StatIdx::slab(5) { 7 } else { 100 + k };
        // SAFETY: gives back what this test charged to `id` at `idx` and still holds.
        unsafe { hooks::uncharge(id, n, idx) };
    }
    for o in &others {
        // SAFETY: gives back the 8 bytes charged to each of these above.
        unsafe { hooks::uncharge(o.objcg_id(), 8, StatIdx::slab(1)) };
    }
    let st = t.stat();
    assert_eq!((st.slab, st.large, st.current), (0, 0, 0));
}

/// Dead objcgs are freed by the lifecycle paths themselves once `ZOMBIE_SWEEP_EVERY` of
/// them wait, without a drain: a service that starts and ends queries keeps a bounded list
/// of them, whether its queries run on one thread or each on a thread of its own (whose
/// objcg dies when the thread exits and gives back its stock).
#[test]
fn lifecycle_sweeps_zombies_without_drains() {
    let _serial = serial();
    let service = Tenant::new("sweep-service");
    let query = || {
        let q = service.child("sweep-query");
        let id = q.objcg_id();
        assert!(charge(id, 64, StatIdx::slab(2)));
        drop(q);
        // SAFETY: gives back the 64 bytes just charged to `id`. The id's objcg dies once
        // this thread's stock gives back its slot (evicted, or at thread exit).
        unsafe { hooks::uncharge(id, 64, StatIdx::slab(2)) };
    };
    // Fewer under Miri (a thread spawn and a drain-free sweep each are slow there), still
    // more than a sweep's worth.
    let n = if cfg!(miri) { 120 } else { 600 };
    for i in 0..n {
        if i % 2 == 0 {
            query();
        } else {
            std::thread::scope(|s| {
                s.spawn(query);
            });
        }
        // Listed: the service's own, those cached in this thread's stock or owed refs by
        // its forwarding entries (a dead query's freed bytes forwarded to the service's
        // slot), and zombies not yet swept (fewer than a sweep's worth when the next
        // lifecycle call looks).
        let listed = service.objcg_list().len();
        assert!(
            listed
                <= 1 + NR_SLOTS
                    + crate::stock::NR_FWD
                    + crate::tenant::ZOMBIE_SWEEP_EVERY as usize
                    + 1,
            "{listed} objcgs listed"
        );
    }
    crate::drain_all_stocks();
    assert_eq!(service.objcg_list(), vec![service.objcg_id()]);
    assert_eq!(service.current_exact(), 0);
}

/// A tenant's death re-points its objcg only once no reader of the node is left: a slow
/// path that read the dying node finishes with it before the node can be released.
#[test]
fn reparenting_waits_for_the_readers_of_the_dying_node() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    let _serial = serial();
    let p = Tenant::new("readers-parent");
    let c = p.child("readers-child");
    let id = c.objcg_id();
    // Charged bytes keep the objcg alive after the tenant dies.
    assert!(charge(id, 64, StatIdx::slab(1)));
    let released = Arc::new(AtomicBool::new(false));
    let (reading, read) = mpsc::channel();
    let r2 = released.clone();
    let reader = std::thread::spawn(move || {
        let oc = objcg::lookup(id).unwrap();
        // SAFETY: the 64 bytes charged above hold a ref on the objcg.
        let node = unsafe { oc.read() }.unwrap();
        assert_eq!(node.name(), "readers-child");
        reading.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        r2.store(true, Ordering::SeqCst);
        drop(node);
    });
    read.recv().unwrap();
    drop(c); // dies: its objcg is re-pointed to `p`
    assert!(
        released.load(Ordering::SeqCst),
        "the re-pointing did not wait for the reader"
    );
    reader.join().unwrap();
    let oc = objcg::lookup(id).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { oc.read() }.unwrap().name(), "readers-parent");
    // SAFETY: the 64 bytes charged above, given back once.
    unsafe { hooks::uncharge(id, 64, StatIdx::slab(1)) };
    assert_eq!(p.current_exact(), 0);
}

/// The stock budget: however many threads charge one tenant, at most `hold_budget()` stock
/// slots cache its objcg (the others charge the counters directly), the holding list has
/// only stocks that hold something, and a drain gives every share back.
#[test]
fn stock_budget_bounds_the_slots_of_one_tenant() {
    let _serial = serial();
    hooks::set_idle_decay(false);
    let t = Tenant::new("budget");
    let id = t.objcg_id();
    let oc = objcg::lookup(id).unwrap();
    let budget = objcg::hold_budget();
    let threads = budget as usize * 3;
    let charged = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    let done = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (t, charged, done) = (t.clone(), charged.clone(), done.clone());
            std::thread::spawn(move || {
                for _ in 0..4 {
                    assert!(charge(t.objcg_id(), 100, StatIdx::slab(0)));
                }
                charged.wait();
                done.wait();
                // The share goes back when the thread exits (the exit hooks).
            })
        })
        .collect();
    charged.wait();
    // Every thread charged; `budget` of them cache the objcg, the others charged directly.
    assert_eq!(oc.holders(), budget);
    let (_, holding) = crate::testing::drain_visits();
    assert!(
        holding >= budget as usize,
        "the holders are on the holding list"
    );
    assert!(t.current() <= threads as u64 * 400 + u64::from(budget) * 2 * STOCK_HIGH);
    done.wait();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(oc.holders(), 0, "exited threads gave their shares back");
    assert_eq!(t.current(), threads as u64 * 400);
    // Slots on this thread, then a drain: the share comes back with the slot.
    assert!(charge(id, 100, StatIdx::slab(0)));
    assert_eq!(oc.holders(), 1);
    drain_all();
    assert_eq!(oc.holders(), 0);
    assert_eq!(t.current(), threads as u64 * 400 + 100);
    // SAFETY: uncharges exactly what this test charged to the id above.
    unsafe { hooks::uncharge(id, threads * 400 + 100, StatIdx::slab(0)) };
    drain_all();
    assert_eq!(t.current(), 0);
    hooks::set_idle_decay(true);
}

/// Frees of dead tenants' objects on one thread, more dead tenants than forwarding entries
/// and in an order that keeps replacing them (larson's shape: the objects of many dead
/// requests freed at random): whether a free hits an entry, replaces one in a full set or
/// misses, the parent's usage and stats stay exact, and once the last object is freed and
/// the stocks drained no dead objcg is left (every entry's owed refs were put).
#[test]
fn forwarding_past_the_table_stays_exact() {
    let _serial = serial();
    let parent = Tenant::new("fwd-parent");
    // A slot for the parent on this thread, which the dead children's frees forward to.
    assert!(charge(parent.objcg_id(), 8, StatIdx::slab(1)));
    // Under Miri a smoke of the hit and miss paths (each child costs Miri about 2 s).
    let kids = if cfg!(miri) {
        12
    } else {
        crate::stock::NR_FWD * 3
    };
    let per = 3;
    let mut objects = Vec::new();
    for k in 0..kids {
        let child = parent.child("fwd-child");
        let id = child.objcg_id();
        for j in 0..per {
            let n = 16 + 8 * ((k + j) % 5);
            assert!(charge(id, n, StatIdx::slab(1)));
            objects.push((id, n));
        }
        drop(child);
    }
    let held: usize = objects.iter().map(|o| o.1).sum();
    assert_eq!(parent.current_exact() as usize, held + 8);
    // A fixed permutation that interleaves the dead tenants (stride coprime to the count).
    let len = objects.len();
    let stride = (0..)
        .map(|s| 97 + 2 * s)
        .find(|s| gcd(*s, len) == 1)
        .unwrap();
    let mut freed = 0;
    for i in 0..len {
        let (id, n) = objects[i * stride % len];
        // SAFETY: gives back the `n` bytes charged to `id` above, once each (a permutation).
        unsafe { hooks::uncharge(id, n, StatIdx::slab(1)) };
        freed += n;
        if i % 97 == 0 {
            assert_eq!(parent.current_exact() as usize, held + 8 - freed);
            assert_eq!(parent.stat().slab as usize, held + 8 - freed);
        }
    }
    // SAFETY: gives back the 8 bytes charged to the parent above.
    unsafe { hooks::uncharge(parent.objcg_id(), 8, StatIdx::slab(1)) };
    assert_eq!(parent.current_exact(), 0);
    assert_eq!(parent.stat().slab, 0);
    drain_all();
    assert_eq!(parent.objcg_list().len(), 1, "dead objcgs left");
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A child that dies on this thread gives its stock slot to its parent's slot
/// (`charge::release_own_slot`, `Stock::merge_into`): its pools into the parent's API pool,
/// its stat deltas into the parent's. What the parent's slot cannot keep (its pool past
/// `STOCK_HIGH`, a delta past `STAT_FLUSH`) goes to the counter and the shared stats at once.
#[test]
fn a_dying_childs_slot_merges_into_its_parents_slot() {
    use core::sync::atomic::Ordering::Relaxed;
    let _serial = serial();
    let parent = Tenant::new("merge-parent");
    let child = parent.child("merge-child");
    let (pid, cid) = (parent.objcg_id(), child.objcg_id());
    let k = StatIdx::slab(5);
    let slot = |id| {
        STOCK.with(|s| {
            s.find(id)
                .map(|i| (s.bytes[i].load(Relaxed), s.api[i].load(Relaxed)))
        })
    };
    // 5/8 of STAT_FLUSH in objects each: each slot caches that delta at k, below
    // STAT_FLUSH, and the two together pass it.
    let objs = STAT_FLUSH as u64 * 5 / 8;
    assert!(charge(pid, objs as usize, k));
    assert!(charge(cid, objs as usize, k));
    // Fill the parent's API pool: charges and uncharges of socket bytes through it (two
    // refills of CHARGE_BATCH leave 2/16 of one; the uncharges bring it to STOCK_HIGH).
    let sock = CHARGE_BATCH * 15 / 16;
    for _ in 0..2 {
        parent.charge(sock, StatItem::Sock).unwrap();
    }
    for _ in 0..2 {
        parent.uncharge(sock, StatItem::Sock);
    }
    let (_, papi) = slot(pid).expect("the parent has a slot here");
    let (cbytes, capi) = slot(cid).expect("the child has a slot here");
    let pooled = papi + cbytes + capi;
    assert!(
        pooled > STOCK_HIGH,
        "the merge must trim: {papi} + {cbytes} + {capi}"
    );
    assert_eq!(
        parent.stat_flushed(k.0 as usize),
        0,
        "both deltas are cached"
    );
    drop(child);
    assert_eq!(slot(cid), None, "the child's slot is gone");
    let (_, papi_after) = slot(pid).expect("the parent's slot stays");
    assert_eq!(papi_after, STOCK_LOW, "the merged pool is trimmed");
    assert_eq!(
        parent.stat_flushed(k.0 as usize),
        2 * objs,
        "the merged delta passed its flush: both halves reached the shared stats"
    );
    // The child's objects are the parent's now; the trimmed bytes went back.
    assert_eq!(parent.current_exact(), 2 * objs);
    let st = parent.stat();
    assert_eq!((st.slab, st.sock), (2 * objs, 0));
    // SAFETY: gives back the objects charged above, the child's through its dead objcg.
    unsafe {
        hooks::uncharge(cid, objs as usize, k);
        hooks::uncharge(pid, objs as usize, k);
    }
    assert_eq!(parent.current_exact(), 0);
    assert_eq!(parent.stat().slab, 0);
}

/// Children born and dropped on several threads while their counts sit in those threads'
/// kin entries (`kin_cache.rs`): the parent outlives its last handle while any child lives,
/// on any thread; it dies with its last child; and every reference the entries took comes
/// back (its node is freed), also when a thread that cached its counts exits first, when
/// the children die on another thread than their birth's, and after a handle taken again
/// from a child cached them once more. Fails when a credit leaks (the node outlives
/// everything) or a count is lost (the parent dies early, or never).
#[test]
fn cached_child_counts_reach_the_parent() {
    use std::sync::atomic::Ordering;
    use std::sync::{mpsc, Arc};

    let _serial = serial();
    let parent = Tenant::new("kin");
    let weak = Arc::downgrade(&parent.node);
    let alive = || weak.upgrade().is_some_and(|n| n.is_alive());
    // `n` children of `p`, each with 64 bytes charged in a slot of this thread.
    let make = |p: &Tenant, n: usize| -> Vec<Tenant> {
        (0..n)
            .map(|i| {
                let c = p.child(&format!("q{i}"));
                assert!(charge(c.objcg_id(), 64, StatIdx::slab(0)));
                c
            })
            .collect()
    };
    let give_back = |c: &Tenant| {
        // SAFETY: the 64 bytes `make` charged to this child, once.
        unsafe { hooks::uncharge(c.objcg_id(), 64, StatIdx::slab(0)) }
    };
    // Thread A: 50 births (6 under Miri: more than its `STREAK`), half of them die, and it
    // exits with its entries; B: the same, and stays until told.
    let n = if cfg!(miri) { 6 } else { 50 };
    let worker = move |p: Tenant| {
        let mut kids = make(&p, n);
        let keep = kids.split_off(n / 2);
        for c in &kids {
            give_back(c);
        }
        drop(kids);
        drop(p);
        keep
    };
    let a = {
        let p = parent.clone();
        std::thread::spawn(move || worker(p))
    };
    let (go, wait) = mpsc::channel::<()>();
    let (sent, got) = mpsc::channel();
    let b = {
        let p = parent.clone();
        std::thread::spawn(move || {
            sent.send(worker(p)).unwrap();
            wait.recv().unwrap();
        })
    };
    let mut kids = a.join().unwrap();
    kids.extend(got.recv().unwrap());
    assert!(
        parent.node.kin.percpu.load(Ordering::Relaxed),
        "no thread cached the counts"
    );
    drop(parent);
    assert!(alive(), "the parent died with children alive");
    // A handle again, from a child: this thread caches the counts once more.
    let again = kids[0].parent().unwrap();
    let more = make(&again, n / 2 + 4);
    assert!(STOCK.with(|s| s.kin.holds(Arc::as_ptr(&again.node) as *const u8)));
    for c in &more {
        give_back(c);
    }
    drop(more);
    drop(again);
    assert!(alive());
    // The other threads' children die here.
    let last = kids.pop().unwrap();
    for c in &kids {
        give_back(c);
    }
    drop(kids);
    assert!(alive(), "the parent died with a child alive");
    let last_id = last.objcg_id();
    drop(last);
    assert!(!alive(), "the parent outlived its last child");
    go.send(()).unwrap();
    b.join().unwrap();
    // The last child's 64 bytes, late, through its dead objcg; then nothing holds the node.
    // SAFETY: charged by `make`, given back once.
    unsafe { hooks::uncharge(last_id, 64, StatIdx::slab(0)) };
    assert_freed_after_sweeps(&weak);
}

/// The kill of the cached counts racing the births and deaths that use them: threads make
/// and drop children of one parent through handles they take from a child of their own
/// (`parent()`) and drop again, so that the parent's last handle goes, sweeping every
/// entry, while the others count in theirs (and a death's steps straddle the sweep); some
/// children leave bytes charged, given back after their death. At the end the adopted
/// count (shared and cached) matches the objcgs pointing at the parent, the parent dies
/// with its last child, and its node is freed.
#[test]
fn cached_child_counts_under_kills() {
    use std::sync::Arc;

    let _serial = serial();
    let (rounds, threads) = if cfg!(miri) { (2, 2) } else { (300, 4) };
    let parent = Tenant::new("kin-kills");
    let weak = Arc::downgrade(&parent.node);
    let anchors: Vec<Tenant> = (0..threads)
        .map(|i| parent.child(&format!("a{i}")))
        .collect();
    drop(parent);
    std::thread::scope(|sc| {
        for (t, anchor) in anchors.iter().enumerate() {
            sc.spawn(move || {
                let mut late = Vec::new();
                for r in 0..rounds {
                    let p = anchor.parent().unwrap();
                    let kids: Vec<Tenant> = (0..10).map(|i| p.child(&format!("k{i}"))).collect();
                    // Every other round the handle goes before the children do.
                    if r % 2 == 0 {
                        drop(p);
                    }
                    for (i, c) in kids.into_iter().enumerate() {
                        assert!(charge(c.objcg_id(), 64, StatIdx::slab(0)));
                        if (i + t) % 7 == 0 {
                            late.push(c.objcg_id());
                        } else {
                            // SAFETY: the 64 bytes charged just above, once.
                            unsafe { hooks::uncharge(c.objcg_id(), 64, StatIdx::slab(0)) };
                        }
                    }
                    for id in late.drain(..) {
                        // SAFETY: charged above to a child dropped since, once.
                        unsafe { hooks::uncharge(id, 64, StatIdx::slab(0)) };
                    }
                }
            });
        }
    });
    let p = anchors[0].parent().unwrap();
    drain_all();
    crate::tenant::drain_all_stocks();
    assert_eq!(p.objcg_list().len(), 1, "only its own objcg points here");
    drop(p);
    let alive = || weak.upgrade().is_some_and(|n| n.is_alive());
    let mut anchors = anchors;
    let last = anchors.pop().unwrap();
    drop(anchors);
    assert!(alive(), "the parent died with a child alive");
    drop(last);
    assert!(!alive(), "the parent outlived its last child");
    assert_freed_after_sweeps(&weak);
}

/// A thread's own zombie list stops at `objcg::OWN_ZOMBIES` (a thread that never sweeps,
/// freeing only dead tenants' objects, would otherwise pin ids and table entries without
/// bound); the rest go to the global list, which any thread's sweep frees.
#[test]
fn own_zombie_lists_are_capped() {
    use std::sync::atomic::Ordering;

    let _serial = serial();
    crate::tenant::drain_all_stocks();
    let parent = Tenant::new("zombie-cap");
    // Past the cap (a shorter one under Miri).
    let n = if cfg!(miri) { 10 } else { 100 };
    let ids: Vec<hooks::ObjCgId> = (0..n)
        .map(|i| {
            let c = parent.child(&format!("z{i}"));
            assert!(charge(c.objcg_id(), 64, StatIdx::slab(0)));
            c.objcg_id()
        })
        .collect();
    drain_all();
    std::thread::spawn(move || {
        for id in ids {
            // SAFETY: the 64 bytes charged to this dead child above, once.
            unsafe { hooks::uncharge(id, 64, StatIdx::slab(0)) };
        }
        // The slots it made hold the last refs until they go back.
        drain_all();
        let own = STOCK.with(|s| s.zombies.load(Ordering::Relaxed) >> 32);
        assert_eq!(own, u64::from(objcg::OWN_ZOMBIES));
        assert_eq!(objcg::zombie_count(), n, "the rest on the global list");
    })
    .join()
    .unwrap();
    crate::tenant::drain_all_stocks();
    assert_eq!(objcg::zombie_count(), 0);
    assert_eq!(parent.objcg_list().len(), 1);
}

/// After a drain and a full zombie sweep nothing references the node behind `weak`: every
/// reference the kin entries and the objcgs took came back.
fn assert_freed_after_sweeps(weak: &std::sync::Weak<crate::node::Node>) {
    crate::tenant::drain_all_stocks();
    assert!(
        weak.upgrade().is_none(),
        "the parent's node is still referenced ({} strong)",
        weak.strong_count()
    );
}

/// A refill's batch stays within `max` and `high` (pre-charged bytes start no pressure), a
/// quarter of one where a whole one does not fit, exactly what is asked where neither does;
/// a tenant whose own objects put it above `high` gets quarter refills: without them it
/// would charge every object on the shared counters. Lowering `high` below the usage gives
/// the pre-charged bytes back.
#[test]
fn refill_batches_respect_max_and_high() {
    use core::sync::atomic::Ordering::Relaxed;
    let _serial = serial();
    let stocked = |id| STOCK.with(|s| s.find(id).map_or(0, |i| s.bytes[i].load(Relaxed)));
    let k = StatIdx::slab(3);
    let (b, q) = (CHARGE_BATCH as usize, CHARGE_BATCH / 4);

    // Below high with less than a quarter refill of room: exactly what is asked.
    let t = Tenant::new("batch-high");
    let id = t.objcg_id();
    t.set_high(CHARGE_BATCH / 8);
    assert!(charge(id, 64, k));
    assert_eq!((t.current(), stocked(id)), (64, 0));
    assert!(!t.under_pressure());
    assert_eq!(t.events().high, 0);
    // Its own objects take it above high: an event, then quarter refills.
    assert!(charge(id, b / 8, k));
    assert!(t.under_pressure());
    let events = t.events().high;
    assert!(events >= 1);
    assert!(charge(id, 64, k));
    assert_eq!(
        stocked(id),
        q - 64,
        "above high, a refill takes a quarter batch"
    );
    assert!(
        t.events().high > events,
        "a charge above high counts an event"
    );
    // SAFETY: gives back what this test charged to the id above.
    unsafe { hooks::uncharge(id, 64 + b / 8 + 64, k) };
    drain_all();
    assert_eq!(t.current_exact(), 0);

    // Room for a quarter refill below high, not for a whole one.
    let h = Tenant::new("batch-quarter");
    let id = h.objcg_id();
    h.set_high(3 * q / 2);
    assert!(charge(id, 64, k));
    assert_eq!((h.current(), stocked(id)), (q, q - 64));
    assert!(!h.under_pressure());
    // Lowered below the usage, high takes the pre-charged bytes back: no pressure from them.
    h.set_high(q / 2);
    assert_eq!(
        h.current(),
        64,
        "set_high below the usage drains the stocks"
    );
    assert!(!h.under_pressure());
    // SAFETY: as above.
    unsafe { hooks::uncharge(id, 64, k) };
    drain_all();
    assert_eq!(h.current_exact(), 0);

    // A max of half a refill: a quarter refill; at max, refused.
    let m = Tenant::new("batch-max");
    let id = m.objcg_id();
    m.set_max(CHARGE_BATCH / 2);
    assert!(charge(id, 64, k));
    assert_eq!((m.current(), stocked(id)), (q, q - 64));
    // Up to max (the refusal of the first try drains the quarter back), then refused.
    assert!(charge(id, b / 2 - 64, k));
    assert!(!charge(id, 64, k));
    assert!(m.events().max >= 1);
    // SAFETY: as above.
    unsafe { hooks::uncharge(id, b / 2, k) };
    drain_all();
    assert_eq!(m.current_exact(), 0);
}

/// A thread that exits while a drainer has set its stock's `steal` and then withdraws (the
/// remote barrier failed: no membarrier) gives its slot back itself: the exit saw `steal`
/// and left the take to the drainer, which took nothing.
#[test]
fn a_thread_exiting_under_a_withdrawn_steal_gives_its_slot_back() {
    use crate::stock::Stock;
    use std::sync::mpsc;
    let _serial = serial();
    hooks::set_idle_decay(false);
    let t = Tenant::new("exit-withdrawn-steal");
    let id = t.objcg_id();
    /// The exiting thread's stock, sent to the test's thread (with its provenance).
    struct StockAt(*const Stock);
    // SAFETY: dereferenced only while the stock lives (below).
    unsafe impl Send for StockAt {}
    let (stock_tx, stock_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        // A slot for t in this thread's stock, its batch pre-charged.
        assert!(charge(id, 100, StatIdx::slab(0)));
        // SAFETY: gives back the 100 bytes charged just above.
        unsafe { hooks::uncharge(id, 100, StatIdx::slab(0)) };
        stock_tx
            .send(StockAt(STOCK.with(|s| s as *const Stock)))
            .unwrap();
        go_rx.recv().unwrap();
    });
    // SAFETY: the thread waits on go_rx; once told to go it exits, and its exit waits for
    // the registry lock held below before its stock goes away.
    let s = unsafe { &*stock_rx.recv().unwrap().0 };
    {
        let _g = crate::drain::registry_lock();
        // A drainer's first half, then its withdrawal, with the exit in between.
        s.request_steal();
        go_tx.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        s.withdraw_steal();
    }
    h.join().unwrap();
    drain_all();
    hooks::set_idle_decay(true);
    assert_eq!(
        t.current_exact(),
        0,
        "the exited thread's slot stayed charged"
    );
}

/// An uncharge of 0 bytes of a dead tenant's objcg (`hooks::uncharge` allows any `n`) must
/// not leave a forwarding entry behind: an entry that owes no refs does not keep the dead
/// objcg's id from being recycled, and once a new tenant gets that id, the frees of its
/// objects on this thread go through the stale entry into the old parent's slot: the new
/// tenant is never uncharged.
#[test]
fn a_zero_byte_free_of_a_dead_objcg_leaves_no_forwarding_entry() {
    let _serial = serial();
    let k = StatIdx::slab(1);
    let parent = Tenant::new("zero-fwd-parent");
    // A slot for the parent on this thread, which the dead child's frees forward to.
    assert!(charge(parent.objcg_id(), 8, k));
    let child = parent.child("zero-fwd-child");
    let cid = child.objcg_id();
    assert!(charge(cid, 64, k));
    drop(child);
    // SAFETY: 0 bytes of `cid` are outstanding (64 are).
    unsafe { hooks::uncharge(cid, 0, k) };
    // The child's object is freed on a thread that then exits: the objcg's last ref goes.
    std::thread::spawn(move || {
        // SAFETY: the 64 bytes charged to `cid` above, given back once.
        unsafe { hooks::uncharge(cid, 64, k) }
    })
    .join()
    .unwrap();
    crate::tenant::free_zombies();
    assert!(!objcg::is_live(cid), "the dead objcg is freed");
    let stale = STOCK.with(|s| {
        assert!(s.enter());
        let stale = s.fwd_slot(cid).is_some();
        s.leave();
        stale
    });
    // What the stale entry does once the id is recycled: find a tenant that got it.
    let mut made = Vec::new();
    let reused = (0..20_000).find_map(|_| {
        let t = Tenant::new("zero-fwd-reuse");
        if t.objcg_id() == cid {
            return Some(t);
        }
        made.push(t);
        None
    });
    if let Some(x) = &reused {
        assert!(charge(x.objcg_id(), 64, k));
        // Move the uncharge hint to the parent's slot, then free the new tenant's object.
        // SAFETY: the 8 bytes charged to the parent above.
        unsafe { hooks::uncharge(parent.objcg_id(), 8, k) };
        // SAFETY: the 64 bytes charged to the new tenant just above.
        unsafe { hooks::uncharge(x.objcg_id(), 64, k) };
        assert_eq!(
            (x.current_exact(), parent.current_exact()),
            (0, 0),
            "a free of the recycled id's object went through the stale entry (stale entry: {stale})"
        );
    }
    assert!(!stale, "a forwarding entry names the freed objcg {cid}");
    drop(made);
}
