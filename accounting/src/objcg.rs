//! objcg: the owner indirection. Owner metadata in the allocator stores a `u32` objcg id;
//! the id resolves, without locks, through a static table to an [`ObjCg`], which points to
//! the tenant node to charge. When a tenant dies its objcgs are re-pointed to the parent
//! (reparenting, `tenant.rs`) and the tenant's node is freed at once, whatever objects it
//! still owns: late uncharges land on the parent and its ancestors, which already include
//! the child's charges. A dead tenant with live objects costs its objcg (32 bytes), counted
//! in the parent's `adopted`, as an offlined memcg costs its obj_cgroup in the kernel.
//!
//! Lifetime (refs), per objcg:
//!
//! `refs == alive + slots + bytes` where `alive` is 1 while the creating tenant has handles,
//! `slots` counts stock slots (any thread) caching this id, and `bytes` counts bytes charged
//! through this objcg for allocations and not yet uncharged (in live objects or pre-charged
//! in stocks' object pools). Bytes charged with `Tenant::charge` hold no refs (their caller
//! holds a handle; `stock.rs`), so no misuse of `Tenant::uncharge` can drop refs that
//! objects hold. The thread that takes refs to 0 pushes the objcg on a lock-free zombie
//! list; zombies are freed (id recycled) only in user context (`tenant::free_zombies`).
//!
//! The node an objcg points at: `tenant` owns one strong reference (`Arc::into_raw`) on the
//! node it points at, which keeps that node and its ancestors alive. Re-pointing swaps the
//! pointer and then waits until no reader of the old one is left (`readers`, below) before
//! it drops the old reference, as the kernel frees a dying memcg only after an RCU grace
//! period. A reader holds a ref on the objcg and brackets its use of the node with
//! [`ObjCg::read`]; those sections are short and take no lock, so the wait is bounded.
//!
//! Table: `DIRS[id >> 20]` points to a directory of 1024 chunk pointers, each to a chunk of
//! 1024 `ObjCg`s, so every `u32` but 0 can be an id. Directories are never freed; a chunk
//! is allocated when its first id is taken (threads take ids 16 at a time, [`IdBatch`]) and
//! freed when its last one is recycled (no holder of a ref, hence no lookup, can then reach
//! it), under the tree lock, which also covers every walk of the table.

use core::ptr::null_mut;
use core::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use crate::node::Node;
use crate::stock::STOCK;
use crate::types::ObjCgId;

const CHUNK_SHIFT: u32 = 10;
const CHUNK: usize = 1 << CHUNK_SHIFT;
const DIR_SHIFT: u32 = 10;
const DIR: usize = 1 << DIR_SHIFT;
const NDIRS: usize = 1 << (32 - CHUNK_SHIFT - DIR_SHIFT);
/// Chunk indexes there can be (`id >> CHUNK_SHIFT`).
const NCHUNKS: u64 = (NDIRS * DIR) as u64;

/// One objcg. An entry whose `tenant` is null is free.
pub(crate) struct ObjCg {
    id: ObjCgId,
    /// Readers of `tenant` now ([`ObjCg::read`]); a re-pointing waits for 0.
    readers: AtomicU32,
    refs: AtomicU64,
    /// The node charged through this objcg (its creator, or an ancestor after reparenting),
    /// holding one strong reference on it.
    tenant: AtomicPtr<Node>,
    /// Two uses that never overlap in time: while the objcg lives, the stock slots (any
    /// thread) caching this id, each holding a share of the budget for what all stocks
    /// together may pre-charge for it ([`ObjCg::try_hold`]); once it is a zombie (refs 0,
    /// so no slot is left: a slot holds a ref, dropped after its share), the next id on the
    /// zombie list. One field for both keeps a dead tenant's objcg at 32 bytes.
    /// `holders <= hold_budget()` except for a moment inside `try_hold`.
    next_zombie: AtomicU32,
}

type Dir = [AtomicPtr<ObjCg>; DIR];

