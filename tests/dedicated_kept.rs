//! An accounted dedicated cache's kept slots (`front.rs`, the object stock's bin in each
//! front): a free whose owner is the thread's object-stock tag keeps the slot charged, and
//! the next allocation in that tenant takes it back without charging. What must hold: the
//! same-tenant pair really goes through the kept bin; every drain (this thread's, another
//! thread's, a refused charge's) uncharges kept slots, so `current_exact()` is exact and a
//! limit is never refused for slots sitting in a front; another tenant never gets a kept
//! slot; a new request's tenant takes the previous request's kept slots with their charge;
//! and the slots go back, uncharged, when the thread exits, the cache is dropped, or the
//! front index passes to another cache.
//!
//! The tests run one at a time (`ONE_AT_A_TIME`): a drain takes every armed thread's kept
//! slots whatever their tenant, so another test's `current_exact()` would empty the kept bins
//! these tests count.

use std::alloc::Layout;
use std::sync::{Arc, Barrier, Mutex, MutexGuard};

use slabcg::{Cache, CacheBox, SlabAlloc, Tenant, TypedCache};

#[path = "common/typed_pair.rs"]
mod typed_pair;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Holds the file's lock for a test (a failed test poisons it; the others still run).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locked allocations before a thread's front opens (`front::WARM_ALLOCS`), plus one.
const WARM: usize = 9;

fn cache(name: &str, size: usize) -> Cache {
    Cache::builder(name, Layout::from_size_align(size, 8).unwrap())
        .account(true)
        .build()
}

fn nn(a: usize) -> std::ptr::NonNull<u8> {
    std::ptr::NonNull::new(a as *mut u8).unwrap()
}

/// Allocates `n` objects from `c` into `out` (whose capacity the caller reserved outside
/// the tenant, so that only the cache's objects are charged to it).
fn alloc_n(c: &Cache, n: usize, out: &mut Vec<usize>) {
    for _ in 0..n {
        let p = c.alloc().expect("under the limit");
        // SAFETY: a fresh object of c's size (at least 8 bytes).
        unsafe { p.as_ptr().cast::<u64>().write(0x5eed) };
        out.push(p.as_ptr() as usize);
    }
}

fn free_all(c: &Cache, v: &mut Vec<usize>) {
    for a in v.drain(..) {
        // SAFETY: live objects of c, each freed once.
        unsafe { c.free(nn(a)) };
    }
}

/// The end of a test: nothing charged to `t`, no live object in `c`, every allocator
/// invariant holding.
fn assert_all_freed(t: &Tenant, c: &Cache) {
    assert_eq!(t.current_exact(), 0);
    assert_eq!(c.live_objects(), 0);
    slabcg::allocator::testing::check_invariants();
}

/// Opens the calling thread's front of `c` in the current tenant and leaves `n` slots kept.
fn fill_kept(c: &Cache, n: usize, scratch: &mut Vec<usize>) {
    alloc_n(c, WARM, scratch);
    free_all(c, scratch);
    alloc_n(c, n, scratch);
    free_all(c, scratch);
}

#[test]
fn same_tenant_pairs_reuse_kept_slots_and_drains_are_exact() {
    let _one = one_at_a_time();
    let c = cache("kept-pairs", 256);
    let size = c.info().object_size as u64;
    let t = Tenant::new("kept-pairs");
    let mut v = Vec::with_capacity(512);
    {
        let _g = t.enter();
        fill_kept(&c, 100, &mut v);
        assert!(
            c.kept_in_my_front() >= 100,
            "frees under the tag keep their slots"
        );
        // Kept slots stay charged until a drain (they are pre-charged, as a byte stock's
        // bytes are), and the pair takes them back without a new charge.
        let before = t.current();
        assert!(before >= 100 * size);
        let kept = c.kept_in_my_front();
        for _ in 0..10_000 {
            let p = c.alloc().unwrap();
            // SAFETY: allocated just above, freed once.
            unsafe { c.free(p) };
        }
        assert_eq!(
            c.kept_in_my_front(),
            kept,
            "the pair is a kept pop and push"
        );
        assert_eq!(t.current(), before);
        alloc_n(&c, 40, &mut v);
        assert_eq!(c.kept_in_my_front(), kept - 40);
        assert_eq!(c.live_objects(), 40);
    }
    // The drain uncharges the kept slots: only the 40 live objects stay charged.
    assert_eq!(t.current_exact(), 40 * size);
    {
        let _g = t.enter();
        // After the drain the kept bin is settled on the next slow path: allocations charge
        // again, and stay exact.
        alloc_n(&c, 30, &mut v);
        assert_eq!(t.current_exact(), 70 * size);
        free_all(&c, &mut v);
    }
    assert_all_freed(&t, &c);
}

