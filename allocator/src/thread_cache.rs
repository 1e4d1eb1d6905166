//! The thread cache: per-thread free slots, one plain bin, one bin of uncharged accounted
//! slots and one object-stock bin per size class, and the registry of live thread caches.
//!
//! The same-thread fast paths are a pop from and a push onto a singly linked bin (`bin.rs`):
//! no lock, no atomic read-modify-write. A bin that runs dry is refilled with half its
//! capacity from the class's [`SlabCache`]; a bin that overflows gives half back (all of it
//! once it overflows again and again with no refill between: a consumer's). A free on
//! another thread simply lands in that thread's bin (Rust's `dealloc` names the layout, so
//! the class is known without a lookup): the memory is reused by the freeing thread at once,
//! and returns to its slab through the shared cache when that bin overflows or the thread
//! exits — so memory freed by other threads is reused whether or not the allocating thread
//! is still alive.
//!
//! Invariants ([`ThreadCache::check`]): every bin's (`Bin::check`), the object stock's
//! (`ObjectStock::check`), and `state == LIVE  =>  the thread is on the registry`.
//! Fields touched by other threads: only bin counts (read by `stats()` and by a drainer of
//! the object stock, hence atomics with plain loads and stores), the object stock's
//! drainer-side fields (`object_stock.rs`) and the registry links (under the registry lock).
//!
//! Dedicated caches have a front here too: `fronts`, one [`FrontBin`] per front index
//! (`front.rs` says how indexes are assigned, why bins carry their core as a tag, and the
//! warm-up); [`front_refill_pop`] and [`front_flush_push`] are their slow paths, the same
//! refill-half / flush-half (or whole, a consumer's) as the size classes', through the
//! core's parked batches.
//!
//! Lifecycle (`state`): UNINIT (all `max == 0`, so the first alloc or free takes the slow path,
//! where `init.rs` sets up the process and then this thread, [`set_up`]) → LIVE → DEAD at
//! thread exit (bins flushed, `max == 0` again; later allocations of this thread, e.g. from
//! other pthread key destructors, go straight to the shared caches).

use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use slabcg_accounting::hooks::{self, ObjCgId};

use crate::bin::{new_lines, Bin, ClassBins, GiveBacks};
use crate::cache::SlabCache;
use crate::class_caches;
use crate::front::{self, FrontBin, FRONTS};
use crate::handback;
use crate::lock::{SpinGuard, SpinLock};
use crate::object_stock::{self, ObjectStock, Pop};
use crate::owner::class_owner_word;
use crate::segment::ACCOUNTED_BIT;
use crate::size_class::{class_size, Kind, NUM_CLASSES};
use crate::slab::FreeObj;
use crate::sys;
#[cfg(feature = "ie-tls")]
use crate::sys::fast_tls::{self, Word};

const UNINIT: u8 = 0;
const LIVE: u8 = 1;
const DEAD: u8 = 2;

/// Frees per class a thread sends straight home before it has allocated from the class.
const HOME_FREES: u8 = 64;

/// Bytes a bin may hold before it gives slots back.
const BIN_BYTES: usize = 128 * 1024;

/// Capacity of the bin of class `c` (plain, or uncharged accounted slots): 128 KiB, at most
/// 1,024 slots, as a tagged bin holds. With at most 256, the bins of the classes below 512
/// bytes overflowed and refilled far more often on random replacement: alloc_test took
/// 1.18x-1.25x mimalloc's time on two threads, against 1.01x-1.08x at 1,024 (and the
/// accounted builds, whose tagged bins held 1,024 already, about 1.0x); glibc's
/// bench-malloc-simple took 0.89x of the time at 256 (BENCHMARKS.md section 2).
pub fn bin_max(c: usize) -> u32 {
    (BIN_BYTES / class_size(c)).clamp(2, 1024) as u32
}

/// Bytes a bin holds when it opens; it doubles on each refill and each overflow up to
/// [`bin_max`]. A refill writes the link of every slot it hands over, so a bin that opened
/// at its full 128 KiB pulled 64 KiB resident for a class the program used a few times:
/// about 2 MB over 30 classes of 384 B to 20 KiB in redis under LD_PRELOAD. The classes of
/// at most 16 bytes open at their full 1,024 slots.
const BIN_START_BYTES: usize = 16 * 1024;

/// Opens bin `bin` of class `c` (capacity 0) at its starting capacity, or doubles an open
/// one's within [`bin_max`].
fn grow_capacity(bin: &Bin, c: usize) {
    let max = bin_max(c);
    let cap = match bin.capacity() {
        0 => (BIN_START_BYTES / class_size(c)) as u32,
        cap => cap.saturating_mul(2),
    };
    bin.set_capacity(cap.max(2).min(max));
}

/// A front index as the byte offset of its bin in a thread cache: a `Cache` keeps it so that
/// its fast paths address the bin with one add, not a multiply by the bin's size and two
/// adds (two instructions of a dedicated cache's free, `BENCHMARKS.md` section 11).
///
/// Invariant: `.0 == offset_of!(ThreadCache, fronts) + i * size_of::<FrontBin>()` for some
/// `i <= FRONTS` (only [`FrontAt::of`] makes one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrontAt(usize);

impl FrontAt {
    /// The offset of front index `i` (`i <= front::NO_FRONT`).
    #[inline(always)]
    pub(crate) const fn of(i: u32) -> FrontAt {
        debug_assert!(i as usize <= FRONTS);
        let i = if i as usize <= FRONTS {
            i as usize
        } else {
            FRONTS
        };
        FrontAt(core::mem::offset_of!(ThreadCache, fronts) + i * core::mem::size_of::<FrontBin>())
    }
}

