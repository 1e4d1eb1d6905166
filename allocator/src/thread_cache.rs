//! Per-thread caches of free slots, one bin per size class (plain and accounted).
//!
//! The same-thread fast paths are a pop from and a push onto a singly linked bin: no lock, no
//! atomic read-modify-write. A bin that runs dry is refilled with half its capacity from the
//! class's [`SlabCache`]; a bin that overflows gives half back. A free on another thread
//! simply lands in that thread's bin (Rust's `dealloc` names the layout, so the class is known
//! without a lookup): the memory is reused by the freeing thread at once, and returns to its
//! slab through the shared cache when that bin overflows or the thread exits — so memory freed
//! by other threads is reused whether or not the allocating thread is still alive.
//!
//! Invariant per bin: `count == |list from head|` and `count <= max`.
//! Fields touched by other threads: only `count` (read by `stats()`, hence an atomic with
//! plain loads and stores) and the registry links (under the registry lock).
//!
//! Lifecycle (`state`): UNINIT (all `max == 0`, so the first alloc or free takes the slow path
//! and initialises) → LIVE → DEAD at thread exit (bins flushed, `max == 0` again; later
//! allocations of this thread, e.g. from other pthread key destructors, go straight to the
//! shared caches).

use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

use crate::cache::SlabCache;
use crate::classes;
use crate::lock::{SpinGuard, SpinLock};
use crate::segment::ACCOUNTED_BIT;
use crate::slab::FreeObj;
use crate::size_class::{class_size, NUM_CLASSES};
use crate::sys;

const UNINIT: u8 = 0;
const LIVE: u8 = 1;
const DEAD: u8 = 2;

/// Frees per class a thread sends straight home before it has allocated from the class.
const HOME_FREES: u8 = 64;

/// Bytes a bin may hold before it gives half back.
const BIN_BYTES: usize = 128 * 1024;

