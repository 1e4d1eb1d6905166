//! objcg: the owner indirection. Owner metadata in the allocator stores a `u32` objcg id;
//! the id resolves, without locks, through a static two-level table to an [`ObjCg`], which
//! points to the tenant node to charge. When a tenant dies its objcgs are re-pointed to the
//! parent (reparenting, `tenant.rs`), so late uncharges land on the parent and its
//! ancestors, which already include the child's charges.
//!
//! Lifetime (refs), per objcg:
//!
//! `refs == alive + slots + bytes` where `alive` is 1 while the creating tenant has handles,
//! `slots` counts stock slots (any thread) caching this id, and `bytes` counts bytes charged
//! through this objcg for allocations and not yet uncharged (in live objects or pre-charged
//! in stocks' object pools). Bytes charged with `Tenant::charge` hold no refs (their caller
//! holds a handle; `stock.rs`), so no misuse of `Tenant::uncharge` can drop refs that
//! objects hold.
//!
//! Refs change only on slow paths (slot fill/drain, stock trim, direct charge). Whoever
//! reads `objcg.tenant` holds one of those refs, so the node it points at (the origin, or an
//! ancestor kept alive by the origin's parent chain) stays valid. The thread that takes
//! refs to 0 pushes the objcg on a lock-free zombie list; zombies are freed (id recycled,
//! origin node released) only in user context (`tenant::free_zombies`), never in a hook.
//!
//! Table: `TABLE[id >> 10]` points to a chunk of 1024 `ObjCg`s. Chunks are allocated in user
//! context (`Tenant::new`), published with `Release`, and never freed, so a resolved
//! `&ObjCg` is `'static`; only the fields are recycled.

use core::ptr::null_mut;
use core::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::tenant::Node;

/// See `hooks::ObjCgId`.
pub(crate) type ObjCgId = u32;

const CHUNK_SHIFT: u32 = 10;
const CHUNK: usize = 1 << CHUNK_SHIFT;
const NCHUNKS: usize = 4096;

/// One objcg. An entry whose `tenant` is null is free.
pub(crate) struct ObjCg {
    id: ObjCgId,
    refs: AtomicU64,
    /// The node charged through this objcg: `origin` or one of its ancestors.
    tenant: AtomicPtr<Node>,
    /// `Arc::into_raw` of the node that created this objcg; released when the objcg is freed.
    origin: AtomicPtr<Node>,
    next_zombie: AtomicU32,
    /// Where this id sits in the `objcgs` list of the node `tenant` points at, so that
    /// freeing it does not search that list (a service whose dead queries' results are still
    /// alive lists one objcg per such query). Used under the tenant tree's lock, or before a
    /// new tenant is published.
    list_index: AtomicU32,
}

static TABLE: [AtomicPtr<ObjCg>; NCHUNKS] = [const { AtomicPtr::new(null_mut()) }; NCHUNKS];
/// The zombie list: its head id in the low 32 bits (0 = empty) and its length in the high
/// 32, updated together by one CAS. Pushed from anywhere, popped whole in user context, so
/// there is no ABA.
static ZOMBIES: AtomicU64 = AtomicU64::new(0);

struct IdAlloc {
    next: ObjCgId,
    free: Vec<ObjCgId>,
}
/// One past the highest id ever handed out (`IdAlloc::next`), for walks of the table that
/// take no lock (`for_each_origin`).
static HIGH: AtomicU32 = AtomicU32::new(1);
static IDS: Mutex<IdAlloc> = Mutex::new(IdAlloc {
    next: 1,
    free: Vec::new(),
});

