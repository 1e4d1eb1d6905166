//! What the allocator registers with the accounting, once, at its initialisation (the first
//! registration of each wins), and the calls through them. Below every layer that calls
//! them, so that none of those imports the façade (`hooks` re-exports the setters). Reading
//! a `OnceLock` is one acquire load; neither reading nor setting allocates.

use std::sync::OnceLock;

use crate::types::{ObjCgId, ObjectDrain, Unscoped};

static ROOT_SOURCE: OnceLock<fn() -> Unscoped> = OnceLock::new();
static ON_ACTIVATE: OnceLock<fn()> = OnceLock::new();
static OBJECT_DRAIN: OnceLock<fn(ObjectDrain)> = OnceLock::new();
static ON_DEATH: OnceLock<fn(ObjCgId)> = OnceLock::new();

/// Registers the allocator's count of unscoped bytes, added to `Tenant::root().current()`
/// and to the root's `stat()` (`slab` and `large`).
pub fn set_root_usage_source(f: fn() -> Unscoped) {
    let _ = ROOT_SOURCE.set(f);
}

pub(crate) fn root_unscoped() -> Unscoped {
    ROOT_SOURCE.get().map_or(Unscoped::default(), |f| f())
}

pub(crate) fn root_usage() -> u64 {
    let u = root_unscoped();
    u.slab.saturating_add(u.large)
}

/// Registers what the allocator must do before the first charged allocation can exist. It is
/// called in user context when the first tenant scope is entered; every `enter()` that starts
/// before one call has finished makes the call itself, so it may run several times, even at
/// once (it must be idempotent), and no scope is entered before it has finished. The
/// allocator uses it to tell every thread that frees may now meet accounted objects. The
/// function must not allocate or panic.
pub fn set_on_activate(f: fn()) {
    let _ = ON_ACTIVATE.set(f);
}

pub(crate) fn on_activate() {
    if let Some(f) = ON_ACTIVATE.get() {
        f();
    }
}

/// Registers the allocator's drain of pre-charged objects it caches per thread (objects
/// kept charged to a tenant between a free and the next allocation, an object stock). Every
/// drain of the stocks (`current_exact`, `drain_all_stocks`, a charge about to fail, the
/// idle-stock decay) calls it first, saying which threads' object stocks it needs
/// ([`ObjectDrain`]), so those bytes are given back before the byte stocks are drained. The function must
/// follow the hooks' rules: no allocation, no panic; it may call `uncharge`.
pub fn set_object_drain(f: fn(ObjectDrain)) {
    let _ = OBJECT_DRAIN.set(f);
}

pub(crate) fn object_drain(which: ObjectDrain) {
    if let Some(f) = OBJECT_DRAIN.get() {
        f(which);
    }
}

/// Registers what the allocator must do when a tenant dies: it is called with the dead
/// tenant's own objcg id on the thread that dropped its last handle (user code, or a
/// reclaim callback that a charge ran), with no lock of the accounting held, once the
/// objcg points at the parent, so that charges given back then land where the dead
/// tenant's were moved, and before the objcg's alive ref goes, so that the id names no
/// other tenant during the call. The allocator gives back the charged free objects it
/// kept for that tenant's next allocations, which nobody makes any more. The function must
/// follow the hooks' rules: no allocation, no panic; it may call `uncharge`.
pub fn set_on_death(f: fn(ObjCgId)) {
    let _ = ON_DEATH.set(f);
}

pub(crate) fn on_death(id: ObjCgId) {
    if let Some(f) = ON_DEATH.get() {
        f(id);
    }
}
