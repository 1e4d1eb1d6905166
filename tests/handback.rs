//! A consumer thread that frees another tenant's objects hands the slots back still charged
//! (`allocator/src/handback.rs`): the producer's next allocations take them without a charge.
//! The tenants stay exact through drains, a refused charge drains what the hand-back
//! holds, a dead tenant's chains are given back at its death (uncharged from its parent),
//! `trim()` empties it, and a drain gives back every chain that was there before it while
//! another thread keeps putting chains.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use slabcg::allocator::testing::{handback_counts, HANDBACK_BYTES_BOUND};
use slabcg::{SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// The hand-back is process-wide: one test at a time, and no idle drain of the stocks
/// behind its back.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    let g = M.lock().unwrap_or_else(|e| e.into_inner());
    slabcg::accounting::hooks::set_idle_decay(false);
    g
}

const SIZE: usize = 64;

/// One batch at a time from the producer to the consumer: a mutex and a condition variable,
/// which allocate nothing (a channel's blocking receive may allocate its waker in the
/// consumer's tenant, and a charging allocation there ends its run of frees of the
/// producer's objects, `object_stock::adopt_on_free`).
struct Handoff {
    slot: Mutex<(Option<Vec<Vec<u8>>>, bool)>,
    cv: Condvar,
}

impl Handoff {
    fn new() -> Arc<Handoff> {
        Arc::new(Handoff {
            slot: Mutex::new((None, false)),
            cv: Condvar::new(),
        })
    }
    fn put(&self, objs: Vec<Vec<u8>>) {
        let mut g = self.slot.lock().unwrap();
        while g.0.is_some() {
            g = self.cv.wait(g).unwrap();
        }
        g.0 = Some(objs);
        self.cv.notify_all();
    }
    /// The next batch, or None once the producer is done and the slot empty.
    fn take(&self) -> Option<Vec<Vec<u8>>> {
        let mut g = self.slot.lock().unwrap();
        loop {
            if let Some(objs) = g.0.take() {
                self.cv.notify_all();
                return Some(objs);
            }
            if g.1 {
                return None;
            }
            g = self.cv.wait(g).unwrap();
        }
    }
    /// Waits until the consumer took the last batch handed over.
    fn wait_taken(&self) {
        let mut g = self.slot.lock().unwrap();
        while g.0.is_some() {
            g = self.cv.wait(g).unwrap();
        }
    }
    fn close(&self) {
        self.slot.lock().unwrap().1 = true;
        self.cv.notify_all();
    }
}

/// A consumer thread in `c`: frees each batch `h` hands it, counting them in `freed`.
fn consumer(c: &Tenant, h: &Arc<Handoff>, freed: Arc<AtomicUsize>) -> JoinHandle<()> {
    let (c, h) = (c.clone(), h.clone());
    std::thread::spawn(move || {
        let _in = c.enter();
        // Opens this thread's bin of the class (a thread's first frees of a class it never
        // allocated go back to the slabs); kept to the end, as a thread that holds its own
        // tenant's objects in its object stock does not adopt another's.
        let warm = black_box(vec![0u8; SIZE]);
        while let Some(objs) = h.take() {
            drop(black_box(objs));
            freed.fetch_add(1, Ordering::Release);
        }
        drop(warm);
    })
}

/// A producer in `p` hands `rounds` batches of `batch` objects of `SIZE` bytes to a consumer
/// in `c`, which frees them; then `tail` more, made after the producer's last other
/// allocation (so chains stay in the hand-back). The producer keeps `keep` objects alive and
/// returns them.
fn pipeline(
    p: &Tenant,
    c: &Tenant,
    rounds: usize,
    batch: usize,
    tail: usize,
    keep: usize,
) -> Vec<Vec<u8>> {
    let h = Handoff::new();
    let consumer = consumer(c, &h, Arc::default());
    let p2 = p.clone();
    let producer = std::thread::spawn(move || {
        let _in = p2.enter();
        for r in 0..rounds {
            let objs: Vec<Vec<u8>> = (0..batch)
                .map(|i| black_box(vec![(r + i) as u8; SIZE]))
                .collect();
            h.put(objs);
        }
        let kept: Vec<Vec<u8>> = (0..keep).map(|i| black_box(vec![i as u8; SIZE])).collect();
        let last: Vec<Vec<u8>> = (0..tail).map(|i| black_box(vec![i as u8; SIZE])).collect();
        h.wait_taken();
        h.put(last);
        h.close();
        kept
    });
    let kept = producer.join().unwrap();
    consumer.join().unwrap();
    kept
}

