//! The per-thread front of dedicated caches: each thread cache holds [`FRONTS`] bins for
//! dedicated caches (kmem_cache_create users get the per-CPU fast path of kmalloc), and a
//! process-wide table hands each live dedicated cache one of those indexes.
//!
//! Index assignment. A cache claims a free index when it is built ([`claim`]) and gives it
//! back when its last handle drops ([`release`]); a revived core (`dedicated.rs`) prefers
//! the index it held before, whose stale bins in other threads then are its own slots again.
//! With every index taken, a new cache has none ([`NO_FRONT`]) and takes the cache's lock on
//! every `alloc`/`free`, as before the front existed (documented on `Cache`).
//!
//! Tags instead of generations. Each bin records the core whose slots it holds (`tag`, the
//! core's [`key`]: its address, plus [`ACCOUNTED`] for an accounted core; 0 for none). The
//! fast paths compare it with the cache's key before they pop or push (one load and compare,
//! which also tells an accounted cache's front from a plain one's: `Cache::alloc` and a
//! `CacheBox`'s free load no flag from the core), so an index reused by another cache never
//! gets an old cache's slot: the first slow path of the new cache on that thread finds the tag
//! differ and flushes the old slots to their own core before it retags ([`FrontBin::retag`]).
//! A core address is a generation that never wraps: cores are never freed (segments name
//! them), and a revived core is the same core with the same slots, so a bin tagged with it
//! is valid under any index and any handle. This is why a cache dropped while other threads
//! still hold its slots in their fronts is safe: those slots stay valid slots of a mapped
//! core, and go back to it on their thread's next slow path at that index, at `trim()` on
//! that thread, or at its exit.
//!
//! Warm-up (why a bin starts closed, capacity 0). A thread's first [`WARM_ALLOCS`]
//! allocations from a cache take the locked path: a thread that touches a cache a few times
//! does not hoard half a bin of its slots (64 caches times up to 128 KiB each). Frees on a
//! thread whose bin is closed go home to the core, the first [`HOME_FREES`] of them: the size
//! classes' cache-scratch rule applies as is, a thread freeing objects that others allocated
//! would otherwise hand them to its next allocations in cache lines those threads still use.
//! A thread that keeps only freeing (a consumer) opens its bin after that.
//!
//! Accounted caches. A front has two bins, as a size class has: `bin`, of uncharged slots
//! (owner word 0; as `ThreadCache::accounted` is for the size classes), and `kept`, the
//! object stock's bin for this front (`object_stock.rs`): free slots still charged to the
//! thread's object-stock tag, their owner word that tenant. A free whose owner is the tag
//! keeps the slot in `kept`; an allocation under the tag takes it back without charging, so
//! the same-tenant pair costs what a size class's does. Otherwise allocation charges the
//! current tenant through the byte stock and free uncharges the owner word's tenant. The
//! object stock's drain protocol covers `kept` as it covers the size classes' tagged bins; a
//! drainer reads `kept`'s count and the bin's `tag` (which core, so which size and stat),
//! so the tag of a bin changes only under the thread's `stock` lock, with `kept` empty
//! (`ObjectStock::retag_front`). What `stats()` reports as charged objects is counted
//! without an atomic read-modify-write on the fast path: `charged` of a bin is this thread's
//! net count of charged objects of the tagged core (allocated minus freed here, so it can be
//! negative), folded into the core's `counters.charged` when the bin is retagged or the
//! thread exits. A kept slot stays counted there while it waits (the same-tenant pair
//! writes no count): `front_counts` subtracts the kept bins, and taking a kept bin back
//! subtracts its slots from the core's count (`object_stock::take_kept`).
//!
//! Invariants of a [`FrontBin`] (checked by [`FrontBin::check`], with `Bin::check`):
//! `tag == 0  =>  bin.count == 0 && kept.count == 0 && charged == 0`; `tag != 0  =>  tag ==
//! key(tag's core)` (the fast paths rely on the bit); every slot on
//! `bin` or `kept` is a free slot of `tag`'s core, counted in its `counters.used` (slots in
//! fronts left their slabs); `kept.count > 0  =>  tag's core is accounted`. For a core C
//! (stats and `Cache::live_objects`): `used(C) == held(C) + transfer(C) + Σ_threads Σ_{bins
//! tagged C} (count + kept count)`.

use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{AtomicIsize, AtomicPtr, AtomicUsize, Ordering};

