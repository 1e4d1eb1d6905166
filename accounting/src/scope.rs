//! The current tenant of a thread: a const-initialised `Cell<u32>` thread-local holding the
//! objcg id of the innermost entered scope (0 = root / unscoped), the `enter()` guard, and
//! the root scope ([`unscoped`]) that the library's own bookkeeping runs in. Below every
//! layer that needs the root scope; it knows the tenant handle only as the type a guard
//! keeps alive (`node.rs`), but dropping the last one runs `Drop for Tenant` (tenant.rs).
//! `current_tenant` is in `tenant.rs`.

use core::cell::Cell;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::callbacks;
use crate::node::Tenant;
#[cfg(feature = "ie-tls")]
use crate::sys::fast_tls::{self, Word};
use crate::types::ObjCgId;

thread_local! {
    static CURRENT: Cell<ObjCgId> = const { Cell::new(0) };
    /// The token of the innermost live scope guard (0: none) and the last token handed out
    /// on this thread: a guard restores the scope before it only if it is the innermost.
    static TOP: Cell<u64> = const { Cell::new(0) };
    static TOKENS: Cell<u64> = const { Cell::new(0) };
}

/// What a scope guard restores, and whether it may: the scope before it is restored only
/// by the innermost guard (`TOP == token`), so that a guard dropped out of order (or an
/// outer guard dropped after an inner one was forgotten) never brings back the id of a
/// scope whose tenant may be gone.
struct Frame {
    prev: ObjCgId,
    prev_top: u64,
    token: u64,
}

impl Frame {
    #[inline(always)]
    fn push(id: ObjCgId) -> Frame {
        let token = TOKENS.with(|t| {
            let n = t.get() + 1;
            t.set(n);
            n
        });
        let prev = current_objcg();
        set_current(id);
        Frame {
            prev,
            prev_top: TOP.with(|t| t.replace(token)),
            token,
        }
    }

    /// Restores the scope before this one when this is the innermost; false otherwise
    /// (then nothing changes).
    #[inline(always)]
    fn pop(&self) -> bool {
        if TOP.with(Cell::get) != self.token {
            return false;
        }
        TOP.with(|t| t.set(self.prev_top));
        set_current(self.prev);
        true
    }
}

/// A scope guard dropped while a scope entered after it is still active (or was forgotten).
/// The inner guard will restore this guard's tenant when it ends, so that tenant must stay
/// alive: its handle is leaked (sound, and what a forgotten inner guard implies anyway).
/// The thread stays in the inner scopes' tenants, then in this one's. Said once.
#[cold]
#[inline(never)]
fn dropped_out_of_order(tenant: Tenant) {
    static SAID: AtomicBool = AtomicBool::new(false);
    core::mem::forget(tenant);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::sys::warn(
            "slabcg: a tenant scope guard was dropped before a scope entered after it \
             (guards must be dropped in reverse order); its tenant is kept alive, and the \
             thread returns to it when the later scopes end\n",
        );
    }
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
    callbacks::on_activate();
    // Release: a thread that sees it (Acquire below) sees everything the hook did.
    ACTIVATED.store(true, Ordering::Release);
}

/// While alive, this thread's allocations are charged to the entered tenant. Dropping it
/// restores the previous scope; guards must be dropped in reverse order of creation (they
/// are `!Send`, so they cannot leave the thread).
///
/// Dropping guards out of order is a bug in the caller, but not unsound: the guard dropped
/// too early keeps its tenant alive (its handle is leaked), and the thread returns to that
/// tenant when the later scopes end and stays in it; a warning goes to stderr (once per
/// process).
#[must_use = "the scope ends when the guard is dropped"]
pub struct ScopeGuard {
    frame: Frame,
    /// Keeps the tenant (and so its objcg) alive while allocations carry its id; taken on
    /// drop.
    tenant: ManuallyDrop<Tenant>,
    _not_send: PhantomData<*const ()>,
}

pub(crate) fn enter(tenant: Tenant, id: ObjCgId) -> ScopeGuard {
    if id != 0 && !ACTIVATED.load(Ordering::Acquire) {
        activate();
    }
    ScopeGuard {
        frame: Frame::push(id),
        tenant: ManuallyDrop::new(tenant),
        _not_send: PhantomData,
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used afterwards.
        let tenant = unsafe { ManuallyDrop::take(&mut self.tenant) };
        if !self.frame.pop() {
            dropped_out_of_order(tenant);
        }
    }
}

/// A scope entered for one poll of a `Scoped` future (or the drop of its inner future): the
/// future holds the tenant's handle for its whole life, so unlike [`ScopeGuard`] this takes
/// no handle of its own, and entering costs the thread-local stores of a frame.
pub(crate) struct Borrowed<'a> {
    frame: Frame,
    tenant: &'a Tenant,
    _not_send: PhantomData<*const ()>,
}

#[inline(always)]
pub(crate) fn enter_borrowed(tenant: &Tenant) -> Borrowed<'_> {
    let id = tenant.node.objcg();
    if id != 0 && !ACTIVATED.load(Ordering::Acquire) {
        activate();
    }
    Borrowed {
        frame: Frame::push(id),
        tenant,
        _not_send: PhantomData,
    }
}

impl Drop for Borrowed<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.frame.pop() {
            // The inner future left a scope of its own open (a forgotten guard): the thread
            // will come back to this tenant, so it needs a handle of its own.
            dropped_out_of_order(self.tenant.clone());
        }
    }
}

/// While alive, this thread's allocations belong to the root (and are never refused), as
/// outside any scope. The library's own bookkeeping runs under it: a tenant's node and
/// objcg, lists, callbacks, the strings of errors and reports. Charged to whatever scope the
/// caller is in, those infallible allocations would abort the process when that tenant is
/// full, or run its reclaim callback while a lifecycle lock is held.
#[must_use = "the root scope ends when the guard is dropped"]
pub(crate) struct RootScope {
    frame: Frame,
    _not_send: PhantomData<*const ()>,
}

pub(crate) fn unscoped() -> RootScope {
    RootScope {
        frame: Frame::push(0),
        _not_send: PhantomData,
    }
}

impl Drop for RootScope {
    fn drop(&mut self) {
        // Not the innermost only if the caller's code inside (a reclaim callback) left a
        // scope of its own open: the thread stays in that one, which is sound.
        let _ = self.frame.pop();
    }
}

/// The objcg id of this thread's current scope. A single TLS load.
#[inline(always)]
pub(crate) fn current_objcg() -> ObjCgId {
    #[cfg(feature = "ie-tls")]
    if fast_tls::AVAILABLE {
        // The C library's build: an initial-exec word instead of a `__tls_get_addr` call on
        // every allocation. Only `set_current` writes it, always with an objcg id.
        return fast_tls::get(Word::Scope) as ObjCgId;
    }
    CURRENT.with(Cell::get)
}

#[inline(always)]
fn set_current(id: ObjCgId) {
    #[cfg(feature = "ie-tls")]
    if fast_tls::AVAILABLE {
        // SAFETY: this module is the word's client, and `id` comes from its scope protocol
        // (every caller of `set_current`).
        unsafe { fast_tls::set(Word::Scope, id as usize) };
        return;
    }
    CURRENT.with(|c| c.set(id));
}
