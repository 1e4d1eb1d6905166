//! Dedicated caches (kmem_cache_create): one cache per object type, so an odd-sized struct
//! packs into slabs chosen for its size instead of rounding up to a power-of-two class
//! (seed 004: a 2312-byte object gets 14 per 32 KiB slab instead of one per 4 KiB).
//!
//! A dedicated cache shares the slab machinery of the size classes ([`SlabCache`]), and their
//! per-thread front: `alloc`/`free` pop from and push onto this thread's bin of the cache
//! (no lock, no atomic read-modify-write), refilled and flushed half a bin at a time (a
//! consumer's whole, `bin::DRY_GIVE_BACKS`) through
//! the cache's parked batches (`front.rs`: index assignment, tags, warm-up). A free on
//! another thread lands in that thread's front, as a size class's does. The first 64 caches
//! alive at once get a front; later ones take the cache's lock on every `alloc`/`free`.
//! Bulk calls (`alloc_bulk`/`free_bulk`, `bulk.rs`) go through the front first (its kept
//! bin, then its bin), then take the lock once per 512 objects.
//!
//! With `.account(true)` every slot carries owner metadata (placement reported by
//! [`Cache::info`]) and objects allocated inside a tenant scope are charged to it; objects
//! allocated outside any scope carry owner 0 and are not charged. As for the size classes, a
//! free whose owner is the thread's object-stock tag keeps the slot charged in the front's
//! kept bin, and the next allocation in that tenant takes it back without charging (`front.rs`,
//! `object_stock.rs`: drains uncharge kept slots as they do tagged ones); any other free
//! uncharges its owner through the byte stock and puts the slot, owner 0, in the front's
//! uncharged bin, from which other tenants' allocations charge. The first 76 accounted
//! caches get their own line in `tenant.stat()` (`slab_cache_<name>`); later ones are counted in
//! `slab` only.
//!
//! A cache's shared part is never freed: segments name it in their headers for the life of
//! the process. Dropping a `Cache` gives this thread's front slots back and releases its empty
//! slabs to the OS; other threads' fronts give theirs back at their next slow path on that
//! front index, their `trim()` or their exit (the core stays valid). Objects still
//! allocated from it stay valid (and leak), as with a kernel cache destroyed too early. The
//! next cache built with the same name, layout and accounting reuses the dropped one's core
//! and segments (its `live_objects` then counts such leaked objects too), so building and
//! dropping a cache in a loop does not map memory without bound.

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use slabcg_accounting::hooks::{self, StatIdx};

use crate::cache::SlabCache;
use crate::front;
use crate::init;
use crate::object_stock::Pop;
use crate::owner::owner_word;
use crate::slab::{MetaPlacement, OwnerSteps, SlabLayout};
use crate::thread_cache::{self, FrontAt};

/// The geometry of a dedicated cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheInfo {
    /// Usable bytes per object.
    pub object_size: usize,
    /// Distance between two objects.
    pub stride: usize,
    /// Alignment of every object.
    pub align: usize,
    /// Bytes per slab.
    pub slab_bytes: usize,
    /// Objects per slab.
    pub objects_per_slab: usize,
    /// Bytes after the last slot of each slab: `slab_bytes - objects * stride`. With
    /// `Leftover` (and `External`) placement the owner metadata array lives in these bytes,
    /// near the end of the slab (on a cache line the layout chooses within them).
    pub leftover_bytes: usize,
    /// Where owner metadata lives.
    pub meta: MetaPlacement,
    /// Slots per slab given up to make room for metadata (only `External`).
    pub meta_cost_slots: usize,
}

/// Configures a dedicated cache.
pub struct CacheBuilder {
    name: String,
    layout: Layout,
    hwcache_align: bool,
    account: bool,
}

impl CacheBuilder {
    /// Round each object up to a 64-byte cache line (SLAB_HWCACHE_ALIGN): no false sharing
    /// between neighbours, at the cost of padding.
    pub fn hwcache_align(mut self, on: bool) -> Self {
        self.hwcache_align = on;
        self
    }

