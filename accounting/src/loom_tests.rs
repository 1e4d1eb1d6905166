//! Loom models of the byte stock's steal protocol (`drain.rs`), running the real code: a
//! `Stock` built inside the model, the owner's critical section as the charge fast path runs
//! it (`Stock::with_slot`: `enter`, the slot's `try_take`, `leave`; the model's uncharge of
//! the live tenant uses it too, with `try_give`, which is not the uncharge fast path's code:
//! that is `Stock::refill`, with its own hint `mru_free`, run below by the frees of the dead
//! tenant's objects; under loom
//! `light_barrier` is a `SeqCst` fence) and a drainer's `request_steal`, the remote barrier
//! (`sys::remote_barrier`, a `SeqCst` fence under loom: what membarrier guarantees),
//! `take_stolen` (wait for `in_cs == 0`, `take_all`, the holding list, clear `steal`).
//! The free of a dead tenant's object runs the real uncharge fast path, `Stock::refill`,
//! which forwards it through a forwarding entry (`refill_forwarded`, inside the same CS) to
//! the parent's slot, against a drainer that takes the slots and the entries' owed refs.
//!
//! What stays a model: the tenant's counter and its shared stat (two loom atomics the
//! owner's slow path and the drainer's `release` add to), the slow path itself (a miss
//! charges or uncharges the counter directly), and the registry lock.
//!
//! Checked in every execution:
//! - the drainer never takes while the owner works on its slots: both touch one loom
//!   `UnsafeCell` (the owner inside every CS that saw no `steal`, the drainer between its
//!   wait and its clear of `steal`), and loom reports any two touches that happens-before
//!   does not order;
//! - no byte is lost or counted twice: at the end, the counter holds exactly the owner's
//!   live bytes plus what the stock still holds, and the shared stat plus the stock's
//!   cached delta is exactly the live bytes.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p slabcg-accounting --lib --release loom`
//! (`LOOM_MAX_PREEMPTIONS=3` in `.ci/run`).

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicI64, AtomicU64};
use loom::sync::Arc;
use loom::thread;

use crate::stock::{Contents, Pool, Stock};
use crate::sys::sync::model;
use crate::sys::sync::Ordering::Relaxed;
use crate::types::{ObjCgId, StatIdx};

const ID: ObjCgId = 5;
/// A dead child's objcg, which charges `ID`'s tenant now (reparented), with live objects.
const DEAD: ObjCgId = 9;
/// Bytes of `DEAD`'s live objects at the start.
const DEAD_LIVE: u64 = 60;
/// Bytes of `DEAD`'s objects freed and forwarded before the model starts (the entry owes
/// them).
const FORWARDED: u64 = 10;
const IDX: StatIdx = StatIdx(3);
/// Bytes the owner's slot holds at the start.
const START: u64 = 100;

/// One thread's stock, the tenant's counter and shared stat, and the slots' token.
struct World {
    stock: Stock,
    /// Bytes charged to the tenant: pre-charged into the stock, or charged directly.
    counter: AtomicU64,
    /// The tenant's shared stat at `IDX` (flushed deltas).
    stat: AtomicI64,
    /// Refs on `DEAD`: its live objects' bytes plus what forwarding entries owe.
    dead_refs: AtomicU64,
    /// Touched by whoever works on the slots (module docs).
    slots: UnsafeCell<()>,
}

// SAFETY: the stock is what a drainer reaches of another thread (its atomics are loom's);
// the rest is loom's own synchronised types.
unsafe impl Sync for World {}
// SAFETY: as above.
unsafe impl Send for World {}

impl World {
    /// A stock with one slot for `ID` holding `START` bytes (pre-charged to the counter),
    /// listed, as the owner's slow path leaves it.
    fn new() -> Arc<World> {
        let w = World {
            stock: Stock::new(),
            counter: AtomicU64::new(START),
            stat: AtomicI64::new(0),
            dead_refs: AtomicU64::new(0),
            slots: UnsafeCell::new(()),
        };
        let s = &w.stock;
        s.listed.store(true, Relaxed);
        assert!(s.enter());
        let i = s.victim();
        s.fill(i, ID, Pool::Objects, START);
        s.leave();
        // Make the atomics both threads race on before sharing (`slabcg_sys::sync`): the
        // rest are made inside the protocol, by whoever has the slots.
        s.steal.load(Relaxed);
        Arc::new(w)
    }

    /// [`World::new`], plus `DEAD`'s live objects (charged to the tenant, counted in its
    /// stat, each byte a ref on `DEAD`) and a forwarding entry for `DEAD` through the slot,
    /// made as the slow path makes it (`charge::forward`): `FORWARDED` freed bytes moved
    /// into the slot's API pool and their delta into the slot's, the entry owing their refs.
    fn with_dead() -> Arc<World> {
        let w = World::new();
        w.counter.fetch_add(DEAD_LIVE + FORWARDED, Relaxed);
        w.stat.fetch_add((DEAD_LIVE + FORWARDED) as i64, Relaxed);
        w.dead_refs.fetch_add(DEAD_LIVE + FORWARDED, Relaxed);
        let s = &w.stock;
        assert!(s.enter());
        let i = s.find(ID).unwrap();
        assert!(s.try_give(i, Pool::Api, FORWARDED, IDX));
        assert_eq!(s.fwd_note(DEAD, i, FORWARDED), (0, 0));
        assert_eq!(s.fwd_slot(DEAD), Some(i));
        s.leave();
        w
    }

