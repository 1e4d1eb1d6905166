//! A cache: the shared (cross-thread) half of one object size — its segments, its slabs and
//! the lists that sort them. Thread caches take slots from it in batches ([`SlabCache::refill`])
//! and give them back in batches ([`SlabCache::flush`]); everything here runs under the cache's
//! spin lock, off the fast path.
//!
//! Slab lists, by [`SlabState`]:
//! - partial: slots both handed out and available; refills take from its head first.
//! - empty: nothing handed out, pages resident, kept for reuse: a permanent reserve of
//!   `reserve_slabs` (so that a program oscillating around a slab boundary does not madvise
//!   on every turn), and above it at most as many slabs as the cache had in use at its peak
//!   in the current decay interval (`keep_slabs`), released when they stayed empty through a
//!   whole interval (`crate::decay`, checked on refills and flushes): a program that frees a
//!   batch and builds the next one reuses the pages instead of faulting them in again, and
//!   freeing never takes the cache's resident slabs above that recent peak.
//! - released: nothing handed out, pages returned to the OS (MADV_DONTNEED); reused before
//!   fresh slabs, and reading zero when touched again.
//! - full slabs and fresh (never used) slabs are on no list.
//!
//! In front of the slabs sit parked batches (tcmalloc's idea): a bin that overflows hands
//! its batch over whole, and a bin that runs dry takes a whole batch back, in O(1) under the
//! lock, without visiting any slab. Producer/consumer threads (one allocates, another frees)
//! and programs that allocate and free more than a bin holds then cost one lock round trip
//! per batch. Batches beyond `PARKED_BYTES` per cache go back to their slabs.
//!
//! A batch remembers the CPU its thread gave it back on, and a refill takes the newest
//! batch that fits and was given back on its own CPU first (else the newest, as before). The
//! slots of a batch sit between the live objects of the thread that freed them: handed to a
//! thread on another CPU, they put that thread's writes on lines the first one still reads,
//! and a consumer's batch goes to a producer on its CPU, in that CPU's caches. On two CPUs
//! (BENCHMARKS.md, section 2, measured before the fit check and the decay mark's update):
//! xmalloc 0.83x-0.92x of the time without it, larson 0.89x-1.01x, the other workloads
//! within noise. The CPU is a hint (`sys::current_cpu`), read on these slow paths only,
//! before the lock.

use core::ptr;
use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

use slabcg_accounting::hooks;

use crate::decay::{self, Decay};
use crate::free_mark;
use crate::lock::SpinLock;
use crate::segment::{is_segment, segment_of, CacheId, Segment, SlabDesc, SlabState};
use crate::slab::{FreeObj, SlabLayout};
use crate::sys;

/// Bytes of empty slabs a cache keeps resident for good (until `trim`); more are kept while
/// they are reused (`keep_slabs`, the decay).
const RESERVE_BYTES: usize = 128 * 1024;
/// Batches the parked batches holds at most, and their bytes.
const PARKED_BATCHES: usize = 16;
const PARKED_BYTES: usize = 512 * 1024;

struct Lists {
    partial: *mut SlabDesc,
    empty: *mut SlabDesc,
    empty_count: usize,
    /// The low-water mark of the empty slabs above the reserve (`crate::decay`).
    decay: Decay,
    /// The most slabs in use at once since the decay interval began (`keep_slabs`).
    active_high: usize,
    released: *mut SlabDesc,
    /// The newest segment; the only one that may still have fresh slabs.
    segments: *mut Segment,
    /// Whole batches handed over by thread bins: `parked[..nparked]`, oldest first.
    parked: [(*mut FreeObj, usize); PARKED_BATCHES],
    /// The CPU each of `parked[..nparked]` was given back on (`sys::current_cpu`).
    parked_cpu: [u32; PARKED_BATCHES],
    nparked: usize,
    /// Slots in the parked batches (`sum of parked[..nparked].1`).
    parked_objects: usize,
    /// How many batches at the bottom of the stack no refill took or moved since the decay
    /// interval began (the low-water mark of `nparked`, less one for each batch a refill
    /// took from under it, `newest_first_from`): they go back to their slabs when it ends
    /// (`decay_idle`).
    parked_decay: Decay,
}

// SAFETY: the raw pointers name slab descriptors and segments that live for the whole process;
// Lists is only reached through the cache's lock.
unsafe impl Send for Lists {}

impl Lists {
    /// Moves the newest parked batch given back on `cpu` that holds at most `most` slots to
    /// the top of the stack, for the refill that takes it next, the others keeping their
    /// order; nothing when the top is one already or there is none. The batches above it
    /// move down one, so the decay mark (`parked_decay`: the oldest at the bottom go back
    /// when no refill reached them) goes down one if the batch was below it: the batch that
    /// moved down to the mark was above it, reused for all we know, and the ones below stay
    /// idle.
    fn newest_first_from(&mut self, cpu: u32, most: usize) {
        let n = self.nparked;
        if n < 2 || (self.parked_cpu[n - 1] == cpu && self.parked[n - 1].1 <= most) {
            return;
        }
        if let Some(i) = (0..n - 1)
            .rev()
            .find(|&i| self.parked_cpu[i] == cpu && self.parked[i].1 <= most)
        {
            self.parked[i..n].rotate_left(1);
            self.parked_cpu[i..n].rotate_left(1);
            self.parked_decay.removed_at(i);
        }
    }
}

/// Counters readable without the lock (written under it), for `stats()`.
#[derive(Default)]
pub struct CacheCounters {
    /// Slots handed out to thread caches or to the program.
    pub used: AtomicUsize,
    /// Slabs with at least one slot handed out.
    pub active_slabs: AtomicUsize,
    /// Slabs in the empty reserve.
    pub empty_slabs: AtomicUsize,
    /// Slabs released to the OS.
    pub released_slabs: AtomicUsize,
    /// Segments mapped.
    pub segments: AtomicUsize,
    /// Slots held in the parked batches (handed out by slabs, not held by the program).
    pub transfer: AtomicUsize,
    /// Objects of a dedicated accounted cache charged to a tenant (not those allocated
    /// outside every scope, which belong to the root).
    pub charged: AtomicUsize,
}

