//! The object stock: free slots that stay charged.
//!
//! A thread that frees an accounted object whose owner is the thread's current `tag` keeps
//! it, still charged, in a per-class `tagged` bin; the thread's next allocation in the same
//! tenant takes it back without charging (no stock update, and no owner write unless a
//! transfer handed the slot over, below). This is seed
//! 003's object stock taken one step further: the kernel caches charged bytes per CPU; we
//! cache the charged objects themselves, so what the same-tenant alloc/free pair adds to the
//! unaccounted pair is the owner-word read on free, one load and compare of the tag word on
//! each side, and on the allocation the compare of the bin's count with its stale mark
//! (BENCHMARKS.md).
//!
//! Dedicated caches' fronts have such a bin too (`FrontBin::kept`, `front.rs`): the same
//! protocol covers them, with the front's core (its `tag`) giving the size and stat a
//! drainer uncharges; so below, "the tagged bins" are the classes' and the fronts' kept
//! bins. A front's core changes only under the `stock` lock with its kept bin empty
//! ([`ObjectStock::retag_front`]), so a drainer that reads a kept count under the lock
//! reads the core those slots belong to.
//!
//! Accounting consequences, the same as for the byte stocks:
//! - objects in tagged bins count in their tenant's `current` and slab stats (pre-charged);
//!   at most `tagged_max(c)` per class per thread (128 KiB or 1,024 objects, one object of
//!   the 128 KiB class) and `front::bin_max` per dedicated-cache front (128 KiB or 256
//!   objects, at least 2), and only in threads whose byte stock had a slot for the
//!   tenant when they retagged (its stock budget, [`note_retag`]);
//! - every drain of the stocks first uncharges the tagged bins of the threads that may hold
//!   charged objects (the armed list, [`ArmedList`]; every thread for `current_exact()`,
//!   idle threads included; [`drain_all`], registered with the accounting), so
//!   `current_exact()` is exact and no charge fails while other threads sit on such
//!   objects.
//!
//! Protocol. `tag` holds the tenant whose objects the tagged bins hold (low 32 bits), or
//! `NO_TAG` (bins empty), with a drainer's `STEAL` or `DRAINED` bit. The owner's fast paths
//! read `tag`, never write it, and store nothing but the bin itself:
//! - the free checks first: it pushes a slot only when `tag` equals the slot's owner (and so
//!   does a charging allocation that takes a chain of the tag's slots from the hand-back,
//!   `ThreadCache::take_handed`: one push of many slots; it is not in the loom model);
//! - the allocation checks after: it pops, then (compiler fence) loads `tag`, and refuses
//!   the slot when `tag` is not its tenant or the slot is below the class's stale mark. Out
//!   of line, the refused slot is either claimed (the tag read again is the tenant: the
//!   owner word and the mark are written, `ThreadCache::claim_stale`) or put back.
//!
//! Every other change of `tag` or of the tagged bins (retagging, giving back, a drainer's
//! work) happens under the thread's `stock` lock. The allocation path retags
//! ([`ObjectStock::note_miss`]); the free path gives back and retags in three cases: a
//! full bin gives its newest half away ([`ObjectStock::give_back_full`]: still charged, to
//! the hand-back, `handback.rs`, which the tenant's next charging allocation of the class
//! takes it from, or uncharged, as a give-back); a thread that frees a run of another live
//! tenant's objects with no charging allocation between, its bins empty or holding what it
//! adopted so, retags for that tenant ([`ObjectStock::adopt_on_free`]: a consumer thread);
//! and a thread that frees an object of its current scope's tenant, its bins empty,
//! retags for it ([`ObjectStock::own_on_free`]: a worker back at a request). A retag either gives the tagged
//! objects back (uncharged, to the owner's accounted bins or their slabs) or hands them to
//! the new tenant in place ([`transfer_bins`]: their charge moves below the two tenants'
//! common ancestor). A class's slots keep the previous tenant's owner words until an
//! allocation pops them and writes its own, or, from the class's second such pop, claims
//! them a few ahead of its pop (`ClassBins::stale` marks how many, from the bottom of the
//! bin; `ClassBins::claim`), so a request pays for about the slots it takes, not for all it
//! was handed; a front's kept slots are rewritten before the lock is released. Nothing
//! reads the owner word of a free slot in a tagged bin but the owner's give-back (which
//! checks it is not 0 and clears it), the invariant walk ([`ObjectStock::check`]), the claim
//! (which reports a 0 word as a double free) and a double free itself. A double free of a
//! stale slot uncharges the previous tenant, giving back refs the transfer already moved to
//! the new one (the objcg may be freed by then, its id another tenant's: a debug build's
//! refcount assertion stops there), and files the slot in the uncharged bin too. It is reported when an allocation or a
//! give-back reaches the slot in the tagged bin and finds its word 0, unless the uncharged
//! bin hands the slot out first. Before lazy words, the loop such a free makes was reported
//! at the next transfer's walk. A slot claimed ahead has the tag's word like any kept slot,
//! so a double free of it while it waits deeper in the bin is not caught on the fast path
//! (the root crate's `src/lib.rs`, invalid frees); nor is one of a stale slot whose old word
//! happens to be the tag (bins handed from T0 to T1 and back to T0, or an objcg id recycled
//! by the next tenant): the tagged push takes it again, and only a give-back's walk of the
//! bin reports it. Hardened builds still rewrite the words
//! at the transfer (`LAZY_OWNERS`), so their push check reports the double free at once
//! (`allocator/tests/invalid_free.rs`).
//!
//! A drainer never touches another thread's bins and never waits for their owner, who may be
//! idle or preempted. It only uncharges what the bins hold and writes down how much. Per
//! thread, under `stock`:
//! 1. it sets `STEAL`;
//! 2. after a process-wide barrier (membarrier), it reads each tagged bin's `count`,
//!    uncharges that many objects from the tenant, records the counts (`Drained::rec`) and
//!    sets `DRAINED`.
//!
//! The slots stay in the bins, uncharged, until the owner next leaves its fast path
//! ([`settle`]) or exits: then it takes the bins, uncharges `count - rec` more and frees the
//! slots to their cache. Until then an idle thread keeps them cached, as it keeps its plain
//! bins (at most `tagged_max` per class).
//!
//! Why the counts add up. The barrier pairs with each owner operation, Dekker style: the
//! owner's bin store, a compiler fence and its load of `tag`, against the drainer's store of
//! `STEAL`, membarrier and its load of `count`.
//! - An allocation whose check after the pop saw no `STEAL` is visible to the drainer, so
//!   its object (live now, and still charged) is not in the count it reads. One whose check
//!   saw `STEAL` puts the slot back before it settles: whichever count the drainer read,
//!   the owner then takes at least that many.
//! - A free that read `tag` before `STEAL` was set may push after the drainer read `count`.
//!   Then the bin holds one more than `rec`, and that slot stays charged until the owner
//!   settles or the next drain, which reads `count` again for a `DRAINED` thread and
//!   uncharges the growth. Every later free sees `STEAL` or `DRAINED` and does not push;
//!   should one push anyway (the compiler may reuse a stale load of `tag`), the same
//!   re-read covers it.
//!
//! So `rec <= count` at all times, except while an allocation puts its pop back. No live
//! object is ever uncharged, so no correction ever charges and `current <= max` holds. The
//! tenant is exact once the owner settles, or once a drain finds the thread quiet (at a
//! quiescent point, every drain does).
//!
//! Model-checked: `loom_tests.rs` (`RUSTFLAGS="--cfg loom"`, `.ci/run`) runs this very code
//! under loom, whose atomics the stock and the bins use then (`slabcg_sys::sync`): the
//! owner's [`push`](ObjectStock::push), [`pop`](ObjectStock::pop) and
//! [`pop_class`](ObjectStock::pop_class) with the claim of a stale slot, its
//! [`reclaim_take`](ObjectStock::reclaim_take), retag ([`take_bins`](ObjectStock::take_bins),
//! [`set_tag`](ObjectStock::set_tag); a free's adoption retags the same way),
//! [`take_half`](ObjectStock::take_half) and [`take_own`](ObjectStock::take_own), against a
//! drainer's passes on the stock ([`request_steal`](ObjectStock::request_steal),
//! [`record`](ObjectStock::record), [`recheck`](ObjectStock::recheck), which [`drain`] runs
//! on each thread), with membarrier as a `SeqCst` fence on both sides (what it guarantees).
//! It checks that no live object is ever uncharged and that a quiescent drain is exact;
//! what stays a model (the charges, the slow paths' bookkeeping, the armed list) is listed
//! there.
//!
//! Invariants (under `stock`):
//! - `tag == NO_TAG  =>  every tagged bin is empty`;
//! - `tag == T` or `T | STEAL  =>  every slot in a tagged bin is charged to T with its class
//!   size, and its owner word is T, except the `stale` slots at the bottom of a class's
//!   bin, whose words are a previous tenant's (nonzero)`;
//! - `stale[c] <= count[c]`, and `stale[c] == 0` without `LAZY_OWNERS`: a transfer sets the
//!   mark to the count, a push raises only the count, and every pop that takes a slot
//!   below the mark claims it, with up to `CLAIM_AHEAD` slots of the bin's head from the
//!   class's second claim on, and sets the mark to the count left less those
//!   (`ClassBins::claim`);
//!   a pop refused otherwise puts the slot back, and `take_bins` empties bin and mark.
//! - `tag == T | DRAINED  =>  the bin of class c holds count slots whose owner word is T (but
//!   for the stale ones, as above), of
//!   which count - rec[c] are still charged to T`.

use core::cell::Cell;
use core::mem::MaybeUninit;

use slabcg_accounting::hooks::{self, ObjCgId, StatIdx};

use crate::bin::{Bin, ClassBins};
use crate::cache::SlabCache;
use crate::class_caches;
use crate::front::{FrontBin, FRONTS};
use crate::handback;
use crate::lock::{SpinGuard, SpinLock};
use crate::owner::class_owner_word;
use crate::size_class::{class_size, Kind, NUM_CLASSES};
use crate::slab::FreeObj;
use crate::sys::sync::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

/// A thread cache's per-class lines, whose `tagged` bins this stock keeps (`ClassBins`).
pub(crate) type Lines = [ClassBins; NUM_CLASSES];
/// A thread cache's bins of uncharged accounted slots (`ThreadCache::accounted`).
pub(crate) type Uncharged = [Bin; NUM_CLASSES];
/// A thread cache's dedicated-cache fronts, whose `kept` bins this stock keeps too.
pub(crate) type Fronts = [FrontBin; FRONTS + 1];
/// A walk of every registered thread's object stock, calling the function it is given on
/// each ([`drain`]'s `all`).
pub(crate) type EveryStock<'a> = dyn Fn(&mut dyn FnMut(&ObjectStock)) + 'a;

/// Whether a transfer leaves the owner words of the classes' tagged slots for the pops to
/// write (`ClassBins::stale`). Hardened builds rewrite them all at the transfer, so that the
/// owner word of every free slot in a tagged bin stays the tag: a double free of one then
/// goes to the tagged push, whose check (`Bin::push`) reports it, instead of uncharging a
/// previous tenant.
const LAZY_OWNERS: bool = !cfg!(feature = "hardened");

/// Whether a full tagged bin's half goes to the hand-back still charged (`handback.rs`)
/// instead of being given back. Not in hardened builds, which keep the give-back's path
/// their checks were written and tested against (`allocator/tests/hardened.rs`), at the
/// give-back's price.
const HAND_BACK: bool = !cfg!(feature = "hardened");

/// `tag` when the tagged bins hold nothing. Above every u32, so no owner word (a real objcg
/// id, or garbage read for an invalid free) ever equals it and gets kept in an untagged bin.
pub const NO_TAG: u64 = 1 << 33;
/// Set in `tag` by a drainer between its two passes: the owner must settle before it keeps
/// or reuses anything in its tagged bins.
pub const STEAL: u64 = 1 << 32;
/// Set in `tag` by a drainer that uncharged the tagged bins (`Drained::rec` says how much):
/// the owner must settle before it keeps or reuses anything in them.
pub const DRAINED: u64 = 1 << 34;
/// The bits of `tag` that name the tenant.
const TENANT: u64 = u32::MAX as u64;