/// The id allocator's lock, held across `fork` (`tenant::lock_for_fork`).
pub(crate) struct IdsGuard(#[allow(dead_code)] MutexGuard<'static, IdAlloc>);

pub(crate) fn lock_ids() -> IdsGuard {
    IdsGuard(IDS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Resolves an id. `None` for 0 and for ids never handed out. Lock-free, allocation-free.
#[inline]
pub(crate) fn lookup(id: ObjCgId) -> Option<&'static ObjCg> {
    let chunk = TABLE
        .get((id >> CHUNK_SHIFT) as usize)?
        .load(Ordering::Acquire);
    if id == 0 || chunk.is_null() {
        return None;
    }
    // SAFETY: a non-null chunk pointer was published (Release, paired with the Acquire
    // above) after its CHUNK entries were initialised, and chunks are never freed; the
    // index is masked below CHUNK.
    Some(unsafe { &*chunk.add(id as usize & (CHUNK - 1)) })
}

/// Allocates an objcg for `node` with `refs = 1` (the alive ref). User context.
///
/// `origin` must come from `Arc::into_raw`; ownership moves into the objcg.
pub(crate) fn alloc(origin: *const Node) -> ObjCgId {
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    let id = match ids.free.pop() {
        Some(id) => id,
        None => {
            let id = ids.next;
            assert!((id as usize) < NCHUNKS * CHUNK, "slabcg: out of objcg ids");
            ids.next += 1;
            HIGH.store(ids.next, Ordering::Release);
            let slot = &TABLE[(id >> CHUNK_SHIFT) as usize];
            if slot.load(Ordering::Relaxed).is_null() {
                let base = id & !(CHUNK as u32 - 1);
                let chunk: Box<[ObjCg]> = (0..CHUNK as u32)
                    .map(|i| ObjCg {
                        id: base + i,
                        refs: AtomicU64::new(0),
                        tenant: AtomicPtr::new(null_mut()),
                        origin: AtomicPtr::new(null_mut()),
                        next_zombie: AtomicU32::new(0),
                        list_index: AtomicU32::new(0),
                    })
                    .collect();
                slot.store(Box::into_raw(chunk) as *mut ObjCg, Ordering::Release);
            }
            id
        }
    };
    drop(ids);
    let oc = lookup(id).expect("chunk was just published");
    oc.refs.store(1, Ordering::Relaxed);
    oc.origin.store(origin as *mut Node, Ordering::Relaxed);
    // Release: a thread that learns the id through a later synchronising operation sees the
    // fields above.
    oc.tenant.store(origin as *mut Node, Ordering::Release);
    id
}

impl ObjCg {
    /// The node charged through this objcg, `None` for a free entry.
    ///
    /// # Safety
    /// The caller holds a ref on this objcg (bytes, a slot ref or the alive ref) for as long
    /// as it uses the returned reference.
    #[inline]
    pub(crate) unsafe fn tenant(&self) -> Option<&Node> {
        let p = self.tenant.load(Ordering::Acquire);
        // SAFETY: the held ref keeps the objcg from being freed, which keeps `origin` alive,
        // which keeps every ancestor of `origin` alive through `Node::parent`; `tenant` only
        // ever points to origin or one of those ancestors.
        unsafe { p.as_ref() }
    }

    /// Re-points the objcg (reparenting). User context, under the tree lock.
    pub(crate) fn set_tenant(&self, node: *const Node) {
        self.tenant.store(node as *mut Node, Ordering::Release);
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

    #[cold]
    fn push_zombie(&self) {
        let mut old = ZOMBIES.load(Ordering::Relaxed);
        loop {
            self.next_zombie.store(old as u32, Ordering::Relaxed);
            // The length cannot pass u32::MAX: there are fewer ids than that.
            let new = ((old >> 32) + 1) << 32 | u64::from(self.id);
            match ZOMBIES.compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => old = seen,
            }
        }
    }

    /// The position of this id in its tenant's `objcgs` list. Under the tree lock (or, for a
    /// new tenant's objcg, before the tenant is published).
    pub(crate) fn list_index(&self) -> usize {
        self.list_index.load(Ordering::Relaxed) as usize
    }

    /// Records the position of this id in its tenant's `objcgs` list. Under the tree lock (or,
    /// for a new tenant's objcg, before the tenant is published).
    pub(crate) fn set_list_index(&self, i: usize) {
        self.list_index.store(i as u32, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn refs(&self) -> u64 {
        self.refs.load(Ordering::Relaxed)
    }
}

/// Takes the whole zombie list. For each dead objcg calls `f(id, tenant, list_index,
/// origin)` after clearing the entry; the caller must recycle the id with [`recycle`] and
/// release `origin`.
pub(crate) fn take_zombies(mut f: impl FnMut(ObjCgId, *const Node, usize, *const Node)) {
    let mut id = ZOMBIES.swap(0, Ordering::Acquire) as u32;
    while let Some(oc) = lookup(id) {
        let next = oc.next_zombie.load(Ordering::Relaxed);
        debug_assert_eq!(oc.refs.load(Ordering::Relaxed), 0);
        let tenant = oc.tenant.swap(null_mut(), Ordering::Relaxed);
        let origin = oc.origin.swap(null_mut(), Ordering::Relaxed);
        f(id, tenant, oc.list_index(), origin);
        id = next;
    }
}

/// How many dead objcgs wait to be freed (a hint: more may be queued right after).
pub(crate) fn zombie_count() -> u32 {
    (ZOMBIES.load(Ordering::Relaxed) >> 32) as u32
}

/// Makes freed ids available again, under one lock. User context.
pub(crate) fn recycle(ids: &[ObjCgId]) {
    if !ids.is_empty() {
        let mut a = IDS.lock().unwrap_or_else(|e| e.into_inner());
        a.free.extend_from_slice(ids);
    }
}

/// Calls `f(id, origin)` for every allocated objcg, with the node that created it. Objcgs
/// allocated during the walk may or may not be seen.
///
/// # Safety
/// No objcg may be freed during the call: the caller holds the tenant tree lock, under
/// which `tenant::free_zombies` frees them (and releases their origins).
pub(crate) unsafe fn for_each_origin(mut f: impl FnMut(ObjCgId, &Node)) {
    let high = HIGH.load(Ordering::Acquire);
    for id in 1..high {
        let Some(oc) = lookup(id) else { continue };
        // Acquire on `tenant`, which `alloc` publishes (Release) after `origin`: a non-null
        // `tenant` means `origin` is set for this allocation of the entry.
        if oc.tenant.load(Ordering::Acquire).is_null() {
            continue;
        }
        let origin = oc.origin.load(Ordering::Relaxed);
        // SAFETY: the objcg is allocated and, by the caller's promise, not freed during the
        // call, so its origin node (which it owns) is alive.
        if let Some(node) = unsafe { origin.as_ref() } {
            f(id, node);
        }
    }
}

/// Whether `id` is currently allocated (tests and debug checks).
pub(crate) fn is_live(id: ObjCgId) -> bool {
    lookup(id).is_some_and(|oc| !oc.tenant.load(Ordering::Relaxed).is_null())
}