#[test]
fn a_producer_takes_back_what_its_consumer_freed_and_both_stay_exact() {
    let _one = one_at_a_time();
    let p = Tenant::new("handback-producer");
    let c = Tenant::new("handback-consumer");
    let taken_before = handback_counts().taken;
    let kept = pipeline(&p, &c, 60, 1000, 0, 100);
    let taken = handback_counts().taken;
    assert!(
        taken - taken_before >= 10,
        "the producer took {} chains back from its consumer",
        taken - taken_before
    );
    // Exactly the 100 objects it kept and their vector, whatever the hand-back, the stocks
    // and the bins held (the drain gives all of it back).
    // SAFETY: a live allocation of this allocator.
    let outer = unsafe { SlabAlloc::usable_size(kept.as_ptr().cast()) };
    assert_eq!(p.current_exact(), (100 * SIZE + outer) as u64);
    assert_eq!(c.current_exact(), 0);
    drop(kept);
    assert_eq!(p.current_exact(), 0);
    assert_eq!(handback_counts().chains, 0, "a drain empties the hand-back");
    slabcg::allocator::testing::check_invariants();
}

#[test]
fn a_refused_charge_drains_the_handback_first() {
    let _one = one_at_a_time();
    let p = Tenant::new("handback-limited");
    let c = Tenant::new("handback-limited-consumer");
    let max = 4 << 20;
    p.set_max(max);
    // The last 8,000 objects are freed after the producer stopped: their chains stay.
    drop(pipeline(&p, &c, 20, 1000, 8000, 0));
    assert!(
        handback_counts().chains > 0,
        "chains of p wait in the hand-back"
    );
    // Nothing of p is live: all of its limit is there for a charge once the hand-back, the
    // stocks and the bins are drained.
    p.charge(max - 4096, StatItem::Sock)
        .expect("the charge fits after the drain");
    assert_eq!(handback_counts().chains, 0);
    p.uncharge(max - 4096, StatItem::Sock);
    assert_eq!(p.current_exact(), 0);
}

#[test]
fn a_dead_tenants_chains_are_uncharged_from_its_parent() {
    let _one = one_at_a_time();
    let parent = Tenant::new("handback-parent");
    let c = Tenant::new("handback-orphan-consumer");
    {
        let p = parent.child("producer");
        drop(pipeline(&p, &c, 10, 1000, 8000, 0));
        assert!(
            handback_counts().chains > 0,
            "the child's chains wait in the hand-back while it lives"
        );
    }
    // No drain, sweep or trim in between: its death gave them back.
    assert_eq!(
        handback_counts().chains,
        0,
        "a dead tenant's chains do not wait for a sweep"
    );
    assert_eq!(
        parent.current_exact(),
        0,
        "its parent carried them until they were uncharged"
    );
}

/// Producer tenants that die while a consumer thread frees their objects, over and over:
/// whether a death comes before, during or after the consumer's chains go to the hand-back,
/// none of a dead tenant's waits there (its death gives them back, and a chain put after
/// it is refused), so with every producer dead the table is empty without a drain.
#[test]
fn chains_of_tenants_dying_meanwhile_do_not_wait() {
    let _one = one_at_a_time();
    let parent = Tenant::new("handback-dying-parent");
    let c = Tenant::new("handback-dying-consumer");
    let h = Handoff::new();
    let freed = Arc::new(AtomicUsize::new(0));
    let consumer = consumer(&c, &h, freed.clone());
    let put_before = handback_counts().put;
    for r in 0..60 {
        let k = parent.child("producer");
        let objs: Vec<Vec<u8>> = {
            let _in = k.enter();
            (0..3000)
                .map(|i| black_box(vec![(r + i) as u8; SIZE]))
                .collect()
        };
        h.put(objs);
        // Its last handle goes after the consumer freed its objects (so its chains wait in
        // the hand-back until the death), or while it frees them, or before.
        match r % 3 {
            0 => {
                while freed.load(Ordering::Acquire) <= r {
                    std::thread::yield_now();
                }
            }
            1 => std::thread::yield_now(),
            _ => {}
        }
        drop(k);
    }
    h.wait_taken();
    h.close();
    consumer.join().unwrap();
    assert!(
        handback_counts().put > put_before,
        "the consumer handed chains back"
    );
    assert_eq!(
        handback_counts().chains,
        0,
        "no dead producer's chain waits in the hand-back"
    );
    assert_eq!(parent.current_exact(), 0);
    assert_eq!(c.current_exact(), 0);
}