/// Allocations under other tenants than the tag (since the last retag) after which a thread
/// retags: hands its tagged objects to the new tenant ([`transfer_bins`]) or gives them
/// back, and starts caching for it.
const RETAG_AFTER: u32 = 64;

/// Most slots a retag hands to the next tenant in place ([`transfer_bins`]): past it the
/// bins hold leftovers the tenants before did not reuse, and each class's stale part only
/// grows. (Hardened builds and the fronts' kept bins also rewrite the owner words of that
/// many slots under the `stock` lock, which a drainer may be waiting for.)
const TRANSFER_MAX: u32 = 1024;
/// Fewest: a tenant that frees a few objects (a query's scratch buffer) leaves them for the
/// usual retag after `RETAG_AFTER` misses, which costs less than a transfer per tenant.
const TRANSFER_MIN: u32 = 8;
/// Frees in a row of one other live tenant's objects, with no charging allocation between,
/// after which a thread whose tagged bins are empty (or hold what it adopted before) keeps
/// that tenant's objects ([`ObjectStock::adopt_on_free`]).
const ADOPT_AFTER: u32 = 64;
/// Smallest tagged bin (in slots) that a free finding it full gives half of back
/// ([`ObjectStock::give_back_full`]): the give-back's lock and uncharge call pay off over
/// 16 objects; below, the classes of more than 4 KiB, the free uncharges its object alone,
/// as before (glibc_thread, up to 32 KiB objects with a tenant per thread: 564 -> 604 M
/// instructions when bins of 4 slots gave 2 back at a time).
pub(crate) const GIVE_BACK_MIN: u32 = 32;
/// Fronts whose kept slots a transfer hands over; with more, the retag gives back instead.
const KEPT_PARTS: usize = 8;

/// Bytes a tagged bin may hold: what a plain bin holds (`thread_cache::BIN_BYTES`). Half
/// as much made a thread with a working set of large objects (glibc_thread: 4 B-32 KiB in
/// one tenant) uncharge one free in 13 and charge again, 1.15x the unaccounted
/// instructions against 1.10x (BENCHMARKS.md section 10).
const TAGGED_BYTES: usize = 128 << 10;

/// Capacity of the tagged bin of class `c`: 128 KiB, at most 1,024 objects (one object of
/// the 128 KiB class), as a plain bin (`thread_cache::bin_max`). Small classes need that
/// many slots: a request's working set is mostly small strings (a map of 80 records frees
/// 240 objects of 8 bytes), and each overflow gives half the bin back (uncharged, in one
/// call: [`ObjectStock::give_back_full`]) to be charged again on reuse.
pub fn tagged_max(c: usize) -> u32 {
    (TAGGED_BYTES / class_size(c)).clamp(1, 1024) as u32
}

/// What a drainer uncharged from a thread's tagged bins, per class (meaningful while `tag`
/// has `DRAINED`; all zero otherwise). Guarded by the thread's `stock` lock.
pub struct Drained {
    rec: [u32; NUM_CLASSES],
    /// The same for the fronts' kept bins, by front index.
    front_rec: [u32; FRONTS],
}

impl Drained {
    pub const NONE: Drained = Drained {
        rec: [0; NUM_CLASSES],
        front_rec: [0; FRONTS],
    };
}

/// A thread's object stock: the state of its tagged bins (which sit in the thread cache's
/// per-class lines, `ClassBins::tagged`, next to the plain bins the same fast paths touch)
/// and its place on the armed list. Embedded in the thread cache (`ThreadCache::stock`);
/// the owner reaches its bins through the thread cache, a drainer through `lines`.
///
/// Invariants, as equations, under `lock` and outside the owner's fast paths (checked by
/// [`ObjectStock::check`]; module docs for why they hold):
/// - `tag == NO_TAG  =>  Σ_c |tagged[c]| == 0`, and `!caching  =>  Σ_c |tagged[c]| == 0`;
/// - `tag & DRAINED == 0  =>  rec[c] == 0` for every class;
/// - `tag & DRAINED != 0  =>  rec[c] <= |tagged[c]|` (the owner has not reclaimed yet);
/// - `tag` names a tenant `T` (no `NO_TAG`)  `=>`  every slot of every tagged bin has owner
///   word `T`, but the bottom `stale[c]` slots of a class's bin, whose word is a previous
///   tenant's (nonzero; `ClassBins::stale`);
/// - `stale[c] <= |tagged[c]|`, and `stale[c] == 0` when `!LAZY_OWNERS`;
/// - `|tagged[c]| <= tagged_max(c)` while `caching`.
pub struct ObjectStock {
    /// The tenant the tagged bins hold objects of (low 32 bits) and the drainer's state bits
    /// (`STEAL`, `DRAINED`), in one word so the fast path tests "same tenant, no drainer"
    /// with one compare. Written only under `lock`.
    pub(crate) tag: AtomicU64,
    /// Serialises every change of `tag` and of the tagged bins other than the owner's fast
    /// paths (module docs), and holds what a drainer uncharged. Nothing done under it may
    /// allocate or free: the owner's own slow paths take it (the invariant walk too), and
    /// it is not re-entrant.
    lock: SpinLock<Drained>,
    pub(crate) tag_misses: Cell<u32>,
    /// The tenant of the latest allocation that missed the tagged bins (`note_miss`), so
    /// that the first miss under each new tenant can look at whether the tag's tenant died.
    pub(crate) miss_cg: Cell<u32>,
    /// The run of uncharging frees ([`count_free_miss`](Self::count_free_miss)): the
    /// tenant of the latest such free in the high 32 bits, how many frees of its objects in
    /// a row, with no charging allocation between, in the low 32 (one word: one load and
    /// one store per uncharging free).
    free_run: Cell<u64>,
    /// The tag was set by a free (`adopt_on_free`), and no allocation charged for it since:
    /// the bins hold objects this thread freed for another thread's tenant. The thread's next
    /// allocation that misses retags at once (`note_miss`), and a run of `ADOPT_AFTER` frees
    /// of another live tenant's objects adopts that one, giving these back.
    adopted: Cell<bool>,
    /// The tenant [`own_on_free`](Self::own_on_free) last looked at since the last retag
    /// (0: none), so that a thread that keeps freeing its scope's objects while the bins
    /// hold another tenant's scans them once, not at every free. A hint only: any value is
    /// safe. Owner only.
    own_free_cg: Cell<u32>,
    /// The armed list of stocks that may hold charged objects, and where this one is on it
    /// (`UNARMED`, `LISTED`, `HELD`): under that list's lock.
    pub(crate) armed: AtomicU8,
    /// Whether the idle decay saw this stock on the armed list at its previous pass with no
    /// retag since (`drain`, `ObjectDrain::Idle`).
    pub(crate) aged: AtomicBool,
    /// Whether the tagged bins may hold objects (their capacity is `tagged_max`, else 0):
    /// false while the thread's tag is a tenant whose stock budget it has no share of
    /// ([`note_retag`](Self::note_retag)). Written by the owner under `lock`.
    pub(crate) caching: AtomicBool,
    pub(crate) anext: AtomicPtr<ObjectStock>,
    pub(crate) aprev: AtomicPtr<ObjectStock>,
    /// The thread cache's lines holding this stock's tagged bins, for a drainer (set when
    /// the thread registers, before the stock can be armed or found in the registry).
    lines: AtomicPtr<Lines>,
    /// The thread cache's fronts, whose kept bins are tagged bins too (set with `lines`;
    /// null in the loom model, which has no fronts).
    fronts: AtomicPtr<Fronts>,
    /// Bit `i`: front `i`'s kept bin may have capacity, so may hold slots (invariant: a kept
    /// bin with capacity or slots, or a drainer's `front_rec` for it, has its bit). Written by
    /// the owner only, before it raises a capacity and after it closes an empty bin; read by
    /// the owner and, under the `stock` lock after the remote barrier, by drainers, so a
    /// thread that uses few dedicated caches costs a retag or a drain only those fronts.
    kept_mask: AtomicU64,
}

impl ObjectStock {
    pub(crate) const fn new() -> ObjectStock {
        ObjectStock {
            tag: AtomicU64::new(NO_TAG),
            lock: SpinLock::new(Drained::NONE),
            tag_misses: Cell::new(0),
            miss_cg: Cell::new(0),
            free_run: Cell::new(0),
            adopted: Cell::new(false),
            own_free_cg: Cell::new(0),
            armed: AtomicU8::new(UNARMED),
            aged: AtomicBool::new(false),
            caching: AtomicBool::new(true),
            anext: AtomicPtr::new(core::ptr::null_mut()),
            aprev: AtomicPtr::new(core::ptr::null_mut()),
            lines: AtomicPtr::new(core::ptr::null_mut()),
            fronts: AtomicPtr::new(core::ptr::null_mut()),
            kept_mask: AtomicU64::new(0),
        }
    }

    /// Records where this stock's tagged bins are (`lines`), and gives them their
    /// capacity: the thread registers. Its owner, before the thread joins the registry.
    pub(crate) fn attach(&self, lines: &Lines) {
        self.lines
            .store(lines as *const Lines as *mut Lines, Ordering::Relaxed);
        for (c, b) in lines.iter().enumerate() {
            b.tagged.set_capacity(tagged_max(c));
        }
    }

    /// Records where this stock's thread cache keeps its fronts (`attach`'s companion; their
    /// kept bins open with the fronts, `FrontBin::kept_capacity`).
    pub(crate) fn attach_fronts(&self, fronts: &Fronts) {
        self.fronts
            .store(fronts as *const Fronts as *mut Fronts, Ordering::Relaxed);
    }

    /// The fronts of this stock's thread cache (none in the loom model).
    pub(crate) fn fronts(&self) -> &[FrontBin] {
        let f = self.fronts.load(Ordering::Relaxed);
        if f.is_null() {
            return &[];
        }
        // SAFETY: set by `attach_fronts` before the stock could be armed or registered,
        // pointing into the same thread cache as the stock, which outlives every visit.
        unsafe { &(&*f)[..FRONTS] }
    }

    /// The fronts whose kept bin may hold slots (`kept_mask`), with their index.
    pub(crate) fn kept_fronts(&self) -> impl Iterator<Item = (usize, &FrontBin)> {
        let fronts = self.fronts();
        let mask = if fronts.is_empty() {
            0
        } else {
            self.kept_mask.load(Ordering::Relaxed)
        };
        Bits(mask).map(move |i| (i, &fronts[i]))
    }

    /// Opens front `i`'s kept bin (its front just opened, `thread_cache::open_front`): the
    /// capacity `FrontBin::kept_capacity` gives it while this stock caches, its bit first.
    /// The owner only.
    pub(crate) fn open_kept(&self, i: u32, f: &FrontBin) {
        let cap = f.kept_capacity(self.caching.load(Ordering::Relaxed));
        if cap > 0 {
            self.set_kept_bit(i as usize);
        }
        f.kept.set_capacity(cap);
    }

    /// Sets front `i`'s bit of `kept_mask` (the owner only).
    pub(crate) fn set_kept_bit(&self, i: usize) {
        let m = self.kept_mask.load(Ordering::Relaxed);
        self.kept_mask.store(m | 1 << i, Ordering::Relaxed);
    }

    /// Every front's kept bin is closed and empty (thread exit, after `give_back_own`): no
    /// bit is left. The owner only.
    pub(crate) fn kept_closed(&self) {
        debug_assert!(self.fronts().iter().all(|f| f.kept.count() == 0));
        self.kept_mask.store(0, Ordering::Relaxed);
    }

    /// The lines of this stock's thread cache, for a drainer.
    fn lines(&self) -> &Lines {
        // SAFETY: set by `attach` before the stock could be armed or registered, pointing
        // into the same thread cache as the stock, which outlives every visit of a drainer
        // (it leaves both lists before its thread exits).
        unsafe { &*self.lines.load(Ordering::Relaxed) }
    }

