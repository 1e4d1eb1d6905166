//! Process and thread setup: the first slow path of every thread comes here, sets up the
//! process once ([`init_once`]) and then the thread's cache (`thread_cache::set_up`), and
//! goes on to the thread cache's refill or flush. Also the fork handlers, which take every
//! lock of the layers below in the order the runtime paths nest them.
//!
//! This module sits above everything it wires together (the thread cache, the object-stock
//! drain, `stats()`, the caches, the large allocations), and below the paths that allocate
//! (`charge.rs`, `global.rs`), which enter their slow paths through it: no layer below calls
//! up into setup.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use slabcg_accounting::hooks;

use crate::cache::SlabCache;
use crate::size_class::Kind;
use crate::{class_caches, decay_thread, handback, large, sweep, sys, thread_cache};

/// Slow path of an allocation from bin `(c, kind)` of this thread: sets up the process and
/// the thread on the thread's first one, then refills the bin
/// (`thread_cache::refill_pop`). Null when memory is exhausted.
#[cold]
#[inline(never)]
pub fn alloc_slow(c: usize, kind: Kind) -> *mut u8 {
    thread_cache::with(|tc| {
        if thread_cache::is_uninit(tc) {
            init_thread(tc);
        }
        let p = thread_cache::refill_pop(tc, c, kind);
        if tc.tick_slow() {
            sweep::maybe();
        }
        p
    })
}

/// Slow path of a free to bin `(c, kind)` of this thread: sets up the process and the
/// thread on the thread's first one, then gives half the bin back, or all of it
/// (`thread_cache::flush_push`).
///
/// # Safety
/// `p` must be a live slot of class `c` of this kind that the caller gives up.
#[cold]
#[inline(never)]
pub unsafe fn free_slow(p: *mut u8, c: usize, kind: Kind) {
    thread_cache::with(|tc| {
        if thread_cache::is_uninit(tc) {
            init_thread(tc);
        }
        // SAFETY: caller's contract.
        unsafe { thread_cache::flush_push(tc, p, c, kind) }
    })
}

/// Slow path of an allocation from front `i` of dedicated cache `core` on this thread: sets
/// up the process and the thread on the thread's first slow path, then refills the front
/// (`thread_cache::front_refill_pop`). Null when memory is exhausted.
#[cold]
#[inline(never)]
pub fn front_alloc_slow(i: u32, core: &'static SlabCache) -> *mut u8 {
    thread_cache::with(|tc| {
        if thread_cache::is_uninit(tc) {
            init_thread(tc);
        }
        tc.note_front_slow();
        thread_cache::front_refill_pop(tc, i, core)
    })
}

/// Slow path of a free to front `i` of dedicated cache `core` on this thread: sets up the
/// process and the thread on the thread's first slow path, then flushes half the front, or
/// all of it (`thread_cache::front_flush_push`).
///
/// # Safety
/// `p` must be a live slot of `core` that the caller gives up.
#[cold]
#[inline(never)]
pub unsafe fn front_free_slow(p: *mut u8, i: u32, core: &'static SlabCache) {
    thread_cache::with(|tc| {
        if thread_cache::is_uninit(tc) {
            init_thread(tc);
        }
        tc.note_front_slow();
        // SAFETY: caller's contract.
        unsafe { thread_cache::front_flush_push(tc, p, i, core) }
    })
}

/// A thread's first slow path: the process first, then the thread.
fn init_thread(tc: &thread_cache::ThreadCache) {
    init_once();
    thread_cache::set_up(tc);
}

/// The process-wide setup's state: [`DONE`], 0 before it, or [`in_progress`] of the
/// process whose thread runs it.
static INIT: AtomicU64 = AtomicU64::new(0);
const DONE: u64 = 2;

/// [`INIT`] while a thread of process `pid` runs the setup.
fn in_progress(pid: u32) -> u64 {
    u64::from(pid) << 2 | 1
}

/// Set by [`fork_child`]: this process was forked with the fork handlers registered, so it
/// has them (they are inherited with the process).
static FORKED_WITH_HANDLERS: AtomicBool = AtomicBool::new(false);

/// Process-wide setup, run by the first thread that takes a slow path ([`alloc_slow`],
/// [`free_slow`]) or builds a dedicated cache: fork handlers, and the allocator's side of
/// the accounting (class sizes, root usage, the object-stock drain, activation).
#[inline]
pub fn init_once() {
    if INIT.load(Ordering::Acquire) != DONE {
        init_slow();
    }
}

/// [`init_once`] before the setup is done: runs it, or waits for the thread running it. A
/// fork child whose parent was in the middle of it inherits the mark with no thread to
/// finish: a thread of another process holds it, so this one takes it over (the steps are
/// idempotent). Without that, the child's first slow path waited for ever.
#[cold]
#[inline(never)]
fn init_slow() {
    let me = in_progress(sys::process_id());
    let mut seen = INIT.load(Ordering::Acquire);
    loop {
        if seen == DONE {
            return;
        }
        if seen != me {
            // Not begun, or begun in the process this one was forked from.
            match INIT.compare_exchange(seen, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    set_up(seen == 0);
                    INIT.store(DONE, Ordering::Release);
                    return;
                }
                Err(now) => {
                    seen = now;
                    continue;
                }
            }
        }
        sys::yield_now();
        seen = INIT.load(Ordering::Acquire);
    }
}