use crate::bin::{Bin, GiveBacks};
use crate::cache::{add_signed, SlabCache};
use crate::slab::FreeObj;

/// Bins per thread for dedicated caches (the most dedicated caches that have a front at once).
pub const FRONTS: usize = 64;
/// The index of a cache without a front: its bin (one past the real ones) is never tagged,
/// so the fast paths' tag compare sends such a cache to its slow path without a bounds test.
pub const NO_FRONT: u32 = FRONTS as u32;
/// Locked allocations a thread makes from a cache before its bin opens.
pub const WARM_ALLOCS: u8 = 8;
/// Frees a thread sends home before its bin opens (the size classes' `HOME_FREES`).
pub const HOME_FREES: u8 = 64;
/// Bytes a front bin may hold before it gives slots back (as a size-class bin).
const BIN_BYTES: usize = 128 * 1024;

/// The bit a front's tag adds to an accounted core's address ([`key`]). Cores are aligned
/// to more than 1, so no core's plain address has it.
pub(crate) const ACCOUNTED: usize = 1;
const _: () = assert!(core::mem::align_of::<SlabCache>() > ACCOUNTED);

/// The tag of a front bin holding `core`'s slots: its address, with [`ACCOUNTED`] when the
/// core is accounted (a core's accounting never changes, a revived one's included).
#[inline(always)]
pub(crate) fn key(core: &SlabCache) -> usize {
    if core.id.accounted {
        accounted_key(core)
    } else {
        plain_key(core)
    }
}

/// [`key`] of `core` if it is accounted, without reading its flag: the fast paths compare a
/// front's tag with it first, and a match says both whose front and which kind.
#[inline(always)]
pub(crate) fn accounted_key(core: &SlabCache) -> usize {
    plain_key(core) | ACCOUNTED
}

/// [`key`] of `core` if it is not accounted: its address.
#[inline(always)]
pub(crate) fn plain_key(core: &SlabCache) -> usize {
    core as *const SlabCache as usize
}

/// Capacity of an open front bin of `core`.
pub(crate) fn bin_max(core: &SlabCache) -> u32 {
    (BIN_BYTES / core.layout.stride).clamp(2, 256) as u32
}

/// One thread's bin for one front index.
pub struct FrontBin {
    pub(crate) bin: Bin,
    /// Free slots of the tagged core still charged to the object stock's tag (module docs);
    /// a drainer reads its count.
    pub(crate) kept: Bin,
    /// The [`key`] of the core whose slots the bin holds (0: none). Written by the owner
    /// thread only, read racily by `stats()` (an atomic for that; relaxed loads and stores
    /// are plain moves).
    tag: AtomicUsize,
    /// Net charged objects of `tag`'s core allocated minus freed on this thread since the
    /// tag was set (module docs); read racily by `stats()`.
    charged: AtomicIsize,
    /// Allocations taken on the locked path while closed.
    allocs: Cell<u8>,
    /// Frees sent home while closed.
    frees: Cell<u8>,
    /// Give-backs since the last refill (`bin::DRY_GIVE_BACKS`).
    pub(crate) give_backs: GiveBacks,
}

impl FrontBin {
    pub(crate) const fn new() -> FrontBin {
        FrontBin {
            bin: Bin::new(),
            kept: Bin::new(),
            tag: AtomicUsize::new(0),
            charged: AtomicIsize::new(0),
            allocs: Cell::new(0),
            frees: Cell::new(0),
            give_backs: GiveBacks::new(),
        }
    }

    /// Whether the bin holds `core`'s slots.
    #[inline(always)]
    pub fn is_of(&self, core: &SlabCache) -> bool {
        ptr::eq(self.tag(), core)
    }

    /// The [`key`] of the core whose slots the bin holds (0: none), for the fast paths,
    /// which compare it with the key they expect.
    #[inline(always)]
    pub(crate) fn key(&self) -> usize {
        self.tag.load(Ordering::Relaxed)
    }

    /// Whether the bin holds the slots of `core`, an accounted core (no flag to load).
    #[inline(always)]
    pub(crate) fn is_of_accounted(&self, core: &SlabCache) -> bool {
        debug_assert!(core.id.accounted);
        self.key() == accounted_key(core)
    }

    /// The core whose slots the bin holds (null: none).
    pub(crate) fn tag(&self) -> *const SlabCache {
        (self.key() & !ACCOUNTED) as *const SlabCache
    }