pub struct ThreadCache {
    /// Per class: free slots of the plain cache, and the object stock's bin (free slots of
    /// the accounted cache still charged to the stock's tag, see `object_stock.rs`).
    pub bins: [ClassBins; NUM_CLASSES],
    /// Free slots of the accounted caches, uncharged (their owner word is rewritten on reuse).
    pub accounted: [Bin; NUM_CLASSES],
    /// The object stock of the tagged bins: their tag, lock and place on the armed list.
    pub(crate) stock: ObjectStock,
    /// `segment::ACCOUNTED_BIT` once frees on this thread may meet accounted objects, 0
    /// until the first tenant scope of the process is entered ([`activate`]). The free path
    /// tests `p & acct_mask`: one test against TLS decides both "accounting in use" and
    /// "this slot is accounted", and no global is read through the GOT.
    pub(crate) acct_mask: AtomicUsize,
    /// Frees sent home per class while this thread had not yet allocated from the class
    /// (see `free_slow`).
    home_frees: [Cell<u8>; NUM_CLASSES],
    /// Per class and kind: give-backs of the bin since it was last refilled (see
    /// `flush_push`).
    give_backs: [[GiveBacks; 2]; NUM_CLASSES],
    state: Cell<u8>,
    /// Allocation slow paths of this thread, for the decay sweep's pace ([`tick_slow`]).
    ///
    /// [`tick_slow`]: ThreadCache::tick_slow
    slow: Cell<u32>,
    /// Dedicated-cache front slow paths this thread took (`init::front_alloc_slow`,
    /// `front_free_slow`): tests see from it that a pair stayed on the fast paths, whose
    /// misses the slow paths otherwise mend without a trace but the time.
    front_slow: Cell<u64>,
    next: AtomicPtr<ThreadCache>,
    prev: AtomicPtr<ThreadCache>,
    /// Slow paths since the last invariant walk (`crate::invariant::due`).
    #[cfg(debug_assertions)]
    walks: AtomicU32,
    /// Per front index, the bin of a dedicated cache (`front.rs`); the last one
    /// (`front::NO_FRONT`) is never tagged, the bin of caches without an index.
    fronts: [FrontBin; FRONTS + 1],
}

impl ThreadCache {
    const fn new() -> ThreadCache {
        ThreadCache {
            bins: new_lines(),
            accounted: [const { Bin::new() }; NUM_CLASSES],
            stock: ObjectStock::new(),
            acct_mask: AtomicUsize::new(0),
            home_frees: [const { Cell::new(0) }; NUM_CLASSES],
            give_backs: [const { [const { GiveBacks::new() }; 2] }; NUM_CLASSES],
            state: Cell::new(UNINIT),
            slow: Cell::new(0),
            front_slow: Cell::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            prev: AtomicPtr::new(ptr::null_mut()),
            #[cfg(debug_assertions)]
            walks: AtomicU32::new(0),
            fronts: [const { FrontBin::new() }; FRONTS + 1],
        }
    }

    /// The front bin of index `i` (`i <= front::NO_FRONT`).
    #[inline(always)]
    pub fn front(&self, i: u32) -> &FrontBin {
        self.front_at(FrontAt::of(i))
    }

    /// The front bin at `at`: one add to this cache's address (a cache handle keeps `at`).
    #[inline(always)]
    pub(crate) fn front_at(&self, at: FrontAt) -> &FrontBin {
        // SAFETY: `FrontAt::of` made `at.0` the offset of `fronts[i]` for some i <= FRONTS,
        // inside this struct, where a FrontBin lives, aligned (an array element).
        let f = unsafe {
            &*(self as *const ThreadCache as *const u8)
                .add(at.0)
                .cast::<FrontBin>()
        };
        // Through `opaque`, the bin's address is computed once, into a register: otherwise
        // LLVM addresses every field as `tc + at + field`, and the count update and the push
        // become indexed read-modify-writes and stores, which x86 cores split into more
        // micro-ops than the add they save.
        opaque(f)
    }

    /// The bin of class `c` of this kind (plain, or uncharged accounted slots).
    #[inline(always)]
    pub fn bin(&self, c: usize, kind: Kind) -> &Bin {
        debug_assert!(c < NUM_CLASSES);
        // SAFETY: every class index comes from size_class, which only yields c < NUM_CLASSES.
        unsafe {
            match kind {
                Kind::Plain => &self.bins.get_unchecked(c).plain,
                Kind::Accounted => self.accounted.get_unchecked(c),
            }
        }
    }

    /// The line of class `c`: its plain bin, object-stock bin and owner geometry.
    #[inline(always)]
    pub(crate) fn line(&self, c: usize) -> &ClassBins {
        // SAFETY: c < NUM_CLASSES (size_class only yields valid classes).
        unsafe { self.bins.get_unchecked(c) }
    }

    /// Pops a slot of class `c` already charged to `cg` from the object stock.
    #[inline(always)]
    pub fn tagged_pop(&self, c: usize, cg: ObjCgId) -> Pop {
        let line = self.line(c);
        self.stock.pop_class(&line.tagged, &line.stale, cg)
    }

    /// Takes slot `p`, which `tagged_pop(c, cg)` just returned as [`Pop::Foreign`], as `cg`'s
    /// when it was `cg`'s all along but one whose owner word a transfer left
    /// (`ClassBins::stale`): writes the word (and, from the class's second claim, a few
    /// more ahead, `ClassBins::claim`) and returns the slot. None when the slot was
    /// refused for the tag (another tenant's, or a drainer's bit): the caller puts it back.
    ///
    /// # Safety
    /// `p` must be what `tagged_pop(c, cg)` just returned as `Pop::Foreign`.
    #[inline]
    pub unsafe fn claim_stale(&self, c: usize, cg: ObjCgId, p: *mut u8) -> Option<*mut u8> {
        // Only the owner changes the tenant bits of the tag. If this reads `cg` while the
        // check after the pop read `cg | STEAL`, the drainer took its request back
        // (`ObjectStock::record` when the barrier failed), having uncharged nothing: the slot
        // is `cg`'s, charged, as on a hit. If the check read `cg` and a drainer came since,
        // the slot goes back, which is always allowed (a drainer's count is at most what the
        // bin holds, module docs of `object_stock.rs`).
        if self.stock.tag.load(Ordering::Relaxed) != u64::from(cg) {
            return None;
        }
        // SAFETY: p was just popped from class c's tagged bin for its tag's tenant cg.
        unsafe { self.line(c).claim(p, c, cg) };
        Some(p)
    }

