//! The decay sweep against the threads that use the caches it visits: one thread sweeps
//! back to back (`testing::sweep_now`: each cache's `try_lock`, then its decay check) while
//! others refill and flush the same caches: a plain size class, its accounted twin (in a
//! tenant) and an accounted dedicated cache. A sweep that found a cache busy once released
//! the lock its user held (`try_lock` dropped a guard it never had), and two threads then
//! changed one cache's lists at once; the invariant walks (`testing::check_invariants`, and
//! those a debug build makes on its own) or the objects' contents catch that. A race, so
//! not every run shows it: with that `try_lock` about one debug run in three failed here (2
//! cores); `sys/tests/loom_spin_lock.rs` checks the lock itself exhaustively.

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use slabcg_allocator::{testing, Cache, SlabAlloc};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// Objects of 3 KiB: their bins hold few slots, so bursts of them refill and flush (and park
/// batches in) the caches all the time.
type Obj = [u64; 384];

/// An object's words all hold one value unique to the allocation.
fn check(o: &Obj, v: u64) {
    assert!(
        o.iter().all(|&w| w == v),
        "an object changed under its owner"
    );
}

fn burst(t: u64, round: u64, cache: &Cache) {
    let tag = |k: u64, i: u64| (t << 48) | (round << 16) | (k << 12) | i;
    let boxes: Vec<Box<Obj>> = (0..48).map(|i| Box::new([tag(0, i); 384])).collect();
    let objs: Vec<_> = (0..48)
        .map(|i| {
            let p = cache.alloc().expect("memory").cast::<Obj>();
            // SAFETY: a fresh slot of the cache's layout, Obj's.
            unsafe { p.as_ptr().write([tag(1, i); 384]) };
            p
        })
        .collect();
    for (i, b) in boxes.iter().enumerate() {
        check(b, tag(0, i as u64));
    }
    for (i, p) in objs.into_iter().enumerate() {
        // SAFETY: written above and not freed yet.
        check(unsafe { p.as_ref() }, tag(1, i as u64));
        // SAFETY: allocated from `cache` above, freed once.
        unsafe { cache.free(p.cast()) };
    }
}

#[test]
fn sweeps_race_the_caches_users() {
    let stop = Arc::new(AtomicBool::new(false));
    let cache = Arc::new(
        Cache::builder("sweep-races", Layout::new::<Obj>())
            .account(true)
            .build(),
    );
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (stop, cache) = (stop.clone(), cache.clone());
            thread::spawn(move || {
                let tenant = slabcg_accounting::Tenant::new(&format!("sweep-races-{t}"));
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    // Outside every tenant (the plain class), then in one (its accounted
                    // twin, and the dedicated cache's charged objects).
                    burst(t, round, &cache);
                    let _scope = tenant.enter();
                    burst(t, round + 1, &cache);
                    round += 2;
                }
                round
            })
        })
        .collect();
    let sweeper = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut sweeps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                testing::sweep_now();
                sweeps += 1;
            }
            sweeps
        })
    };
    // Several decay intervals, so that idle parked batches and empty slabs go back too.
    thread::sleep(Duration::from_millis(6 * testing::DECAY_INTERVAL_MS));
    stop.store(true, Ordering::Relaxed);
    let rounds: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let sweeps = sweeper.join().unwrap();
    assert!(rounds > 0 && sweeps > 0, "{rounds} rounds, {sweeps} sweeps");
    testing::check_invariants();
}
