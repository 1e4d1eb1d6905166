//! `alloc_bulk` / `free_bulk` (kmem_cache_alloc_bulk, seed 000): for a dedicated cache
//! ([`Cache::alloc_bulk`], [`Cache::free_bulk`]) and for the size classes ([`alloc_bulk`],
//! [`free_bulk`]).
//!
//! How a bulk charges (an accounted cache, inside a tenant scope):
//! - the objects are charged in runs, each with one `hooks::charge` of the run's bytes: one
//!   operation on the thread's stock (a take, or one refill of it from the counters), and,
//!   since every charged byte holds one reference on the objcg, the run's references in the
//!   same step (what seed 000's review asked for with `obj_cgroup_get_many`);
//! - a run is at most [`RUN_BYTES`] (1 GiB, [`run_objects`]): the byte count of a bulk is
//!   never computed as `count * size`, so no count overflows the math (on 64-bit targets no
//!   real slice could, on 32-bit ones a quarter of the address space could) and no run's
//!   bytes overflow the accounting's 32-bit stat deltas;
//! - every run is charged before any object is taken: a refused run uncharges the runs
//!   before it, memory running out part way gives back the objects taken and uncharges every
//!   run; either way the call returns 0 with nothing allocated or charged;
//! - `free_bulk` reads and clears each object's owner word and uncharges each stretch of
//!   consecutive objects with the same owner in runs the same way (a bulk allocated under
//!   one tenant comes back as one stretch);
//! - a bulk of one object is the single allocation or free (`Cache::alloc`/`free`, a size
//!   class's `alloc_class`/`free_class`), inlined: it charges, keeps and reports as those do.
//!
//! Where the objects come from, inside a tenant scope: first the object stock's slots kept
//! charged to the tenant, taken without charging as the single allocation takes them (a
//! size class's tagged bin; a dedicated cache's kept bin in this thread's front of it,
//! `front.rs`); then this thread's bin (a size class's uncharged accounted bin or plain
//! bin; a dedicated cache's front bin, when it holds this cache's slots); then the cache's
//! slabs, [`CHUNK`] objects per lock round trip. `free_bulk` puts them back the same way: a
//! slot whose owner is the thread's tag stays charged in the object stock while it has room
//! (then it is neither uncharged nor its owner word cleared), the rest to the bin while it
//! has room, then to the slabs. The chunks bound how long one call holds a cache's
//! lock, whatever the count.

use core::alloc::Layout;
use core::ptr::{self, NonNull};
use core::sync::atomic::Ordering;

use slabcg_accounting::hooks::{self, ObjCgId, StatIdx};

use crate::bin::Bin;
use crate::cache::SlabCache;
use crate::dedicated::Cache;
use crate::global;
use crate::object_stock::ObjectStock;
use crate::owner::{class_owner_word, is_accounted, owner_word, OwnerGeom};
use crate::size_class::{class_for, class_size, Kind};
use crate::slab::FreeObj;
use crate::thread_cache::ThreadCache;
use crate::{charge, class_caches, init, sys, thread_cache};

/// The most bytes one charged run holds: small enough for the accounting's 32-bit stat
/// deltas and for any `usize`, large enough that a run is one charge for every real bulk.
pub(crate) const RUN_BYTES: usize = 1 << 30;

/// Objects moved per lock round trip of a cache.
pub(crate) const CHUNK: usize = 512;

/// Objects per charged run for objects of `each` bytes: the most whose bytes stay within
/// [`RUN_BYTES`], at least 1 (so `run_objects(each) * each <= max(RUN_BYTES, each)`).
pub(crate) fn run_objects(each: usize) -> usize {
    (RUN_BYTES / each.max(1)).max(1)
}

/// What a bulk charges or uncharges: objects of `each` bytes, to objcg `cg` (non-zero), at
/// stat index `idx`.
#[derive(Clone, Copy)]
struct Runs {
    cg: ObjCgId,
    each: usize,
    idx: StatIdx,
}

impl Runs {
    /// Charges `count` objects, one `hooks::charge` per run. False, with nothing left
    /// charged, when a run is refused.
    ///
    /// # Safety
    /// As `hooks::charge`: `cg` is the calling thread's current scope.
    unsafe fn charge(self, count: usize) -> bool {
        let run = run_objects(self.each);
        let mut done = 0;
        while done < count {
            let k = run.min(count - done);
            // SAFETY: caller's contract; k * each <= max(RUN_BYTES, each) (run_objects).
            if !unsafe { hooks::charge(self.cg, k * self.each, self.idx) } {
                // SAFETY: the runs of the first `done` objects were just charged to cg.
                unsafe { self.uncharge(done) };
                return false;
            }
            done += k;
        }
        true
    }

    /// Uncharges `count` objects, one `hooks::uncharge` per run.
    ///
    /// # Safety
    /// As `hooks::uncharge`: `count` objects' bytes charged to `cg` at `idx` are outstanding,
    /// and the caller gives them up.
    unsafe fn uncharge(self, count: usize) {
        let run = run_objects(self.each);
        let mut done = 0;
        while done < count {
            let k = run.min(count - done);
            // SAFETY: caller's contract; k * each as in `charge`.
            unsafe { hooks::uncharge(self.cg, k * self.each, self.idx) };
            done += k;
        }
    }
}

/// The owners of the objects a `free_bulk` frees, one stretch of equal owners at a time:
/// each stretch is uncharged in runs when the owner changes and at the end.
struct Owners {
    owner: ObjCgId,
    count: usize,
    each: usize,
    idx: StatIdx,
    /// Objects uncharged so far (owner 0 is nobody: not counted).
    uncharged: usize,
}

impl Owners {
    fn new(each: usize, idx: StatIdx) -> Owners {
        Owners {
            owner: 0,
            count: 0,
            each,
            idx,
            uncharged: 0,
        }
    }