    /// Charge objects allocated inside a tenant scope to that tenant (SLAB_ACCOUNT).
    pub fn account(mut self, on: bool) -> Self {
        self.account = on;
        self
    }

    /// Creates the cache. Panics (in user context, not in the allocator) when the layout is
    /// aligned above 4 KiB or does not fit a 1 MiB slab; use [`try_build`](Self::try_build)
    /// to get an error instead.
    pub fn build(self) -> Cache {
        match self.try_build() {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// Creates the cache, or explains why the layout cannot be served.
    pub fn try_build(self) -> Result<Cache, CacheError> {
        // The process-wide setup (the fork handlers that hold every cache's lock across a
        // fork, the accounting's hooks) before any path can take this cache's lock: a
        // program whose global allocator is another one, using the cache only in bulk, took
        // no slow path that runs it, and a child forked while another thread held the
        // cache's lock inherited it held.
        init::init_once();
        let size = self.layout.size().max(1);
        let Some(layout) =
            SlabLayout::new(size, self.layout.align(), self.account, self.hwcache_align)
        else {
            return Err(CacheError {
                name: self.name,
                layout: self.layout,
            });
        };
        let key = name_hash(&self.name);
        if let Some(core) = revive(&layout, self.account, key) {
            return Ok(Cache::with_core(
                core,
                self.name,
                StatIdx(core.stat.load(Ordering::Relaxed)),
            ));
        }
        // The core and the stat name live as long as the process: no tenant pays for them,
        // whichever scope the cache is built in.
        let _root = hooks::unscoped();
        let core: &'static SlabCache =
            Box::leak(Box::new(SlabCache::new(layout, u32::MAX, self.account)));
        let stat = if self.account {
            stat_index(&self.name, &layout)
        } else {
            StatIdx::SLAB_OTHER
        };
        core.name_hash.store(key, Ordering::Relaxed);
        core.stat.store(stat.0, Ordering::Relaxed);
        // Release (in the registration): a build that finds this core reads the fields above.
        crate::cache::register_dedicated(core);
        Ok(Cache::with_core(core, self.name, stat))
    }
}

/// The core of a dropped cache with this name, layout and accounting, claimed for a new
/// `Cache`: a program that builds and drops the same cache again and again (say, per request)
/// reuses one core and its segments instead of mapping new ones each time. The claim is a
/// compare-and-swap of `retired`, so two builds never share a core.
fn revive(layout: &SlabLayout, account: bool, key: u64) -> Option<&'static SlabCache> {
    let mut found = None;
    crate::cache::for_each_dedicated(|c| {
        if found.is_none()
            && c.id.accounted == account
            && c.layout == *layout
            && c.name_hash.load(Ordering::Relaxed) == key
            && c.retired
                .compare_exchange(true, false, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            found = Some(c);
        }
    });
    found
}

/// FNV-1a of a cache's name: the part of its identity a reused core must match (for an
/// accounted cache, its stat line carries the name it was first built with).
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A layout a dedicated cache cannot serve.
#[derive(Debug, Clone)]
pub struct CacheError {
    /// The name the cache was to be built with.
    pub name: String,
    /// The layout it was asked to serve.
    pub layout: Layout,
}

impl core::fmt::Display for CacheError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "cache {:?}: layout of {} bytes aligned to {} does not fit a slab (alignment must be <= 4096 and the object must fit a 1 MiB slab, with 4 more bytes for its owner when accounted and unpadded)",
            self.name,
            self.layout.size(),
            self.layout.align()
        )
    }
}

impl std::error::Error for CacheError {}

