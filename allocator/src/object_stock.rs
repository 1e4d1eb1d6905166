//! The object stock: free slots that stay charged.
//!
//! A thread that frees an accounted object whose owner is the thread's current `tag` keeps
//! it, still charged, in a per-class `tagged` bin; the thread's next allocation in the same
//! tenant takes it back without charging (no stock update, no owner write). This is seed
//! 003's object stock taken one step further: the kernel caches charged bytes per CPU; we
//! cache the charged objects themselves, so what the same-tenant alloc/free pair adds to the
//! unaccounted pair is the owner-word read on free and a short critical section with one tag
//! compare on each side (19 instructions per pair, BENCHMARKS.md).
//!
//! Accounting consequences, the same as for the byte stocks:
//! - objects in tagged bins count in their tenant's `current` and slab stats (pre-charged);
//!   at most `tagged_max(c)` per class per thread (at most 64 KiB per class per thread, or
//!   one object for the classes above 64 KiB);
//! - every drain of all stocks first takes every thread's tagged bins (idle threads
//!   included) and uncharges them ([`drain_all`], registered with the accounting), so
//!   `current_exact()` is exact and no charge fails while other threads sit on such objects.
//!
//! Protocol: `tag` holds the tenant (low 32 bits) and a drainer's `STEAL` bit. The owner
//! touches the tagged bins only inside a critical section (`in_cs = 1`, compiler fence, load
//! `tag` and compare it with the tenant, ..., `in_cs = 0`), so one compare tests both "same
//! tenant" and "no drainer". A drainer sets `STEAL` with an atomic RMW, runs a process-wide
//! barrier (membarrier), waits for `in_cs == 0`, takes the bins and stores `tag = NO_TAG`
//! (clearing `STEAL`). The owner changes `tag` only by CAS inside its critical section, so
//! it never overwrites a `STEAL` bit. Dekker-style ordering: the owner's `in_cs` store and
//! its `tag` load are ordered by the barrier the drainer forces on every CPU, so either the
//! owner sees `STEAL` or the drainer sees `in_cs == 1` (as in `accounting/src/drain.rs`).
//!
//! Invariant (outside a CS, no drainer): `tag == NO_TAG  =>  every tagged bin is empty`, and
//! every slot in a tagged bin is charged to `tag` with its class size and its owner word
//! equals `tag`.

use core::sync::atomic::Ordering;

use slabcg_accounting::hooks::{self, ObjCgId, StatIdx};

use crate::classes;
use crate::segment::FreeObj;
use crate::size_class::{class_size, NUM_CLASSES};
use crate::thread_cache::{self, bin_max, ThreadCache};

/// `tag` when the tagged bins hold nothing. Above every u32, so no owner word (a real objcg
/// id, or garbage read for an invalid free) ever equals it and gets kept in an untagged bin;
/// distinct from `STEAL`, so `tag & !STEAL` keeps it.
pub const NO_TAG: u64 = 1 << 33;
/// Set in `tag` by a drainer: the owner must not touch its tagged bins.
pub const STEAL: u64 = 1 << 32;

/// Consecutive allocations under another tenant after which a thread retags (gives its
/// tagged objects back and starts caching for the new tenant).
const RETAG_AFTER: u32 = 64;

/// Capacity of the tagged bin of class `c`: half a plain bin, at most 64 KiB (one object
/// for classes above that).
pub fn tagged_max(c: usize) -> u32 {
    (bin_max(c) / 2).max(1)
}

impl ThreadCache {
    /// Enters the critical section and returns `tag` (with `STEAL` when a drainer wants the
    /// bins: then the caller must not touch them).
    #[inline(always)]
    fn enter(&self) -> u64 {
        self.in_cs.store(true, Ordering::Relaxed);
        hooks::light_barrier();
        // Acquire: pairs with the drainer's release store of NO_TAG after it emptied the bins.
        self.tag.load(Ordering::Acquire)
    }

    #[inline(always)]
    fn leave(&self) {
        self.in_cs.store(false, Ordering::Release);
    }

    /// Pops a slot of class `c` already charged to `cg`, or null.
    #[inline(always)]
    pub fn tagged_pop(&self, c: usize, cg: ObjCgId) -> *mut u8 {
        let mut p = core::ptr::null_mut();
        if self.enter() == u64::from(cg) {
            // SAFETY: c < NUM_CLASSES (size_class only yields valid classes).
            p = unsafe { &self.bins.get_unchecked(c).tagged }.pop();
        }
        self.leave();
        p
    }

    /// Keeps slot `p` of class `c`, whose owner word says `owner`, charged in the tagged
    /// bin when `owner` is the tag and there is room. False when it was not kept.
    ///
    /// # Safety
    /// `p` must be a live accounted slot of class `c` charged to `owner`, given up.
    #[inline(always)]
    pub unsafe fn tagged_push(&self, c: usize, owner: ObjCgId, p: *mut u8) -> bool {
        let mut kept = false;
        if self.enter() == u64::from(owner) {
            // SAFETY: c is valid; the caller gives up p, which stays charged to the tag.
            kept = unsafe { self.bins.get_unchecked(c).tagged.push(p) };
        }
        self.leave();
        kept
    }
}