#[test]
fn trim_empties_the_handback() {
    let _one = one_at_a_time();
    let p = Tenant::new("handback-trim");
    let c = Tenant::new("handback-trim-consumer");
    drop(pipeline(&p, &c, 5, 1000, 8000, 0));
    assert!(handback_counts().chains > 0);
    slabcg::trim();
    assert_eq!(handback_counts().chains, 0);
    assert_eq!(p.current_exact(), 0);
}

/// Pairs of producer and consumer threads in tenants of their own, objects of many classes,
/// while another thread drains every stock and trims over and over: each tenant is exact at
/// the end, and nothing was lost or counted twice on the way (the invariant walks hold).
#[test]
fn pairs_under_concurrent_drains_stay_exact() {
    let _one = one_at_a_time();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let drainer = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            slabcg::drain_all_stocks();
            if n.is_multiple_of(8) {
                slabcg::trim();
            }
            n += 1;
            std::thread::yield_now();
        }
        n
    });
    let tenants: Vec<(Tenant, Tenant)> = (0..3)
        .map(|i| {
            (
                Tenant::new(&format!("handback-pair-p{i}")),
                Tenant::new(&format!("handback-pair-c{i}")),
            )
        })
        .collect();
    let taken_before = handback_counts().taken;
    let workers: Vec<_> = tenants
        .iter()
        .enumerate()
        .map(|(i, (p, c))| {
            let (p, c) = (p.clone(), c.clone());
            std::thread::spawn(move || {
                let h = Handoff::new();
                let h2 = h.clone();
                let consumer = std::thread::spawn(move || {
                    let _in = c.enter();
                    while let Some(objs) = h2.take() {
                        drop(black_box(objs));
                    }
                });
                let _in = p.enter();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ i as u64;
                let mut live = Vec::new();
                for _ in 0..40 {
                    let objs: Vec<Vec<u8>> = (0..2000)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            black_box(vec![x as u8; 8 + (x % 500) as usize])
                        })
                        .collect();
                    live.push(black_box(vec![1u8; 16]));
                    h.put(objs);
                }
                h.close();
                consumer.join().unwrap();
                live
            })
        })
        .collect();
    let lives: Vec<Vec<Vec<u8>>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let drains = drainer.join().unwrap();
    let taken = handback_counts().taken;
    assert!(drains > 0);
    assert!(taken > taken_before, "no chain was handed back");
    for ((p, c), live) in tenants.iter().zip(&lives) {
        // SAFETY: live allocations of this allocator.
        let outer = unsafe { SlabAlloc::usable_size(live.as_ptr().cast()) };
        assert_eq!(p.current_exact(), (live.len() * 16 + outer) as u64);
        assert_eq!(c.current_exact(), 0);
    }
    drop(lives);
    for (p, _) in &tenants {
        assert_eq!(p.current_exact(), 0);
    }
    slabcg::allocator::testing::check_invariants();
}

/// Tenant after tenant leaves chains behind: the hand-back stays within its bound in bytes
/// (the entries least recently used go back), and every tenant is exact.
#[test]
fn the_handback_stays_bounded() {
    let _one = one_at_a_time();
    let c = Tenant::new("handback-bounded-consumer");
    let mut ps = Vec::new();
    let mut most = 0;
    for i in 0..40 {
        let p = Tenant::new(&format!("handback-bounded-{i}"));
        drop(pipeline(&p, &c, 1, 1000, 8000, 0));
        let n = handback_counts();
        assert!(n.bytes <= HANDBACK_BYTES_BOUND, "{n:?}");
        most = most.max(n.bytes);
        ps.push(p);
    }
    assert!(
        most > HANDBACK_BYTES_BOUND / 2,
        "the tenants filled it ({most} bytes at most)"
    );
    for p in &ps {
        assert_eq!(p.current_exact(), 0);
    }
    assert_eq!(handback_counts().bytes, 0);
}