    /// Pops up to `out.len()` slots of class `c` already charged to `cg` from the object
    /// stock (`ObjectStock::pop_many`); how many.
    #[inline]
    pub fn tagged_pop_many(&self, c: usize, cg: ObjCgId, out: &mut [*mut u8]) -> usize {
        let line = self.line(c);
        let k = self.stock.pop_many(&line.tagged, cg, out);
        // SAFETY: out[..k] were just popped from class c's tagged bin for its tag's tenant cg.
        unsafe { line.claim_many(&out[..k], c, cg) };
        k
    }

    /// Pops up to `out.len()` slots of dedicated cache `core` already charged to `cg` from
    /// the kept bin of front `at`; how many (0 when the front is not `core`'s).
    #[inline]
    pub(crate) fn front_kept_pop_many(
        &self,
        at: FrontAt,
        core: &SlabCache,
        cg: ObjCgId,
        out: &mut [*mut u8],
    ) -> usize {
        let f = self.front_at(at);
        if !f.is_of_accounted(core) {
            return 0;
        }
        self.stock.pop_many(&f.kept, cg, out)
    }

    /// Pops a slot of dedicated cache `core` already charged to `cg` from the kept bin of
    /// front `at` (`front.rs`); `Pop::Empty` when the front is not `core`'s.
    #[inline(always)]
    pub(crate) fn front_kept_pop(&self, at: FrontAt, core: &SlabCache, cg: ObjCgId) -> Pop {
        let f = self.front_at(at);
        if !f.is_of_accounted(core) {
            return Pop::Empty;
        }
        // A kept slot counts in `charged` while it waits (`front_counts` takes it out), so
        // the pair writes no count.
        self.stock.pop(&f.kept, cg)
    }

    /// Undoes the pop of [`Pop::Foreign`] from front `at`'s kept bin.
    ///
    /// # Safety
    /// `p` must have just been popped from front `at`'s kept bin as `Pop::Foreign`
    /// (`front_kept_pop`, or `ObjectStock::pop` of that bin).
    pub(crate) unsafe fn front_put_back(&self, at: FrontAt, p: *mut u8) {
        // SAFETY: p as the caller promises.
        unsafe { self.front_at(at).kept.unpop(p) }
    }

    /// Whether slot `p` heads the kept bin of front `at` (freeing it is a double free).
    pub(crate) fn front_kept_is_head(&self, at: FrontAt, p: *mut u8) -> bool {
        self.front_at(at).kept.is_head(p)
    }

    /// Undoes the pop of [`Pop::Foreign`].
    ///
    /// # Safety
    /// `p` must be what `tagged_pop(c, _)` just returned as `Pop::Foreign`.
    pub unsafe fn put_back(&self, c: usize, p: *mut u8) {
        // SAFETY: p as the caller promises.
        unsafe { self.line(c).tagged.unpop(p) }
    }

    /// Keeps slot `p` of class `c`, whose owner word says `owner`, charged in the object
    /// stock when `owner` is the tag and there is room. False when it was not kept.
    ///
    /// # Safety
    /// `p` must be a live accounted slot of class `c` charged to `owner`, given up.
    #[inline(always)]
    pub unsafe fn tagged_push(&self, c: usize, owner: ObjCgId, p: *mut u8) -> bool {
        // SAFETY: caller's contract.
        unsafe { self.stock.push(&self.line(c).tagged, owner, p) }
    }

    /// The uncharging free of slot `p` of class `c`, checked, whose owner word says `owner`
    /// (the tagged push refused it): keeps it anyway when the refusal was a full bin of the
    /// tag's objects (its newest half is given back in one uncharge first,
    /// `ObjectStock::give_back_full`), or when the thread now keeps `owner`'s objects
    /// (`ObjectStock::own_on_free` for its current scope's tenant,
    /// `ObjectStock::adopt_on_free` for another's). False when not kept: the caller
    /// uncharges.
    ///
    /// # Safety
    /// As [`tagged_push`](Self::tagged_push), `p` checked as a slot of class `c`'s
    /// accounted cache: its bytes are charged to `owner`, not yet uncharged.
    #[inline]
    pub(crate) unsafe fn keep_slow(&self, c: usize, owner: ObjCgId, p: *mut u8) -> bool {
        let kept = if self.stock.keeps(owner) {
            let bin = &self.line(c).tagged;
            bin.capacity() >= object_stock::GIVE_BACK_MIN
                && bin.count() >= bin.capacity()
                && is_live(self)
                && self.stock.give_back_full(&self.bins, &self.accounted, c, p)
        } else if owner == hooks::current_objcg() && self.stock.own_untried(owner) {
            // SAFETY: caller's contract; owner is this thread's current scope's objcg.
            is_live(self) && unsafe { self.stock.own_on_free(&self.bins, owner) }
        } else {
            // The count first: it is all most uncharging frees do here.
            self.stock.count_free_miss(owner)
                && is_live(self)
                // SAFETY: caller's contract.
                && unsafe { self.stock.adopt_on_free(&self.bins, &self.accounted, owner) }
        };
        // SAFETY: caller's contract.
        kept && unsafe { self.keep_again(c, owner, p) }
    }

    /// After a give-back or a retag: pushes `p`. Reports a double free: `p`'s owner word
    /// cleared by the give-back (`p` was in the bin already, a free of it not caught on the
    /// fast path), or `p` heading the bin now.
    ///
    /// # Safety
    /// As [`tagged_push`](Self::tagged_push).
    unsafe fn keep_again(&self, c: usize, owner: ObjCgId, p: *mut u8) -> bool {
        // SAFETY: caller's contract: p is a slot of the accounted cache of class c.
        let w = unsafe { &*self.owner_word(p, c) };
        // Only a give-back of p itself clears its word (an adoption gives back another
        // tenant's slots, and p is owner's): p was in the bin when it was freed again.
        if w.load(Ordering::Relaxed) != owner {
            sys::fatal("double free of an accounted object (it was in the thread's kept slots)");
        }
        // SAFETY: caller's contract.
        if unsafe { self.tagged_push(c, owner, p) } {
            return true;
        }
        if self.tagged_is_head(c, p) {
            sys::fatal("double free of an accounted object (it heads the thread's kept slots)");
        }
        false
    }

    /// Whether slot `p` heads the object-stock bin of class `c` (freeing it is a double free).
    pub(crate) fn tagged_is_head(&self, c: usize, p: *mut u8) -> bool {
        self.line(c).tagged.is_head(p)
    }

