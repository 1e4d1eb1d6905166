//! A loom model of the spin lock: two threads each add one under the lock with a relaxed
//! load and store, so an update is lost in some execution unless `lock` acquires what the
//! previous holder's unlock released, and neither is inside at once.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p slabcg-sys --test loom_spin_lock --release`
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use slabcg_sys::SpinLock;

/// A counter behind the lock, its flag made before the lock is shared (under loom the flag
/// is made on first use).
fn counter() -> Arc<SpinLock<AtomicUsize>> {
    let lock = Arc::new(SpinLock::new(AtomicUsize::new(0)));
    drop(lock.lock());
    lock
}

/// Adds one with a relaxed load and store: an update is lost unless the holder is alone.
fn bump(n: &AtomicUsize) {
    n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

#[test]
fn two_holders_never_lose_an_update() {
    loom::model(|| {
        let lock = counter();
        let other = {
            let lock = lock.clone();
            loom::thread::spawn(move || bump(&lock.lock()))
        };
        bump(&lock.lock());
        other.join().unwrap();
        assert_eq!(lock.lock().load(Ordering::Relaxed), 2);
    });
}

#[test]
fn try_lock_fails_while_held() {
    loom::model(|| {
        let lock = Arc::new(SpinLock::new(()));
        let g = lock.lock(); // also makes the flag before the lock is shared
        let other = {
            let lock = lock.clone();
            loom::thread::spawn(move || lock.try_lock().is_none())
        };
        assert!(other.join().unwrap());
        drop(g);
        assert!(lock.try_lock().is_some());
    });
}

/// A `try_lock` that fails must leave the holder's lock held: a thread that then takes the
/// lock waits for the holder, so no update is lost. (`try_lock` once built its guard before
/// knowing whether it had the lock, and dropping that guard on failure released the
/// holder's lock: two threads were then inside a cache's lists at once.)
#[test]
fn a_failed_try_lock_keeps_the_holders_lock() {
    loom::model(|| {
        let lock = counter();
        let other = {
            let lock = lock.clone();
            loom::thread::spawn(move || {
                let took = match lock.try_lock() {
                    Some(g) => {
                        bump(&g);
                        1
                    }
                    None => 0,
                };
                bump(&lock.lock());
                took
            })
        };
        bump(&lock.lock());
        let took = other.join().unwrap();
        assert_eq!(lock.lock().load(Ordering::Relaxed), 2 + took);
    });
}