    /// One more object, charged `each` bytes to `owner` (0: to nobody).
    ///
    /// # Safety
    /// The object's charge is outstanding and the caller gives it up (it cleared the owner
    /// word that recorded it).
    #[inline]
    unsafe fn add(&mut self, owner: ObjCgId) {
        if owner != self.owner {
            // SAFETY: the stretch's charges are outstanding (caller's contract for each).
            unsafe { self.end() };
            self.owner = owner;
        }
        self.count += 1;
    }

    /// Uncharges the current stretch.
    ///
    /// # Safety
    /// As [`add`](Self::add), for every object of the stretch.
    unsafe fn end(&mut self) {
        if self.owner != 0 && self.count > 0 {
            let runs = Runs {
                cg: self.owner,
                each: self.each,
                idx: self.idx,
            };
            // SAFETY: caller's contract.
            unsafe { runs.uncharge(self.count) };
            self.uncharged += self.count;
        }
        self.count = 0;
    }
}

/// Where freed slots go: the thread's bin while it takes them, then chains of up to
/// [`CHUNK`] slots flushed to the cache.
struct Sink<'a> {
    cache: &'static SlabCache,
    bin: Option<&'a Bin>,
    head: *mut FreeObj,
    count: usize,
}

impl<'a> Sink<'a> {
    fn new(cache: &'static SlabCache, bin: Option<&'a Bin>) -> Sink<'a> {
        Sink {
            cache,
            bin,
            head: ptr::null_mut(),
            count: 0,
        }
    }

    /// Gives back slot `p`.
    ///
    /// # Safety
    /// `p` is a slot of the cache (of the bin's class and kind) that nobody uses any more,
    /// its owner word (if any) cleared.
    #[inline]
    unsafe fn put(&mut self, p: *mut u8) {
        if let Some(bin) = self.bin {
            // SAFETY: caller's contract.
            if unsafe { bin.push(p) } {
                return;
            }
            if bin.is_head(p) {
                sys::fatal("double free in free_bulk (the slot is already the first free slot of this thread's bin)");
            }
            self.bin = None;
        }
        let o = p as *mut FreeObj;
        // SAFETY: the caller gives up p; its first word becomes the chain link.
        unsafe { FreeObj::set_next(o, self.head) };
        self.head = o;
        self.count += 1;
        if self.count == CHUNK {
            self.flush();
        }
    }

    /// Flushes the chain to the cache.
    fn flush(&mut self) {
        if self.count > 0 {
            // SAFETY: a well-formed chain of `count` slots given up by `put`'s callers; flush
            // validates each one.
            unsafe { self.cache.flush(self.head, self.count) };
            self.head = ptr::null_mut();
            self.count = 0;
        }
    }
}

impl Drop for Sink<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Slots a bulk free keeps charged in one of the object stock's bins (a class's tagged bin,
/// a front's kept bin): linked into a chain as they come and pushed at the end with one
/// store of the bin's head and count (`ObjectStock::push_chain`). The checks are a single
/// push's (`ObjectStock::push`): a slot is kept only when its owner is the tag and the bin
/// has room, and a slot that heads the bin or the chain is refused (freed twice in a row),
/// for the caller to report; the tag, read when the batch starts, is read again just before
/// the chain is pushed, and when a drainer came meanwhile the chain is not pushed but handed
/// back (`finish`) for the caller to free uncharging (a push long after a drain settled
/// this thread would keep charged objects where no armed drain looks).
struct Keep<'a> {
    stock: &'a ObjectStock,
    bin: Option<&'a Bin>,
    tag: u64,
    room: u32,
    /// The bin's head (no push reaches the bin before `finish`).
    first: *mut FreeObj,
    head: *mut FreeObj,
    tail: *mut FreeObj,
    n: u32,
}

