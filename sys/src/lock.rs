//! The one spin lock of the slabcg crates: test-and-test-and-set, for their shared
//! structures (a cache's lists, the thread and stock registries, the mapping cache, the
//! `mprotect` barrier).
//!
//! Critical sections under it are short (moving a batch of slots between a thread cache and
//! slabs, linking a stock), so spinning beats sleeping; after a few hundred spins the waiter
//! yields so a preempted holder can finish. It never allocates, which a `std::sync::Mutex`
//! does not promise on every platform, and `new` is `const`, so it can be a `static`.
//!
//! Under loom the flag is loom's `AtomicBool`, created on first use (so that `new` stays
//! `const` and statics still compile): a model that builds a lock inside `loom::model`
//! checks it, provided it locks it once before sharing it (the flag's creation is not
//! ordered for loom otherwise). A `static` lock must not be used by a loom model (loom
//! objects do not outlive one execution).

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

use crate::sync::{spin_loop, Ordering};

// The shim's `AtomicBool`: core's, or under loom loom's made on first use (module docs).
use crate::sync::AtomicBool as Flag;

/// A value guarded by a spin lock.
pub struct SpinLock<T> {
    locked: Flag,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `locked` (acquire on lock, release on unlock).
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; T: Send suffices.
unsafe impl<T: Send> Send for SpinLock<T> {}

// SAFETY: a shared guard hands out `&T` to whichever thread holds the `&SpinGuard`, so the
// guard may be shared only when `T` itself may (as `std::sync::MutexGuard`). Without this
// impl the guard would be `Sync` for every `T: Send` (it holds only `&SpinLock<T>`), and
// two threads could race on a `Cell` through one guard.
unsafe impl<T: Sync> Sync for SpinGuard<'_, T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock holding `value`.
    pub const fn new(value: T) -> Self {
        SpinLock {
            locked: Flag::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning (then yielding) while another thread holds it. Not
    /// re-entrant: a thread that holds it and asks again spins forever.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < 200 {
                    spin_loop();
                    spins += 1;
                } else {
                    crate::thread::yield_now();
                }
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Takes the lock if it is free (a fork child uses it to leave alone what a thread that
    /// did not survive the fork was changing; the decay sweep to skip a cache in use).
    ///
    /// A failed attempt leaves the holder's lock held:
    ///
    /// ```
    /// let lock = slabcg_sys::SpinLock::new(0u32);
    /// let held = lock.lock();
    /// assert!(lock.try_lock().is_none());
    /// assert!(lock.try_lock().is_none(), "the failed attempt released the lock");
    /// drop(held);
    /// assert!(lock.try_lock().is_some());
    /// ```
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // The guard is made only on success: a guard made and dropped on failure (as
        // `bool::then_some`, which takes its value eagerly, did here) releases the lock that
        // another thread holds.
        if self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            Some(SpinGuard { lock: self })
        } else {
            None
        }
    }

    /// Takes the lock and leaks the guard; used by the fork handlers, which lock everything
    /// before `fork` and release it in both processes afterwards.
    pub fn lock_raw(&self) {
        core::mem::forget(self.lock());
    }

    /// Releases a lock taken with [`lock_raw`](Self::lock_raw).
    ///
    /// # Safety
    /// The lock must be held by a leaked guard of this thread (or, in a fork child, of the
    /// thread that forked).
    pub unsafe fn unlock_raw(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

/// Proof that the lock is held; releases it on drop.
///
/// A guard may be shared between threads only when `T` may (it hands out `&T`):
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<slabcg_sys::SpinGuard<'static, core::cell::Cell<u64>>>();
/// ```
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while the lock is held, so access is exclusive.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref; &mut self makes this the only borrow through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}
