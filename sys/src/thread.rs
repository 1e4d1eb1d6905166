//! Per-thread and per-process hooks: the one thread-exit hook, fork handlers, yielding, the
//! CPU count and the current CPU.
//!
//! ## Thread exit
//!
//! One pthread key for the process, whose destructor runs every teardown step the thread
//! registered, in the order of [`ExitStep`]. A pthread key destructor rather than a Rust
//! `thread_local!` with `Drop`: glibc runs key destructors after the `__cxa_thread_atexit`
//! destructors that Rust's thread locals use, so every Rust destructor that frees memory
//! still finds the thread's cache alive, and the cache is flushed after them. glibc runs key
//! destructors again, up to `PTHREAD_DESTRUCTOR_ITERATIONS` (4) rounds, for keys set during
//! a round, so a step registered from inside a key destructor (this one or another
//! library's) still runs, in the next round, except when registered in the last round.
//!
//! The steps of a thread live in a `thread_local!` with a `const` initialiser and no `Drop`:
//! no registration, no allocation, and still readable while key destructors run (the TLS
//! block is freed after them).

use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::AtomicU32;

use crate::sync::Ordering;

/// Gives the CPU away while spinning on a lock another thread holds (`sched_yield`; under
/// loom, a yield to the model scheduler).
pub fn yield_now() {
    #[cfg(not(loom))]
    // SAFETY: sched_yield has no preconditions.
    unsafe {
        libc::sched_yield();
    }
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// A teardown step run at thread exit. The hook runs a thread's steps in this order (the
/// discriminant); a step registered while the hook runs runs in the same pass if it comes
/// later, else in the next round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum ExitStep {
    /// slabcg-allocator: flush the thread cache (its bins and its object stock) to the
    /// shared caches and stop caching. First, because what it gives back uncharges into
    /// this thread's byte stock, which the next step then returns to the counters at once.
    ThreadCache = 0,
    /// slabcg-accounting: give the byte stock back to the counters and unlink it from the
    /// registry. After the thread cache, so that every uncharge of its flush lands in the
    /// stock before it goes; a charge or uncharge after it goes straight to the counters
    /// (the stock is marked exited).
    Stock = 1,
    /// slabcg-accounting: give the thread's batch of free objcg ids back to the id
    /// allocator; from then on the thread takes and returns ids there directly. Last, so
    /// that ids the steps before recycle come back with the batch.
    IdBatch = 2,
}

/// How many [`ExitStep`]s there are.
const STEPS: usize = 3;

/// The function a step runs, with the argument it was registered with.
pub type ExitFn = unsafe extern "C" fn(*mut c_void);

/// One thread's registered steps.
struct Steps {
    f: [Cell<Option<ExitFn>>; STEPS],
    arg: [Cell<*mut c_void>; STEPS],
}

thread_local! {
    static STEPS_OF_THREAD: Steps = const {
        Steps {
            f: [const { Cell::new(None) }; STEPS],
            arg: [const { Cell::new(core::ptr::null_mut()) }; STEPS],
        }
    };
}

/// The process's key, created on first use (`NONE` until then, `FAILED` if refused).
static KEY: AtomicU32 = AtomicU32::new(NONE);
const NONE: u32 = u32::MAX;
const FAILED: u32 = u32::MAX - 1;

/// The key, created on the first call. A racing first call creates a second key and
/// deletes it: nobody waits.
#[cfg(unix)]
fn key() -> Option<libc::pthread_key_t> {
    let mut key = KEY.load(Ordering::Acquire);
    if key == NONE {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: `k` is a valid out pointer; `run_steps` has the C ABI pthread expects.
        let made = unsafe { libc::pthread_key_create(&mut k, Some(run_steps)) } == 0;
        let new = if made && k < FAILED { k } else { FAILED };
        key = match KEY.compare_exchange(NONE, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => new,
            Err(won) => {
                // Another thread created the key first: ours is unused.
                if made {
                    // SAFETY: `k` is a key this call created and nobody else saw.
                    unsafe { libc::pthread_key_delete(k) };
                }
                won
            }
        };
    }
    (key != FAILED).then_some(key)
}

