//! The C tenant API (`capi/include/slabcg.h`): a thin layer over
//! [`slabcg_accounting::Tenant`], with the same semantics.
//!
//! A `slabcg_tenant *` is a boxed [`Tenant`] handle (a tenant lives while any handle or live
//! child does, as in Rust); a `slabcg_scope *` is a boxed [`ScopeGuard`] plus the thread that
//! entered it, since a scope belongs to its thread. Every function returns 0 or a negative
//! errno value (`-EINVAL` for a null handle or bad argument), never aborts for bad input.
//!
//! The library's own allocations here (the boxes, the report text) are made in the root
//! scope (`hooks::unscoped`): made in the caller's tenant, an infallible Rust allocation
//! refused by its `max` would abort the process.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr;

use slabcg_accounting::{hooks, OomPolicy, ScopeGuard, StatItem, Tenant};

/// The C side's `struct slabcg_tenant`: one handle. Transparent, so that the `&Tenant` a
/// reclaim callback gets can be lent to C as a `const slabcg_tenant *` for the call.
#[repr(transparent)]
pub struct CTenant(Tenant);

/// The C side's `struct slabcg_scope`: a live scope and the thread it belongs to.
pub struct CScope {
    guard: ScopeGuard,
    thread: libc::pthread_t,
}

/// What `slabcg_tenant_usage` fills (`struct slabcg_usage` in the header; same layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Bytes charged, including bytes pre-charged into stocks (`Tenant::current`).
    pub current: u64,
    /// Highest `current` seen.
    pub peak: u64,
    /// Hard limit (`u64::MAX`: none).
    pub max: u64,
    /// Soft limit (`u64::MAX`: none).
    pub high: u64,
    /// Charges that left usage above `high` (this tenant and its descendants).
    pub events_high: u64,
    /// Charges refused by `max`.
    pub events_max: u64,
    /// Allocations and charges that failed.
    pub events_oom: u64,
    /// Times the OOM killer picked this tenant (policy Kill).
    pub events_oom_kill: u64,
}

/// `SLABCG_OOM_FAIL`: at `max` the allocation fails (malloc returns null, ENOMEM).
pub const OOM_FAIL: c_int = 0;
/// `SLABCG_OOM_KILL`: at `max` a victim in the subtree is killed and the charge goes through
/// the overdraft.
pub const OOM_KILL: c_int = 1;

const EINVAL: c_int = -libc::EINVAL;

/// The handle behind `t`, or None for null.
///
/// # Safety
/// `t` must be null or a handle from this API that was not dropped.
unsafe fn handle<'a>(t: *const CTenant) -> Option<&'a Tenant> {
    // SAFETY: caller's contract: a live box or null.
    unsafe { t.as_ref() }.map(|c| &c.0)
}

/// Boxes `t` into `*out` (root scope: see the module note).
///
/// # Safety
/// `out` must be valid for a pointer write.
unsafe fn hand_out(t: Tenant, out: *mut *mut CTenant) -> c_int {
    let _root = hooks::unscoped();
    // SAFETY: caller's contract.
    unsafe { *out = Box::into_raw(Box::new(CTenant(t))) };
    0
}

/// A handle on the root tenant in `*out`.
///
/// # Safety
/// `out` must be null (then `-EINVAL`) or valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_root(out: *mut *mut CTenant) -> c_int {
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: out is non-null and writable (caller's contract).
    unsafe { hand_out(Tenant::root(), out) }
}

/// A new tenant named `name` (UTF-8), child of `parent` (null: of the root), in `*out`.
/// `-EINVAL` for a null `out` or `name` or a name that is not UTF-8; `-ENOSPC` when every
/// objcg id is in use.
///
/// # Safety
/// `parent` must be null or a live handle; `name` null or a NUL-terminated string; `out`
/// null or valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_new(
    parent: *const CTenant,
    name: *const c_char,
    out: *mut *mut CTenant,
) -> c_int {
    if out.is_null() || name.is_null() {
        return EINVAL;
    }
    // SAFETY: name is a NUL-terminated string (caller's contract).
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return EINVAL;
    };
    let _root = hooks::unscoped();
    // SAFETY: parent is null or a live handle.
    let child = match unsafe { handle(parent) } {
        Some(p) => p.try_child(name),
        None => Tenant::root().try_child(name),
    };
    match child {
        // SAFETY: out is non-null and writable.
        Ok(t) => unsafe { hand_out(t, out) },
        Err(_) => -libc::ENOSPC,
    }
}