static DIRS: [AtomicPtr<Dir>; NDIRS] = [const { AtomicPtr::new(null_mut()) }; NDIRS];
/// One past the highest chunk index ever used, for walks of the table.
static CHUNKS_HIGH: AtomicU32 = AtomicU32::new(0);
/// The global zombie list (`push_on`): the zombies of threads without a registered stock,
/// and those moved from the threads' own lists (`Stock::zombies`, `move_to_global`). Popped
/// whole in user context.
static ZOMBIES: AtomicU64 = AtomicU64::new(0);

/// Ids handed out, per chunk. Chunk 0 counts id 0 as live forever, so it is never freed.
/// `live + free.count_ones() == CHUNK` while the chunk is mapped, `live == 0` and no bit
/// set while it is not. An id waiting in a thread's batch ([`IdBatch`]) counts as live.
struct ChunkIds {
    live: u32,
    /// Free offsets in the chunk, one bit each: a batch takes the lowest ones, so that the
    /// ids one thread uses sit side by side in the table (a cache line holds two entries,
    /// and a line shared by two threads' live queries would bounce between them).
    free: [u64; CHUNK / 64],
}

impl ChunkIds {
    fn has_free(&self) -> bool {
        self.free.iter().any(|&w| w != 0)
    }

    /// The lowest free offset, now taken.
    fn take_lowest(&mut self) -> Option<u32> {
        let (i, w) = self.free.iter_mut().enumerate().find(|(_, w)| **w != 0)?;
        let bit = w.trailing_zeros();
        *w &= !(1u64 << bit);
        self.live += 1;
        Some(i as u32 * 64 + bit)
    }
}

struct IdAlloc {
    chunks: Vec<ChunkIds>,
    /// Mapped chunks with free ids; the lowest is used first, so ids stay packed and the
    /// high chunks empty out and are freed.
    with_free: BTreeSet<u32>,
    /// Chunk indexes below `chunks.len()` whose chunk was freed.
    unmapped: BTreeSet<u32>,
}

static IDS: Mutex<IdAlloc> = Mutex::new(IdAlloc {
    chunks: Vec::new(),
    with_free: BTreeSet::new(),
    unmapped: BTreeSet::new(),
});

/// Every `u32` but 0 is handed out at once: `Tenant::try_child` says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IdsFull;

/// The id allocator's lock, held across `fork` (`tree::lock_for_fork`).
pub(crate) struct IdsGuard(#[allow(dead_code)] MutexGuard<'static, IdAlloc>);

pub(crate) fn lock_ids() -> IdsGuard {
    IdsGuard(lock())
}

fn lock() -> MutexGuard<'static, IdAlloc> {
    IDS.lock().unwrap_or_else(|e| e.into_inner())
}

fn chunk_ptr(c: u32) -> *mut ObjCg {
    let dir = DIRS[(c >> DIR_SHIFT) as usize].load(Ordering::Acquire);
    // SAFETY: directories are never freed once published (Release, after zeroing).
    match unsafe { dir.as_ref() } {
        Some(d) => d[c as usize & (DIR - 1)].load(Ordering::Acquire),
        None => null_mut(),
    }
}

/// Resolves an id. `None` for 0 and for ids whose chunk is not mapped. Lock-free,
/// allocation-free. The entry stays valid while the caller holds a ref on it (or the tree
/// lock): only then is its chunk certain not to be freed.
#[inline]
pub(crate) fn lookup(id: ObjCgId) -> Option<&'static ObjCg> {
    if id == 0 {
        return None;
    }
    let chunk = chunk_ptr(id >> CHUNK_SHIFT);
    // SAFETY: a non-null chunk pointer was published (Release, paired with the Acquire in
    // chunk_ptr) after its CHUNK entries were initialised; the caller's ref keeps it from
    // being freed; the index is masked below CHUNK.
    unsafe {
        chunk
            .as_ref()
            .map(|_| &*chunk.add(id as usize & (CHUNK - 1)))
    }
}

