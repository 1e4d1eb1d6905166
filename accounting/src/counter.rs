//! The hierarchical lock-free counter (the kernel's `page_counter`): mechanism only, no
//! policy. A charge of `n` adds `n` to a node and every ancestor *including the root*; the
//! root is never limited, so its step is a plain `fetch_add` (the root line is contended only
//! by stock refills, i.e. once per `CHARGE_BATCH` bytes per thread, and by the charges of
//! tenants within a refill's quarter of their `max` or `high`, which go one by one).
//!
//! Invariant per node, at every observation: `usage <= max + allowance` (for limited nodes),
//! where `allowance` is 0 except while an overdraft window is open (`open_overdraft`: the
//! OOM killer's grant to the work in flight, see `oom.rs`), and never above the node's
//! overdraft. It holds because a limited node only ever grows through a CAS that checks the
//! bound. Races that are tolerated, as in `page_counter.c`:
//! - `set_max` below the current usage does not evict; it only makes later charges fail.
//!   A charge racing with `set_max` from unlimited to limited may land on the old bound.
//! - `peak` is raised during the walk, so a charge that is later rolled back (an ancestor
//!   refused) may leave `peak` up to `n` higher than any settled usage, never above `max`.
//! - `pressure` is set by chargers and cleared by unchargers without a lock; a flag flip
//!   that loses a race is corrected by the next charge or uncharge of that node.
//! - The overdraft window is closed by the uncharge that brings usage back to `max`, without
//!   a lock: an opener racing with it sees its retry fail and opens it again (`oom.rs` bounds
//!   the rounds), a window closed a moment early only sends a charge to the OOM path again,
//!   and a charge whose CAS raced with the close may land above `max` (never above `max` +
//!   the allowance it read).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};

/// A node that has a counter and (except the root) a parent.
pub(crate) trait Hierarchy {
    fn counter(&self) -> &Counter;
    fn parent(&self) -> Option<&Self>;
}

/// One node's share of the hierarchical counter.
pub(crate) struct Counter {
    usage: AtomicU64,
    max: AtomicU64,
    high: AtomicU64,
    peak: AtomicU64,
    /// Bytes a charge may pass `max` by while an overdraft window is open; 0 when closed.
    allowance: AtomicU64,
    /// The drain generation (`drain.rs`) read after the latest fill of a stock with this
    /// subtree's bytes: a refusal here needs no drain when every such fill came before a
    /// complete drain.
    stocked: AtomicU64,
    /// Events as cgroup v2 counts them, indexed by [`Event`]: `events` at this node and in
    /// its subtree (memory.events), `local` at this node only (memory.events.local).
    events: [AtomicU64; NR_EVENTS],
    local: [AtomicU64; NR_EVENTS],
    pressure: AtomicBool,
    /// When a charge last drained the stocks on crossing this node's `high` (ms,
    /// `sys::now_ms`; 0: never): [`claim_high_drain`](Self::claim_high_drain).
    high_drained: AtomicU64,
    /// The crossing mark: [`MARK_EPOCH`] while the charge that took usage across `high`
    /// (`note_high` with `defer`) has not decided, after its drain if it made one
    /// ([`raise_high`]); anything else (0 once cleared) is no mark. Meanwhile other charges
    /// that find usage above `high` leave the pressure and the event to it, since its
    /// drain may take usage back under.
    crossing: AtomicU64,
}

/// The value a mark of `crossing` holds: a fork child moves it on, so the marks of
/// crossings that were in flight in threads the child does not have are no marks there.
static MARK_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Fork support, in the child: forget every crossing's mark.
pub(crate) fn fork_child() {
    MARK_EPOCH.fetch_add(1, Relaxed);
}

/// A node's crossings of its `high` drain the stocks at most once in this many ms. A
/// tenant whose objects sit just under its `high` while another thread frees them crosses
/// it again every few dozen allocations (the freeing thread's stock keeps what it frees,
/// and refills bring usage back up after each drain): unbounded, that was a drain every
/// 33 allocations (a review's test, 6,200 in 200,000).
const HIGH_DRAIN_EVERY_MS: u64 = 10;

