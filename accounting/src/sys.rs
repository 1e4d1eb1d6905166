//! The only file of this crate that talks to the OS: `membarrier(2)`.
//!
//! Contract: [`remote_barrier`] returns `true` only if, by the time it returns, every other
//! thread of this process has executed a full memory barrier at some point after the call
//! began (or was not running, in which case its next context switch acts as one). That is
//! what lets a stock drainer (see `drain.rs`) pair its `SeqCst` store of `steal` with the
//! stock owner's plain store of `in_cs` without the owner paying for a fence.
//!
//! Mode, chosen once on the first call (a racing first call just repeats the idempotent
//! probe):
//! 1. `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (IPIs only the CPUs running our threads; microseconds),
//!    after `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`.
//! 2. else `MEMBARRIER_CMD_GLOBAL` (an RCU grace period; milliseconds, still correct).
//! 3. else (not Linux, or blocked by seccomp) no remote barrier at all: `remote_barrier`
//!    returns `false` and drainers only drain the calling thread's own stock. A charge can
//!    then fail while bytes sit in other threads' stocks (at most
//!    threads x slots x `STOCK_HIGH`); documented degradation, never unsoundness.

use core::sync::atomic::{AtomicU8, Ordering};

/// The cheap side of the asymmetric barrier: what a stock owner puts between its `in_cs`
/// store and its `steal`/`tag` load. A compiler fence is enough because [`remote_barrier`]
/// makes the drainer's side a full barrier on every CPU. Under Miri, which cannot run
/// `membarrier`, both sides are real `SeqCst` fences, the same protocol in the language's
/// own memory model, so Miri checks the rest of the code around it.
#[inline(always)]
pub fn light_barrier() {
    #[cfg(not(miri))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(miri)]
    core::sync::atomic::fence(Ordering::SeqCst);
}

const UNKNOWN: u8 = 0;
const PRIVATE: u8 = 1;
const GLOBAL: u8 = 2;
#[cfg_attr(miri, allow(dead_code))]
const UNAVAILABLE: u8 = 3;

static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

#[cfg(all(target_os = "linux", not(miri)))]
mod imp {
    const CMD_QUERY: libc::c_int = 0;
    const CMD_GLOBAL: libc::c_int = 1;
    const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    fn membarrier(cmd: libc::c_int) -> libc::c_long {
        // SAFETY: membarrier takes two integer arguments and touches no user memory.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_uint,
                0 as libc::c_int,
            )
        }
    }

    pub(super) fn probe() -> u8 {
        let mask = membarrier(CMD_QUERY);
        if mask < 0 {
            return super::UNAVAILABLE;
        }
        if mask & CMD_PRIVATE_EXPEDITED as libc::c_long != 0
            && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
        {
            return super::PRIVATE;
        }
        if mask & CMD_GLOBAL as libc::c_long != 0 {
            return super::GLOBAL;
        }
        super::UNAVAILABLE
    }

    pub(super) fn private_expedited() -> bool {
        membarrier(CMD_PRIVATE_EXPEDITED) == 0
    }

    pub(super) fn global() -> bool {
        membarrier(CMD_GLOBAL) == 0
    }
}

#[cfg(miri)]
mod imp {
    // Miri: the heavy side of the barrier is a SeqCst fence (see `light_barrier`).
    pub(super) fn probe() -> u8 {
        super::PRIVATE
    }
    pub(super) fn private_expedited() -> bool {
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        true
    }
    pub(super) fn global() -> bool {
        private_expedited()
    }
}

#[cfg(all(not(target_os = "linux"), not(miri)))]
mod imp {
    pub(super) fn probe() -> u8 {
        super::UNAVAILABLE
    }
    pub(super) fn private_expedited() -> bool {
        false
    }
    pub(super) fn global() -> bool {
        false
    }
}

/// Forces a full memory barrier on every other running thread of the process. Returns
/// `false` when the OS offers no way to do so (see the module note). Never allocates.
pub(crate) fn remote_barrier() -> bool {
    let mut mode = MODE.load(Ordering::Relaxed);
    if mode == UNKNOWN {
        mode = imp::probe();
        MODE.store(mode, Ordering::Relaxed);
    }
    match mode {
        PRIVATE => imp::private_expedited() || imp::global(),
        GLOBAL => imp::global(),
        _ => false,
    }
}