/// A cache: the slabs of one object layout, shared by every thread (the size classes' and
/// the dedicated caches' alike).
///
/// Invariants, under the lock ([`SlabCache::check`] walks them):
/// - every slab carved from (`k < fresh` of its segment) that is `Partial`, `Full` or
///   `Empty`: `|free| == carved - used` and `carved <= objects`; `Partial`:
///   `0 < used < objects`, on the partial list; `Full`: `used == objects`, on no list;
///   `Empty` and `Released`: `used == 0` (a released slab's free list is gone with its pages);
/// - `|partial| + #Full == counters.active_slabs`, `|empty| == empty_count ==
///   counters.empty_slabs`, `|released| == counters.released_slabs`, `|segments| ==
///   counters.segments`;
/// - parked batches: `parked_objects == Σ parked[..nparked].1 == counters.transfer`, and each
///   batch is a chain of its count.
pub struct SlabCache {
    /// What its slots are (accounted, size class); its segments point here.
    pub id: CacheId,
    pub layout: SlabLayout,
    lists: SpinLock<Lists>,
    pub counters: CacheCounters,
    /// Next dedicated cache in `DEDICATED` (fork handlers lock them all).
    next_dedicated: AtomicPtr<SlabCache>,
    /// A dedicated cache's identity and state, for reusing the core of a dropped one
    /// (`dedicated.rs`): a hash of its name, its stat index, and whether no `Cache` handle
    /// uses it now. Unused by size classes.
    pub(crate) name_hash: AtomicU64,
    pub(crate) stat: AtomicU8,
    pub(crate) retired: AtomicBool,
    /// Refills and flushes since the last invariant walk (`crate::invariant::due`).
    #[cfg(debug_assertions)]
    walks: core::sync::atomic::AtomicU32,
}

/// Every dedicated cache ever built (they are never freed), newest first.
static DEDICATED: AtomicPtr<SlabCache> = AtomicPtr::new(ptr::null_mut());

/// Links a dedicated cache into the list the fork handlers walk. Under the lifecycle lock
/// (`hooks::lifecycle_lock`), which the fork handlers hold from prepare to parent or child:
/// a cache that joined in between would not have been locked by prepare, yet be unlocked
/// after the fork (releasing a lock another thread holds) or inherited locked by the child.
pub fn register_dedicated(c: &'static SlabCache) {
    let _lifecycle = hooks::lifecycle_lock();
    // The lock makes this the only writer; readers walk the list without it, so the head is
    // published with Release after the link (and the core's fields) are written.
    c.next_dedicated
        .store(DEDICATED.load(Ordering::Relaxed), Ordering::Relaxed);
    DEDICATED.store(c as *const SlabCache as *mut SlabCache, Ordering::Release);
}

/// Calls `f` on every dedicated cache.
pub fn for_each_dedicated(mut f: impl FnMut(&'static SlabCache)) {
    let mut p = DEDICATED.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: dedicated caches are leaked, so they live forever.
        let c: &'static SlabCache = unsafe { &*p };
        f(c);
        p = c.next_dedicated.load(Ordering::Relaxed);
    }
}

/// Objects moved by one refill: a chain linked through the first word.
pub struct Chain {
    pub head: *mut FreeObj,
    pub count: usize,
}