/// Drops a handle. The tenant lives on while other handles, live children or entered scopes
/// hold it; its charged objects stay charged to it (then to its parent) until freed.
///
/// # Safety
/// `t` must be null (then `-EINVAL`) or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_drop(t: *mut CTenant) -> c_int {
    if t.is_null() {
        return EINVAL;
    }
    let _root = hooks::unscoped();
    // SAFETY: a live box from hand_out, dropped once (caller's contract).
    drop(unsafe { Box::from_raw(t) });
    0
}

/// Runs `f` on the handle, or returns `-EINVAL` for null.
///
/// # Safety
/// As [`handle`].
unsafe fn with(t: *const CTenant, f: impl FnOnce(&Tenant) -> c_int) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { handle(t) } {
        Some(t) => f(t),
        None => EINVAL,
    }
}

/// Sets the hard limit in bytes (`SLABCG_UNLIMITED`: none). Ignored on the root.
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_set_max(t: *const CTenant, bytes: u64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            t.set_max(bytes);
            0
        })
    }
}

/// Sets the soft limit in bytes: charges above it succeed but count `events_high`.
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_set_high(t: *const CTenant, bytes: u64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            t.set_high(bytes);
            0
        })
    }
}

/// Sets what happens at `max`: `SLABCG_OOM_FAIL` or `SLABCG_OOM_KILL` (else `-EINVAL`).
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_set_oom_policy(t: *const CTenant, policy: c_int) -> c_int {
    let policy = match policy {
        OOM_FAIL => OomPolicy::Fail,
        OOM_KILL => OomPolicy::Kill,
        _ => return EINVAL,
    };
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            t.set_oom_policy(policy);
            0
        })
    }
}

/// Sets the overdraft: how far above `max` charges may go while a killed victim's work
/// winds down (policy Kill).
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_set_overdraft(t: *const CTenant, bytes: u64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            t.set_overdraft(bytes);
            0
        })
    }
}

/// Fills `*out` with the tenant's usage, limits and events.
///
/// # Safety
/// `t` must be null or a live handle; `out` null or valid for a write of `struct
/// slabcg_usage`.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_usage(t: *const CTenant, out: *mut Usage) -> c_int {
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            let e = t.events();
            let u = Usage {
                current: t.current(),
                peak: t.peak(),
                max: t.max(),
                high: t.high(),
                events_high: e.high,
                events_max: e.max,
                events_oom: e.oom,
                events_oom_kill: e.oom_kill,
            };
            // SAFETY: out is non-null and writable (caller's contract).
            *out = u;
            0
        })
    }
}

/// Stores the exact usage in `*out`: every thread's stock of the subtree is drained first,
/// so this equals the usable bytes of the subtree's live charged blocks plus its
/// outstanding `slabcg_tenant_charge`s.
///
/// # Safety
/// `t` must be null or a live handle; `out` null or valid for a `uint64_t` write.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_current_exact(t: *const CTenant, out: *mut u64) -> c_int {
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: forwarded contract; out is non-null and writable.
    unsafe {
        with(t, |t| {
            *out = t.current_exact();
            0
        })
    }
}

/// Writes the memory.stat-like report into `buf` (at most `len` bytes, NUL-terminated when
/// `len > 0`, cut short when it does not fit) and its full length (without the NUL) into
/// `*needed` when `needed` is not null. `buf` may be null when `len` is 0.
///
/// # Safety
/// `t` must be null or a live handle; `buf` valid for `len` bytes of writes; `needed` null
/// or valid for a `size_t` write.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_stat(
    t: *const CTenant,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> c_int {
    if buf.is_null() && len != 0 {
        return EINVAL;
    }
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            let _root = hooks::unscoped();
            let text = t.stat().to_string();
            if len > 0 {
                let n = text.len().min(len - 1);
                // SAFETY: buf holds len > n bytes (caller's contract).
                ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
            if !needed.is_null() {
                // SAFETY: needed is non-null and writable (caller's contract).
                *needed = text.len();
            }
            0
        })
    }
}

