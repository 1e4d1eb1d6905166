//! A loom model of the object-stock protocol (`allocator/src/object_stock.rs`): the owner's
//! fast paths (the free checks the tag before its push, the allocation after its pop) against
//! a drainer that uncharges the tagged bin without touching it, then the owner settling.
//!
//! This is a model, not the real code (which needs TLS, mmap and membarrier): the same
//! atomics, orderings and steps, with the tagged bin reduced to its `count` (the only part a
//! drainer reads) and the `stock` lock holding the drainer's record. `membarrier` is modelled
//! as a `SeqCst` fence on both sides, which is what it guarantees (a full barrier on every
//! running thread, between the owner's bin store and its load of the tag).
//!
//! Checked in every execution:
//! - no live object is ever uncharged (`charged >= live` at every step of the owner, while
//!   the drainer runs), so no correction ever has to charge;
//! - after both threads end, one more drain (the quiescent case) leaves each tenant charged
//!   with exactly its live objects, and so does the owner settling after it.
//!
//! Not modelled: the no-membarrier branch that withdraws the request, a drain run by the
//! owner thread itself, more than one size class, `note_miss` keeping the tag (the model
//! retags at once), and the list itself (only the owner touches it).
//!
//! Run with `scripts/verify.sh` (or
//! `RUSTFLAGS="--cfg loom" cargo test -p slabcg-allocator --test loom_object_stock --release`).
#![cfg(loom)]