impl SlabCache {
    pub const fn new(layout: SlabLayout, class: u32, accounted: bool) -> SlabCache {
        SlabCache {
            id: CacheId { accounted, class },
            layout,
            lists: SpinLock::new(Lists {
                partial: ptr::null_mut(),
                empty: ptr::null_mut(),
                empty_count: 0,
                decay: Decay::new(),
                active_high: 0,
                released: ptr::null_mut(),
                segments: ptr::null_mut(),
                parked: [(ptr::null_mut(), 0); PARKED_BATCHES],
                parked_cpu: [0; PARKED_BATCHES],
                nparked: 0,
                parked_objects: 0,
                parked_decay: Decay::new(),
            }),
            counters: CacheCounters {
                used: AtomicUsize::new(0),
                active_slabs: AtomicUsize::new(0),
                empty_slabs: AtomicUsize::new(0),
                released_slabs: AtomicUsize::new(0),
                segments: AtomicUsize::new(0),
                transfer: AtomicUsize::new(0),
                charged: AtomicUsize::new(0),
            },
            next_dedicated: AtomicPtr::new(ptr::null_mut()),
            name_hash: AtomicU64::new(0),
            stat: AtomicU8::new(0),
            retired: AtomicBool::new(false),
            #[cfg(debug_assertions)]
            walks: core::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Whether a segment header's `cache` names this cache.
    #[inline]
    pub fn owns(&self, id: *const CacheId) -> bool {
        ptr::eq(id, &self.id)
    }

    fn reserve_slabs(&self) -> usize {
        (RESERVE_BYTES >> self.layout.slab_shift).max(1)
    }

    /// Empty slabs the cache may keep now: the reserve, or as many as it had in use at once
    /// in this decay interval, so that in use plus empty stays within that peak (a cache
    /// that drops everything keeps its pages for a phase that builds the same again, and
    /// gives them back one or two intervals later when none does).
    fn keep_slabs(&self, l: &Lists) -> usize {
        self.reserve_slabs().max(l.active_high)
    }

    /// Records the empty count after it dropped, for the decay.
    fn observe_empty(&self, l: &mut Lists) {
        l.decay
            .observe(l.empty_count.saturating_sub(self.reserve_slabs()));
    }

    /// When a decay interval is over, takes the empty slabs above the reserve that stayed
    /// empty through it off the empty list and chains them onto `chain` (through `next`) for
    /// [`release_slabs`](Self::release_slabs). Reads the clock only when there is something
    /// above the reserve (a few nanoseconds, under the lock).
    fn take_idle(&self, l: &mut Lists, chain: &mut *mut SlabDesc) {
        let reserve = self.reserve_slabs();
        if l.empty_count <= reserve {
            return;
        }
        let Some(mut due) = l.decay.due(sys::now_ms(), l.empty_count - reserve) else {
            return;
        };
        // A new interval: its peak starts from what is in use now.
        l.active_high = self.counters.active_slabs.load(Ordering::Relaxed);
        while due > 0 && !l.empty.is_null() {
            let d = l.empty;
            // SAFETY: d is on the empty list, under the lock.
            unsafe {
                list_remove(&mut l.empty, d);
                (*d).state = SlabState::Released;
                (*d).next = *chain;
            }
            *chain = d;
            l.empty_count -= 1;
            due -= 1;
        }
        self.counters
            .empty_slabs
            .store(l.empty_count, Ordering::Relaxed);
        self.observe_empty(l);
    }

    /// Gives back the empty slabs that stayed idle through a decay interval, the check the
    /// cache's own refills and flushes make, for a cache the program stopped using
    /// (`sweep.rs`). Skips a cache whose lock is held: its holder is on one of those paths.
    ///
    /// Parked batches that no refill took through a whole interval go back to their slabs
    /// first (the oldest, at the bottom of the stack): up to `PARKED_BYTES` per cache of
    /// slots freed by a burst, which otherwise stayed resident until the cache's next burst.
    /// The slabs they empty decay like any other, one interval later.
    pub fn decay_idle(&self) {
        // Most caches hold nothing idle: skip them without touching the lock's line (a racy
        // read: what it misses, the next sweep sees).
        if self.counters.transfer.load(Ordering::Relaxed) == 0
            && self.counters.empty_slabs.load(Ordering::Relaxed) <= self.reserve_slabs()
        {
            return;
        }
        let Some(mut l) = self.lists.try_lock() else {
            return;
        };
        let mut idle = ptr::null_mut();
        let nparked = l.nparked;
        let nold = l
            .parked_decay
            .due(sys::now_ms(), nparked)
            .unwrap_or(0)
            .min(nparked);
        if nold > 0 {
            // In this critical section, so that `used` and the parked count drop together:
            // `stats()` and `Cache::live_objects` read them without the lock, and another
            // thread's sweep must not skew what a cache's own users read.
            for i in 0..nold {
                let (head, count) = l.parked[i];
                l.parked_objects -= count;
                // SAFETY: a batch parked by try_park, `count` slots of this cache, leaving
                // the stack below under this lock.
                unsafe { self.flush_locked(&mut l, head, count, &mut idle) };
            }
            l.parked.copy_within(nold..nparked, 0);
            l.parked_cpu.copy_within(nold..nparked, 0);
            l.nparked = nparked - nold;
            self.counters
                .transfer
                .store(l.parked_objects, Ordering::Relaxed);
            l.parked_decay.observe(nparked - nold);
        }
        self.take_idle(&mut l, &mut idle);
        drop(l);
        if !idle.is_null() {
            // SAFETY: the slabs flush_locked emptied beyond the keep, and those take_idle
            // took off the empty list: nothing handed out, on no list.
            unsafe { self.release_slabs(idle) };
        }
    }

    /// Takes at least `want` (>= 1) and at most `most` slots: a batch from the parked batches
    /// when one fits, topped up from the slabs. Returns fewer than `want` only when the OS
    /// refuses memory; an empty chain means out of memory.
    pub fn refill(&self, want: usize, most: usize) -> Chain {
        let mut chain = Chain {
            head: ptr::null_mut(),
            count: 0,
        };
        let cpu = sys::current_cpu();
        let mut l = self.lists.lock();
        let mut from_slabs = 0;
        l.newest_first_from(cpu, most);
        if l.nparked > 0 && l.parked[l.nparked - 1].1 <= most {
            let (head, count) = self.unpark(&mut l);
            // Slots in the parked batches already count as handed out (`used`).
            chain = Chain { head, count };
        }
        let marks = free_mark::fits(&self.layout);
        let objects = self.layout.objects as u32;
        let stride = self.layout.stride;
        while chain.count < want {
            let d = if !l.partial.is_null() {
                l.partial
            } else {
                match self.new_slab(&mut l) {
                    Some(d) => d,
                    None => break,
                }
            };
            // SAFETY: d is a descriptor of a live segment of this cache, reached under the lock.
            unsafe {
                let (_, _, start) = Segment::of_desc(d);
                while chain.count < want && (*d).used < objects {
                    let obj = if !(*d).free.is_null() {
                        let o = (*d).free;
                        (*d).free = FreeObj::next(o);
                        o
                    } else {
                        debug_assert!((*d).carved < objects);
                        let o = start.add((*d).carved as usize * stride) as *mut FreeObj;
                        (*d).carved += 1;
                        o
                    };
                    // Leaving its slab, or carved from a slab that may hold the marks of an
                    // earlier life.
                    if marks {
                        free_mark::clear(obj);
                    }
                    FreeObj::set_next(obj, chain.head);
                    chain.head = obj;
                    chain.count += 1;
                    from_slabs += 1;
                    (*d).used += 1;
                }
                if (*d).used == objects {
                    list_remove(&mut l.partial, d);
                    (*d).state = SlabState::Full;
                }
            }
        }
        let mut idle = ptr::null_mut();
        if !decay::background() {
            self.take_idle(&mut l, &mut idle);
        }
        drop(l);
        self.add_used(from_slabs as isize);
        if !idle.is_null() {
            // SAFETY: take_idle took these slabs off the empty list: nothing handed out.
            unsafe { self.release_slabs(idle) };
        }
        self.check_if_due();
        chain
    }

    /// Puts a slab with available slots at the head of the partial list, or returns None when
    /// no memory can be had.
    fn new_slab(&self, l: &mut Lists) -> Option<*mut SlabDesc> {
        // SAFETY: every descriptor reached here belongs to a live segment of this cache and
        // is only touched under the lock we hold (l borrows the guard).
        unsafe {
            let d = if !l.empty.is_null() {
                let d = l.empty;
                list_remove(&mut l.empty, d);
                l.empty_count -= 1;
                self.counters
                    .empty_slabs
                    .store(l.empty_count, Ordering::Relaxed);
                self.observe_empty(l);
                d
            } else if !l.released.is_null() {
                let d = l.released;
                list_remove(&mut l.released, d);
                dec(&self.counters.released_slabs);
                d
            } else {
                let mut seg = l.segments;
                if seg.is_null() || (*seg).fresh == (*seg).nslabs {
                    seg = Segment::create(&self.id, self.layout);
                    if seg.is_null() {
                        return None;
                    }
                    (*seg).next = l.segments;
                    l.segments = seg;
                    inc(&self.counters.segments);
                }
                let k = (*seg).fresh;
                (*seg).fresh += 1;
                Segment::desc(seg, k)
            };
            (*d).free = ptr::null_mut();
            (*d).used = 0;
            (*d).carved = 0;
            (*d).state = SlabState::Partial;
            list_push(&mut l.partial, d);
            let active = self.counters.active_slabs.fetch_add(1, Ordering::Relaxed) + 1;
            l.active_high = l.active_high.max(active);
            Some(d)
        }
    }

    /// Gives back `count` slots linked from `head`. Detects and reports (fatally) pointers that
    /// are not slots of this cache and double frees: slots already on their slab's free list
    /// (see `free_mark`; slots of 16 bytes or more) or in slabs with nothing handed out.
    ///
    /// # Safety
    /// The chain must be well formed: `count` slots linked through their first word.
    pub unsafe fn flush(&self, head: *mut FreeObj, count: usize) {
        // Dedicated caches' single and bulk frees return slots to their slabs: their locked
        // refills take exact counts and would leave parked batches idle (their fronts park
        // through `flush_batch`).
        if count > 1 && self.id.class != u32::MAX {
            // SAFETY: caller's contract.
            if unsafe { self.try_park(head, count) } {
                return;
            }
        }
        // SAFETY: caller's contract.
        unsafe { self.flush_to_slabs(head, count) };
        self.check_if_due();
    }

    /// Gives back `count` slots from a thread bin, a dedicated cache's front included: parked
    /// whole when there is room (a front's next refill takes the batch back), else to the
    /// slabs, with [`flush`](Self::flush)'s checks.
    ///
    /// # Safety
    /// As [`flush`](Self::flush).
    pub unsafe fn flush_batch(&self, head: *mut FreeObj, count: usize) {
        // SAFETY: caller's contract.
        if count > 1 && unsafe { self.try_park(head, count) } {
            return;
        }
        // SAFETY: caller's contract.
        unsafe { self.flush_to_slabs(head, count) };
        self.check_if_due();
    }

    /// Parks a whole batch in the parked batches when it has room. Checks that every slot
    /// lies in a segment of this cache and is not on its slab's free list (the full checks
    /// run when slots reach their slabs). Parked slots are not marked: clearing the marks
    /// would cost the refill that takes the batch a walk over it.
    ///
    /// # Safety
    /// As [`flush`](Self::flush).
    unsafe fn try_park(&self, head: *mut FreeObj, count: usize) -> bool {
        let bytes = count * self.layout.stride;
        let marks = free_mark::fits(&self.layout);
        let mut suspect = false;
        let mut o = head;
        let mut n = 0;
        // The segment of the last slot checked: a batch's slots mostly share a few segments,
        // and a slot in one already checked needs neither the map nor the header again (a
        // third of the walk's instructions on glibc's bench-malloc-simple under LD_PRELOAD).
        // Not 4 MiB aligned, so no segment: the first slot is always checked (null is not a
        // start value either: a pointer below 4 MiB would match it).
        let mut checked = usize::MAX;
        // At most `count` steps: a slot freed twice while its first free waited deeper in a
        // bin links the bin's list into a loop, and a whole bin given back
        // (`bin::DRY_GIVE_BACKS`) comes here with no walk before this one to cut it.
        while !o.is_null() && n < count {
            let seg = segment_of(o as *const u8);
            // SAFETY: is_segment says the header is readable.
            if seg as usize != checked {
                if !is_segment(o as *const u8) || !self.owns(unsafe { (*seg).cache }) {
                    sys::fatal("free of a pointer that slabcg did not allocate with this layout");
                }
                checked = seg as usize;
            }
            // SAFETY: o lies in a segment of this cache, whose slots have a second word when
            // marks are on; the caller gives it up.
            unsafe {
                if marks && free_mark::is_set(o) {
                    suspect = true;
                }
                o = FreeObj::next(o);
            }
            n += 1;
        }
        if n != count || !o.is_null() {
            sys::fatal(
                "corrupted free chain (count mismatch: a slot freed twice can loop a bin's list)",
            );
        }
        let cpu = sys::current_cpu();
        let mut l = self.lists.lock();
        if suspect {
            // SAFETY: the chain is well formed (just walked); under the lock.
            unsafe { self.check_not_free(&l, head, count) };
        }
        if l.nparked == PARKED_BATCHES
            || (l.parked_objects * self.layout.stride + bytes > PARKED_BYTES && l.nparked > 0)
        {
            return false;
        }
        let i = l.nparked;
        l.parked[i] = (head, count);
        l.parked_cpu[i] = cpu;
        l.nparked += 1;
        l.parked_objects += count;
        self.counters
            .transfer
            .store(l.parked_objects, Ordering::Relaxed);
        true
    }

    /// Takes the newest batch out of the parked batches (`l.nparked > 0`), keeping
    /// `parked_objects` and the stats counter in step.
    fn unpark(&self, l: &mut Lists) -> (*mut FreeObj, usize) {
        debug_assert!(l.nparked > 0);
        l.nparked -= 1;
        let (head, count) = l.parked[l.nparked];
        l.parked_objects -= count;
        self.counters
            .transfer
            .store(l.parked_objects, Ordering::Relaxed);
        l.parked_decay.observe(l.nparked);
        (head, count)
    }

    /// Gives slots back to their slabs.
    ///
    /// # Safety
    /// As [`flush`](Self::flush).
    unsafe fn flush_to_slabs(&self, head: *mut FreeObj, count: usize) {
        let mut to_release: *mut SlabDesc = ptr::null_mut();
        let mut l = self.lists.lock();
        // SAFETY: caller's contract; under the lock.
        unsafe { self.flush_locked(&mut l, head, count, &mut to_release) };
        // With the background decay thread, a free's flush gives back only what the keep
        // bound refuses (`decay::background`).
        if !decay::background() {
            self.take_idle(&mut l, &mut to_release);
        }
        drop(l);
        // SAFETY: the slabs on to_release have nothing handed out and are on no list.
        unsafe { self.release_slabs(to_release) };
    }

    /// [`flush_to_slabs`](Self::flush_to_slabs) under the lock `l`: the slots go to their
    /// slabs and `used` drops by `count` before the lock is released (so a batch leaves the
    /// parked count and `used` in one critical section, [`decay_idle`](Self::decay_idle));
    /// slabs emptied beyond what the cache keeps are chained onto `to_release` for
    /// [`release_slabs`](Self::release_slabs).
    ///
    /// # Safety
    /// As [`flush`](Self::flush).
    unsafe fn flush_locked(
        &self,
        l: &mut Lists,
        head: *mut FreeObj,
        count: usize,
        to_release: &mut *mut SlabDesc,
    ) {
        let marks = free_mark::fits(&self.layout);
        let mut obj = head;
        let mut n = 0;
        while n < count && !obj.is_null() {
            // SAFETY: obj is a slot from the chain (caller's contract); its link is read before
            // the slot is pushed onto its slab's free list, which overwrites it.
            unsafe {
                let next = FreeObj::next(obj);
                let d = self.desc_of_checked(obj as *mut u8);
                if marks {
                    // A duplicate later in this chain finds the first copy on the slab.
                    if free_mark::is_set(obj) && self.is_free_in(l, obj) {
                        double_free_in_cache();
                    }
                    free_mark::set(obj);
                }
                FreeObj::set_next(obj, (*d).free);
                (*d).free = obj;
                if (*d).state == SlabState::Full {
                    (*d).state = SlabState::Partial;
                    list_push(&mut l.partial, d);
                }
                (*d).used -= 1;
                if (*d).used == 0 {
                    list_remove(&mut l.partial, d);
                    dec(&self.counters.active_slabs);
                    if l.empty_count < self.keep_slabs(l) {
                        (*d).state = SlabState::Empty;
                        list_push(&mut l.empty, d);
                        l.empty_count += 1;
                        self.counters
                            .empty_slabs
                            .store(l.empty_count, Ordering::Relaxed);
                    } else {
                        // On no list while its pages are released, without the lock.
                        (*d).state = SlabState::Released;
                        (*d).next = *to_release;
                        *to_release = d;
                    }
                }
                obj = next;
            }
            n += 1;
        }
        self.add_used(-(n as isize));
        if n != count {
            sys::fatal("corrupted free chain (count mismatch)");
        }
    }

    /// madvises the slabs linked through `next` (without the lock: the syscall can be slow),
    /// then files them on the released list.
    ///
    /// # Safety
    /// Every slab on the chain must have nothing handed out and be on no list.
    unsafe fn release_slabs(&self, chain: *mut SlabDesc) {
        let mut d = chain;
        while !d.is_null() {
            // SAFETY: each d is a live descriptor owned by this call (on no list).
            unsafe {
                let (_, _, start) = Segment::of_desc(d);
                sys::release(start, self.layout.slab_bytes());
                d = (*d).next;
            }
        }
        let mut l = self.lists.lock();
        let mut d = chain;
        while !d.is_null() {
            // SAFETY: as above; `next` is read before list_push overwrites it.
            unsafe {
                let next = (*d).next;
                list_push(&mut l.released, d);
                inc(&self.counters.released_slabs);
                d = next;
            }
        }
    }

    fn add_used(&self, delta: isize) {
        add_signed(&self.counters.used, delta);
    }

    /// Checks that `p` is the start of a slot of this cache (in a segment we mapped, of this
    /// cache, not in a header, a slab's tail or the middle of a slot) and returns its segment,
    /// slab index and slot index; aborts with a message otherwise. What it does not check is
    /// whether the slot is allocated.
    ///
    /// Safe: it only reads segment headers, which stay mapped for the life of the process.
    #[inline(always)]
    pub(crate) fn check_slot_start(&self, p: *mut u8) -> (*mut Segment, usize, usize) {
        if !is_segment(p) {
            sys::fatal("free of a pointer that slabcg did not allocate");
        }
        let seg = segment_of(p);
        // SAFETY: is_segment says seg is a live segment header.
        unsafe {
            if !self.owns((*seg).cache) {
                sys::fatal(
                    "free of a pointer of another cache or size class (layout does not match)",
                );
            }
            let off = p as usize - seg as usize;
            if off < (*seg).slabs_offset {
                sys::fatal("free of a pointer into a segment header");
            }
            let off = off - (*seg).slabs_offset;
            let k = off >> self.layout.slab_shift;
            let within = off & (self.layout.slab_bytes() - 1);
            match self.layout.slot_start(within) {
                Some(idx) if k < (*seg).nslabs => (seg, k, idx),
                _ => sys::fatal("free of a pointer that is not the start of a slot"),
            }
        }
    }

    /// The owner word of slot `p` of this accounted cache, from the cache's own layout (no
    /// header read, no check), for slots known to be slot starts (the object stock's kept
    /// bins).
    ///
    /// # Safety
    /// `p` must be a slot start of this accounted cache.
    #[inline(always)]
    pub(crate) unsafe fn owner_word_of(&self, p: *mut u8) -> *const AtomicU32 {
        let l = &self.layout;
        // Off a slot start, `meta_step` would give a word between two owner words.
        debug_assert!(
            l.slot_start(p as usize & l.slab_mask).is_some(),
            "owner_word_of: not a slot start"
        );
        // SAFETY: caller's contract: a slot start of this accounted cache, whose layout
        // gives the steps.
        unsafe { l.owner_steps().word_of(p) }
    }

    /// The owner word of slot `idx` of `p`'s slab, `in_slab` being `p`'s offset there.
    ///
    /// # Safety
    /// `p` must be slot `idx`'s start in a slab of this accounted cache.
    #[inline(always)]
    unsafe fn owner_word_at(&self, p: *mut u8, in_slab: usize, idx: usize) -> *const AtomicU32 {
        let l = &self.layout;
        // SAFETY: slabs of accounted segments are aligned to their size (segment::geometry),
        // so for a slot start the word lies inside p's slab (slab.rs:
        // `metadata_fits_where_promised`).
        // (`ObjectStock::check` cross-checks it against `owner::owner_word` for kept slots:
        // from here, that import would make a ring.)
        unsafe { p.sub(in_slab).add(l.meta_offset + idx * l.meta_stride) as *const AtomicU32 }
    }

    /// The owner word of `p` when it is a slot start in a segment of this accounted cache, for
    /// the kept free's fast path (`Cache::free`): None for anything else in a segment (another
    /// cache's object, a segment header, the middle of a slot), which the caller's checked
    /// path then reports. The checks of [`check_slot_start`](Self::check_slot_start), less
    /// the segment bitmap's (`is_segment`, 11 instructions of a 75-instruction pair, kept in
    /// hardened builds): a pointer slabcg never handed out has its "header" read at its
    /// 4 MiB-aligned base, which is either mapped (the cache does not match: reported) or not
    /// (SIGSEGV, not corruption).
    ///
    /// # Safety
    /// `p` must be what the caller's caller promises is a live slot of this cache (the
    /// checks report a broken promise; they cannot make one sound).
    #[inline(always)]
    pub(crate) unsafe fn owner_word_if_slot(&self, p: *mut u8) -> Option<*const AtomicU32> {
        if cfg!(feature = "hardened") && !is_segment(p) {
            return None;
        }
        let seg = segment_of(p);
        let l = &self.layout;
        let in_slab = p as usize & l.slab_mask;
        // SAFETY: by the caller's contract p is a slot of this cache, whose segment header is
        // live and immutable (a broken contract gets the read described above).
        let (cache, first) = unsafe { ((*seg).cache, seg as usize + (*seg).slabs_offset) };
        // Slab 0 starts at `first`, a multiple of the slab size, and the segment's slabs run
        // to its end, so `p >= first` and a slot start's index put p on a slot of a slab of
        // this segment.
        let idx = match l.slot_start(in_slab) {
            Some(idx) if self.owns(cache) && (p as usize) >= first => idx,
            _ => return None,
        };
        // SAFETY: p is slot idx's start in a slab of this cache (just checked).
        Some(unsafe { self.owner_word_at(p, in_slab, idx) })
    }

    /// A [`SlabRun`] over a run of pointers into this accounted cache, starting with `p`'s
    /// slab: None when `p` does not lie in a slab of this cache (null included).
    ///
    /// # Safety
    /// As [`owner_word_if_slot`](Self::owner_word_if_slot), for `p`.
    #[inline(always)]
    pub(crate) unsafe fn slab_run(&self, p: *mut u8) -> Option<SlabRun<'_>> {
        let mut run = SlabRun {
            core: self,
            layout: self.layout,
            slab: 0,
            meta: ptr::null_mut(),
        };
        // SAFETY: caller's contract.
        unsafe { run.enter(p)? };
        Some(run)
    }

    /// [`check_slot_start`](Self::check_slot_start) for a slot of this accounted cache, and
    /// the slot's owner word, found from what the check computed (the slab and slot index)
    /// rather than computed again from `p`.
    #[inline(always)]
    pub(crate) fn checked_owner_word(&self, p: *mut u8) -> &'static AtomicU32 {
        let (seg, k, idx) = self.check_slot_start(p);
        let l = &self.layout;
        debug_assert!(self.id.accounted);
        // SAFETY: check_slot_start says seg is a live segment of this cache, k < nslabs and
        // idx < objects: the word lies in slab k's metadata (slab.rs:
        // `metadata_fits_where_promised`), which lives as long as the segment (for ever).
        unsafe {
            let slab = (seg as *mut u8).add((*seg).slabs_offset + (k << l.slab_shift));
            // The same word as `owner::owner_word(p)` (`owner.rs` tests it).
            &*(slab.add(l.meta_offset + idx * l.meta_stride) as *const AtomicU32)
        }
    }

