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

/// The thread of [`start_decay_thread`](crate::start_decay_thread), once the process-wide
/// setup ran (its caller's job: the setup registers the fork handlers whose `fork_child`
/// resets [`STARTED`]).
pub(crate) fn start() -> std::io::Result<()> {
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