    /// The owner word of slot `p` of size class `c`, from the class's geometry in this
    /// thread cache (`owner::class_owner_word`).
    ///
    /// # Safety
    /// `p` must be a slot of the accounted cache of class `c`.
    #[inline(always)]
    pub(crate) unsafe fn owner_word(&self, p: *mut u8, c: usize) -> *const AtomicU32 {
        // SAFETY: caller's contract; the line's geometry is class c's.
        unsafe { class_owner_word(p, c, &self.line(c).owner) }
    }

    /// Whether a drainer has been at this thread's object stock since it last reclaimed it.
    #[inline]
    pub(crate) fn must_reclaim(&self) -> bool {
        self.stock.must_reclaim()
    }

    /// Takes the object stock back from a drainer (`ObjectStock::reclaim`).
    pub(crate) fn reclaim(&self) {
        self.stock.reclaim(&self.bins, &self.accounted);
    }

    /// After an allocation under `cg` missed the object stock (`ObjectStock::note_miss`).
    #[inline]
    pub(crate) fn note_miss(&self, cg: ObjCgId) {
        if is_live(self) && !self.stock.count_miss(cg) {
            self.stock.note_miss(&self.bins, &self.accounted, cg);
        }
    }

    /// The first allocation under a new tenant found another tenant's objects
    /// (`ObjectStock::transfer_on_miss`). After this tenant's first miss only a compare: a
    /// thread that allocates for one tenant while its bins hold another live tenant's slots
    /// comes here on every allocation.
    #[inline]
    pub(crate) fn transfer_on_miss(&self, cg: ObjCgId) -> bool {
        !self.stock.missed_before(cg)
            && is_live(self)
            && self.stock.transfer_on_miss(&self.bins, cg)
    }

    /// After an allocation under `cg` that charged (it missed the object stock): retags for
    /// `cg` when the tag is another tenant's (`note_miss`), or starts caching once the byte
    /// stock holds a slot for `cg` (`recheck_caching`), so that what this thread frees later
    /// is kept; and ends the run of frees that may adopt another tenant (`adopt_on_free`).
    #[inline(always)]
    pub(crate) fn note_charged(&self, cg: ObjCgId) {
        self.stock.note_charging();
        if self.stock.tag.load(Ordering::Relaxed) != u64::from(cg) {
            self.note_miss(cg);
            return;
        }
        self.stock.note_own();
        if !self.stock.caching.load(Ordering::Relaxed) {
            self.recheck_caching(cg);
        }
    }

    /// A charging allocation of class `c` under `cg`: when another thread handed back a
    /// chain of `cg`'s charged slots of the class (`handback.rs`) and this thread's object
    /// stock is tagged for `cg` with room for it, takes the chain into the tagged bin and
    /// pops one of its slots; null otherwise (the caller charges). One load and test when
    /// the hand-back holds nothing for `cg` and `c`.
    #[inline(always)]
    pub(crate) fn take_handed(&self, c: usize, cg: ObjCgId) -> *mut u8 {
        if !handback::hinted(cg, c) {
            return ptr::null_mut();
        }
        self.take_handed_slow(c, cg)
    }

    /// [`take_handed`](Self::take_handed) past the hint: the checks, the table, the chain's
    /// owner words (0 in the table: `cg` again), the push and the pop.
    #[cold]
    #[inline(never)]
    fn take_handed_slow(&self, c: usize, cg: ObjCgId) -> *mut u8 {
        if !is_live(self) || self.stock.tag.load(Ordering::Relaxed) != u64::from(cg) {
            return ptr::null_mut();
        }
        let line = self.line(c);
        let room = line.tagged.capacity().saturating_sub(line.tagged.count());
        // A chain is half a full tagged bin: without that much room (or with no tagged
        // capacity at all), the table is not worth its lock.
        if room < object_stock::tagged_max(c) / 2 {
            return ptr::null_mut();
        }
        let Some(ch) = handback::take(cg, c, room) else {
            return ptr::null_mut();
        };
        let mut o = ch.head;
        for _ in 0..ch.n {
            if o.is_null() {
                crate::bin::list_too_short();
            }
            // SAFETY: o is a free slot of class c's accounted cache on the chain, now this
            // thread's; the line's geometry is class c's.
            unsafe {
                let w = &*class_owner_word(o as *mut u8, c, &line.owner);
                // 0 since the hand-back took it in; anything else is memory corruption.
                if w.load(Ordering::Relaxed) != 0 {
                    sys::fatal("a handed-back slot's owner word changed while it waited");
                }
                w.store(cg, Ordering::Relaxed);
                o = FreeObj::next(o);
            }
        }
        // SAFETY: the chain's slots are free slots of class c's accounted cache, charged to
        // cg (`handback.rs`) with their words cg now, this thread's; room was checked. As a
        // free's push, after a load of the tag that read cg: a drainer that set STEAL since
        // counts them when it reads the bin again, and the pop below then refuses the slot,
        // and this thread settles before it goes on to charge.
        unsafe { line.tagged.push_chain(ch.head, ch.tail, ch.n) };
        match self.tagged_pop(c, cg) {
            Pop::Hit(p) => {
                self.note_charged(cg);
                p
            }
            Pop::Empty => ptr::null_mut(),
            Pop::Foreign(p) => {
                // SAFETY: p is what tagged_pop(c, cg) just returned as Foreign.
                unsafe { self.put_back(c, p) };
                if self.must_reclaim() {
                    self.reclaim();
                }
                ptr::null_mut()
            }
        }
    }

    /// A thread tagged `cg` without tagged capacity (`ObjectStock::recheck_caching`).
    #[inline]
    pub(crate) fn recheck_caching(&self, cg: ObjCgId) {
        if is_live(self) {
            self.stock.recheck_caching(&self.bins, cg);
        }
    }

    /// The invariants of this thread's bins and object stock, by walking them (module
    /// docs). The owner thread only, off its fast paths.
    pub(crate) fn check(&self) {
        for c in 0..NUM_CLASSES {
            self.bins[c].plain.check();
            self.accounted[c].check();
        }
        for f in &self.fronts {
            f.check();
        }
        if !self.fronts[FRONTS].tag().is_null() {
            crate::invariant::broken("thread cache: the no-front bin is tagged");
        }
        self.stock.check(&self.bins);
    }