/// The setup's steps. `fresh`: no thread began it before; else this is a fork child taking
/// over from its parent's thread, and the fork handlers are registered again only if the
/// fork ran none (registration and fork exclude each other in the C library: had the
/// parent's registration happened first, the fork would have run `fork_child`, which says
/// so), as twice they would take every lock twice at the next fork.
fn set_up(fresh: bool) {
    if !sys::check_page_size() {
        sys::fatal("the OS page size is larger than the 4 KiB slabcg was built for");
    }
    if fresh || !FORKED_WITH_HANDLERS.load(Ordering::Relaxed) {
        // SAFETY: the handlers take and release this crate's locks in the documented order
        // and never allocate (their own comments); they live for the whole program.
        unsafe { sys::thread::register_fork_handlers(fork_prepare, fork_parent, fork_child) };
    }
    hooks::read_environment();
    class_caches::register_with_accounting();
    hooks::set_root_usage_source(root_usage);
    hooks::set_object_drain(thread_cache::drain_object_stocks);
    hooks::set_on_activate(thread_cache::activate);
    hooks::set_on_death(handback::forget);
    if hooks::accounting_active() {
        // A scope was entered before the hook was registered (no allocation had been made
        // yet): catch up.
        thread_cache::activate();
    }
}

/// Bytes allocated outside every tenant scope: what the root tenant holds beyond its
/// children's charges.
fn root_usage() -> hooks::Unscoped {
    let s = crate::stats::stats();
    let unscoped = s.allocated.saturating_sub(s.allocated_charged) as u64;
    let large = (s.large_allocated as u64)
        .saturating_sub(large::CHARGED_LARGE.load(Ordering::Relaxed) as u64)
        .min(unscoped);
    hooks::Unscoped {
        slab: unscoped - large,
        large,
    }
}

// Fork handlers: take every lock an allocation or free can need, in the order the runtime
// paths nest them (thread registry -> accounting registry -> caches -> large-mapping cache),
// so that the child inherits none of them held by a thread that does not exist there.

/// The caches the fork handlers lock and unlock: every size class and every dedicated cache
/// (none joins during a fork: `cache::register_dedicated`).
fn for_each_cache(mut f: impl FnMut(&crate::cache::SlabCache)) {
    for c in class_caches::PLAIN
        .iter()
        .chain(class_caches::ACCOUNTED.iter())
    {
        f(c);
    }
    crate::cache::for_each_dedicated(&mut f);
}

unsafe extern "C" fn fork_prepare() {
    // First: the tenant locks' holders allocate, so they come before every allocator lock.
    hooks::fork_prepare_tenants();
    thread_cache::fork_prepare();
    hooks::fork_prepare();
    for_each_cache(|c| c.lock_for_fork());
    large::fork_prepare();
}

unsafe extern "C" fn fork_parent() {
    // SAFETY (all unlocks below): locked by fork_prepare in this thread.
    unsafe { large::fork_release() };
    for_each_cache(|c| unsafe { c.unlock_after_fork() });
    hooks::fork_parent();
    // SAFETY: as above.
    unsafe { thread_cache::fork_parent() };
    hooks::fork_release_tenants();
}

unsafe extern "C" fn fork_child() {
    FORKED_WITH_HANDLERS.store(true, Ordering::Relaxed);
    // SAFETY (all unlocks below): locked by fork_prepare in the thread that forked, which is
    // the child's only thread.
    unsafe { large::fork_release() };
    for_each_cache(|c| unsafe { c.unlock_after_fork() });
    decay_thread::fork_child();
    hooks::fork_child();
    // SAFETY: as above.
    unsafe { thread_cache::fork_child() };
    hooks::fork_release_tenants();
}

#[cfg(test)]
mod tests {
    use core::alloc::Layout;

    use crate::dedicated::Cache;

    /// A dedicated cache cannot be registered while a fork is in progress (between the
    /// prepare handler, which locks every registered cache, and the parent or child handler,
    /// which unlocks them): a cache registered then was never locked, and was unlocked
    /// anyway (releasing a lock another thread held) or inherited locked by the child.
    /// Registration waits for the fork to finish. Runs the handlers without forking.
    #[test]
    fn a_cache_built_during_a_fork_registers_after_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let layout = Layout::from_size_align(40, 8).unwrap();
        let before = Cache::builder("fork-before", layout).build();
        // SAFETY: paired with fork_parent below, in this thread.
        unsafe { super::fork_prepare() };
        assert!(before.core.lock_is_held(), "prepare locks every cache");
        let built = Arc::new(AtomicBool::new(false));
        let builder = {
            let built = built.clone();
            std::thread::spawn(move || {
                let c = Cache::builder("fork-during", layout).build();
                built.store(true, Ordering::SeqCst);
                c
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !built.load(Ordering::SeqCst),
            "a cache was registered during the fork"
        );
        // SAFETY: after fork_prepare in this thread.
        unsafe { super::fork_parent() };
        let during = builder.join().unwrap();
        assert!(!before.core.lock_is_held() && !during.core.lock_is_held());
    }
}