/// Maps chunk `c` (its directory too, if needed). Under the id lock; allocates.
fn map_chunk(c: u32) {
    let d = &DIRS[(c >> DIR_SHIFT) as usize];
    if d.load(Ordering::Relaxed).is_null() {
        let dir: Box<Dir> = Box::new([const { AtomicPtr::new(null_mut()) }; DIR]);
        d.store(Box::into_raw(dir), Ordering::Release);
    }
    let base = c << CHUNK_SHIFT;
    let chunk: Box<[ObjCg]> = (0..CHUNK as u32)
        .map(|i| ObjCg {
            id: base + i,
            readers: AtomicU32::new(0),
            refs: AtomicU64::new(0),
            tenant: AtomicPtr::new(null_mut()),
            next_zombie: AtomicU32::new(0),
        })
        .collect();
    // SAFETY: just published above or earlier, never freed.
    let dir = unsafe { &*d.load(Ordering::Relaxed) };
    dir[c as usize & (DIR - 1)].store(Box::into_raw(chunk) as *mut ObjCg, Ordering::Release);
}

/// Frees chunk `c`, none of whose ids is handed out. Under the id lock and the tree lock.
fn unmap_chunk(c: u32) {
    // SAFETY: mapped, so its directory is published.
    let dir = unsafe { &*DIRS[(c >> DIR_SHIFT) as usize].load(Ordering::Relaxed) };
    let p = dir[c as usize & (DIR - 1)].swap(null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: from Box::into_raw of a CHUNK-long slice in map_chunk; no id of it is
        // handed out, so no holder of a ref can reach it, and every walk of the table
        // holds the tree lock, which our caller holds.
        drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(p, CHUNK)) });
    }
}

/// Takes up to `out.len()` free ids, the lowest first, mapping chunks as needed; returns
/// how many (0: every id is handed out). Under the id lock; allocates.
fn take_ids(a: &mut IdAlloc, out: &mut [ObjCgId]) -> usize {
    let mut n = 0;
    while n < out.len() {
        let c = match a.with_free.first() {
            Some(&c) => c,
            None => {
                let c = match a.unmapped.pop_first() {
                    Some(c) => c,
                    None if a.chunks.len() as u64 == NCHUNKS => break,
                    None => {
                        a.chunks.push(ChunkIds {
                            live: 0,
                            free: [0; CHUNK / 64],
                        });
                        let c = a.chunks.len() as u32 - 1;
                        CHUNKS_HIGH.store(c + 1, Ordering::Release);
                        c
                    }
                };
                map_chunk(c);
                let ch = &mut a.chunks[c as usize];
                ch.free = [u64::MAX; CHUNK / 64];
                if c == 0 {
                    // Id 0 means "no objcg": live for ever.
                    ch.free[0] &= !1;
                    ch.live = 1;
                }
                a.with_free.insert(c);
                c
            }
        };
        let ch = &mut a.chunks[c as usize];
        while n < out.len() {
            let Some(off) = ch.take_lowest() else { break };
            out[n] = c << CHUNK_SHIFT | off;
            n += 1;
        }
        if !ch.has_free() {
            a.with_free.remove(&c);
        }
    }
    n
}

/// Ids a thread takes from the allocator at once: one lock round trip per 16 tenants
/// created, and 8 cache lines of the table of its own.
const BATCH: usize = 16;
/// Ids a thread's batch holds at most: a refill takes `BATCH`; the ids a thread's zombie
/// sweeps free, in chunks no higher than its last refill's, fill it up to this
/// ([`recycle`]).
const BATCH_CAP: usize = 64;

/// `(BATCH, BATCH_CAP, OWN_ZOMBIES)`, for `testing::objcg_id_batches`.
pub(crate) fn id_batches() -> (usize, usize, usize) {
    (BATCH, BATCH_CAP, OWN_ZOMBIES as usize)
}

/// This thread's ids, taken from the allocator or kept from its sweeps ([`recycle`]), not
/// handed out yet. They count as live in their chunks (so those stay mapped) and go back
/// when the thread exits; a forked child never gets back the batches of the threads that
/// did not survive the fork (at most `BATCH_CAP` ids each, of 4 billion).
struct IdBatch {
    ids: [ObjCgId; BATCH_CAP],
    len: usize,
    /// The highest chunk of the last refill (which took the lowest free ids): a sweep keeps
    /// only ids no higher, so that the high chunks still empty out and unmap.
    home: u32,
    /// Its thread-exit step ([`batch_usable`]).
    exit: BatchExit,
}