impl<'a> Keep<'a> {
    /// Keeps into `bin` (None: keeps nothing) for `tc`'s stock, whose tag it reads now.
    fn new(tc: &'a ThreadCache, bin: Option<&'a Bin>) -> Keep<'a> {
        Keep {
            stock: &tc.stock,
            bin,
            tag: tc.stock.tag_word(),
            room: bin.map_or(0, |b| b.capacity().saturating_sub(b.count())),
            first: bin.map_or(ptr::null_mut(), |b| b.head()),
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            n: 0,
        }
    }

    /// Keeps slot `p`, whose owner word says `owner`, when that is the tag, there is room
    /// and it heads neither the bin nor the chain. False when it was not kept.
    ///
    /// # Safety
    /// `p` must be a live slot of the bin's class (or front core) charged to `owner`, given
    /// up.
    #[inline(always)]
    unsafe fn keep(&mut self, owner: ObjCgId, p: *mut u8) -> bool {
        let o = p as *mut FreeObj;
        // Without a bin `room` is 0.
        if self.tag != u64::from(owner) || self.n == self.room || o == self.head || o == self.first
        {
            return false;
        }
        let Some(bin) = self.bin else {
            return false;
        };
        // Hardened builds: a slot already in the chain is freed twice in this call (a
        // single push would find it on the bin's list).
        #[cfg(feature = "hardened")]
        self.check_not_chained(o);
        // SAFETY: the caller's slot, readable; then linked into the chain (its first word
        // becomes the link).
        unsafe {
            bin.check_free(p);
            FreeObj::set_next(o, self.head);
        }
        if self.head.is_null() {
            self.tail = o;
        }
        self.head = o;
        self.n += 1;
        true
    }

    /// [`keep`](Self::keep) over `ptrs` from the start, for as long as each is kept: the
    /// bulk free's common case (every slot charged to the tag) as a loop whose state lives in
    /// registers. `owner` sees every entry, null ones included: it reads a slot's owner word,
    /// or says None for an entry the bin cannot hold (null, another kind, not a slot start of
    /// the cache), which ends the run as a refused `keep` does (so the loop makes no null test
    /// of its own: the owner's checks refuse null anyway). Returns how many were kept; the
    /// caller takes the next one through its one-by-one path. Hardened builds keep one by one
    /// (`check_not_chained`).
    ///
    /// The checks are `keep`'s, repeated here so that the loop keeps its state in registers:
    /// a change to one is a change to both.
    ///
    /// `BY_TWO` takes the slots two a turn (the size classes' loop, whose state fits the
    /// registers twice over: 2 instructions fewer per slot); the dedicated caches' loop, with
    /// the slab run's geometry to hold, spills when unrolled and goes one by one.
    ///
    /// # Safety
    /// `owner` is called on the entries of `ptrs` in order, up to the first it refuses or the
    /// bin's room: it must answer None for null, each non-null entry must be a live slot of
    /// the bin's cache (or class), given up, and when `owner` answers, that answer must be the
    /// tenant the slot is charged to (what [`keep`](Self::keep) requires).
    #[inline(always)]
    unsafe fn keep_prefix<const BY_TWO: bool>(
        &mut self,
        ptrs: &[*mut u8],
        mut owner: impl FnMut(*mut u8) -> Option<ObjCgId>,
    ) -> usize {
        let Some(bin) = self.bin.filter(|_| !cfg!(feature = "hardened")) else {
            return 0;
        };
        let (tag, first) = (self.tag, self.first);
        // `keep`'s room check, made once: n < room holds for every slot kept.
        let end = ptrs.len().min((self.room - self.n) as usize);
        // `keep`'s checks: the tag, the bin's head, the chain's head (room: `end`); a null
        // entry ends the run in `owner`.
        let mut keeps = |p: *mut u8, head: *mut FreeObj| {
            let o = p as *mut FreeObj;
            matches!(owner(p), Some(w) if u64::from(w) == tag && o != head && o != first)
        };
        let link = |p: *mut u8, head: *mut FreeObj| {
            // SAFETY: the caller's slot, given up; its first word becomes the chain's link.
            unsafe {
                bin.check_free(p);
                FreeObj::set_next(p as *mut FreeObj, head);
            }
            p as *mut FreeObj
        };
        let (mut head, mut i) = (self.head, 0);
        'run: {
            if BY_TWO {
                // Two slots a turn: one count, one compare and one branch for the two.
                for pair in ptrs[..end].chunks_exact(2) {
                    if !keeps(pair[0], head) {
                        break 'run;
                    }
                    head = link(pair[0], head);
                    if !keeps(pair[1], head) {
                        i += 1;
                        break 'run;
                    }
                    head = link(pair[1], head);
                    i += 2;
                }
            }
            while i < end {
                let p = ptrs[i];
                if !keeps(p, head) {
                    break 'run;
                }
                head = link(p, head);
                i += 1;
            }
        }
        if i > 0 {
            if self.head.is_null() {
                self.tail = ptrs[0] as *mut FreeObj;
            }
            self.head = head;
            // i <= room - n, a u32.
            self.n += i as u32;
        }
        i
    }

    /// Whether [`keep_prefix`](Self::keep_prefix) may keep anything: a bin with room, in a
    /// build that keeps in runs (hardened builds keep one by one).
    fn may_keep(&self) -> bool {
        self.bin.is_some() && self.n < self.room && !cfg!(feature = "hardened")
    }

    /// Whether `p` heads the chain (a second free of it in this call).
    fn is_head(&self, p: *mut u8) -> bool {
        p as *mut FreeObj == self.head
    }

    /// Hardened builds: reports `o` when it is already in the chain.
    #[cfg(feature = "hardened")]
    #[cold]
    #[inline(never)]
    fn check_not_chained(&self, o: *mut FreeObj) {
        let mut f = self.head;
        for _ in 0..self.n {
            if f == o {
                sys::fatal(
                    "double free in free_bulk (the slot is already being kept by this call)",
                );
            }
            // SAFETY: the chain's n slots link to the next.
            f = unsafe { FreeObj::next(f) };
        }
    }

    /// Pushes the chain, or hands it back, its head and length, when the tag changed since
    /// the batch started (`ObjectStock::push_chain`): then the caller frees those slots,
    /// uncharging them ([`unkept`]). Either way the batch is over: `keep` and `keep_prefix`
    /// keep nothing more, and a second call returns None.
    fn finish(&mut self) -> Option<(*mut FreeObj, u32)> {
        let bin = self.bin.take().filter(|_| self.n > 0)?;
        // SAFETY: n slots linked head to tail, each kept once (`keep`) for the tag read at
        // the start, with room, none the bin's head.
        if unsafe {
            self.stock
                .push_chain(bin, self.tag, self.head, self.tail, self.n)
        } {
            return None;
        }
        Some((self.head, self.n))
    }

    /// After the keep loop took the first `k` of `n` pointers: when it took all of them,
    /// ends the batch ([`finish`](Self::finish)); None when nothing is left to do, else the
    /// chain the push handed back (None inside when the loop stopped early: the caller's
    /// slow part finishes then).
    fn end_run(&mut self, k: usize, n: usize) -> Option<Option<(*mut FreeObj, u32)>> {
        if k < n {
            return Some(None);
        }
        self.finish().map(Some)
    }
}

/// Calls `free` on each slot of a chain that [`Keep::finish`] handed back, reading each link
/// before the slot is freed.
fn unkept(chain: Option<(*mut FreeObj, u32)>, mut free: impl FnMut(*mut u8)) {
    let Some((mut o, n)) = chain else {
        return;
    };
    for _ in 0..n {
        let p = o as *mut u8;
        // SAFETY: the chain's n slots link to the next (`Keep::keep`).
        o = unsafe { FreeObj::next(o) };
        free(p);
    }
}

