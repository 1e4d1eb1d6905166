//! Loom models of the object-stock protocol (`object_stock.rs`), running the real code: an
//! `ObjectStock` and a thread cache's lines built inside the model, the owner's fast paths
//! (`ObjectStock::push`, which checks the tag before the push; `ObjectStock::pop` and
//! `pop_class`, which check it after the pop and its `light_barrier`, and `Bin::unpop` on a
//! mismatch; the claim of a stale slot is the model's copy of `ThreadCache::claim_stale`), its
//! ways back (`reclaim_take`, a retag's `take_bins` + `set_tag`, `take_half` when a free finds
//! the bin full, `take_own` at exit), and a drainer's passes on that stock (`request_steal`,
//! the remote barrier, `record`, the second barrier, `recheck`). Under loom both barriers
//! are `SeqCst` fences (what membarrier guarantees: a full barrier on every running thread,
//! between the owner's bin store and its load of the tag), and the `stock` lock is the real
//! spin lock on loom's atomics.
//!
//! What stays a model: the tenants' charges (two loom atomics: the objects charged to A
//! and to B), which the real paths keep in the byte stock (`hooks::charge`/`uncharge`); the
//! slow paths around the protocol (`free_small_uncharging` uncharges and settles,
//! `alloc_small_charging` charges a fresh slot, `note_miss` retags at once instead of after
//! `RETAG_AFTER` misses, without `note_retag`'s budget and armed-list bookkeeping); the
//! armed list and the walk over threads (`object_stock::drain`); one size class; the
//! no-barrier branches.
//!
//! Each scenario runs twice: with the objects in a size class's tagged bin, and in a
//! dedicated cache's front kept bin (`FrontBin::kept`, found by a drainer through the
//! stock's `kept_mask`, its count recorded in `front_rec`, taken into `Taken::fronts`); the
//! front's core is a `SlabCache` of the world's whose counts the take adjusts and nothing
//! else reads, so a front's retag (`retag_front`, `give_back_kept`'s owner words and flush)
//! stays out of the model.
//!
//! Checked in every execution:
//! - no live object is ever uncharged (`charged >= live` after every step of the owner,
//!   while the drainer runs), so no correction ever has to charge;
//! - whenever the owner takes its bins, it finds at least what a drainer uncharged;
//! - after both threads end, one more drain (the quiescent case) leaves each tenant charged
//!   with exactly its live objects, and so does the owner settling after it; no slot is
//!   lost or in two places.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p slabcg-allocator --lib --release loom`
//! (`LOOM_MAX_PREEMPTIONS=3` in `.ci/run`).

use core::cell::UnsafeCell;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;
use slabcg_accounting::hooks::{self, ObjCgId};

use crate::bin::{new_lines, Bin};
use crate::cache::SlabCache;
use crate::class_caches::class_layout;
use crate::front::{FrontBin, FRONTS};
use crate::object_stock::{Count, Lines, ObjectStock, Pop, Taken, Uncharge, NO_TAG};
use crate::size_class::Kind;
use crate::size_class::NUM_CLASSES;
use crate::slab::FreeObj;
use crate::sys::sync::model;
use crate::sys::sync::Ordering::Relaxed;

const A: ObjCgId = 7;
const B: ObjCgId = 9;
/// The one size class the owner uses.
const C: usize = 0;
/// Capacity of its tagged bin.
const MAX: u32 = 2;
/// Slots in the model.
const SLOTS: usize = 4;
/// The front index whose kept bin the front variant uses.
const K: usize = 3;

/// Where the owner keeps its charged free slots.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Where {
    /// Class `C`'s tagged bin.
    Class,
    /// Front `K`'s kept bin.
    Front,
}

/// A scenario (a function of [`Where`]) as two tests: `$class` with the objects in a size
/// class's tagged bin, `$front` in a front's kept bin.
macro_rules! both {
    ($scenario:ident: $class:ident, $front:ident) => {
        #[test]
        fn $class() {
            model(|| $scenario(Where::Class));
        }

        #[test]
        fn $front() {
            model(|| $scenario(Where::Front));
        }
    };
}

