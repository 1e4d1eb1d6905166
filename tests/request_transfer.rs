//! A tenant per request hands the previous request's freed objects to the next one in place
//! (the object stock's transfer, `object_stock::transfer_bins`): the charge moves from the
//! dead request (reparented to its customer) to the new one, below their common ancestor
//! (the customer, or the parent of two customers). Whatever the transfers do, the counts
//! stay exact: each request's tenant counts exactly its live objects after a drain, each
//! customer exactly what its requests left alive, and a limit on the receiving side still
//! refuses.

use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use slabcg::accounting::{hooks, testing};
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// The tests of this file run one at a time: one of them checks that dead objcgs are freed,
/// which a test creating tenants meanwhile could hide by taking a freed id.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sizes that are size classes, so that the charged bytes equal the requested ones.
const SIZES: [usize; 6] = [16, 64, 256, 1024, 4096, 48];

/// One request's working set: `k` objects of each size, each filled with `tag`.
fn working_set(k: usize, tag: u8) -> Vec<Vec<u8>> {
    let mut v = Vec::with_capacity(SIZES.len() * k);
    for _ in 0..k {
        for &s in &SIZES {
            v.push(vec![tag; s]);
        }
    }
    v
}

fn bytes(k: usize) -> u64 {
    (k * SIZES.iter().sum::<usize>()) as u64
}

#[test]
fn requests_in_turn_stay_exact() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-customer");
    let mut left: Vec<Vec<u8>> = Vec::new();
    let mut left_bytes = 0u64;
    for i in 0..2_000usize {
        let req = customer.child("request");
        let k = 1 + i % 7;
        let kept = {
            let _in = req.enter();
            // The vector holding the set is charged too: build it first, measure after.
            let set = working_set(k, i as u8);
            let holder = set.capacity() * std::mem::size_of::<Vec<u8>>();
            if i % 100 == 0 {
                // Mid-request: the tenant counts its live objects exactly, whatever it
                // received from the request before.
                let exact = req.current_exact();
                let want = bytes(k) + holder.next_multiple_of(16) as u64;
                assert!(
                    exact >= bytes(k) && exact <= want + 4096,
                    "request {i}: exact {exact}, live about {want}"
                );
                assert!(req.current() >= exact, "current() covers the exact usage");
            }
            for o in &set {
                assert!(
                    o.iter().all(|&b| b == i as u8),
                    "an object handed over intact"
                );
            }
            // Every tenth request leaves one object alive.
            let kept = (i % 10 == 0).then(|| vec![i as u8; 256]);
            drop(set);
            kept
        };
        if let Some(o) = kept {
            left_bytes += 256;
            left.push(o);
        }
        drop(req);
        if i % 250 == 0 {
            assert_eq!(
                customer.current_exact(),
                left_bytes,
                "after request {i}, the customer carries exactly the objects requests left"
            );
        }
    }
    assert_eq!(customer.current_exact(), left_bytes);
    // Freed on another thread: uncharged from whichever request owns them now.
    std::thread::spawn(move || drop(left)).join().unwrap();
    assert_eq!(customer.current_exact(), 0);
    let s = customer.stat();
    assert_eq!(s.slab, 0, "no slab bytes left in the stats");
}

/// The slots a request receives keep the previous request's owner words until it takes
/// them (`ClassBins::stale`): each one it takes must become its own, so that freeing it
/// uncharges this request, not the one before. Checked where it shows: the request's own
/// exact count while it runs, after it freed half of what it took.
#[test]
fn a_request_owns_exactly_the_objects_it_takes_over() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-take-over");
    // A drainer thread, started outside every tenant: a thread spawned inside the request
    // would charge it for its handle, which the thread frees only as it exits.
    let (meet, stop) = (std::sync::Barrier::new(2), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| loop {
            meet.wait();
            if stop.load(Relaxed) {
                return;
            }
            customer.current_exact();
            meet.wait();
        });
        // Stops the drainer however the rounds end: a failed assertion must fail the test,
        // not leave the scope waiting for a thread parked at the barrier.
        let _stop = StopAt(&meet, &stop);
        take_over_rounds(&customer, &meet);
    });
}