/// Ends a bulk free's kept batch (`Keep::finish`) and frees, uncharging, the slots that did
/// not stay kept: `handed`, a chain an earlier `finish` handed back, then what this one hands
/// back. Each slot's owner word is read and cleared through the checked path (a pointer that
/// is not a slot start of `cache` is reported first), its charge counted in `owners`, the
/// slot given to `sink`.
///
/// # Safety
/// Both chains hold live slots of the accounted cache `cache`, each charged to its owner
/// word's tenant, given up.
unsafe fn free_unkept(
    cache: &SlabCache,
    handed: Option<(*mut FreeObj, u32)>,
    keep: &mut Keep<'_>,
    owners: &mut Owners,
    sink: &mut Sink<'_>,
) {
    let mut free = |p| {
        let owner = cache.checked_owner_word(p).swap(0, Ordering::Relaxed);
        // SAFETY: caller's contract: a live slot of `cache` charged to `owner` (0: nobody),
        // whose word was cleared just now, given up.
        unsafe {
            owners.add(owner);
            sink.put(p);
        }
    };
    unkept(handed, &mut free);
    unkept(keep.finish(), &mut free);
}

/// Fills `out` with slots of `cache`, from `bin` (this thread's bin of it) first: true when
/// all were taken, false when memory ran out part way (then what was taken is back).
fn take(cache: &'static SlabCache, bin: Option<&Bin>, out: &mut [*mut u8]) -> bool {
    let n = out.len();
    let mut got = 0;
    if let Some(bin) = bin {
        while got < n {
            let p = bin.pop();
            if p.is_null() {
                break;
            }
            out[got] = p;
            got += 1;
        }
    }
    while got < n {
        let k = CHUNK.min(n - got);
        let chain = cache.refill(k, k);
        let mut o = chain.head;
        for slot in &mut out[got..got + chain.count] {
            *slot = o.cast();
            // SAFETY: the chain links chain.count slots through their first word; each
            // leaves it here.
            unsafe {
                let next = FreeObj::next(o);
                FreeObj::clear_link(o);
                o = next;
            }
        }
        got += chain.count;
        if chain.count < k {
            let mut sink = Sink::new(cache, None);
            for p in &mut out[..got] {
                // SAFETY: p was just taken from the cache (or its bin) and never handed out;
                // no owner word was written yet.
                unsafe { sink.put(*p) };
                *p = ptr::null_mut();
            }
            return false;
        }
    }
    true
}

impl Cache {
    /// Where tenant stats count this cache's objects (the core records the index it was
    /// given when built).
    fn stat_idx(&self) -> StatIdx {
        StatIdx(self.core.stat.load(Ordering::Relaxed))
    }

    /// Fills every entry of `out` with a fresh object and returns `out.len()`, or returns 0
    /// and allocates (and charges) nothing, like `kmem_cache_alloc_bulk` (then `out` is as
    /// it was, except that entries written before memory ran out are null). In an accounted
    /// cache inside a tenant scope the objects are charged with one stock operation per run
    /// of up to 1 GiB (so once for any real bulk), whatever the count; the objects come
    /// from this thread's front of the cache first, then from its slabs, 512 per lock round
    /// trip.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use slabcg_allocator::Cache;
    ///
    /// let cache = Cache::builder("requests", Layout::new::<[u64; 24]>()).account(true).build();
    /// let mut objs = [std::ptr::null_mut(); 32];
    /// assert_eq!(cache.alloc_bulk(&mut objs), 32);
    /// // SAFETY: every pointer came from this cache's alloc_bulk, each freed once.
    /// unsafe { cache.free_bulk(&objs) };
    /// ```
    #[inline]
    pub fn alloc_bulk(&self, out: &mut [*mut u8]) -> usize {
        if let [slot] = out {
            // A bulk of one is a single allocation, inlined as `alloc` is: the bulk's setup
            // (the runs, the kept pass, the owner words' pass) costs more than the one object.
            return self.alloc().map_or(0, |p| {
                *slot = p.as_ptr();
                1
            });
        }
        self.alloc_bulk_many(out)
    }

    /// [`alloc_bulk`](Self::alloc_bulk) of any count but one.
    fn alloc_bulk_many(&self, out: &mut [*mut u8]) -> usize {
        let n = out.len();
        if n == 0 {
            return 0;
        }
        let accounted = self.core.id.accounted;
        let cg = if accounted { hooks::current_objcg() } else { 0 };
        // Slots this thread's front keeps charged to cg first (`front.rs`), as the size
        // classes' bulk takes the object stock's.
        let kept = if cg != 0 { self.take_kept(cg, out) } else { 0 };
        if kept == n {
            return n;
        }
        let runs = Runs {
            cg,
            each: self.core.layout.object_size,
            idx: self.stat_idx(),
        };
        let fresh = n - kept;
        // SAFETY: cg is this thread's current scope, just read.
        if cg != 0 && !unsafe { runs.charge(fresh) } {
            // SAFETY: out[..kept] were just taken charged to cg from the kept bin.
            unsafe { self.give_back_kept(&mut out[..kept]) };
            return 0;
        }
        let took = thread_cache::with(|tc| take(self.core, self.front_bin(tc), &mut out[kept..]));
        if !took {
            if cg != 0 {
                // SAFETY: the runs charged just above, given back unused; out[..kept] as above.
                unsafe {
                    runs.uncharge(fresh);
                    self.give_back_kept(&mut out[..kept]);
                }
            }
            return 0;
        }
        if accounted {
            for &p in out[kept..].iter() {
                // SAFETY: p is a slot of this accounted cache, just taken.
                unsafe { (*owner_word(p)).store(cg, Ordering::Relaxed) };
            }
            if cg != 0 {
                self.core
                    .counters
                    .charged
                    .fetch_add(fresh, Ordering::Relaxed);
                // As after a single allocation that charged: the thread may retag for cg, so
                // that what it frees later is kept (one miss counted per bulk).
                thread_cache::with(|tc| tc.note_charged(cg));
            }
        }
        n
    }