/// One thread's object stock, lines and fronts, the slots, and the tenants' charged objects.
struct World {
    stock: ObjectStock,
    lines: Lines,
    fronts: [FrontBin; FRONTS + 1],
    /// The front's core (its `charged` count is all the model's paths touch).
    core: SlabCache,
    at: Where,
    slots: [UnsafeCell<FreeObj>; SLOTS],
    charged_a: AtomicU64,
    charged_b: AtomicU64,
}

// SAFETY: what the real code shares of a thread cache with drainers: the drainer reaches
// only the stock's atomics, its lock and the bins' counts (`object_stock.rs`); the
// `Cell`s and the slots' memory are the owner's (the model's owner thread, then the main
// thread after joining it).
unsafe impl Sync for World {}
// SAFETY: as above.
unsafe impl Send for World {}

/// The owner thread's own view: its live objects and its uncharged free slots.
struct Owner {
    w: Arc<World>,
    live: Vec<(*mut u8, ObjCgId)>,
    spare: Vec<*mut u8>,
}

impl World {
    /// A stock tagged A with an empty bin at `at` (capacity `MAX`, unless a model sets its
    /// own), `a` live objects of A and `b` of B, all charged, and the other slots spare.
    fn build(a: usize, b: usize, at: Where) -> Owner {
        let w = Arc::new(World {
            stock: ObjectStock::new(),
            lines: new_lines(),
            fronts: [const { FrontBin::new() }; FRONTS + 1],
            core: SlabCache::new(class_layout(C, Kind::Accounted), 0, true),
            at,
            slots: core::array::from_fn(|_| UnsafeCell::new(FreeObj::unlinked())),
            charged_a: AtomicU64::new(a as u64),
            charged_b: AtomicU64::new(b as u64),
        });
        w.stock.attach(&w.lines);
        w.stock.attach_fronts(&w.fronts);
        if at == Where::Front {
            // As `open_kept` does for an accounted core: the mask's bit, then the capacity;
            // the class's tagged bin gets none.
            w.fronts[K].tag_for_model(&w.core as *const SlabCache as *mut SlabCache);
            w.stock.set_kept_bit(K);
            w.lines[C].tagged.set_capacity(0);
        }
        w.bin().set_capacity(MAX);
        {
            let _d = w.stock.lock();
            w.stock.set_tag(A);
        }
        // Make what both threads race on before sharing (`slabcg_sys::sync`): the tag, the
        // lock (taken above) and the class's tagged count.
        w.stock.tag.load(Relaxed);
        w.lines[C].tagged.count();
        w.fronts[K].kept.count();
        let p = |i: usize| w.slots[i].get() as *mut u8;
        let live = (0..a)
            .map(|i| (p(i), A))
            .chain((a..a + b).map(|i| (p(i), B)))
            .collect();
        let spare = (a + b..SLOTS).map(p).collect();
        Owner {
            w: w.clone(),
            live,
            spare,
        }
    }

    /// The bin the owner keeps charged slots in.
    fn bin(&self) -> &Bin {
        match self.at {
            Where::Class => &self.lines[C].tagged,
            Where::Front => &self.fronts[K].kept,
        }
    }

    fn charged(&self, t: ObjCgId) -> &AtomicU64 {
        match t {
            A => &self.charged_a,
            B => &self.charged_b,
            _ => panic!("objects of tenant {t}"),
        }
    }

    /// Uncharges what a drainer's pass found (`Uncharge::apply`).
    fn apply(&self, u: &Uncharge) {
        if u.tenant == 0 {
            return;
        }
        assert!((0..NUM_CLASSES).all(|c| c == C || u.counts[c] == 0));
        let mut n = u.counts[C];
        for (i, (k, _)) in u.fronts.iter() {
            assert_eq!(i, K, "a drainer counted a front the owner never opened");
            n += k;
        }
        self.charged(u.tenant).fetch_sub(n.into(), Relaxed);
    }