    /// Takes the stock's lock.
    pub(crate) fn lock(&self) -> SpinGuard<'_, Drained> {
        self.lock.lock()
    }

    /// Pops a slot already charged to `cg` from `bin`, a front's kept bin. (A class's tagged
    /// bin has a stale mark: [`pop_class`](Self::pop_class).)
    #[inline(always)]
    pub(crate) fn pop(&self, bin: &Bin, cg: ObjCgId) -> Pop {
        // No stale mark, no compare, and no load of the count after the barrier for it (an
        // atomic load LLVM keeps even when the compare with a mark of 0 folds away).
        self.pop_checked(bin, None, cg)
    }

    /// [`pop`](Self::pop) from a class's tagged bin, whose stale mark is `stale`
    /// (`ClassBins::stale`): a slot below the mark, whose owner word a transfer left, comes
    /// back as `Pop::Foreign` too, so that the allocation's fast path stays two compares and
    /// one out-of-line call (inlined, the word's write made it too big for LTO to inline into
    /// callers with a constant layout); the caller's slow path claims it
    /// (`ThreadCache::claim_stale`).
    #[inline(always)]
    pub(crate) fn pop_class(&self, bin: &Bin, stale: &Cell<u32>, cg: ObjCgId) -> Pop {
        self.pop_checked(bin, Some(stale), cg)
    }

    /// [`pop`](Self::pop) and [`pop_class`](Self::pop_class): the pop, then the check.
    #[inline(always)]
    fn pop_checked(&self, bin: &Bin, stale: Option<&Cell<u32>>, cg: ObjCgId) -> Pop {
        let p = bin.pop();
        if p.is_null() {
            return Pop::Empty;
        }
        // The check follows the pop, so that a drainer either sees the pop or is seen here
        // (module docs).
        hooks::light_barrier();
        if self.tag.load(Ordering::Relaxed) != u64::from(cg)
            || stale.is_some_and(|s| LAZY_OWNERS && bin.count() < s.get())
        {
            return Pop::Foreign(p);
        }
        Pop::Hit(p)
    }

    /// Pops up to `out.len()` slots already charged to `cg` from `bin` (one of this stock's
    /// tagged bins) with one check after them all: [`pop`](Self::pop)'s check covers any
    /// number of pops before it (a drainer that counted the bin before some of them is seen
    /// here, and then all of them are put back, as one pop is). Returns how many; 0 when the
    /// bin is empty or not `cg`'s (then `out`'s entries are null). From a class's bin, the
    /// caller must then claim the slots below its stale mark (`ClassBins::claim_many`).
    #[inline]
    pub(crate) fn pop_many(&self, bin: &Bin, cg: ObjCgId, out: &mut [*mut u8]) -> usize {
        let k = bin.pop_many(out);
        if k == 0 {
            return 0;
        }
        hooks::light_barrier();
        if self.tag.load(Ordering::Relaxed) != u64::from(cg) {
            for p in out[..k].iter_mut().rev() {
                // SAFETY: p was just popped from bin, in this order (put back in reverse).
                unsafe { bin.unpop(*p) };
                // The caller's entries as they were (a refused bulk leaves them null).
                *p = core::ptr::null_mut();
            }
            return 0;
        }
        k
    }

    /// The tag, for a batch of pushes (`Keep` in `bulk.rs`) that chooses its slots by it and
    /// then pushes them all with [`push_chain`](Self::push_chain).
    #[inline]
    pub(crate) fn tag_word(&self) -> u64 {
        self.tag.load(Ordering::Relaxed)
    }

    /// Pushes a chain of `n` slots, `head` to `tail`, charged to the tenant of `tag` (chosen
    /// by it as [`tag_word`](Self::tag_word) read it) into `bin`, one of this stock's tagged
    /// bins, when the tag still reads `tag`: the check right before the push, as a single
    /// push makes it, so that a drainer that came while the batch was chosen finds no slot
    /// pushed after its passes settled this thread. False, nothing pushed, when the tag
    /// changed: the caller frees the slots, uncharging them.
    ///
    /// # Safety
    /// The chain's slots are slots of the bin's class (or front core), each charged to the
    /// tenant of `tag`, given up, once; the bin has room for `n`, and none is its head.
    #[inline]
    pub(crate) unsafe fn push_chain(
        &self,
        bin: &Bin,
        tag: u64,
        head: *mut FreeObj,
        tail: *mut FreeObj,
        n: u32,
    ) -> bool {
        if self.tag.load(Ordering::Relaxed) != tag {
            return false;
        }
        // SAFETY: caller's contract.
        unsafe { bin.push_chain(head, tail, n) };
        true
    }

    /// Whether a slot charged to `owner` may be kept in one of this stock's tagged bins:
    /// `owner` is the tag ([`push`](Self::push)'s check, for a caller that pushes itself).
    #[inline(always)]
    pub(crate) fn keeps(&self, owner: ObjCgId) -> bool {
        self.tag.load(Ordering::Relaxed) == u64::from(owner)
    }

    /// Keeps slot `p`, whose owner word says `owner`, charged in `bin` (one of this stock's
    /// tagged bins) when `owner` is the tag and there is room. False when it was not kept.
    ///
    /// # Safety
    /// `p` must be a live accounted slot of the bin's class (or front core) charged to
    /// `owner`, given up.
    #[inline(always)]
    pub(crate) unsafe fn push(&self, bin: &Bin, owner: ObjCgId, p: *mut u8) -> bool {
        if !self.keeps(owner) {
            return false;
        }
        // SAFETY: the caller gives up p, which stays charged to the tag.
        unsafe { bin.push(p) }
    }

    /// Tags the stock for `cg`: its bins keep `cg`'s objects from now on. Under `lock`, by
    /// the owner (a retag), after the bins were emptied or handed to `cg`.
    pub(crate) fn set_tag(&self, cg: ObjCgId) {
        self.tag.store(u64::from(cg), Ordering::Relaxed);
        self.tag_misses.set(0);
        self.adopted.set(false);
        self.own_free_cg.set(0);
    }

    /// Whether a drainer has been at this thread's tagged bins since the owner last
    /// reclaimed them ([`reclaim`](Self::reclaim)).
    #[inline]
    pub(crate) fn must_reclaim(&self) -> bool {
        self.tag.load(Ordering::Relaxed) & (STEAL | DRAINED) != 0
    }

    /// The stock's invariants (struct docs), by walking its tagged bins in `lines` and the
    /// owner words of their slots: the owner, off its fast paths, under the stock's lock
    /// (which a drainer takes to change `tag` or `rec`). Expensive (`crate::invariant`).
    pub(crate) fn check(&self, lines: &Lines) {
        use crate::invariant::broken;
        let d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        let caching = self.caching.load(Ordering::Relaxed);
        for (c, line) in lines.iter().enumerate() {
            let bin = &line.tagged;
            bin.check();
            let n = bin.count();
            if n != 0 && t & NO_TAG != 0 {
                broken("object stock: tagged bins hold objects without a tag");
            }
            if n != 0 && !caching {
                broken("object stock: tagged bins hold objects without capacity");
            }
            if t & DRAINED == 0 && d.rec[c] != 0 {
                broken("object stock: a drainer's record without DRAINED");
            }
            if t & DRAINED != 0 && d.rec[c] > n {
                broken("object stock: a drainer uncharged more than the bin holds");
            }
            let stale = line.stale.get();
            if stale > n || (!LAZY_OWNERS && stale != 0) {
                broken("object stock: a class's stale mark is above its bin's count, or set without LAZY_OWNERS");
            }
            if t & NO_TAG == 0 {
                let tenant = (t & TENANT) as ObjCgId;
                // Above the stale mark the owner words are the tag; below it, a transfer left
                // a previous tenant's (never 0: every slot here was charged).
                let fresh = n - stale;
                let mut o = bin.head();
                let mut i = 0;
                while !o.is_null() {
                    // SAFETY: o is a free slot of class c's accounted cache on this thread's
                    // own tagged bin (Bin::check just walked the list), and `line.owner` is
                    // that cache's geometry.
                    unsafe {
                        let w = (*class_owner_word(o as *mut u8, c, &line.owner))
                            .load(Ordering::Relaxed);
                        if i < fresh && w != tenant {
                            broken("object stock: a kept slot's owner word is not the tag");
                        }
                        if w == 0 {
                            broken("object stock: a kept slot's owner word is cleared");
                        }
                        o = FreeObj::next(o);
                    }
                    i += 1;
                }
            }
        }
        let mask = self.kept_mask.load(Ordering::Relaxed);
        for (i, f) in self.fronts().iter().enumerate() {
            let n = f.kept.count();
            if mask & 1 << i == 0 && (n != 0 || f.kept.capacity() != 0 || d.front_rec[i] != 0) {
                broken("object stock: a front's kept bin is open or counted but not in the mask");
            }
            if n != 0 && (t & NO_TAG != 0 || !caching) {
                broken("object stock: a front's kept bin holds objects without a tag or capacity");
            }
            if t & DRAINED == 0 && d.front_rec[i] != 0 {
                broken("object stock: a drainer's front record without DRAINED");
            }
            if t & DRAINED != 0 && d.front_rec[i] > n {
                broken("object stock: a drainer uncharged more than a kept bin holds");
            }
            if n != 0 && t & NO_TAG == 0 {
                let tenant = (t & TENANT) as ObjCgId;
                // SAFETY: a front with kept slots is tagged with an accounted core
                // (`FrontBin::check`), and cores are never freed.
                let core = unsafe { &*f.tag() };
                let mut o = f.kept.head();
                while !o.is_null() {
                    // SAFETY: o is a free slot of that core on this thread's own kept bin.
                    unsafe {
                        let w = core.owner_word_of(o as *mut u8);
                        if !core::ptr::eq(w, crate::owner::owner_word(o as *mut u8)) {
                            broken("object stock: a kept front slot's owner word is misplaced");
                        }
                        if (*w).load(Ordering::Relaxed) != tenant {
                            broken("object stock: a kept front slot's owner word is not the tag");
                        }
                        o = FreeObj::next(o);
                    }
                }
            }
        }
    }
}

/// What [`ObjectStock::pop`] found.
pub enum Pop {
    /// A slot charged to the tenant, now the caller's.
    Hit(*mut u8),
    /// The tagged bin of the class was empty.
    Empty,
    /// The bin held a slot but the tag is not the tenant (or a drainer has been here): the
    /// caller must put the slot back (`Bin::unpop`, `ThreadCache::put_back`). From a class's
    /// bin ([`ObjectStock::pop_class`]), also a slot of the tenant's below the stale mark,
    /// which `ThreadCache::claim_stale` takes instead.
    Foreign(*mut u8),
}

impl ObjectStock {
    /// [`note_miss`](Self::note_miss)'s common case, inline: another miss under the tenant
    /// the last miss was for, with no drainer's bits, before `RETAG_AFTER`, only counts. True
    /// when it did (nothing else to do); false sends the caller to `note_miss`.
    #[inline(always)]
    pub(crate) fn count_miss(&self, cg: ObjCgId) -> bool {
        // The callers' test (`note_miss` returns at once for the tag's own tenant).
        debug_assert!(self.tag.load(Ordering::Relaxed) != u64::from(cg));
        let misses = self.tag_misses.get() + 1;
        if self.miss_cg.get() != cg
            || misses >= RETAG_AFTER
            || self.tag.load(Ordering::Relaxed) & (NO_TAG | STEAL | DRAINED) != 0
            || self.adopted.get()
        {
            return false;
        }
        self.tag_misses.set(misses);
        true
    }

    /// Called after an allocation under `cg` missed the tagged bins. Retags for `cg` (under the
    /// `stock` lock) when a drainer has been here or the bins were given back, on the first
    /// miss under a new tenant when the bins are empty or hold at least `TRANSFER_MIN` objects
    /// of a tenant that died (a tenant per request: the last request's objects will never be
    /// reused by it), and after `RETAG_AFTER` misses. The misses in between (a thread
    /// interleaving live tenants) cost a counter update: no lock, no scan.
    #[cold]
    #[inline(never)]
    pub(crate) fn note_miss(&self, lines: &Lines, uncharged: &Uncharged, cg: ObjCgId) {
        // A racy read: a drainer may set STEAL or DRAINED at any time, and the next miss (or
        // the next slow path's settle) sees it; only the owner changes the tenant bits.
        let t = self.tag.load(Ordering::Relaxed);
        if t == u64::from(cg) {
            return;
        }
        let misses = self.tag_misses.get() + 1;
        let new_cg = self.miss_cg.replace(cg) != cg;
        // NO_TAG (the bins were given back: this thread's own drain, `trim`, a settle) retags at
        // once below, as do a drainer's bits.
        // Bins a free adopted (`adopt_on_free`) go at the first miss: this thread allocates
        // for a tenant of its own again.
        let adopted = self.adopted.get();
        if !new_cg && misses < RETAG_AFTER && t & (NO_TAG | STEAL | DRAINED) == 0 && !adopted {
            self.tag_misses.set(misses);
            return;
        }
        let d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        let drained = t & (STEAL | DRAINED) != 0;
        let empty = !drained && !holds_tagged(self, lines);
        if empty {
            // Nothing to give back (and `rec` is all zero without DRAINED): just retag. A
            // thread that works for one short-lived tenant after another (a tenant per query)
            // comes here once per tenant.
            self.note_retag(lines, cg);
            self.set_tag(cg);
            drop(d);
        } else if drained
            || adopted
            || misses >= RETAG_AFTER
            || (new_cg && tagged_slots(self, lines) >= TRANSFER_MIN && !tag_alive(t))
        {
            self.retag_giving_back(lines, uncharged, d, cg);
        } else {
            self.tag_misses.set(misses);
        }
    }