/// The process's budget of drains for crossings, whatever the node: a token bucket of
/// [`HIGH_DRAIN_BURST`] drains refilled by one a millisecond, `last_ms << 8 | tokens`.
/// Each drain takes every thread's stock, for every tenant: a hundred tenants sitting at
/// their `high`, each at its 10 ms bound, would drain 10,000 times a second. Past the
/// budget, a crossing raises the pressure on what is counted.
static HIGH_DRAIN_TOKENS: AtomicU64 = AtomicU64::new(0);
const HIGH_DRAIN_BURST: u64 = 64;

const NR_EVENTS: usize = 4;

/// The kinds of event a counter counts.
#[derive(Clone, Copy)]
pub(crate) enum Event {
    High = 0,
    Max = 1,
    Oom = 2,
    /// The tenant was picked by the OOM killer (`oom.rs`).
    OomKill = 3,
}

/// Event counts, as in cgroup v2: [`Tenant::events`](crate::Tenant::events) counts the tenant's own events and its
/// descendants' (`memory.events`), [`Tenant::events_local`](crate::Tenant::events_local) its own only
/// (`memory.events.local`). An event is the tenant's own when its limit is the one involved:
/// a charge that left its usage above its `high`, or one its `max` refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events {
    /// Charges that left usage above `high`.
    pub high: u64,
    /// Charges refused by `max` (after draining and reclaim). One charge can count at two
    /// tenants: refused by one limit, and after the kill its overdraft allowed, by an
    /// ancestor's (which then counts the `oom` too).
    pub max: u64,
    /// Charges that failed because of it: allocations that returned null and
    /// `Tenant::charge` calls that returned an error.
    pub oom: u64,
    /// Times the OOM killer picked this tenant as its victim (with [`OomPolicy::Kill`]);
    /// [`Tenant::kill`](crate::Tenant::kill) is not counted here.
    ///
    /// [`OomPolicy::Kill`]: crate::OomPolicy::Kill
    /// [`Tenant::kill`]: crate::Tenant::kill
    pub oom_kill: u64,
}

/// Which events of a node [`Events::read`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The node's own and its descendants' (`memory.events`).
    Subtree,
    /// The node's own only (`memory.events.local`).
    Local,
}

impl Events {
    pub(crate) fn read(c: &Counter, reach: Reach) -> Events {
        let get = |ev| match reach {
            Reach::Subtree => c.events(ev),
            Reach::Local => c.events_local(ev),
        };
        Events {
            high: get(Event::High),
            max: get(Event::Max),
            oom: get(Event::Oom),
            oom_kill: get(Event::OomKill),
        }
    }
}

impl Counter {
    pub(crate) const fn new() -> Counter {
        Counter {
            usage: AtomicU64::new(0),
            max: AtomicU64::new(u64::MAX),
            high: AtomicU64::new(u64::MAX),
            peak: AtomicU64::new(0),
            allowance: AtomicU64::new(0),
            stocked: AtomicU64::new(0),
            events: [const { AtomicU64::new(0) }; NR_EVENTS],
            local: [const { AtomicU64::new(0) }; NR_EVENTS],
            pressure: AtomicBool::new(false),
            high_drained: AtomicU64::new(0),
            crossing: AtomicU64::new(0),
        }
    }

    /// Whether a charge that crosses this node's `high` at `now` (ms) may drain the stocks:
    /// none did for it within [`HIGH_DRAIN_EVERY_MS`], and the process's budget of such
    /// drains has one left ([`HIGH_DRAIN_TOKENS`]).
    pub(crate) fn claim_high_drain(&self, now: u64) -> bool {
        self.claim_high_drain_from(now, &HIGH_DRAIN_TOKENS)
    }