    /// A drain of this (another thread's) stock, as `object_stock::drain` runs its passes
    /// on each: steal, barrier, record, second barrier, recheck.
    fn drain(&self) {
        self.stock.request_steal();
        let remote = hooks::remote_barrier();
        let (u, drained) = self.stock.record(remote);
        self.apply(&u);
        let recheck = drained && remote && hooks::remote_barrier();
        let u = self.stock.recheck(recheck, false);
        self.apply(&u);
    }

    fn charged_now(&self) -> (u64, u64) {
        (self.charged_a.load(Relaxed), self.charged_b.load(Relaxed))
    }
}

impl Owner {
    fn count(&self, t: ObjCgId) -> u64 {
        self.live.iter().filter(|&&(_, o)| o == t).count() as u64
    }

    /// No live object uncharged (module docs).
    fn check_not_undercharged(&self) {
        let (a, b) = self.w.charged_now();
        assert!(a >= self.count(A), "a live A object uncharged");
        assert!(b >= self.count(B), "a live B object uncharged");
    }

    /// `free_small` of the `i`-th live object: kept in the tagged bin when its owner is the
    /// tag (`ObjectStock::push`); when that bin (a class's) is full, its newest half is
    /// taken (`ObjectStock::take_half`, which `give_back_full` runs) and given back, and the
    /// push tried again (the real path does so for bins of `GIVE_BACK_MIN` slots or more;
    /// the model's holds `MAX`); else uncharged (`free_small_uncharging`), which settles
    /// when a drainer has been here.
    fn free(&mut self, i: usize) {
        let (p, owner) = self.live.remove(i);
        let w = self.w.clone();
        let bin = w.bin();
        // SAFETY: p is a live slot of class C charged to `owner`, given up here.
        let mut kept = unsafe { w.stock.push(bin, owner, p) };
        if !kept
            && w.at == Where::Class
            && w.stock.keeps(owner)
            && bin.capacity() != 0
            && bin.count() >= bin.capacity()
        {
            if let Some(t) = w.stock.take_half(&w.lines, C) {
                self.give_back(&t);
                // SAFETY: as above.
                kept = unsafe { w.stock.push(bin, owner, p) };
            }
        }
        if !kept {
            w.charged(owner).fetch_sub(1, Relaxed);
            self.spare.push(p);
            if w.stock.must_reclaim() {
                self.settle();
            }
        }
        self.check_not_undercharged();
    }

    /// `alloc_small` under `cg`: a tagged slot when the check after the pop agrees
    /// (`ObjectStock::pop`; a class's bin: `pop_class`, whose refused slot is kept when the
    /// tag, read again, is `cg`, as `ThreadCache::claim_stale` keeps a slot below the stale
    /// mark), else the pop put back (`Bin::unpop`), a fresh slot charged, and the miss noted.
    fn alloc(&mut self, cg: ObjCgId) {
        let w = self.w.clone();
        let popped = match w.at {
            Where::Class => {
                let line = &w.lines[C];
                match w.stock.pop_class(&line.tagged, &line.stale, cg) {
                    Pop::Foreign(p) if w.stock.tag.load(Relaxed) == u64::from(cg) => {
                        // `ClassBins::claim`'s mark (the model's slots have no owner words
                        // to write): from the second claim, some slots claimed ahead.
                        let n = line.tagged.count();
                        if n < line.stale.get() {
                            let k = line.claim_reach(n);
                            line.stale.set(n - k);
                        }
                        Pop::Hit(p)
                    }
                    other => other,
                }
            }
            Where::Front => w.stock.pop(w.bin(), cg),
        };
        let p = match popped {
            Pop::Hit(p) => p,
            other => {
                if let Pop::Foreign(p) = other {
                    // SAFETY: p is what the pop just returned.
                    unsafe { w.bin().unpop(p) };
                }
                w.charged(cg).fetch_add(1, Relaxed);
                let p = self.spare.pop().expect("a spare slot");
                if w.stock.tag.load(Relaxed) != u64::from(cg) {
                    self.note_miss(cg);
                }
                p
            }
        };
        self.live.push((p, cg));
        self.check_not_undercharged();
    }