    /// Counts an allocation slow path (a bin refill, or the first allocation under a new
    /// tenant, `charge::alloc_small_put_back`); true on every `SWEEP_EVERY`th, when the
    /// caller runs the process-wide decay sweep (`sweep.rs`), so the clock is read once per
    /// that many rather than on each.
    /// Counts one dedicated-cache front slow path ([`front_slow_paths`](Self::front_slow_paths)).
    pub(crate) fn note_front_slow(&self) {
        self.front_slow.set(self.front_slow.get().wrapping_add(1));
    }

    /// Dedicated-cache front slow paths this thread has taken.
    pub(crate) fn front_slow_paths(&self) -> u64 {
        self.front_slow.get()
    }

    #[inline]
    pub(crate) fn tick_slow(&self) -> bool {
        const SWEEP_EVERY: u32 = 64;
        let n = self.slow.get().wrapping_add(1);
        self.slow.set(n);
        n.is_multiple_of(SWEEP_EVERY)
    }

    /// The walk of [`check`](Self::check) when one is due (`invariant::due`), in
    /// `debug_assertions` builds only.
    #[inline]
    fn check_if_due(&self) {
        #[cfg(debug_assertions)]
        if crate::invariant::due(&self.walks) {
            self.check();
        }
    }
}

// A const initialiser and no Drop: access compiles to a plain TLS offset with no lazy-init or
// destructor-state check. Thread exit is hooked through a pthread key instead (see sys).
thread_local! {
    static TC: ThreadCache = const { ThreadCache::new() };
}

/// Runs `f` on this thread's cache.
#[inline(always)]
pub fn with<R>(f: impl FnOnce(&ThreadCache) -> R) -> R {
    // A `cfg` as well as the constant: without the feature the function is token for token
    // what it was, so that LLVM's inlining of the fast paths does not change.
    #[cfg(feature = "ie-tls")]
    if fast_tls::AVAILABLE {
        // A shared-library build: `TC.with` would call `__tls_get_addr`; the initial-exec
        // word holds the cache's address once this thread has been through `first_touch`.
        // The closure is not handed to the cold path, so its captures stay in registers.
        let mut p = fast_tls::get_stable(Word::ThreadCache) as *const ThreadCache;
        if p.is_null() {
            p = first_touch();
        }
        // SAFETY: `p` is `TC`'s address on this thread (`first_touch`), which lives as long
        // as the thread (it has no destructor; thread exit is hooked separately).
        return f(unsafe { &*p });
    }
    TC.with(|tc| f(opaque(tc)))
}

/// This thread's cache without its first-touch step. With initial-exec TLS words, null
/// while the word is not yet set on this thread (the caller then takes a path that goes
/// through [`with`]); without them, never null, and before the thread is set up (or after
/// its teardown) its bins are empty with capacity 0. For the C entry points' fast paths,
/// which must make no call so that they need no stack frame.
#[inline(always)]
pub fn get_if_touched() -> *const ThreadCache {
    #[cfg(feature = "ie-tls")]
    if fast_tls::AVAILABLE {
        return fast_tls::get_stable(Word::ThreadCache) as *const ThreadCache;
    }
    TC.with(|tc| opaque(tc) as *const ThreadCache)
}

/// This thread's cache, recording its address in the initial-exec word for [`with`].
#[cfg(feature = "ie-tls")]
#[cold]
#[inline(never)]
fn first_touch() -> *const ThreadCache {
    TC.with(|tc| {
        let p = tc as *const ThreadCache;
        // SAFETY: this crate is the word's client; `p` is this thread's cache, which lives
        // as long as the thread.
        unsafe { fast_tls::set(Word::ThreadCache, p as usize) };
        p
    })
}

/// `tc` (a thread cache, or a front bin in one), through an empty `asm!` that hides where
/// the pointer came from. Without it LLVM
/// addresses some fields `%fs`-relative and others from a materialised base within one fast
/// path, and loads the TLS offset once more for the former (one instruction on every free, and
/// on every accounted allocation). The asm emits nothing.
#[inline(always)]
// The pointer goes through the asm untouched: the block really reads and writes no memory.
#[allow(clippy::pointers_in_nomem_asm_block)]
fn opaque<T>(tc: &T) -> &T {
    // Miri cannot run inline assembly; the asm only steers code generation, so without it
    // the function is the identity it always was.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut p = tc as *const T;
        // SAFETY: an empty asm block with a register in/out operand: it reads and writes no
        // memory and leaves p unchanged, so the reference stays valid for the same lifetime.
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack, preserves_flags));
            &*p
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    tc
}

/// Whether this thread's cache is not set up yet: its first slow path is ahead, where
/// `init.rs` sets up the process and then the thread ([`set_up`]).
#[inline(always)]
pub(crate) fn is_uninit(tc: &ThreadCache) -> bool {
    tc.state.get() == UNINIT
}

/// Slow path of an allocation from bin `(c, kind)` of a set-up thread (`init::alloc_slow` is
/// the entry): refill the bin, or, for a thread whose bins are closed, take one slot
/// straight from the cache.
#[inline(always)]
pub(crate) fn refill_pop(tc: &ThreadCache, c: usize, kind: Kind) -> *mut u8 {
    debug_assert!(!is_uninit(tc));
    let cache = class_caches::cache(c, kind);
    if tc.state.get() != LIVE {
        return refill_one(cache);
    }
    let bin = tc.bin(c, kind);
    let p = bin.pop();
    if !p.is_null() {
        return p;
    }
    grow_capacity(bin, c);
    let want = (bin.capacity() / 2).max(1) as usize;
    let chain = cache.refill(want, bin.capacity() as usize);
    if chain.count == 0 {
        return ptr::null_mut();
    }
    bin.fill(chain.head, chain.count as u32);
    tc.give_backs[c][kind as usize].refilled();
    tc.check_if_due();
    bin.pop()
}

fn refill_one(cache: &SlabCache) -> *mut u8 {
    let o = cache.refill(1, 1).head;
    if !o.is_null() {
        // SAFETY: the one slot refill handed over, not handed out yet.
        unsafe { FreeObj::clear_link(o) };
    }
    o.cast()
}