/// A dedicated cache of equal-sized objects.
///
/// `alloc` and `free` go through a per-thread front (module docs of the crate's
/// `dedicated.rs` and `front.rs`): the first 64 caches alive at once get one; a cache built
/// while 64 others live takes its lock on every call. A thread's first 8 allocations from a
/// cache take the lock too (its front opens after them), and so do its first 64 frees while
/// it has not allocated from the cache (objects other threads allocated go home).
///
/// Invariant: `at == FrontAt::of(front)`, `accounted_key == front::accounted_key(core)` and
/// `owner == core.layout.owner_steps()` (all set together, in `Cache::with_core`).
pub struct Cache {
    pub(crate) core: &'static SlabCache,
    /// This cache's index in every thread's fronts (`front::NO_FRONT`: none).
    pub(crate) front: u32,
    /// Where that index's bin lies in a thread cache, for the fast paths.
    pub(crate) at: FrontAt,
    /// `front::accounted_key(core)` and the core's owner steps, copied here for a
    /// `CacheBox`'s free (`free_owned`), which reloads this handle from memory: the key saves
    /// an `or` on the core's address, the steps a load through the core to its layout before
    /// the owner word. A plain cache has them too: no front is ever tagged with its accounted
    /// key, as no accounted core has a plain core's address. (`alloc` and `free` compute the
    /// key from the core: using the copy there, `Cache`'s pair in a tenant measured
    /// 1.14x-1.16x of Box against 1.06x-1.09x, three alternated `dedicated_front` runs.)
    accounted_key: usize,
    owner: OwnerSteps,
    name: String,
    /// Where tenant stats count this cache's objects.
    stat: StatIdx,
}

/// Stat indices left after the size classes go to the first accounted dedicated caches, so
/// `tenant.stat()` shows `slab_cache_<cache name>` for each and counts their owner metadata
/// (registered before the index is handed out, so before any charge lands on it); later
/// caches share `SLAB_OTHER` (counted in `slab` only).
fn stat_index(name: &str, layout: &SlabLayout) -> StatIdx {
    use core::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(crate::size_class::NUM_CLASSES);
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    if i < hooks::MAX_SLAB_CLASSES && hooks::set_slab_name(StatIdx::slab(i), name) {
        hooks::set_slab_meta(StatIdx::slab(i), crate::class_caches::owner_meta(layout));
        StatIdx::slab(i)
    } else {
        StatIdx::SLAB_OTHER
    }
}

impl Cache {
    /// The handle of a built or revived core, with a front index when one is free.
    fn with_core(core: &'static SlabCache, name: String, stat: StatIdx) -> Cache {
        let front = front::claim(core);
        Cache {
            core,
            front,
            at: FrontAt::of(front),
            accounted_key: front::accounted_key(core),
            owner: core.layout.owner_steps(),
            name,
            stat,
        }
    }

    /// Starts configuring a cache for objects of `layout` (kmem_cache_create).
    pub fn builder(name: &str, layout: Layout) -> CacheBuilder {
        // The name lives as long as the cache: like the cache's core, no tenant pays for it.
        let _root = hooks::unscoped();
        CacheBuilder {
            name: name.to_owned(),
            layout,
            hwcache_align: false,
            account: false,
        }
    }

    /// The name the cache was built with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cache's geometry.
    pub fn info(&self) -> CacheInfo {
        let l = &self.core.layout;
        CacheInfo {
            object_size: l.object_size,
            stride: l.stride,
            align: l.align,
            slab_bytes: l.slab_bytes(),
            objects_per_slab: l.objects,
            leftover_bytes: l.leftover,
            meta: l.meta,
            meta_cost_slots: l.meta_cost_slots,
        }
    }

    /// Objects handed out and not yet freed: slots that left the slabs, less those waiting
    /// in the parked batches and in every thread's front (exact when no other thread uses
    /// the cache meanwhile).
    pub fn live_objects(&self) -> usize {
        let k = &self.core.counters;
        let (in_fronts, _) = thread_cache::front_counts(self.core);
        k.used
            .load(Ordering::Relaxed)
            .saturating_sub(k.transfer.load(Ordering::Relaxed) + in_fronts)
    }