use loom::sync::atomic::{fence, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

const NO_TAG: u64 = 1 << 33;
const STEAL: u64 = 1 << 32;
const DRAINED: u64 = 1 << 34;
const TENANT: u64 = u32::MAX as u64;
const A: u64 = 7;
const B: u64 = 9;
/// Capacity of the modelled tagged bin.
const MAX: u64 = 2;

/// One thread's object stock and the tenants' charged object counts.
struct Stock {
    tag: AtomicU64,
    count: AtomicU64,
    /// The `stock` lock and `Drained::rec`.
    rec: Mutex<u64>,
    charged_a: AtomicU64,
    charged_b: AtomicU64,
}

impl Stock {
    /// A stock tagged A with an empty bin, and the tenants' charged object counts.
    fn tagged_a(charged_a: u64, charged_b: u64) -> Stock {
        Stock {
            tag: AtomicU64::new(A),
            count: AtomicU64::new(0),
            rec: Mutex::new(0),
            charged_a: AtomicU64::new(charged_a),
            charged_b: AtomicU64::new(charged_b),
        }
    }

    fn charged(&self, t: u64) -> &AtomicU64 {
        if t & TENANT == A {
            &self.charged_a
        } else {
            &self.charged_b
        }
    }

    // ---- the owner ----

    /// free_small: keep the object in the bin when its tenant is the tag (checked before the
    /// push), else uncharge it, and settle if a drainer has been here.
    fn free(&self, t: u64) {
        if self.tag.load(Ordering::Relaxed) == t {
            let n = self.count.load(Ordering::Relaxed);
            if n < MAX {
                self.count.store(n + 1, Ordering::Relaxed);
                return;
            }
        }
        self.charged(t).fetch_sub(1, Ordering::Relaxed);
        if self.tag.load(Ordering::Relaxed) & (STEAL | DRAINED) != 0 {
            self.settle();
        }
    }

    /// alloc_small: pop, then check the tag (after a fence); on a mismatch put the object
    /// back, charge a fresh one and note the miss.
    fn alloc(&self, t: u64) {
        let n = self.count.load(Ordering::Relaxed);
        if n > 0 {
            self.count.store(n - 1, Ordering::Relaxed);
            fence(Ordering::SeqCst); // the owner's side of membarrier
            if self.tag.load(Ordering::Relaxed) == t {
                return;
            }
            self.count.store(n, Ordering::Relaxed);
        }
        self.charged(t).fetch_add(1, Ordering::Relaxed);
        self.note_miss(t);
    }

    /// note_miss: retag to `t` (the model retags at once), giving back what the bin holds.
    fn note_miss(&self, t: u64) {
        if self.tag.load(Ordering::Relaxed) == t {
            return;
        }
        let mut rec = self.rec.lock().unwrap();
        let taken = self.take_own(&mut rec);
        self.tag.store(t, Ordering::Relaxed);
        drop(rec);
        self.give_back(taken);
    }

    fn settle(&self) {
        let mut rec = self.rec.lock().unwrap();
        let mut taken = (NO_TAG, 0, 0);
        if self.tag.load(Ordering::Relaxed) & (STEAL | DRAINED) != 0 {
            taken = self.take_own(&mut rec);
        }
        drop(rec);
        self.give_back(taken);
    }

    /// take_own, under the lock: (tag, objects taken, how many a drainer uncharged).
    fn take_own(&self, rec: &mut u64) -> (u64, u64, u64) {
        let tag = self.tag.load(Ordering::Relaxed);
        let n = self.count.load(Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
        let r = if tag & DRAINED != 0 { *rec } else { 0 };
        *rec = 0;
        assert!(
            n >= r,
            "the owner found fewer objects than the drainer uncharged"
        );
        self.tag.store(NO_TAG, Ordering::Relaxed);
        (tag, n, r)
    }

    fn give_back(&self, (tag, n, r): (u64, u64, u64)) {
        if tag == NO_TAG {
            assert_eq!(n, 0, "objects in an untagged bin");
            return;
        }
        self.charged(tag).fetch_sub(n - r, Ordering::Relaxed);
    }

    /// give_back_own (thread exit): take the bin whatever a drainer did to it.
    fn exit(&self) {
        let mut rec = self.rec.lock().unwrap();
        let taken = self.take_own(&mut rec);
        drop(rec);
        self.give_back(taken);
    }

    // ---- the drainer ----

    fn drain(&self) {
        {
            let _rec = self.rec.lock().unwrap();
            let t = self.tag.load(Ordering::Relaxed);
            if t & (NO_TAG | DRAINED) == 0 {
                self.tag.store(t | STEAL, Ordering::SeqCst);
            }
        }
        fence(Ordering::SeqCst); // membarrier
        let mut rec = self.rec.lock().unwrap();
        let t = self.tag.load(Ordering::Relaxed);
        let mut uncharge = 0;
        if t & STEAL != 0 {
            let n = self.count.load(Ordering::Relaxed);
            *rec = n;
            uncharge = n;
            self.tag.store(t & !STEAL | DRAINED, Ordering::Relaxed);
        } else if t & DRAINED != 0 {
            let now = self.count.load(Ordering::Relaxed);
            if now > *rec {
                uncharge = now - *rec;
                *rec = now;
            }
        }
        drop(rec);
        if uncharge > 0 {
            self.charged(t).fetch_sub(uncharge, Ordering::Relaxed);
        }
    }

    /// What the bin still holds charged, at a quiescent point: (tenant, objects).
    fn bin_charged(&self) -> (u64, u64) {
        let tag = self.tag.load(Ordering::Relaxed);
        let n = self.count.load(Ordering::Relaxed);
        if tag == NO_TAG {
            assert_eq!(n, 0, "objects in an untagged bin");
            (NO_TAG, 0)
        } else if tag & DRAINED != 0 {
            (tag & TENANT, n - *self.rec.lock().unwrap())
        } else {
            (tag & TENANT, n)
        }
    }
}

/// Runs `owner` on one thread and a drain on another; returns what `owner` returned.
fn race_with_drainer<R: Send + 'static>(
    s: &Arc<Stock>,
    owner: impl FnOnce(&Stock) -> R + Send + 'static,
) -> R {
    race_with_drains(s, 1, owner)
}

/// Runs `owner` on one thread and `drains` drains in a row on another.
fn race_with_drains<R: Send + 'static>(
    s: &Arc<Stock>,
    drains: u32,
    owner: impl FnOnce(&Stock) -> R + Send + 'static,
) -> R {
    let o = {
        let s = s.clone();
        thread::spawn(move || owner(&s))
    };
    let d = {
        let s = s.clone();
        thread::spawn(move || (0..drains).for_each(|_| s.drain()))
    };
    let r = o.join().unwrap();
    d.join().unwrap();
    r
}