/// Slow path of a free to bin `(c, kind)` of a set-up thread (`init::free_slow` is the
/// entry): give half the bin back (all of it for a consumer's, `bin::DRY_GIVE_BACKS`), or,
/// for a thread whose bins are closed, the slot straight to its cache.
///
/// # Safety
/// `p` must be a live slot of class `c` of this kind that the caller gives up.
#[inline(always)]
pub(crate) unsafe fn flush_push(tc: &ThreadCache, p: *mut u8, c: usize, kind: Kind) {
    debug_assert!(!is_uninit(tc));
    {
        let cache = class_caches::cache(c, kind);
        let o = p as *mut FreeObj;
        if tc.state.get() != LIVE {
            // SAFETY: a one-slot chain of the caller's slot.
            unsafe {
                FreeObj::set_next(o, ptr::null_mut());
                cache.flush(o, 1);
            }
            return;
        }
        let bin = tc.bin(c, kind);
        if bin.is_head(p) {
            double_free_at_head();
        }
        if bin.capacity() == 0 {
            // This thread has not allocated from this class yet, so it is freeing objects
            // other threads allocated. Caching them would hand them to its next allocations,
            // in cache lines that their allocating threads' other objects share: passive
            // false sharing (cache-scratch). The first few go home to their slabs; a thread
            // that keeps only freeing (a consumer) opens its bin after that.
            let sent = tc.home_frees[c].get();
            if sent < HOME_FREES {
                tc.home_frees[c].set(sent + 1);
                // SAFETY: a one-slot chain of the caller's slot.
                unsafe {
                    FreeObj::set_next(o, ptr::null_mut());
                    cache.flush(o, 1);
                }
                return;
            }
        }
        // Reached with the bin full (or closed): a bin below its most grows instead of giving
        // half back.
        grow_capacity(bin, c);
        let k = if bin.count() < bin.capacity() {
            0
        } else {
            bin.count().div_ceil(2)
        };
        if k > 0 {
            // A consumer's bin (`DRY_GIVE_BACKS`) gives back its whole list, detached in
            // O(1): keeping half would be for nothing, and finding the half is a walk of
            // it, a pointer chase through slots the thread last touched when it freed them
            // (xmalloc: 11% of its time). The park's checking walk is then the only one.
            let (chain, k) = if tc.give_backs[c][kind as usize].whole() {
                bin.take_all()
            } else {
                (bin.take(k), k)
            };
            // SAFETY: the chain holds k slots of this class taken from the bin.
            unsafe { cache.flush(chain, k as usize) };
        }
        // SAFETY: the bin now has room; the caller gives up p.
        if !unsafe { bin.push(p) } {
            // With room, only a slot that heads the bin is refused: p was freed before and
            // the half given back just uncovered it.
            double_free_at_head();
        }
        tc.check_if_due();
    }
}

/// The report of a free whose slot already heads this thread's bin ([`Bin::push`]).
#[cold]
#[inline(never)]
fn double_free_at_head() -> ! {
    sys::fatal("double free (the slot is already the first free slot of this thread's bin)")
}

/// Gives every slot of this thread's bins back to the shared caches (used by `trim`).
pub fn flush_current() {
    with(|tc| {
        if tc.state.get() == LIVE {
            tc.stock.give_back_own(&tc.bins);
            flush_all(tc);
        }
    })
}

fn flush_all(tc: &ThreadCache) {
    for f in &tc.fronts {
        f.flush();
    }
    for c in 0..NUM_CLASSES {
        for kind in Kind::BOTH {
            let bin = tc.bin(c, kind);
            let k = bin.count();
            if k > 0 {
                let chain = bin.take(k);
                // SAFETY: the chain holds the bin's k slots of class c.
                unsafe { class_caches::cache(c, kind).flush(chain, k as usize) };
            }
        }
    }
}

/// Sets up this thread's cache on its first slow path, after the process
/// (`init::init_once`): the object stock's bins get their capacity, the cache joins the
/// registry and the thread's exit is hooked.
pub(crate) fn set_up(tc: &ThreadCache) {
    // Plain and accounted bins open (get a capacity) when the thread first allocates from
    // their class; see flush_push for why.
    tc.stock.attach(&tc.bins);
    tc.stock.attach_fronts(&tc.fronts);
    registry_insert(tc);
    tc.state.set(LIVE);
    let me = tc as *const ThreadCache as *mut u8;
    // SAFETY: `thread_exit(me)` runs once at this thread's exit, when `tc` (its TLS block)
    // is still valid (thread_exit's own comment).
    if !unsafe { sys::thread::on_thread_exit(thread_exit, me) } {
        // Without an exit hook the bins would leak with the thread: run uncached instead.
        teardown(tc);
    }
}

unsafe extern "C" fn thread_exit(arg: *mut libc::c_void) {
    // SAFETY: arg is this exiting thread's own ThreadCache, registered in set_up(); its TLS block
    // stays valid while pthread key destructors run.
    let tc = unsafe { &*(arg as *const ThreadCache) };
    teardown(tc);
}

fn teardown(tc: &ThreadCache) {
    if tc.state.get() != LIVE {
        return;
    }
    // First stop caching, so that anything the flush below (or a later destructor) allocates
    // goes straight to the shared caches.
    tc.state.set(DEAD);
    for c in 0..NUM_CLASSES {
        tc.bins[c].plain.set_capacity(0);
        tc.accounted[c].set_capacity(0);
        tc.bins[c].tagged.set_capacity(0);
    }
    for f in &tc.fronts {
        f.kept.set_capacity(0);
    }
    tc.stock.give_back_own(&tc.bins);
    tc.stock.kept_closed();
    flush_all(tc);
    // Untagged: later frees and allocations of this thread count charged objects in their
    // cores directly (`count_charged`), none lands in a bin nobody would flush.
    for f in &tc.fronts {
        f.close();
    }
    registry_remove(tc);
}

// The registry of live thread caches: read by stats() for bin counts, reset in a fork child.
pub(crate) struct Registry {
    head: *mut ThreadCache,
}
// SAFETY: the pointers name live threads' caches, only followed under the registry lock.
unsafe impl Send for Registry {}