/// A `TypedCache` box's pair in a tenant goes through the kept bin: the dropped box's slot
/// waits there still charged and the next allocation takes it back. Were the front's tag
/// compare to miss (the fast paths of `alloc` and of the box's drop dispatch on it, with the
/// accounted bit), the slot would be uncharged into the plain bin.
#[test]
fn a_typed_boxs_pair_goes_through_the_kept_bin() {
    let _one = one_at_a_time();
    let acct: TypedCache<[u64; 6]> = TypedCache::new("typed-front-acct", true);
    let t = Tenant::new("typed-front");
    let _in = t.enter();
    typed_pair::pair_goes_through(
        &acct,
        2 * WARM,
        Cache::kept_in_my_front,
        "the kept bin, still charged",
    );
}

#[test]
fn another_threads_drain_and_a_refused_charge_uncharge_kept_slots() {
    let _one = one_at_a_time();
    let c = Arc::new(cache("kept-remote", 512));
    let size = c.info().object_size as u64;
    let t = Tenant::new("kept-remote");
    // Room for 200 objects; a thread keeps 150, then another allocates 150 more.
    t.set_max(200 * size);
    let parked = Arc::new(Barrier::new(2));
    let resume = Arc::new(Barrier::new(2));
    let holder = {
        let (c, t, parked, resume) = (c.clone(), t.clone(), parked.clone(), resume.clone());
        std::thread::spawn(move || {
            let mut v = Vec::with_capacity(256);
            {
                let _g = t.enter();
                fill_kept(&c, 150, &mut v);
                assert!(c.kept_in_my_front() >= 150);
            }
            parked.wait();
            resume.wait();
            // The drains took the charge of this thread's kept slots: allocating again here
            // settles them and charges afresh, exactly.
            let _g = t.enter();
            alloc_n(&c, 20, &mut v);
            let n = c.kept_in_my_front();
            free_all(&c, &mut v);
            n
        })
    };
    parked.wait();
    // Another thread's drain: nothing is live.
    assert_eq!(t.current_exact(), 0);
    let mut v = Vec::with_capacity(256);
    {
        let _g = t.enter();
        // 150 objects fit only if the kept slots' charge is gone (a refusal drains them too;
        // here the drain above already did).
        alloc_n(&c, 150, &mut v);
    }
    assert_eq!(t.current_exact(), 150 * size);
    resume.wait();
    let kept_after = holder.join().unwrap();
    assert!(kept_after <= 150);
    assert_eq!(t.current_exact(), 150 * size);
    free_all(&c, &mut v);
    assert_eq!(t.current_exact(), 0);

    // A refused charge drains them: a thread keeps 150, parks; this thread needs 150.
    let parked = Arc::new(Barrier::new(2));
    let resume = Arc::new(Barrier::new(2));
    let holder = {
        let (c, t, parked, resume) = (c.clone(), t.clone(), parked.clone(), resume.clone());
        std::thread::spawn(move || {
            let mut v = Vec::with_capacity(256);
            {
                let _g = t.enter();
                fill_kept(&c, 150, &mut v);
                assert!(c.kept_in_my_front() >= 150);
            }
            parked.wait();
            resume.wait();
        })
    };
    parked.wait();
    assert!(
        t.current() >= 150 * size,
        "the kept slots are still charged"
    );
    {
        let _g = t.enter();
        alloc_n(&c, 150, &mut v);
    }
    assert_eq!(t.current_exact(), 150 * size);
    assert_eq!(t.events().max, 0, "no charge was refused for kept slots");
    resume.wait();
    holder.join().unwrap();
    free_all(&c, &mut v);
    assert_eq!(t.current_exact(), 0);
    assert_eq!(c.live_objects(), 0);
}