/// Where a thread's id batch stands with its thread-exit step.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BatchExit {
    /// Not armed yet: the batch was not used.
    Unarmed,
    /// Armed: the batch may keep ids, which the step gives back.
    Armed,
    /// The step ran, or could not be armed: the batch keeps nothing, and the thread takes
    /// and returns ids at the allocator.
    Exited,
}

/// The id batch's thread-exit step, a step of the pthread key like the stock's. A `Drop`
/// thread-local first used from a key destructor (a tenant made in a C library's thread
/// cleanup) would be armed after the C runtime ran those: it would never run, its ids would
/// count as live for good and the runtime's entry for it would leak.
///
/// # Safety
/// Called by the thread-exit hook only, on the exiting thread, whose TLS is still valid.
unsafe extern "C" fn batch_exit(_: *mut core::ffi::c_void) {
    let _ = IDS_BATCH.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            if b.len != 0 {
                // Without the tree lock (which is above this file): a chunk this empties
                // stays mapped, all free, for the next batch, as no walk may see it unmapped.
                give_back(&b.ids[..b.len], false);
                b.len = 0;
            }
            b.exit = BatchExit::Exited;
        }
    });
}

/// Whether the batch may keep ids: its exit step is armed (arming it on first use).
fn batch_usable(b: &mut IdBatch) -> bool {
    if b.exit == BatchExit::Unarmed {
        // SAFETY: `batch_exit` is sound at this thread's exit (it only reads its own TLS).
        b.exit = if unsafe { crate::sys::on_thread_exit_ids(batch_exit) } {
            BatchExit::Armed
        } else {
            BatchExit::Exited
        };
    }
    b.exit == BatchExit::Armed
}

thread_local! {
    static IDS_BATCH: core::cell::RefCell<IdBatch> =
        const {
            core::cell::RefCell::new(IdBatch {
                ids: [0; BATCH_CAP],
                len: 0,
                home: 0,
                exit: BatchExit::Unarmed,
            })
        };
}

/// A free id: from this thread's batch, refilled from the allocator when empty (or, at
/// thread exit or re-entered, straight from it).
fn take_id() -> Option<ObjCgId> {
    let batched = IDS_BATCH.try_with(|b| {
        let mut b = b.try_borrow_mut().ok()?;
        if b.len == 0 && !batch_usable(&mut b) {
            return None;
        }
        if b.len == 0 {
            let mut a = lock();
            b.len = take_ids(&mut a, &mut b.ids[..BATCH]);
            if let Some(&top) = b.ids[..b.len].iter().max() {
                b.home = top >> CHUNK_SHIFT;
            }
        }
        if b.len == 0 {
            return None;
        }
        b.len -= 1;
        // Last in, first out: the ids its sweeps kept (`recycle`, pushed on top) before
        // what is left of the refill, whose highest id comes first.
        Some(b.ids[b.len])
    });
    match batched {
        Ok(Some(id)) => Some(id),
        _ => {
            let mut one = [0];
            (take_ids(&mut lock(), &mut one) == 1).then_some(one[0])
        }
    }
}

/// Allocates an objcg for `node` with `refs = 1` (the alive ref). User context.
///
/// `node` must come from `Arc::into_raw`; that reference moves into the objcg (on `Err` it
/// stays the caller's).
pub(crate) fn alloc(node: *const Node) -> Result<ObjCgId, IdsFull> {
    let id = take_id().ok_or(IdsFull)?;
    let oc = lookup(id).expect("a taken id's chunk is mapped");
    oc.refs.store(1, Ordering::Relaxed);
    oc.readers.store(0, Ordering::Relaxed);
    // The zombie link of the id's previous life: no slot holds the new objcg yet.
    oc.next_zombie.store(0, Ordering::Relaxed);
    // Release: a thread that learns the id through a later synchronising operation sees the
    // fields above.
    oc.tenant.store(node as *mut Node, Ordering::Release);
    Ok(id)
}