/// On drop, tells the drainer thread to return and lets it through the barrier it waits at
/// (between rounds it always waits at the first of its two).
struct StopAt<'a>(&'a std::sync::Barrier, &'a AtomicBool);

impl Drop for StopAt<'_> {
    fn drop(&mut self) {
        self.1.store(true, Relaxed);
        self.0.wait();
    }
}

/// The request before: frees 64 objects of each size into this thread's object stock, and
/// dies.
fn free_as_the_request_before(customer: &Tenant) {
    let before = customer.child("before");
    let _in = before.enter();
    drop(working_set(64, 1));
}

/// After its first allocation, `req` carries what the request before left (a transfer), not
/// only byte-stock refills: those are whole batches, the objects taken over are not.
fn assert_took_over(req: &Tenant, round: usize) {
    let c = req.current();
    assert!(
        c > 2 * (64 << 10) && !c.is_multiple_of(testing::charge_batch()),
        "round {round}: the request took the objects over ({} B)",
        req.current()
    );
}

/// [`a_request_owns_exactly_the_objects_it_takes_over`]'s rounds; every fourth has the
/// thread waiting at `meet` drain every stock meanwhile.
fn take_over_rounds(customer: &Tenant, meet: &std::sync::Barrier) {
    for round in 0..60usize {
        free_as_the_request_before(customer);
        // Outside the request, so that its count is the objects alone.
        let mut held: Vec<Vec<u8>> = Vec::with_capacity(SIZES.len() * 64);
        let req = customer.child("request");
        {
            let _in = req.enter();
            // The first allocation takes the objects over.
            held.push(vec![round as u8; SIZES[0]]);
            assert_took_over(&req, round);
            if round % 4 == 0 {
                // A drain from another thread while the slots wait below their mark: it
                // uncharges them where they lie, and this thread gives them back at its next
                // slow path.
                meet.wait();
                meet.wait();
            }
            let k = 1 + round % 48;
            for _ in 0..k {
                for &s in &SIZES {
                    held.push(vec![round as u8; s]);
                }
            }
            // Frees the later half: objects taken over, freed by the request that took them.
            held.truncate(held.len() / 2);
            let live: u64 = held.iter().map(|o| o.len() as u64).sum();
            assert_eq!(
                req.current_exact(),
                live,
                "round {round}: the request counts exactly the objects it holds"
            );
        }
        drop(req);
        drop(held);
        assert_eq!(customer.current_exact(), 0, "round {round}: all given back");
    }
}

/// As above, with the objects taken over by a bulk allocation (`slabcg::alloc_bulk`, which
/// pops many slots at once) and given back by a bulk free and by single frees.
#[test]
fn a_bulk_takes_over_objects_as_its_own() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-bulk");
    let l = Layout::from_size_align(64, 8).unwrap();
    for round in 0..60usize {
        free_as_the_request_before(&customer);
        let mut out = vec![std::ptr::null_mut(); 1 + round % 64];
        let req = customer.child("request");
        {
            let _in = req.enter();
            // The request's first allocation takes the objects over (a bulk that misses the
            // object stock charges instead, and the transfer comes after it).
            let first = std::hint::black_box(vec![1u8; 64]);
            assert_took_over(&req, round);
            // Two slots freed above the mark: the bulk pops them and then slots below it.
            drop(std::hint::black_box(vec![2u8; 64]));
            drop(std::hint::black_box(vec![3u8; 64]));
            let n = slabcg::alloc_bulk(l, &mut out);
            assert_eq!(n, out.len(), "round {round}: the bulk is served");
            let half = n / 2;
            // SAFETY: the blocks came from alloc_bulk with l; each is freed once, the first
            // half in bulk, the next one singly.
            unsafe {
                slabcg::free_bulk(l, &out[..half]);
                if half < n {
                    dealloc(out[half], l);
                }
            }
            let live = n.saturating_sub(half + 1) as u64 * 64 + 64;
            assert_eq!(
                req.current_exact(),
                live,
                "round {round}: the request counts exactly the objects it holds"
            );
            // SAFETY: the rest, each freed once.
            unsafe { slabcg::free_bulk(l, &out[(half + 1).min(n)..]) };
            drop(first);
        }
        drop(req);
        assert_eq!(customer.current_exact(), 0, "round {round}: all given back");
    }
}

