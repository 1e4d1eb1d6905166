//! The accounting's view of the OS layer: `slabcg-sys` (its contract, and the asymmetric
//! barrier's modes, are in that crate) under the names this crate's call sites use.
//!
//! [`remote_barrier`] returns `true` only if, by the time it returns, every other thread of
//! this process has executed a full memory barrier at some point after the call began (or
//! was not running, in which case its next context switch acts as one). That is what lets a
//! stock drainer (see `drain.rs`) pair its `SeqCst` store of `steal` with the stock owner's
//! plain store of `in_cs` without the owner paying for a fence ([`light_barrier`]).

/// The atomics of the structures a loom model checks (`Stock`): core's, or loom's under
/// `cfg(loom)`.
pub(crate) use slabcg_sys::sync;

/// Per-thread words in the initial-exec TLS model (feature `ie-tls`, for the C library).
#[cfg(feature = "ie-tls")]
pub(crate) use slabcg_sys::fast_tls;
pub(crate) use slabcg_sys::{
    cpus, light_barrier, now_ms, read_environment, remote_barrier, remote_barrier_kind, warn,
    SpinGuard, SpinLock,
};

/// Arranges for `dtor(arg)` to run when the calling thread exits: the stock step of the one
/// thread-exit hook ([`slabcg_sys::ExitStep::Stock`], after the allocator's thread-cache
/// flush). False when the platform refused (out of keys) or has no pthreads: the caller
/// must then do without. Never goes through the global allocator.
///
/// # Safety
/// `dtor(arg)` must be sound to call once while this thread exits.
pub(crate) unsafe fn on_thread_exit(
    dtor: unsafe extern "C" fn(*mut core::ffi::c_void),
    arg: *const u8,
) -> bool {
    // SAFETY: the caller's promise; the stock step is this crate's.
    unsafe { slabcg_sys::on_thread_exit(slabcg_sys::ExitStep::Stock, dtor, arg as *mut _) }
}

/// Arranges for `dtor` to run at this thread's exit as the id batch's step (no argument:
/// the batch is a thread-local of its own).
///
/// # Safety
/// As [`on_thread_exit`].
pub(crate) unsafe fn on_thread_exit_ids(
    dtor: unsafe extern "C" fn(*mut core::ffi::c_void),
) -> bool {
    // SAFETY: the caller's promise; the id-batch step is this crate's.
    unsafe {
        slabcg_sys::on_thread_exit(slabcg_sys::ExitStep::IdBatch, dtor, core::ptr::null_mut())
    }
}
