//! Draining stocks: the registry of every thread's stock, `drain_all` (idle threads
//! included), giving a thread's stock back when it exits, and giving one slot's contents
//! back to the counters (`release`, which the charge paths' evictions use too).
//!
//! ## Why a stock owner needs no fence (asymmetric Dekker)
//!
//! Owner (fast path, `Stock::enter/leave`):   `in_cs = 1` (Relaxed); compiler fence;
//! `r = steal` (Acquire); if `r` back out; ...slots...; `in_cs = 0` (Release).
//!
//! Drainer (here, under the registry lock):   `steal = 1` (SeqCst); `membarrier()`;
//! wait for `in_cs == 0` (Acquire); take the slots; `steal = 0` (Release).
//!
//! `membarrier` makes every running thread of the process execute a full barrier at some
//! point B inside the call (a thread not running passes one when it is scheduled again).
//! Take the owner's store `in_cs = 1`. If it comes before B, the barrier makes it visible to
//! the drainer once `membarrier` returns, so the drainer waits for the matching `in_cs = 0`,
//! whose Release publishes the owner's slot writes. If it comes after B, the owner's load of
//! `steal` is also after B, and B orders the drainer's earlier `steal = 1` before it, so the
//! owner sees `steal` and backs out without touching the slots. Either way the two never
//! work on the slots at once. The compiler fence only stops the compiler from hoisting the
//! `steal` load above the `in_cs` store; the CPU reordering is what membarrier covers.
//! Without a usable membarrier (see `sys.rs`) a drainer drains only its own thread's stock.
//!
//! Both halves are `Stock` methods that the fast paths and this file call: the owner's
//! `enter`, the slot, `leave` (`with_slot` for `consume`; `refill` opens its own, with its
//! own hint `mru_free` and the forwarding entries), the drainer's
//! `request_steal` and `take_stolen` (wait, take, unlist, clear). `loom_tests.rs`
//! (`RUSTFLAGS="--cfg loom"`, `.ci/run`) runs those very methods under loom, whose atomics
//! `Stock` uses then (`slabcg_sys::sync`), with membarrier as a `SeqCst` fence on both sides:
//! an owner charging and uncharging against one and two drains, checking that the drainer
//! never takes while the owner works on its slots and that no byte or stat delta is lost
//! or counted twice.
//!
//! ## The registry and the holding list
//!
//! Two intrusive doubly-linked lists of `Stock`s (which live in thread-local storage)
//! behind one spin lock. The registry has every stock whose thread armed the exit hook
//! (`register`; thread exit unlinks, O(1)); fork uses it. The holding list has the stocks
//! that may hold something (`Stock::listed`): an owner joins it (O(1), under the lock)
//! before it makes a slot in an empty stock, and a drainer that took every slot of a stock
//! unlinks it. A stock off it holds nothing (stock.rs), so every drain walks the holding
//! list only: one membarrier plus O(holding stocks x slots) atomic work, no allocation, no
//! callbacks. With the stock budget (`objcg::hold_budget`: 4 slots per CPU for one objcg,
//! all threads together) and the idle-stock decay, that list follows the CPUs and the
//! threads busy lately, not every thread that ever charged: 4,000 idle threads that
//! charged one tenant leave at most 4 per CPU on it, and none once the decay has passed.
//! A stock's TLS memory outlives its unlinking: it is unlinked from a pthread key
//! destructor, and the no-`Drop` stock is freed only with the thread's TLS block after all
//! of them.
//!
//! Joining, and why a drain never misses a slot: the owner joins under the lock, then opens
//! its CS and makes the slot only if it still reads `listed` there. A drainer unlinks only
//! a stock it holds through the steal protocol (after `in_cs == 0` with `steal` set), and
//! clears `listed` before its Release store of `steal = 0`. So inside an owner's CS,
//! `listed` cannot change, and a slot is made only in a stock the next drain will walk:
//! one that is on the list when the drain takes the lock, or one that joins after it, whose
//! fill then reads a `STARTED` generation at least this drain's (see below).

use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::callbacks;
use crate::counter;
use crate::kin_entry::KinTaken;
use crate::node::Node;
use crate::objcg;
use crate::stat;
use crate::stock::{Contents, Stock, Taken, EXITED, REGISTERED, STOCK};
use crate::sys;
use crate::sys::{SpinGuard, SpinLock};
use crate::types::ObjectDrain;