#[test]
fn a_requests_limit_still_refuses() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-limited");
    // A big request fills this thread's object stock with the customer's subtree's objects.
    {
        let big = customer.child("big");
        let _in = big.enter();
        drop(working_set(16, 1));
    }
    for i in 0..200 {
        let req = customer.child("small");
        // Less than what the previous request freed: a transfer of all of it must be
        // refused, and the objects charged one by one up to the limit.
        req.set_max(8 << 10);
        let _in = req.enter();
        let mut v: Vec<u8> = Vec::new();
        assert!(
            std::hint::black_box(&mut v)
                .try_reserve_exact(64 << 10)
                .is_err(),
            "request {i}: 64 KiB refused under an 8 KiB limit"
        );
        // black_box: an optimised build may elide an allocation nobody reads.
        let small = std::hint::black_box(vec![7u8; 1024]);
        assert!(req.current_exact() <= 8 << 10);
        assert!(req.current_exact() >= 1024);
        drop(small);
    }
    assert_eq!(customer.current_exact(), 0);
}

#[test]
fn transfer_between_siblings_on_many_threads() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-threads");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let customer = customer.clone();
            std::thread::spawn(move || {
                let mut kept = Vec::with_capacity(10);
                for i in 0..500usize {
                    let req = customer.child("request");
                    let _in = req.enter();
                    let set = working_set(1 + (i + t) % 5, t as u8);
                    if i % 50 == 0 {
                        kept.push(vec![0u8; 1024]);
                    }
                    drop(set);
                }
                kept
            })
        })
        .collect();
    let kept: Vec<Vec<Vec<u8>>> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(customer.current_exact(), 4 * 10 * 1024);
    drop(kept);
    assert_eq!(customer.current_exact(), 0);
}

#[test]
fn customers_in_turn_on_one_thread() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let tenants = Tenant::new("transfer-tenants");
    let customers: Vec<Tenant> = (0..3).map(|i| tenants.child(&format!("c{i}"))).collect();
    customers[2].set_max(4 << 10);
    let mut left: Vec<Vec<Vec<u8>>> = (0..3).map(|_| Vec::with_capacity(100)).collect();
    for i in 0..1_500usize {
        let c = i % 3;
        let req = customers[c].child("request");
        let _in = req.enter();
        if c == 2 {
            // The small customer cannot take over what the others freed: refused, charged
            // one by one instead, and its own limit still holds.
            let mut v: Vec<u8> = Vec::new();
            assert!(
                std::hint::black_box(&mut v)
                    .try_reserve_exact(16 << 10)
                    .is_err(),
                "request {i}"
            );
            let o = vec![2u8; 1024];
            assert!(customers[2].current_exact() <= 4 << 10);
            drop(o);
            continue;
        }
        let set = working_set(1 + i % 4, c as u8);
        if i % 30 == c {
            left[c].push(vec![c as u8; 64]);
        }
        drop(set);
    }
    for (c, l) in left.iter().enumerate() {
        assert_eq!(
            customers[c].current_exact(),
            64 * l.len() as u64,
            "customer {c}"
        );
    }
    drop(left);
    for c in &customers {
        assert_eq!(c.current_exact(), 0);
    }
    assert_eq!(tenants.current_exact(), 0);
}

const N: usize = 20;
const SZ: usize = 256;

/// `N` objects of `SZ` bytes allocated and freed in the current scope (no other allocation).
fn churn() {
    let l = Layout::from_size_align(SZ, 8).unwrap();
    let mut ps = [core::ptr::null_mut(); N];
    for p in ps.iter_mut() {
        *p = std::hint::black_box(unsafe { alloc(l) });
        assert!(!p.is_null());
    }
    for &p in ps.iter() {
        unsafe { dealloc(p, l) };
    }
}

