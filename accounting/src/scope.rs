//! The current tenant of a thread: a const-initialised `Cell<u32>` thread-local holding the
//! objcg id of the innermost entered scope (0 = root / unscoped), and the `enter()` guard.

use core::cell::Cell;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::objcg::{self, ObjCgId};
use crate::tenant::{self, Tenant};

thread_local! {
    static CURRENT: Cell<ObjCgId> = const { Cell::new(0) };
}

/// Set once any non-root scope was entered; never cleared.
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Set once the allocator's activation hook (`hooks::set_on_activate`) has completed.
static ACTIVATED: AtomicBool = AtomicBool::new(false);

/// The first scope entries: raise `ACTIVE`, run the allocator's hook, then say so. Every
/// entry that has not seen `ACTIVATED` runs the hook itself (it is idempotent), so none
/// returns before one run has finished.
#[cold]
#[inline(never)]
fn activate() {
    ACTIVE.store(true, Ordering::SeqCst);
    crate::hooks::on_activate();
    // Release: a thread that sees it (Acquire below) sees everything the hook did.
    ACTIVATED.store(true, Ordering::Release);
}

/// While alive, this thread's allocations are charged to the entered tenant. Dropping it
/// restores the previous scope; guards must be dropped in reverse order of creation (they
/// are `!Send`, so they cannot leave the thread).
#[must_use = "the scope ends when the guard is dropped"]
pub struct ScopeGuard {
    prev: ObjCgId,
    /// Keeps the tenant (and so its objcg) alive while allocations carry its id.
    _tenant: Tenant,
    _not_send: PhantomData<*const ()>,
}

pub(crate) fn enter(tenant: Tenant, id: ObjCgId) -> ScopeGuard {
    if id != 0 && !ACTIVATED.load(Ordering::Acquire) {
        activate();
    }
    let prev = CURRENT.with(|c| c.replace(id));
    ScopeGuard {
        prev,
        _tenant: tenant,
        _not_send: PhantomData,
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.prev));
    }
}

/// While alive, this thread's allocations belong to the root (and are never refused), as
/// outside any scope. The library's own bookkeeping runs under it: a tenant's node and
/// objcg, lists, callbacks, the strings of errors and reports. Charged to whatever scope the
/// caller is in, those infallible allocations would abort the process when that tenant is
/// full, or run its reclaim callback while a lifecycle lock is held.
#[must_use = "the root scope ends when the guard is dropped"]
pub(crate) struct Unscoped {
    prev: ObjCgId,
    _not_send: PhantomData<*const ()>,
}

pub(crate) fn unscoped() -> Unscoped {
    Unscoped {
        prev: CURRENT.with(|c| c.replace(0)),
        _not_send: PhantomData,
    }
}

impl Drop for Unscoped {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.prev));
    }
}

/// The objcg id of this thread's current scope. A single TLS load.
#[inline(always)]
pub(crate) fn current_objcg() -> ObjCgId {
    CURRENT.with(Cell::get)
}

/// The tenant this thread's allocations are charged to now (the root outside any scope).
pub fn current_tenant() -> Tenant {
    let id = current_objcg();
    if let Some(oc) = objcg::lookup(id) {
        // SAFETY: the live ScopeGuard that set `id` holds a handle, hence the alive ref.
        if let Some(t) = unsafe { oc.tenant() }.and_then(tenant::upgrade) {
            return t;
        }
    }
    Tenant::root()
}
