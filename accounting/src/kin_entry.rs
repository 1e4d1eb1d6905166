//! A thread's cached counts on a few parent tenants (`kin_cache.rs` has the protocol): per
//! parent, the word the births, deaths and node drops of its children update on their own
//! thread instead of the parent's shared counts, as the kernel's `percpu_ref` counts on
//! per-CPU words until it is killed ([`KinEntry`]), and the thread's `WAYS` of them with
//! what decides which parents they cache ([`KinCache`]).
//!
//! The word: `id | births - deaths << 32 | adopted << 44 | credits << 54`, where `id` is
//! the parent's objcg id (0: the entry is empty; 1 for the root, whose id is 0),
//! `births - deaths` (signed, 12 bits) the children born here minus those that died here,
//! not yet added to the parent's `kin.handles`, `adopted` (signed, 10 bits) the objcgs
//! re-pointed to the parent here minus those a zombie sweep uncounted here, not yet added
//! to `kin.adopted`, and `credits` (10 bits) strong references on the parent's `Arc` that
//! this entry holds and hands to the births and re-pointings (and takes back from node
//! drops and sweeps). Every field stays in its range: an update that would leave it fails,
//! and the caller takes the shared path.
//!
//! Only the owner thread updates a non-empty word's counts (compare-and-swap on its own
//! line, uncontended); another thread only empties it (a sweep, under the registry lock),
//! with a swap whose result it then applies. So a failed compare-and-swap means the entry
//! was emptied.

use crate::sys::sync::{
    AtomicPtr, AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

use crate::types::ObjCgId;

const D_SHIFT: u32 = 32;
const D_BITS: u32 = 12;
const A_SHIFT: u32 = D_SHIFT + D_BITS;
const A_BITS: u32 = 10;
const S_SHIFT: u32 = A_SHIFT + A_BITS;
const S_BITS: u32 = 10;
const _: () = assert!(S_SHIFT + S_BITS == 64);

/// The most strong references an entry holds.
pub(crate) const CREDITS_MAX: u32 = (1 << S_BITS) - 1;

/// One field of the word: its shift, width and whether it is signed.
#[derive(Clone, Copy)]
struct Field(u32, u32, bool);

const D: Field = Field(D_SHIFT, D_BITS, true);
const A: Field = Field(A_SHIFT, A_BITS, true);
const S: Field = Field(S_SHIFT, S_BITS, false);

impl Field {
    fn get(self, w: u64) -> i64 {
        let Field(shift, bits, signed) = self;
        let raw = (w >> shift) & ((1 << bits) - 1);
        if signed {
            // Sign-extend the field.
            ((raw << (64 - bits)) as i64) >> (64 - bits)
        } else {
            raw as i64
        }
    }

    /// `w` with this field moved by `by`, or None when the result leaves its range.
    fn add(self, w: u64, by: i64) -> Option<u64> {
        let Field(shift, bits, signed) = self;
        let v = self.get(w) + by;
        let (lo, hi) = if signed {
            (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
        } else {
            (0, (1i64 << bits) - 1)
        };
        if v < lo || v > hi {
            return None;
        }
        let mask = ((1u64 << bits) - 1) << shift;
        Some((w & !mask) | (((v as u64) << shift) & mask))
    }
}

fn id_of(w: u64) -> ObjCgId {
    w as u32
}

/// What an owner does to the counts of the entry caching a parent ([`KinEntry::apply`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum KinOp {
    /// A child is born here: one more birth, one credit spent on its reference to its
    /// parent.
    Birth,
    /// A child died here (after its objcg was re-pointed, `Adopt`), or a birth was undone
    /// (the child never lived): one birth less.
    Death,
    /// A dying child's objcg is re-pointed to the parent and counted there, with a credit
    /// spent on the objcg's reference.
    Adopt,
    /// A zombie objcg that pointed at the parent was uncounted here, and its reference on
    /// the parent comes back as a credit.
    Unadopt,
    /// A strong reference on the parent comes back to the entry.
    GiveCredit,
    /// The owner took this many strong references on the parent.
    AddCredits(u32),
}

impl KinOp {
    /// The word after this update, or None when a count would leave its range.
    #[inline]
    fn step(self, w: u64) -> Option<u64> {
        match self {
            KinOp::Birth => D.add(S.add(w, -1)?, 1),
            KinOp::Death => D.add(w, -1),
            KinOp::Adopt => A.add(S.add(w, -1)?, 1),
            KinOp::Unadopt => S.add(A.add(w, -1)?, 1),
            KinOp::GiveCredit => S.add(w, 1),
            KinOp::AddCredits(n) => S.add(w, i64::from(n)),
        }
    }
}

/// What an emptied entry held, for the registry's owner to add to the parent
/// (`drain::release_kin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KinTaken {
    /// The parent's node, a pointer from `Arc::as_ptr` (`into_raw`'s provenance; as
    /// `*const u8`: this layer does
    /// not know nodes).
    pub(crate) node: *const u8,
    pub(crate) births: i64,
    pub(crate) adopted: i64,
    pub(crate) credits: u32,
}