/// The transfer happens at all: the next request's objects come from the previous one's
/// freed objects, charged once (no byte-stock batch). Fails if transfer_bins returns false.
#[test]
fn the_next_request_takes_over_without_charging() {
    let _one = one_at_a_time();
    hooks::set_idle_decay(false);
    let customer = Tenant::new("review-happens");
    {
        let r1 = customer.child("r1");
        let _in = r1.enter();
        churn();
    }
    let r2 = customer.child("r2");
    let l = Layout::from_size_align(SZ, 8).unwrap();
    let p = {
        let _in = r2.enter();
        std::hint::black_box(unsafe { alloc(l) })
    };
    // Transferred: r2 counts exactly the N objects (one of them live); without the
    // transfer it would hold a byte-stock batch.
    assert_eq!(
        r2.current(),
        (N * SZ) as u64,
        "r2 took over r1's freed objects"
    );
    // The stats moved with the charge: after a drain r2 counts exactly its live object.
    let s = r2.stat();
    assert_eq!(
        (s.current, s.slab),
        (SZ as u64, SZ as u64),
        "r2's counter and slab stat"
    );
    assert_eq!(
        customer.stat().slab,
        customer.current(),
        "the customer's slab stat"
    );
    unsafe { dealloc(p, l) };
    drop(r2);
    assert_eq!(customer.current_exact(), 0);
}

/// A transfer refused by an ancestor's max must not leave a High event on the nodes below
/// it (counter::try_charge_below records events before the walk succeeded).
#[test]
fn a_refused_transfer_records_no_high_event() {
    let _one = one_at_a_time();
    hooks::set_idle_decay(false);
    let top = Tenant::new("review-events");
    let c0 = top.child("c0");
    let c1 = top.child("c1");
    c1.set_max(2048);
    {
        let r1 = c0.child("r1");
        let _in = r1.enter();
        churn(); // 5 KiB freed, kept in the tagged bins for r1
    }
    let r2 = c1.child("r2");
    r2.set_high(4096);
    {
        let _in = r2.enter();
        // The transfer (5 KiB: above r2's high, refused by c1's max) is tried here.
        let v = vec![1u8; 16];
        drop(v);
    }
    assert_eq!(r2.events().high, 0, "r2 never went above its high");
    assert_eq!(c1.events().high, 0, "nothing in c1 went above its high");
    drop(r2);
    assert_eq!(top.current_exact(), 0);
}

/// Across customers: each customer's counter and slab stat go back to exactly zero, and so
/// does the common ancestor's.
#[test]
fn stats_stay_exact_across_customers() {
    let _one = one_at_a_time();
    hooks::set_idle_decay(false);
    let top = Tenant::new("review-stats");
    let cs: Vec<Tenant> = (0..3).map(|i| top.child(&format!("c{i}"))).collect();
    let mut kept: Vec<Vec<u8>> = Vec::new();
    for i in 0..600usize {
        let c = &cs[i % 3];
        let r = c.child("r");
        let _in = r.enter();
        churn();
        if i % 50 == 0 {
            kept.push(vec![0u8; 64]);
        }
        // Mid-way, without a drain: the other customers are not charged with this
        // request's objects beyond the byte-stock slack.
        if i % 97 == 0 {
            for (j, o) in cs.iter().enumerate() {
                if j != i % 3 {
                    let s = o.stat();
                    assert!(
                        s.slab <= s.current + testing::stat_flush(),
                        "c{j}: slab {} current {}",
                        s.slab,
                        s.current
                    );
                }
            }
        }
    }
    drop(kept);
    slabcg::drain_all_stocks();
    for (j, c) in cs.iter().enumerate() {
        let s = c.stat();
        assert_eq!(s.current, 0, "c{j} current");
        assert_eq!(s.slab, 0, "c{j} slab stat");
    }
    assert_eq!(top.stat().slab, 0);
    assert_eq!(top.current_exact(), 0);
}