#[test]
fn another_tenant_never_gets_a_kept_slot() {
    let _one = one_at_a_time();
    let c = cache("kept-two", 128);
    let size = c.info().object_size as u64;
    let (a, b) = (Tenant::new("kept-a"), Tenant::new("kept-b"));
    let mut va = Vec::with_capacity(512);
    let mut vb = Vec::with_capacity(512);
    {
        let _g = a.enter();
        fill_kept(&c, 64, &mut va);
        assert!(c.kept_in_my_front() >= 64);
    }
    // The kept slots' addresses, as the next allocations in `a` hand them out (the set is
    // built outside the scope: only the cache's objects are charged to a).
    {
        let _g = a.enter();
        let n = c.kept_in_my_front();
        alloc_n(&c, n, &mut va);
    }
    let kept: std::collections::HashSet<usize> = va.iter().copied().collect();
    {
        let _g = a.enter();
        free_all(&c, &mut va);
    }
    {
        // Fewer allocations than a retag needs (`RETAG_AFTER`): b charges its own slots.
        let _g = b.enter();
        alloc_n(&c, 30, &mut vb);
        assert!(
            vb.iter().all(|p| !kept.contains(p)),
            "b got one of a's kept slots"
        );
    }
    assert_eq!(b.current_exact(), 30 * size);
    assert_eq!(a.current_exact(), 0);
    {
        // Past a retag b's frees are kept for b; a's slots were given back uncharged.
        let _g = b.enter();
        alloc_n(&c, 200, &mut vb);
        free_all(&c, &mut vb);
        alloc_n(&c, 10, &mut vb);
    }
    assert_eq!(b.current_exact(), 10 * size);
    assert_eq!(a.current_exact(), 0);
    free_all(&c, &mut vb);
    assert_eq!(b.current_exact(), 0);
    slabcg::allocator::testing::check_invariants();
}

#[test]
fn a_new_requests_tenant_takes_the_last_ones_kept_slots() {
    let _one = one_at_a_time();
    let c = cache("kept-requests", 192);
    let size = c.info().object_size as u64;
    let svc = Tenant::new("kept-svc");
    let mut v = Vec::with_capacity(512);
    let mut left = Vec::with_capacity(512);
    for r in 0..50 {
        let req = svc.child(&format!("req-{r}"));
        {
            let _g = req.enter();
            alloc_n(&c, if r == 0 { 100 + WARM } else { 100 }, &mut v);
            // Every request leaves one object behind (freed later, by the service).
            left.push(v.pop().unwrap());
            free_all(&c, &mut v);
        }
        // A drain gives the kept slots back (untagged): only every other request checks, so
        // that the others start with the previous request's slots to take over.
        if r % 2 == 1 {
            assert_eq!(req.current_exact(), size, "request {r}");
            drop(req);
            assert_eq!(svc.current_exact(), (r + 1) as u64 * size, "request {r}");
        }
    }
    free_all(&c, &mut left);
    assert_all_freed(&svc, &c);
}