static HEAD: AtomicPtr<Stock> = AtomicPtr::new(null_mut());
/// The holding list (module docs), and its length. Under the registry lock.
static HOLD_HEAD: AtomicPtr<Stock> = AtomicPtr::new(null_mut());
static HOLDING: AtomicUsize = AtomicUsize::new(0);
/// Stocks drains walked so far (tests: a refusal walks the stocks that hold something,
/// not every thread).
static VISITS: AtomicU64 = AtomicU64::new(0);

/// Drain generations. `STARTED` counts the drains begun (bumped first thing, before the
/// allocator's object drain); `COMPLETED` is the highest generation of a drain that reached
/// every thread (one with a process-wide barrier) and left nothing unsettled. Before a stock
/// is filled for a tenant (inside the stock's critical section, or under the thread's
/// object-stock lock), the filler reads `STARTED` and records it on the tenant and its
/// ancestors (`counter::note_stocked`). A drain either reached that thread after the fill
/// (the drainer's steal, or the object-stock lock, orders it after the critical section) and
/// took it, or started after the read, so its generation is above the record. Hence a
/// record below `COMPLETED` means every fill it stands for was taken by a drain, and a
/// refused charge whose refusing tenant has no later record skips the drain: nothing of that
/// subtree sits in any stock. The allocator's object drain may leave a racing free's push
/// behind for the next drain to find (object_stock.rs); it says so
/// (`hooks::note_object_drain_unsettled`), and that drain then completes nothing.
static STARTED: AtomicU64 = AtomicU64::new(0);
static COMPLETED: AtomicU64 = AtomicU64::new(0);
/// Bumped by the allocator's object drain when it left objects for the next drain: a drain
/// during which it moved completes no generation.
static UNSETTLED: AtomicU64 = AtomicU64::new(0);

pub(crate) fn note_unsettled() {
    UNSETTLED.fetch_add(1, Ordering::SeqCst);
}
/// Drains that walked the threads (for tests).
static WALKS: AtomicU64 = AtomicU64::new(0);

/// The generation a stock fill records, read just before the fill.
pub(crate) fn generation() -> u64 {
    STARTED.load(Ordering::SeqCst)
}

/// [`drain_all`], unless nothing of the refusing subtree (whose latest record is
/// `stocked`) was put in a stock since the last complete drain. A tenant at its limit under
/// fallible code then pays one drain, not one per refused charge.
pub(crate) fn drain_unless_clean(stocked: u64) {
    if is_clean(stocked) {
        return;
    }
    drain(ObjectDrain::Armed);
}

/// Whether nothing of a subtree whose latest stock fill record is `stocked` was put in a
/// stock since the last complete drain: a drain would take nothing of it back.
pub(crate) fn is_clean(stocked: u64) -> bool {
    stocked < COMPLETED.load(Ordering::SeqCst)
}

/// Registered stocks (threads that have charged something and not exited).
static REGISTERED_STOCKS: AtomicUsize = AtomicUsize::new(0);

/// Whether the idle-stock decay is worth running: more threads hold stocks than a few per
/// CPU, so what they pre-charge is no longer bounded by the CPUs. User context (the CPU
/// count is read once, which may allocate).
pub(crate) fn decay_wanted() -> bool {
    if !DECAY_ON.load(Ordering::Relaxed) {
        return false;
    }
    static CPUS: OnceLock<usize> = OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    REGISTERED_STOCKS.load(Ordering::Relaxed) > DECAY_THREADS_PER_CPU * cpus
}

/// Whether the idle-stock decay may run (`hooks::set_idle_decay`).
static DECAY_ON: AtomicBool = AtomicBool::new(true);

pub(crate) fn set_decay(on: bool) {
    DECAY_ON.store(on, Ordering::Relaxed);
}

/// Threads per CPU with stocks above which idle ones are given back in the background.
const DECAY_THREADS_PER_CPU: usize = 4;