/// Refs move with the charge: the dead requests' objcgs are freed once nothing holds them.
#[test]
fn dead_requests_objcgs_are_freed() {
    let _one = one_at_a_time();
    hooks::set_idle_decay(false);
    let customer = Tenant::new("review-refs");
    let mut ids = Vec::new();
    for _ in 0..5 {
        let r = customer.child("r");
        ids.push(r.objcg_id());
        let _in = r.enter();
        churn();
    }
    slabcg::drain_all_stocks();
    for id in ids {
        assert!(
            !testing::objcg_live(id),
            "objcg {id} of a dead request still allocated"
        );
    }
    assert_eq!(customer.current_exact(), 0);
}

/// Transfers while the tag's tenant dies on another thread and drains run.
#[test]
fn transfer_races_death_and_drains() {
    let _one = one_at_a_time();
    hooks::set_idle_decay(false);
    let customer = Tenant::new("review-race");
    let other = Tenant::new("review-race-other");
    let (tx, rx) = std::sync::mpsc::channel::<Tenant>();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropper = std::thread::spawn(move || {
        for t in rx {
            std::thread::yield_now();
            drop(t);
        }
    });
    let s2 = stop.clone();
    let drainer = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            slabcg::drain_all_stocks();
            std::thread::yield_now();
        }
    });
    let mut kept = Vec::new();
    for i in 0..3000usize {
        let r = if i % 2 == 0 {
            customer.child("r")
        } else {
            other.child("r")
        };
        {
            let _in = r.enter();
            churn();
            let v = vec![i as u8; 48];
            drop(_in);
            if i % 100 == 0 {
                kept.push(v);
            }
        }
        tx.send(r).unwrap();
    }
    drop(tx);
    dropper.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drainer.join().unwrap();
    // i % 100 == 0 is even: all kept objects are the customer's.
    let (a, b) = (48 * kept.len() as u64, 0u64);
    assert_eq!(customer.current_exact(), a);
    assert_eq!(other.current_exact(), b);
    drop(kept);
    assert_eq!(customer.current_exact(), 0);
    assert_eq!(other.current_exact(), 0);
    assert_eq!(customer.stat().slab, 0);
    assert_eq!(other.stat().slab, 0);
}

/// The OOM killer's overdraft window is a grant to the work in flight: a transfer of free
/// objects from another customer must not spend it (try_charge_below's try_add allows
/// `max + allowance`).
#[test]
fn a_transfer_does_not_spend_the_overdraft() {
    let _one = one_at_a_time();
    use slabcg::{OomPolicy, StatItem};
    hooks::set_idle_decay(false);
    const K: u64 = 1 << 10;
    let top = Tenant::new("review-overdraft");
    let c0 = top.child("c0");
    let c1 = top.child("c1");
    c1.set_max(64 * K);
    c1.set_overdraft(64 * K);
    c1.set_oom_policy(OomPolicy::Kill);
    let victim = c1.child("victim");
    victim.set_oom_policy(OomPolicy::Kill);
    victim.charge(60 * K, StatItem::Slab).unwrap();
    // A charge of c1's subtree refused by c1: the victim is killed and c1's window opens.
    let w = c1.child("w");
    w.set_oom_policy(OomPolicy::Kill);
    let mut held: Vec<u8> = Vec::new();
    {
        let _in = w.enter();
        std::hint::black_box(&mut held)
            .try_reserve_exact(16 * K as usize)
            .unwrap();
    }
    assert!(victim.is_killed());
    let before = c1.current();
    // Another customer's request frees 40 KiB on this thread, and dies.
    {
        let r1 = c0.child("r1");
        let _in = r1.enter();
        let l = Layout::from_size_align(2048, 8).unwrap();
        let mut ps = [core::ptr::null_mut(); 20];
        for p in ps.iter_mut() {
            *p = std::hint::black_box(unsafe { alloc(l) });
        }
        for &p in ps.iter() {
            unsafe { dealloc(p, l) };
        }
    }
    // c1's next request allocates 16 bytes.
    let r2 = c1.child("r2");
    {
        let _in = r2.enter();
        drop(std::hint::black_box(vec![1u8; 16]));
    }
    assert!(
        c1.current() <= before + 4 * K,
        "c1 took {} bytes of free objects through its overdraft window",
        c1.current() - before
    );
    drop(held);
    victim.uncharge(60 * K, StatItem::Slab);
    drop(r2);
}