/// Charges a non-heap resource (socket buffers) of `bytes` to the tenant: `-ENOMEM` when its
/// `max` (or an ancestor's) refuses.
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_charge(t: *const CTenant, bytes: u64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            let _root = hooks::unscoped();
            match t.charge(bytes, StatItem::Sock) {
                Ok(()) => 0,
                Err(_) => -libc::ENOMEM,
            }
        })
    }
}

/// Gives back bytes charged with `slabcg_tenant_charge`.
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_uncharge(t: *const CTenant, bytes: u64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            t.uncharge(bytes, StatItem::Sock);
            0
        })
    }
}

/// Kills the tenant and its descendants: their work sees it at its next safe point
/// (`slabcg_checkpoint`).
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_kill(t: *const CTenant) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            let _root = hooks::unscoped();
            t.kill();
            0
        })
    }
}

/// 1 when the tenant (or an ancestor) was killed, 0 when not, `-EINVAL` for null.
///
/// # Safety
/// `t` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_is_killed(t: *const CTenant) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with(t, |t| c_int::from(t.is_killed())) }
}

/// Makes this thread's allocations from now on charged to `t` (nesting: the previous scope
/// comes back at `slabcg_leave`), and stores the scope in `*out`.
///
/// # Safety
/// `t` must be null or a live handle; `out` null or valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn slabcg_enter(t: *const CTenant, out: *mut *mut CScope) -> c_int {
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: forwarded contract.
    let Some(t) = (unsafe { handle(t) }) else {
        return EINVAL;
    };
    // The box is made in the root scope, which must end before the tenant's begins (scopes
    // nest: an outer one ended first would never restore the caller's scope).
    let cell = {
        let _root = hooks::unscoped();
        Box::into_raw(Box::<CScope>::new_uninit())
    };
    // SAFETY: pthread_self has no preconditions; cell is a fresh box, written once here.
    unsafe {
        (*cell).write(CScope {
            guard: t.enter(),
            thread: libc::pthread_self(),
        });
        // out is non-null and writable (caller's contract).
        *out = cell.cast();
    }
    0
}

/// Ends a scope entered by `slabcg_enter` on this thread. `-EINVAL` for null, `-EPERM` (and
/// the scope stays) when called on another thread. Ending scopes out of order is a bug that
/// the library survives: see `ScopeGuard`.
///
/// # Safety
/// `s` must be null or a scope from `slabcg_enter` not yet ended.
#[no_mangle]
pub unsafe extern "C" fn slabcg_leave(s: *mut CScope) -> c_int {
    if s.is_null() {
        return EINVAL;
    }
    // SAFETY: a live scope (caller's contract); pthread_equal has no preconditions.
    if unsafe { libc::pthread_equal((*s).thread, libc::pthread_self()) } == 0 {
        return -libc::EPERM;
    }
    // SAFETY: a live box from slabcg_enter, on its own thread, ended once. The guard ends
    // the scope first; the box, allocated in the scope outside, is freed after it.
    drop(unsafe { Box::from_raw(s) }.guard);
    0
}

/// A safe point: 0, or `-ECANCELED` when the current tenant or an ancestor was killed (the
/// caller should then abandon its work and leave the scope).
///
/// # Safety
/// None: safe on any thread.
#[no_mangle]
pub unsafe extern "C" fn slabcg_checkpoint() -> c_int {
    match slabcg_accounting::checkpoint() {
        Ok(()) => 0,
        Err(_) => -libc::ECANCELED,
    }
}

/// Drains every thread's stock back to the counters (`slabcg::drain_all_stocks`).
///
/// # Safety
/// None.
#[no_mangle]
pub unsafe extern "C" fn slabcg_drain_all_stocks() {
    slabcg_accounting::drain_all_stocks();
}

/// Gives free memory back to the OS now (`slabcg::trim`).
///
/// # Safety
/// None.
#[no_mangle]
pub unsafe extern "C" fn slabcg_trim() {
    slabcg_allocator::trim();
}