    /// A bulk free (`Keep` in `bulk.rs`) of the first `n` live objects: those whose owner is
    /// the tag read at the start, while there is room, linked into a chain and pushed with
    /// `ObjectStock::push_chain` (which reads the tag again); the others, and the whole
    /// chain when the push is refused, uncharged.
    fn free_many(&mut self, n: usize) {
        let w = self.w.clone();
        let tag = w.stock.tag_word();
        let bin = w.bin();
        let room = bin.capacity() - bin.count();
        let (mut head, mut tail, mut k) =
            (core::ptr::null_mut::<FreeObj>(), core::ptr::null_mut(), 0);
        let mut chained = Vec::new();
        for (p, owner) in self.live.drain(..n).collect::<Vec<_>>() {
            if u64::from(owner) == tag && k < room {
                let o = p as *mut FreeObj;
                // SAFETY: p is a live slot given up here; its first word becomes the link.
                unsafe { FreeObj::set_next(o, head) };
                if head.is_null() {
                    tail = o;
                }
                head = o;
                k += 1;
                chained.push((p, owner));
            } else {
                w.charged(owner).fetch_sub(1, Relaxed);
                self.spare.push(p);
            }
        }
        // SAFETY: k slots of the bin's class linked head to tail, charged to the tag's tenant,
        // with room, none the bin's head (the bin's slots are not live).
        if k > 0 && !unsafe { w.stock.push_chain(bin, tag, head, tail, k) } {
            for (p, owner) in chained {
                w.charged(owner).fetch_sub(1, Relaxed);
                self.spare.push(p);
            }
            if w.stock.must_reclaim() {
                self.settle();
            }
        }
        self.check_not_undercharged();
    }

    /// A bulk allocation of `n` under `cg`: the kept slots `ObjectStock::pop_many` takes
    /// with one check after its pops (put back, all of them, when it fails), the rest fresh
    /// slots charged.
    fn alloc_many(&mut self, cg: ObjCgId, n: usize) {
        let w = self.w.clone();
        let mut out = [core::ptr::null_mut(); 2];
        let k = w.stock.pop_many(w.bin(), cg, &mut out[..n]);
        assert!(
            out[k..n].iter().all(|p| p.is_null()),
            "a put-back left an entry"
        );
        for &p in &out[..k] {
            self.live.push((p, cg));
        }
        for _ in k..n {
            w.charged(cg).fetch_add(1, Relaxed);
            let p = self.spare.pop().expect("a spare slot");
            self.live.push((p, cg));
        }
        self.check_not_undercharged();
    }

    /// `note_miss`, retagging at once: under the lock, take the bins whatever a drainer did
    /// to them and tag for `cg` (`retag_giving_back`), then give them back.
    fn note_miss(&mut self, cg: ObjCgId) {
        let w = self.w.clone();
        let mut d = w.stock.lock();
        let taken = w.stock.take_bins(&w.lines, &mut d, Count::Trusted);
        w.stock.set_tag(cg);
        drop(d);
        self.give_back(&taken);
    }

    /// `reclaim`: take the bins back if a drainer has been here, and give them back.
    fn settle(&mut self) {
        let taken = self.w.stock.reclaim_take(&self.w.lines);
        self.give_back(&taken);
    }

    /// `give_back_own` (thread exit): take the bins whatever a drainer did.
    fn exit(&mut self) {
        let taken = self.w.stock.take_own(&self.w.lines);
        self.give_back(&taken);
        self.check_not_undercharged();
    }

