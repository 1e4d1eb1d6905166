//! A thread that frees what another thread's tenant allocates (a consumer) keeps those
//! objects charged in its object stock after `ADOPT_AFTER` (64) frees in a row, instead of
//! uncharging each; a full tagged bin is given back in one uncharge and the free that found
//! it full is kept too; a thread that allocates for its own tenant between the frees is left
//! as it is. Every tenant stays exact through drains and thread exit.

use std::hint::black_box;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};

use slabcg::allocator::testing::{class_of, thread_cache, Kind};
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// The tests count bins of this process's threads: one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

const SIZE: usize = 64;

/// Slots in this thread's bin of uncharged accounted slots of class `c`.
fn uncharged_in_bin(c: usize) -> u32 {
    thread_cache::with(|tc| tc.bin(c, Kind::Accounted).count())
}

/// One object of `SIZE` bytes allocated in the current scope, so that this thread's bin of
/// uncharged slots of its class is set up (a thread's bins open at its first allocation of
/// the class; until then frees go to the slabs, and the bin's count says nothing).
fn warm_up() -> Vec<u8> {
    let v = black_box(vec![0u8; SIZE]);
    assert!(uncharged_in_bin(class_of(SIZE)) > 0, "the bin opened");
    v
}

/// `n` objects of `SIZE` bytes allocated in `t` on a thread of their own.
fn produce(t: &Tenant, n: usize) -> Vec<Vec<u8>> {
    let t = t.clone();
    std::thread::spawn(move || {
        let _in = t.enter();
        (0..n).map(|i| black_box(vec![i as u8; SIZE])).collect()
    })
    .join()
    .unwrap()
}

/// Frees `objs` one by one; how many frees left the uncharged bin as it was (kept).
fn free_counting_kept(objs: Vec<Vec<u8>>) -> usize {
    let c = class_of(SIZE);
    let mut kept = 0;
    for v in objs {
        let before = uncharged_in_bin(c);
        drop(v);
        if uncharged_in_bin(c) == before {
            kept += 1;
        }
    }
    kept
}

#[test]
fn a_consumer_keeps_the_producers_objects_and_stays_exact() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let a = Tenant::new("adopt-producer");
    let b = Tenant::new("adopt-consumer");
    let n = 3000;
    let objs = produce(&a, n);
    assert!(a.current_exact() >= (n * SIZE) as u64);
    let (b2, a2) = (b.clone(), a.clone());
    let (tx, rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let consumer = std::thread::spawn(move || {
        let _in = b2.enter();
        let warm = warm_up();
        let kept = free_counting_kept(objs);
        drop(warm);
        // The tagged bin holds up to 1,024 of a's objects, still charged: a drain from
        // here is exact all the same.
        let exact = a2.current_exact();
        done_tx.send(()).unwrap();
        rx.recv().unwrap();
        (kept, exact)
    });
    done_rx.recv().unwrap();
    // While the consumer sits on kept objects, another thread's drain is exact too.
    let exact_elsewhere = a.current_exact();
    tx.send(()).unwrap();
    let (kept, exact) = consumer.join().unwrap();
    // The first 64 frees uncharge; the next ones are kept; past the full bin (1,024 of
    // class 64 B) the bin is given back and the free kept, so more than a bin's worth is kept.
    assert!(
        kept > 2 * 1024,
        "a consumer kept only {kept} of {n} frees of another tenant's objects"
    );
    assert_eq!(
        exact, 0,
        "a's objects are all freed: its usage is 0 after a drain"
    );
    assert_eq!(exact_elsewhere, 0);
    assert_eq!(a.current_exact(), 0, "after the consumer's exit");
    slabcg::allocator::testing::check_invariants();
}