    /// Whether the last miss was already `cg`'s ([`transfer_on_miss`](Self::transfer_on_miss)
    /// returns at once then).
    #[inline(always)]
    pub(crate) fn missed_before(&self, cg: ObjCgId) -> bool {
        self.miss_cg.get() == cg
    }

    /// The first allocation under a new tenant `cg` found another tenant's objects in the
    /// tagged bins (`charge::alloc_small_put_back`): when that tenant died and the bins hold at
    /// least `TRANSFER_MIN` objects, hands them to `cg` in place now, so that this allocation
    /// takes one of them. True when the thread now caches for `cg`. Everything else is left to
    /// [`note_miss`], after the allocation's charge, which makes `cg`'s byte-stock slot first
    /// (a retag that gives the objects back then finds the slot, and keeps caching); a refused
    /// transfer leaves the objects to the retag after `RETAG_AFTER` misses.
    #[cold]
    #[inline(never)]
    pub(crate) fn transfer_on_miss(&self, lines: &Lines, cg: ObjCgId) -> bool {
        if self.miss_cg.get() == cg {
            return false;
        }
        let t = self.tag.load(Ordering::Relaxed);
        if t == u64::from(cg) || t & (NO_TAG | STEAL | DRAINED) != 0 {
            return false;
        }
        // From here on, `note_miss` need not look at this tenant's first miss again: the scan
        // and the liveness check below are the ones it would make.
        self.miss_cg.set(cg);
        if tagged_slots(self, lines) < TRANSFER_MIN {
            return false;
        }
        let _d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        if t & (NO_TAG | STEAL | DRAINED) != 0 {
            // A drainer came meanwhile: `note_miss` settles, as on any first miss.
            self.miss_cg.set(0);
            return false;
        }
        if tag_alive(t) || !self.transfer_bins(lines, cg) {
            return false;
        }
        self.note_retag(lines, cg);
        self.set_tag(cg);
        true
    }

    /// A charging allocation ran on this thread: the frees before it were not a freeing
    /// thread's alone ([`adopt_on_free`](Self::adopt_on_free)).
    #[inline(always)]
    pub(crate) fn note_charging(&self) {
        self.free_run.set(0);
    }

    /// An allocation charged for the tag's own tenant: the tag is this thread's tenant now,
    /// whoever set it, and its bins are not handed on at the next miss.
    #[inline(always)]
    pub(crate) fn note_own(&self) {
        self.adopted.set(false);
    }

    /// Counts the uncharging free of an object of `x` (not the tag's) in the run of frees of
    /// one tenant's objects; true when the run reached `ADOPT_AFTER`, and starts it again.
    /// Inline: most uncharging frees come here and go (a thread that frees another's objects
    /// between allocations of its own, or the objects of many dead requests).
    #[inline(always)]
    pub(crate) fn count_free_miss(&self, x: ObjCgId) -> bool {
        let run = self.free_run.get();
        if (run >> 32) as u32 != x {
            self.free_run.set(u64::from(x) << 32 | 1);
            return false;
        }
        if (run as u32) + 1 < ADOPT_AFTER {
            self.free_run.set(run + 1);
            return false;
        }
        self.free_run.set(u64::from(x) << 32);
        true
    }

    /// Called by the uncharging free of an object of `x` (its owner, checked, not the tag)
    /// once `x`'s objects were freed `ADOPT_AFTER` times in a row with no charging
    /// allocation between ([`count_free_miss`](Self::count_free_miss)): retags the stock for
    /// `x` when `x`'s tenant is alive and the tagged bins are empty or were themselves
    /// adopted (their objects are given back first). True when it did.
    ///
    /// So a thread that frees what another thread's tenant allocates (a consumer, `xmalloc`
    /// with a tenant per thread) keeps those objects charged as their owner's own thread
    /// would, instead of uncharging each (about 150 instructions), and hands a full bin's
    /// half, still charged, to the producer's next allocations
    /// ([`give_back_full`](Self::give_back_full), `handback.rs`); it gives them back when a
    /// run of `ADOPT_AFTER` frees adopts another live tenant, or at its next allocation that
    /// misses (`note_miss`, which hands them to its tenant in place when it can,
    /// `transfer_bins`: the transfer moves their charge, as for a dead request's).
    /// The kernel's object stock follows frees the same way (`refill_obj_stock` replaces the
    /// cached objcg). A thread that keeps its own tenant's objects has them in its tagged
    /// bins, or allocates between the frees, and is left as it is. `x`'s tenant may die
    /// after the check: its kept objects are then a dead tenant's, as when a request ends
    /// while a thread is tagged for it, and go back at the next retag or drain.
    ///
    /// # Safety
    /// `x` is the owner of an object the caller is freeing, charged to it and not yet
    /// uncharged (those bytes' refs keep `x`'s objcg alive for the call).
    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn adopt_on_free(
        &self,
        lines: &Lines,
        uncharged: &Uncharged,
        x: ObjCgId,
    ) -> bool {
        // The caller came here because `x` is not the tag (`keeps`); with a drainer's bit the
        // allocation path settles first.
        if self.tag.load(Ordering::Relaxed) & (STEAL | DRAINED) != 0
            || (!self.adopted.get() && holds_tagged(self, lines))
        {
            return false;
        }
        // SAFETY: caller's contract.
        if !unsafe { hooks::objcg_tenant_alive(x) } {
            return false;
        }
        let mut d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        // Under the lock, as `note_miss`'s retags: no drainer's bit, so `rec` is all zero.
        if t & (STEAL | DRAINED) != 0 {
            return false;
        }
        let taken = if holds_tagged(self, lines) {
            if !self.adopted.get() {
                return false;
            }
            self.take_bins(lines, &mut d, Count::Trusted)
        } else {
            NOTHING
        };
        self.note_retag(lines, x);
        self.set_tag(x);
        self.adopted.set(true);
        drop(d);
        give_back(lines, self.fronts(), &taken, GiveTo::OwnBins(uncharged));
        true
    }

    /// Whether the uncharging free of an object of `x`, the calling thread's current tenant,
    /// should try [`own_on_free`](Self::own_on_free): not when it already did for `x`.
    #[inline(always)]
    pub(crate) fn own_untried(&self, x: ObjCgId) -> bool {
        self.own_free_cg.get() != x
    }

    /// Called by the uncharging free of an object of `x` (not the tag) while the thread is in
    /// `x`'s scope: the thread switched to `x` (a worker polling another request, or the
    /// same request again), and its first free came before its first allocation. Retags for
    /// `x` when the tagged bins are empty, as the allocation's miss would (`note_miss`), so
    /// that this free keeps its slot and the next allocation takes it back: a thread that
    /// switches between live tenants pays one retag a switch instead of the retag, an
    /// uncharge and a charge. True when it did. Bins that hold something are left to the
    /// allocation's miss, which may hand a dead tenant's to `x` (`transfer_on_miss`).
    ///
    /// # Safety
    /// `x` is the owner of an object the caller is freeing, charged to it and not yet
    /// uncharged, and the calling thread's current scope's objcg.
    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn own_on_free(&self, lines: &Lines, x: ObjCgId) -> bool {
        self.own_free_cg.set(x);
        // With a drainer's bit the allocation path settles first; the adopted bins go at the
        // next miss (`note_miss`), not here. Without a byte-stock slot for `x` (more tenants
        // in turn than the stock has slots) the retag would leave the bins closed
        // (`note_retag`): the allocation's miss retags after its charge made the slot.
        if self.tag.load(Ordering::Relaxed) & (STEAL | DRAINED) != 0
            || self.adopted.get()
            || !hooks::stock_holds(x)
        {
            return false;
        }
        let d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        // Under the lock, as `note_miss`'s retags: no drainer's bit, so `rec` is all zero; the
        // bins are the owner's to look at.
        if t & (STEAL | DRAINED) != 0 || holds_tagged(self, lines) {
            return false;
        }
        self.note_retag(lines, x);
        self.set_tag(x);
        drop(d);
        true
    }

    /// Class `c`'s tagged bin is full (the free of `freeing` found it so): takes its newest
    /// half ([`take_half`](Self::take_half)) and leaves it, still charged, in the hand-back
    /// for the tag's tenant (`handback.rs`), or, when the hand-back refuses it or the half
    /// cannot go there (stale owner words, `freeing` in it, a hardened build), gives it back
    /// with one uncharge (`give_back`, to the uncharged bin and the slabs); so that the free
    /// that found the bin full keeps its slot, as a plain bin's overflow does. False,
    /// nothing taken, when a drainer's bit is set (the free uncharges; the next slow path
    /// settles).
    #[cold]
    #[inline(never)]
    pub(crate) fn give_back_full(
        &self,
        lines: &Lines,
        uncharged: &Uncharged,
        c: usize,
        freeing: *mut u8,
    ) -> bool {
        let Some(h) = self.take_half_ends(lines, c, freeing) else {
            return false;
        };
        let tenant = (h.tag & TENANT) as ObjCgId;
        // SAFETY: the half's charged bytes hold refs on the tag's objcg.
        if HAND_BACK && h.fresh && unsafe { hooks::objcg_tenant_alive(tenant) } {
            // Still charged, for the next thread that allocates the class for the tag's
            // tenant (`handback.rs`): a consumer's frees become its producer's allocations
            // without an uncharge and a charge per object. A dead tenant's half is given
            // back: nobody allocates for it any more.
            clear_owners(lines, c, h.head, h.n);
            let chain = handback::Chain {
                head: h.head,
                tail: h.tail,
                n: h.n,
            };
            let mut evicted = handback::Entry::FREE;
            // SAFETY: the newest half of a tagged bin with no drainer's bit: free slots of
            // class c's accounted cache, each charged to the tag's tenant (whose objcg
            // their bytes' refs keep), their words just cleared; given up here.
            let kept = unsafe { handback::put(tenant, c, chain, &mut evicted) };
            if evicted.n > 0 {
                let ec = evicted.c;
                handback::release(evicted.cg, ec, evicted.chains(), Some(&uncharged[ec]));
            }
            if !kept {
                handback::release(tenant, c, &[chain], Some(&uncharged[c]));
            }
            return true;
        }
        give_back(
            lines,
            self.fronts(),
            &h.taken(c),
            GiveTo::OwnBins(uncharged),
        );
        true
    }

    /// Under the lock, when no drainer has been here, takes the newest half of class `c`'s
    /// tagged bin (at least one slot; the bin is not empty), to be given back after the
    /// lock. None, nothing taken, when the tag has a drainer's bit or none. (The loom model's
    /// entry: `give_back_full` takes the half with both ends.)
    #[cfg(loom)]
    pub(crate) fn take_half(&self, lines: &Lines, c: usize) -> Option<Taken> {
        self.take_half_ends(lines, c, core::ptr::null_mut())
            .map(|h| h.taken(c))
    }