/// The node an objcg points at, for as long as this guard lives: a re-pointing of the objcg
/// waits for it to drop before it releases the node.
pub(crate) struct NodeRef<'a> {
    oc: &'a ObjCg,
    node: &'a Node,
}

impl core::ops::Deref for NodeRef<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        self.node
    }
}

impl Drop for NodeRef<'_> {
    #[inline]
    fn drop(&mut self) {
        self.oc.readers.fetch_sub(1, Ordering::Release);
    }
}

impl ObjCg {
    /// The node charged through this objcg, `None` for a free entry. Keep the guard for a
    /// short, lock-free section: a tenant's death waits for it.
    ///
    /// # Safety
    /// The caller holds a ref on this objcg (bytes, a slot ref or the alive ref) for as long
    /// as the guard lives.
    #[inline]
    pub(crate) unsafe fn read(&self) -> Option<NodeRef<'_>> {
        // SeqCst, both here and in `repoint`: either the re-pointer's check sees this reader,
        // or this load sees the new pointer.
        self.readers.fetch_add(1, Ordering::SeqCst);
        let p = self.tenant.load(Ordering::SeqCst);
        // SAFETY: the objcg's strong reference on the node it points at is dropped only after
        // a re-pointing saw `readers == 0`, which it cannot while we are counted.
        match unsafe { p.as_ref() } {
            Some(node) => Some(NodeRef { oc: self, node }),
            None => {
                self.readers.fetch_sub(1, Ordering::Release);
                None
            }
        }
    }

    /// Re-points the objcg to `to` (reparenting) and returns the node it pointed at once no
    /// reader uses it any more: the caller then owns that node's reference (a pointer from
    /// `Arc::into_raw`, for `Arc::from_raw`).
    ///
    /// # Safety
    /// No other thread re-points this objcg meanwhile (the tenant tree's lock, or the death
    /// of the tenant it points at, which alone may re-point it: `tenant::die`), and `to`
    /// comes from `Arc::into_raw` (not from a `&Node`, whose provenance does not cover the
    /// counts) and carries a strong reference for this objcg.
    pub(crate) unsafe fn repoint(&self, to: *const Node) -> *const Node {
        let old = self.tenant.swap(to as *mut Node, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.readers.load(Ordering::SeqCst) != 0 {
            // Readers hold the count for a few counter updates; one preempted inside is
            // waited out by yielding.
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        old
    }

    #[inline]
    pub(crate) fn get(&self, n: u64) {
        self.refs.fetch_add(n, Ordering::Relaxed);
    }

    /// Drops `n` refs; the caller must not touch the objcg (or its tenant) afterwards.
    #[inline]
    pub(crate) fn put(&self, n: u64) {
        if n == 0 {
            return;
        }
        let old = self.refs.fetch_sub(n, Ordering::Release);
        debug_assert!(old >= n, "objcg {} refs underflow: {old} - {n}", self.id);
        if old == n {
            // Acquire: the freer (through the zombie list) sees every use made under refs.
            fence(Ordering::Acquire);
            self.push_zombie();
        }
    }

    /// Takes one share of the stock budget for a new stock slot caching this id (`stock.rs`):
    /// false, taking nothing, when `hold_budget()` slots (all threads together) hold it
    /// already; the caller then charges the counters directly. The caller holds a ref on
    /// the objcg. One atomic on the objcg's line, which the slot's ref takes anyway, on the
    /// slow path that makes a slot.
    pub(crate) fn try_hold(&self) -> bool {
        // Relaxed: the count bounds how many slots exist, it orders nothing; a slot's bytes
        // are published by the stock protocol (drain.rs). A plain load first: threads past
        // the budget try on every charge, and would otherwise bounce the line with two
        // read-modify-writes each.
        if self.next_zombie.load(Ordering::Relaxed) >= hold_budget() {
            return false;
        }
        let old = self.next_zombie.fetch_add(1, Ordering::Relaxed);
        if old < hold_budget() {
            return true;
        }
        self.next_zombie.fetch_sub(1, Ordering::Relaxed);
        false
    }

    /// Gives back the share of a slot that no longer caches this id (it was taken by its
    /// owner, a drainer or the thread's exit). Before the slot's ref is put.
    pub(crate) fn release_hold(&self) {
        let old = self.next_zombie.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(old != 0, "objcg {} holders underflow", self.id);
    }

    /// Slots holding a share now (tests).
    #[cfg(test)]
    pub(crate) fn holders(&self) -> u32 {
        self.next_zombie.load(Ordering::Relaxed)
    }

    #[cold]
    fn push_zombie(&self) {
        // No slot holds a share of a dead objcg (a slot holds a ref). In a forked child the
        // count can still be 1: a thread that vanished at the fork between taking a share
        // and taking its ref (`charge::charge_slow`) never gives it back. Harmless: the link
        // below overwrites it, and until then it only kept one share of the budget taken.
        debug_assert!(
            self.next_zombie.load(Ordering::Relaxed) == 0 || FORKED.load(Ordering::Relaxed),
            "a zombie held by a slot"
        );
        // This thread's own list while its stock is registered (its exit, a fork and the
        // full sweeps move it to the global one): threads dropping the tenants of one
        // service would otherwise bounce the global list's line at every death. Up to
        // `OWN_ZOMBIES`: a thread that sweeps (creates or drops tenants) frees its own list
        // at that length, and one that never does (it only frees dead tenants' objects)
        // then pushes to the global list, which the others' sweeps free.
        let own = STOCK.with(|s| {
            let mine = s.registered_live()
                && (s.zombies.load(Ordering::Relaxed) >> 32) < u64::from(OWN_ZOMBIES);
            if mine {
                push_on(&s.zombies, self);
            }
            mine
        });
        if !own {
            push_on(&ZOMBIES, self);
        }
    }

    /// Its id.
    pub(crate) fn id(&self) -> ObjCgId {
        self.id
    }

    #[cfg(test)]
    pub(crate) fn refs(&self) -> u64 {
        self.refs.load(Ordering::Relaxed)
    }
}

/// Stock slots that may cache one objcg at once, all threads together: 4 per CPU. A slot
/// holds at most `STOCK_HIGH` bytes in each of its two pools (`stock.rs`), 1 MiB, so what
/// all stocks pre-charge for one objcg stays within 4 MiB per CPU however many threads
/// there are, as the kernel's per-CPU stocks bound it by the CPUs (there: 64 pages per slot
/// and CPU). Threads past the budget charge the counters directly (`charge.rs`).
pub(crate) fn hold_budget() -> u32 {
    4 * crate::sys::cpus()
}

/// The longest a thread's own zombie list gets (`push_zombie`); the lifecycle paths sweep
/// at this length (`tenant::free_zombies_if_due`). Shorter under Miri, whose tests make few.
pub(crate) const OWN_ZOMBIES: u32 = if cfg!(miri) { 4 } else { 32 };

/// Pushes `oc` (a zombie: no refs) on `list`, a zombie list word: its head id in the low
/// 32 bits (0 = empty) and its length in the high 32, updated together by one CAS. Pushed
/// by anyone (the global list) or by the owner thread (its own), taken whole by a swap, so
/// there is no ABA.
fn push_on(list: &AtomicU64, oc: &ObjCg) {
    let mut old = list.load(Ordering::Relaxed);
    loop {
        oc.next_zombie.store(old as u32, Ordering::Relaxed);
        // The length cannot pass u32::MAX: there are fewer ids than that.
        let new = ((old >> 32) + 1) << 32 | u64::from(oc.id);
        match list.compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => old = seen,
        }
    }
}