    /// Takes up to `out.len()` slots this thread's front of the cache keeps charged to `cg`
    /// into the front of `out` (the single allocation's kept pop, one check after all the
    /// pops: `ObjectStock::pop_many`) and returns how many. Kept slots stay in the front's
    /// net charged count while they wait, so taking them changes no count.
    fn take_kept(&self, cg: ObjCgId, out: &mut [*mut u8]) -> usize {
        thread_cache::with(|tc| {
            if !thread_cache::is_live(tc) {
                return 0;
            }
            tc.front_kept_pop_many(self.at, self.core, cg, out)
        })
    }

    /// Gives back slots that [`take_kept`](Self::take_kept) took, when the bulk fails: each
    /// is freed as a single free would (kept again, or uncharged), its entry reset to null.
    ///
    /// # Safety
    /// Every entry is a slot of this cache charged to its owner word's tenant, taken by
    /// `take_kept` and not handed out.
    unsafe fn give_back_kept(&self, kept: &mut [*mut u8]) {
        for p in kept {
            // SAFETY: caller's contract; a taken slot is not null.
            unsafe { self.free(NonNull::new_unchecked(*p)) };
            *p = ptr::null_mut();
        }
    }

    /// Frees every object in `ptrs` (null entries are skipped), 512 per lock round trip; in
    /// an accounted cache, each stretch of objects with the same owner is uncharged with one
    /// stock operation per run.
    ///
    /// # Safety
    /// Every pointer must come from this cache, be live, and appear once.
    #[inline]
    pub unsafe fn free_bulk(&self, ptrs: &[*mut u8]) {
        if let [p] = *ptrs {
            // One object: a single free, inlined as `free` is; it keeps or uncharges the
            // object and reclaims as the bulk would.
            if let Some(p) = NonNull::new(p) {
                // SAFETY: caller's contract.
                unsafe { self.free(p) };
            }
            return;
        }
        // SAFETY: caller's contract.
        unsafe { self.free_bulk_many(ptrs) }
    }

    /// [`free_bulk`](Self::free_bulk) of any count but one.
    ///
    /// # Safety
    /// As [`free_bulk`](Self::free_bulk).
    unsafe fn free_bulk_many(&self, ptrs: &[*mut u8]) {
        thread_cache::with(|tc| {
            let front = tc.front_at(self.at);
            let kept =
                self.core.id.accounted && thread_cache::is_live(tc) && front.is_of(self.core);
            let mut keep = Keep::new(tc, kept.then_some(&front.kept));
            // The common case first, with nothing else set up: every slot kept in the
            // front's kept bin.
            // SAFETY: caller's contract.
            let k = unsafe { self.keep_run(&mut keep, ptrs) };
            let Some(handed) = keep.end_run(k, ptrs.len()) else {
                return;
            };
            // SAFETY: caller's contract; ptrs[..k] are kept, `handed` came back from the
            // kept bin's push.
            unsafe { self.free_bulk_through(tc, keep, &ptrs[k..], handed) }
        });
        // A drainer may be why slots were not kept: give back what it left in the bins, as a
        // single free that uncharges does.
        reclaim_if_drained();
    }

    /// [`Keep::keep_prefix`] over `ptrs` for this cache, the segment's checks made once per
    /// slab ([`SlabRun`](crate::cache::SlabRun)); how many were kept.
    ///
    /// # Safety
    /// As [`free_bulk`](Self::free_bulk), for `ptrs`.
    #[inline(always)]
    unsafe fn keep_run(&self, keep: &mut Keep<'_>, ptrs: &[*mut u8]) -> usize {
        // Nothing to keep into: no header is read (a pointer that is not slabcg's is then
        // reported by the one-by-one path's check, not met by a fault here).
        if !keep.may_keep() {
            return 0;
        }
        // SAFETY: caller's contract: each non-null entry is a live slot of this cache,
        // given up; a pointer `SlabRun` (`owner_word_if_slot`'s checks, the segment's made
        // once per slab) does not see as a slot start of this cache ends the run and is
        // reported by the caller's one-by-one path, as a null one ends it (whose "header" at
        // address 0 is not read).
        unsafe {
            match ptrs.first().and_then(|&p| self.core.slab_run(p)) {
                Some(mut run) => keep.keep_prefix::<false>(ptrs, |p| {
                    let w = run.owner_word(p)?;
                    Some((*w).load(Ordering::Relaxed))
                }),
                None => 0,
            }
        }
    }