    /// Tests: this cache's front index (None: it has no front, `front::NO_FRONT`).
    #[doc(hidden)]
    pub fn front_index(&self) -> Option<u32> {
        front::is_front(self.front).then_some(self.front)
    }

    /// Tests: slots of this cache in every live thread's fronts.
    #[doc(hidden)]
    pub fn slots_in_fronts(&self) -> usize {
        thread_cache::front_counts(self.core).0
    }

    /// Tests: the dedicated-cache front slow paths (any cache's) the calling thread has
    /// taken; a pair that stays on the fast paths leaves it unchanged.
    #[doc(hidden)]
    pub fn front_slow_paths_on_this_thread() -> u64 {
        thread_cache::with(|tc| tc.front_slow_paths())
    }

    /// Tests: slots of this cache in the calling thread's front.
    #[doc(hidden)]
    pub fn slots_in_my_front(&self) -> usize {
        thread_cache::with(|tc| {
            let f = tc.front(self.front);
            if f.is_of(self.core) {
                (f.bin.count() + f.kept.count()) as usize
            } else {
                0
            }
        })
    }

    /// Tests: slots of this cache the calling thread's front keeps charged to its object
    /// stock's tag (`front.rs`).
    #[doc(hidden)]
    pub fn kept_in_my_front(&self) -> usize {
        thread_cache::with(|tc| {
            let f = tc.front(self.front);
            if f.is_of(self.core) {
                f.kept.count() as usize
            } else {
                0
            }
        })
    }

    /// Tests: the cache's slabs with at least one slot handed out.
    #[doc(hidden)]
    pub fn active_slabs(&self) -> usize {
        self.core.counters.active_slabs.load(Ordering::Relaxed)
    }

    /// Allocates one object, charged to the current tenant if the cache is accounted. None
    /// when the tenant's limit refuses or memory is exhausted.
    #[inline(always)]
    pub fn alloc(&self) -> Option<NonNull<u8>> {
        // One compare of the front's tag tells both whose front it is and whether the cache
        // is accounted (`front::key`): no flag is loaded on the way to the pop.
        let key = thread_cache::with(|tc| tc.front_at(self.at).key());
        if key == front::accounted_key(self.core) {
            return self.alloc_accounted(true);
        }
        if key == front::plain_key(self.core) {
            let p = thread_cache::with(|tc| tc.front_at(self.at).bin.pop());
            if !p.is_null() {
                // SAFETY: just tested.
                return Some(unsafe { NonNull::new_unchecked(p) });
            }
        } else if self.core.id.accounted {
            return self.alloc_accounted(false);
        }
        NonNull::new(init::front_alloc_slow(self.front, self.core))
    }

    /// [`alloc`](Self::alloc) of an accounted cache: a slot the object stock kept charged to
    /// the current tenant (`front.rs`), else charge (byte stock), pop, owner word. `own`:
    /// the caller saw this thread's front tagged with this cache (no kept slot to take
    /// otherwise).
    #[inline(always)]
    fn alloc_accounted(&self, own: bool) -> Option<NonNull<u8>> {
        let cg = hooks::current_objcg();
        if own && cg != 0 {
            // The front is this cache's (the caller's compare): the kept pop needs no other.
            match thread_cache::with(|tc| tc.stock.pop(&tc.front_at(self.at).kept, cg)) {
                // SAFETY: a popped slot is not null.
                Pop::Hit(p) => return Some(unsafe { NonNull::new_unchecked(p) }),
                Pop::Empty => {}
                Pop::Foreign(p) => {
                    // SAFETY: p was just popped from this front's kept bin as Foreign.
                    if let Some(q) = unsafe { self.put_back_kept(cg, p) } {
                        return Some(q);
                    }
                }
            }
        }
        self.alloc_charging(cg)
    }