/// The idle-stock decay: gives back the stocks of threads whose slow paths have not used
/// them since the previous call (their `clock` did not move), as jemalloc and mimalloc
/// decay idle thread caches. Called every `oom::DECAY_INTERVAL` by the background thread,
/// so an idle thread's pre-charged bytes go back within two intervals and what stocks hold
/// is bounded by the threads that were busy lately, not by all of them. A thread that keeps
/// working but only on its fast paths looks idle too: it is drained and refills at its next
/// charge, one slow path per interval. The same protocol as `drain_all`, for the chosen
/// stocks only; without a process-wide barrier it does nothing. Returns how many stocks it
/// gave back.
pub(crate) fn drain_idle() -> usize {
    if !DECAY_ON.load(Ordering::Relaxed) {
        return 0;
    }
    // The objects idle threads keep charged in the allocator's object stocks first, outside
    // the lock: their uncharges may make a slot in this thread's stock, which joins the
    // holding list under it.
    callbacks::object_drain(ObjectDrain::Idle);
    let own = STOCK.with(|s| s as *const Stock);
    let _g = lock();
    let mut chosen = 0;
    let mut p = HOLD_HEAD.load(Ordering::Relaxed);
    while !p.is_null() {
        // SAFETY (here and below): listed stocks are registered, valid while we hold the
        // lock.
        let s = unsafe { &*p };
        let clock = s.clock();
        let idle =
            !core::ptr::eq(p, own) && clock == s.seen.load(Ordering::Relaxed) && s.holds_any();
        s.seen.store(clock, Ordering::Relaxed);
        if idle {
            s.idle.store(true, Ordering::Relaxed);
            s.request_steal();
            chosen += 1;
        }
        p = s.hnext.load(Ordering::Relaxed);
    }
    if chosen == 0 {
        return 0;
    }
    let remote = sys::remote_barrier();
    let mut p = HOLD_HEAD.load(Ordering::Relaxed);
    while !p.is_null() {
        // SAFETY: as above.
        let s = unsafe { &*p };
        // Read first: finishing the steal may unlink `s`.
        p = s.hnext.load(Ordering::Relaxed);
        if s.idle.swap(false, Ordering::Relaxed) {
            finish_steal(s, Finish::reached(remote));
        }
    }
    if remote {
        chosen
    } else {
        0
    }
}

/// How a drainer finishes the steal of a stock whose `steal` it set before the barrier.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Finish {
    /// The barrier reached the stock's owner (or it is the drainer's own): take the slots.
    Take,
    /// It did not: only withdraw the request.
    Withdraw,
}

impl Finish {
    fn reached(barrier: bool) -> Finish {
        if barrier {
            Finish::Take
        } else {
            Finish::Withdraw
        }
    }
}

/// The second half of draining `s`, whose `steal` was set before the barrier: with
/// [`Finish::Take`], wait for the owner to leave its critical section, take the slots and
/// give them back; with [`Finish::Withdraw`], only withdraw the request. Under the registry
/// lock. Every slot taken, `s` leaves the holding list, before the Release clear of `steal`
/// publishes that to its owner (module docs).
fn finish_steal(s: &Stock, how: Finish) {
    VISITS.fetch_add(1, Ordering::Relaxed);
    match how {
        Finish::Take => release_taken(&s.take_stolen(unlist)),
        Finish::Withdraw => s.withdraw_steal(),
    }
}

/// Puts this thread's stock on the holding list, before the caller makes a slot in it
/// (module docs). Slow path: one lock hold, after each drain that emptied the stock.
pub(crate) fn join(s: &Stock) {
    let _g = lock();
    if s.listed() || s.flags() & REGISTERED == 0 {
        return;
    }
    let me = s as *const Stock as *mut Stock;
    let head = HOLD_HEAD.load(Ordering::Relaxed);
    s.hprev.store(null_mut(), Ordering::Relaxed);
    s.hnext.store(head, Ordering::Relaxed);
    // SAFETY: the head is a listed stock, valid under the lock.
    if let Some(h) = unsafe { head.as_ref() } {
        h.hprev.store(me, Ordering::Relaxed);
    }
    HOLD_HEAD.store(me, Ordering::Relaxed);
    s.listed.store(true, Ordering::Relaxed);
    HOLDING.fetch_add(1, Ordering::Relaxed);
}