/// Moves the zombies of `list` (a thread's own: another thread's under the registry lock,
/// an exiting one's, or one left in a fork child) to the global list. No allocation, no
/// lock.
pub(crate) fn move_to_global(list: &AtomicU64) {
    let mut id = list.swap(0, Ordering::Acquire) as u32;
    while let Some(oc) = lookup(id) {
        let next = oc.next_zombie.load(Ordering::Relaxed);
        push_on(&ZOMBIES, oc);
        id = next;
    }
}

/// Takes this thread's zombie list and the global one (what other threads' lists hold goes
/// there first: `drain::collect_zombies`). For each dead objcg calls `f(id, tenant)` after
/// clearing the entry; `tenant` carries the entry's strong reference, which the caller
/// must release, and the caller must recycle the id with [`recycle`]. Under the tree lock.
pub(crate) fn take_zombies(mut f: impl FnMut(ObjCgId, *const Node)) {
    let own = STOCK.with(|s| s.zombies.swap(0, Ordering::Acquire));
    for list in [own, ZOMBIES.swap(0, Ordering::Acquire)] {
        let mut id = list as u32;
        while let Some(oc) = lookup(id) {
            let next = oc.next_zombie.load(Ordering::Relaxed);
            debug_assert_eq!(oc.refs.load(Ordering::Relaxed), 0);
            debug_assert_eq!(oc.readers.load(Ordering::Relaxed), 0);
            let tenant = oc.tenant.swap(null_mut(), Ordering::Relaxed);
            f(id, tenant);
            id = next;
        }
    }
}