/// Capacity of the bin of class `c`.
pub fn bin_max(c: usize) -> u32 {
    (BIN_BYTES / class_size(c)).clamp(2, 256) as u32
}

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
    const fn new() -> Bin {
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

    /// Pops a slot, or returns null when the bin is empty.
    #[inline(always)]
    pub fn pop(&self) -> *mut u8 {
        let p = self.head.load(Ordering::Relaxed);
        if p.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: p heads this bin's list, so it is a free slot whose first word is the link
        // (invariant: count == |list|).
        self.head.store(unsafe { (*p).next }, Ordering::Relaxed);
        self.count
            .store(self.count.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        p.cast()
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
        // SAFETY: the caller hands us the slot; its first word becomes the link.
        unsafe { (*o).next = head };
        self.head.store(o, Ordering::Relaxed);
        self.count.store(n + 1, Ordering::Relaxed);
        true
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
        unsafe { (*o).next = self.head.load(Ordering::Relaxed) };
        self.head.store(o, Ordering::Relaxed);
        self.count
            .store(self.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Detaches the first `k` slots (k <= count) as a chain.
    fn take(&self, k: u32) -> *mut FreeObj {
        let head = self.head.load(Ordering::Relaxed);
        let mut last = head;
        let mut i = 1;
        while i < k {
            // SAFETY: the list holds count >= k slots, each linking to the next.
            last = unsafe { (*last).next };
            i += 1;
        }
        // SAFETY: last is the k-th slot (k >= 1).
        unsafe {
            self.head.store((*last).next, Ordering::Relaxed);
            (*last).next = ptr::null_mut();
        }
        self.count
            .store(self.count.load(Ordering::Relaxed) - k, Ordering::Relaxed);
        head
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
            o = unsafe { (*o).next };
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
}

/// The plain bin and the object-stock bin of one class, side by side, and what an
/// accounted free of the class needs to find its owner word: the fast paths address all of
/// it from one `class * 64` offset in one cache line, so the tagged bin costs no extra
/// address add and the owner lookup reads no segment header.
#[repr(C, align(64))]
pub struct ClassBins {
    pub plain: Bin,
    pub(crate) tagged: Bin,
    /// Immutable copy of the accounted twin's geometry (`classes::class_layout`).
    pub(crate) owner: OwnerGeom,
}

// The fast paths count on one line per class (the `class * 64` offset).
const _: () = assert!(core::mem::size_of::<ClassBins>() == 64);

/// Where the owner words of an accounted size class's slots are: the owner word of slot `p`
/// is the u32 at `(p & !slab_mask) + meta_offset + 4 * ((p & slab_mask) * recip >> 40)`
/// (slabs are aligned to their size; size classes have no padding, so their owner words
/// always form a 4-byte array).
pub(crate) struct OwnerGeom {
    pub(crate) slab_mask: usize,
    pub(crate) recip: u64,
    pub(crate) meta_offset: usize,
}

impl OwnerGeom {
    /// The owner word of slot `p`.
    ///
    /// # Safety
    /// `p` must be a slot of the accounted cache these are the geometry of.
    #[inline(always)]
    pub(crate) unsafe fn word(&self, p: *mut u8) -> *const core::sync::atomic::AtomicU32 {
        let in_slab = p as usize & self.slab_mask;
        let idx = ((in_slab as u64 * self.recip) >> 40) as usize;
        // SAFETY: p is a slot of an accounted segment of this class, whose slabs are aligned
        // to their size; for a slot start the owner word lies inside p's slab
        // (slab.rs: `metadata_fits_where_promised`).
        unsafe {
            (p.sub(in_slab).add(self.meta_offset) as *const core::sync::atomic::AtomicU32).add(idx)
        }
    }
}

impl ClassBins {
    const fn new(c: usize) -> ClassBins {
        let l = classes::class_layout(c, true);
        ClassBins {
            plain: Bin::new(),
            tagged: Bin::new(),
            owner: OwnerGeom {
                slab_mask: l.slab_bytes() - 1,
                recip: l.recip,
                meta_offset: l.meta_offset,
            },
        }
    }
}

const fn new_bins() -> [ClassBins; NUM_CLASSES] {
    let mut bins = [const { ClassBins::new(0) }; NUM_CLASSES];
    let mut c = 1;
    while c < NUM_CLASSES {
        bins[c] = ClassBins::new(c);
        c += 1;
    }
    bins
}

pub struct ThreadCache {
    /// Per class: free slots of the plain cache, and the object stock (free slots of the
    /// accounted cache still charged to `tag`, see `object_stock.rs`).
    pub bins: [ClassBins; NUM_CLASSES],
    /// Free slots of the accounted caches, uncharged (their owner word is rewritten on reuse).
    pub accounted: [Bin; NUM_CLASSES],
    /// The tenant the tagged bins hold objects of (low 32 bits) and the drainer's state bits
    /// (`object_stock::STEAL`, `object_stock::DRAINED`), in one word so the fast path tests
    /// "same tenant, no drainer" with one compare. Written only under `stock`.
    pub(crate) tag: AtomicU64,
    /// Serialises every change of `tag` and of the tagged bins other than the owner's fast
    /// paths (see `object_stock.rs`), and holds what a drainer uncharged.
    pub(crate) stock: SpinLock<crate::object_stock::Drained>,
    /// `segment::ACCOUNTED_BIT` once frees on this thread may meet accounted objects, 0
    /// until the first tenant scope of the process is entered ([`activate`]). The free path
    /// tests `p & acct_mask`: one test against TLS decides both "accounting in use" and
    /// "this slot is accounted", and no global is read through the GOT.
    pub(crate) acct_mask: AtomicUsize,
    pub(crate) tag_misses: Cell<u32>,
    /// The tenant of the latest allocation that missed the tagged bins (`note_miss`), so
    /// that the first miss under each new tenant can look at whether the tag's tenant died.
    pub(crate) miss_cg: Cell<u32>,
    /// Frees sent home per class while this thread had not yet allocated from the class
    /// (see `free_slow`).
    home_frees: [Cell<u8>; NUM_CLASSES],
    state: Cell<u8>,
    next: AtomicPtr<ThreadCache>,
    prev: AtomicPtr<ThreadCache>,
    /// The list of thread caches whose object stock may hold charged objects, and where this
    /// one is on it (`object_stock::Armed`): under that list's lock.
    pub(crate) armed: AtomicU8,
    /// Whether the idle decay saw this cache on the armed list at its previous pass with no
    /// retag since (`object_stock::drain_all`, `ObjectDrain::Idle`).
    pub(crate) aged: AtomicBool,
    /// Whether the tagged bins may hold objects (their capacity is `tagged_max`, else 0):
    /// false while the thread's tag is a tenant whose stock budget it has no share of
    /// (`object_stock::note_retag`). Written by the owner under `stock`.
    pub(crate) caching: AtomicBool,
    pub(crate) anext: AtomicPtr<ThreadCache>,
    pub(crate) aprev: AtomicPtr<ThreadCache>,
}

impl ThreadCache {
    const fn new() -> ThreadCache {
        ThreadCache {
            bins: new_bins(),
            accounted: [const { Bin::new() }; NUM_CLASSES],
            tag: AtomicU64::new(crate::object_stock::NO_TAG),
            stock: SpinLock::new(crate::object_stock::Drained::NONE),
            acct_mask: AtomicUsize::new(0),
            tag_misses: Cell::new(0),
            miss_cg: Cell::new(0),
            home_frees: [const { Cell::new(0) }; NUM_CLASSES],
            state: Cell::new(UNINIT),
            next: AtomicPtr::new(ptr::null_mut()),
            prev: AtomicPtr::new(ptr::null_mut()),
            armed: AtomicU8::new(crate::object_stock::UNARMED),
            aged: AtomicBool::new(false),
            caching: AtomicBool::new(true),
            anext: AtomicPtr::new(ptr::null_mut()),
            aprev: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The bin of class `c`.
    #[inline(always)]
    pub fn bin(&self, c: usize, accounted: bool) -> &Bin {
        debug_assert!(c < NUM_CLASSES);
        // SAFETY: every class index comes from size_class, which only yields c < NUM_CLASSES.
        unsafe {
            if accounted {
                self.accounted.get_unchecked(c)
            } else {
                &self.bins.get_unchecked(c).plain
            }
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
    TC.with(|tc| f(opaque(tc)))
}

/// `tc`, through an empty `asm!` that hides where the pointer came from. Without it LLVM
/// addresses some fields `%fs`-relative and others from a materialised base within one fast
/// path, and loads the TLS offset once more for the former (one instruction on every free, and
/// on every accounted allocation). The asm emits nothing.
#[inline(always)]
// The pointer goes through the asm untouched: the block really reads and writes no memory.
#[allow(clippy::pointers_in_nomem_asm_block)]
fn opaque(tc: &ThreadCache) -> &ThreadCache {
    // Miri cannot run inline assembly; the asm only steers code generation, so without it
    // the function is the identity it always was.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut p = tc as *const ThreadCache;
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

/// Slow path of an allocation from class `c`: initialise the thread, or refill the bin.
#[cold]
#[inline(never)]
pub fn alloc_slow(c: usize, accounted: bool) -> *mut u8 {
    with(|tc| {
        if tc.state.get() == UNINIT {
            init(tc);
        }
        let cache = classes::cache(c, accounted);
        if tc.state.get() != LIVE {
            return refill_one(cache);
        }
        let bin = tc.bin(c, accounted);
        let p = bin.pop();
        if !p.is_null() {
            return p;
        }
        if bin.max.get() == 0 {
            bin.max.set(bin_max(c));
        }
        let want = (bin.max.get() / 2).max(1) as usize;
        let chain = cache.refill(want, bin.max.get() as usize);
        if chain.count == 0 {
            return ptr::null_mut();
        }
        debug_assert_eq!(bin.count(), 0);
        bin.head.store(chain.head, Ordering::Relaxed);
        bin.count.store(chain.count as u32, Ordering::Relaxed);
        bin.pop()
    })
}

fn refill_one(cache: &SlabCache) -> *mut u8 {
    cache.refill(1, 1).head.cast()
}

/// Slow path of a free to class `c`: initialise the thread, or give half the bin back.
///
/// # Safety
/// `p` must be a live slot of class `c` (plain or accounted as named) that the caller gives up.
#[cold]
#[inline(never)]
pub unsafe fn free_slow(p: *mut u8, c: usize, accounted: bool) {
    // A thread whose bins are closed (not yet registered, or exiting) does not check for
    // accounted objects on its fast path; it does here.
    if !accounted
        && slabcg_accounting::hooks::accounting_active()
        && crate::segment::is_segment(p)
        && crate::charge::is_accounted(p)
    {
        // SAFETY: caller's contract; p lies in a segment and its address says accounted.
        return unsafe { crate::charge::free_small(p, c) };
    }
    with(|tc| {
        if tc.state.get() == UNINIT {
            init(tc);
        }
        let cache = classes::cache(c, accounted);
        let o = p as *mut FreeObj;
        if tc.state.get() != LIVE {
            // SAFETY: a one-slot chain of the caller's slot.
            unsafe {
                (*o).next = ptr::null_mut();
                cache.flush(o, 1);
            }
            return;
        }
        let bin = tc.bin(c, accounted);
        if bin.is_head(p) {
            double_free_at_head();
        }
        if bin.max.get() == 0 {
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
                    (*o).next = ptr::null_mut();
                    cache.flush(o, 1);
                }
                return;
            }
            bin.max.set(bin_max(c));
        }
        let k = bin.count().div_ceil(2);
        if k > 0 {
            let chain = bin.take(k);
            // SAFETY: the chain holds k slots of this class taken from the bin.
            unsafe { cache.flush(chain, k as usize) };
        }
        // SAFETY: the bin now has room; the caller gives up p.
        if !unsafe { bin.push(p) } {
            // With room, only a slot that heads the bin is refused: p was freed before and
            // the half given back just uncovered it.
            double_free_at_head();
        }
    })
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
            crate::object_stock::give_back_own(tc);
            flush_all(tc);
        }
    })
}

fn flush_all(tc: &ThreadCache) {
    for c in 0..NUM_CLASSES {
        for accounted in [false, true] {
            let bin = tc.bin(c, accounted);
            let k = bin.count();
            if k > 0 {
                let chain = bin.take(k);
                // SAFETY: the chain holds the bin's k slots of class c.
                unsafe { classes::cache(c, accounted).flush(chain, k as usize) };
            }
        }
    }
}

fn init(tc: &ThreadCache) {
    crate::global::init_once();
    // Plain and accounted bins open (get a capacity) when the thread first allocates from
    // their class; see free_slow for why.
    for c in 0..NUM_CLASSES {
        tc.bins[c]
            .tagged
            .max
            .set(crate::object_stock::tagged_max(c));
    }
    registry_insert(tc);
    tc.state.set(LIVE);
    let me = tc as *const ThreadCache as *mut u8;
    if !sys::thread::on_thread_exit(thread_exit, me) {
        // Without an exit hook the bins would leak with the thread: run uncached instead.
        teardown(tc);
    }
}

unsafe extern "C" fn thread_exit(arg: *mut libc::c_void) {
    // SAFETY: arg is this exiting thread's own ThreadCache, registered in init(); its TLS block
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
        tc.bins[c].plain.max.set(0);
        tc.accounted[c].max.set(0);
        tc.bins[c].tagged.max.set(0);
    }
    crate::object_stock::give_back_own(tc);
    flush_all(tc);
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
    crate::object_stock::disarm(tc);
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
pub fn for_each_bin_count(mut f: impl FnMut(usize, bool, u32)) {
    let r = REGISTRY.lock();
    let mut tc = r.head;
    while !tc.is_null() {
        // SAFETY: registered caches stay valid until they remove themselves, which needs the
        // lock we hold.
        unsafe {
            for c in 0..NUM_CLASSES {
                f(c, false, (*tc).bins[c].plain.count());
                f(
                    c,
                    true,
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
    crate::object_stock::fork_prepare_armed();
}

/// Fork support, parent side.
///
/// # Safety
/// After [`fork_prepare`] in this thread.
pub unsafe fn fork_parent() {
    // SAFETY: forwarded contract.
    unsafe {
        crate::object_stock::fork_parent_armed();
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
    // SAFETY: the lock is held by fork_prepare of this (the only) thread.
    unsafe { REGISTRY.unlock_raw() };
    let mut r = REGISTRY.lock();
    let mut tc = r.head;
    while !tc.is_null() {
        // SAFETY: the other caches' TLS memory is still mapped in the child (a copy of the
        // parent's), and nothing else runs.
        let t = unsafe { &*tc };
        if tc != me {
            crate::object_stock::give_back_orphan(t);
        }
        tc = t.next.load(Ordering::Relaxed);
    }
    r.head = ptr::null_mut();
    drop(r);
    with(|tc| {
        // SAFETY: after fork_prepare, in the child, as this function requires.
        unsafe { crate::object_stock::fork_child_armed(tc, tc.state.get() == LIVE) };
        if tc.state.get() == LIVE {
            registry_insert(tc);
        }
    });
}