    /// [`take_half`](Self::take_half), as a chain with both ends. The half is not `fresh`
    /// when it holds `freeing`, the slot whose free found the bin full: a double free, which
    /// the give-back reports (it clears the words, and `ThreadCache::keep_again` finds the
    /// slot's cleared); handed back, the slot would be listed twice.
    fn take_half_ends(&self, lines: &Lines, c: usize, freeing: *mut u8) -> Option<Half> {
        let _d = self.lock();
        let tag = self.tag.load(Ordering::Relaxed);
        if tag & (NO_TAG | STEAL | DRAINED) != 0 {
            return None;
        }
        // Without DRAINED, `rec` is all zero (`Drained`'s invariant): every slot of the bin,
        // the stale ones included (a transfer moved their charge), is charged to the tag.
        let line = &lines[c];
        let k = (line.tagged.count() / 2).max(1);
        debug_assert!(line.tagged.count() >= k);
        // The stale slots are the bottom ones: the top k are all above the mark when the
        // slots left are at least as many as the mark.
        let above = line.tagged.count() - k >= line.stale.get();
        let (head, tail, twice) = line.tagged.take_ends(k, freeing);
        let fresh = above && !twice;
        // Those left stay below the mark.
        line.stale.set(line.stale.get().min(line.tagged.count()));
        Some(Half {
            tag,
            head,
            tail,
            n: k,
            fresh,
        })
    }

    /// Just before a retag, under the thread's `stock` lock (which a drain of this object stock
    /// takes): the accounting learns that this thread may keep `cg`'s freed objects charged, so
    /// that a refused charge of that tenant drains stocks again.
    ///
    /// The object stock follows the byte stock's budget (the accounting's stock budget: 4
    /// slots per CPU for one tenant, all threads together): a thread keeps `cg`'s freed objects
    /// only if its byte stock holds a slot for `cg` now (it just charged the allocation that
    /// missed; after an adoption, the uncharging frees before it may have made one). Else
    /// its tagged bins get no capacity until the next retag, and it stays off the armed list:
    /// so thousands of threads that served one tenant leave about as many armed caches as
    /// the budget has slots, and a refusal's drain visits those, not every thread.
    fn note_retag(&self, lines: &Lines, cg: ObjCgId) {
        {
            // Tagged bins that still hold objects at a retag (a transfer hands them over in
            // place; the other retags empty them first) hold charged objects
            // of `cg` from now on, which drains must find: then the thread keeps caching and
            // is armed whatever the budget says. The scan only runs past the budget.
            let caching = hooks::stock_holds(cg) || holds_tagged(self, lines);
            set_caching(self, lines, caching);
            // On the armed list first, then the record: a refusal's drain that missed this
            // thread (it took the list before we joined it) started before the record's read,
            // so the record is at least its generation and it completes nothing for `cg` (see
            // `ArmedList`).
            if caching {
                arm(self);
            }
        }
        // SAFETY: `cg` is the calling thread's current scope (note_miss's caller allocates in
        // it; `own_on_free`'s frees in it), so its tenant is alive; or, from `adopt_on_free`,
        // the owner of the object being freed, whose charged bytes hold refs on its objcg.
        unsafe { hooks::note_object_stock(cg) };
    }

    /// A thread tagged `cg` whose tagged bins have no capacity (it retagged while `cg`'s stock
    /// budget was spent, or before the allocation that made its byte slot) starts caching once
    /// its byte stock holds a slot for `cg`: otherwise it would charge and uncharge every object
    /// until its next retag. Called from the charging allocation path only.
    #[cold]
    #[inline(never)]
    pub(crate) fn recheck_caching(&self, lines: &Lines, cg: ObjCgId) {
        if !hooks::stock_holds(cg) {
            return;
        }
        let _d = self.lock();
        if self.tag.load(Ordering::Relaxed) != u64::from(cg) || self.caching.load(Ordering::Relaxed)
        {
            return;
        }
        self.note_retag(lines, cg);
    }

    /// [`note_miss`]'s retag when the tagged bins hold objects or a drainer has been here:
    /// takes them under the lock `d`, then gives them back after releasing it.
    #[cold]
    #[inline(never)]
    fn retag_giving_back(
        &self,
        lines: &Lines,
        uncharged: &Uncharged,
        mut d: SpinGuard<'_, Drained>,
        cg: ObjCgId,
    ) {
        if self.transfer_bins(lines, cg) {
            self.note_retag(lines, cg);
            self.set_tag(cg);
            return;
        }
        let taken = self.take_bins(lines, &mut d, Count::Trusted);
        self.note_retag(lines, cg);
        self.set_tag(cg);
        drop(d);
        give_back(lines, self.fronts(), &taken, GiveTo::OwnBins(uncharged));
    }

    /// Hands the tagged objects to `cg` in place (`hooks::transfer_charge`): their charge moves
    /// from the tag's tenant (for a dead request, the customer it was reparented to) to `cg`'s
    /// below the two's common ancestor, their owner words become `cg` (a class's lazily, as
    /// they are popped or claimed ahead of a pop: `LAZY_OWNERS`), and they stay in the
    /// tagged bins, so `cg`'s allocations take them without charging: a tenant per request pays
    /// one transfer per request instead of a charge per object. False, with nothing changed,
    /// when a drainer has been here, the bins hold too many slots, or a limit on `cg`'s side
    /// refuses. Under the thread's `stock` lock.
    fn transfer_bins(&self, lines: &Lines, cg: ObjCgId) -> bool {
        let t = self.tag.load(Ordering::Relaxed);
        if t & (NO_TAG | STEAL | DRAINED) != 0 {
            return false;
        }
        // The classes and fronts that hold slots, and their bytes (most bins are empty).
        let mut parts = [(StatIdx::slab(0), 0u64); NUM_CLASSES + KEPT_PARTS];
        let mut classes = [0u8; NUM_CLASSES];
        let mut kept = [0u8; KEPT_PARTS];
        let (mut k, mut nc, mut nf, mut slots) = (0, 0, 0, 0);
        for (c, b) in lines.iter().enumerate() {
            let n = b.tagged.count();
            if n != 0 {
                parts[k] = (StatIdx::slab(c), u64::from(n) * class_size(c) as u64);
                classes[nc] = c as u8;
                k += 1;
                nc += 1;
                slots += n;
            }
        }
        let fronts = self.fronts();
        if self.kept_mask.load(Ordering::Relaxed) != 0 {
            let Some((kf, ks)) = self.kept_parts(&mut parts[k..], &mut kept) else {
                // Kept slots of more caches than a transfer carries: give back instead.
                return false;
            };
            (k, nf, slots) = (k + kf, kf, slots + ks);
        }
        // Past this many slots (objects the tenants before did not reuse pile up), give them
        // all back instead, which empties the bins: each bin's stale part only grows.
        // Below TRANSFER_MIN, the transfer's fixed cost is more than charging the few objects.
        if !(TRANSFER_MIN..=TRANSFER_MAX).contains(&slots) {
            return false;
        }
        // SAFETY: with no drainer's bit in the tag, and this thread holding `stock`, every slot
        // of the tagged bins is charged to the tag's objcg with its class size (a kept slot:
        // its front core's object size, under that core's stat; module invariants), holding
        // those bytes' refs; `cg` is the current scope. On success the
        // owner words become `cg` below, or as they are claimed (the stale marks), before
        // anything but a give-back or the invariant walk reads them (module docs).
        if !unsafe { hooks::transfer_charge((t & TENANT) as ObjCgId, cg, &parts[..k]) } {
            return false;
        }
        for &c in &classes[..nc] {
            let b = &lines[c as usize];
            let n = b.tagged.count();
            if LAZY_OWNERS {
                // The words are written by the allocations that pop the slots
                // (`ClassBins::claim`): a request pays for the slots it takes, not, again and
                // again, for every leftover of the requests before.
                b.stale.set(n);
                b.claimed.set(false);
                continue;
            }
            let mut o = b.tagged.head();
            // Hardened builds only. Counted, not to null (as cheap): a
            // chain that outlasts its count is looped (`Steps`), and reported below. One that
            // ends before its count (a double free in a bulk free, `bin::list_too_short`)
            // faults on the null link here: a check per slot cost this walk 4%.
            for _ in 0..n {
                // SAFETY: o is a free slot of this class's accounted cache on this thread's own
                // tagged bin, whose links the owner alone follows and writes (count == |list|).
                unsafe {
                    let w = b.owner.word(o as *mut u8);
                    debug_assert!(core::ptr::eq(w, crate::owner::owner_word(o as *mut u8)));
                    (*w).store(cg, Ordering::Relaxed);
                    o = FreeObj::next(o);
                }
            }
            if !o.is_null() {
                chain_too_long();
            }
        }
        for &i in &kept[..nf] {
            let f = &fronts[i as usize];
            // SAFETY: as above, a tagged front's core.
            let core = unsafe { &*f.tag() };
            let mut o = f.kept.head();
            let mut steps = Steps(f.kept.count());
            while !o.is_null() {
                steps.step();
                // SAFETY: o is a free slot of that core on this thread's own kept bin.
                unsafe {
                    (*core.owner_word_of(o as *mut u8)).store(cg, Ordering::Relaxed);
                    o = FreeObj::next(o);
                }
            }
        }
        true
    }

    /// [`transfer_bins`]' parts for the fronts' kept bins: the stat and bytes of each that holds
    /// slots into `parts`, its index into `kept`; how many, and their slots. None when more
    /// fronts hold slots than `kept` has room for.
    #[cold]
    #[inline(never)]
    fn kept_parts(
        &self,
        parts: &mut [(StatIdx, u64)],
        kept: &mut [u8; KEPT_PARTS],
    ) -> Option<(usize, u32)> {
        let (mut nf, mut slots) = (0, 0);
        for (i, f) in self.kept_fronts() {
            let n = f.kept.count();
            if n != 0 {
                if nf == KEPT_PARTS {
                    return None;
                }
                // SAFETY: a front with kept slots is tagged with a core (never freed).
                let core = unsafe { &*f.tag() };
                parts[nf] = (
                    front_stat(core),
                    u64::from(n) * core.layout.object_size as u64,
                );
                kept[nf] = i as u8;
                nf += 1;
                slots += n;
            }
        }
        Some((nf, slots))
    }

    /// Empties the tagged bins of this thread, whatever a drainer did to them, and untags it.
    /// Called with the thread's `stock` lock held (`d`): by the owner outside its fast paths, or
    /// in a fork child for a thread that did not survive (`walked`: count the lists by walking
    /// them, see [`give_back_orphan`]).
    pub(crate) fn take_bins(&self, lines: &Lines, d: &mut Drained, walked: Count) -> Taken {
        let tag = self.tag.load(Ordering::Relaxed);
        let chains = core::array::from_fn(|c| {
            let bin = &lines[c].tagged;
            lines[c].stale.set(0);
            match walked {
                Count::Walked => bin.take_all_walked(),
                Count::Trusted => bin.take_all(),
            }
        });
        // Invariant of `Drained`: `rec` is all zero unless the tag says DRAINED.
        let rec = core::mem::replace(&mut d.rec, [0; NUM_CLASSES]);
        debug_assert!(tag & DRAINED != 0 || rec.iter().all(|&r| r == 0));
        // Outside the fast paths the owner's bins hold at least what a drainer counted.
        debug_assert!(walked == Count::Walked || (0..NUM_CLASSES).all(|c| chains[c].1 >= rec[c]));
        let mut fronts = FrontMap::EMPTY;
        for (i, f) in self.kept_fronts() {
            let kc = take_kept(f, &mut d.front_rec[i], walked);
            debug_assert!(tag & DRAINED != 0 || kc.rec == 0);
            if kc.n != 0 {
                fronts.set(i, kc);
            }
        }
        self.tag.store(NO_TAG, Ordering::Relaxed);
        Taken {
            tag,
            chains,
            rec,
            fronts,
        }
    }

    /// A front's core is about to change (`FrontBin::retag`, on the owner's slow path):
    /// under the `stock` lock, takes the kept bin of front `i` (charged to the tag, less what
    /// a drainer uncharged), retags the front for `core`, and after the lock gives back what
    /// both held for the old core. The lock orders the new tag before any later kept slot of
    /// `core` that a drainer counts (module docs).
    pub(crate) fn retag_front(&self, f: &FrontBin, i: u32, core: &'static SlabCache) {
        let mut d = self.lock();
        let kc = take_kept(f, &mut d.front_rec[i as usize], Count::Trusted);
        let tag = self.tag.load(Ordering::Relaxed);
        let retired = f.retag(core);
        // The kept bin is empty and closed now: front i leaves the mask (under the lock, so
        // a drainer reads the mask and the bin's count as one).
        let m = self.kept_mask.load(Ordering::Relaxed);
        self.kept_mask
            .store(m & !(1 << i as usize), Ordering::Relaxed);
        drop(d);
        give_back_kept(tag, &kc, None);
        retired.release();
    }