    /// Whether slot `o` (a slot start of this cache, marked) is on its slab's free list.
    /// Only asked about marked slots, which nearly always are, so the walk's length does not
    /// matter.
    ///
    /// # Safety
    /// Under the lock (`_l`), which guards the slab free lists.
    unsafe fn is_free_in(&self, _l: &Lists, o: *mut FreeObj) -> bool {
        let (seg, k, _) = self.check_slot_start(o as *mut u8);
        // SAFETY: check_slot_start says seg is a live segment of this cache and k < nslabs;
        // the list is read under the lock (caller's contract), the walk bounded by the
        // slab's slot count in case the list is corrupt.
        unsafe {
            if k >= (*seg).fresh {
                return false;
            }
            let mut f = (*Segment::desc(seg, k)).free;
            let mut steps = 0;
            while !f.is_null() && steps < self.layout.objects {
                if f == o {
                    return true;
                }
                f = FreeObj::next(f);
                steps += 1;
            }
        }
        false
    }

    /// Reports a double free when a slot of the chain is on its slab's free list
    /// (try_park's slow path: some slot carried the mark).
    ///
    /// # Safety
    /// `head` starts a well-formed chain of `count` slots of this cache; under the lock.
    unsafe fn check_not_free(&self, l: &Lists, head: *mut FreeObj, count: usize) {
        // Only a marked slot makes a suspect, and only caches whose slots carry the mark
        // have one: reading the second word below is in bounds.
        debug_assert!(free_mark::fits(&self.layout));
        let mut o = head;
        for _ in 0..count {
            // SAFETY: o is one of the chain's slots (caller's contract).
            unsafe {
                if free_mark::is_set(o) && self.is_free_in(l, o) {
                    double_free_in_cache();
                }
                o = FreeObj::next(o);
            }
        }
    }

