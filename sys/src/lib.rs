//! slabcg-sys: the only code of the slabcg crates that talks to the operating system, and
//! their per-thread layer. Linux (and other Unix systems with `mmap` and pthreads).
//!
//! # Contract
//!
//! Like snmalloc's `pal_concept.h`: one list of what the layer offers, and what each item
//! promises. For every item below: **it never allocates through the global allocator**
//! (slabcg itself, when installed), **never panics and never blocks** (the spin lock
//! spins and yields while another thread holds it; nothing waits on the OS except the
//! system call itself). Failure is a return value, never an unwind. All of it may run inside
//! the allocator, on any thread, before `main` and in pthread key destructors. None of it is
//! async-signal-safe.
//!
//! | item | guarantees | on failure |
//! |---|---|---|
//! | [`map`]`(len)` | `len` bytes of fresh, zeroed, read-write, private anonymous memory, page aligned | null |
//! | [`map_aligned`]`(len, align)` | as `map`, start a multiple of `align` (a power of two >= [`PAGE`]) | null (nothing stays mapped) |
//! | [`map_aligned_at`]`(len, align, off)` | as `map`, start `off` past a multiple of `align` | null (nothing stays mapped) |
//! | [`unmap`]`(p, len)` (unsafe) | the page range is gone; any page range of a mapping | ignored (the range stays mapped) |
//! | [`release`]`(p, len)` (unsafe) | the range stops being resident and reads back as zero | ignored |
//! | [`advise_huge`]`(p, len)` (unsafe) | a hint: transparent huge pages for the range | ignored |
//! | [`protect_none`]`(p, len)` (unsafe) | the page range faults on any access (a guard page) | false, the range unchanged |
//! | [`protect_rw`]`(p, len)` (unsafe) | the page range is readable and writable again (a guard page removed) | false, the range unchanged |
//! | [`remap`]`(p, old, new)` (unsafe) | a whole mapping grown or shrunk, maybe moved, contents kept | null, the old mapping unchanged (always null without `mremap` and under Miri) |
//! | [`remap_to`]`(p, old, new, dst)` (unsafe) | a mapping (or part) moved to `dst`, grown to `new`, page tables moved; huge pages kept when 2 MiB aligned | false, the old mapping unchanged, `dst` maybe unmapped (always false without `mremap` and under Miri) |
//! | [`check_page_size`] | true when the kernel's page is at most [`PAGE`] | false |
//! | [`now_ms`] | coarse monotonic milliseconds (vDSO, no system call); never goes back | 0 |
//! | [`resident_bytes`] | the process's resident set, from `/proc/self/statm` | 0 |
//! | [`light_barrier`] | the cheap side of the asymmetric barrier (a compiler fence) | cannot fail |
//! | [`remote_barrier`] | every other thread of the process ran a full barrier after the call began | false: no such barrier on this system (callers degrade) |
//! | [`remote_barrier_kind`] | which remote barrier was chosen | `"none"` |
//! | [`read_environment`] | reads `SLABCG_MEMBARRIER` once (call it early: `getenv` races `setenv`) | cannot fail |
//! | [`on_thread_exit`]`(step, f, arg)` | `f(arg)` runs once at this thread's exit, in [`ExitStep`] order | false: no hook (the caller tears down itself) |
//! | [`register_fork_handlers`] | `pthread_atfork` handlers registered | false |
//! | [`SpinLock`] | mutual exclusion; `const` constructor; lock, try-lock, raw lock for fork handlers | never fails; spins, then yields |
//! | [`fatal`]`(msg)` | the message on stderr, then `abort` | does not return |
//! | [`warn`]`(msg)` | the message on stderr | ignored |
//! | [`random_u64`] | 64 random bits from `getrandom`, never 0 | a weaker mix of clock, pid and a stack address |
//! | [`cpus`] | the CPUs in the affinity mask (read once), at least 1 | 1 |
//! | [`process_id`] | this process's id (`getpid`) | cannot fail |
//! | [`current_cpu`] | the CPU the thread runs on now, a hint (`sched_getcpu`: rseq or vDSO, a system call only where neither exists) | 0 |
//! | [`yield_now`] | gives the CPU away (`sched_yield`) | ignored |
//! | [`fast_tls`] | per-thread words in the initial-exec TLS model (feature `ie-tls`), else a `thread_local!` | cannot fail |
//! | [`sync`] | core's atomics, or loom's under `cfg(loom)` (made on first use: `new` stays `const`) | — |
//!
//! Under Miri (`cfg(miri)`, scripts/verify.sh) some calls have narrow fallbacks for what the
//! interpreter does not model (partial `munmap`, `madvise`, `mremap` of pieces, `membarrier`,
//! `/proc`); each says what it gives up. Under loom, the barriers are `SeqCst` fences.
//!
//! # Layers
//! `sync` (atomics) <- `thread` (yield, exit hook, fork, cpus, current CPU) <- `lock` (spin lock) <-
//! `barrier` (membarrier, mprotect fallback); `mem` (mappings), `clock` (coarse time), `diag`
//! (fatal, warn), `fast_tls` (per-thread words) and `random` stand alone. No file imports
//! one that imports it back.

#![warn(missing_docs)]

mod barrier;
mod clock;
mod diag;
pub mod fast_tls;
mod lock;
mod mem;
mod random;
pub mod sync;
mod thread;

pub use barrier::{light_barrier, read_environment, remote_barrier, remote_barrier_kind};
pub use clock::now_ms;
pub use diag::{fatal, warn};
pub use lock::{SpinGuard, SpinLock};
pub use mem::{
    advise_huge, check_page_size, map, map_aligned, map_aligned_at, protect_none, protect_rw,
    release, remap, remap_to, resident_bytes, unmap, PAGE,
};
pub use random::random_u64;
pub use thread::{
    cpus, current_cpu, on_thread_exit, process_id, register_fork_handlers, yield_now, ExitFn,
    ExitStep,
};