    /// `give_back`: uncharge what a drainer did not (`Taken::left`), keep the slots.
    fn give_back(&mut self, t: &Taken) {
        assert!((0..NUM_CLASSES).all(|c| c == C || t.chains[c].1 == 0));
        let fronts: Vec<_> = t.fronts.iter().collect();
        let (mut o, n, rec) = match self.w.at {
            Where::Class => {
                assert!(fronts.is_empty(), "kept slots of a front never opened");
                (t.chains[C].0, t.chains[C].1, t.rec[C])
            }
            Where::Front => {
                assert_eq!(t.chains[C].1, 0, "objects in a closed tagged bin");
                match fronts[..] {
                    [] => (core::ptr::null_mut(), 0, 0),
                    [(i, kc)] => {
                        assert_eq!(i, K);
                        (kc.head, kc.n, kc.rec)
                    }
                    _ => panic!("kept slots of a front never opened"),
                }
            }
        };
        assert!(
            n >= rec,
            "the owner found fewer objects than the drainer uncharged"
        );
        if t.tag == NO_TAG {
            assert_eq!(n, 0, "objects in an untagged bin");
            return;
        }
        let tenant = (t.tag & u64::from(u32::MAX)) as ObjCgId;
        self.w.charged(tenant).fetch_sub((n - rec).into(), Relaxed);
        for _ in 0..n {
            self.spare.push(o as *mut u8);
            // SAFETY: o is a free slot on the chain the owner just took.
            o = unsafe { FreeObj::next(o) };
        }
        assert!(o.is_null());
    }

    /// After both threads end: one more drain, at a quiescent point, must leave each tenant
    /// charged with exactly its live objects (what `current_exact()` promises); the owner
    /// settling then changes nothing, and every slot is live or spare, once.
    fn check_quiescent(&mut self) {
        let w = self.w.clone();
        w.drain();
        let exact = (self.count(A), self.count(B));
        assert_eq!(w.charged_now(), exact, "not exact after a quiescent drain");
        self.settle();
        assert_eq!(
            w.charged_now(),
            exact,
            "a settle after the drain changed it"
        );
        self.exit();
        assert_eq!(w.charged_now(), exact);
        let mut all: Vec<_> = self.live.iter().map(|&(p, _)| p).collect();
        all.extend(&self.spare);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), SLOTS, "a slot lost or in two places");
    }

    /// Runs `drains` drains on another thread while `f` runs here.
    fn race(&mut self, drains: usize, f: impl FnOnce(&mut Owner)) {
        let d = {
            let w = self.w.clone();
            thread::spawn(move || (0..drains).for_each(|_| w.drain()))
        };
        f(self);
        d.join().unwrap();
    }
}

/// The owner frees and allocates under A (kept in and taken from the bin when tagged A),
/// then allocates under B (which retags) and frees a B object, while a drainer drains.
fn drain_races_owner(at: Where) {
    // Two live objects of A, one of B, one spare slot.
    let mut o = World::build(2, 1, at);
    o.race(1, |o| {
        o.free(0);
        o.alloc(A);
        o.alloc(B);
        let i = o.live.iter().position(|&(_, t)| t == B).unwrap();
        o.free(i);
    });
    o.check_quiescent();
}

both!(drain_races_owner: loom_object_stock_drain_races_owner, loom_front_kept_drain_races_owner);

/// Two frees then an allocation under A while a drainer drains: a free that read the tag
/// before the drainer's request may push after the drainer counted, and the allocation's
/// check after its pop must not take an object the drainer uncharged.
fn drain_races_frees(at: Where) {
    let mut o = World::build(2, 0, at);
    o.race(1, |o| {
        o.free(0);
        o.free(0);
        o.alloc(A);
    });
    o.check_quiescent();
}

both!(drain_races_frees: loom_object_stock_drain_races_frees, loom_front_kept_drain_races_frees);

