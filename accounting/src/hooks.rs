//! What the allocator calls: the public façade between `slabcg-allocator` and this crate
//! (two crates of one project, so the interface is public, but it is the allocator's, not
//! an application's; applications use [`Tenant`](crate::Tenant) and its scopes). Besides
//! the allocator's calls it holds two process-wide knobs for probes and operators:
//! [`set_idle_decay`] (switch the background decay of idle stocks off, as tests that look at
//! idle threads' stocks do) and [`remote_barrier_kind`] (which barrier drains use).
//! Test-only probes of the internals are in the hidden `testing` module, not here.
//!
//! `charge`/`uncharge` are the fast paths: one TLS stock, a handful of plain loads and
//! stores, no atomic read-modify-write, no shared cache line; everything else is behind a
//! `#[cold] #[inline(never)]` call.
//!
//! They may be called from inside the global allocator, before `main`, from thread-local
//! destructors and after this thread's stock was given back at exit (then the counters are
//! used directly). They never allocate, panic or unwind, except through a tenant's reclaim
//! callback, which runs outside every stock critical section and never nests on a thread.
//!
//! A façade, the top layer: it forwards to the files that do the work and re-exports the
//! shared types (`types.rs`) and the registration functions (`callbacks.rs`); no file of
//! the crate imports it.

use core::sync::atomic::Ordering;

use crate::charge;
use crate::scope;
use crate::stock::{self, Pool};
use crate::tenant::LADDER;

pub use crate::callbacks::{
    set_object_drain, set_on_activate, set_on_death, set_root_usage_source,
};
pub use crate::drain::{fork_parent, fork_prepare};
pub use crate::types::{ObjCgId, ObjectDrain, SlabMeta, StatIdx, Unscoped, MAX_SLAB_CLASSES};

/// The objcg id of this thread's current scope, 0 when none. A single TLS load.
#[inline(always)]
pub fn current_objcg() -> ObjCgId {
    scope::current_objcg()
}

/// True once any tenant scope was ever entered, so the allocator's free path can skip
/// owner lookups until accounting is in use.
#[inline(always)]
pub fn accounting_active() -> bool {
    scope::ACTIVE.load(Ordering::Relaxed)
}

/// Charges `n` bytes to objcg `id` (!= 0). `false` = refused after draining every stock and
/// running the refusing tenant's reclaim callback (`events.max`/`events.oom` counted).
///
/// # Safety
/// The objcg must stay alive during the call: `id` is the calling thread's current scope
/// (`current_objcg`), or the objcg of a tenant the caller holds a handle on, or one the
/// caller holds charged bytes of (a live object's owner). A dead objcg's id may be freed or
/// recycled meanwhile, and the charge would then touch a released tenant node.
#[inline(always)]
pub unsafe fn charge(id: ObjCgId, n: usize, idx: StatIdx) -> bool {
    debug_assert!(id != 0, "charge of objcg 0");
    stock::consume(id, Pool::Objects, n as u64, idx) || charge_cold(id, n as u64, idx)
}

#[cold]
#[inline(never)]
fn charge_cold(id: ObjCgId, n: u64, idx: StatIdx) -> bool {
    charge::charge_slow(id, Pool::Objects, n, idx, &LADDER).is_ok()
}

/// Uncharges `n` bytes previously charged to `id` (!= 0), on any thread.
///
/// # Safety
/// `n` bytes charged to `id` with [`charge`] for `idx` must be outstanding, and the caller
/// gives them up. Each byte charged that way holds a reference that keeps the objcg (and the
/// tenant node it names) alive; this drops them, so uncharging bytes that were not charged
/// could free the objcg while objects still name it. (`Tenant::uncharge` is the safe API.)
#[inline(always)]
pub unsafe fn uncharge(id: ObjCgId, n: usize, idx: StatIdx) {
    debug_assert!(id != 0, "uncharge of objcg 0");
    charge::uncharge(id, Pool::Objects, n as u64, idx);
}

/// Turns `old` bytes charged to `id` (!= 0) for `old_idx` into `new` bytes for `new_idx`,
/// `new <= old`, without going through a limit: for an object whose contents move to a
/// smaller slot (a shrinking `realloc`), which must succeed in a tenant at its limit. Does
/// nothing when `new > old`.
///
/// # Safety
/// As [`uncharge`] for the `old` bytes: they are outstanding, and the caller's object holds
/// them; afterwards it holds the `new` bytes, which a later [`uncharge`] for `new_idx`
/// gives back.
pub unsafe fn shrink_charge(
    id: ObjCgId,
    old: usize,
    old_idx: StatIdx,
    new: usize,
    new_idx: StatIdx,
) {
    debug_assert!(id != 0, "shrink of objcg 0");
    if new <= old {
        charge::shrink(id, old as u64, old_idx, new as u64, new_idx);
    }
}