/// A thread's entry (module docs). Lives in the thread's `Stock`, so that the stock
/// registry's walks, exit and fork handling reach it.
pub(crate) struct KinEntry {
    word: AtomicU64,
    /// The parent's node (from `Arc::as_ptr`), set by the owner under the registry lock
    /// before it makes the word non-empty; read with the word.
    node: AtomicPtr<u8>,
}

impl KinEntry {
    pub(crate) const fn new() -> KinEntry {
        KinEntry {
            word: AtomicU64::new(0),
            node: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The objcg id of the parent whose counts the entry caches (1 for the root; 0: none).
    pub(crate) fn id(&self) -> ObjCgId {
        id_of(self.word.load(Relaxed))
    }

    /// The word, when the entry caches the parent whose node is `node`. Keyed by the node
    /// rather than the id: a node drop or a zombie sweep may name a parent that died
    /// meanwhile, whose id another tenant may have now, while the node of a parent with an
    /// entry is alive (`kin_cache.rs`).
    #[inline]
    fn word_for(&self, node: *const u8) -> Option<u64> {
        let w = self.word.load(Relaxed);
        // Only the owner installs (node, then the word), so while this thread runs here the
        // node matches the word it loaded, or the word is emptied under it (an exchange
        // from it then fails).
        (id_of(w) != 0 && core::ptr::eq(self.node.load(Relaxed), node)).then_some(w)
    }

    /// Applies `op` to the counts if the entry caches the parent whose node is `node`;
    /// false (nothing changed) when it does not, when a count would leave its range, or
    /// when a sweep emptied it. (The owner goes through [`KinCache::apply`]; the unit tests
    /// through this.)
    #[cfg(test)]
    fn apply(&self, node: *const u8, op: KinOp) -> bool {
        self.word_for(node).is_some_and(|w| self.step(w, op))
    }

    /// Replaces the loaded word `w` by `op`'s.
    #[inline]
    fn step(&self, w: u64, op: KinOp) -> bool {
        let Some(n) = op.step(w) else { return false };
        // AcqRel: the sweep that empties the word later (Acquire on its swap) sees what this
        // thread did before (the child it built, the objcg it re-pointed).
        self.word.compare_exchange(w, n, AcqRel, Relaxed).is_ok()
    }

    /// The credits the entry holds for `node` (None when it caches another parent or none).
    #[cfg(test)]
    fn credits(&self, node: *const u8) -> Option<u32> {
        self.word_for(node).map(|w| S.get(w) as u32)
    }

    /// The adopted objcgs the entry counts, not yet in its parent's shared count (tests).
    #[cfg(test)]
    pub(crate) fn adopted(&self) -> isize {
        A.get(self.word.load(Relaxed)) as isize
    }

    /// Makes the empty entry cache parent `id` (whose node is `node`) with `credits` strong
    /// references. The owner only, under the registry lock.
    pub(crate) fn install(&self, id: ObjCgId, node: *const u8, credits: u32) {
        debug_assert!(credits <= CREDITS_MAX);
        debug_assert_eq!(self.id(), 0, "installed over a cached parent");
        self.node.store(node as *mut u8, Relaxed);
        // The id only marks the entry taken (the node is the key): the root's, 0, as 1.
        let w = u64::from(id.max(1)) | (u64::from(credits) << S_SHIFT);
        self.word.store(w, Release);
    }

    /// Empties the entry and returns what it held (None when it was empty). Under the
    /// registry lock (a sweep, the owner's eviction or exit), or in a fork child.
    pub(crate) fn take(&self) -> Option<KinTaken> {
        if self.id() == 0 {
            return None;
        }
        let w = self.word.swap(0, Acquire);
        (id_of(w) != 0).then(|| KinTaken {
            node: self.node.load(Relaxed) as *const u8,
            births: D.get(w),
            adopted: A.get(w),
            credits: S.get(w) as u32,
        })
    }
}

/// Parents a thread caches the counts of at once: a worker serving the requests of a few
/// customers in turn caches each.
pub(crate) const WAYS: usize = 4;
/// Slots of the install hysteresis (`KinCache::note_birth`).
const SEEN: usize = 16;

/// The slot of `node` in the install hysteresis' table: nodes are 8-aligned and large, so
/// the bits above the low ones, mixed.
fn seen_slot(node: *const u8) -> usize {
    ((node.addr() >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) % SEEN
}

/// A thread's kin entries, one per parent it caches ([`WAYS`]), and what decides which
/// parents: births counted per recent parent, in a small direct-mapped table (a parent
/// among many that each get a birth now and then keeps losing its slot and never gets an
/// entry).
pub(crate) struct KinCache {
    ways: [KinEntry; WAYS],
    /// The node each slot counts births of, and the count. Owner only (atomics only
    /// because the stock is shared).
    seen: [AtomicPtr<u8>; SEEN],
    counts: [AtomicU32; SEEN],
    /// The way an install takes next when every way is taken (round robin). Owner only.
    victim: AtomicU32,
}

impl KinCache {
    pub(crate) const fn new() -> KinCache {
        KinCache {
            ways: [const { KinEntry::new() }; WAYS],
            seen: [const { AtomicPtr::new(core::ptr::null_mut()) }; SEEN],
            counts: [const { AtomicU32::new(0) }; SEEN],
            victim: AtomicU32::new(0),
        }
    }

    /// The entry caching `node` and its word, if one does.
    #[inline]
    fn way(&self, node: *const u8) -> Option<(&KinEntry, u64)> {
        self.ways.iter().find_map(|e| Some((e, e.word_for(node)?)))
    }

    /// Whether an entry caches the parent whose node is `node`.
    pub(crate) fn holds(&self, node: *const u8) -> bool {
        self.way(node).is_some()
    }

    /// [`KinEntry::apply`] in the entry caching `node`: false when none does, a count would
    /// leave its range, or a sweep emptied it.
    #[inline]
    pub(crate) fn apply(&self, node: *const u8, op: KinOp) -> bool {
        self.way(node).is_some_and(|(e, w)| e.step(w, op))
    }

    /// The credits the entry caching `node` holds (None when none caches it).
    pub(crate) fn credits(&self, node: *const u8) -> Option<u32> {
        self.way(node).map(|(_, w)| S.get(w) as u32)
    }

    /// Counts a birth of parent `node` that took the shared path and returns how many its
    /// slot counted since it last changed hands. Owner only.
    pub(crate) fn note_birth(&self, node: *const u8) -> u32 {
        let h = seen_slot(node);
        if core::ptr::eq(self.seen[h].load(Relaxed), node) {
            let n = self.counts[h].load(Relaxed).saturating_add(1);
            self.counts[h].store(n, Relaxed);
            n
        } else {
            self.seen[h].store(node as *mut u8, Relaxed);
            self.counts[h].store(1, Relaxed);
            1
        }
    }

    /// Empties the way an install of `node` takes (the one caching it already, else an
    /// empty one, else the next in turn) and returns it with what it held. The owner only,
    /// under the registry lock.
    pub(crate) fn take_for_install(&self, node: *const u8) -> (usize, Option<KinTaken>) {
        let named = self.ways.iter().position(|e| e.word_for(node).is_some());
        let empty = || self.ways.iter().position(|e| e.id() == 0);
        let i = named.or_else(empty).unwrap_or_else(|| {
            let v = self.victim.load(Relaxed) as usize % WAYS;
            self.victim.store((v + 1) as u32, Relaxed);
            // The evicted parent starts counting again: with more parents in turn than
            // ways, each would otherwise evict another at every birth.
            let old = self.ways[v].node.load(Relaxed) as *const u8;
            let h = seen_slot(old);
            if core::ptr::eq(self.seen[h].load(Relaxed), old) {
                self.counts[h].store(0, Relaxed);
            }
            v
        });
        (i, self.ways[i].take())
    }

    /// [`KinEntry::install`] into way `i` (emptied by
    /// [`take_for_install`](Self::take_for_install)).
    pub(crate) fn install(&self, i: usize, id: ObjCgId, node: *const u8, credits: u32) {
        self.ways[i].install(id, node, credits);
    }

    /// Empties the entry caching `node`, if one does (a kill's sweep, under the registry
    /// lock).
    pub(crate) fn take_of(&self, node: *const u8) -> Option<KinTaken> {
        self.way(node)?.0.take()
    }

    /// Empties every entry (thread exit under the registry lock, or a fork child).
    pub(crate) fn take_all(&self) -> [Option<KinTaken>; WAYS] {
        core::array::from_fn(|i| self.ways[i].take())
    }

    /// The births minus deaths the entry caching `node` counts (tests).
    #[cfg(test)]
    pub(crate) fn births_of(&self, node: *const u8) -> i64 {
        self.way(node).map_or(0, |(_, w)| D.get(w))
    }

    /// The adopted objcgs the entry caching `node` counts (tests).
    #[cfg(test)]
    pub(crate) fn adopted_of(&self, node: *const u8) -> isize {
        self.way(node).map_or(0, |(e, _)| e.adopted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_stay_in_range_and_apart() {
        let (p, q) = (
            core::ptr::without_provenance::<u8>(0x1000),
            core::ptr::without_provenance::<u8>(0x2000),
        );
        let e = KinEntry::new();
        assert!(!e.apply(p, KinOp::Birth), "an empty entry caches nothing");
        e.install(7, p, 3);
        assert!(!e.apply(q, KinOp::Birth), "another parent");
        for _ in 0..3 {
            assert!(e.apply(p, KinOp::Birth));
        }
        assert!(!e.apply(p, KinOp::Birth), "no credit left");
        assert!(e.apply(p, KinOp::AddCredits(CREDITS_MAX - 1)));
        assert!(e.apply(p, KinOp::GiveCredit));
        assert_eq!(e.credits(p), Some(CREDITS_MAX));
        assert!(!e.apply(p, KinOp::GiveCredit), "credits full");
        for _ in 0..5 {
            assert!(e.apply(p, KinOp::Adopt) && e.apply(p, KinOp::Death));
        }
        for _ in 0..7 {
            assert!(e.apply(p, KinOp::Unadopt));
            assert!(e.apply(p, KinOp::Adopt) && e.apply(p, KinOp::Death));
        }
        let t = e.take().unwrap();
        assert_eq!(t.node, p);
        assert_eq!((t.births, t.adopted), (3 - 12, 5));
        assert_eq!(t.credits, CREDITS_MAX - 5);
        assert_eq!(e.take(), None);
        assert!(!e.apply(p, KinOp::GiveCredit), "emptied");
        // The signed ends.
        e.install(9, q, 0);
        let mut n = 0;
        while e.apply(q, KinOp::Death) {
            n += 1;
        }
        assert_eq!(n, 1 << (D_BITS - 1));
        assert!(!e.apply(q, KinOp::Death));
        let t = e.take().unwrap();
        assert_eq!(t.births, -(1 << (D_BITS - 1)));
        assert_eq!((t.adopted, t.credits), (0, 0));
        // A sweep here may uncount what a death on another thread counted.
        e.install(9, q, 0);
        assert!(e.apply(q, KinOp::Unadopt));
        assert_eq!(e.take().unwrap().adopted, -1);
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    fn at(a: usize) -> *const u8 {
        core::ptr::without_provenance(a)
    }

    #[test]
    fn ways_hold_several_parents_and_installs_take_turns() {
        let c = KinCache::new();
        for k in 1..=WAYS {
            let (i, old) = c.take_for_install(at(k << 12));
            assert_eq!((i, old), (k - 1, None), "an empty way first");
            c.install(i, k as u32, at(k << 12), 2);
        }
        for k in 1..=WAYS {
            assert!(c.apply(at(k << 12), KinOp::Birth) && c.holds(at(k << 12)));
        }
        // Full: the next parent takes the ways in turn, folding what they held.
        let (i, old) = c.take_for_install(at(99 << 12));
        assert_eq!(i, 0);
        assert_eq!(
            old.map(|t| (t.node, t.births, t.credits)),
            Some((at(1 << 12), 1, 1))
        );
        c.install(i, 99, at(99 << 12), 5);
        assert!(!c.holds(at(1 << 12)) && c.holds(at(99 << 12)));
        // A parent cached already keeps its way (a refresh folds and installs it again).
        let (i, old) = c.take_for_install(at(99 << 12));
        assert_eq!((i, old.map(|t| t.credits)), (0, Some(5)));
        c.install(i, 99, at(99 << 12), 5);
        // An emptied way comes before the next in turn (1).
        assert!(c.take_of(at(4 << 12)).is_some());
        let (i, old) = c.take_for_install(at(98 << 12));
        assert_eq!((i, old), (3, None));
        c.install(i, 98, at(98 << 12), 0);
        // Full again: the turn goes on at 1.
        let (i, old) = c.take_for_install(at(97 << 12));
        assert_eq!((i, old.map(|t| t.node)), (1, Some(at(2 << 12))));
        let all = c.take_all();
        assert_eq!(all.iter().flatten().count(), WAYS - 1);
    }

    #[test]
    fn births_are_counted_per_recent_parent() {
        let c = KinCache::new();
        let (p, q) = (at(0x1000), at(0x2000));
        assert_ne!(seen_slot(p), seen_slot(q));
        assert_eq!(
            (c.note_birth(p), c.note_birth(p), c.note_birth(q)),
            (1, 2, 1)
        );
        assert_eq!(
            c.note_birth(p),
            3,
            "two parents in distinct slots keep their counts"
        );
        // A parent evicted in its turn counts again from 0 (else, with more parents in turn
        // than ways, each would evict another at every birth).
        let install = |n: *const u8| {
            let (i, _) = c.take_for_install(n);
            c.install(i, 1, n, 0);
        };
        for k in 0..WAYS {
            install(at((k + 1) << 20));
        }
        install(p);
        for k in 0..WAYS {
            install(at((k + 50) << 20));
        }
        assert!(!c.holds(p), "evicted in its turn");
        assert_eq!(c.note_birth(p), 1, "its count started again");
    }
}
