//! A loom model of the spin lock: two threads each add one under the lock with a relaxed
//! load and store, so an update is lost in some execution unless `lock` acquires what the
//! previous holder's unlock released, and neither is inside at once.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p slabcg-sys --test loom_spin_lock --release`
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use slabcg_sys::SpinLock;

#[test]
fn two_holders_never_lose_an_update() {
    loom::model(|| {
        let lock = Arc::new(SpinLock::new(AtomicUsize::new(0)));
        // Under loom the flag is made on first use: make it before the lock is shared.
        drop(lock.lock());
        let other = {
            let lock = lock.clone();
            loom::thread::spawn(move || {
                let g = lock.lock();
                g.store(g.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            })
        };
        {
            let g = lock.lock();
            g.store(g.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
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