/// Three frees under A, the slots then marked stale (as a transfer to A leaves them), and
/// three allocations under A while a drainer drains: a pop refused for the mark claims its
/// slot after a second read of the tag, which must not take a slot the drainer uncharged;
/// the second claim also claims the last slot ahead, which the third allocation then pops
/// as a hit (checked after the pop like any other).
fn drain_races_stale_claims() {
    let mut o = World::build(3, 0, Where::Class);
    // Room for all three, so that the second claim has one to claim ahead.
    o.w.lines[C].tagged.set_capacity(3);
    o.free(0);
    o.free(0);
    o.free(0);
    let line = &o.w.lines[C];
    line.stale.set(line.tagged.count());
    line.claimed.set(false);
    o.race(1, |o| {
        o.alloc(A);
        o.alloc(A);
        o.alloc(A);
    });
    o.check_quiescent();
}

#[test]
fn loom_object_stock_drain_races_stale_claims() {
    model(drain_races_stale_claims);
}

/// Two frees then a bulk allocation of both under A while a drainer drains: the bulk's one
/// check after its two pops must not take an object the drainer uncharged, and puts both
/// back when it sees the drainer.
fn drain_races_bulk_alloc(at: Where) {
    let mut o = World::build(2, 0, at);
    o.race(1, |o| {
        o.free(0);
        o.free(0);
        o.alloc_many(A, 2);
    });
    o.check_quiescent();
}

both!(drain_races_bulk_alloc: loom_object_stock_drain_races_bulk_alloc, loom_front_kept_drain_races_bulk_alloc);

/// A bulk free of two A objects, then an allocation under A, while a drainer drains: the
/// chain is pushed only when the tag still reads A just before the push.
fn drain_races_bulk_free(at: Where) {
    let mut o = World::build(2, 0, at);
    o.race(1, |o| {
        o.free_many(2);
        o.alloc(A);
    });
    o.check_quiescent();
}

both!(drain_races_bulk_free: loom_object_stock_drain_races_bulk_free, loom_front_kept_drain_races_bulk_free);

/// Three frees under A, the third past the full bin (capacity 2), then an allocation, while
/// a drainer drains: the take of the bin's newest half under the lock, the give-back after
/// it and the push again must neither uncharge an object twice nor keep one uncharged.
fn drain_races_full_bin() {
    let mut o = World::build(3, 0, Where::Class);
    o.race(1, |o| {
        o.free(0);
        o.free(0);
        o.free(0);
        o.alloc(A);
    });
    o.check_quiescent();
}

#[test]
fn loom_object_stock_drain_races_full_bin() {
    model(drain_races_full_bin);
}

/// Two drains in a row against a free, an allocation and a free under A: the second drain
/// reads the counts of a thread the first one drained while the owner still runs.
fn two_drains_race_owner(at: Where) {
    let mut o = World::build(2, 0, at);
    o.race(2, |o| {
        o.free(0);
        o.alloc(A);
        o.free(0);
    });
    o.check_quiescent();
}

both!(two_drains_race_owner: loom_object_stock_two_drains_race_owner, loom_front_kept_two_drains_race_owner);

/// Thread exit (`give_back_own`) while a drainer drains: whichever goes first, the kept
/// object is uncharged exactly once and nothing is left tagged.
fn exit_races_drainer(at: Where) {
    let mut o = World::build(2, 0, at);
    o.race(1, |o| {
        o.free(0);
        o.exit();
    });
    let w = o.w.clone();
    // The drainer found the stock untagged, or drained it before the exit took it.
    assert_eq!(w.stock.tag.load(Relaxed), NO_TAG);
    assert_eq!(w.bin().count(), 0);
    assert_eq!(w.charged_now(), (1, 0));
}

both!(exit_races_drainer: loom_object_stock_exit_races_drainer, loom_front_kept_exit_races_drainer);