    /// This thread's front bin of the cache when it holds this cache's slots (module docs of
    /// `front.rs`: a closed bin has no room, so it takes and gives nothing); none on a
    /// thread that is exiting or for a cache without a front.
    fn front_bin<'t>(&self, tc: &'t ThreadCache) -> Option<&'t Bin> {
        let f = tc.front_at(self.at);
        (thread_cache::is_live(tc) && f.is_of(self.core)).then_some(&f.bin)
    }

    /// The rest of a [`free_bulk`](Self::free_bulk) on `tc`'s thread, from the first slot
    /// [`keep_run`](Self::keep_run) did not keep, and `handed`, the slots `keep` kept and
    /// `Keep::finish` handed back: an accounted slot whose owner is the object stock's tag
    /// stays charged in the front's kept bin (as a single free keeps it); the others go into
    /// the front bin while it has room, then to the slabs. Out of line: the common bulk
    /// (every slot kept) sets none of this up.
    ///
    /// # Safety
    /// As `free_bulk`, for `ptrs` and the chain `handed`; `keep` keeps into the front's kept
    /// bin of this cache, or nowhere.
    #[inline(never)]
    unsafe fn free_bulk_through(
        &self,
        tc: &ThreadCache,
        mut keep: Keep<'_>,
        ptrs: &[*mut u8],
        handed: Option<(*mut FreeObj, u32)>,
    ) {
        let live = thread_cache::is_live(tc);
        let mut sink = Sink::new(self.core, self.front_bin(tc));
        if !self.core.id.accounted {
            for &p in ptrs.iter().filter(|p| !p.is_null()) {
                // SAFETY: caller's contract; flush validates that p is a slot of this cache.
                unsafe { sink.put(p) };
            }
            return;
        }
        let mut owners = Owners::new(self.core.layout.object_size, self.stat_idx());
        let mut rest = ptrs;
        while let Some((&p, tail)) = rest.split_first() {
            rest = tail;
            'one: {
                if p.is_null() {
                    break 'one;
                }
                // Kept, as the single free keeps it, once p is seen to be a slot start in a
                // segment of this cache (`owner_word_if_slot`). Only hardened builds try
                // here: elsewhere `keep_run` just refused p on the same checks.
                // SAFETY: caller's contract: p is a live slot of this cache; its word lives
                // as long as the cache's segments; if kept, it is charged to `owner`, given
                // up.
                if cfg!(feature = "hardened")
                    && unsafe {
                        self.core
                            .owner_word_if_slot(p)
                            .is_some_and(|w| keep.keep((*w).load(Ordering::Relaxed), p))
                    }
                {
                    break 'one;
                }
                if keep.is_head(p) || (live && tc.front_kept_is_head(self.at, p)) {
                    sys::fatal(
                        "double free of a dedicated cache's object in free_bulk (already kept)",
                    );
                }
                // The owner address comes from p: a pointer that is not a slot start of this
                // cache is reported before anything is written.
                let owner = self.core.checked_owner_word(p).swap(0, Ordering::Relaxed);
                // SAFETY: the object was charged object_size to the owner its word recorded
                // (0: nobody), cleared just now; the caller gives it up.
                unsafe {
                    owners.add(owner);
                    sink.put(p);
                }
            }
            // Back to the common case after the one slot.
            // SAFETY: caller's contract.
            let k = unsafe { self.keep_run(&mut keep, rest) };
            rest = &rest[k..];
        }
        // SAFETY: caller's contract: `handed` and the batch's chain hold live slots of this
        // accounted cache, given up.
        unsafe {
            free_unkept(self.core, handed, &mut keep, &mut owners, &mut sink);
            // As above, for the last stretch.
            owners.end();
        }
        if owners.uncharged > 0 {
            self.core
                .counters
                .charged
                .fetch_sub(owners.uncharged, Ordering::Relaxed);
        }
    }
}

/// Fills every entry of `out` with a fresh block of `layout` from its size class and returns
/// `out.len()`, or returns 0 and allocates (and charges) nothing (`out` as it was, except
/// that entries written before memory ran out are null): the size classes' bulk allocation,
/// what `kmem_cache_alloc_bulk` is for a dedicated cache ([`Cache::alloc_bulk`]).
///
/// Inside a tenant scope the blocks are charged to the tenant (their class size each, as
/// `GlobalAlloc::alloc` does) with one stock operation per run of up to 1 GiB, whatever the
/// count; a refused charge or memory running out part way leaves nothing charged or
/// allocated. The blocks come from this thread's bin of the class first, then from the
/// class's slabs, 512 per lock round trip.
///
/// Layouts that no size class serves (above 128 KiB, or aligned above 4 KiB) get 0:
/// allocate them one by one. Free the blocks with [`free_bulk`] with the same layout, or one
/// by one with [`SlabAlloc`](crate::SlabAlloc)'s `dealloc` (`std::alloc::dealloc` when
/// slabcg is the global allocator); either works whatever the global allocator is.
///
/// ```
/// use std::alloc::Layout;
///
/// let l = Layout::new::<[u8; 200]>();
/// let mut blocks = [std::ptr::null_mut(); 32];
/// assert_eq!(slabcg_allocator::alloc_bulk(l, &mut blocks), 32);
/// // SAFETY: every block came from alloc_bulk with layout l, each freed once.
/// unsafe { slabcg_allocator::free_bulk(l, &blocks) };
/// ```
#[inline]
pub fn alloc_bulk(layout: Layout, out: &mut [*mut u8]) -> usize {
    if let [slot] = out {
        // A bulk of one is a single allocation of the class, inlined as `GlobalAlloc::alloc`
        // is: the bulk's setup (the runs, the object-stock pass, the owner words' pass) costs
        // more than the one block.
        let (size, align) = (layout.size(), layout.align());
        let Some(c) = global::fast_class(size, align).or_else(|| class_for(size, align)) else {
            return 0;
        };
        // The class sizes must be registered with the accounting before anything is charged
        // (done by a thread's first slow path, which this may come before).
        init::init_once();
        let p = global::alloc_class(c);
        if p.is_null() {
            return 0;
        }
        *slot = p;
        return 1;
    }
    alloc_bulk_many(layout, out)
}

