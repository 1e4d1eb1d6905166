//! Thread-exit and fork hooks: `slabcg-sys`'s, with this crate's exit step
//! ([`slabcg_sys::ExitStep::ThreadCache`]: the thread cache is flushed first, before the
//! accounting's stock is given back; see that type for why).

pub use slabcg_sys::register_fork_handlers;

/// Arranges for `dtor(arg)` to run when the calling thread exits (the thread-cache step of
/// the one exit hook). Returns false when the platform refused (the caller then simply never
/// gets the callback).
///
/// # Safety
/// `dtor(arg)` must be sound to call once while this thread exits.
pub unsafe fn on_thread_exit(dtor: unsafe extern "C" fn(*mut libc::c_void), arg: *mut u8) -> bool {
    // SAFETY: the caller's promise; the thread-cache step is this crate's.
    unsafe { slabcg_sys::on_thread_exit(slabcg_sys::ExitStep::ThreadCache, dtor, arg.cast()) }
}