    /// The descriptor of the slab holding slot `p`, after checking that `p` is the start of a
    /// slot of this cache in a slab in use; aborts with a message otherwise.
    ///
    /// # Safety
    /// Only reads segment headers, which stay mapped for the life of the process. Called
    /// under the cache's lock (the descriptor's fields it reads are mutated under it).
    unsafe fn desc_of_checked(&self, p: *mut u8) -> *mut SlabDesc {
        let (seg, k, idx) = self.check_slot_start(p);
        // SAFETY: check_slot_start says seg is a live segment of this cache and k < nslabs.
        unsafe {
            if k >= (*seg).fresh {
                sys::fatal("free of a pointer that is not the start of a live slot");
            }
            let d = Segment::desc(seg, k);
            if (*d).used == 0 || idx >= (*d).carved as usize {
                sys::fatal("double free (slot's slab has nothing allocated)");
            }
            d
        }
    }

    /// Returns the parked batches's slots to their slabs, then releases every empty slab to
    /// the OS.
    pub fn trim(&self) {
        loop {
            let mut l = self.lists.lock();
            if l.nparked == 0 {
                break;
            }
            let (head, count) = self.unpark(&mut l);
            drop(l);
            // SAFETY: a batch parked by try_park: count slots of this cache.
            unsafe { self.flush_to_slabs(head, count) };
        }
        let mut l = self.lists.lock();
        let mut chain: *mut SlabDesc = ptr::null_mut();
        while !l.empty.is_null() {
            let d = l.empty;
            // SAFETY: d is on the empty list, under the lock.
            unsafe {
                list_remove(&mut l.empty, d);
                (*d).state = SlabState::Released;
                (*d).next = chain;
            }
            chain = d;
        }
        l.empty_count = 0;
        self.counters.empty_slabs.store(0, Ordering::Relaxed);
        self.observe_empty(&mut l);
        drop(l);
        // SAFETY: the slabs on chain have nothing handed out and are on no list.
        unsafe { self.release_slabs(chain) };
    }