/// How many chains the busy consumer of the test below was asked to put, and has put.
static ASKED: AtomicUsize = AtomicUsize::new(0);
static PUT: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    /// Set on the test's draining thread only: a release on another thread (a decay sweep
    /// on the busy consumer's own slow path) must not wait for the consumer.
    static DRAINER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run after each entry the hand-back's release gives back; on the test's draining thread,
/// the busy consumer puts one more chain, which takes the lowest free entry.
fn one_more_chain_meanwhile() {
    if !DRAINER.with(|d| d.get()) {
        return;
    }
    let asked = ASKED.fetch_add(1, Ordering::AcqRel) + 1;
    while PUT.load(Ordering::Acquire) < asked {
        std::thread::yield_now();
    }
}

#[test]
fn a_drain_gives_back_every_chain_that_was_there_before_it() {
    let _one = one_at_a_time();
    // A busy producer/consumer pair: the consumer holds the producer's objects and frees
    // them, putting one chain in the hand-back, each time the drain below asks.
    let p = Tenant::new("handback-busy-producer");
    let c = Tenant::new("handback-busy-consumer");
    let objs: Vec<Vec<u8>> = {
        let p = p.clone();
        std::thread::spawn(move || {
            let _in = p.enter();
            (0..60_000)
                .map(|i| black_box(vec![i as u8; SIZE]))
                .collect()
        })
        .join()
        .unwrap()
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (stop, ready) = (stop.clone(), ready.clone());
        std::thread::spawn(move || {
            let _in = c.enter();
            let warm = black_box(vec![0u8; SIZE]);
            let mut objs = objs;
            // Until the consumer has adopted the producer's objects and put a chain.
            let before = handback_counts().put;
            while handback_counts().put == before {
                drop(objs.pop().expect("a chain within 60,000 frees"));
            }
            ready.store(true, Ordering::Release);
            let mut done = 0;
            while !stop.load(Ordering::Acquire) {
                if ASKED.load(Ordering::Acquire) > done {
                    let before = handback_counts().put;
                    while handback_counts().put == before {
                        let Some(o) = objs.pop() else { break };
                        drop(o);
                    }
                    done += 1;
                    PUT.store(done, Ordering::Release);
                } else {
                    std::thread::yield_now();
                }
            }
            drop(objs);
            drop(warm);
        })
    };
    while !ready.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    // Two idle tenants' chains, in the table's first two entries.
    slabcg::allocator::trim();
    assert_eq!(handback_counts().chains, 0);
    let (a, b) = (
        Tenant::new("handback-idle-a"),
        Tenant::new("handback-idle-b"),
    );
    let c2 = Tenant::new("handback-idle-consumer");
    let max = 4 << 20;
    b.set_max(max);
    drop(pipeline(&a, &c2, 5, 1000, 8000, 0));
    drop(pipeline(&b, &c2, 5, 1000, 8000, 0));
    assert!(b.current() > 0, "b's chains wait in the hand-back");
    // One drain, with a chain put after each entry it gives back. Nothing of b is live.
    slabcg::allocator::testing::set_handback_release_hook(Some(one_more_chain_meanwhile));
    DRAINER.with(|d| d.set(true));
    let exact = b.current_exact();
    DRAINER.with(|d| d.set(false));
    slabcg::allocator::testing::set_handback_release_hook(None);
    stop.store(true, Ordering::Release);
    busy.join().unwrap();
    assert!(
        ASKED.load(Ordering::Relaxed) >= 2,
        "the drain released both idle entries"
    );
    assert_eq!(
        exact, 0,
        "the drain left b's chains charged in the hand-back"
    );
    // And b was drained clean: all of its limit is there for a charge.
    b.charge(max - 4096, StatItem::Sock)
        .expect("b's chains were given back by the drain");
    b.uncharge(max - 4096, StatItem::Sock);
}