/// Takes `s` off the holding list if it is on it. Under the registry lock, by a drainer
/// holding `s` (steal protocol) or by its exiting owner, with every slot empty.
fn unlist(s: &Stock) {
    if !s.listed() {
        return;
    }
    debug_assert!(
        !s.holds_any(),
        "a stock leaves the holding list with a slot"
    );
    let (next, prev) = (
        s.hnext.load(Ordering::Relaxed),
        s.hprev.load(Ordering::Relaxed),
    );
    // SAFETY: the neighbours are listed stocks, valid under the lock.
    unsafe {
        match prev.as_ref() {
            None => {
                debug_assert!(core::ptr::eq(HOLD_HEAD.load(Ordering::Relaxed), s));
                HOLD_HEAD.store(next, Ordering::Relaxed);
            }
            Some(p) => p.hnext.store(next, Ordering::Relaxed),
        }
        if let Some(n) = next.as_ref() {
            n.hprev.store(prev, Ordering::Relaxed);
        }
    }
    s.listed.store(false, Ordering::Relaxed);
    HOLDING.fetch_sub(1, Ordering::Relaxed);
}

/// How many drains walked the stocks so far (tests).
pub(crate) fn walks() -> u64 {
    WALKS.load(Ordering::Relaxed)
}

/// How many stocks drains walked so far, and how many are on the holding list now (tests).
pub(crate) fn visits() -> (u64, usize) {
    (
        VISITS.load(Ordering::Relaxed),
        HOLDING.load(Ordering::Relaxed),
    )
}
/// The registry lock: the registry, the holding list and the drains (module docs).
static LOCK: SpinLock<()> = SpinLock::new(());

fn lock() -> SpinGuard<'static, ()> {
    LOCK.lock()
}

/// The registry lock, for the per-thread caches of children's counts (`kin_cache.rs`): an
/// entry is installed, evicted and swept only under it, and a thread's exit empties its
/// entries under it, so a sweep that holds it sees every entry there is.
pub(crate) fn registry_lock() -> SpinGuard<'static, ()> {
    lock()
}

/// Calls `f` on every registered stock. Under the registry lock (`_g`).
pub(crate) fn for_each_registered(_g: &SpinGuard<'static, ()>, mut f: impl FnMut(&Stock)) {
    let mut p = HEAD.load(Ordering::Relaxed);
    // SAFETY: registered stocks are valid under the lock (unlinked only under it, before
    // their TLS memory goes away).
    while let Some(s) = unsafe { p.as_ref() } {
        f(s);
        p = s.next.load(Ordering::Relaxed);
    }
}

/// Releases `n` strong references on `node` that a kin entry held. User context: the last
/// one drops the node.
pub(crate) fn release_credits(node: *const u8, n: u64) {
    for _ in 0..n {
        // SAFETY: each credit is a strong reference on the node taken through a pointer
        // with `into_raw`'s provenance (`kin_cache::cache`, or a reference given back to
        // the entry), released once, here.
        unsafe { std::sync::Arc::decrement_strong_count(node as *const Node) };
    }
}

/// Moves every registered thread's zombie list to the global one, for a sweep that frees
/// them all (`tenant::free_zombies`). O(threads + zombies) under the registry lock, with no
/// allocation.
pub(crate) fn collect_zombies() {
    let g = lock();
    for_each_registered(&g, |s| objcg::move_to_global(&s.zombies));
}

/// Adds what an emptied kin entry held to its parent's shared counts: the births minus
/// deaths to `handles`, the adopted objcgs to `adopted` (both wrapping: either may be
/// negative, and the parent's sum stays right). Returns the credits, strong references on
/// the parent's `Arc` that the caller releases (outside the registry lock: the last one
/// drops the node, which frees memory). Under the registry lock, or in a fork child.
pub(crate) fn release_kin(t: &KinTaken) -> u32 {
    // SAFETY: an entry's node is alive while the entry is not empty (`kin_cache.rs`: the
    // parent keeps `BIAS` in `handles` until a sweep under this lock emptied every entry),
    // and this entry was not empty a moment ago, under the lock the sweeps take.
    let node = unsafe { &*(t.node as *const Node) };
    debug_assert!(
        node.kin.handles.load(Ordering::Relaxed) != 0,
        "a kin entry of a dead node"
    );
    node.kin
        .handles
        .fetch_add(t.births as usize, Ordering::Relaxed);
    node.kin
        .adopted
        .fetch_add(t.adopted as usize, Ordering::Relaxed);
    t.credits
}