/// [`alloc_bulk`] of any count but one.
fn alloc_bulk_many(layout: Layout, out: &mut [*mut u8]) -> usize {
    let n = out.len();
    let (size, align) = (layout.size(), layout.align());
    let Some(c) = global::fast_class(size, align).or_else(|| class_for(size, align)) else {
        return 0;
    };
    if n == 0 {
        return 0;
    }
    // As in `alloc_bulk`: the classes are registered before anything is charged.
    init::init_once();
    let cg = hooks::current_objcg();
    let kind = if cg != 0 {
        Kind::Accounted
    } else {
        Kind::Plain
    };
    // Inside a tenant, the object stock first: slots kept charged to `cg` (their owner word
    // says `cg` once `tagged_pop_many` claimed those a transfer left), as the single
    // allocation takes them; only the rest is charged.
    let kept = if cg != 0 { take_kept(c, cg, out) } else { 0 };
    if kept == n {
        return n;
    }
    let runs = Runs {
        cg,
        each: class_size(c),
        idx: StatIdx::slab(c),
    };
    let fresh = n - kept;
    // SAFETY: cg is this thread's current scope, just read.
    if cg != 0 && !unsafe { runs.charge(fresh) } {
        // SAFETY: out[..kept] were just taken charged to cg from the object stock.
        unsafe { give_back_kept(c, &mut out[..kept]) };
        return 0;
    }
    let cache = class_caches::cache(c, kind);
    let took = thread_cache::with(|tc| {
        let out = &mut out[kept..];
        let bin = thread_cache::is_live(tc).then(|| {
            let bin = tc.bin(c, kind);
            // A thread that allocates from the class keeps a bin of it, so that its bulk
            // frees come back through the bin; at its full capacity at once (a first refill
            // opens it at 16 KiB and doubles), as a bulk caller allocates in runs.
            if bin.capacity() == 0 {
                bin.set_capacity(thread_cache::bin_max(c));
            }
            bin
        });
        if !take(cache, bin, out) {
            return false;
        }
        if cg != 0 {
            for &p in out.iter() {
                // SAFETY: p is a slot of the accounted cache of class c, just taken.
                unsafe { (*tc.owner_word(p, c)).store(cg, Ordering::Relaxed) };
            }
        }
        true
    });
    if !took {
        if cg != 0 {
            // SAFETY: the runs charged just above, given back unused; out[..kept] as above.
            unsafe {
                runs.uncharge(fresh);
                give_back_kept(c, &mut out[..kept]);
            }
        }
        return 0;
    }
    if cg != 0 {
        // Charged objects came from the counters or the byte stock: as after a single
        // allocation that missed the object stock, the thread may retag for `cg`, so that
        // what this bulk frees later is kept (one miss counted per bulk).
        thread_cache::with(|tc| tc.note_charged(cg));
    }
    n
}

/// Takes up to `out.len()` slots of class `c` kept charged to `cg` in this thread's object
/// stock into the front of `out` (the single allocation's `tagged_pop`, one check after all
/// the pops: `ObjectStock::pop_many`) and returns how many.
fn take_kept(c: usize, cg: ObjCgId, out: &mut [*mut u8]) -> usize {
    thread_cache::with(|tc| {
        if !thread_cache::is_live(tc) {
            return 0;
        }
        tc.tagged_pop_many(c, cg, out)
    })
}

/// Gives back slots that [`take_kept`] took, when the bulk fails: each is freed as a single
/// free would (kept again, or uncharged), and its entry reset to null.
///
/// # Safety
/// Every entry is a slot of class `c`'s accounted cache charged to its owner word's tenant,
/// taken by `take_kept` and not handed out.
unsafe fn give_back_kept(c: usize, kept: &mut [*mut u8]) {
    for p in kept {
        // SAFETY: caller's contract.
        unsafe { charge::free_small(*p, c) };
        *p = ptr::null_mut();
    }
}

/// Frees every block in `ptrs` (null entries are skipped), all allocated with `layout`: the
/// size classes' bulk free. Each block's owner is read from its owner word and each stretch
/// of blocks with the same owner is uncharged with one stock operation per run, whichever
/// thread allocated them and whatever scope the caller is in; the blocks go to this
/// thread's bin of the class while it has room, the rest to the class's slabs, 512 per lock
/// round trip.
///
/// For a layout that no size class serves, the blocks are freed one by one.
///
/// # Safety
/// Every pointer must be a live block allocated by slabcg with `layout` (by [`alloc_bulk`],
/// or by [`SlabAlloc`](crate::SlabAlloc)), and appear once.
#[inline]
pub unsafe fn free_bulk(layout: Layout, ptrs: &[*mut u8]) {
    if let [p] = *ptrs {
        // One block: a single free of its class, inlined as `GlobalAlloc::dealloc` is; it
        // keeps or uncharges the block and reclaims as the bulk would.
        let (size, align) = (layout.size(), layout.align());
        let class = global::fast_class(size, align).or_else(|| class_for(size, align));
        if let Some(c) = class.filter(|_| !p.is_null()) {
            // SAFETY: caller's contract: a live block of class c.
            return unsafe { global::free_class(p, c) };
        }
    }
    // SAFETY: caller's contract.
    unsafe { free_bulk_many(layout, ptrs) }
}

/// [`free_bulk`] of any count but one (and of one null or large block).
///
/// # Safety
/// As [`free_bulk`].
unsafe fn free_bulk_many(layout: Layout, ptrs: &[*mut u8]) {
    let (size, align) = (layout.size(), layout.align());
    let Some(c) = global::fast_class(size, align).or_else(|| class_for(size, align)) else {
        for &p in ptrs.iter().filter(|p| !p.is_null()) {
            // SAFETY: caller's contract: a layout without a class was allocated by the
            // large path, and p is live.
            unsafe { charge::free_large(p) };
        }
        return;
    };
    thread_cache::with(|tc| {
        let line = tc.line(c);
        let mut keep = Keep::new(tc, thread_cache::is_live(tc).then_some(&line.tagged));
        // The common case first, with nothing else set up: every block an accounted slot
        // kept in the tagged bin.
        // SAFETY: caller's contract.
        let k = unsafe { keep_class_run(&mut keep, ptrs, c, &line.owner) };
        let Some(handed) = keep.end_run(k, ptrs.len()) else {
            return;
        };
        // SAFETY: caller's contract; ptrs[..k] are kept, `handed` came back from the tagged
        // bin's push.
        unsafe { free_class_rest(tc, c, keep, &ptrs[k..], handed) }
    });
    // As after a dedicated cache's bulk free.
    reclaim_if_drained();
}