#[test]
fn kept_slots_go_back_at_thread_exit_cache_drop_and_index_reuse() {
    let _one = one_at_a_time();
    let t = Tenant::new("kept-exit");
    // Thread exit.
    let c = Arc::new(cache("kept-exit", 320));
    {
        let (c, t) = (c.clone(), t.clone());
        std::thread::spawn(move || {
            let mut v = Vec::with_capacity(256);
            let _g = t.enter();
            fill_kept(&c, 120, &mut v);
            assert!(c.kept_in_my_front() >= 120);
        })
        .join()
        .unwrap();
    }
    assert_eq!(c.live_objects(), 0);
    assert_eq!(c.slots_in_fronts(), 0, "the exited thread's front is empty");
    assert_eq!(t.current_exact(), 0);

    // The cache dropped on the thread that keeps its slots: they go back before the drain.
    let mut v = Vec::with_capacity(256);
    let c2 = cache("kept-drop", 320);
    {
        let _g = t.enter();
        fill_kept(&c2, 120, &mut v);
        assert!(c2.kept_in_my_front() >= 120);
    }
    drop(c2);
    // The same name and layout revive the core, at the same index: had the drop left the
    // kept slots in this thread's front, they would be found there again.
    let c2 = cache("kept-drop", 320);
    assert_eq!(
        c2.kept_in_my_front(),
        0,
        "the drop gave the kept slots back"
    );
    assert_eq!(c2.slots_in_my_front(), 0);
    assert_eq!(t.current_exact(), 0);
    drop(c2);

    // The index passes to another cache while a thread keeps the old one's slots: the
    // thread's next use of the index gives them back, uncharged.
    let old = Arc::new(cache("kept-old", 320));
    let idx = old.front_index().expect("a front");
    let parked = Arc::new(Barrier::new(2));
    let resume = Arc::new(Barrier::new(2));
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<Cache>();
    let h = {
        let (old, t, parked, resume) = (old.clone(), t.clone(), parked.clone(), resume.clone());
        std::thread::spawn(move || {
            let mut v = Vec::with_capacity(256);
            {
                let _g = t.enter();
                fill_kept(&old, 120, &mut v);
                assert!(old.kept_in_my_front() >= 120);
            }
            drop(old);
            parked.wait();
            resume.wait();
            let new: Cache = hold_rx.recv().unwrap();
            let _g = t.enter();
            // The first use of the index retags the front: the old slots go back.
            fill_kept(&new, 10, &mut v);
            new
        })
    };
    parked.wait();
    // Only the holder thread's handle was left: dropping it released the index. Build
    // caches until one gets it (each new one prefers an index never used yet).
    drop(old);
    let mut others = Vec::new();
    let new = loop {
        let n = cache("kept-new", 320);
        match n.front_index() {
            Some(i) if i == idx => break n,
            Some(_) => others.push(n),
            None => panic!("no cache got index {idx}"),
        }
    };
    hold_tx.send(new).unwrap();
    resume.wait();
    let new = h.join().unwrap();
    assert_eq!(new.live_objects(), 0);
    assert_eq!(t.current_exact(), 0);
    drop(others);
    slabcg::allocator::testing::check_invariants();
}

/// `stats()` counts a kept slot as neither a live object nor a charged one (its bytes are
/// still in the tenant's `current`, as a byte stock's are), while it waits, after a drain
/// uncharged it, and after the thread took it back.
#[test]
fn kept_slots_are_not_charged_objects_in_stats() {
    let _one = one_at_a_time();
    let c = cache("kept-stats", 320);
    let size = c.info().object_size;
    let t = Tenant::new("kept-stats");
    let mut v = Vec::with_capacity(512);
    let charged = || slabcg::stats().allocated_charged;
    // Live objects of the root (allocated outside every scope, not charged), so that the
    // statistics' clamp of charged objects to live ones hides no miscount of kept slots.
    let mut roots = Vec::with_capacity(64);
    alloc_n(&c, 60, &mut roots);
    let before = charged();
    {
        let _g = t.enter();
        fill_kept(&c, 100, &mut v);
        assert!(c.kept_in_my_front() >= 100);
        alloc_n(&c, 40, &mut v);
    }
    assert!(c.kept_in_my_front() >= 60, "the 40 came from the kept bin");
    assert_eq!(charged() - before, 40 * size);
    {
        let _g = t.enter();
        free_all(&c, &mut v);
    }
    assert_eq!(charged(), before);
    assert_eq!(c.live_objects(), roots.len());
    // A drain uncharges the kept slots in place; the thread's next slow path takes them back.
    assert_eq!(t.current_exact(), 0);
    assert_eq!(charged(), before);
    {
        let _g = t.enter();
        alloc_n(&c, 10, &mut v);
    }
    assert_eq!(charged() - before, 10 * size);
    assert_eq!(t.current_exact(), 10 * size as u64);
    {
        let _g = t.enter();
        free_all(&c, &mut v);
    }
    assert_eq!(charged(), before);
    free_all(&c, &mut roots);
    slabcg::allocator::testing::check_invariants();
}