    /// The kept bin held a slot but the object stock's tag is not the current tenant `cg` (or
    /// a drainer has been at it): the slot goes back. When the tag's tenant died, its kept
    /// objects may be handed to `cg` in place first (`object_stock::transfer_on_miss`: the
    /// first allocation of a request's new tenant takes one of the previous request's
    /// objects, as a size class's does); then the kept slot it pops, else None (charge).
    ///
    /// # Safety
    /// `p` must have just been popped from this cache's front's kept bin for `cg` as
    /// `Pop::Foreign` (`ObjectStock::pop`, or `front_kept_pop`).
    #[cold]
    #[inline(never)]
    unsafe fn put_back_kept(&self, cg: u32, p: *mut u8) -> Option<NonNull<u8>> {
        // SAFETY: caller's contract.
        thread_cache::with(|tc| unsafe { tc.front_put_back(self.at, p) });
        if !thread_cache::with(|tc| tc.transfer_on_miss(cg)) {
            return None;
        }
        match thread_cache::with(|tc| tc.front_kept_pop(self.at, self.core, cg)) {
            // SAFETY: a popped slot is not null.
            Pop::Hit(q) => Some(unsafe { NonNull::new_unchecked(q) }),
            Pop::Empty => None,
            Pop::Foreign(q) => {
                // SAFETY: q is what front_kept_pop just returned as Foreign.
                thread_cache::with(|tc| unsafe { tc.front_put_back(self.at, q) });
                None
            }
        }
    }

    /// The accounted allocation that charges `cg` (0: outside every tenant, nothing): byte
    /// stock, pop from the uncharged front, owner word; then, as a size class's charging
    /// allocation does, tells the object stock it missed (`note_miss`), so that a thread
    /// working in one tenant tags its stock for it and its frees start keeping slots.
    #[inline(always)]
    fn alloc_charging(&self, cg: u32) -> Option<NonNull<u8>> {
        let size = self.core.layout.object_size;
        // SAFETY: cg is this thread's current scope, just read.
        if cg != 0 && !unsafe { hooks::charge(cg, size, self.stat) } {
            return None;
        }
        let key = front::accounted_key(self.core);
        let mut p = thread_cache::with(|tc| tc.front_at(self.at).pop_of(key));
        if p.is_null() {
            p = init::front_alloc_slow(self.front, self.core);
            if p.is_null() {
                // SAFETY: the `size` bytes just charged to cg, given back unused.
                unsafe { self.uncharge(cg, size) };
                return None;
            }
        }
        self.set_owner(p, cg);
        if cg != 0 {
            thread_cache::with(|tc| tc.note_charged(cg));
        }
        // SAFETY: just tested.
        Some(unsafe { NonNull::new_unchecked(p) })
    }

    /// Frees an object of this cache, on any thread.
    ///
    /// # Safety
    /// `ptr` must come from this cache's `alloc`/`alloc_bulk` and not be freed already.
    #[inline(always)]
    pub unsafe fn free(&self, ptr: NonNull<u8>) {
        let p = ptr.as_ptr();
        // As in `alloc`, one compare of the front's tag says whose front and which kind.
        let key = thread_cache::with(|tc| tc.front_at(self.at).key());
        if key == front::accounted_key(self.core) {
            // Kept charged when its owner is the object stock's tag (`front.rs`), once p is
            // seen to be a slot start in a segment of this cache (anything else goes to the
            // checked path, which reports it before any owner word is read or written).
            // SAFETY: caller's contract: p is a live slot of this cache.
            if let Some(w) = unsafe { self.core.owner_word_if_slot(p) } {
                // SAFETY: the word of p's slot, which lives as long as the cache's segments.
                let owner = unsafe { (*w).load(Ordering::Relaxed) };
                // SAFETY: as above; p is charged to `owner` (its word says so), given up, and
                // the kept bin is this cache's (the compare above).
                if unsafe {
                    thread_cache::with(|tc| tc.stock.push(&tc.front_at(self.at).kept, owner, p))
                } {
                    return;
                }
            }
            // SAFETY: caller's contract.
            return unsafe { self.free_uncharging(p) };
        }
        if key == front::plain_key(self.core) {
            // SAFETY: the caller gives up p, a slot of this plain cache, whose front this is
            // (validated when the front flushes it, as a size class's bin).
            if unsafe { thread_cache::with(|tc| tc.front_at(self.at).bin.push(p)) } {
                return;
            }
        } else if self.core.id.accounted {
            // Another cache's front (or none) on this thread: nowhere to keep the slot; the
            // uncharging free checks p before it touches its owner word.
            // SAFETY: caller's contract.
            return unsafe { self.free_uncharging(p) };
        }
        // SAFETY: as above; the slow path handles a full bin, another cache's front and a
        // double free at the bin's head.
        unsafe { init::front_free_slow(p, self.front, self.core) }
    }