static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry {
    head: ptr::null_mut(),
});

/// The `acct_mask` every thread gets: 0, then `ACCOUNTED_BIT` from [`activate`] on. Written
/// and read under the registry lock.
static ACCT_MASK: AtomicUsize = AtomicUsize::new(0);

/// Registered with the accounting (`hooks::set_on_activate`): runs before the first scope is
/// entered, so before any accounted object exists. Every registered thread learns that frees
/// may meet accounted objects (its `acct_mask`), and threads registering later copy
/// `ACCT_MASK` under the same lock. A thread that frees an accounted object received from
/// another thread has that object through a happens-before chain that starts after these
/// stores, so it sees its mask set; unregistered and exiting threads have closed bins, so
/// their frees reach `free_slow`, which checks the address itself.
pub(crate) fn activate() {
    let threads = Threads::lock();
    ACCT_MASK.store(ACCOUNTED_BIT, Ordering::Relaxed);
    threads.for_each(|tc| tc.acct_mask.store(ACCOUNTED_BIT, Ordering::Relaxed));
}

fn registry_insert(tc: &ThreadCache) {
    let me = tc as *const ThreadCache as *mut ThreadCache;
    let mut r = REGISTRY.lock();
    tc.acct_mask
        .store(ACCT_MASK.load(Ordering::Relaxed), Ordering::Relaxed);
    tc.prev.store(ptr::null_mut(), Ordering::Relaxed);
    tc.next.store(r.head, Ordering::Relaxed);
    if !r.head.is_null() {
        // SAFETY: the head is a live registered cache (under the lock).
        unsafe { (*r.head).prev.store(me, Ordering::Relaxed) };
    }
    r.head = me;
}

fn registry_remove(tc: &ThreadCache) {
    let mut r = REGISTRY.lock();
    // Under the registry lock, so no drainer holds it off the armed list.
    object_stock::disarm(&tc.stock);
    let next = tc.next.load(Ordering::Relaxed);
    let prev = tc.prev.load(Ordering::Relaxed);
    // SAFETY: neighbours are live registered caches (under the lock).
    unsafe {
        if prev.is_null() {
            r.head = next;
        } else {
            (*prev).next.store(next, Ordering::Relaxed);
        }
        if !next.is_null() {
            (*next).prev.store(prev, Ordering::Relaxed);
        }
    }
}

/// The registered thread caches, with the registry lock held: none of them can exit (or
/// join) while this lives.
pub(crate) struct Threads {
    guard: SpinGuard<'static, Registry>,
}

impl Threads {
    pub(crate) fn lock() -> Threads {
        Threads {
            guard: REGISTRY.lock(),
        }
    }

    /// Calls `f` on every registered thread cache.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&ThreadCache)) {
        let mut tc = self.guard.head;
        while !tc.is_null() {
            // SAFETY: registered caches stay valid until they remove themselves, which needs
            // the lock we hold.
            unsafe {
                f(&*tc);
                tc = (*tc).next.load(Ordering::Relaxed);
            }
        }
    }
}

/// Whether this thread's cache is live (initialised and not torn down).
pub(crate) fn is_live(tc: &ThreadCache) -> bool {
    tc.state.get() == LIVE
}

/// Calls `f` with the slot counts of every live thread's bins, class by class.
pub fn for_each_bin_count(mut f: impl FnMut(usize, Kind, u32)) {
    let r = REGISTRY.lock();
    let mut tc = r.head;
    while !tc.is_null() {
        // SAFETY: registered caches stay valid until they remove themselves, which needs the
        // lock we hold.
        unsafe {
            for c in 0..NUM_CLASSES {
                f(c, Kind::Plain, (*tc).bins[c].plain.count());
                f(
                    c,
                    Kind::Accounted,
                    (*tc).accounted[c].count() + (*tc).bins[c].tagged.count(),
                );
            }
            tc = (*tc).next.load(Ordering::Relaxed);
        }
    }
}

/// Fork support: hold the registry lock across `fork`.
pub fn fork_prepare() {
    REGISTRY.lock_raw();
    object_stock::fork_prepare_armed();
    handback::fork_prepare();
}

/// Fork support, parent side.
///
/// # Safety
/// After [`fork_prepare`] in this thread.
pub unsafe fn fork_parent() {
    // SAFETY: forwarded contract.
    unsafe {
        handback::fork_release();
        object_stock::fork_parent_armed();
        REGISTRY.unlock_raw()
    };
}

/// Fork support, child side: only the forking thread survives, so the registry is reduced to
/// its cache. The other threads' cached slots are lost to the child (a bounded leak, as with
/// every allocator), but the charged ones in their object stocks are uncharged first, so the
/// child's tenants stay exact.
///
/// # Safety
/// After [`fork_prepare`], in the child.
pub unsafe fn fork_child() {
    let me = with(|tc| tc as *const ThreadCache as *mut ThreadCache);
    // SAFETY: the locks are held by fork_prepare of this (the only) thread.
    unsafe {
        handback::fork_release();
        REGISTRY.unlock_raw()
    };
    let mut r = REGISTRY.lock();
    let mut tc = r.head;
    while !tc.is_null() {
        // SAFETY: the other caches' TLS memory is still mapped in the child (a copy of the
        // parent's), and nothing else runs.
        let t = unsafe { &*tc };
        if tc != me {
            t.stock.give_back_orphan(&t.bins);
            // Their front slots are lost like their bins', but their charged counts stay
            // right in the cores' statistics.
            for f in &t.fronts {
                if !f.tag().is_null() {
                    // SAFETY: a tag names a core, and cores are never freed.
                    front::fold_charged(unsafe { &*f.tag() }, f.charged());
                }
            }
        }
        tc = t.next.load(Ordering::Relaxed);
    }
    r.head = ptr::null_mut();
    drop(r);
    with(|tc| {
        // SAFETY: after fork_prepare, in the child, as this function requires.
        unsafe { object_stock::fork_child_armed(&tc.stock, tc.state.get() == LIVE) };
        if tc.state.get() == LIVE {
            registry_insert(tc);
        }
    });
}