/// A bulk allocation takes the kept slots first without charging, and a bulk free keeps
/// what the single free would; a bulk refused at the limit after taking kept slots gives
/// them back, all or nothing, with nothing left charged.
#[test]
fn bulk_takes_and_keeps_kept_slots_all_or_nothing() {
    let _one = one_at_a_time();
    let c = cache("kept-bulk", 256);
    let size = c.info().object_size as u64;
    let t = Tenant::new("kept-bulk");
    let mut v = Vec::with_capacity(512);
    let mut out = vec![std::ptr::null_mut(); 64];
    let mut big = vec![std::ptr::null_mut(); 200];
    {
        let _g = t.enter();
        fill_kept(&c, 64, &mut v);
        let kept = c.kept_in_my_front();
        assert!(kept >= 64);
        let charged = t.current();
        assert_eq!(c.alloc_bulk(&mut out), 64);
        assert_eq!(c.kept_in_my_front(), kept - 64, "the bulk took kept slots");
        assert_eq!(t.current(), charged, "taking kept slots charges nothing");
        // SAFETY: every pointer came from this cache's alloc_bulk, each freed once.
        unsafe { c.free_bulk(&out) };
        assert_eq!(c.kept_in_my_front(), kept, "the bulk free kept them again");
    }
    assert_eq!(t.current_exact(), 0);
    t.set_max(100 * size);
    {
        let _g = t.enter();
        fill_kept(&c, 64, &mut v);
        assert!(c.kept_in_my_front() >= 64);
        assert_eq!(c.alloc_bulk(&mut big), 0, "200 objects do not fit in 100");
        assert!(big.iter().all(|p| p.is_null()), "nothing handed out");
    }
    assert!(t.events().max >= 1);
    assert_all_freed(&t, &c);
}

/// Null entries in a bulk free are skipped, also in the middle of a run of slots being kept
/// (the kept bin has room): the others are kept, and nothing stays charged after the drain.
#[test]
fn a_bulk_free_with_nulls_keeps_the_rest() {
    let _one = one_at_a_time();
    let c = cache("kept-bulk-nulls", 256);
    let t = Tenant::new("kept-bulk-nulls");
    let mut v = Vec::with_capacity(64);
    let mut out = vec![std::ptr::null_mut(); 16];
    {
        let _g = t.enter();
        fill_kept(&c, 16, &mut v);
        let kept = c.kept_in_my_front();
        assert_eq!(c.alloc_bulk(&mut out), 16);
        // Nulls at the start, in the middle and at the end, between kept slots.
        let mut with_nulls = vec![std::ptr::null_mut()];
        for (i, &p) in out.iter().enumerate() {
            with_nulls.push(p);
            if i % 5 == 2 {
                with_nulls.push(std::ptr::null_mut());
            }
        }
        with_nulls.push(std::ptr::null_mut());
        // SAFETY: every non-null pointer came from this cache's alloc_bulk, each freed once.
        unsafe { c.free_bulk(&with_nulls) };
        assert_eq!(c.kept_in_my_front(), kept, "every object kept again");
    }
    assert_all_freed(&t, &c);
}