    /// The loom model of the object stock (`loom_tests.rs`): tags the bin with a core the
    /// model never dereferences (it only needs the front to count as tagged), keyed as an
    /// accounted core's (the model keeps slots in the kept bin).
    #[cfg(all(test, loom))]
    pub(crate) fn tag_for_model(&self, core: *mut SlabCache) {
        self.tag.store(core as usize | ACCOUNTED, Ordering::Relaxed);
    }

    /// Pops an uncharged slot of the core whose [`key`] is `key`, or null when the bin is
    /// empty or holds another core's slots.
    #[inline(always)]
    pub fn pop_of(&self, key: usize) -> *mut u8 {
        if self.key() != key {
            return ptr::null_mut();
        }
        self.bin.pop()
    }

    /// Pushes uncharged slot `p` of the core whose [`key`] is `key`; false when the bin is
    /// full, closed, headed by `p`, or holds another core's slots.
    ///
    /// # Safety
    /// `p` must be a slot of that core that nobody uses any more, uncharged.
    #[inline(always)]
    pub unsafe fn push_of(&self, key: usize, p: *mut u8) -> bool {
        // SAFETY: caller's contract; a slot of the bin's core.
        self.key() == key && unsafe { self.bin.push(p) }
    }

    /// Counts `d` charged objects of the tagged core allocated (+) or freed (-) here.
    #[inline(always)]
    pub(crate) fn add_charged(&self, d: isize) {
        self.charged
            .store(self.charged.load(Ordering::Relaxed) + d, Ordering::Relaxed);
    }

    /// This bin's net charged objects of its core (racy read).
    pub(crate) fn charged(&self) -> isize {
        self.charged.load(Ordering::Relaxed)
    }

    /// Gives every slot back to the tagged core and folds `charged` into it; the bin keeps
    /// its tag and capacity. The owner thread only.
    pub(crate) fn flush(&self) {
        self.take_uncharged().release();
    }

    /// Takes the uncharged slots and the charged count of the tagged core, to be given back
    /// to it by [`Retired::release`].
    fn take_uncharged(&self) -> Retired {
        let (head, n) = self.bin.take_all();
        Retired {
            core: self.tag(),
            head,
            n,
            charged: self.charged.swap(0, Ordering::Relaxed),
        }
    }

    /// Makes the bin `core`'s, closed (warm-up, module docs); returns the old core's slots
    /// and charged count, which the caller gives back to it ([`Retired::release`]) once it
    /// released its `stock` lock. The owner thread only, under that lock with `kept` empty
    /// (`ObjectStock::retag_front`, which a drainer's reading of the tag relies on).
    #[must_use]
    pub(crate) fn retag(&self, core: &'static SlabCache) -> Retired {
        debug_assert_eq!(self.kept.count(), 0);
        let old = self.take_uncharged();
        self.bin.set_capacity(0);
        self.kept.set_capacity(0);
        self.allocs.set(0);
        self.frees.set(0);
        self.give_backs.refilled();
        self.tag.store(key(core), Ordering::Relaxed);
        old
    }

    /// Gives the slots back and drops the tag: the bin is `core`-less and closed (thread
    /// exit, after the object stock gave `kept` back: a drainer that reads its count 0
    /// ignores the tag). The owner thread only.
    pub(crate) fn close(&self) {
        debug_assert_eq!(self.kept.count(), 0);
        self.flush();
        self.bin.set_capacity(0);
        self.kept.set_capacity(0);
        self.tag.store(0, Ordering::Relaxed);
    }

    /// The capacity `kept` gets: an open bin's, for an accounted core, while the thread's
    /// object stock caches (`caching`); else 0 (pushes fail).
    pub(crate) fn kept_capacity(&self, caching: bool) -> u32 {
        let core = self.tag();
        if !caching || core.is_null() || self.bin.capacity() == 0 {
            return 0;
        }
        // SAFETY: a tag names a core, and cores are never freed.
        let core = unsafe { &*core };
        if core.id.accounted {
            bin_max(core)
        } else {
            0
        }
    }

    /// A locked allocation while the bin is closed: true once the bin should open.
    pub(crate) fn warm_alloc(&self) -> bool {
        let n = self.allocs.get();
        if n < WARM_ALLOCS {
            self.allocs.set(n + 1);
            return false;
        }
        true
    }

