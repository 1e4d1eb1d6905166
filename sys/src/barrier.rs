//! The asymmetric barrier: `membarrier(2)`, or `mmap`/`mprotect` for the fallback barrier.
//!
//! Contract: [`remote_barrier`] returns `true` only if, by the time it returns, every other
//! thread of this process has executed a full memory barrier at some point after the call
//! began (or was not running, in which case its next context switch acts as one). That is
//! what lets a stock drainer (slabcg-accounting's `drain.rs`) pair its `SeqCst` store of `steal` with the
//! stock owner's plain store of `in_cs` without the owner paying for a fence.
//!
//! Mode, chosen once on the first call (a racing first call just repeats the idempotent
//! probe):
//! 1. `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (IPIs only the CPUs running our threads; microseconds),
//!    after `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`.
//! 2. else `MEMBARRIER_CMD_GLOBAL` (an RCU grace period; milliseconds, still correct).
//! 3. else, on x86-64 Linux (membarrier missing or blocked by seccomp): the `mprotect` trick
//!    (as .NET's `FlushProcessWriteBuffers` and folly's `asymmetricHeavyBarrier` fall back
//!    to). Revoking the access to a page this process has just written makes the kernel
//!    shoot down its TLB entries with an IPI to every CPU that may be running one of our
//!    threads, and on x86 an interrupt is a full barrier. Not where TLB invalidation may
//!    need no interrupt: other architectures, and x86-64 CPUs with broadcast invalidation
//!    (INVLPGB, checked with `cpuid`).
//! 4. else no remote barrier at all: `remote_barrier` returns `false` and drainers only
//!    drain the calling thread's own stock. A charge can then fail while bytes sit in other
//!    threads' stocks (at most threads x slots x 2 x `STOCK_HIGH`: a slot has two pools);
//!    documented degradation, never unsoundness.
//!
//! `SLABCG_MEMBARRIER=0` in the environment skips `membarrier` (to test the fallbacks, or
//! where a sandbox makes it slow).

// The statics below stay core's atomics even under loom: a loom atomic lives only within one
// execution of a model (`crate::sync`). What a loom model sees of this file is its fences.
use core::sync::atomic::AtomicU8;

use crate::sync::Ordering;

/// The cheap side of the asymmetric barrier: what a stock owner puts between its `in_cs`
/// store and its `steal`/`tag` load. A compiler fence is enough because [`remote_barrier`]
/// makes the drainer's side a full barrier on every CPU. Under Miri, which cannot run
/// `membarrier`, both sides are real `SeqCst` fences, the same protocol in the language's
/// own memory model, so Miri checks the rest of the code around it; loom models get the
/// same (`crate::sync::fence`, loom's under `cfg(loom)`).
#[inline(always)]
pub fn light_barrier() {
    #[cfg(not(any(miri, loom)))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(any(miri, loom))]
    crate::sync::fence(Ordering::SeqCst);
}

const UNKNOWN: u8 = 0;
const PRIVATE: u8 = 1;
const GLOBAL: u8 = 2;
#[cfg_attr(miri, allow(dead_code))]
const UNAVAILABLE: u8 = 3;
const MPROTECT: u8 = 4;

static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// What the environment says about membarrier: not read yet, allowed, or switched off.
#[cfg_attr(not(all(target_os = "linux", not(miri))), allow(dead_code))]
static ENV: AtomicU8 = AtomicU8::new(ENV_UNREAD);
const ENV_UNREAD: u8 = 0;
#[cfg_attr(not(all(target_os = "linux", not(miri))), allow(dead_code))]
const ENV_MEMBARRIER: u8 = 1;
#[cfg_attr(not(all(target_os = "linux", not(miri))), allow(dead_code))]
const ENV_NO_MEMBARRIER: u8 = 2;

/// Reads the environment (`SLABCG_MEMBARRIER`) once; later calls do nothing. Never
/// allocates.
pub fn read_environment() {
    #[cfg(all(target_os = "linux", not(miri)))]
    if ENV.load(Ordering::Relaxed) == ENV_UNREAD {
        let v = if imp::env_no_membarrier() {
            ENV_NO_MEMBARRIER
        } else {
            ENV_MEMBARRIER
        };
        ENV.store(v, Ordering::Relaxed);
    }
}

