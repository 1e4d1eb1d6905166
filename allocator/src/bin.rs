//! A bin: a thread's singly linked list of free slots of one cache, and the per-class line
//! that puts a class's plain bin, its object-stock bin and its owner geometry side by side.
//!
//! The same-thread fast paths are a pop from and a push onto a bin: no lock, no atomic
//! read-modify-write.
//!
//! Invariant of every bin (checked by [`Bin::check`]):
//! `count == |list from head|`, `count <= max` (`max` may drop below `count` only where the
//! owner closes the bin and empties it right after, at thread exit), and no slot on the list
//! twice.

use core::cell::Cell;
use core::ptr;

use slabcg_accounting::hooks::ObjCgId;

use crate::class_caches;
use crate::owner::OwnerGeom;
use crate::size_class::{Kind, NUM_CLASSES};
use crate::slab::FreeObj;
use crate::sys::sync::{AtomicPtr, AtomicU32, Ordering};

pub struct Bin {
    /// Relaxed atomics compile to plain moves. `count` is one because a drainer reads it from
    /// another thread (object-stock protocol, `object_stock.rs`). Only the owning thread
    /// touches `head` (and a fork child, for a thread that is gone); it is an atomic only
    /// because the struct is reachable from other threads through the registry.
    head: AtomicPtr<FreeObj>,
    count: AtomicU32,
    max: Cell<u32>,
}

impl Bin {
    pub(crate) const fn new() -> Bin {
        Bin {
            head: AtomicPtr::new(ptr::null_mut()),
            count: AtomicU32::new(0),
            max: Cell::new(0),
        }
    }

    /// Sets how many slots the bin may hold (its owner thread, off the fast paths).
    pub(crate) fn set_capacity(&self, n: u32) {
        self.max.set(n);
    }

    /// How many slots the bin may hold (0: closed, every push fails).
    pub(crate) fn capacity(&self) -> u32 {
        self.max.get()
    }

    /// Makes a chain of `count` slots from a refill the bin's list; the bin must be empty.
    pub(crate) fn fill(&self, head: *mut FreeObj, count: u32) {
        debug_assert_eq!(self.count(), 0);
        self.head.store(head, Ordering::Relaxed);
        self.count.store(count, Ordering::Relaxed);
    }