/// How many dead objcgs wait to be freed on this thread's list and the global one (a hint:
/// more may be queued right after, and other threads' lists are not counted).
pub(crate) fn zombie_count() -> u32 {
    let own = STOCK.with(|s| s.zombies.load(Ordering::Relaxed));
    ((own >> 32) + (ZOMBIES.load(Ordering::Relaxed) >> 32)) as u32
}

/// Makes freed ids available again: into this thread's batch those in chunks no higher
/// than its last refill's, as far as it has room (its next tenants take them without the
/// allocator's lock: a thread creating and sweeping tenants at the rate of its queries then
/// never takes it), the rest to the allocator, which frees the chunks none of whose ids is
/// handed out (so after a burst the high chunks empty out as before). User context, under
/// the tree lock (an id in a batch is handed out later without it, as one from the
/// allocator is).
pub(crate) fn recycle(ids: &[ObjCgId]) {
    if ids.is_empty() {
        return;
    }
    let mut back = Vec::new();
    let kept = IDS_BATCH.try_with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else {
            return false;
        };
        if !batch_usable(&mut b) {
            return false;
        }
        for &id in ids {
            if b.len < BATCH_CAP && id >> CHUNK_SHIFT <= b.home {
                let len = b.len;
                b.ids[len] = id;
                b.len += 1;
            } else {
                back.push(id);
            }
        }
        true
    });
    if kept != Ok(true) {
        return give_back(ids, true);
    }
    if !back.is_empty() {
        give_back(&back, true);
    }
}

/// [`recycle`], also for ids a thread's batch did not hand out; frees the chunks it empties
/// only if `unmap` (then under the tree lock).
fn give_back(ids: &[ObjCgId], unmap: bool) {
    let mut a = lock();
    for &id in ids {
        let c = id >> CHUNK_SHIFT;
        let off = id as usize & (CHUNK - 1);
        let ch = &mut a.chunks[c as usize];
        debug_assert!(
            ch.free[off / 64] & (1 << (off % 64)) == 0,
            "id {id} freed twice"
        );
        ch.live -= 1;
        if ch.live == 0 && unmap {
            ch.free = [0; CHUNK / 64];
            a.with_free.remove(&c);
            a.unmapped.insert(c);
            unmap_chunk(c);
        } else {
            ch.free[off / 64] |= 1 << (off % 64);
            a.with_free.insert(c);
        }
    }
}