    /// Gives back this thread's kept slots of front `i` (its cache is being dropped on this
    /// thread, `thread_cache::flush_front`).
    pub(crate) fn give_back_front(&self, f: &FrontBin, i: u32) {
        let mut d = self.lock();
        let kc = take_kept(f, &mut d.front_rec[i as usize], Count::Trusted);
        let tag = self.tag.load(Ordering::Relaxed);
        drop(d);
        give_back_kept(tag, &kc, Some(f));
    }

    /// The owner's way back after a drainer has been at its stock (`tag` has `STEAL` or
    /// `DRAINED`): takes its tagged bins back, uncharges what the drainer did not, and frees
    /// the slots. Called from the allocation and free paths that leave the fast path. (What
    /// settles a drain is the drainer's own last pass, which finds a `DRAINED` thread quiet;
    /// this is the owner's side.)
    #[cold]
    #[inline(never)]
    pub(crate) fn reclaim(&self, lines: &Lines, uncharged: &Uncharged) {
        let taken = self.reclaim_take(lines);
        give_back(lines, self.fronts(), &taken, GiveTo::OwnBins(uncharged));
    }

    /// [`reclaim`](Self::reclaim)'s part under the lock: takes the tagged bins if a
    /// drainer has been here. The caller gives them back.
    #[inline]
    pub(crate) fn reclaim_take(&self, lines: &Lines) -> Taken {
        let mut d = self.lock();
        if self.must_reclaim() {
            self.take_bins(lines, &mut d, Count::Trusted)
        } else {
            NOTHING
        }
    }

    /// Gives back this thread's own tagged objects (thread exit, trim).
    pub(crate) fn give_back_own(&self, lines: &Lines) {
        let taken = self.take_own(lines);
        give_back(lines, self.fronts(), &taken, GiveTo::Slabs);
    }

    /// [`give_back_own`](Self::give_back_own)'s part under the lock: takes the tagged bins
    /// whatever a drainer did to them, and untags. The caller gives them back.
    pub(crate) fn take_own(&self, lines: &Lines) -> Taken {
        self.take_bins(lines, &mut self.lock(), Count::Trusted)
    }

    /// In a fork child: uncharges the tagged objects of a thread that did not survive the fork.
    /// A cache whose owner held its `stock` lock at the fork may be half-updated and is left
    /// alone (its charges stay, a bounded inexactness of the child; a transfer stopped half
    /// way leaves up to `TRANSFER_MAX` objects' charge half moved between two tenants). A fast path stopped by
    /// the fork may have left a bin's `count` off by one, so the lists are counted by walking
    /// them. A slot whose pop or push had not yet stored `head` is given back if it is still on
    /// the list; one that is off the list stays charged, as the live object it was or was about
    /// to be (a bounded leak of the child).
    pub(crate) fn give_back_orphan(&self, lines: &Lines) {
        let Some(mut d) = self.lock.try_lock() else {
            return;
        };
        let taken = self.take_bins(lines, &mut d, Count::Walked);
        drop(d);
        give_back(lines, self.fronts(), &taken, GiveTo::Slabs);
    }
}

/// Whether the tenant of tag `t` (untouched by a drainer, with objects in the tagged bins)
/// is alive. Under the thread's `stock` lock.
fn tag_alive(t: u64) -> bool {
    debug_assert!(t & (NO_TAG | STEAL | DRAINED) == 0);
    // SAFETY: the tagged bins hold slots charged to the tag's objcg, and no drainer can
    // uncharge them while this thread holds its `stock` lock: those bytes' refs keep the
    // objcg alive for the call.
    unsafe { hooks::objcg_tenant_alive((t & TENANT) as ObjCgId) }
}

/// Slots in this thread's tagged bins, the fronts' kept bins included (the owner's count).
#[inline]
fn tagged_slots(s: &ObjectStock, lines: &Lines) -> u32 {
    let n = lines.iter().map(|b| b.tagged.count()).sum::<u32>();
    if s.kept_mask.load(Ordering::Relaxed) == 0 {
        return n;
    }
    n + s.kept_fronts().map(|(_, f)| f.kept.count()).sum::<u32>()
}

/// Whether this thread's tagged bins, the fronts' kept bins included, hold any slot (the
/// owner's view; stops at the first).
fn holds_tagged(s: &ObjectStock, lines: &Lines) -> bool {
    lines.iter().any(|b| b.tagged.count() != 0) || s.kept_fronts().any(|(_, f)| f.kept.count() != 0)
}

// A front index is a bit of `kept_mask`.
const _: () = assert!(FRONTS <= 64);

/// The set bits of a mask, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(i)
    }
}

/// Values for some fronts, by front index (`mask` says which are set): what a retag or a
/// drain carries per front, without initialising or copying all `FRONTS` entries.
pub(crate) struct FrontMap<T> {
    mask: u64,
    v: [MaybeUninit<T>; FRONTS],
}

impl<T: Copy> FrontMap<T> {
    const EMPTY: FrontMap<T> = FrontMap {
        mask: 0,
        v: [const { MaybeUninit::uninit() }; FRONTS],
    };

    /// Sets the value of front `i`.
    fn set(&mut self, i: usize, x: T) {
        self.v[i] = MaybeUninit::new(x);
        self.mask |= 1 << i;
    }

    /// The set values, with their front index.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, T)> + '_ {
        // SAFETY: a bit of `mask` is set only by `set`, which initialised that entry.
        Bits(self.mask).map(move |i| (i, unsafe { self.v[i].assume_init() }))
    }
}

/// A bounded walk of a chain of slots counted `n`. A slot freed twice while its first free
/// sat deeper in a bin is not caught on the fast path (`lib.rs`) and links the chain back
/// into itself; a walk that outlasts the count reports it instead of looping for ever under
/// the `stock` lock. `n + 1` steps where a walk visits the slot it stopped at twice.
struct Steps(u32);

impl Steps {
    /// One more slot visited.
    #[inline]
    fn step(&mut self) {
        if self.0 == 0 {
            chain_too_long();
        }
        self.0 -= 1;
    }
}

/// A walk of kept slots came back to a slot (`Steps`), or found one whose owner word a
/// second free cleared while it waited (a stale slot's double free uncharges and clears the
/// word: module docs), which may link no loop at all.
#[cold]
#[inline(never)]
fn chain_too_long() -> ! {
    crate::sys::fatal(
        "a thread's kept free slots link in a loop or hold a slot freed twice (a double free of a slot that was still in a bin)",
    )
}

/// What an owner took from its tagged bins: their tag, the chains per class (head, count),
/// and how much of each a drainer already uncharged.
pub(crate) struct Taken {
    pub(crate) tag: u64,
    pub(crate) chains: [(*mut FreeObj, u32); NUM_CLASSES],
    pub(crate) rec: [u32; NUM_CLASSES],
    /// The fronts' kept bins that held slots, by front index.
    pub(crate) fronts: FrontMap<KeptChain>,
}

/// What [`ObjectStock::take_half_ends`] took: `n` slots of one class linked from `head` to
/// `tail`, all charged to `tag`'s tenant, and whether all of them carry its owner word (none
/// was below the stale mark).
struct Half {
    tag: u64,
    head: *mut FreeObj,
    tail: *mut FreeObj,
    n: u32,
    fresh: bool,
}

impl Half {
    /// As a `Taken` of class `c`, for [`give_back`].
    fn taken(&self, c: usize) -> Taken {
        let mut chains = [(core::ptr::null_mut(), 0); NUM_CLASSES];
        chains[c] = (self.head, self.n);
        Taken {
            tag: self.tag,
            chains,
            rec: [0; NUM_CLASSES],
            fronts: FrontMap::EMPTY,
        }
    }
}

/// Clears the owner words of the `n` slots of class `c` linked from `head` (a tagged bin's
/// half on its way to the hand-back), checking each as a give-back does ([`release_chain`],
/// keeping none): a word already 0 is a slot freed twice, and a list that runs past `n`
/// slots a slot listed twice.
fn clear_owners(lines: &Lines, c: usize, head: *mut FreeObj, n: u32) {
    release_chain(
        head,
        n,
        // SAFETY: o is a free slot of class c's accounted cache on the caller's chain;
        // `lines[c].owner` is that cache's geometry.
        |o| unsafe { &*class_owner_word(o as *mut u8, c, &lines[c].owner) },
        |_| false,
    );
}

/// A front's kept bin as the owner took it: the front's core, the chain and its length, and
/// how many of its slots a drainer already uncharged.
#[derive(Clone, Copy)]
pub(crate) struct KeptChain {
    core: *const SlabCache,
    pub(crate) head: *mut FreeObj,
    pub(crate) n: u32,
    pub(crate) rec: u32,
}

/// Takes front `f`'s kept bin and its drainer's record `rec` (which becomes 0). Under the
/// thread's `stock` lock.
fn take_kept(f: &FrontBin, rec: &mut u32, walked: Count) -> KeptChain {
    let (head, n) = match walked {
        Count::Walked => f.kept.take_all_walked(),
        Count::Trusted => f.kept.take_all(),
    };
    let rec = core::mem::replace(rec, 0);
    debug_assert!(walked == Count::Walked || n >= rec);
    let core = f.tag();
    if n != 0 {
        // The slots leave the fronts' net charged counts, where they stayed while kept
        // (`front.rs`): here, under the lock that took them, so that a fork between this and
        // the give-back cannot leave them counted in the child.
        // SAFETY: a front with kept slots is tagged with a core, and cores are never freed.
        crate::front::fold_charged(unsafe { &*core }, -(n as isize));
    }
    KeptChain { core, head, n, rec }
}

/// The stat a dedicated core's objects are charged to.
fn front_stat(core: &SlabCache) -> StatIdx {
    StatIdx(core.stat.load(Ordering::Relaxed))
}

/// Gives back a taken kept bin whose slots were charged to the tag `tag`'s tenant:
/// uncharges what a drainer did not, clears the owner words (as [`give_back`] does), and
/// puts the slots in `to`'s uncharged bin while it is their core's and has room, the rest
/// on their core.
fn give_back_kept(tag: u64, kc: &KeptChain, to: Option<&FrontBin>) {
    if kc.n == 0 {
        return;
    }
    // Invariant: only a tagged stock's kept bins hold slots, and only of a tagged front.
    debug_assert!(tag & NO_TAG == 0 && !kc.core.is_null());
    // SAFETY: the front was tagged with this core when its kept bin was taken; cores are
    // never freed.
    let core = unsafe { &*kc.core };
    let left = kc.n.saturating_sub(kc.rec);
    if left > 0 {
        // SAFETY: the kept slots are charged to the tag's tenant with the core's object size,
        // and a drainer uncharged `rec` of them already (module docs).
        unsafe {
            hooks::uncharge(
                (tag & TENANT) as ObjCgId,
                left as usize * core.layout.object_size,
                front_stat(core),
            )
        };
    }
    let to = to.filter(|f| f.is_of(core));
    let (tail, rest) = release_chain(
        kc.head,
        kc.n,
        // SAFETY: o is a free slot of `core` on the taken chain, which the caller owns.
        |o| unsafe { &*core.owner_word_of(o as *mut u8) },
        // SAFETY: an uncharged free slot of the front's core, handed over by its owner.
        |o| to.is_some_and(|f| unsafe { f.bin.push(o as *mut u8) }),
    );
    if rest > 0 {
        // SAFETY: a chain of `rest` free slots of `core`.
        unsafe { core.flush_batch(tail, rest) };
    }
}