/// Uncharges the objects kept in the object stocks (`object_stock::drain`): of every
/// thread for `ObjectDrain::All`, else of the armed ones. Registered with the accounting
/// (`init::init_once`), which calls it at the start of every drain of the stocks. Holds the
/// registry lock for the whole drain: no thread joins or leaves in between.
pub fn drain_object_stocks(which: hooks::ObjectDrain) {
    let own = with(|tc| tc as *const ThreadCache);
    // SAFETY: `own` is this thread's cache, which outlives the call.
    let own = unsafe { &*own };
    // The hand-back's charged chains first, outside the registry lock (its lock is a leaf).
    // The idle drain (every 100 ms with many threads) leaves it to the decay sweep, which
    // ages its entries: releasing everything that often would undo the hand-back.
    if which != hooks::ObjectDrain::Idle {
        handback::release_all(false);
    }
    let threads = Threads::lock();
    object_stock::drain(which, &own.stock, is_live(own), &|f| {
        threads.for_each(|tc| f(&tc.stock))
    });
}

/// Slow path of an allocation from front `i` of dedicated cache `core` on a set-up thread
/// (`init::front_alloc_slow` is the entry): retag the bin when it holds another core's slots,
/// take one slot on the locked path while the bin warms up, else refill half the bin. For a
/// thread whose bins are closed, or a cache without an index, one slot straight from the core.
pub(crate) fn front_refill_pop(tc: &ThreadCache, i: u32, core: &'static SlabCache) -> *mut u8 {
    debug_assert!(!is_uninit(tc));
    if tc.state.get() != LIVE || !front::is_front(i) {
        return refill_one(core);
    }
    let f = tc.front(i);
    if !f.is_of(core) {
        tc.stock.retag_front(f, i, core);
    }
    let p = f.bin.pop();
    if !p.is_null() {
        return p;
    }
    if f.bin.capacity() == 0 {
        if !f.warm_alloc() {
            return refill_one(core);
        }
        open_front(tc, i, f, core);
    }
    let cap = f.bin.capacity();
    let chain = core.refill((cap / 2).max(1) as usize, cap as usize);
    if chain.count == 0 {
        return ptr::null_mut();
    }
    f.fill(chain.head, chain.count as u32);
    tc.check_if_due();
    f.bin.pop()
}

/// Opens front bin `f` of `core` after its warm-up: it gets its capacity, and its kept bin
/// too while the object stock caches (`FrontBin::kept_capacity`; the flag is the owner's,
/// written under its `stock` lock by the owner alone).
fn open_front(tc: &ThreadCache, i: u32, f: &FrontBin, core: &SlabCache) {
    f.bin.set_capacity(front::bin_max(core));
    tc.stock.open_kept(i, f);
}

/// Slow path of a free to front `i` of dedicated cache `core` on a set-up thread
/// (`init::front_free_slow` is the entry): retag the bin when it holds another core's slots,
/// send the slot home while the bin is closed (`front::HOME_FREES`), else give half the bin
/// back (all of it for a consumer's, `bin::DRY_GIVE_BACKS`) and push. For a thread whose
/// bins are closed, or a cache without an index, the slot goes straight to the core.
///
/// # Safety
/// `p` must be a live slot of `core` that the caller gives up.
pub(crate) unsafe fn front_flush_push(
    tc: &ThreadCache,
    p: *mut u8,
    i: u32,
    core: &'static SlabCache,
) {
    debug_assert!(!is_uninit(tc));
    let o = p as *mut FreeObj;
    let home = || {
        // SAFETY: a one-slot chain of the caller's slot.
        unsafe {
            FreeObj::set_next(o, ptr::null_mut());
            core.flush(o, 1);
        }
    };
    if tc.state.get() != LIVE || !front::is_front(i) {
        home();
        return;
    }
    let f = tc.front(i);
    if !f.is_of(core) {
        tc.stock.retag_front(f, i, core);
    }
    if f.bin.is_head(p) {
        double_free_at_head();
    }
    if f.bin.capacity() == 0 {
        if !f.warm_free() {
            home();
            return;
        }
        open_front(tc, i, f, core);
    }
    let k = f.bin.count().div_ceil(2);
    if k > 0 {
        // A consumer's bin gives back all it holds, as a size class's does (`flush_push`).
        let (chain, k) = if f.give_backs.whole() {
            f.bin.take_all()
        } else {
            (f.bin.take(k), k)
        };
        // SAFETY: the chain holds k slots of `core` taken from its bin.
        unsafe { core.flush_batch(chain, k as usize) };
    }
    // SAFETY: the bin now has room and is `core`'s; the caller gives up p.
    if !unsafe { f.bin.push(p) } {
        double_free_at_head();
    }
    tc.check_if_due();
}

/// Counts `d` charged objects of `core` allocated (+) or freed (-) on this thread: in the
/// front bin when it is `core`'s (no atomic read-modify-write), else in the core's counter.
#[inline(always)]
pub(crate) fn count_charged(at: FrontAt, core: &SlabCache, d: isize) {
    with(|tc| {
        let f = tc.front_at(at);
        if f.is_of(core) {
            f.add_charged(d);
        } else {
            front::fold_charged(core, d);
        }
    })
}

/// Gives this thread's front slots of `core` at index `i` back to the core (the cache is
/// being dropped; other threads' fronts give theirs back lazily, `front.rs`).
pub(crate) fn flush_front(i: u32, core: &SlabCache) {
    with(|tc| {
        let f = tc.front(i);
        if is_live(tc) && f.is_of(core) {
            tc.stock.give_back_front(f, i);
            f.flush();
        }
    })
}

/// Slots of `core` in every live thread's fronts, and those threads' net charged objects
/// of it (racy reads, for `stats()` and `Cache::live_objects`).
pub(crate) fn front_counts(core: &SlabCache) -> (usize, isize) {
    let threads = Threads::lock();
    let (mut slots, mut charged) = (0usize, 0isize);
    threads.for_each(|tc| {
        for f in &tc.fronts {
            if f.is_of(core) {
                let kept = f.kept.count();
                slots += (f.bin.count() + kept) as usize;
                // Kept slots stay in the front's net count while they wait (`front.rs`).
                charged += f.charged() - kept as isize;
            }
        }
    });
    (slots, charged)
}