    /// The invariants of the cache (struct docs), by walking its segments, slabs, free lists,
    /// lists and parked batches under its lock. Expensive (`crate::invariant`).
    pub(crate) fn check(&self) {
        use crate::invariant::broken;
        let l = self.lists.lock();
        let objects = self.layout.objects as u32;
        // Counts of slabs: active, walked (the bound of the list walks below, so a cycle in a
        // corrupt list is reported rather than walked for ever); and of segments.
        let (mut active, mut slabs, mut segments) = (0usize, 0usize, 0);
        let mut seg = l.segments;
        // SAFETY: the cache's segments, descriptors, slab free lists and parked chains are
        // live and only changed under the lock held here; free-list walks are bounded by the
        // slab's slot count, and slabs whose pages were released are not walked.
        unsafe {
            while !seg.is_null() {
                segments += 1;
                for k in 0..(*seg).fresh {
                    slabs += 1;
                    let d = Segment::desc(seg, k);
                    let (used, carved) = ((*d).used, (*d).carved);
                    let ok = match (*d).state {
                        SlabState::Partial => 0 < used && used < objects,
                        SlabState::Full => used == objects,
                        SlabState::Empty | SlabState::Released => used == 0,
                        SlabState::Fresh => false,
                    };
                    if !ok || carved > objects {
                        broken("cache: a slab's state does not match its counts");
                    }
                    if matches!((*d).state, SlabState::Partial | SlabState::Full) {
                        active += 1;
                    }
                    if (*d).state != SlabState::Released {
                        let mut n = 0;
                        let mut f = (*d).free;
                        while !f.is_null() && n <= objects {
                            n += 1;
                            f = FreeObj::next(f);
                        }
                        // Checked: the counts this walk exists to catch may be corrupt, and an
                        // overflow panic must not unwind out of the allocator.
                        if carved.checked_sub(used) != Some(n) {
                            broken("cache: a slab's |free| != carved - used");
                        }
                    }
                }
                seg = (*seg).next;
            }
            let count = |head: *mut SlabDesc, state: SlabState| {
                let mut n = 0;
                let mut d = head;
                while !d.is_null() {
                    if (*d).state != state || n == slabs {
                        broken("cache: a slab on the wrong list, or a list longer than the slabs");
                    }
                    n += 1;
                    d = (*d).next;
                }
                n
            };
            let partial = count(l.partial, SlabState::Partial);
            let Some(full) = active.checked_sub(partial) else {
                broken("cache: more slabs on the partial list than partial and full slabs")
            };
            let empty = count(l.empty, SlabState::Empty);
            let released = count(l.released, SlabState::Released);
            let k = &self.counters;
            if partial + full != k.active_slabs.load(Ordering::Relaxed)
                || empty != l.empty_count
                || empty != k.empty_slabs.load(Ordering::Relaxed)
                || released != k.released_slabs.load(Ordering::Relaxed)
                || segments != k.segments.load(Ordering::Relaxed)
            {
                broken("cache: a list's length does not match its counter");
            }
            let mut parked = 0;
            for &(head, n) in &l.parked[..l.nparked] {
                let mut len = 0;
                let mut o = head;
                while !o.is_null() && len <= n {
                    len += 1;
                    o = FreeObj::next(o);
                }
                if len != n {
                    broken("cache: a parked batch is not a chain of its count");
                }
                parked += n;
            }
            if parked != l.parked_objects || parked != k.transfer.load(Ordering::Relaxed) {
                broken("cache: parked objects != Σ batch counts");
            }
        }
    }