/// Links this thread's stock into the registry and arms the exit hook. Returns false (and
/// marks the stock exited) when it cannot be sure that thread exit will unlink the stock:
/// the caller then uses the counters directly.
///
/// The hook is the one pthread key of `slabcg-sys`, not a `thread_local!` with `Drop`. The
/// key runs after the thread's `thread_local!` destructors, and again for keys set during
/// them, so it also covers a first charge or uncharge from a destructor (a C library's
/// thread cleanup freeing an object). A `thread_local!` destructor armed that late would
/// never run: the stock would stay in the registry with its bytes, a later thread reusing
/// its TLS block would link the registry into a cycle, and the C runtime's entry for the
/// destructor (from its own malloc) would leak once per such thread.
#[cold]
pub(crate) fn register(s: &Stock) -> bool {
    // Setting the pthread key may call libc's malloc (`pthread_setspecific` for a key past
    // the thread descriptor's first block), which is slabcg itself when it is preloaded
    // (`slabcg-capi`).
    // Those allocations are the root's: charged to the caller's tenant, they would come
    // back here (the stock is not registered yet) and recurse until the stack overflows.
    let _root = crate::scope::unscoped();
    // SAFETY: `exit_hook(s)` runs once at this thread's exit, while `s` (this thread's
    // const, Drop-less TLS stock) is still valid.
    if !unsafe { sys::on_thread_exit(exit_hook, s as *const Stock as *const u8) } {
        s.set_flags(EXITED, 0);
        return false;
    }
    let _g = lock();
    let me = s as *const Stock as *mut Stock;
    let head = HEAD.load(Ordering::Relaxed);
    s.prev.store(null_mut(), Ordering::Relaxed);
    s.next.store(head, Ordering::Relaxed);
    // SAFETY: the head is a registered stock, valid under the lock.
    if let Some(h) = unsafe { head.as_ref() } {
        h.prev.store(me, Ordering::Relaxed);
    }
    HEAD.store(me, Ordering::Relaxed);
    s.set_flags(REGISTERED, 0);
    REGISTERED_STOCKS.fetch_add(1, Ordering::Relaxed);
    true
}

/// The pthread key destructor armed by [`register`].
///
/// # Safety
/// `p` is the exiting thread's own `STOCK`, whose TLS memory outlives the key destructors.
unsafe extern "C" fn exit_hook(p: *mut core::ffi::c_void) {
    // SAFETY: as the caller promises.
    exit(unsafe { &*(p as *const Stock) });
}

/// Thread exit: from now on this thread charges the counters directly; give back what the
/// stock holds and unlink it. Runs once per registration, from the pthread key; a stock
/// that is not registered is only marked exited.
fn exit(s: &Stock) {
    s.set_flags(EXITED, 0);
    if s.flags() & REGISTERED == 0 {
        return;
    }
    let mut taken = None;
    if s.enter() {
        taken = Some(s.take_all());
    }
    s.leave();
    // If a drainer was stealing, it takes the slots; it holds the lock we take below.
    if let Some(t) = taken {
        release_taken(&t);
    }
    let g = lock();
    // Unless it withdrew (its remote barrier failed: no membarrier, and no mprotect
    // fallback): then the slots and forwarding entries are still here, with `steal` clear.
    // Drainers set and clear `steal` under the lock we hold, so none is stealing now, and
    // this take finds whatever is left (nothing, most times).
    let late = if s.enter() { Some(s.take_all()) } else { None };
    s.leave();
    // Its zombies wait on the global list now (pushes from here on go there: `EXITED`),
    // moved under the lock so that a full sweep or a fork does not miss them in between.
    objcg::move_to_global(&s.zombies);
    // The cached counts go back to their parents; their references after the lock.
    let kin = s.kin.take_all();
    let credits = kin.map(|t| t.as_ref().map_or(0, release_kin));
    // Empty now: taken above, by this thread or by a stealing drainer.
    unlist(s);
    let (next, prev) = (
        s.next.load(Ordering::Relaxed),
        s.prev.load(Ordering::Relaxed),
    );
    // SAFETY: the neighbours are registered stocks, valid under the lock (stocks are
    // unlinked only under it, before their TLS memory goes away).
    unsafe {
        match prev.as_ref() {
            None => {
                debug_assert!(core::ptr::eq(HEAD.load(Ordering::Relaxed), s));
                HEAD.store(next, Ordering::Relaxed);
            }
            Some(p) => p.next.store(next, Ordering::Relaxed),
        }
        if let Some(n) = next.as_ref() {
            n.prev.store(prev, Ordering::Relaxed);
        }
    }
    REGISTERED_STOCKS.fetch_sub(1, Ordering::Relaxed);
    s.set_flags(0, REGISTERED);
    drop(g);
    if let Some(t) = late {
        release_taken(&t);
    }
    for (t, n) in kin.iter().zip(credits) {
        if let Some(t) = t {
            release_credits(t.node, u64::from(n));
        }
    }
}