/// A request's tenant that finds the kept slots of a request that ended takes them with
/// their charge in place (`transfer_on_miss`, as a size class's first allocation does),
/// instead of giving them back and charging afresh.
#[test]
fn a_new_request_takes_a_dead_requests_kept_slots_in_place() {
    let _one = one_at_a_time();
    let c = cache("kept-transfer", 192);
    let size = c.info().object_size as u64;
    let svc = Tenant::new("kept-transfer");
    let mut v = Vec::with_capacity(256);
    let first = svc.child("req-0");
    {
        let _g = first.enter();
        fill_kept(&c, 40, &mut v);
    }
    let kept = c.kept_in_my_front();
    assert!(kept >= 40);
    drop(first);
    let second = svc.child("req-1");
    {
        let _g = second.enter();
        alloc_n(&c, 1, &mut v);
        assert_eq!(
            c.kept_in_my_front(),
            kept - 1,
            "the new request took one of the dead one's kept slots, the rest in place"
        );
    }
    assert_eq!(second.current_exact(), size);
    {
        let _g = second.enter();
        free_all(&c, &mut v);
    }
    drop(second);
    assert_all_freed(&svc, &c);
}

/// A bulk free on a thread whose kept slots a drain uncharged in place takes its object stock
/// back from the drainer (as a single free that uncharges does), so the slots do not wait in
/// the kept bin for the thread's next slow path.
#[test]
fn a_bulk_free_after_a_drain_takes_the_stock_back() {
    let _one = one_at_a_time();
    let c = cache("kept-bulk-drained", 256);
    let size = c.info().object_size as u64;
    let t = Tenant::new("kept-bulk-drained");
    let mut v = Vec::with_capacity(256);
    let mut out = vec![std::ptr::null_mut(); 16];
    {
        let _g = t.enter();
        fill_kept(&c, 48, &mut v);
        assert_eq!(c.alloc_bulk(&mut out), 16);
    }
    assert!(c.kept_in_my_front() > 0);
    // Another thread's drain uncharges the kept slots where they lie.
    let drainer = t.clone();
    std::thread::spawn(move || assert_eq!(drainer.current_exact(), 16 * size))
        .join()
        .unwrap();
    assert!(
        c.kept_in_my_front() > 0,
        "a drain leaves the slots in place"
    );
    {
        let _g = t.enter();
        // SAFETY: every pointer came from this cache's alloc_bulk, each freed once.
        unsafe { c.free_bulk(&out) };
    }
    assert_eq!(c.kept_in_my_front(), 0, "the bulk free took the stock back");
    assert_all_freed(&t, &c);
}