    /// The walk of [`check`](Self::check) when one is due, in `debug_assertions` builds.
    #[inline]
    fn check_if_due(&self) {
        #[cfg(debug_assertions)]
        if crate::invariant::due(&self.walks) {
            self.check();
        }
    }

    /// Takes the lock and keeps it (fork prepare).
    pub fn lock_for_fork(&self) {
        self.lists.lock_raw();
    }

    /// Whether some thread holds the cache's lock (tests).
    #[cfg(test)]
    pub(crate) fn lock_is_held(&self) -> bool {
        self.lists.try_lock().is_none()
    }

    /// Releases the lock taken by [`lock_for_fork`](Self::lock_for_fork).
    ///
    /// # Safety
    /// Only after `lock_for_fork` in the same thread (or in the fork child).
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: forwarded contract.
        unsafe { self.lists.unlock_raw() }
    }
}

/// [`SlabCache::owner_word_if_slot`] for a run of pointers most of which share a slab (a
/// bulk free's): the segment's checks (its header names this cache, the pointer lies past
/// the header) are made when a pointer leaves the slab the run last checked, the slot-start
/// check for every pointer. A pointer whose offset from that slab's start is below the slab
/// size lies in it, a slab of this cache; its slot-start check then proves it a slot start
/// of this cache, as `owner_word_if_slot` would.
///
/// The layout is a copy, so that a loop that writes through the slots (the bulk free links
/// them) keeps the geometry in registers instead of reloading it after every store.
pub(crate) struct SlabRun<'a> {
    core: &'a SlabCache,
    layout: SlabLayout,
    /// The start of the slab last seen to be one of this cache's.
    slab: usize,
    /// Its slot 0's owner word.
    meta: *mut u8,
}

impl SlabRun<'_> {
    /// The owner word of `p` when it is a slot start of this cache, None otherwise (null
    /// included): what [`SlabCache::owner_word_if_slot`] answers.
    ///
    /// # Safety
    /// As [`SlabCache::owner_word_if_slot`].
    #[inline(always)]
    pub(crate) unsafe fn owner_word(&mut self, p: *mut u8) -> Option<*const AtomicU32> {
        let mut off = (p as usize).wrapping_sub(self.slab);
        // Against the mask, not `slab_bytes()`: a compare, not a shift by a register.
        if off > self.layout.slab_mask {
            // SAFETY: caller's contract.
            unsafe { self.enter(p)? };
            off = p as usize & self.layout.slab_mask;
        }
        let idx = self.layout.slot_start(off)?;
        // SAFETY: p is slot idx's start in the slab `meta` belongs to, a slab of this
        // accounted cache (`enter`): its owner word lies inside the slab (slab.rs:
        // `metadata_fits_where_promised`).
        let w = unsafe { self.meta.add(idx * self.layout.meta_stride) } as *const AtomicU32;
        // SAFETY: caller's contract.
        debug_assert!(unsafe { self.core.owner_word_if_slot(p) } == Some(w));
        Some(w)
    }

    /// Makes `p`'s slab the run's when it is a slab of a segment of this cache; None
    /// otherwise, the run as it was. The checks of `owner_word_if_slot` but the slot
    /// start's (for a null or tiny pointer too, whose "header" at address 0 is not read).
    ///
    /// # Safety
    /// As [`SlabCache::owner_word_if_slot`].
    #[inline(always)]
    unsafe fn enter(&mut self, p: *mut u8) -> Option<()> {
        let seg = segment_of(p);
        if seg.is_null() || (cfg!(feature = "hardened") && !is_segment(p)) {
            return None;
        }
        // SAFETY: by the caller's contract p is a slot of this cache, whose segment header is
        // live and immutable (a broken contract gets the read `owner_word_if_slot` describes).
        let (cache, first) = unsafe { ((*seg).cache, seg as usize + (*seg).slabs_offset) };
        // Slab 0 starts at `first`, a multiple of the slab size, and the segment's slabs run
        // to its end, so `p >= first` puts p's slab among the segment's.
        if !self.core.owns(cache) || (p as usize) < first {
            return None;
        }
        let in_slab = p as usize & self.layout.slab_mask;
        self.slab = p as usize - in_slab;
        // SAFETY: the slab is one of this accounted cache's, whose owner words start
        // `meta_offset` bytes in (slab.rs: `metadata_fits_where_promised`).
        self.meta = unsafe { p.sub(in_slab).add(self.layout.meta_offset) };
        Some(())
    }
}

#[cold]
#[inline(never)]
fn double_free_in_cache() -> ! {
    sys::fatal("double free (the slot is already free in its cache)")
}

fn inc(c: &AtomicUsize) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn dec(c: &AtomicUsize) {
    c.fetch_sub(1, Ordering::Relaxed);
}

/// Pushes `d` at the head of a doubly linked list.
///
/// # Safety
/// `d` must be on no list; the list must be well formed.
unsafe fn list_push(head: &mut *mut SlabDesc, d: *mut SlabDesc) {
    // SAFETY: d and *head are live descriptors (caller's contract).
    unsafe {
        (*d).prev = ptr::null_mut();
        (*d).next = *head;
        if !head.is_null() {
            (**head).prev = d;
        }
    }
    *head = d;
}

/// Unlinks `d` from the list whose head is `head`.
///
/// # Safety
/// `d` must be on that list.
unsafe fn list_remove(head: &mut *mut SlabDesc, d: *mut SlabDesc) {
    // SAFETY: d and its neighbours are live descriptors on this list.
    unsafe {
        if (*d).prev.is_null() {
            *head = (*d).next;
        } else {
            (*(*d).prev).next = (*d).next;
        }
        if !(*d).next.is_null() {
            (*(*d).next).prev = (*d).prev;
        }
        (*d).next = ptr::null_mut();
        (*d).prev = ptr::null_mut();
    }
}