/// Walks a taken chain of `n` charged slots: clears each slot's owner word (`word`; as an
/// uncharging free does, so that a later double free is reported instead of uncharging
/// again), then offers the slot to `keep`, which says whether it kept it (pushed it to one of
/// the owner's uncharged bins). Returns the slots not kept, which stay linked as the chain's
/// tail: its head and length.
///
/// A slot freed again while its first free sat deeper in a bin links the chain into a loop
/// (not caught on the fast path, `lib.rs`). It is reported here: a slot seen twice has its
/// word cleared already (the chain's slots are all charged), whether the walk comes back
/// to it through the loop or through the link a push rewrote; and `Steps` bounds the walk.
fn release_chain(
    head: *mut FreeObj,
    n: u32,
    word: impl Fn(*mut FreeObj) -> &'static core::sync::atomic::AtomicU32,
    mut keep: impl FnMut(*mut FreeObj) -> bool,
) -> (*mut FreeObj, usize) {
    let mut steps = Steps(n);
    let (mut o, mut tail, mut rest) = (head, core::ptr::null_mut::<FreeObj>(), n as usize);
    while !o.is_null() {
        steps.step();
        // SAFETY: o is a free slot on the caller's taken chain; its link is read before the
        // slot is offered (a push rewrites it).
        let next = unsafe { FreeObj::next(o) };
        let w = word(o);
        if w.load(Ordering::Relaxed) == 0 {
            chain_too_long();
        }
        w.store(0, Ordering::Relaxed);
        // Once a slot is not kept, none after it is offered: the tail stays linked as it was.
        if tail.is_null() && keep(o) {
            rest -= 1;
        } else if tail.is_null() {
            tail = o;
        }
        o = next;
    }
    (tail, rest)
}

impl Taken {
    /// Objects of class `c` still charged to the tag's tenant: those a drainer did not
    /// uncharge. Saturating: a fork child may find fewer than were counted (module docs).
    #[inline]
    pub(crate) fn left(&self, c: usize) -> u32 {
        self.chains[c].1.saturating_sub(self.rec[c])
    }
}

const NOTHING: Taken = Taken {
    tag: NO_TAG,
    chains: [(core::ptr::null_mut(), 0); NUM_CLASSES],
    rec: [0; NUM_CLASSES],
    fronts: FrontMap::EMPTY,
};

/// How [`ObjectStock::take_bins`] counts a tagged bin.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// Its `count`: the owner, outside its fast paths.
    Trusted,
    /// By walking its list: in a fork child, for a thread that did not survive
    /// ([`ObjectStock::give_back_orphan`]).
    Walked,
}

/// Where [`give_back`] puts the slots it takes back from the tagged bins.
#[derive(Clone, Copy)]
enum GiveTo<'a> {
    /// The owner's own accounted bins first (they hold uncharged accounted slots, which the
    /// next charged allocation of any tenant takes): a thread that moves from one tenant to
    /// the next (a tenant per request) keeps its slots instead of flushing them to their
    /// slabs and refilling. What does not fit goes to the slabs.
    OwnBins(&'a Uncharged),
    /// Their caches' slabs (thread exit, trim, a fork child's orphans).
    Slabs,
}

/// Uncharges what a drainer did not (one uncharge per class and front), and returns the
/// taken slots to `to` (for the fronts' kept slots, their own front's uncharged bin, or
/// their core).
fn give_back(lines: &Lines, fronts: &[FrontBin], t: &Taken, to: GiveTo<'_>) {
    if t.tag == NO_TAG {
        // Invariant: untagged bins are empty (no owner word equals NO_TAG).
        debug_assert!(t.chains.iter().all(|&(_, n)| n == 0));
        debug_assert!(t.fronts.mask == 0);
        return;
    }
    for (i, kc) in t.fronts.iter() {
        let own = match to {
            GiveTo::OwnBins(_) => fronts.get(i),
            GiveTo::Slabs => None,
        };
        give_back_kept(t.tag, &kc, own);
    }
    let tenant = (t.tag & TENANT) as ObjCgId;
    for (c, &(head, n)) in t.chains.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let left = t.left(c);
        if left > 0 {
            // SAFETY: the n slots of the tagged bin are charged to the tag's tenant, and a
            // drainer uncharged rec[c] of them already (module docs).
            unsafe { hooks::uncharge(tenant, left as usize * class_size(c), StatIdx::slab(c)) };
        }
        // Clear the owner words, as an uncharging free does, so that a later double free of
        // one of these slots is reported instead of uncharging the tenant again. Keep what
        // fits in the owner's accounted bin; flush the rest.
        let (tail, rest) = release_chain(
            head,
            n,
            // SAFETY: o is a free slot of the accounted cache of class c (the chain);
            // `lines[c].owner` is that cache's geometry.
            |o| unsafe { &*class_owner_word(o as *mut u8, c, &lines[c].owner) },
            |o| match to {
                // SAFETY: an uncharged free slot of class c's accounted cache, handed over by
                // this thread, the bins' owner.
                GiveTo::OwnBins(uncharged) => unsafe { uncharged[c].push(o as *mut u8) },
                GiveTo::Slabs => false,
            },
        );
        if rest > 0 {
            // SAFETY: a chain of `rest` free slots of the accounted cache of class c.
            unsafe { class_caches::cache(c, Kind::Accounted).flush(tail, rest) };
        }
    }
}

/// `ObjectStock::armed`: off the armed list.
pub const UNARMED: u8 = 0;
/// On the armed list.
const LISTED: u8 = 1;
/// Taken off it by the drainer now at work, which puts it back or leaves it off.
const HELD: u8 = 2;

/// The armed list: the thread caches whose object stock may hold charged objects, so that a
/// refused charge drains those (`ObjectDrain::Armed`) instead of every thread's, which costs
/// a lock and a read of 52 bins per thread (1 ms at 4,000 idle threads).
///
/// A thread joins when it retags (`note_retag`, under its `stock` lock, before the tag is
/// set and before the accounting records the retag). A drain takes the whole list (`HELD`),
/// and after its passes puts back, each under its `stock` lock, those that may still hold
/// charged objects: a tag without `DRAINED` (bins that a free may push to), or `DRAINED`
/// with a racing push found in the last pass. It leaves off those untagged and those
/// `DRAINED` that a pass after a second barrier found settled: their bins hold no charged
/// object, and no free pushes to them (their tag has `DRAINED`) until the owner settles and
/// retags, which arms it again.
///
/// What this gives up: a free that read the tag before a drain's `STEAL`, and was
/// preempted before its push across both barriers of that drain, pushes a charged object
/// to a thread off the list. The refusal path's drains then miss that object until the
/// owner settles (its next allocation or free off the fast path); `ObjectDrain::All`
/// (`current_exact()`, `stat()`, `drain_all_stocks()`) still re-reads every `DRAINED`
/// thread and finds it. The drain generations tolerated the same window before (a drain
/// that found no growth completed, and later refusals skipped every walk).
///
/// Invariant (under the list's lock): `armed == LISTED` exactly for the caches linked from
/// `head` through `anext` (with `aprev` the reverse links); `armed == HELD` only while the
/// drainer that took them holds the thread registry's lock, so no `HELD` cache exits.
/// Lock order: thread registry, then a thread's `stock`, then this list.
struct ArmedList {
    head: *mut ObjectStock,
}

// SAFETY: the pointers name live threads' caches (a cache leaves the list before its thread
// exits, `disarm`), followed only under the list's lock or by the drainer holding them.
unsafe impl Send for ArmedList {}

static ARMED: SpinLock<ArmedList> = SpinLock::new(ArmedList {
    head: core::ptr::null_mut(),
});

/// Links `tc` at the head of the list, as `LISTED`. Under the list's lock (`a`).
fn push_armed(a: &mut ArmedList, tc: &ObjectStock) {
    let me = tc as *const ObjectStock as *mut ObjectStock;
    tc.aprev.store(core::ptr::null_mut(), Ordering::Relaxed);
    tc.anext.store(a.head, Ordering::Relaxed);
    // SAFETY: the head is a listed cache, valid under the lock (list invariant).
    if let Some(h) = unsafe { a.head.as_ref() } {
        h.aprev.store(me, Ordering::Relaxed);
    }
    a.head = me;
    tc.armed.store(LISTED, Ordering::Relaxed);
}

/// Gives this thread's tagged bins their capacity (`caching`), or none. Under the thread's
/// `stock` lock, at a retag; without capacity only when the tagged bins are empty (so
/// `caching == false  =>  every tagged bin is empty`, as pushes then fail); a store per
/// class only when the state changes.
fn set_caching(s: &ObjectStock, lines: &Lines, caching: bool) {
    debug_assert!(caching || !holds_tagged(s, lines));
    if s.caching.load(Ordering::Relaxed) == caching {
        return;
    }
    s.caching.store(caching, Ordering::Relaxed);
    for (c, b) in lines.iter().enumerate() {
        b.tagged
            .set_capacity(if caching { tagged_max(c) } else { 0 });
    }
    // Bits first, capacities after (the order `kept_mask` promises); none left when the
    // bins close (they are empty, as asserted above).
    let mut mask = 0u64;
    for (i, f) in s.fronts().iter().enumerate() {
        if f.kept_capacity(caching) > 0 {
            mask |= 1 << i;
        }
    }
    if caching {
        s.kept_mask.store(mask, Ordering::Relaxed);
    }
    for f in s.fronts() {
        f.kept.set_capacity(f.kept_capacity(caching));
    }
    if !caching {
        s.kept_mask.store(0, Ordering::Relaxed);
    }
}

/// Puts this thread's cache on the armed list unless it is on it, or held by a drainer
/// (which decides under the `stock` lock that the caller holds, so after this retag).
///
/// A retag is activity: the idle decay leaves this cache for two more of its passes. A
/// thread that retags often (a tenant per request) finds itself on the list and takes no
/// lock: the read of `armed` under the caller's `stock` lock is exact enough, since every
/// change to `UNARMED` is made under that lock too, and a stale `LISTED` is a cache that a
/// drainer holds and decides on under that lock, after this retag.
fn arm(tc: &ObjectStock) {
    if tc.aged.load(Ordering::Relaxed) {
        tc.aged.store(false, Ordering::Relaxed);
    }
    if tc.armed.load(Ordering::Relaxed) != UNARMED {
        return;
    }
    let mut a = ARMED.lock();
    if tc.armed.load(Ordering::Relaxed) == UNARMED {
        push_armed(&mut a, tc);
    }
}

/// Leaves the held (or own, given back) stock `s` off the list: under the list's lock, as
/// every change of `armed`.
fn unlist(s: &ObjectStock) {
    let _a = ARMED.lock();
    s.armed.store(UNARMED, Ordering::Relaxed);
}

/// Takes `tc` off the armed list (thread exit), under the thread registry's lock, so no
/// drainer holds it.
pub(crate) fn disarm(tc: &ObjectStock) {
    let mut a = ARMED.lock();
    debug_assert!(tc.armed.load(Ordering::Relaxed) != HELD);
    if tc.armed.load(Ordering::Relaxed) == LISTED {
        let (next, prev) = (
            tc.anext.load(Ordering::Relaxed),
            tc.aprev.load(Ordering::Relaxed),
        );
        // SAFETY: the neighbours are listed caches, valid under the lock.
        unsafe {
            match prev.as_ref() {
                None => a.head = next,
                Some(p) => p.anext.store(next, Ordering::Relaxed),
            }
            if let Some(n) = next.as_ref() {
                n.aprev.store(prev, Ordering::Relaxed);
            }
        }
    }
    tc.armed.store(UNARMED, Ordering::Relaxed);
}

/// Fork support: the armed list's lock is held across `fork` (after the thread registry's).
pub(crate) fn fork_prepare_armed() {
    ARMED.lock_raw();
}

/// Fork support, parent side.
///
/// # Safety
/// After [`fork_prepare_armed`] in this thread.
pub(crate) unsafe fn fork_parent_armed() {
    // SAFETY: forwarded contract.
    unsafe { ARMED.unlock_raw() };
}

/// Fork support, child side: the list keeps only the forking thread's cache (`own`), if it
/// is live and tagged.
///
/// # Safety
/// After [`fork_prepare_armed`], in the child (single-threaded).
pub(crate) unsafe fn fork_child_armed(own: &ObjectStock, live: bool) {
    // SAFETY: forwarded contract.
    unsafe { ARMED.unlock_raw() };
    let mut a = ARMED.lock();
    a.head = core::ptr::null_mut();
    own.armed.store(UNARMED, Ordering::Relaxed);
    if live && own.tag.load(Ordering::Relaxed) & NO_TAG == 0 {
        push_armed(&mut a, own);
    }
}

/// Takes the whole armed list for a drain: every cache on it becomes `HELD`, and the chain
/// keeps its `anext` links. Under the thread registry's lock (the caller of [`drain`]).
fn take_armed() -> *mut ObjectStock {
    let mut a = ARMED.lock();
    let head = core::mem::replace(&mut a.head, core::ptr::null_mut());
    let mut p = head;
    // SAFETY: listed caches are valid under the lock.
    while let Some(tc) = unsafe { p.as_ref() } {
        tc.armed.store(HELD, Ordering::Relaxed);
        p = tc.anext.load(Ordering::Relaxed);
    }
    head
}