/// Copies `text` into `buf` snprintf-style: at most `len - 1` bytes, cut at a UTF-8
/// character boundary, then a NUL (nothing when `len` is 0). Returns `text`'s full length.
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes (or `len` 0).
unsafe fn copy_out(text: &str, buf: *mut c_char, len: usize) -> isize {
    if len > 0 {
        let mut n = text.len().min(len - 1);
        while !text.is_char_boundary(n) {
            n -= 1;
        }
        // SAFETY: buf holds len > n bytes (caller's contract).
        unsafe {
            ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    // A name or path is far shorter than isize::MAX bytes.
    text.len() as isize
}

/// The tenant's name (UTF-8; the root's is `"root"`) into `buf`, snprintf-style: at most
/// `len` bytes with the NUL, cut short (at a character boundary) when it does not fit.
/// Returns the name's full length in bytes (without the NUL), so a return `>= len` means it
/// was cut; `-EINVAL` for a null handle, or a null `buf` with `len > 0`.
///
/// # Safety
/// `t` must be null or a live handle; `buf` valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_name(
    t: *const CTenant,
    buf: *mut c_char,
    len: usize,
) -> isize {
    if buf.is_null() && len != 0 {
        return EINVAL as isize;
    }
    // SAFETY: forwarded contract.
    match unsafe { handle(t) } {
        // SAFETY: buf holds len bytes.
        Some(t) => unsafe { copy_out(t.name(), buf, len) },
        None => EINVAL as isize,
    }
}

/// The tenant's path from the root (`"svc/customer-42"`; the root's is `"root"`) into
/// `buf`, as [`slabcg_tenant_name`] copies the name.
///
/// # Safety
/// As [`slabcg_tenant_name`].
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_path(
    t: *const CTenant,
    buf: *mut c_char,
    len: usize,
) -> isize {
    if buf.is_null() && len != 0 {
        return EINVAL as isize;
    }
    // SAFETY: forwarded contract.
    match unsafe { handle(t) } {
        Some(t) => {
            let path = {
                let _root = hooks::unscoped();
                t.path()
            };
            // SAFETY: buf holds len bytes.
            let n = unsafe { copy_out(&path, buf, len) };
            let _root = hooks::unscoped();
            drop(path);
            n
        }
        None => EINVAL as isize,
    }
}

/// `slabcg_reclaim_fn`: called with the tenant (lent for the call), the bytes asked and the
/// user data.
pub type ReclaimFn = unsafe extern "C" fn(t: *const CTenant, bytes: u64, user: *mut c_void);

/// A C reclaim callback and its user data.
struct CReclaim {
    f: ReclaimFn,
    user: *mut c_void,
}

impl CReclaim {
    fn call(&self, tenant: &Tenant, bytes: u64) {
        let lent: *const CTenant = (tenant as *const Tenant).cast();
        // SAFETY: CTenant is a transparent Tenant, so `lent` is a handle valid for the call
        // (the header says C must not drop it); the caller of slabcg_tenant_set_reclaim
        // vouched for f and user.
        unsafe { (self.f)(lent, bytes, self.user) }
    }
}

// SAFETY: the header makes the caller promise that the callback may run on any thread with
// this user data (a charge refused on any thread runs it).
unsafe impl Send for CReclaim {}
// SAFETY: as above; the callback is only ever called, never mutated.
unsafe impl Sync for CReclaim {}

/// Sets the tenant's reclaim callback (`Tenant::set_reclaim`): before a charge refused by
/// this tenant's `max` fails, `f(t, bytes, user)` runs (on the thread whose charge was
/// refused, outside every stock critical section, never re-entered on that thread), may
/// free memory, and the charge is tried again. Replaces an earlier callback; a null `f`
/// replaces it with one that does nothing. `user` is never freed by the library.
///
/// # Safety
/// `t` must be null or a live handle; `f` null or a function that may be called on any
/// thread with `user` until it is replaced or the tenant is gone.
#[no_mangle]
pub unsafe extern "C" fn slabcg_tenant_set_reclaim(
    t: *const CTenant,
    f: Option<ReclaimFn>,
    user: *mut c_void,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with(t, |t| {
            match f {
                Some(f) => {
                    let cb = CReclaim { f, user };
                    t.set_reclaim(move |tenant, bytes| cb.call(tenant, bytes));
                }
                None => t.set_reclaim(|_, _| {}),
            }
            0
        })
    }
}