/// Called after an allocation under `cg` missed the tagged bins: start caching for `cg`
/// when the bins are empty, or after `RETAG_AFTER` misses give the cached objects back.
#[cold]
#[inline(never)]
pub fn note_miss(tc: &ThreadCache, cg: ObjCgId) {
    if !thread_cache::is_live(tc) || tc.tag.load(Ordering::Relaxed) == u64::from(cg) {
        return;
    }
    let mut taken = NOTHING_TAKEN;
    let mut old = NO_TAG;
    let seen = tc.enter();
    if seen & STEAL == 0 {
        let empty = tc.bins.iter().map(|b| &b.tagged).all(|b| b.count() == 0);
        let misses = tc.tag_misses.get() + 1;
        if empty || misses >= RETAG_AFTER {
            // The CAS fails only when a drainer set STEAL meanwhile; then the bins are its.
            if tc
                .tag
                .compare_exchange(seen, u64::from(cg), Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                old = seen;
                taken = take_tagged(tc);
            }
            tc.tag_misses.set(0);
        } else {
            tc.tag_misses.set(misses);
        }
    }
    tc.leave();
    give_back(old, &taken);
}

/// The chains taken from a thread's tagged bins, per class: (head, count).
type Taken = [(*mut FreeObj, u32); NUM_CLASSES];
const NOTHING_TAKEN: Taken = [(core::ptr::null_mut(), 0); NUM_CLASSES];

/// Empties every tagged bin of `tc`. The caller must hold the bins: the owner inside its
/// critical section having seen no `STEAL`, a drainer after `wait_out`, or a fork child.
fn take_tagged(tc: &ThreadCache) -> Taken {
    core::array::from_fn(|c| tc.bins[c].tagged.take_all())
}

/// Uncharges and returns to their caches the slots taken from tagged bins of `tag`.
fn give_back(tag: u64, taken: &Taken) {
    if tag == NO_TAG {
        // Invariant: untagged bins are empty (no owner word equals NO_TAG).
        debug_assert!(taken.iter().all(|&(_, n)| n == 0));
        return;
    }
    let tag = tag as ObjCgId;
    for (c, &(head, n)) in taken.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let bytes = n as usize * class_size(c);
        hooks::uncharge(tag, bytes, StatIdx::slab(c));
        // Clear the owner words, as an uncharging free does, so that a later double free of
        // one of these slots is reported instead of uncharging `tag` again.
        let mut o = head;
        while !o.is_null() {
            // SAFETY: o is a free slot of the accounted cache of class c (the chain).
            unsafe {
                (*crate::charge::class_owner_word(o as *mut u8, c)).store(0, Ordering::Relaxed);
                o = (*o).next;
            }
        }
        // SAFETY: a chain of n free slots of the accounted cache of class c.
        unsafe { classes::cache(c, true).flush(head, n as usize) };
    }
}

/// Gives back this thread's own tagged objects (thread exit, trim). Waits out a drainer.
pub fn give_back_own(tc: &ThreadCache) {
    let taken;
    let old;
    loop {
        let seen = tc.enter();
        if seen & STEAL == 0
            && tc
                .tag
                .compare_exchange(seen, NO_TAG, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            taken = take_tagged(tc);
            tc.leave();
            old = seen;
            break;
        }
        tc.leave();
        crate::sys::yield_now();
    }
    give_back(old, &taken);
}

/// In a fork child: uncharges the tagged objects of a thread that did not survive the fork.
/// A cache whose owner was inside its critical section at the fork may be half-updated and
/// is left alone (its charges stay, a bounded inexactness of the child).
pub fn give_back_orphan(tc: &ThreadCache) {
    if tc.in_cs.load(Ordering::Relaxed) {
        return;
    }
    let old = tc.tag.swap(NO_TAG, Ordering::Relaxed) & !STEAL;
    give_back(old, &take_tagged(tc));
}

/// Takes every thread's tagged objects (idle threads included) and uncharges them.
/// Registered with the accounting, which calls it at the start of every drain of all stocks.
pub fn drain_all() {
    let own = thread_cache::with(|tc| tc as *const ThreadCache);
    // One lock hold for both passes: no thread joins or leaves between setting `steal` and
    // taking the bins.
    let threads = thread_cache::Threads::lock();
    threads.for_each(|tc| {
        tc.tag.fetch_or(STEAL, Ordering::SeqCst);
    });
    let remote = hooks::remote_barrier();
    threads.for_each(|tc| {
        let mut taken = NOTHING_TAKEN;
        let mut old = NO_TAG;
        if remote || core::ptr::eq(tc, own) {
            hooks::wait_out(&tc.in_cs);
            old = tc.tag.load(Ordering::Relaxed) & !STEAL;
            taken = take_tagged(tc);
            // Release: the owner that next loads NO_TAG (and later retags) sees empty bins.
            tc.tag.store(NO_TAG, Ordering::Release);
        } else {
            // Not drained (no remote barrier): withdraw the request. While STEAL is set the
            // owner never writes `tag`, so clearing the bit loses nothing.
            tc.tag.fetch_and(!STEAL, Ordering::Release);
        }
        give_back(old, &taken);
    });
}