    /// [`free`](Self::free) of a slot whose provenance the caller's types guarantee
    /// (`CacheBox`: only `TypedCache::alloc` makes one, and it frees its slot once): the kept
    /// free reads the owner word from the cache's layout without the checks an arbitrary
    /// pointer gets (the segment header, the slot boundary).
    ///
    /// # Safety
    /// `ptr` must come from this cache's `alloc` and not be freed already.
    #[inline(always)]
    pub(crate) unsafe fn free_owned(&self, ptr: NonNull<u8>) {
        if cfg!(feature = "hardened") {
            // Hardened builds check every free, a box's too (memory corruption may reach it).
            // SAFETY: caller's contract.
            return unsafe { self.free(ptr) };
        }
        let p = ptr.as_ptr();
        // One push for both kinds of cache: an unaccounted cache's slot into the front's
        // bin, an accounted cache's into its kept bin when the slot is charged to the object
        // stock's tag; anything else (an accounted slot of another tenant or of none, a full
        // bin, another cache's front) takes one out-of-line call. Two inlined copies of the
        // push made a `CacheBox`'s drop glue big enough that LLVM called it rather than
        // inlining it wherever a program dropped boxes of a type in more than one place.
        // The front's tag is compared with the key of this cache if accounted, then with the
        // plain one: the match says both whose front it is and which bin (`front::key`).
        debug_assert_eq!(self.accounted_key, front::accounted_key(self.core));
        debug_assert_eq!(self.owner, self.core.layout.owner_steps());
        debug_assert!(self
            .core
            .layout
            .slot_start(p as usize & self.core.layout.slab_mask)
            .is_some());
        let kept = thread_cache::with(|tc| {
            let f = tc.front_at(self.at);
            let key = f.key();
            let bin = if key == self.accounted_key {
                // SAFETY: p is a slot start of this accounted cache (caller's contract), whose
                // layout gave `self.owner`; its word lives as long as the cache's segments.
                let owner = unsafe { (*self.owner.word_of(p)).load(Ordering::Relaxed) };
                if !tc.stock.keeps(owner) {
                    return false;
                }
                &f.kept
            } else if key == front::plain_key(self.core) {
                &f.bin
            } else {
                return false;
            };
            // SAFETY: caller's contract: p is a live slot of this cache, given up; a kept
            // one is charged to the tag (just checked), as the kept bin's slots are.
            unsafe { bin.push(p) }
        });
        if !kept {
            // SAFETY: caller's contract.
            unsafe { self.free_owned_slow(p) }
        }
    }

    /// [`free_owned`](Self::free_owned) when the front did not take the slot: the front is
    /// another cache's, the bin is full or headed by `p` (a double free), or the slot is
    /// charged to a tenant other than the object stock's tag. Nothing since the fast path's
    /// check can make a push succeed now (a drainer only makes the tag refuse), so this goes
    /// straight to what `free` does after its push: the front's slow path, or the uncharging
    /// free (which reports a double free at the kept bin's head).
    ///
    /// # Safety
    /// As [`free_owned`](Self::free_owned).
    #[cold]
    #[inline(never)]
    unsafe fn free_owned_slow(&self, p: *mut u8) {
        if self.core.id.accounted {
            // SAFETY: caller's contract.
            unsafe { self.free_uncharging(p) }
        } else {
            // SAFETY: caller's contract; the front's slow path handles a full bin, a bin of
            // another cache and a double free at its head.
            unsafe { init::front_free_slow(p, self.front, self.core) }
        }
    }