    /// [`claim_high_drain`](Self::claim_high_drain) with the process budget in `budget`
    /// (tests give their own).
    fn claim_high_drain_from(&self, now: u64, budget: &AtomicU64) -> bool {
        let now = now.max(1);
        let last = self.high_drained.load(Relaxed);
        // Saturating: a clock read older than the last claim's (read before it, then
        // preempted) is within its interval, and must not move the slot back.
        if last != 0 && now.saturating_sub(last) < HIGH_DRAIN_EVERY_MS {
            return false;
        }
        // The node's slot first: of its racing crossers, one goes on.
        if self
            .high_drained
            .compare_exchange(last, now, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        // Then a token, retried while other nodes' claims move the bucket: losing that
        // race is no reason to give up this drain (nor the node's slot with it).
        let now_low = now & (u64::MAX >> 8);
        let mut bucket = budget.load(Relaxed);
        loop {
            let (then, tokens) = (bucket >> 8, bucket & 0xff);
            let tokens = tokens
                .saturating_add(now_low.saturating_sub(then))
                .min(HIGH_DRAIN_BURST);
            if tokens == 0 {
                // Over budget: no drain, so the node's slot is not used up.
                let _ = self
                    .high_drained
                    .compare_exchange(now, last, Relaxed, Relaxed);
                return false;
            }
            // `then` never moves back (a clock read older than the last claim's would
            // refill the same milliseconds twice).
            let next = now_low.max(then) << 8 | (tokens - 1);
            match budget.compare_exchange_weak(bucket, next, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(seen) => bucket = seen,
            }
        }
    }

    /// The crossing charge that marked this node has decided: charges decide its pressure
    /// themselves again.
    pub(crate) fn clear_crossing(&self) {
        self.crossing.store(0, Relaxed);
    }

    pub(crate) fn usage(&self) -> u64 {
        self.usage.load(Relaxed)
    }
    pub(crate) fn max(&self) -> u64 {
        self.max.load(Relaxed)
    }
    pub(crate) fn set_max(&self, v: u64) {
        self.max.store(v, Relaxed)
    }
    pub(crate) fn high(&self) -> u64 {
        self.high.load(Relaxed)
    }
    pub(crate) fn set_high(&self, v: u64) {
        self.high.store(v, Relaxed);
        let above = self.usage() > v;
        if self.pressure.load(Relaxed) != above {
            self.pressure.store(above, Relaxed);
        }
    }
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Relaxed)
    }
    pub(crate) fn under_pressure(&self) -> bool {
        self.pressure.load(Relaxed)
    }

    /// Lets charges pass `max` by up to `bytes` until an uncharge brings usage back to
    /// `max` (or below), which closes the window again.
    pub(crate) fn open_overdraft(&self, bytes: u64) {
        self.allowance.store(bytes, Relaxed);
    }
    /// The drain generation of the latest stock fill recorded for this subtree.
    pub(crate) fn stocked(&self) -> u64 {
        self.stocked.load(Ordering::SeqCst)
    }
    /// Whether an overdraft window is open.
    pub(crate) fn overdraft_open(&self) -> bool {
        self.allowance.load(Relaxed) != 0
    }

    /// Adds `n` to this node only, unless that would pass `max`.
    fn try_add(&self, n: u64) -> bool {
        let max = self.max.load(Relaxed);
        if max == u64::MAX {
            return self.add_unbounded(n);
        }
        // Read again on every try: a window closed meanwhile no longer counts.
        self.add_if(|cur| {
            cur.checked_add(n)
                .filter(|&new| new <= max.saturating_add(self.allowance.load(Relaxed)))
        })
    }

    /// Adds `n` for a stock's refill, beyond what the charge itself needs: within `max`,
    /// never through an overdraft window (the OOM killer's grant to the work in flight), and
    /// never across `high`, so that bytes nobody uses yet do not start pressure. With
    /// `above_high` (a quarter refill), a node already above `high` takes it too: a tenant
    /// that lives above its `high` would otherwise charge every object on the shared
    /// counters, and quarter refills keep what stocks add to its usage (and so how long its
    /// pressure outlasts its own objects) to 64 KiB per thread. The caller tries a smaller
    /// refill or exactly what it needs when this refuses.
    fn try_add_refill(&self, n: u64, above_high: bool) -> bool {
        let (max, high) = (self.max.load(Relaxed), self.high.load(Relaxed));
        if max == u64::MAX && high == u64::MAX {
            return self.add_unbounded(n);
        }
        self.add_if(|cur| {
            let new = cur.checked_add(n)?;
            (new <= max && (new <= high || (above_high && cur > high))).then_some(new)
        })
    }

    /// Adds `n` for bytes that move here from another branch of the tree (free objects an
    /// object stock hands to the next tenant, `charge::transfer`). Stricter than
    /// [`try_add`](Self::try_add): never through an overdraft window (the OOM killer's grant
    /// to the work in flight) and only into at most half of the room left below the lower
    /// of `max` and `high`, so that objects this tenant did not allocate neither raise its
    /// events nor eat the room its own work needs. `peak` counts them, as it counts bytes in
    /// stocks.
    fn try_add_moved(&self, n: u64) -> bool {
        let bound = self.max.load(Relaxed).min(self.high.load(Relaxed));
        if bound == u64::MAX {
            return self.add_unbounded(n);
        }
        self.add_if(|cur| (n <= bound.saturating_sub(cur) / 2).then(|| cur + n))
    }

    /// Adds `n` with no bound to check (the root, and tenants without a limit), so with no
    /// CAS loop. Only more than 2^64 bytes outstanding can overflow it; that is refused
    /// (after a moment of wrapped usage) rather than kept wrapped.
    fn add_unbounded(&self, n: u64) -> bool {
        let old = self.usage.fetch_add(n, Relaxed);
        match old.checked_add(n) {
            Some(new) => {
                self.raise_peak(new);
                true
            }
            None => {
                self.usage.fetch_sub(n, Relaxed);
                false
            }
        }
    }

    /// Moves usage from `cur` to `next(cur)` by CAS, or refuses when `next` says `None`.
    fn add_if(&self, next: impl Fn(u64) -> Option<u64>) -> bool {
        let mut cur = self.usage.load(Relaxed);
        loop {
            let Some(new) = next(cur) else {
                return false;
            };
            match self.usage.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
                Ok(_) => {
                    self.raise_peak(new);
                    return true;
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Plain load first: peak is rarely raised, and fetch_max would dirty the line.
    fn raise_peak(&self, new: u64) {
        if new > self.peak.load(Relaxed) {
            self.peak.fetch_max(new, Relaxed);
        }
    }

    /// Removes `n` from this node only; clears `pressure` once usage is back to `high`.
    /// Usage stops at 0: only a caller that uncharges more than it charged
    /// (`Tenant::uncharge`) gets there, and a wrapped counter would refuse every charge.
    fn sub(&self, n: u64) {
        let mut old = self.usage.load(Relaxed);
        let new = loop {
            let new = old.saturating_sub(n);
            match self.usage.compare_exchange_weak(old, new, Relaxed, Relaxed) {
                Ok(_) => break new,
                Err(seen) => old = seen,
            }
        };
        if old < n {
            // Correct callers never get here; `Tenant::uncharge` of too many bytes does.
            #[cfg(debug_assertions)]
            debug_assert!(
                API_UNCHARGED.load(Relaxed),
                "counter underflow ({old} - {n}) with no Tenant::uncharge to blame"
            );
            underflow();
        }
        if self.pressure.load(Relaxed) && new <= self.high.load(Relaxed) {
            self.pressure.store(false, Relaxed);
        }
        if self.allowance.load(Relaxed) != 0 && new <= self.max.load(Relaxed) {
            self.allowance.store(0, Relaxed);
        }
    }

    /// After a successful charge, whether usage is above `high`: `None` when not (or when
    /// the pressure is not raised while a crossing's drain runs: its charge decides),
    /// else whether pressure was raised already. Raises it when `raise` says so.
    fn over_high(&self, raise: bool) -> Option<bool> {
        if self.usage.load(Relaxed) > self.high.load(Relaxed) {
            let raised = self.pressure.load(Relaxed);
            if !raised && self.crossing.load(Relaxed) == MARK_EPOCH.load(Relaxed) {
                return None;
            }
            if !raised && raise {
                self.pressure.store(true, Relaxed);
            }
            return Some(raised);
        }
        None
    }

    /// The events of `ev`'s kind at this node and below it (memory.events).
    pub(crate) fn events(&self, ev: Event) -> u64 {
        self.events[ev as usize].load(Relaxed)
    }

    /// The events of `ev`'s kind at this node only (memory.events.local).
    pub(crate) fn events_local(&self, ev: Event) -> u64 {
        self.local[ev as usize].load(Relaxed)
    }
}

/// Counts an event at `node`: in its local count, and in the hierarchical count of `node` and
/// of each ancestor below the root, as cgroup v2's `memcg_memory_event` does.
/// The root counts none: it has no limits (it refuses only a charge past 2^64 bytes).
pub(crate) fn record_event<N: Hierarchy>(node: &N, ev: Event) {
    if node.parent().is_none() {
        return;
    }
    node.counter().local[ev as usize].fetch_add(1, Relaxed);
    let mut cur = Some(node);
    while let Some(c) = cur {
        let parent = c.parent();
        if parent.is_none() {
            break;
        }
        c.counter().events[ev as usize].fetch_add(1, Relaxed);
        cur = parent;
    }
}

/// Charges `n` to `node` and all its ancestors. On failure nothing stays charged and the
/// error is the ancestor whose `max` refused.
pub(crate) fn try_charge<N: Hierarchy>(node: &N, n: u64) -> Result<(), &N> {
    try_charge_noting(node, n, false).map(|_| ())
}

/// [`try_charge`], except that a node this charge takes across its `high` (usage above it,
/// pressure not raised) is left as it is: returned, the topmost such one, for the caller
/// to take back what stocks hold ([`raise_high`] then raises the pressure and counts the
/// event on the nodes still above). Nodes already under pressure count their event here.
pub(crate) fn try_charge_crossing<N: Hierarchy>(node: &N, n: u64) -> Result<Option<&N>, &N> {
    try_charge_noting(node, n, true)
}

fn try_charge_noting<N: Hierarchy>(node: &N, n: u64, defer: bool) -> Result<Option<&N>, &N> {
    let mut cur = Some(node);
    while let Some(c) = cur {
        if !c.counter().try_add(n) {
            // Roll back what we added below the refusing node.
            let mut r = node;
            while !core::ptr::eq(r, c) {
                r.counter().sub(n);
                match r.parent() {
                    Some(p) => r = p,
                    None => break,
                }
            }
            return Err(c);
        }
        cur = c.parent();
    }
    Ok(note_high(node, defer))
}

/// Charges a stock's refill of `n` bytes to `node` and all its ancestors
/// ([`Counter::try_add_refill`]): within every `max` and `high`, or with `above_high` (a
/// quarter refill) also on nodes already above their `high`, where it records a `high`
/// event as [`try_charge`] would for the tenant's own objects (a refill within every `high`
/// owes none). False, with nothing left charged, when one of them has no such room (the
/// caller then charges what it needs with [`try_charge`], which decides on events and
/// refusals). A refused refill was added below the refusing node for a moment: their
/// `peak` may count it.
pub(crate) fn try_charge_batch<N: Hierarchy>(node: &N, n: u64, above_high: bool) -> bool {
    if !add_below(node, None, n, |c, n| c.try_add_refill(n, above_high)) {
        return false;
    }
    if above_high {
        // A quarter refill finds usage above `high` already: pressure is up, or the charge
        // that crossed marked the node and decides (`over_high`), or that charge has not
        // marked it yet (a few instructions after its add): this raises the pressure, the
        // crossing then finds it raised and does not drain, and the pressure stays until
        // an uncharge brings usage back, as before crossings drained.
        note_high(node, false);
    }
    true
}

/// [`try_charge_batch`] for a whole refill of `node` and its ancestors strictly below `stop`
/// (an ancestor of `node` whose usage already counts the bytes: they come from what a stock
/// pre-charged to it).
pub(crate) fn try_charge_batch_below<N: Hierarchy>(node: &N, stop: &N, n: u64) -> bool {
    #[cfg(debug_assertions)]
    debug_assert!(is_ancestor_or_self(stop, node) && !core::ptr::eq(node, stop));
    add_below(node, Some(stop), n, |c, n| c.try_add_refill(n, false))
}

/// Records a `high` event on each of `node` and its ancestors whose usage is above its
/// `high`, raising its pressure. With `defer`, one whose pressure is not raised yet (this
/// charge crossed it) is left alone instead, and the topmost such node is returned: bytes
/// that threads pre-charged for it may be what put it above, which the caller takes back
/// before [`raise_high`].
fn note_high<N: Hierarchy>(node: &N, defer: bool) -> Option<&N> {
    let mut crossed = None;
    let mut cur = Some(node);
    while let Some(c) = cur {
        match c.counter().over_high(!defer) {
            Some(false) if defer => {
                // Marked, the node's other chargers leave it to this one (`over_high`).
                let cc = c.counter();
                let (epoch, was) = (MARK_EPOCH.load(Relaxed), cc.crossing.load(Relaxed));
                if was != epoch
                    && cc
                        .crossing
                        .compare_exchange(was, epoch, Relaxed, Relaxed)
                        .is_ok()
                {
                    crossed = Some(c);
                }
            }
            Some(_) => record_event(c, Event::High),
            None => {}
        }
        cur = c.parent();
    }
    crossed
}

/// After [`try_charge_crossing`] returned a crossed node and the caller drained: raises
/// the pressure of `node` and its ancestors that are still above their `high` with none
/// raised, each counting a `high` event (the charge left usage above it). A node the drain
/// brought back under counts nothing.
pub(crate) fn raise_high<N: Hierarchy>(node: &N) {
    let mut cur = Some(node);
    while let Some(c) = cur {
        // The marks of the crossing: nodes this charge crossed, or (a tolerated race)
        // another crossing's on an ancestor they share, whose charge then decides on what
        // this one leaves.
        c.counter().clear_crossing();
        if c.counter().over_high(true) == Some(false) {
            record_event(c, Event::High);
        }
        cur = c.parent();
    }
}

/// The lowest common ancestor of `a` and `b` (one of them, when it is the other's ancestor;
/// the root at worst). None only for nodes of different trees.
pub(crate) fn common_ancestor<'a, N: Hierarchy>(a: &'a N, b: &'a N) -> Option<&'a N> {
    fn depth<N: Hierarchy>(n: &N) -> usize {
        let mut d = 0;
        let mut cur = n.parent();
        while let Some(c) = cur {
            d += 1;
            cur = c.parent();
        }
        d
    }
    let (mut a, mut b) = (a, b);
    let (mut da, mut db) = (depth(a), depth(b));
    while da > db {
        a = a.parent()?;
        da -= 1;
    }
    while db > da {
        b = b.parent()?;
        db -= 1;
    }
    while !core::ptr::eq(a, b) {
        a = a.parent()?;
        b = b.parent()?;
    }
    Some(a)
}

/// Whether `a` is `node` or one of its ancestors.
pub(crate) fn is_ancestor_or_self<N: Hierarchy>(a: &N, node: &N) -> bool {
    let mut cur = Some(node);
    while let Some(c) = cur {
        if core::ptr::eq(c, a) {
            return true;
        }
        cur = c.parent();
    }
    false
}

/// Removes `n` from `node` and its ancestors strictly below `stop` (`node` or one of its
/// ancestors): bytes leaving `node`'s branch for another branch under `stop`.
pub(crate) fn uncharge_below<N: Hierarchy>(node: &N, stop: &N, n: u64) {
    #[cfg(debug_assertions)]
    debug_assert!(is_ancestor_or_self(stop, node));
    let mut cur = node;
    while !core::ptr::eq(cur, stop) {
        cur.counter().sub(n);
        match cur.parent() {
            Some(p) => cur = p,
            None => break,
        }
    }
}

/// Charges `n` to `node` and its ancestors strictly below `stop`, which must be `node` or
/// one of its ancestors: bytes counted at `stop` (and so above it) move down to `node`, and
/// only the nodes in between see them arrive, each with the strict bound of
/// [`Counter::try_add_moved`] (no overdraft, half the room below `max` and `high`), so that
/// no event is due. False, with nothing left charged, when one of them refuses. (Should
/// `stop` not be an ancestor, a release build charges up to the root: still balanced,
/// since [`uncharge_below`] walks the same way.)
pub(crate) fn try_charge_below<N: Hierarchy>(node: &N, stop: &N, n: u64) -> bool {
    #[cfg(debug_assertions)]
    debug_assert!(is_ancestor_or_self(stop, node));
    add_below(node, Some(stop), n, Counter::try_add_moved)
}

/// Adds `n` with `add` to `node` and its ancestors strictly below `stop` (all of them for
/// `None`); when one refuses, takes back what was added below it and returns false.
fn add_below<N: Hierarchy>(
    node: &N,
    stop: Option<&N>,
    n: u64,
    add: impl Fn(&Counter, u64) -> bool,
) -> bool {
    let mut cur = node;
    while !stop.is_some_and(|s| core::ptr::eq(cur, s)) {
        if !add(cur.counter(), n) {
            let mut r = node;
            while !core::ptr::eq(r, cur) {
                r.counter().sub(n);
                match r.parent() {
                    Some(p) => r = p,
                    None => break,
                }
            }
            return false;
        }
        match cur.parent() {
            Some(p) => cur = p,
            None => break,
        }
    }
    true
}

/// Set (in debug builds) once `Tenant::uncharge` was called: only it can take a counter below
/// zero, so an underflow before that is an internal bug.
#[cfg(debug_assertions)]
static API_UNCHARGED: AtomicBool = AtomicBool::new(false);

#[cfg(debug_assertions)]
pub(crate) fn note_api_uncharge() {
    if !API_UNCHARGED.load(Relaxed) {
        API_UNCHARGED.store(true, Relaxed);
    }
}

/// Says once per process that some counter was uncharged below zero.
#[cold]
#[inline(never)]
fn underflow() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Relaxed) {
        crate::sys::warn(
            "slabcg: warning: a tenant's usage would have gone below zero (more uncharged \
             than charged, as by a Tenant::uncharge of too many bytes); it stops at 0\n",
        );
    }
}