/// Arranges for `dtor(arg)` to run when the calling thread exits, as step `step` of the
/// thread-exit hook (module docs). Registering a step again replaces its function and
/// argument. False when the platform refused (out of keys) or has no pthreads: the caller
/// must then do without (the step is not registered). Never goes through the global
/// allocator (glibc keeps key values in the thread descriptor, or in blocks from its own
/// malloc, which may be slabcg's `capi` when preloaded: callers allow for that).
///
/// # Safety
/// `dtor(arg)` must be sound to call once on this thread while it exits (after its Rust
/// thread-locals with destructors may have been torn down), and `step` must be the
/// caller's own: each step belongs to one client crate, which registering would replace.
#[cfg(unix)]
pub unsafe fn on_thread_exit(step: ExitStep, dtor: ExitFn, arg: *mut c_void) -> bool {
    let Some(key) = key() else { return false };
    let i = step as usize;
    STEPS_OF_THREAD
        .try_with(|s| {
            s.arg[i].set(arg);
            s.f[i].set(Some(dtor));
            // SAFETY: `key` was created with `run_steps`; a non-null value makes pthread
            // call `run_steps(s)` when this thread exits, and `s` (this thread's TLS) is
            // valid until then.
            let ok = unsafe { libc::pthread_setspecific(key, (s as *const Steps).cast()) } == 0;
            if !ok {
                s.f[i].set(None);
            }
            ok
        })
        .unwrap_or(false)
}

/// Without pthreads there is no exit hook here: the caller does without.
///
/// # Safety
/// As for the unix version.
#[cfg(not(unix))]
pub unsafe fn on_thread_exit(_step: ExitStep, _dtor: ExitFn, _arg: *mut c_void) -> bool {
    false
}

/// The key's destructor: runs the thread's steps in order, each at most once per
/// registration.
///
/// # Safety
/// `p` is the exiting thread's own `Steps`, whose TLS memory outlives the key destructors.
#[cfg(unix)]
unsafe extern "C" fn run_steps(p: *mut c_void) {
    // SAFETY: as the caller promises.
    let s = unsafe { &*(p as *const Steps) };
    for i in 0..STEPS {
        if let Some(f) = s.f[i].take() {
            // SAFETY: `f` was registered with this argument by `on_thread_exit`, whose
            // caller promised that `f(arg)` is sound at this thread's exit.
            unsafe { f(s.arg[i].get()) };
        }
    }
}

/// Registers fork handlers: `prepare` runs in the parent before `fork` (take every lock),
/// `parent` after it in the parent and `child` in the child (release or reset them). False
/// when `pthread_atfork` refused. Call it once per set of handlers (each call adds them).
///
/// # Safety
/// Each handler must be sound to call at its point of every later `fork` of the process,
/// from whichever thread forks (in the child, the only thread), without allocating.
pub unsafe fn register_fork_handlers(
    prepare: unsafe extern "C" fn(),
    parent: unsafe extern "C" fn(),
    child: unsafe extern "C" fn(),
) -> bool {
    // SAFETY: the handlers are plain C-ABI functions that live for the whole program.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
}

/// The CPUs this process may run on (its affinity mask when it was first read), at least
/// one. Read once with `sched_getaffinity` into a mask on the stack: no allocation, so the
/// charge slow path may call it (`std::thread::available_parallelism` may allocate). A
/// racing first call reads the same mask again.
pub fn cpus() -> u32 {
    static CPUS: AtomicU32 = AtomicU32::new(0);
    let n = CPUS.load(Ordering::Relaxed);
    if n != 0 {
        return n;
    }
    let n = read_cpus().max(1);
    CPUS.store(n, Ordering::Relaxed);
    n
}

#[cfg(all(target_os = "linux", not(miri)))]
fn read_cpus() -> u32 {
    // SAFETY: `cpu_set_t` is plain bits, valid when zeroed; the call writes at most
    // `size_of::<cpu_set_t>()` bytes into it and reads nothing else.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 1;
        }
        libc::CPU_COUNT(&set) as u32
    }
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn read_cpus() -> u32 {
    1
}

/// The CPU the calling thread runs on now (0 when the OS cannot say): a hint only, as the
/// thread may move right after. `sched_getcpu` reads it from rseq or the vDSO (a `getcpu`
/// system call only where neither exists) and allocates nothing, so the allocator's slow
/// paths may call it.
#[cfg(all(target_os = "linux", not(miri)))]
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).unwrap_or(0)
}

/// The calling process's id (`getpid`; 1 under Miri). A fork child's differs from its
/// parent's, so a one-time setup can tell that the thread running it was left behind.
pub fn process_id() -> u32 {
    #[cfg(not(miri))]
    // SAFETY: getpid has no preconditions and touches no memory of ours.
    let pid = unsafe { libc::getpid() };
    #[cfg(miri)]
    let pid = 1;
    u32::try_from(pid).unwrap_or(0)
}

/// The CPU the calling thread runs on now: 0 where the OS cannot say (and under Miri).
#[cfg(not(all(target_os = "linux", not(miri))))]
pub fn current_cpu() -> u32 {
    0
}