fn check_not_undercharged(s: &Stock, live_a: u64, live_b: u64) {
    assert!(
        s.charged_a.load(Ordering::Relaxed) >= live_a,
        "a live A object uncharged"
    );
    assert!(
        s.charged_b.load(Ordering::Relaxed) >= live_b,
        "a live B object uncharged"
    );
}

/// After both threads end: one more drain, at a quiescent point, must leave each tenant
/// charged with exactly its live objects (what `current_exact()` promises), with nothing in
/// the bin still charged; the owner settling then changes nothing.
fn check_quiescent(s: &Stock, live_a: u64, live_b: u64) {
    s.drain();
    assert_eq!(s.bin_charged().1, 0, "the bin still holds charged objects");
    assert_eq!(s.charged_a.load(Ordering::Relaxed), live_a);
    assert_eq!(s.charged_b.load(Ordering::Relaxed), live_b);
    s.settle();
    assert_eq!(s.charged_a.load(Ordering::Relaxed), live_a);
    assert_eq!(s.charged_b.load(Ordering::Relaxed), live_b);
}

/// The owner frees and allocates under A (kept in and taken from the bin when tagged A),
/// then allocates under B (which retags) and frees a B object, while a drainer drains.
#[test]
fn drain_races_owner() {
    loom::model(|| {
        // Two live objects of A, one of B, all charged.
        let s = Arc::new(Stock::tagged_a(2, 1));
        let (live_a, live_b) = race_with_drainer(&s, |s| {
            let (mut live_a, mut live_b) = (2, 1);
            s.free(A);
            live_a -= 1;
            check_not_undercharged(s, live_a, live_b);
            s.alloc(A);
            live_a += 1;
            check_not_undercharged(s, live_a, live_b);
            s.alloc(B);
            live_b += 1;
            check_not_undercharged(s, live_a, live_b);
            s.free(B);
            live_b -= 1;
            check_not_undercharged(s, live_a, live_b);
            (live_a, live_b)
        });
        check_quiescent(&s, live_a, live_b);
    });
}

/// Two frees then an allocation under A while a drainer drains: a free that read the tag
/// before the drainer's request may push after the drainer counted, and the allocation's
/// check after its pop must not take an object the drainer uncharged.
#[test]
fn drain_races_frees() {
    loom::model(|| {
        // Two live objects of A.
        let s = Arc::new(Stock::tagged_a(2, 0));
        race_with_drainer(&s, |s| {
            s.free(A);
            check_not_undercharged(s, 1, 0);
            s.free(A);
            check_not_undercharged(s, 0, 0);
            s.alloc(A);
            check_not_undercharged(s, 1, 0);
        });
        check_quiescent(&s, 1, 0);
    });
}

/// Two drains in a row against a free, an allocation and a free under A: the second drain
/// reads the counts of a thread the first one drained while the owner still runs.
#[test]
fn two_drains_race_owner() {
    loom::model(|| {
        // Two live objects of A.
        let s = Arc::new(Stock::tagged_a(2, 0));
        race_with_drains(&s, 2, |s| {
            s.free(A);
            check_not_undercharged(s, 1, 0);
            s.alloc(A);
            check_not_undercharged(s, 2, 0);
            s.free(A);
            check_not_undercharged(s, 1, 0);
        });
        check_quiescent(&s, 1, 0);
    });
}

/// Thread exit (`give_back_own`) while a drainer drains: whichever goes first, the kept
/// object is uncharged exactly once and nothing is left tagged.
#[test]
fn exit_races_drainer() {
    loom::model(|| {
        // Two live objects of A, charged.
        let s = Arc::new(Stock::tagged_a(2, 0));
        race_with_drainer(&s, |s| {
            s.free(A);
            check_not_undercharged(s, 1, 0);
            s.exit();
            check_not_undercharged(s, 1, 0);
        });
        // The drainer found the stock untagged, or drained it before the exit took it.
        assert_eq!(s.tag.load(Ordering::Relaxed), NO_TAG);
        assert_eq!(s.count.load(Ordering::Relaxed), 0);
        assert_eq!(s.charged_a.load(Ordering::Relaxed), 1);
    });
}