#[test]
fn a_thread_that_allocates_between_the_frees_does_not_adopt() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let a = Tenant::new("adopt-producer-2");
    let b = Tenant::new("adopt-worker");
    let n = 600;
    let objs = produce(&a, n);
    let b2 = b.clone();
    let kept = std::thread::spawn(move || {
        let _in = b2.enter();
        let c = class_of(SIZE);
        let mut kept = 0;
        // Room for all of them: a growth would free the old buffer into b's tagged bin,
        // and a thread holding its own tenant's objects never adopts anyway.
        let mut mine = Vec::with_capacity(n + 1);
        mine.push(warm_up());
        for v in objs {
            // The worker's own allocation of another class, kept for the whole run: each
            // is charged, so no run of frees of a's objects is without a charging
            // allocation.
            mine.push(black_box(vec![1u8; 512]));
            let before = uncharged_in_bin(c);
            drop(v);
            if uncharged_in_bin(c) == before {
                kept += 1;
            }
        }
        drop(mine);
        kept
    })
    .join()
    .unwrap();
    assert_eq!(
        kept, 0,
        "a worker that allocates for its own tenant kept a's objects"
    );
    assert_eq!(a.current_exact(), 0);
    assert_eq!(b.current_exact(), 0);
}

#[test]
fn a_full_tagged_bin_of_the_threads_own_tenant_is_given_back_in_one_go() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let t = Tenant::new("adopt-own-overflow");
    let c = class_of(SIZE);
    let _in = t.enter();
    let n = 5000;
    let objs: Vec<Vec<u8>> = (0..n).map(|i| black_box(vec![i as u8; SIZE])).collect();
    let kept = free_counting_kept(objs);
    // All but the frees that found the bin full (each gives it back) are kept; before,
    // every free past the first 1,024 uncharged alone.
    assert!(kept > n - 16, "only {kept} of {n} own frees kept");
    let in_bin = uncharged_in_bin(c);
    assert!(
        in_bin > 0,
        "the given-back slots went to the uncharged bin first"
    );
    drop(_in);
    assert_eq!(t.current_exact(), 0);
    slabcg::allocator::testing::check_invariants();
}

#[test]
fn a_consumer_follows_the_next_producer_and_its_own_allocations() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let x = Tenant::new("adopt-first");
    let y = Tenant::new("adopt-second");
    let b = Tenant::new("adopt-consumer-2");
    let (from_x, from_y) = (produce(&x, 1500), produce(&y, 1500));
    let b2 = b.clone();
    let (kept_x, kept_y, own) = std::thread::spawn(move || {
        let _in = b2.enter();
        let warm = warm_up();
        let kept_x = free_counting_kept(from_x);
        // The bins hold x's objects now: a run of y's gives them back and adopts y.
        let kept_y = free_counting_kept(from_y);
        drop(warm);
        // The consumer's own allocations: the first miss gives y's objects back (or hands
        // them to b in place) and retags for b at once, so its own frees are kept again.
        let c = class_of(SIZE);
        let mut own = [false; 8];
        for k in &mut own {
            let v = black_box(vec![3u8; SIZE]);
            let before = uncharged_in_bin(c);
            drop(v);
            *k = uncharged_in_bin(c) == before;
        }
        (kept_x, kept_y, own)
    })
    .join()
    .unwrap();
    assert!(kept_x > 1000, "x's objects: {kept_x} of 1500 kept");
    assert!(kept_y > 1000, "after x, y's objects: {kept_y} of 1500 kept");
    assert!(
        own[2..].iter().all(|&k| k),
        "the consumer's own frees after its first allocations: {own:?}"
    );
    assert_eq!(x.current_exact(), 0);
    assert_eq!(y.current_exact(), 0);
    assert_eq!(b.current_exact(), 0);
    slabcg::allocator::testing::check_invariants();
}

#[test]
fn a_dead_tenants_objects_are_not_adopted() {
    let _one = one_at_a_time();
    slabcg::accounting::hooks::set_idle_decay(false);
    let parent = Tenant::new("adopt-dead-parent");
    let child = parent.child("request");
    let objs = produce(&child, 600);
    drop(child);
    let kept = std::thread::spawn(move || {
        let _w = warm_up_outside();
        free_counting_kept(objs)
    })
    .join()
    .unwrap();
    assert_eq!(
        kept, 0,
        "a dead request's objects were kept by the freeing thread"
    );
    assert_eq!(parent.current_exact(), 0);
}

/// [`warm_up`] for a thread in no scope: one object in a tenant of its own, entered for the
/// allocation only.
fn warm_up_outside() -> Vec<u8> {
    let t = Tenant::new("adopt-warm");
    let _in = t.enter();
    warm_up()
}