/// [`Keep::keep_prefix`] over `ptrs` for size class `c`, whose owner geometry is `geom`; how
/// many were kept.
///
/// # Safety
/// As [`free_bulk`] for class `c`, for `ptrs`.
#[inline(always)]
unsafe fn keep_class_run(
    keep: &mut Keep<'_>,
    ptrs: &[*mut u8],
    c: usize,
    geom: &OwnerGeom,
) -> usize {
    // SAFETY: caller's contract: each non-null entry is a live block of class c, given up;
    // an accounted one is a slot of its accounted cache (a plain one ends the run, as a null
    // one does: null has the accounted bit clear), whose word says who it is charged to.
    unsafe {
        keep.keep_prefix::<true>(ptrs, |p| {
            is_accounted(p).then(|| (*class_owner_word(p, c, geom)).load(Ordering::Relaxed))
        })
    }
}

/// The rest of a [`free_bulk`] of class `c` on `tc`'s thread, from the first block
/// [`keep_class_run`] did not keep, and `handed`, the slots `keep` kept and `Keep::finish`
/// handed back: a block whose owner is the thread's tag stays charged in the tagged bin, the
/// others go to the thread's bins while they have room, then to the class's slabs. Out of
/// line: the common bulk (every block kept) sets none of this up.
///
/// # Safety
/// As [`free_bulk`] for class `c`, for `ptrs` and the chain `handed`; `keep` keeps into the
/// tagged bin of class `c`, or nowhere.
#[inline(never)]
unsafe fn free_class_rest(
    tc: &ThreadCache,
    c: usize,
    mut keep: Keep<'_>,
    ptrs: &[*mut u8],
    handed: Option<(*mut FreeObj, u32)>,
) {
    let live = thread_cache::is_live(tc);
    let accounted = class_caches::cache(c, Kind::Accounted);
    let mut plain = Sink::new(
        class_caches::cache(c, Kind::Plain),
        live.then(|| tc.bin(c, Kind::Plain)),
    );
    let mut acct = Sink::new(accounted, live.then(|| tc.bin(c, Kind::Accounted)));
    let mut owners = Owners::new(class_size(c), StatIdx::slab(c));
    let geom = tc.line(c).owner;
    let mut rest = ptrs;
    while let Some((&p, tail)) = rest.split_first() {
        rest = tail;
        'one: {
            if p.is_null() {
                break 'one;
            }
            if !is_accounted(p) {
                // SAFETY: caller's contract; the flush validates that p is a slot of the
                // plain cache of class c.
                unsafe { plain.put(p) };
                break 'one;
            }
            // A slot whose owner is the thread's tag stays charged in the object stock, as a
            // single free keeps it (the owner word stays, and nothing is written through an
            // address computed from p: the slot is validated when it leaves the tagged bin
            // for its slab, as the single free's is).
            // Only hardened builds try here: elsewhere `keep_class_run` just refused p on the
            // same checks.
            // SAFETY: caller's contract: p is a live accounted slot of class c, whose owner
            // word says who it is charged to; it is given up.
            if cfg!(feature = "hardened")
                && live
                && unsafe { keep.keep((*class_owner_word(p, c, &geom)).load(Ordering::Relaxed), p) }
            {
                break 'one;
            }
            // Checked before anything is written through the owner address computed from p.
            let w = accounted.checked_owner_word(p);
            if keep.is_head(p) || (live && tc.tagged_is_head(c, p)) {
                sys::fatal("double free of an accounted object in free_bulk (already kept)");
            }
            let owner = w.load(Ordering::Relaxed);
            if owner == 0 {
                sys::fatal(
                    "double free of an accounted object in free_bulk (owner already cleared)",
                );
            }
            w.store(0, Ordering::Relaxed);
            // SAFETY: a live accounted slot is charged class_size(c) to its recorded owner,
            // cleared just now; the caller gives it up.
            unsafe {
                owners.add(owner);
                acct.put(p);
            }
        }
        // Back to the common case after the one block.
        // SAFETY: caller's contract.
        let k = unsafe { keep_class_run(&mut keep, rest, c, &geom) };
        rest = &rest[k..];
    }
    // SAFETY: caller's contract: `handed` and the batch's chain hold live slots of class c's
    // accounted cache, given up.
    unsafe {
        free_unkept(accounted, handed, &mut keep, &mut owners, &mut acct);
        // As above, for the last stretch.
        owners.end();
    }
}

/// After a bulk free (its sinks flushed): takes the object stock back when a drainer has been
/// at it (`ObjectStock::reclaim`), as a single free that uncharges does.
fn reclaim_if_drained() {
    thread_cache::with(|tc| {
        if tc.must_reclaim() {
            tc.reclaim();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's bytes never overflow, whatever the object size, and runs cover any count.
    #[test]
    fn runs_cover_any_count_without_overflow() {
        for each in [
            1usize,
            8,
            48,
            4096,
            128 << 10,
            1 << 20,
            RUN_BYTES,
            usize::MAX,
        ] {
            let run = run_objects(each);
            assert!(run >= 1);
            let bytes = run.checked_mul(each).expect("a run's bytes overflow");
            assert!(bytes <= RUN_BYTES.max(each), "{each}: {bytes}");
            // The last run of the largest count is a whole number of objects.
            let last = usize::MAX % run;
            assert!(last
                .checked_mul(each)
                .is_some_and(|b| b <= RUN_BYTES.max(each)));
        }
        assert_eq!(run_objects(128 << 10), 8192);
    }
}