/// Records that a stock is about to hold pre-charged bytes (or objects) of `node`:
/// `generation` (the drain generation read just before the fill) on `node` and every
/// ancestor. The walk goes to the root even past nodes that have it already: a concurrent
/// record may have raised a child and not yet its parent.
pub(crate) fn note_stocked<N: Hierarchy>(node: &N, generation: u64) {
    let mut cur = Some(node);
    while let Some(c) = cur {
        let s = &c.counter().stocked;
        if s.load(Relaxed) < generation {
            s.fetch_max(generation, Ordering::SeqCst);
        }
        cur = c.parent();
    }
}

/// Removes `n` from `node` and all its ancestors.
pub(crate) fn uncharge<N: Hierarchy>(node: &N, n: u64) {
    let mut cur = Some(node);
    while let Some(c) = cur {
        c.counter().sub(n);
        cur = c.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct N {
        c: Counter,
        p: Option<Box<N>>,
    }
    impl Hierarchy for N {
        fn counter(&self) -> &Counter {
            &self.c
        }
        fn parent(&self) -> Option<&N> {
            self.p.as_deref()
        }
    }

    #[test]
    fn refuses_and_rolls_back() {
        let root = N {
            c: Counter::new(),
            p: None,
        };
        let mid = N {
            c: Counter::new(),
            p: Some(Box::new(root)),
        };
        mid.c.set_max(100);
        let leaf = N {
            c: Counter::new(),
            p: Some(Box::new(mid)),
        };
        assert!(try_charge(&leaf, 60).is_ok());
        let err = try_charge(&leaf, 50).unwrap_err();
        assert!(core::ptr::eq(err, leaf.p.as_deref().unwrap()));
        assert_eq!(leaf.c.usage(), 60);
        let mid = leaf.p.as_deref().unwrap();
        assert_eq!(mid.c.usage(), 60);
        assert_eq!(mid.p.as_deref().unwrap().c.usage(), 60);
        uncharge(&leaf, 60);
        assert_eq!(mid.p.as_deref().unwrap().c.usage(), 0);
        // Documented: the rolled-back attempt raised the leaf's peak.
        assert_eq!(leaf.c.peak(), 110);
    }

    /// An unlimited counter refuses what would take it past 2^64 - 1 (it used to wrap).
    #[test]
    fn unlimited_refuses_overflow() {
        let n = N {
            c: Counter::new(),
            p: None,
        };
        assert!(try_charge(&n, u64::MAX - 10).is_ok());
        assert!(try_charge(&n, 20).is_err());
        assert_eq!(n.c.usage(), u64::MAX - 10);
        assert!(try_charge(&n, 10).is_ok());
        assert_eq!(n.c.usage(), u64::MAX);
    }

    #[test]
    fn high_sets_and_clears_pressure() {
        let n = N {
            c: Counter::new(),
            p: None,
        };
        n.c.set_high(10);
        assert!(try_charge(&n, 5).is_ok());
        assert!(!n.c.under_pressure());
        assert!(try_charge(&n, 10).is_ok());
        assert!(n.c.under_pressure());
        // A node without a parent is a root, which counts no events.
        assert_eq!(n.c.events(Event::High), 0);
        uncharge(&n, 5);
        assert!(!n.c.under_pressure());
    }

    /// Two nodes' claims racing for the process budget: the one whose bucket CAS loses
    /// tries again rather than give up its drain, and a refused claim leaves its node's
    /// 10 ms slot as it was (a lost race used to move it to `now` with no drain made, so
    /// the node's next crossing raised the pressure on idle refills).
    #[test]
    #[cfg_attr(miri, ignore)] // two threads racing through 200,000 claims each
    fn a_claim_refused_by_the_bucket_leaves_the_node_slot_unused() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        let bad = Arc::new(AtomicUsize::new(0));
        // A budget of the test's own: the process's is shared with the other tests.
        let budget = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (bad, budget) = (bad.clone(), budget.clone());
                std::thread::spawn(move || {
                    let c = Counter::new();
                    for i in 0..200_000u64 {
                        if bad.load(Relaxed) != 0 {
                            return;
                        }
                        // Every call is past the node's own 10 ms bound.
                        let now = 1_000_000 + i * HIGH_DRAIN_EVERY_MS;
                        let before = c.high_drained.load(Relaxed);
                        if !c.claim_high_drain_from(now, &budget)
                            && c.high_drained.load(Relaxed) != before
                        {
                            bad.fetch_add(1, Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            bad.load(Relaxed),
            0,
            "a refused claim moved its node's high_drained"
        );
    }

    /// A claim whose clock read is older than the node's last claim (read before it, then
    /// preempted) is inside that claim's interval: it neither drains again nor moves the
    /// slot back (it wrapped, and did both). From a review.
    #[test]
    fn a_stale_clock_read_does_not_drain_again() {
        let budget = AtomicU64::new(0);
        let c = Counter::new();
        let t = 5_000_000_000u64;
        assert!(c.claim_high_drain_from(t + 5, &budget));
        assert!(!c.claim_high_drain_from(t, &budget));
        assert_eq!(c.high_drained.load(Relaxed), t + 5);
        assert!(!c.claim_high_drain_from(t + 4 + HIGH_DRAIN_EVERY_MS, &budget));
        assert!(c.claim_high_drain_from(t + 5 + HIGH_DRAIN_EVERY_MS, &budget));
    }
}