    /// A free while the bin is closed: true once the bin should open (else the slot goes home).
    pub(crate) fn warm_free(&self) -> bool {
        let n = self.frees.get();
        if n < HOME_FREES {
            self.frees.set(n + 1);
            return false;
        }
        true
    }

    /// Fills the empty bin with a chain of `count` slots of its core (a refill).
    pub(crate) fn fill(&self, head: *mut FreeObj, count: u32) {
        self.bin.fill(head, count);
        self.give_backs.refilled();
    }

    /// The invariant (module docs): `Bin::check`, and an untagged bin is empty and counts
    /// nothing charged. The owner thread only, off the fast paths.
    pub(crate) fn check(&self) {
        self.bin.check();
        self.kept.check();
        let core = self.tag();
        if core.is_null()
            && (self.bin.count() != 0 || self.kept.count() != 0 || self.charged() != 0)
        {
            crate::invariant::broken("front bin: untagged but holds slots or charges");
        }
        // SAFETY: a tagged core is never freed.
        if !core.is_null() && self.key() != key(unsafe { &*core }) {
            crate::invariant::broken("front bin: the tag's accounted bit is not its core's");
        }
        // SAFETY: a tagged core is never freed.
        if self.kept.count() != 0 && !unsafe { (*core).id.accounted } {
            crate::invariant::broken("front bin: kept slots of an unaccounted core");
        }
        for head in [self.bin.head(), self.kept.head()] {
            let mut o = head;
            while !o.is_null() {
                // SAFETY: a tagged core is never freed; the list's slots link to the next or
                // null.
                unsafe {
                    if !crate::owner::is_slot_of(o as *mut u8, &*core) {
                        crate::invariant::broken("front bin: a slot of another core");
                    }
                    o = FreeObj::next(o);
                }
            }
        }
    }
}

/// A front bin's uncharged slots and charged count of its old core, taken by a retag or a
/// flush, for [`release`](Retired::release) to give back.
pub(crate) struct Retired {
    core: *const SlabCache,
    head: *mut FreeObj,
    n: u32,
    charged: isize,
}

impl Retired {
    /// Gives the slots back to their core and folds the charged count into it.
    pub(crate) fn release(self) {
        if self.core.is_null() {
            debug_assert!(self.n == 0 && self.charged == 0);
            return;
        }
        // SAFETY: a tag names a core, and cores are never freed.
        let core = unsafe { &*self.core };
        if self.n > 0 {
            // SAFETY: the bin held these n free slots of its tagged core.
            unsafe { core.flush_batch(self.head, self.n as usize) };
        }
        fold_charged(core, self.charged);
    }
}

/// Adds a thread's net charged count `d` of objects of `core` to the core's counter.
pub(crate) fn fold_charged(core: &SlabCache, d: isize) {
    add_signed(&core.counters.charged, d);
}

/// Which core holds each index (null: free).
static OWNERS: [AtomicPtr<SlabCache>; FRONTS] = [const { AtomicPtr::new(ptr::null_mut()) }; FRONTS];
/// The core that last held each index: a revived core claims its old index first.
static LAST: [AtomicPtr<SlabCache>; FRONTS] = [const { AtomicPtr::new(ptr::null_mut()) }; FRONTS];

/// Claims a front index for `core` (user context, when a cache is built): the one it held
/// before when free, else an index no core held yet, else any free one; [`NO_FRONT`] when
/// all are taken.
pub(crate) fn claim(core: &'static SlabCache) -> u32 {
    let me = core as *const SlabCache as *mut SlabCache;
    let take = |i: usize| {
        OWNERS[i]
            .compare_exchange(ptr::null_mut(), me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    };
    // By the core that last held the index: this one, none, any.
    let passes: [&dyn Fn(*mut SlabCache) -> bool; 3] =
        [&|last| last == me, &|last| last.is_null(), &|_| true];
    for pass in passes {
        for (i, last) in LAST.iter().enumerate() {
            if pass(last.load(Ordering::Relaxed)) && take(i) {
                last.store(me, Ordering::Relaxed);
                return i as u32;
            }
        }
    }
    NO_FRONT
}

/// Gives index `i` back (the cache's last handle dropped).
pub(crate) fn release(i: u32) {
    if i < NO_FRONT {
        OWNERS[i as usize].store(ptr::null_mut(), Ordering::Release);
    }
}

/// Whether `i` is a real front index (not [`NO_FRONT`]).
pub(crate) fn is_front(i: u32) -> bool {
    i < NO_FRONT
}