/// Drains every stock (idle threads included) back to the counters and the shared stats,
/// and has the allocator drain every thread's object stock. Runtime-safe: no allocation, no
/// callbacks, no panics.
pub(crate) fn drain_all() {
    drain(ObjectDrain::All);
}

/// Drains every stock that holds something (the holding list: every stock that holds
/// anything is on it), after the allocator's object drain over `objects`.
fn drain(objects: ObjectDrain) {
    let generation = STARTED.fetch_add(1, Ordering::SeqCst) + 1;
    WALKS.fetch_add(1, Ordering::Relaxed);
    let unsettled = UNSETTLED.load(Ordering::SeqCst);
    // Objects the allocator keeps pre-charged per thread go first: their uncharges land in
    // this thread's stock, which the loop below drains.
    callbacks::object_drain(objects);
    let settled = UNSETTLED.load(Ordering::SeqCst) == unsettled;
    let own = STOCK.with(|s| s as *const Stock);
    let _g = lock();
    let mut others = 0usize;
    let mut p = HOLD_HEAD.load(Ordering::Relaxed);
    while !p.is_null() {
        // SAFETY (here and below): listed stocks are registered, valid while we hold the
        // lock.
        let s = unsafe { &*p };
        s.request_steal();
        others += usize::from(!core::ptr::eq(s, own));
        p = s.hnext.load(Ordering::Relaxed);
    }
    // No other stock holds anything (stocks off the list are empty): no barrier needed to
    // reach them, and the drain is complete without one. A stock that joins the list after
    // we took the lock records this generation or a later one for its fill.
    let remote = others == 0 || sys::remote_barrier();
    let mut p = HOLD_HEAD.load(Ordering::Relaxed);
    while !p.is_null() {
        // SAFETY: as above.
        let s = unsafe { &*p };
        // Read first: finishing the steal unlinks `s`.
        p = s.hnext.load(Ordering::Relaxed);
        finish_steal(s, Finish::reached(remote || core::ptr::eq(s, own)));
    }
    // Without a process-wide barrier only this thread was drained (the allocator's object
    // drain uses the same barrier, so it reached every thread exactly when this one did): no
    // generation completes then.
    if remote && settled {
        COMPLETED.fetch_max(generation, Ordering::SeqCst);
    }
}

/// Fork support, before `fork`: holds the registry lock so that the child does not inherit
/// it held by a thread that no longer exists there. The slabcg allocator calls these three
/// from its own `pthread_atfork` handlers, inside `hooks::fork_prepare_tenants` /
/// `hooks::fork_release_tenants`; a program using the accounting alone with another
/// allocator should register all five itself, in that order.
pub fn fork_prepare() {
    LOCK.lock_raw();
}

/// Fork support, in the parent after `fork`.
pub fn fork_parent() {
    // SAFETY: `fork_prepare` took the lock in this thread, before the fork.
    unsafe { LOCK.unlock_raw() };
}