/// Calls `f(id, node)` for every allocated objcg, with the node it points at. Objcgs
/// allocated during the walk may or may not be seen. Each call runs inside a read section
/// of its objcg: a leaf tenant's death re-points its objcg without the tree lock
/// (`tenant::die`), and waits for the section before it releases the node.
///
/// # Safety
/// The caller holds the tenant tree lock (no objcg is freed or unmapped meanwhile) and
/// uses each node only during its call.
pub(crate) unsafe fn for_each_allocated(mut f: impl FnMut(ObjCgId, &Node)) {
    for_each_entry(|oc| {
        // A plain load first: most of a walk is free entries, which need no section.
        if oc.tenant.load(Ordering::Relaxed).is_null() {
            return;
        }
        // SAFETY: under the tree lock the entry is not freed (`take_zombies` runs under it
        // too), which is what `read` needs of the caller's ref.
        if let Some(node) = unsafe { oc.read() } {
            f(oc.id, &node);
        }
    });
}

/// Calls `f(oc)` for every objcg that points at `node`, its own included (a dying tenant's
/// re-pointing, and the tests' checks). `O(mapped entries)`: only the death of a tenant
/// that adopted objcgs walks the table.
///
/// # Safety
/// The caller holds the tenant tree lock, and nothing re-points an objcg to `node` during
/// the walk (it is dying: no live child can die into it).
pub(crate) unsafe fn for_each_pointing_at(node: *const Node, mut f: impl FnMut(&ObjCg)) {
    for_each_entry(|oc| {
        if core::ptr::eq(oc.tenant.load(Ordering::Acquire), node) {
            f(oc);
        }
    });
}

/// Calls `f` for every entry of every mapped chunk. Under the tree lock (no chunk is freed
/// meanwhile).
fn for_each_entry(mut f: impl FnMut(&ObjCg)) {
    let high = CHUNKS_HIGH.load(Ordering::Acquire);
    for c in 0..high {
        let chunk = chunk_ptr(c);
        if chunk.is_null() {
            continue;
        }
        for i in 0..CHUNK {
            // SAFETY: a mapped chunk, not freed while the caller holds the tree lock.
            f(unsafe { &*chunk.add(i) });
        }
    }
}

/// Fork support, in the child (the forking thread holds the tree and id locks): a thread
/// that was inside a read section at the fork does not exist here, so its count would make
/// a later re-pointing wait for ever. No reader of the child's own is active now (the fork
/// handlers run outside every read section).
pub(crate) fn fork_child() {
    for_each_entry(|oc| oc.readers.store(0, Ordering::Relaxed));
    FORKED.store(true, Ordering::Relaxed);
}

/// This process is a forked child of a process that used the accounting: shares of the
/// stock budget taken by threads that did not survive the fork may never come back
/// (`push_zombie`).
static FORKED: AtomicBool = AtomicBool::new(false);

/// Whether this process is such a forked child (debug checks that a fork may break).
pub(crate) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Bytes the id table holds now (chunks, directories and the free lists), for tests.
pub(crate) fn table_bytes() -> usize {
    let a = lock();
    let mapped = a.chunks.len() - a.unmapped.len();
    let dirs = a.chunks.len().div_ceil(DIR);
    mapped * CHUNK * core::mem::size_of::<ObjCg>()
        + dirs * core::mem::size_of::<Dir>()
        + a.chunks.capacity() * core::mem::size_of::<ChunkIds>()
}

/// Whether the tenant `id` was made for is alive (its death has not started): false once it
/// is dying or dead
/// (then `id` points at an ancestor, or is about to). Lock-free: one reader section.
///
/// # Safety
/// The caller holds a ref on `id` (bytes charged through it) for the call.
pub(crate) unsafe fn creator_alive(id: ObjCgId) -> bool {
    // SAFETY: the caller's ref keeps the entry (and, inside the section, its node) valid.
    lookup(id)
        .is_some_and(|oc| unsafe { oc.read() }.is_some_and(|n| n.objcg() == id && n.is_alive()))
}

/// Whether `id` is currently allocated (tests and debug checks). Under the id lock, which
/// every freeing of a chunk holds, so an id nobody holds a ref on can be looked up safely
/// (and no caller of this can hold it: its holders allocate as the root).
pub(crate) fn is_live(id: ObjCgId) -> bool {
    let _ids = lock();
    lookup(id).is_some_and(|oc| !oc.tenant.load(Ordering::Relaxed).is_null())
}
