//! Thread-exit and fork hooks.
//!
//! Thread exit uses a pthread key destructor rather than a Rust `thread_local!` with `Drop`:
//! glibc runs pthread key destructors after the `__cxa_thread_atexit` destructors that Rust's
//! thread locals use, so every Rust destructor that frees memory still finds this thread's
//! cache alive, and the cache is flushed last.

use core::sync::atomic::{AtomicU32, Ordering};

/// 0 = not created, 1 = being created, 2 = ready (key in `KEY`), 3 = creation failed.
static KEY_STATE: AtomicU32 = AtomicU32::new(0);
static KEY: AtomicU32 = AtomicU32::new(0);

/// Arranges for `dtor(arg)` to run when the calling thread exits. Returns false when the
/// platform refused (the caller then simply never gets the callback).
pub fn on_thread_exit(dtor: unsafe extern "C" fn(*mut libc::c_void), arg: *mut u8) -> bool {
    loop {
        match KEY_STATE.load(Ordering::Acquire) {
            2 => break,
            3 => return false,
            0 => {
                if KEY_STATE
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
                    .is_ok()
                {
                    let mut key: libc::pthread_key_t = 0;
                    // SAFETY: key is a valid out pointer; dtor has the C ABI pthread expects.
                    let rc = unsafe { libc::pthread_key_create(&mut key, Some(dtor)) };
                    if rc != 0 {
                        KEY_STATE.store(3, Ordering::Release);
                        return false;
                    }
                    KEY.store(key, Ordering::Relaxed);
                    KEY_STATE.store(2, Ordering::Release);
                    break;
                }
            }
            _ => super::yield_now(),
        }
    }
    let key = KEY.load(Ordering::Relaxed);
    // SAFETY: key was created above; a non-null value makes pthread call dtor at exit.
    unsafe { libc::pthread_setspecific(key, arg.cast()) == 0 }
}

/// Registers fork handlers once: `prepare` runs in the parent before `fork` (take every lock),
/// `parent` after it in the parent and `child` in the child (release or reset them).
pub fn register_fork_handlers(
    prepare: unsafe extern "C" fn(),
    parent: unsafe extern "C" fn(),
    child: unsafe extern "C" fn(),
) -> bool {
    // SAFETY: the handlers are plain C-ABI functions that live for the whole program.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
}