    /// The free of `n` bytes of a `DEAD` object as the allocator's free path makes it: the
    /// real `Stock::refill` (a forwarded hit while the entry and its slot last), else the
    /// slow path's direct uncharge, which puts the refs at once.
    fn free_dead(&self, n: u64) {
        if !self.stock.refill(DEAD, Pool::Objects, n, IDX) {
            self.counter.fetch_sub(n, Relaxed);
            self.stat.fetch_sub(n as i64, Relaxed);
            self.dead_refs.fetch_sub(n, Relaxed);
        }
    }

    /// A charge of `n` bytes as the fast path makes it, or the slow path's direct charge.
    fn charge(&self, n: u64) {
        let hit = self.stock.with_slot(ID, |s, i| {
            self.slots.with_mut(|_| ());
            s.try_take(i, Pool::Objects, n, IDX)
        });
        if !hit {
            self.counter.fetch_add(n, Relaxed);
            self.stat.fetch_add(n as i64, Relaxed);
        }
    }

    /// An uncharge of `n` bytes, the mirror image (through `with_slot`, so that the slots'
    /// token is touched inside the CS: not `Stock::refill`, the real fast path).
    fn uncharge(&self, n: u64) {
        let hit = self.stock.with_slot(ID, |s, i| {
            self.slots.with_mut(|_| ());
            s.try_give(i, Pool::Objects, n, IDX)
        });
        if !hit {
            self.counter.fetch_sub(n, Relaxed);
            self.stat.fetch_sub(n as i64, Relaxed);
        }
    }

    /// A drain of this stock (`drain::drain`, one stock, the barrier reaching its owner):
    /// request, barrier, take, and give the contents back as `drain::release` does.
    fn drain(&self) {
        self.stock.request_steal();
        assert!(crate::sys::remote_barrier());
        let taken = self.stock.take_stolen(|s| {
            self.slots.with_mut(|_| ());
            // As `drain::unlist`: every slot empty, the stock leaves the holding list.
            assert!(!s.holds_any());
            s.listed.store(false, Relaxed);
        });
        taken.slots.iter().for_each(|c| self.release(c));
        // As `drain::release_taken`: the refs the entries owed.
        for (&id, &refs) in taken.owed.ids.iter().zip(&taken.owed.refs) {
            if id != 0 {
                assert_eq!(id, DEAD);
                self.dead_refs.fetch_sub(refs, Relaxed);
            }
        }
    }

    fn release(&self, c: &Contents) {
        if c.id == 0 {
            return;
        }
        assert_eq!(c.id, ID);
        self.counter.fetch_sub(c.bytes + c.api, Relaxed);
        for (k, d) in c.deltas() {
            assert_eq!(k, IDX.0 as usize);
            self.stat.fetch_add(d as i64, Relaxed);
        }
    }

    /// After both threads ended: the counter and the stat add up (module docs), for `live`
    /// bytes of live objects (`ID`'s and `DEAD`'s), `dead_live` of them `DEAD`'s; the refs
    /// on `DEAD` are its live bytes plus what the stock's entries still owe.
    fn check(&self, live: u64, dead_live: u64) {
        let s = &self.stock;
        let held: u64 = (0..crate::stock::NR_SLOTS)
            .map(|i| s.bytes[i].load(Relaxed) + s.api[i].load(Relaxed))
            .sum();
        assert_eq!(
            self.counter.load(Relaxed),
            live + held,
            "bytes lost or counted twice"
        );
        // The stock's cached delta and owed refs, taken as the owner would give them back.
        assert!(s.enter());
        let taken = s.take_all();
        s.leave();
        let cached: i64 = taken
            .slots
            .iter()
            .flat_map(|c| c.deltas().map(|(_, d)| d as i64).collect::<Vec<_>>())
            .sum();
        assert_eq!(
            self.stat.load(Relaxed) + cached,
            live as i64,
            "a stat delta lost or counted twice"
        );
        let owed: u64 = taken.owed.refs.iter().sum();
        assert_eq!(
            self.dead_refs.load(Relaxed),
            dead_live + owed,
            "a ref on the dead objcg lost or put twice"
        );
    }
}

/// The owner charges, uncharges and charges again (hits while its slot lasts, direct
/// charges once a drain took it) while a drainer drains its stock once.
#[test]
fn loom_byte_stock_drain_races_owner() {
    model(|| {
        let w = World::new();
        let d = {
            let w = w.clone();
            thread::spawn(move || w.drain())
        };
        w.charge(30);
        w.uncharge(20);
        w.charge(40);
        d.join().unwrap();
        w.check(50, 0);
    });
}

/// Two drains in a row against two charges: the second drain finds the stock the first
/// one emptied (and unlisted), and must neither wait forever nor take anything.
#[test]
fn loom_byte_stock_two_drains() {
    model(|| {
        let w = World::new();
        let d = {
            let w = w.clone();
            thread::spawn(move || {
                w.drain();
                w.drain();
            })
        };
        w.charge(30);
        w.charge(40);
        d.join().unwrap();
        w.check(70, 0);
    });
}

/// The owner frees two of a dead child's objects (the uncharge fast path forwards them to
/// the parent's slot through the entry, in one CS) around a charge, while a drainer takes the
/// slots and the entries: every freed byte leaves the counter once (through the slot the
/// drainer gives back, or directly), every ref on the dead objcg is put once (by the drainer
/// for what the entry owed when taken, directly for a free after), and the stat adds up.
#[test]
fn loom_forwarded_frees_race_a_drain() {
    model(|| {
        let w = World::with_dead();
        let d = {
            let w = w.clone();
            thread::spawn(move || w.drain())
        };
        w.free_dead(20);
        w.charge(30);
        w.free_dead(5);
        d.join().unwrap();
        w.check(30 + DEAD_LIVE - 25, DEAD_LIVE - 25);
    });
}