    /// The accounted free that uncharges the owner (any but the tag's tenant, or no room
    /// kept), clears the owner word and puts the slot in the uncharged front.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    unsafe fn free_uncharging(&self, p: *mut u8) {
        // The kept push refuses a slot that already heads the kept bin: a double free.
        if thread_cache::with(|tc| tc.front_kept_is_head(self.at, p)) {
            crate::sys::fatal(
                "double free of a dedicated cache's object (the slot is already the first kept slot of this thread)",
            );
        }
        self.release_owner(p);
        // SAFETY: caller's contract; the slot is uncharged now.
        unsafe { self.free_to_front(p) };
        // A drainer may be why the slot was not kept: give back what it left in the bins.
        thread_cache::with(|tc| {
            if tc.must_reclaim() {
                tc.reclaim();
            }
        });
    }

    /// Puts the uncharged slot `p` of this accounted cache in this thread's front, or through
    /// its slow path.
    ///
    /// # Safety
    /// `p` must be a slot of this cache that nobody uses any more, uncharged.
    #[inline(always)]
    unsafe fn free_to_front(&self, p: *mut u8) {
        debug_assert!(self.core.id.accounted);
        // SAFETY: caller's contract.
        if unsafe { thread_cache::with(|tc| tc.front_at(self.at).push_of(self.accounted_key, p)) } {
            return;
        }
        // SAFETY: as above.
        unsafe { init::front_free_slow(p, self.front, self.core) }
    }

    /// Gives back `bytes` charged to `cg` (0: nothing was charged).
    ///
    /// # Safety
    /// As `hooks::uncharge`: `bytes` charged to `cg` for this cache must be outstanding.
    #[inline(always)]
    pub(crate) unsafe fn uncharge(&self, cg: u32, bytes: usize) {
        if cg != 0 {
            // SAFETY: caller's contract.
            unsafe { hooks::uncharge(cg, bytes, self.stat) };
        }
    }

    #[inline(always)]
    pub(crate) fn set_owner(&self, p: *mut u8, cg: u32) {
        if self.core.id.accounted {
            // SAFETY: p is a slot of this accounted cache.
            unsafe { (*owner_word(p)).store(cg, Ordering::Relaxed) };
            if cg != 0 {
                thread_cache::count_charged(self.at, self.core, 1);
            }
        }
    }

    /// Clears the owner of `p` and uncharges it.
    #[inline(always)]
    pub(crate) fn release_owner(&self, p: *mut u8) {
        if self.core.id.accounted {
            // The owner address comes from p: a pointer that is not a slot start of this
            // cache (another cache's, into a header, a slab's tail or the middle of a slot)
            // is reported by the check before anything is written.
            let w = self.core.checked_owner_word(p);
            // Only the thread that frees the slot touches its word: a load and a store, no
            // read-modify-write.
            let cg = w.load(Ordering::Relaxed);
            if cg != 0 {
                w.store(0, Ordering::Relaxed);
                thread_cache::count_charged(self.at, self.core, -1);
                // SAFETY: an object of this cache is charged object_size to the owner its
                // word recorded, which was just cleared (a second free finds 0: no uncharge).
                unsafe { self.uncharge(cg, self.core.layout.object_size) };
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // This thread's front slots go back now; other threads' lazily (module docs). The
        // index is free for the next cache once released; a thread whose bin still holds
        // this core's slots flushes them on its first slow path there (the tag differs).
        thread_cache::flush_front(self.front, self.core);
        front::release(self.front);
        self.core.trim();
        // Release: the next build of the same cache that claims the core (Acquire) sees
        // everything this handle did to it.
        self.core.retired.store(true, Ordering::Release);
    }
}

impl core::fmt::Debug for Cache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cache")
            .field("name", &self.name)
            .field("info", &self.info())
            .finish()
    }
}