    /// Pops a slot, or returns null when the bin is empty.
    #[inline(always)]
    pub fn pop(&self) -> *mut u8 {
        let p = self.head.load(Ordering::Relaxed);
        if p.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: p heads this bin's list, so it is a free slot whose first word is the link
        // (invariant: count == |list|); it leaves the list here.
        unsafe {
            self.head.store(FreeObj::next(p), Ordering::Relaxed);
            FreeObj::clear_link(p);
        }
        self.count
            .store(self.count.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        p.cast()
    }

    /// Pops up to `out.len()` slots into `out`, head first, with one store of the head and
    /// one of the count; returns how many (the bulk calls' [`pop`](Self::pop)).
    #[inline]
    pub fn pop_many(&self, out: &mut [*mut u8]) -> usize {
        let n = self.count.load(Ordering::Relaxed);
        let k = (n as usize).min(out.len());
        let mut p = self.head.load(Ordering::Relaxed);
        let mut take = |slot: &mut *mut u8| {
            if p.is_null() {
                list_too_short();
            }
            // SAFETY: the list holds count >= k slots (invariant: count == |list|), each a free
            // slot whose first word links to the next; each leaves the list here.
            unsafe {
                let next = FreeObj::next(p);
                FreeObj::clear_link(p);
                *slot = p.cast();
                p = next;
            }
        };
        // Two slots a turn: one count, one compare and one branch for the two.
        let mut pairs = out[..k].chunks_exact_mut(2);
        for pair in &mut pairs {
            take(&mut pair[0]);
            take(&mut pair[1]);
        }
        pairs.into_remainder().iter_mut().for_each(take);
        self.head.store(p, Ordering::Relaxed);
        self.count.store(n - k as u32, Ordering::Relaxed);
        k
    }

    /// Pushes a slot, or returns false when the bin is full (or not initialised), or when
    /// `p` already heads the bin.
    ///
    /// A slot that already heads the bin is being freed twice (the commonest double free:
    /// the same pointer twice with no free of its class between). Pushing it would link it
    /// to itself, and every later allocation would hand it out again. The callers' slow
    /// paths report it ([`Bin::is_head`]); the compare is the only double-free check on the
    /// fast path, the flushes check the rest (`cache.rs`).
    ///
    /// # Safety
    /// `p` must be a slot of this bin's class that nobody uses any more.
    #[inline(always)]
    pub unsafe fn push(&self, p: *mut u8) -> bool {
        let n = self.count.load(Ordering::Relaxed);
        let o = p as *mut FreeObj;
        let head = self.head.load(Ordering::Relaxed);
        if n >= self.max.get() || o == head {
            return false;
        }
        // Hardened builds: a slot whose first word is a valid link is free already
        // (`link.rs`); confirm on the list before reporting. Nothing by default.
        #[cfg(feature = "hardened")]
        // SAFETY: the caller's slot is readable.
        unsafe {
            self.check_push(o)
        };
        // SAFETY: the caller hands us the slot; its first word becomes the link.
        unsafe { FreeObj::set_next(o, head) };
        self.head.store(o, Ordering::Relaxed);
        self.count.store(n + 1, Ordering::Relaxed);
        true
    }

    /// Pushes a chain of `n` slots, `head` to `tail` linked (the bulk frees' [`push`]): one
    /// store of the head and one of the count. The caller made sure of what `push` checks:
    /// room for `n`, no slot the bin's head ([`Bin::check_free`] in hardened builds).
    ///
    /// # Safety
    /// The chain's slots are slots of this bin's class that nobody uses any more, each once.
    #[inline]
    pub unsafe fn push_chain(&self, head: *mut FreeObj, tail: *mut FreeObj, n: u32) {
        debug_assert!(self.count() + n <= self.capacity());
        // SAFETY: the caller hands us the chain; its tail's first word becomes the link.
        unsafe { FreeObj::set_next(tail, self.head.load(Ordering::Relaxed)) };
        self.head.store(head, Ordering::Relaxed);
        self.count
            .store(self.count.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Hardened builds: [`push`](Self::push)'s double-free check, for a slot a bulk free
    /// links into a chain for [`push_chain`](Self::push_chain); nothing by default.
    ///
    /// # Safety
    /// `p` must be readable for one word.
    #[inline(always)]
    pub unsafe fn check_free(&self, p: *mut u8) {
        #[cfg(feature = "hardened")]
        // SAFETY: caller's contract.
        unsafe {
            self.check_push(p as *mut FreeObj)
        };
        let _ = p;
    }

    /// Hardened builds: the double-free check of every push (`link.rs`). Out of line: inlined,
    /// it makes the callers' thread-local closures too big to inline, which costs more than
    /// the call.
    ///
    /// # Safety
    /// `o` must be readable for one word.
    #[cfg(feature = "hardened")]
    #[inline(never)]
    unsafe fn check_push(&self, o: *mut FreeObj) {
        // SAFETY: caller's contract.
        if unsafe { FreeObj::looks_free(o) } {
            self.check_not_listed(o);
        }
    }

    /// Reports a double free when `o` is on this bin's list (hardened builds: its first word
    /// is a valid link). A slot free elsewhere (another thread's bin, a parked batch, its
    /// slab) is left to the flushes' checks; a live slot whose data happens to decode to a
    /// link is not on the list and goes on.
    #[cfg(feature = "hardened")]
    #[cold]
    #[inline(never)]
    fn check_not_listed(&self, o: *mut FreeObj) {
        let n = self.count();
        let mut f = self.head();
        let mut i = 0;
        // Bounded by the count, in case the list is corrupt.
        while !f.is_null() && i < n {
            if f == o {
                crate::sys::fatal("double free (the slot is already free in this thread's bin)");
            }
            // SAFETY: every slot on the list links to the next free slot or to null.
            f = unsafe { FreeObj::next(f) };
            i += 1;
        }
    }

    /// Whether `p` is the first free slot of this bin: freeing it now is a double free.
    pub fn is_head(&self, p: *mut u8) -> bool {
        !p.is_null() && self.head.load(Ordering::Relaxed) == p as *mut FreeObj
    }

    /// Puts back the slot [`pop`](Self::pop) just returned, whatever the capacity (the
    /// object stock's allocation undoes a pop this way when its check after the pop fails).
    ///
    /// # Safety
    /// `p` must be the slot the last `pop` of this bin returned, not used since.
    #[inline]
    pub unsafe fn unpop(&self, p: *mut u8) {
        let o = p as *mut FreeObj;
        // SAFETY: p is a free slot of this bin's class (caller's contract).
        unsafe { FreeObj::set_next(o, self.head.load(Ordering::Relaxed)) };
        self.head.store(o, Ordering::Relaxed);
        self.count
            .store(self.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Detaches the first `k` slots (k <= count) as a chain.
    pub(crate) fn take(&self, k: u32) -> *mut FreeObj {
        self.take_ends(k, ptr::null_mut()).0
    }

    /// [`take`](Self::take), and the chain's last slot, and whether `find` is one of the
    /// chain's slots: (head, tail, found).
    pub(crate) fn take_ends(&self, k: u32, find: *mut u8) -> (*mut FreeObj, *mut FreeObj, bool) {
        let head = self.head.load(Ordering::Relaxed);
        let mut last = head;
        let mut found = head as *mut u8 == find;
        let mut i = 1;
        while i < k {
            // SAFETY: the list holds count >= k slots, each linking to the next.
            last = unsafe { FreeObj::next(last) };
            found |= last as *mut u8 == find;
            i += 1;
        }
        // SAFETY: last is the k-th slot (k >= 1).
        unsafe {
            self.head.store(FreeObj::next(last), Ordering::Relaxed);
            FreeObj::set_next(last, ptr::null_mut());
        }
        self.count
            .store(self.count.load(Ordering::Relaxed) - k, Ordering::Relaxed);
        (head, last, found)
    }

    /// Detaches the whole list: (head, count). Only the owner calls it (a drainer reads a
    /// tagged bin's `count` and nothing else), so plain loads and stores do; an empty bin is
    /// only read.
    pub(crate) fn take_all(&self) -> (*mut FreeObj, u32) {
        let n = self.count.load(Ordering::Relaxed);
        if n == 0 {
            debug_assert!(self.head.load(Ordering::Relaxed).is_null());
            return (ptr::null_mut(), 0);
        }
        let head = self.head.load(Ordering::Relaxed);
        self.head.store(ptr::null_mut(), Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
        (head, n)
    }

    /// Detaches the whole list and counts it by walking it instead of trusting `count`: in a
    /// fork child, a thread that did not survive may have stopped between a fast path's
    /// stores to `head` and to `count`. Each of those stores leaves a well-formed list.
    pub(crate) fn take_all_walked(&self) -> (*mut FreeObj, u32) {
        let head = self.head.load(Ordering::Relaxed);
        let mut n = 0;
        let mut o = head;
        while !o.is_null() {
            n += 1;
            // SAFETY: every slot on the list links to the next free slot or to null.
            o = unsafe { FreeObj::next(o) };
        }
        self.head.store(ptr::null_mut(), Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
        (head, n)
    }

    /// The first free slot of the list (null when empty), for the owner's walks of its
    /// own bins.
    pub(crate) fn head(&self) -> *mut FreeObj {
        self.head.load(Ordering::Relaxed)
    }

    /// Number of slots held (may be read by any thread; racy but never torn).
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    /// The bin's invariant, by walking its list (module docs): `count == |list|` and
    /// `count <= max` for an open bin; a slot on the list twice makes a cycle, which the
    /// walk (stopped past `count`) reports as a length mismatch. Only the owner calls it,
    /// off the fast paths; a walk of the whole list, so only from `debug_assertions` builds
    /// and the test hook (`crate::invariant`).
    pub(crate) fn check(&self) {
        let n = self.count();
        let max = self.capacity();
        let mut len = 0u32;
        let mut o = self.head();
        // A cycle (a slot on the list twice) would never end: stop past `count`.
        while !o.is_null() && len <= n {
            len += 1;
            // SAFETY: every slot on the list links to the next free slot or to null.
            o = unsafe { FreeObj::next(o) };
        }
        if len != n {
            crate::invariant::broken("bin: count != |list|");
        }
        if max != 0 && n > max {
            crate::invariant::broken("bin: count > max");
        }
    }
}

/// The plain bin and the object-stock bin of one class, side by side, and what an
/// accounted free of the class needs to find its owner word: the fast paths address all of
/// it from one `class * 64` offset in one cache line, so the tagged bin costs no extra
/// address add and the owner lookup reads no segment header.
#[repr(C, align(64))]
pub struct ClassBins {
    pub plain: Bin,
    pub(crate) tagged: Bin,
    /// Immutable copy of the accounted twin's geometry (`class_caches::class_layout`).
    pub(crate) owner: OwnerGeom,
    /// How many of the tagged bin's slots, counted from the end of its list, may still hold
    /// a previous tenant's owner word: a transfer hands the bin to a new tenant without
    /// rewriting them (`ObjectStock::transfer_bins`), and the allocation that pops one of
    /// them writes it, from the class's second claim on with a few more at the head of the
    /// bin ([`claim`](Self::claim)), lowering the mark past them. A slot pushed since sits
    /// above the mark, so the word of every slot above the bottom `stale` is the tag;
    /// `stale <= tagged.count()` outside a pop (`ObjectStock`'s invariants, which say why).
    /// Only the owner thread touches it (and a fork child's `take_bins`, for a thread that
    /// did not survive, which resets it).
    pub(crate) stale: Cell<u32>,
    /// Whether a pop claimed a stale slot since the bin was last handed over (its mark
    /// set by `ObjectStock::transfer_bins`, which clears this): the second claim on reaches
    /// ahead ([`claim_reach`](Self::claim_reach)). A hint only: any value is safe. The owner
    /// thread's alone, as `stale`.
    pub(crate) claimed: Cell<bool>,
}

/// Give-backs in a row with no refill between after which a thread's bin (a size class's,
/// `thread_cache::flush_push`, or a dedicated cache's front) gives back all it holds instead
/// of its newest half: a consumer's, whose thread frees objects other threads allocate and
/// takes none back. A bin whose count wanders between empty and full (a thread replacing
/// objects of random sizes) gives back a few times in a row often enough: walking to its
/// half then, as always, keeps its next allocations off the refill path.
///
/// "No refill" is not "no allocation": a thread that allocates from the bin but frees more
/// never empties it, and counts as a consumer too (its bin then empties sooner and refills,
/// which resets the count; a bulk allocation that pops the bin empty refills its caller's
/// array, not the bin, and resets nothing). A whole bin given back is one parked batch, which
/// the next refill of a bin of that size may take back whole. The object stock's tagged bins
/// keep their half give-back (`ObjectStock::give_back_full`): its walk clears the owner
/// words the hand-back needs cleared anyway, and reports a slot freed twice.
pub(crate) const DRY_GIVE_BACKS: u8 = 3;

/// A bin's give-backs since it was last refilled, up to [`DRY_GIVE_BACKS`]: whether its next
/// give-back is whole. The owner thread's alone.
pub(crate) struct GiveBacks(Cell<u8>);

impl GiveBacks {
    pub(crate) const fn new() -> GiveBacks {
        GiveBacks(Cell::new(0))
    }

    /// The bin was refilled: it is no consumer's (yet).
    pub(crate) fn refilled(&self) {
        self.0.set(0);
    }

    /// The full bin gives back: true when it should give back all it holds (a consumer's),
    /// else counts one more give-back.
    pub(crate) fn whole(&self) -> bool {
        let n = self.0.get();
        if n >= DRY_GIVE_BACKS {
            return true;
        }
        self.0.set(n + 1);
        false
    }
}

/// Stale slots a claim writes beyond the one it popped, at most (`ClassBins::claim_reach`).
/// With four, the service's working set handed from request to request (`examples/
/// request_probe 5000 records` under callgrind) costs 7,000 instructions less per request;
/// eight saved 1,250 more there but cost requests of mixed sizes (`random`) 300 more.
const CLAIM_AHEAD: u32 = 4;

// The fast paths count on one line per class (the `class * 64` offset). (Loom's atomics are
// larger; a model does not care.)
#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<ClassBins>() == 64);

impl ClassBins {
    const fn new(c: usize) -> ClassBins {
        ClassBins {
            plain: Bin::new(),
            tagged: Bin::new(),
            owner: OwnerGeom::of_layout(&class_caches::class_layout(c, Kind::Accounted)),
            stale: Cell::new(0),
            claimed: Cell::new(false),
        }
    }

    /// Makes slot `p` of class `c`, just popped from the tagged bin for the tag's tenant `cg`,
    /// `cg`'s in its owner word if it was one of the slots a transfer left with a previous
    /// tenant's word ([`stale`](Self::stale)); from the second such claim since the transfer,
    /// up to [`CLAIM_AHEAD`] more of the bin's slots with it (all of them stale then).
    ///
    /// # Safety
    /// `p` must be the slot the last pop of `tagged` returned, a slot of class `c`'s accounted
    /// cache charged to `cg`, and `cg` the tag of the object stock that owns the bin.
    #[inline(always)]
    pub(crate) unsafe fn claim(&self, p: *mut u8, c: usize, cg: ObjCgId) {
        let n = self.tagged.count();
        if n < self.stale.get() {
            // SAFETY: caller's contract.
            unsafe { self.write_owner(p, c, cg) };
            let k = self.claim_reach(n);
            // SAFETY: caller's contract: the bin's slots are slots of class c's accounted
            // cache charged to the tag `cg`; k <= n, its count.
            unsafe { self.claim_ahead(k, c, cg) };
            self.stale.set(n - k);
        }
    }

    /// How many of the `n` stale slots left in the tagged bin a claim writes ahead of its
    /// pop; notes the claim ([`claimed`](Self::claimed)). Each claim is an out-of-line call
    /// (an allocation's slow path), and a request handed a bin by one that used the class a
    /// lot (the same working set again: a service's next request) pops tens of its slots:
    /// claimed a few at a time, most of those pops stay on the fast path. Only from a
    /// class's second claim since the hand-over: a request that takes one object of a class
    /// (requests of mixed sizes) would not pop the others, and writing their words ahead,
    /// each a line of its own for large slots, cost more than it saved (BENCHMARKS.md,
    /// section 10). The price: a class popped two to five times pays a second call and some
    /// writes for nothing (`request_probe random` +2.3% instructions). Shared with the loom
    /// model's copy of the claim (`loom_tests.rs`).
    pub(crate) fn claim_reach(&self, n: u32) -> u32 {
        if self.claimed.replace(true) {
            n.min(CLAIM_AHEAD)
        } else {
            0
        }
    }

    /// Writes `cg` into the owner words of the first `k` slots of the tagged bin. A slot
    /// claimed ahead has been charged to `cg` since the transfer: its word is the one its pop
    /// would write.
    ///
    /// # Safety
    /// As [`claim`](Self::claim); `k` is at most the tagged bin's count, and its first `k`
    /// slots are below the stale mark.
    #[inline(always)]
    unsafe fn claim_ahead(&self, k: u32, c: usize, cg: ObjCgId) {
        let mut o = self.tagged.head();
        for _ in 0..k {
            if o.is_null() {
                list_too_short();
            }
            // SAFETY: o is a free slot on the tagged bin's list (count == |list|), a slot of
            // class c's accounted cache charged to the tag cg (caller's contract).
            unsafe {
                self.write_owner(o.cast(), c, cg);
                o = FreeObj::next(o);
            }
        }
    }

    /// [`claim`](Self::claim) for the `ps` slots one pop of many just took (`ObjectStock::pop_many`).
    ///
    /// # Safety
    /// As [`claim`](Self::claim), for each of `ps`.
    #[inline]
    pub(crate) unsafe fn claim_many(&self, ps: &[*mut u8], c: usize, cg: ObjCgId) {
        let n = self.tagged.count();
        if n < self.stale.get() {
            // SAFETY: caller's contract.
            unsafe { self.write_owners(ps, c, cg, n) };
            self.claimed.set(true);
        }
    }

    /// Writes `cg` into the owner words of `ps` (some were below the stale mark: writing the
    /// others' again changes nothing) and lowers the mark to the bin's count `n`.
    ///
    /// # Safety
    /// As [`claim_many`](Self::claim_many).
    #[inline(never)]
    unsafe fn write_owners(&self, ps: &[*mut u8], c: usize, cg: ObjCgId, n: u32) {
        for &p in ps {
            // SAFETY: caller's contract.
            unsafe { self.write_owner(p, c, cg) };
        }
        self.stale.set(n);
    }

    /// Writes `cg` into the owner word of `p`, a slot just popped from the tagged bin or one
    /// still in it below the stale mark. Every slot there was charged, so its word is not 0:
    /// a 0 means a double free cleared it (while the slot waited in the bin), and is
    /// reported.
    ///
    /// # Safety
    /// `p` must be a slot of class `c`'s accounted cache.
    #[inline(always)]
    unsafe fn write_owner(&self, p: *mut u8, c: usize, cg: ObjCgId) {
        // SAFETY: caller's contract; `self.owner` is that cache's geometry.
        let w = unsafe { &*crate::owner::class_owner_word(p, c, &self.owner) };
        if w.load(Ordering::Relaxed) == 0 {
            crate::sys::fatal(
                "double free of an accounted object (a slot kept for the next tenant had its owner cleared)",
            );
        }
        w.store(cg, Ordering::Relaxed);
    }
}

pub(crate) const fn new_lines() -> [ClassBins; NUM_CLASSES] {
    let mut bins = [const { ClassBins::new(0) }; NUM_CLASSES];
    let mut c = 1;
    while c < NUM_CLASSES {
        bins[c] = ClassBins::new(c);
        c += 1;
    }
    bins
}

/// A bin's list ends before its count: a slot freed twice while its first free was still in
/// a bin (not caught on the fast path, `lib.rs`) relinked the list. Reported, not followed
/// into null.
#[cold]
#[inline(never)]
pub(crate) fn list_too_short() -> ! {
    crate::sys::fatal(
        "a thread's bin holds fewer slots than it counts (a double free of a slot that was still in a bin)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pop_many` takes two slots a turn: every count, odd and even, and every `out` length
    /// (shorter, as long as, longer than the list) pops the head first and leaves the rest.
    #[test]
    fn pop_many_takes_the_head_first_whatever_the_count() {
        use core::alloc::{GlobalAlloc, Layout};
        // Slabcg's slots (hardened builds check that a link points into a segment).
        let (a, l) = (crate::SlabAlloc::new(), Layout::new::<[u64; 8]>());
        // SAFETY: a non-zero size.
        let ps: Vec<*mut u8> = (0..7).map(|_| unsafe { a.alloc(l) }).collect();
        assert!(ps.iter().all(|p| !p.is_null()));
        for n in 0..=ps.len() {
            for want in 0..=n + 1 {
                let bin = Bin::new();
                bin.set_capacity(64);
                for &p in &ps[..n] {
                    // SAFETY: a free slot of the test's, pushed once.
                    assert!(unsafe { bin.push(p) });
                }
                let mut out = vec![ptr::null_mut(); want];
                let k = bin.pop_many(&mut out);
                assert_eq!(k, want.min(n));
                // The last pushed heads the list.
                let expect: Vec<_> = ps[..n].iter().rev().take(k).copied().collect();
                assert_eq!(&out[..k], &expect[..]);
                assert!(out[k..].iter().all(|p| p.is_null()));
                assert_eq!(bin.count() as usize, n - k);
                let rest: Vec<_> = (0..n - k).map(|_| bin.pop()).collect();
                let expect: Vec<_> = ps[..n - k].iter().rev().copied().collect();
                assert_eq!(rest, expect);
                assert!(bin.pop().is_null());
            }
        }
        for p in ps {
            // SAFETY: allocated above with l, out of every bin now, freed once.
            unsafe { a.dealloc(p, l) };
        }
    }
}