#[test]
fn typed_boxes_keep_uncharge_overflow_and_free_remotely() {
    // A `CacheBox`'s drop (`Cache::free_owned`): one push into the front's kept bin (owner
    // is the tag) or its uncharged bin (an unaccounted cache), one out-of-line call for
    // everything else. Each branch here, with the accounting exact after it.
    let _one = one_at_a_time();
    type Obj = [u64; 16];
    let c: TypedCache<Obj> = TypedCache::new("kept-typed", true);
    let size = c.cache().info().object_size as u64;
    let (a, b) = (Tenant::new("kept-typed-a"), Tenant::new("kept-typed-b"));
    let mut boxes: Vec<CacheBox<'_, Obj>> = Vec::with_capacity(4096);
    fn fill<'c>(c: &'c TypedCache<Obj>, v: &mut Vec<CacheBox<'c, Obj>>, n: usize) {
        for i in 0..n {
            v.push(c.alloc([i as u64; 16]).expect("under the limit"));
        }
    }
    {
        let _g = a.enter();
        fill(&c, &mut boxes, WARM);
        boxes.clear();
        fill(&c, &mut boxes, 100);
        boxes.clear();
        let kept = c.cache().kept_in_my_front();
        assert!(kept >= 100, "boxes dropped under the tag keep their slots");
        let before = a.current();
        for i in 0..10_000u64 {
            let x = c.alloc([i; 16]).ok().unwrap();
            assert_eq!(x[15], i);
        }
        assert_eq!(
            c.cache().kept_in_my_front(),
            kept,
            "a box pair is a kept pop and push"
        );
        assert_eq!(a.current(), before);
        fill(&c, &mut boxes, 50);
    }
    assert_eq!(a.current_exact(), 50 * size);
    let mut vb = Vec::with_capacity(512);
    {
        // Past a retag for b, a's boxes are not b's to keep: they are uncharged from a.
        let _g = b.enter();
        fill(&c, &mut vb, 300);
        vb.clear();
        fill(&c, &mut vb, 10);
        let kept = c.cache().kept_in_my_front();
        boxes.clear();
        assert_eq!(
            c.cache().kept_in_my_front(),
            kept,
            "b's front kept a's boxes"
        );
    }
    assert_eq!(a.current_exact(), 0);
    assert_eq!(b.current_exact(), 10 * size);
    vb.clear();
    {
        // More boxes than the kept bin holds: the rest are uncharged into the front's bin,
        // which overflows back to the cache.
        let _g = a.enter();
        fill(&c, &mut boxes, 3000);
        // (`current`, not `current_exact`: a drain here would stop the kept bin until the
        // stock is taken back.)
        assert!(a.current() >= 3000 * size);
        boxes.clear();
        let kept = c.cache().kept_in_my_front();
        assert!(
            kept > 0 && kept <= 256,
            "the kept bin holds at most its capacity: {kept}"
        );
        fill(&c, &mut boxes, 20);
    }
    assert_eq!(a.current_exact(), 20 * size);
    // Boxes allocated in no tenant (owner 0) are nobody's to keep or uncharge.
    let mut unowned = Vec::new();
    fill(&c, &mut unowned, 100);
    assert_eq!(c.cache().live_objects(), 120);
    drop(unowned);
    assert_eq!(c.cache().live_objects(), 20);
    assert_eq!(a.current_exact(), 20 * size);
    // Dropped on a thread in no scope, whose front is not this cache's yet.
    std::thread::scope(|s| {
        s.spawn(|| drop(std::mem::take(&mut boxes))).join().unwrap();
    });
    assert_eq!(a.current_exact(), 0);
    assert_eq!(b.current_exact(), 0);
    assert_eq!(c.cache().live_objects(), 0);
    // An unaccounted typed cache: its boxes go to the front's bin, then overflow.
    let u: TypedCache<Obj> = TypedCache::new("kept-typed-plain", false);
    let mut v = Vec::new();
    fill(&u, &mut v, 3000);
    assert!(v.iter().enumerate().all(|(i, x)| x[0] == i as u64));
    assert_eq!(u.cache().live_objects(), 3000);
    drop(v);
    assert_eq!(u.cache().live_objects(), 0);
    // A cache built while every front index is taken has none: its boxes take the locked
    // path on both sides, through the box's out-of-line call.
    let mut fillers = Vec::new();
    let nf = loop {
        let t: TypedCache<Obj> = TypedCache::new(&format!("kept-typed-{}", fillers.len()), false);
        if t.cache().front_index().is_none() {
            break t;
        }
        fillers.push(t);
        assert!(fillers.len() <= 64, "a front index for every cache");
    };
    drop(nf);
    let nf: TypedCache<Obj> = TypedCache::new("kept-typed-no-front", true);
    assert!(nf.cache().front_index().is_none());
    {
        let _g = a.enter();
        let mut v = Vec::new();
        fill(&nf, &mut v, 300);
        assert_eq!(nf.cache().live_objects(), 300);
        drop(v);
    }
    assert_eq!(nf.cache().live_objects(), 0);
    assert_eq!(a.current_exact(), 0);
    drop(fillers);
    slabcg::allocator::testing::check_invariants();
}