/// Enters `tenant`'s scope on this thread until the returned guard drops, taking no handle
/// of its own (the caller's keeps the tenant alive for the guard's life): for the
/// allocator's `TenantAlloc`, which enters its tenant around every allocation. Costs the
/// thread-local stores of a scope frame, like a poll of a `Scoped` future; nests like
/// `Tenant::enter`, and the guard is `!Send`. Never allocates or panics.
#[inline]
pub fn enter_borrowed(tenant: &crate::Tenant) -> impl Drop + '_ {
    crate::scope::enter_borrowed(tenant)
}

/// Registers the byte sizes of the allocator's size classes (for `slab_<size>` lines).
pub fn set_slab_class_sizes(sizes: &'static [u32]) {
    crate::report::set_class_sizes(sizes);
}

/// While the returned guard lives, this thread's allocations belong to the root, as outside
/// any scope (they are never refused). For the allocator's own long-lived bookkeeping made
/// on a user's call (a dedicated cache's core), which no tenant should pay for, and which
/// would abort the process if the caller's tenant were full. User context only.
#[must_use = "the root scope ends when the guard is dropped"]
pub fn unscoped() -> impl Drop {
    crate::scope::unscoped()
}

/// The tenant tree's lock, which the fork handlers hold across a fork: for the allocator's
/// user-context bookkeeping that a fork child must not inherit half-done (registering a
/// dedicated cache). Takes the root scope too. User context only; not re-entrant.
pub fn lifecycle_lock() -> LifecycleLock {
    LifecycleLock {
        _guard: crate::tree::tree_lock(),
    }
}

/// Holds [`lifecycle_lock`] until dropped.
#[must_use = "the lock is released when the guard is dropped"]
pub struct LifecycleLock {
    _guard: crate::tree::TreeGuard,
}

/// Names slab stat index `idx` (one not used by a size class), so reports print
/// `slab_cache_<name>` for it (the name made a single word, and made unique with
/// `_<idx>` when another cache has it); the allocator gives each dedicated cache its own
/// index this way. The first name given to an index wins; false when `idx` is out of range
/// or taken. User context (it allocates and takes the tenant tree lock).
pub fn set_slab_name(idx: StatIdx, name: &str) -> bool {
    crate::report::set_slab_name(idx.0 as usize, name)
}

/// Registers the owner-metadata geometry of slab stat index `idx` (a size class, or a
/// dedicated cache named with [`set_slab_name`]). Call it before anything is charged at
/// `idx`; the first registration wins. Indexes never registered report no owner metadata.
/// False when `idx` is not a slab class index or is taken, when `object_size` or
/// `objects_per_slab` is 0, or when a field is above 2^21 - 1 (a slab is at most 1 MiB, so
/// every real layout fits). Never allocates or panics.
pub fn set_slab_meta(idx: StatIdx, meta: SlabMeta) -> bool {
    crate::report::set_slab_meta(idx.0 as usize, meta)
}

/// Fork support, in the child after `fork`: only the forking thread survives, so every other
/// thread's stock gives its pre-charged bytes back, the background thread is spawned again
/// when next needed, and the objcgs forget the readers that were in flight at the fork.
pub fn fork_child() {
    crate::drain::fork_child();
    crate::oom::fork_child();
    crate::objcg::fork_child();
    crate::counter::fork_child();
}

/// Fork support, first of all prepare handlers: takes the tenant tree's and the objcg id
/// allocator's locks (and builds the root tenant if no thread has), so that a child never
/// inherits them held by a thread that is gone. Their holders allocate, so they come before
/// the allocator's own locks and [`fork_prepare`]. Pair with [`fork_release_tenants`] last
/// in both the parent and the child handler. Allocates (as the root) only the first time,
/// if no tenant was ever used.
pub fn fork_prepare_tenants() {
    crate::tree::lock_for_fork();
}

/// Fork support: releases what [`fork_prepare_tenants`] took, last in the parent and in the
/// child handler.
pub fn fork_release_tenants() {
    crate::tree::unlock_after_fork();
}

