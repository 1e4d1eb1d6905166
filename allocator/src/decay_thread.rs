//! An optional background thread that runs the decay sweep (`sweep.rs`) every half decay
//! interval. The sweep is otherwise paced by allocation slow paths (bin refills, a new
//! tenant's first allocation), and a program in a steady state may take none for as long as
//! it runs: a service without tenants whose requests each allocate and free the same working
//! set is served from its threads' bins alone, and kept the 100 MB a single large request
//! had used resident for good. jemalloc's `background_thread` is the same remedy, and as
//! there it is the program's choice: the allocator starts no thread in programs that did
//! not ask (slabcg also runs under `LD_PRELOAD`, in programs that fork and count threads;
//! the accounting's `slabcg-bg` starts only for tenants' kills and idle stocks).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use slabcg_accounting::hooks;

use crate::decay;
use crate::sweep;

/// Set once a thread was started (or is being started); reset in a fork child, where it
/// did not survive.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts the background decay thread, `slabcg-decay`, unless it runs already: every half
/// decay interval (250 ms by default, [`set_decay_interval_ms`](crate::set_decay_interval_ms))
/// it gives back the memory that stayed idle through a whole interval, so that memory a
/// burst left behind goes back to the OS one to two intervals after its last use whatever
/// the program does meanwhile. From then on no allocation or free path gives memory back
/// (except the mapping cache's, on large allocations and frees): the `madvise` of a burst's
/// tens of MB runs on this thread, not on a request's. The thread sleeps between sweeps,
/// allocates nothing, and skips a cache whose lock is held. Call it once at startup in a
/// long-running program (a service). `Err` only when the thread could not be spawned;
/// nothing changed then, and a later call tries again. After a `fork`, the child has no
/// such thread until it calls this again (when slabcg is the global allocator: its fork
/// handlers reset the flag).
///
/// ```
/// slabcg_allocator::start_decay_thread().expect("a thread");
/// // A second call finds the thread running.
/// slabcg_allocator::start_decay_thread().unwrap();
/// ```
pub fn start_decay_thread() -> std::io::Result<()> {
    // The fork handlers first, whose `fork_child` forgets the thread in a child (it is not
    // there): a program on another global allocator may call this before anything ran the
    // setup, and a child forked then believed the thread ran, so nothing gave memory back.
    crate::init::init_once();
    if STARTED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    // The spawn allocates (the handle, the name, the closure): no tenant of the caller's
    // should pay for it, nor refuse it (`hooks::unscoped`).
    let _root = hooks::unscoped();
    let spawned = std::thread::Builder::new()
        .name("slabcg-decay".into())
        .spawn(run);
    if let Err(e) = spawned {
        STARTED.store(false, Ordering::Release);
        return Err(e);
    }
    // From now on no allocation or free path gives memory back (`decay::background`).
    decay::set_background(true);
    Ok(())
}

/// The thread's loop: the sweep, paced as every caller's is (`sweep::paced`), twice per
/// interval, so idle memory is gone one to two intervals after its last use. It wakes at
/// least every second, so a shorter interval set meanwhile takes effect within one.
fn run() {
    loop {
        std::thread::sleep(Duration::from_millis((decay::interval_ms() / 2).min(1_000)));
        sweep::paced();
    }
}

/// Fork support, in the child: the thread did not survive; a later call starts one.
pub(crate) fn fork_child() {
    STARTED.store(false, Ordering::Relaxed);
    decay::set_background(false);
}