// Under loom `remote_barrier` is a fence, so only the probe of this module is used.
#[cfg(all(target_os = "linux", not(miri)))]
#[cfg_attr(loom, allow(dead_code))]
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
        if membarrier_allowed() {
            let mask = membarrier(CMD_QUERY);
            if mask >= 0 {
                if mask & CMD_PRIVATE_EXPEDITED as libc::c_long != 0
                    && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
                {
                    return super::PRIVATE;
                }
                if mask & CMD_GLOBAL as libc::c_long != 0 {
                    return super::GLOBAL;
                }
            }
        }
        if mprotect::shootdowns_interrupt() && mprotect::page().is_some() {
            return super::MPROTECT;
        }
        super::UNAVAILABLE
    }

    /// False when the environment says `SLABCG_MEMBARRIER=0` (read by
    /// [`read_environment`](super::read_environment), or now if nobody called it).
    fn membarrier_allowed() -> bool {
        super::read_environment();
        super::ENV.load(super::Ordering::Relaxed) != super::ENV_NO_MEMBARRIER
    }

    /// Reads `SLABCG_MEMBARRIER` from the environment.
    pub(super) fn env_no_membarrier() -> bool {
        // SAFETY: getenv with a NUL-terminated name; it returns null or a NUL-terminated
        // string that we only read before returning. A concurrent setenv could free it,
        // which is why the allocator reads the environment once, at its first allocation
        // (normally before main), instead of at the first drain.
        unsafe {
            let v = libc::getenv(c"SLABCG_MEMBARRIER".as_ptr());
            !v.is_null() && *v == b'0' as libc::c_char && *v.add(1) == 0
        }
    }

    pub(super) fn private_expedited() -> bool {
        membarrier(CMD_PRIVATE_EXPEDITED) == 0
    }

    pub(super) fn global() -> bool {
        membarrier(CMD_GLOBAL) == 0
    }

    /// The fallback barrier (module docs, mode 3).
    pub(super) mod mprotect {
        use core::sync::atomic::{AtomicPtr, AtomicU64};

        use crate::sync::Ordering;
        use crate::SpinLock;

        static PAGE: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
        /// Serialises the callers: two interleaved protect/unprotect pairs could leave the
        /// page accessible when one of them revokes, skipping a shootdown. A fork child
        /// never inherits it held: every caller holds a registry lock that the fork
        /// handlers take first.
        static BUSY: SpinLock<()> = SpinLock::new(());
        const LEN: usize = 4096;

        /// Whether a TLB shootdown is sure to interrupt the other CPUs: x86-64 without
        /// INVLPGB. With INVLPGB (AMD Zen 3 and later, where the hypervisor exposes it)
        /// Linux 6.15 and later may invalidate other CPUs' entries by broadcast, with no
        /// interrupt and so no barrier; then there is no fallback.
        pub(in super::super) fn shootdowns_interrupt() -> bool {
            #[cfg(target_arch = "x86_64")]
            {
                use core::arch::x86_64::__cpuid;
                // SAFETY: cpuid exists on every x86-64 CPU; leaf 0x8000_0000 reports the
                // highest extended leaf, and 0x8000_0008 is read only when it exists.
                #[allow(unused_unsafe)]
                let invlpgb = unsafe {
                    __cpuid(0x8000_0000).eax >= 0x8000_0008
                        && __cpuid(0x8000_0008).ebx & (1 << 3) != 0
                };
                !invlpgb
            }
            #[cfg(not(target_arch = "x86_64"))]
            false
        }

        /// The page the barrier toggles, mapped on first use (a race maps two and keeps
        /// one; the other is unmapped).
        pub(in super::super) fn page() -> Option<*mut AtomicU64> {
            let p = PAGE.load(Ordering::Acquire);
            if !p.is_null() {
                return Some(p);
            }
            // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
            let m = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    LEN,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return None;
            }
            let m = m as *mut AtomicU64;
            match PAGE.compare_exchange(
                core::ptr::null_mut(),
                m,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => Some(m),
                Err(won) => {
                    // SAFETY: m is our own mapping of LEN bytes, never published.
                    unsafe { libc::munmap(m.cast(), LEN) };
                    Some(won)
                }
            }
        }

        /// Makes the page writable, writes it (so that it is present and dirty in this
        /// process's page tables), then revokes all access, which forces the TLB shootdown.
        pub(in super::super) fn barrier() -> bool {
            let Some(p) = page() else { return false };
            let busy = BUSY.lock();
            // SAFETY: p is the page mapped by page(), LEN bytes, only ever used here, under
            // BUSY; the write happens while it is writable.
            let ok = unsafe {
                libc::mprotect(p.cast(), LEN, libc::PROT_READ | libc::PROT_WRITE) == 0 && {
                    (*p).fetch_add(1, Ordering::SeqCst);
                    libc::mprotect(p.cast(), LEN, libc::PROT_NONE) == 0
                }
            };
            drop(busy);
            ok
        }
    }
}

#[cfg(miri)]
mod imp {
    // Miri: the heavy side of the barrier is a SeqCst fence (see `light_barrier`).
    pub(super) fn probe() -> u8 {
        super::PRIVATE
    }
    pub(super) fn private_expedited() -> bool {
        crate::sync::fence(super::Ordering::SeqCst);
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

/// The barrier this process uses, probed on the first call.
fn mode() -> u8 {
    let mut mode = MODE.load(Ordering::Relaxed);
    if mode == UNKNOWN {
        mode = imp::probe();
        MODE.store(mode, Ordering::Relaxed);
    }
    mode
}

/// Forces a full memory barrier on every other running thread of the process. Returns
/// `false` when the OS offers no way to do so (see the module note). Never allocates.
/// Under loom, a `SeqCst` fence (as under Miri), so a model runs no system call.
pub fn remote_barrier() -> bool {
    #[cfg(loom)]
    {
        crate::sync::fence(Ordering::SeqCst);
        return true;
    }
    #[cfg(not(loom))]
    match mode() {
        PRIVATE => imp::private_expedited() || imp::global(),
        GLOBAL => imp::global(),
        #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
        MPROTECT => imp::mprotect::barrier(),
        _ => false,
    }
}

/// Which remote barrier this process uses (probing it if no drain has yet):
/// `"membarrier-private-expedited"`, `"membarrier-global"`, `"mprotect"` or `"none"`.
pub fn remote_barrier_kind() -> &'static str {
    match mode() {
        PRIVATE => "membarrier-private-expedited",
        GLOBAL => "membarrier-global",
        MPROTECT => "mprotect",
        _ => "none",
    }
}