/// Moves free objects kept charged (an object stock's) from objcg `from` to objcg `to`
/// without a round trip through every level: only the tenants below the two sides' lowest
/// common ancestor change, the `to` side checking its limits. `parts` lists the bytes per
/// stat index. False, with nothing changed, when a limit refuses. Not a fast path (a few
/// atomics per tenant and stat index moved); never allocates or panics.
///
/// # Safety
/// The `parts` bytes are outstanding charges of `from` held by the caller's objects (each a
/// ref on `from`), which afterwards the caller holds charged to `to` (it must record `to`
/// as their owner); `to` is the calling thread's current scope, or otherwise kept alive.
pub unsafe fn transfer_charge(from: ObjCgId, to: ObjCgId, parts: &[(StatIdx, u64)]) -> bool {
    crate::charge::transfer(from, to, parts)
}

/// Whether the tenant objcg `id` was made for is still alive (its death has not started).
/// False once it is dying or dead: no allocation will be charged to `id` again, so an object stock keeping
/// `id`'s freed objects can give them back at once instead of waiting for them to be
/// reused. Not a fast path (two atomic read-modify-writes on the objcg); never allocates
/// or panics.
///
/// # Safety
/// The caller holds bytes charged to `id` (a live object, or slots kept charged) for the
/// call, so the objcg cannot be freed meanwhile.
pub unsafe fn objcg_tenant_alive(id: ObjCgId) -> bool {
    // SAFETY: the caller's contract.
    unsafe { crate::objcg::creator_alive(id) }
}

/// Tells the accounting that this thread's object stock is about to keep freed objects of
/// `id` charged (it is retagging for `id`): a refused charge of that tenant must drain
/// stocks again. Call it just before the tag is set, under the lock a drain of that object
/// stock takes. Not a fast path; never allocates or panics.
///
/// # Safety
/// `id` is the objcg of the calling thread's current scope (its tenant is alive), or the
/// caller holds bytes charged to `id` for the call (their refs keep the objcg alive).
pub unsafe fn note_object_stock(id: ObjCgId) {
    if let Some(oc) = crate::objcg::lookup(id) {
        crate::charge::note_stocked(oc);
    }
}

/// Whether this thread's stock holds a slot for `id` now (a share of the stock budget for
/// it): the allocator's object stock keeps a tenant's freed objects only then, so that it
/// follows the same budget. A plain read of this thread's stock; never allocates.
pub fn stock_holds(id: ObjCgId) -> bool {
    crate::stock::holds(id)
}

/// Switches the idle-stock decay on (the default) or off. With more threads holding stocks
/// than four per CPU, a background thread gives back, every 100 ms, the stocks of threads
/// whose slow paths have not run since the previous pass, so that what stocks hold
/// pre-charged follows the threads that are busy, not all of them. Off, stocks of idle
/// threads keep their bytes until a drain (a refused charge, `current_exact()`, `stat()`).
/// Tests that look at idle threads' stocks switch it off.
pub fn set_idle_decay(on: bool) {
    crate::drain::set_decay(on);
}

/// Called by the allocator's object drain (inside every drain of all stocks) when it may
/// have left charged objects for the next drain to find: it marked a thread drained, whose
/// racing free may still push, or it found such a push. That drain then counts as
/// incomplete, so the next refused charge drains again instead of skipping.
pub fn note_object_drain_unsettled() {
    crate::drain::note_unsettled();
}

/// Forces a full memory barrier on every other running thread (membarrier, or the
/// `mprotect` fallback on x86-64; see `sys.rs`), for the allocator's object stock, whose
/// drainer pairs it with the owner's compiler fence as the byte stocks do (see `drain.rs`).
/// `false` when the OS offers no way: then only the caller's own thread may be drained.
pub fn remote_barrier() -> bool {
    crate::sys::remote_barrier()
}

/// Reads the accounting's settings from the environment (`SLABCG_MEMBARRIER=0` switches
/// `membarrier` off). The allocator calls it at its first allocation, normally before `main`
/// and before any other thread could call `setenv`; otherwise the first drain reads them.
pub fn read_environment() {
    crate::sys::read_environment()
}

/// Which process-wide barrier drains use: `"membarrier-private-expedited"`,
/// `"membarrier-global"`, `"mprotect"` (x86-64 without membarrier) or `"none"` (then a
/// drain empties only the calling thread's stocks).
pub fn remote_barrier_kind() -> &'static str {
    crate::sys::remote_barrier_kind()
}

/// The drainer's wait for an owner to leave its critical section (`in_cs`), after the
/// barrier: spins briefly, since the section is a few instructions, then yields, since its
/// owner may have been preempted inside it.
pub fn wait_out(in_cs: &crate::sys::sync::AtomicBool) {
    crate::stock::wait_out(in_cs)
}

/// The owner's side of the same protocol: put it between the owner's `in_cs` store and its
/// load of the drainer's request (a compiler fence; a real fence under Miri).
#[inline(always)]
pub fn light_barrier() {
    crate::sys::light_barrier()
}