/// Adds a signed `delta` to an unsigned counter (a net count of one side's changes).
pub(crate) fn add_signed(counter: &AtomicUsize, delta: isize) {
    if delta > 0 {
        counter.fetch_add(delta as usize, Ordering::Relaxed);
    } else if delta < 0 {
        counter.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parked batches' ids (a count's hundreds), from the bottom of the stack up. The
    /// test's batches are fake: the choice reads only their counts and CPUs.
    fn order(l: &Lists) -> Vec<usize> {
        l.parked[..l.nparked].iter().map(|b| b.1 / 100).collect()
    }

    #[test]
    fn a_refill_takes_the_newest_batch_of_its_cpu_first_keeping_the_rest_in_order() {
        let cache = SlabCache::new(SlabLayout::for_class(64, false).unwrap(), 0, false);
        let mut l = cache.lists.lock();
        // Batches 1..=5, given back on CPUs 0, 1, 0, 1, 1 (5 is the newest).
        for (i, cpu) in [0u32, 1, 0, 1, 1].into_iter().enumerate() {
            l.parked[i] = (ptr::null_mut(), (i + 1) * 100);
            l.parked_cpu[i] = cpu;
        }
        l.nparked = 5;
        // CPU 0's newest is batch 3: to the top, 4 and 5 move down one.
        l.newest_first_from(0, usize::MAX);
        assert_eq!(order(&l), [1, 2, 4, 5, 3]);
        assert_eq!(l.parked_cpu[..5], [0, 1, 1, 1, 0]);
        // Already on top: nothing moves.
        l.newest_first_from(0, usize::MAX);
        assert_eq!(order(&l), [1, 2, 4, 5, 3]);
        // CPU 1's newest that fits `most`: batch 5 holds 500 slots, too many; batch 4 fits.
        l.newest_first_from(1, 450);
        assert_eq!(order(&l), [1, 2, 5, 3, 4]);
        // The top is CPU 1's but too big for `most`: CPU 1's newest that fits comes up.
        l.newest_first_from(1, 250);
        assert_eq!(order(&l), [1, 5, 3, 4, 2]);
        // No batch of CPU 7: the stack stays as it is (the refill takes the top, if it fits).
        l.newest_first_from(7, usize::MAX);
        assert_eq!(order(&l), [1, 5, 3, 4, 2]);
        l.nparked = 0;
    }

    /// Batches idle through a whole interval go back at its end, however a refill reached
    /// under them; one that moved down past the mark does not.
    #[test]
    fn a_batch_taken_from_under_idle_ones_leaves_them_idle() {
        let cache = SlabCache::new(SlabLayout::for_class(64, false).unwrap(), 0, false);
        let mut l = cache.lists.lock();
        let park = |l: &mut Lists, batches: &[(usize, u32)]| {
            for (i, &(b, cpu)) in batches.iter().enumerate() {
                l.parked[i] = (ptr::null_mut(), b * 100);
                l.parked_cpu[i] = cpu;
            }
            l.nparked = batches.len();
        };
        // A refill as `refill` makes it on `cpu`: the choice, the take, the mark.
        let refill = |l: &mut Lists, cpu: u32| {
            l.newest_first_from(cpu, usize::MAX);
            l.nparked -= 1;
            let n = l.nparked;
            l.parked_decay.observe(n);
        };
        let t = 10_000_000;
        park(&mut l, &[(1, 0), (2, 1), (3, 1), (4, 1)]);
        // An interval begins with the 4 batches parked; a refill on CPU 0 takes batch 1,
        // at the bottom.
        l.parked_decay.due(t, 4);
        refill(&mut l, 0);
        // Batches 2, 3 and 4 sat through the whole interval.
        let first = l.parked_decay.due(t + decay::interval_ms(), 3);
        // The next interval begins with 2, 3, 4 parked; batch 5 is parked on top (above the
        // mark of 3), then a refill on CPU 0 takes batch 2 from the bottom: 5 moves down to
        // where the mark was, so only 3 and 4 were idle through the interval.
        let t = t + decay::interval_ms();
        park(&mut l, &[(2, 0), (3, 1), (4, 1), (5, 1)]);
        refill(&mut l, 0);
        let order_after = order(&l);
        let second = l.parked_decay.due(t + decay::interval_ms(), 3);
        l.nparked = 0;
        drop(l);
        assert_eq!(first, Some(3), "the batches no refill reached");
        assert_eq!(order_after, [3, 4, 5]);
        assert_eq!(
            second,
            Some(2),
            "batch 5, parked in the interval, moved below the mark"
        );
    }

    /// Random parks and refills against a model (a Vec, the refill taking the newest batch
    /// of its CPU that fits, else the top if it fits): no batch is lost, duplicated or
    /// reordered.
    #[test]
    fn refills_take_what_the_model_says_and_keep_the_rest_in_order() {
        let cache = SlabCache::new(SlabLayout::for_class(64, false).unwrap(), 0, false);
        let mut l = cache.lists.lock();
        // Each batch as (id * 100 + slots, cpu), its id in the fake pointer.
        let batch = |l: &Lists, i: usize| {
            (
                l.parked[i].0 as usize * 100 + l.parked[i].1,
                l.parked_cpu[i],
            )
        };
        let mut model: Vec<(usize, u32)> = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut next = 1;
        let mut taken = 0;
        for _ in 0..20_000 {
            if rnd(2) == 0 {
                if l.nparked < PARKED_BATCHES {
                    let (cpu, slots) = (rnd(3) as u32, rnd(8) as usize);
                    let i = l.nparked;
                    l.parked[i] = (next as *mut FreeObj, slots);
                    l.parked_cpu[i] = cpu;
                    l.nparked += 1;
                    model.push((next * 100 + slots, cpu));
                    next += 1;
                }
            } else {
                let (cpu, most) = (rnd(3) as u32, rnd(9) as usize);
                let fits = |b: &(usize, u32)| b.0 % 100 <= most;
                let want = model
                    .iter()
                    .rposition(|b| b.1 == cpu && fits(b))
                    .or_else(|| model.last().filter(|b| fits(b)).map(|_| model.len() - 1))
                    .map(|j| model.remove(j));
                l.newest_first_from(cpu, most);
                let got = (l.nparked > 0 && l.parked[l.nparked - 1].1 <= most).then(|| {
                    l.nparked -= 1;
                    batch(&l, l.nparked)
                });
                taken += usize::from(got.is_some());
                assert_eq!(got, want);
            }
            let now: Vec<_> = (0..l.nparked).map(|i| batch(&l, i)).collect();
            assert_eq!(now, model);
        }
        l.nparked = 0;
        drop(l);
        assert!(taken > 1_000, "the model took {taken} batches");
    }
}