/// Fork support, in the child after `fork`: only the forking thread survives, so every other
/// registered stock gives its pre-charged bytes back (the child is single-threaded; a stock
/// whose owner was inside its critical section at the fork may be half-updated and is
/// dropped without giving back), and the registry keeps only this thread's stock.
pub fn fork_child() {
    let own = STOCK.with(|s| s as *const Stock as *mut Stock);
    let mut p = HEAD.load(Ordering::Relaxed);
    let mut own_registered = false;
    while !p.is_null() {
        // SAFETY: the stocks' TLS memory is still mapped in the child (a copy of the
        // parent's); nothing else runs.
        let s = unsafe { &*p };
        let next = s.next.load(Ordering::Relaxed);
        if p == own {
            own_registered = true;
        } else {
            if !s.in_cs.load(Ordering::Relaxed) {
                release_taken(&s.take_all());
            }
            // Its counts go to the parent; its references on the parent stay taken (a
            // leak of nodes in the child, never a dangling one: dropping a node here could
            // free memory inside the fork handler).
            for t in s.kin.take_all().iter().flatten() {
                release_kin(t);
            }
            objcg::move_to_global(&s.zombies);
        }
        p = next;
    }
    // SAFETY: as above.
    let own_listed = unsafe {
        (*own).steal.store(false, Ordering::Relaxed);
        (*own).next.store(null_mut(), Ordering::Relaxed);
        (*own).prev.store(null_mut(), Ordering::Relaxed);
        (*own).hnext.store(null_mut(), Ordering::Relaxed);
        (*own).hprev.store(null_mut(), Ordering::Relaxed);
        (*own).listed()
    };
    HEAD.store(
        if own_registered { own } else { null_mut() },
        Ordering::Relaxed,
    );
    REGISTERED_STOCKS.store(usize::from(own_registered), Ordering::Relaxed);
    // The other stocks are gone with their threads; this one stays on the holding list if
    // it was (it may hold slots).
    HOLD_HEAD.store(if own_listed { own } else { null_mut() }, Ordering::Relaxed);
    HOLDING.store(usize::from(own_listed), Ordering::Relaxed);
    // SAFETY: `fork_prepare` took the lock in the thread that forked, which is this one.
    unsafe { LOCK.unlock_raw() };
}

/// Gives one slot's contents back: bytes of both pools to the counter, deltas to the shared
/// stats, then drops the slot's refs (its object pool's bytes, plus the slot ref; the API
/// pool's bytes hold none).
pub(crate) fn release(c: &Contents) {
    let Some(oc) = objcg::lookup(c.id) else {
        return;
    };
    // The slot's share of the budget, before its ref (objcg.rs).
    oc.release_hold();
    give_back(oc, c);
    oc.put(c.bytes + 1);
}

/// Gives `c`'s bytes of both pools back to the counter of `oc`'s tenant and its deltas to
/// the shared stats; drops no refs. The caller holds a ref on `oc` for the call.
pub(crate) fn give_back(oc: &objcg::ObjCg, c: &Contents) {
    if c.bytes + c.api == 0 && c.dirty == 0 {
        return;
    }
    // SAFETY: the caller holds a ref on `oc` (the slot ref it drops after this).
    if let Some(t) = unsafe { oc.read() } {
        if c.bytes + c.api != 0 {
            counter::uncharge(&*t, c.bytes + c.api);
        }
        for (k, d) in c.deltas() {
            stat::flush(&*t, k, d as i64);
        }
    }
}

/// Gives back everything taken from a stock: each slot ([`release`]), then the refs its
/// forwarding entries owed on dead objcgs (`stock.rs`), which may free them.
pub(crate) fn release_taken(t: &Taken) {
    t.slots.iter().for_each(release);
    for (&id, &refs) in t.owed.ids.iter().zip(&t.owed.refs) {
        put_owed(id, refs);
    }
}

/// Puts `refs` refs that a forwarding entry owed on objcg `id` (none for id 0).
pub(crate) fn put_owed(id: crate::types::ObjCgId, refs: u64) {
    if let Some(oc) = objcg::lookup(id) {
        // The entry held these refs (stock.rs); nothing touches the objcg after.
        oc.put(refs);
    }
}

#[cfg(test)]
pub(crate) fn registered_count() -> usize {
    let _g = lock();
    let mut n = 0;
    let mut p = HEAD.load(Ordering::Relaxed);
    while !p.is_null() {
        n += 1;
        // SAFETY: as in drain_all.
        p = unsafe { (*p).next.load(Ordering::Relaxed) };
    }
    n
}