/// The idle decay's choice from a chain of held caches: those it saw at its previous pass
/// with no retag since (`aged`), in a chain of their own, still held. The others are marked
/// and put back on the list.
fn take_aged(held: *mut ObjectStock) -> *mut ObjectStock {
    let mut chosen: *mut ObjectStock = core::ptr::null_mut();
    for_each_held(held, |tc| {
        if tc.aged.load(Ordering::Relaxed) {
            tc.anext.store(chosen, Ordering::Relaxed);
            chosen = tc as *const ObjectStock as *mut ObjectStock;
        } else {
            tc.aged.store(true, Ordering::Relaxed);
            push_armed(&mut ARMED.lock(), tc);
        }
    });
    chosen
}

/// Calls `f` on each cache of a chain from [`take_armed`]; `f` may relink the cache it is
/// given (its link is read first).
fn for_each_held(head: *mut ObjectStock, mut f: impl FnMut(&ObjectStock)) {
    let mut p = head;
    // SAFETY: held caches cannot exit while the caller holds the thread registry's lock,
    // and only this drainer follows or changes their links until it puts them back.
    while let Some(tc) = unsafe { p.as_ref() } {
        p = tc.anext.load(Ordering::Relaxed);
        f(tc);
    }
}

/// Uncharges the tagged objects of every thread (`ObjectDrain::All`, idle threads included)
/// or of those on the armed list (`ObjectDrain::Armed`), without touching their bins
/// (module docs). Registered with the accounting, which calls it at the start of every
/// drain of the stocks. Three passes over the chosen threads, each under the thread's
/// `stock` lock:
/// 1. `STEAL` on the tagged ones;
/// 2. after a barrier: uncharge what their bins count and set `DRAINED` (or, for a thread
///    drained before, uncharge what a racing free pushed since);
/// 3. after a second barrier (only if some thread is `DRAINED`): the same re-read for the
///    `DRAINED` ones, which settles them: a free that read the tag before `STEAL` and was
///    running has pushed by then. Growth found here leaves this drain incomplete
///    (`hooks::note_object_drain_unsettled`), as the next one must look again. The armed
///    list is rebuilt in this pass (`ArmedList`).
///
/// The caller (`thread_cache::drain_object_stocks`, which the accounting calls) holds the
/// thread registry's lock for the whole drain, so that no thread joins or leaves in between,
/// and passes this thread's stock (`own`, with whether its thread cache is live) and a walk
/// of every registered thread's stock (`all`).
pub(crate) fn drain(
    which: hooks::ObjectDrain,
    own: &ObjectStock,
    own_live: bool,
    all: &EveryStock<'_>,
) {
    let mut held = take_armed();
    if which == hooks::ObjectDrain::Idle {
        held = take_aged(held);
    }
    let walk = |f: &mut dyn FnMut(&ObjectStock)| match which {
        hooks::ObjectDrain::All => all(f),
        hooks::ObjectDrain::Armed | hooks::ObjectDrain::Idle => for_each_held(held, f),
    };
    // This thread is here, not in a fast path: it gives its own objects back directly.
    let own_tc = own;
    let own: *const ObjectStock = own;
    if own_live {
        own_tc.give_back_own(own_tc.lines());
    }
    let only_own = held.is_null()
        || (core::ptr::eq(held, own) && own_tc.anext.load(Ordering::Relaxed).is_null());
    if which != hooks::ObjectDrain::All && only_own {
        // Nothing armed but this thread's own cache, given back above (untagged): it leaves
        // the list, and no barrier is needed.
        if !held.is_null() {
            debug_assert!(own_tc.tag.load(Ordering::Relaxed) & NO_TAG != 0);
            unlist(own_tc);
        }
        return;
    }
    walk(&mut |tc| {
        if !core::ptr::eq(tc, own) {
            tc.request_steal();
        }
    });
    let remote = hooks::remote_barrier();
    let mut drained = false;
    walk(&mut |tc| {
        if core::ptr::eq(tc, own) {
            return;
        }
        let (u, d) = tc.record(remote);
        drained |= d;
        u.apply();
    });
    // Pass 3 re-reads only after a second barrier; without one, a `DRAINED` thread is
    // not known settled, and this drain completes nothing.
    let recheck = drained && remote && hooks::remote_barrier();
    if drained && !recheck {
        hooks::note_object_drain_unsettled();
    }
    let mut pass3 = |tc: &ObjectStock| {
        let u = tc.recheck(recheck, core::ptr::eq(tc, own));
        if u.tenant != 0 {
            // A free racing this drain pushed after pass 2: the next drain must look again.
            hooks::note_object_drain_unsettled();
        }
        u.apply();
    };
    match which {
        hooks::ObjectDrain::All => {
            all(&mut pass3);
            // Held caches not registered cannot be: a cache leaves the list before the
            // registry (`disarm`), so every one was visited above.
        }
        hooks::ObjectDrain::Armed | hooks::ObjectDrain::Idle => for_each_held(held, pass3),
    }
}

/// What a drainer's pass found to uncharge from one thread's tagged bins: `counts[c]`
/// objects of class `c` from `tenant` (nothing when `tenant` is 0). Uncharged by the
/// drainer after it released the thread's `stock` lock ([`apply`](Self::apply)).
pub(crate) struct Uncharge {
    pub(crate) tenant: ObjCgId,
    pub(crate) counts: [u32; NUM_CLASSES],
    /// Per front index: objects of the front's core (read with the count, under the lock).
    pub(crate) fronts: FrontMap<(u32, *const SlabCache)>,
}

impl Uncharge {
    const NONE: Uncharge = Uncharge {
        tenant: 0,
        counts: [0; NUM_CLASSES],
        fronts: FrontMap::EMPTY,
    };

    /// Uncharges it (`hooks::uncharge`, one call per class and front that has objects).
    fn apply(&self) {
        uncharge_counts(self.tenant, &self.counts);
        if self.tenant == 0 {
            return;
        }
        for (_, (n, core)) in self.fronts.iter() {
            if n > 0 {
                // SAFETY: `core` was the tag of a front whose kept bin counted n slots, under
                // the owner's `stock` lock; cores are never freed.
                let core = unsafe { &*core };
                // SAFETY: those n kept slots are charged to the tag's tenant with the core's
                // object size, and no one else uncharges them (module docs).
                unsafe {
                    hooks::uncharge(
                        self.tenant,
                        n as usize * core.layout.object_size,
                        front_stat(core),
                    )
                };
            }
        }
    }
}

/// A drainer's side of the protocol, one thread's stock at a time ([`drain`] walks the
/// threads and runs each pass on each; the loom model runs them on one stock).
impl ObjectStock {
    /// Pass 1, under the thread's `stock` lock: `STEAL` on a tagged stock not drained
    /// before. `SeqCst`, as the byte stocks' `steal`; the barrier that follows is what
    /// orders it before the owner's next check of the tag.
    pub(crate) fn request_steal(&self) {
        let _d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        if t & (NO_TAG | DRAINED) == 0 {
            self.tag.store(t | STEAL, Ordering::SeqCst);
        }
    }

    /// Pass 2, after the barrier (`remote`: whether it reached every thread), under the
    /// thread's `stock` lock: with `STEAL`, record what each tagged bin counts and set
    /// `DRAINED` (without a barrier, only withdraw the request: no count can be trusted);
    /// for a thread drained before, the growth since its record. Returns what to uncharge,
    /// and whether the thread is `DRAINED` (a free that read the tag before `STEAL` may
    /// still push: pass 3 looks again).
    pub(crate) fn record(&self, remote: bool) -> (Uncharge, bool) {
        let mut u = Uncharge::NONE;
        let mut drained = false;
        let mut d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        if t & STEAL != 0 && !remote {
            // No barrier, so no count can be trusted: withdraw the request.
            self.tag.store(t & !STEAL, Ordering::Relaxed);
        } else if t & STEAL != 0 {
            let lines = self.lines();
            for (c, n) in u.counts.iter_mut().enumerate() {
                *n = lines[c].tagged.count();
                d.rec[c] = *n;
            }
            for (i, f) in self.kept_fronts() {
                let n = f.kept.count();
                // The tag read under the lock is the core of every slot counted (a front's
                // core changes only under it, with its kept bin empty).
                if n > 0 {
                    u.fronts.set(i, (n, f.tag()));
                }
                d.front_rec[i] = n;
            }
            self.tag.store(t & !STEAL | DRAINED, Ordering::Relaxed);
            u.tenant = (t & TENANT) as ObjCgId;
            drained = true;
        } else if t & DRAINED != 0 {
            u.tenant = regrown(self, &mut d, &mut u);
            drained = true;
        }
        drop(d);
        (u, drained)
    }

    /// Pass 3, after a second barrier (`recheck`; false when there was none), for a thread
    /// held off the armed list or `DRAINED`: re-reads a `DRAINED` thread's bins (not the
    /// drainer's `own`), which settles it, and puts a held thread back on the armed list or
    /// leaves it off (`ArmedList`), under its `stock` lock. Returns what a racing free pushed
    /// since pass 2, to uncharge (a `tenant` other than 0: the drain is not settled).
    pub(crate) fn recheck(&self, recheck: bool, own: bool) -> Uncharge {
        let mut u = Uncharge::NONE;
        // Without the lock: only a drainer (this one, under the registry lock) sets
        // `DRAINED` or `HELD`, so a thread that has neither now has nothing for this pass.
        if self.armed.load(Ordering::Relaxed) != HELD
            && self.tag.load(Ordering::Relaxed) & DRAINED == 0
        {
            return u;
        }
        let mut d = self.lock();
        let t = self.tag.load(Ordering::Relaxed);
        let mut settled = true;
        if recheck && t & DRAINED != 0 && !own {
            u.tenant = regrown(self, &mut d, &mut u);
            settled = u.tenant == 0;
        } else if t & DRAINED != 0 {
            settled = false;
        }
        if self.armed.load(Ordering::Relaxed) == HELD {
            // Off the list: untagged, without capacity (its bins stay empty), or
            // `DRAINED` and settled (`ArmedList`).
            let keep = t & NO_TAG == 0
                && self.caching.load(Ordering::Relaxed)
                && (t & DRAINED == 0 || !settled);
            if keep {
                push_armed(&mut ARMED.lock(), self);
            } else {
                unlist(self);
            }
        }
        drop(d);
        u
    }
}

/// For a `DRAINED` thread, under its `stock` lock (`d`): the growth of each tagged bin since
/// the drainer's record (a free racing that drain pushed), recorded in `d.rec` and
/// `d.front_rec`, into `u`. Returns the tag's tenant if anything grew, else 0. A count below `rec` is an
/// allocation putting its pop back; it is ignored.
fn regrown(tc: &ObjectStock, d: &mut Drained, u: &mut Uncharge) -> ObjCgId {
    let mut grew = false;
    let lines = tc.lines();
    for (c, n) in u.counts.iter_mut().enumerate() {
        let now = lines[c].tagged.count();
        if now > d.rec[c] {
            *n = now - d.rec[c];
            d.rec[c] = now;
            grew = true;
        }
    }
    for (i, f) in tc.kept_fronts() {
        let now = f.kept.count();
        if now > d.front_rec[i] {
            u.fronts.set(i, (now - d.front_rec[i], f.tag()));
            d.front_rec[i] = now;
            grew = true;
        }
    }
    if grew {
        (tc.tag.load(Ordering::Relaxed) & TENANT) as ObjCgId
    } else {
        0
    }
}

/// Uncharges `counts[c]` objects of each class `c` from `tenant` (nothing when 0).
fn uncharge_counts(tenant: ObjCgId, counts: &[u32; NUM_CLASSES]) {
    if tenant == 0 {
        return;
    }
    for (c, &n) in counts.iter().enumerate() {
        if n > 0 {
            // SAFETY: the n slots counted in the owner's tagged bin are charged to the tag's
            // tenant, and no one else uncharges them (module docs).
            unsafe { hooks::uncharge(tenant, n as usize * class_size(c), StatIdx::slab(c)) };
        }
    }
}
