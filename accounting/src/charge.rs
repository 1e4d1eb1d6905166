//! The slow paths of charge and uncharge: refilling and trimming stock slots, charging the
//! counters directly (no stock, or a stock being stolen), and the failure ladder.
//!
//! A charge fails only after: the slot refill fails (a batch, then exactly `n`) -> every
//! thread's stock is drained -> retry -> the refusing ancestor's reclaim callback runs
//! (outside every CS, at most once per thread at a time) -> retry -> if a callback ran,
//! every thread's stock is drained again (what it freed may sit charged in one) -> retry ->
//! under `OomPolicy::Kill`, the OOM killer (`oom::out_of_memory`: kill a victim, open the
//! overdraft window, retry) -> fail. `events.max` counts each charge that reached the end of
//! the ladder, `events.oom` each charge that failed, on the refusing ancestor (locally) and
//! on it and its ancestors below the root (hierarchically, `counter::record_event`).
//!
//! Mechanism, not policy: the two policy steps (the reclaim callback and the OOM killer)
//! are reached only through the [`Ladder`] the caller hands in (`tenant::LADDER`), as the
//! kernel's `page_counter` leaves reclaim and OOM to `memcontrol`; nothing here imports
//! `tenant` or `oom`.
//!
//! Order rule: a thread touches `objcg.tenant` (and the node it points to) only while it
//! holds a ref on the objcg (see `objcg.rs`), so every `put` comes after the last use.

use crate::counter::{self, Event};
use crate::drain::{self, release};
use crate::node::Node;
use crate::objcg::{self, ObjCg};
use crate::stat;
use crate::stock::{Contents, Pool, Stock, CHARGE_BATCH, EXITED, IN_RECLAIM, REGISTERED, STOCK};
use crate::sys;
use crate::types::{ObjCgId, StatIdx};
use core::sync::atomic::Ordering::Relaxed;

/// A refused charge: the node whose `max` refused. Valid while the charging tenant is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Refused(pub(crate) *const Node);

/// The policy steps of the failure ladder, which this mechanism runs but does not decide:
/// handed in by whoever charges (`tenant::LADDER`).
pub(crate) struct Ladder {
    /// Runs the refusing node's reclaim callback, if it has one and is alive; whether one
    /// ran (`tenant::run_reclaim`).
    pub(crate) reclaim: fn(&Node, u64) -> bool,
    /// The last step, at `max`: retries under the policy of the refusing node (`Ok`: the
    /// charge went through), `Err` with the node that refused last (`oom::out_of_memory`).
    pub(crate) out_of_memory: fn(&Node, &mut Retry<'_>) -> Result<(), *const Node>,
}

/// The ladder's retry of the charge, which the OOM step calls under its lock: `Err` names
/// the node that refused.
pub(crate) type Retry<'a> = dyn FnMut() -> Result<(), *const Node> + 'a;

/// Whether this thread's stock can be used, registering it on first use.
fn usable(s: &Stock) -> bool {
    let f = s.flags();
    if f & EXITED != 0 {
        return false;
    }
    f & REGISTERED != 0 || drain::register(s)
}

/// Refs a charge of `got` bytes into `pool` takes on the objcg, besides the slot ref: the
/// objects pool's bytes each hold one, the API pool's none (`stock.rs`).
fn byte_refs(pool: Pool, got: u64) -> u64 {
    match pool {
        Pool::Objects => got,
        Pool::Api => 0,
    }
}

/// Slow path of `hooks::charge` (`Pool::Objects`) and `Tenant::charge` (`Pool::Api`).
#[cold]
#[inline(never)]
pub(crate) fn charge_slow(
    id: ObjCgId,
    pool: Pool,
    n: u64,
    idx: StatIdx,
    ladder: &Ladder,
) -> Result<(), Refused> {
    // An unknown or freed id has no tenant: it is uncharged, like id 0.
    let Some(oc) = objcg::lookup(id) else {
        return Ok(());
    };
    STOCK.with(|s| {
        if !usable(s) {
            return charge_direct(s, oc, pool, n, idx, ladder);
        }
        // 1. The slot may hold the bytes and only its stat delta need a flush.
        let mut flush = None;
        if s.enter() {
            if let Some(i) = s.find(id) {
                let b = s.pool(i, pool).load(Relaxed);
                if b >= n {
                    s.pool(i, pool).store(b - n, Relaxed);
                    flush = Some(s.add_stat(i, idx, n as i64));
                    s.touch(i);
                }
            }
            s.check_invariants();
        }
        s.leave();
        if let Some(d) = flush {
            flush_stat(oc, idx, d);
            return Ok(());
        }
        // 2. Refill: charge a batch (or less near a `max` or `high`, `charge_counter`) to the
        // counter. A new slot needs a share of the objcg's stock budget and a place on the
        // holding list (drain.rs), both taken before the CS; without a share only `n` is
        // charged, and the thread charges the counters directly until a share is free (what
        // all stocks hold for one objcg stays within the budget, objcg.rs). `find` outside
        // the CS is a hint (a drainer may empty the slot meanwhile): the CS decides below.
        let has_slot = s.find(id).is_some();
        let mut share = false;
        if !has_slot {
            share = oc.try_hold();
            if share && !s.listed() {
                drain::join(s);
            }
        }
        let batch = if share || has_slot {
            n.div_ceil(CHARGE_BATCH)
                .saturating_mul(CHARGE_BATCH)
                .max(CHARGE_BATCH)
        } else {
            n
        };
        let borrowed = if batch > n {
            borrow_from_parent(s, oc, batch)
        } else {
            None
        };
        let got = match borrowed.map_or_else(|| charge_counter(s, oc, n, batch, ladder), Ok) {
            Ok(got) => got,
            Err(r) => {
                if share {
                    oc.release_hold();
                }
                return Err(r);
            }
        };
        oc.get(byte_refs(pool, got) + 1); // the bytes, and a slot ref in case we fill a new slot
        let left = got - n;
        let mut spare_ref = 1;
        let mut direct = 0;
        let d;
        let mut victim = Contents::EMPTY;
        if s.enter() {
            if let Some(i) = s.find(id) {
                // Normally b < n here (step 1 failed), so b + left < got and no trim is due.
                // A reclaim callback run by the ladder may have refilled it by freeing, so
                // trim like an uncharge would.
                direct = s.add_trimmed(i, pool, left);
                d = s.add_stat(i, idx, n as i64);
                s.touch(i);
            } else if share && s.listed() {
                let i = s.victim();
                s.take_into(i, &mut victim);
                // Recorded before the fill, inside the critical section (drain.rs).
                note_stocked(oc);
                s.fill(i, id, pool, left);
                d = s.add_stat(i, idx, n as i64);
                spare_ref = 0;
                share = false;
            } else {
                // No share of the budget, or a drainer took the stock off the holding list
                // since we joined it: no new slot.
                direct = left;
                d = n as i64;
            }
            s.check_invariants();
        } else {
            direct = left;
            d = n as i64;
        }
        s.leave();
        if share {
            oc.release_hold();
        }
        settle(oc, direct, idx, d, spare_ref + byte_refs(pool, direct));
        release(&victim);
        Ok(())
    })
}

/// A refill of `batch` bytes for a tenant whose parent's slot in this stock holds that much
/// pre-charged in its API pool (what the frees of the dead siblings' objects forwarded
/// there, or what a dead sibling's slot left, [`release_own_slot`]): those bytes already
/// count in the parent and above, so only the tenant itself (and its limit) is charged and
/// the parent's pool gives them up. A tenant per request then charges no shared line when it
/// starts. `None`, with nothing changed, when the parent has no such slot here or the
/// batch does not fit below the tenant's `max` and `high` (the counter path then decides,
/// with its ladder). In no CS; takes one.
fn borrow_from_parent(s: &Stock, oc: &ObjCg, batch: u64) -> Option<u64> {
    let mut got = None;
    if s.enter() {
        got = (|| {
            // SAFETY: the caller holds refs on `oc` (as for `charge_counter`).
            let t = unsafe { oc.read() }?;
            // A live tenant's parent is alive (its `handles` counts the child until the
            // child's death ends), so the check reads the tenant's own line: the parent's,
            // written by every sibling's birth and death, bounced between the threads that
            // serve its requests (10% of a two-thread `lifecycle_probe`). Either read races
            // with a death the same way; what follows holds for a parent that dies
            // meanwhile as it did before.
            if !t.is_alive() {
                return None;
            }
            let p = t.parent_node()?;
            // A slot for the live parent's own objcg holds a ref on it, so the id is its.
            let j = s.find(p.objcg())?;
            let b = s.api[j].load(Relaxed);
            if b < batch || !counter::try_charge_batch_below(&*t, p, batch) {
                return None;
            }
            s.api[j].store(b - batch, Relaxed);
            Some(batch)
        })();
        s.check_invariants();
    }
    s.leave();
    got
}

/// Charges `n` to the counters without a stock (exited thread, stolen stock).
fn charge_direct(
    s: &Stock,
    oc: &ObjCg,
    pool: Pool,
    n: u64,
    idx: StatIdx,
    ladder: &Ladder,
) -> Result<(), Refused> {
    let got = charge_counter(s, oc, n, n, ladder)?;
    oc.get(byte_refs(pool, got));
    flush_stat(oc, idx, n as i64);
    Ok(())
}

/// Charges `batch` (if more than `n` and it fits within every `max` and `high` on the way,
/// `counter::try_charge_batch`), else `n` rounded up to a quarter of `CHARGE_BATCH` (also
/// above a `high`), or exactly `n` to the objcg's tenant,
/// running the failure ladder for `n` with `ladder`'s policy steps. Returns the bytes
/// charged.
fn charge_counter(
    s: &Stock,
    oc: &ObjCg,
    n: u64,
    batch: u64,
    ladder: &Ladder,
) -> Result<u64, Refused> {
    // The first tries, in one short read section. The ladder below takes locks, which a
    // reader of `oc` must not hold (a re-pointing waits for its readers under the tree lock),
    // so each later try reads `oc` again, and the refusing node it names is kept alive by a
    // strong reference on the node it charged (`held`). Reading again matters when the
    // objcg's tenant dies meanwhile (a charge through a dead owner's objcg, as a realloc
    // growing another tenant's block makes): its parent is charged then, under its limit.
    let first = {
        // SAFETY: the caller holds refs on `oc`: an allocation's charger is in a live
        // tenant's scope (the tenant's alive ref), `Tenant::charge` is called on a live
        // handle, and a charge through an object's owner holds that object's bytes.
        let Some(t) = (unsafe { oc.read() }) else {
            return Ok(n);
        };
        // A whole refill, else a quarter of one (a tenant within a refill of its `max` or
        // `high`, above its `high`, or with a bound below a refill: its charges do not all go
        // to the counters), else exactly n below.
        if batch > n {
            if counter::try_charge_batch(&*t, batch, false) {
                return Ok(batch);
            }
            let quarter = n.checked_next_multiple_of(CHARGE_BATCH / 4);
            if let Some(q) = quarter.filter(|&q| q > n && q < batch) {
                if counter::try_charge_batch(&*t, q, true) {
                    return Ok(q);
                }
            }
        }
        match counter::try_charge_crossing(&*t, n) {
            // Whether to drain first: one crossing of a node's `high` in its interval does,
            // if stocks may hold its bytes; the node kept alive to clear its mark after.
            Ok(crossed) => Ok(crossed.map(|c| {
                let stocked = c.counter.stocked();
                let drain = !drain::is_clean(stocked) && c.counter.claim_high_drain(sys::now_ms());
                (c.arc(), drain.then_some(stocked))
            })),
            Err(r) => match t.arc() {
                Some(a) => Err((a, r.counter.stocked())),
                // A node's strong count is at least the objcg's reference while we read it.
                None => return Ok(n),
            },
        }
    };
    // This charge took a node across its `high`. Part of that usage may be bytes that
    // threads pre-charged for the subtree and do not use (up to a refill on each thread a
    // request's task ran on): take them back before the pressure is raised, as the kernel
    // drains the per-CPU stocks before it acts at `max`. At most once per
    // `HIGH_DRAIN_EVERY_MS` for the node, and only if a fill was recorded since the last
    // complete drain; the pressure is raised, and the event counted, if the tenant's own
    // objects keep it above.
    let (mut held, stocked) = match first {
        Ok(None) => return Ok(n),
        Ok(Some((crossed, drain))) => {
            if let Some(stocked) = drain {
                drain::drain_unless_clean(stocked);
            }
            // SAFETY: as above; a tenant that died meanwhile has its objcg re-pointed at
            // its parent, whose `high` is the one to check then.
            let covered = match unsafe { oc.read() } {
                Some(t) => {
                    counter::raise_high(&*t);
                    crossed
                        .as_deref()
                        .is_some_and(|c| counter::is_ancestor_or_self(c, &*t))
                }
                None => false,
            };
            // The crossed node's mark, when the chain `raise_high` walked no longer has it
            // (the tenant died): clearing it again otherwise could clear a newer
            // crossing's.
            if let (Some(c), false) = (crossed, covered) {
                c.counter.clear_crossing();
            }
            return Ok(n);
        }
        Err(refused) => refused,
    };
    let mut try_n = || {
        // SAFETY: as above.
        let Some(t) = (unsafe { oc.read() }) else {
            return Ok(n);
        };
        let r = counter::try_charge(&*t, n);
        if r.is_err() && !core::ptr::eq(&*t, &*held) {
            // Re-pointed since: keep the node now charged (and the refusing ancestor)
            // alive past the read section.
            if let Some(a) = t.arc() {
                held = a;
            }
        }
        r.map(|_| n).map_err(|r| Refused(r))
    };
    // Only if some stock may hold the refusing subtree's bytes (drain.rs): a tenant refused
    // again and again with nothing put in a stock meanwhile pays no walk of the threads.
    drain::drain_unless_clean(stocked);
    let refused = match try_n() {
        Ok(got) => return Ok(got),
        Err(r) => r,
    };
    let refused = if s.flags() & IN_RECLAIM == 0 {
        s.set_flags(IN_RECLAIM, 0);
        // SAFETY: the refusing node is the charged node or an ancestor of it, alive while
        // `held` is (each refusal is used before the next try, which may replace `held`).
        let ran = (ladder.reclaim)(unsafe { &*refused.0 }, n);
        s.set_flags(0, IN_RECLAIM);
        match try_n() {
            Ok(got) => return Ok(got),
            Err(r) if !ran => r,
            Err(r) => {
                // What the callback freed can still be charged in a stock: this thread's
                // object stock keeps a freed object of its tag charged for reuse. Drain
                // again before refusing.
                // SAFETY: as above.
                drain::drain_unless_clean(unsafe { &*r.0 }.counter.stocked());
                match try_n() {
                    Ok(got) => return Ok(got),
                    Err(r) => r,
                }
            }
        }
    } else {
        refused
    };
    // SAFETY: as above.
    let node = unsafe { &*refused.0 };
    counter::record_event(node, Event::Max);
    // Under `OomPolicy::Kill`: a victim is killed and the overdraft window opened, with the
    // retries made under the tree lock so that two refused chargers do not each kill.
    let refused = match (ladder.out_of_memory)(node, &mut || try_n().map(|_| ()).map_err(|r| r.0)) {
        Ok(()) => return Ok(n),
        Err(r) => Refused(r),
    };
    // SAFETY: as above.
    let last = unsafe { &*refused.0 };
    // The retry after a kill may be refused by another limit (an ancestor's, once the
    // victim's overdraft let it past its own): that limit was hit too, and its `max` counts
    // with the `oom`, as memory.events pairs them.
    if !core::ptr::eq(last, node) {
        counter::record_event(last, Event::Max);
    }
    counter::record_event(last, Event::Oom);
    Err(refused)
}

/// An uncharge of `n` bytes into `pool`: this thread's slot if it has room, else the slow
/// path. `hooks::uncharge` (objects) and `Tenant::uncharge` (API) both come here.
#[inline(always)]
pub(crate) fn uncharge(id: ObjCgId, pool: Pool, n: u64, idx: StatIdx) {
    if !crate::stock::refill(id, pool, n, idx) {
        uncharge_slow(id, pool, n, idx);
    }
}

/// Slow path of `hooks::uncharge` (`Pool::Objects`: the freed object's `n` refs come back
/// with its bytes) and `Tenant::uncharge` (`Pool::Api`: no refs, the caller's handle keeps
/// the objcg alive).
#[cold]
#[inline(never)]
pub(crate) fn uncharge_slow(id: ObjCgId, pool: Pool, n: u64, idx: StatIdx) {
    // Nothing to give back. And a forwarding entry must owe at least one ref (stock.rs):
    // one made for 0 bytes would not keep the dead objcg's id from being recycled.
    if n == 0 {
        return;
    }
    let Some(oc) = objcg::lookup(id) else { return };
    if let Pool::Objects = pool {
        let target = match forward(id, oc, n, idx) {
            Forward::Done => return,
            Forward::Target(to, to_oc) => Some((to, to_oc)),
            Forward::Own => None,
            Forward::NoStock => live_target(oc, id, n),
        };
        if let Some((to, to_oc)) = target {
            // The freed object's bytes now hold `to`'s refs, taken by live_target: they go
            // through `to`'s stock slot like a free of `to`'s own object, and the dead
            // objcg loses the refs it held for them.
            if !crate::stock::refill(to, pool, n, idx) {
                uncharge_slow_in(to, to_oc, pool, n, idx);
            }
            oc.put(n);
            return;
        }
    }
    uncharge_slow_in(id, oc, pool, n, idx);
}

/// What [`forward`] did.
enum Forward {
    /// The bytes were forwarded.
    Done,
    /// Not forwarded: `id` is dead and charges the live objcg returned, on which `n` refs
    /// were taken for the bytes (as [`live_target`]).
    Target(ObjCgId, &'static ObjCg),
    /// Not forwarded: `id` charges its own tenant (or is being re-pointed).
    Own,
    /// Not tried: no usable stock, or a drainer is stealing it.
    NoStock,
}

/// The free of `n` bytes of a dead tenant's object (objcg `id`, whose bytes the caller's
/// object holds) when this thread's stock has a slot for the live ancestor `id` now charges:
/// the bytes go to that slot's API pool, pre-charged to the ancestor and holding no refs,
/// and the `n` refs they held on `id` are owed by the stock's forwarding entry for `id`
/// (`stock.rs`), put when the entry is replaced or a drain or the thread's exit takes it.
/// The next free of that dead tenant's objects on this thread finds the entry in
/// `stock::Stock::refill`'s own critical section, with no read section and no ref update: a request's objects freed after it died cost
/// about what a free of the ancestor's own objects costs, instead of four atomics on two
/// shared lines. Without an entry it reads `id`'s target once, and when the stock has no
/// slot for it says so with the refs taken ([`Forward::Target`]), so the caller does not
/// read again.
fn forward(id: ObjCgId, oc: &ObjCg, n: u64, idx: StatIdx) -> Forward {
    STOCK.with(|s| {
        if !s.registered_live() {
            return Forward::NoStock;
        }
        let mut replaced = (0, 0);
        // The target, a ref taken on it for the flush, the bytes and stat delta to flush.
        let mut flush: Option<(&'static ObjCg, u64, i64)> = None;
        let mut how = Forward::NoStock;
        if s.enter() {
            // An entry forwards through a slot fill made before this CS, so the slot's ref
            // has kept the target's id its own since; a new entry's target is read here,
            // inside the CS, so the slot found for it holds a ref on that very objcg (a fill
            // older than the read held its id through it, and no fill comes in between).
            let slot = match s.fwd_slot(id) {
                Some(i) => Ok(i),
                None => target_slot(s, oc, id, n),
            };
            match slot {
                Ok(i) => {
                    replaced = s.fwd_note(id, i, n);
                    s.stamp(i);
                    if !s.try_give(i, Pool::Api, n, idx) {
                        flush = give_trimming(s, i, n, idx);
                    }
                    s.check_invariants();
                    how = Forward::Done;
                }
                Err(other) => how = other,
            }
        }
        s.leave();
        if let Some((to, excess, d)) = flush {
            settle(to, excess, idx, d, 1);
        }
        drain::put_owed(replaced.0, replaced.1);
        how
    })
}

/// Gives `n` bytes for `idx` to slot `i`'s API pool when the fast give declined: keeps
/// `STOCK_LOW` of a pool that passes `STOCK_HIGH`, and returns the slot's objcg with a ref
/// taken on it, the excess and the stat delta for the caller to [`settle`] after its CS
/// (`None` when nothing is to flush). In CS.
fn give_trimming(s: &Stock, i: usize, n: u64, idx: StatIdx) -> Option<(&'static ObjCg, u64, i64)> {
    let excess = s.add_trimmed(i, Pool::Api, n);
    let d = s.add_stat(i, idx, -(n as i64));
    if excess == 0 && d == 0 {
        return None;
    }
    // The slot's ref keeps its objcg allocated inside the CS; the ref taken here keeps it
    // so for the flush after it.
    objcg::lookup(s.ids[i].load(Relaxed)).map(|to| {
        to.get(1);
        (to, excess, d)
    })
}

/// The slot of this thread's stock for the live ancestor that the dead objcg `id` charges
/// now; when it has none, that ancestor with `n` refs taken on it ([`Forward::Target`]), or
/// [`Forward::Own`]. In CS; one read section on `oc`.
fn target_slot(s: &Stock, oc: &ObjCg, id: ObjCgId, n: u64) -> Result<usize, Forward> {
    // SAFETY: the caller's bytes hold refs on `oc`.
    let Some(t) = (unsafe { oc.read() }) else {
        return Err(Forward::Own);
    };
    let to = t.objcg();
    if to == id || to == 0 || !t.is_alive() {
        return Err(Forward::Own);
    }
    if let Some(i) = s.find(to) {
        return Ok(i);
    }
    // As in `live_target`: while the section lasts `to`'s objcg keeps its alive ref.
    match objcg::lookup(to) {
        Some(to_oc) => {
            to_oc.get(n);
            Err(Forward::Target(to, to_oc))
        }
        None => Err(Forward::Own),
    }
}

/// When objcg `id` belongs to a dead tenant and now charges a live ancestor (reparenting),
/// that ancestor's objcg with `n` refs taken on it: the free of a dead tenant's object (a
/// request's result freed after the request) is then a free of the ancestor's, which has a
/// stock slot on the threads that free many of them, instead of a walk of the counters and
/// stats for every object (each dead tenant has an objcg of its own, which no stock caches).
fn live_target(oc: &ObjCg, id: ObjCgId, n: u64) -> Option<(ObjCgId, &'static ObjCg)> {
    // SAFETY: the caller's bytes hold refs on `oc`.
    let t = unsafe { oc.read() }?;
    let to = t.objcg();
    if to == id || to == 0 || !t.is_alive() {
        return None;
    }
    let to_oc = objcg::lookup(to)?;
    // While this read section lasts, `oc` points at `t`, so `t`'s death cannot have dropped
    // its objcg's alive ref: `die` re-points every objcg that points at `t` (waiting for
    // this reader) before it drops that ref. So `to_oc` is allocated and the refs are safe
    // to take.
    to_oc.get(n);
    Some((to, to_oc))
}

/// [`uncharge_slow`] for the objcg `oc` (of id `id`) the bytes are uncharged through.
fn uncharge_slow_in(id: ObjCgId, oc: &ObjCg, pool: Pool, n: u64, idx: StatIdx) {
    STOCK.with(|s| {
        let usable = usable(s);
        if usable {
            oc.get(1); // a slot ref in case we fill a new slot
        }
        // A share of the budget and a place on the holding list in case we fill a new slot,
        // as in `charge_slow`; only when an empty slot can take it (hints, decided in the CS).
        let mut share = false;
        if usable && s.find(id).is_none() && s.empty_slot().is_some() {
            share = oc.try_hold();
            if share && !s.listed() {
                drain::join(s);
            }
        }
        let mut spare_ref = u64::from(usable);
        let mut excess = n;
        let mut d = -(n as i64);
        if usable && s.enter() {
            let slot = match s.find(id) {
                Some(i) => Some(i),
                // Take an empty slot, but never evict on an uncharge: frees of many remote
                // tenants would otherwise drain and refill the hot slots in a loop.
                None if share && s.listed() => s.empty_slot().inspect(|&i| {
                    note_stocked(oc);
                    s.fill(i, id, pool, 0);
                    spare_ref = 0;
                    share = false;
                }),
                None => None,
            };
            if let Some(i) = slot {
                excess = s.add_trimmed(i, pool, n);
                d = s.add_stat(i, idx, -(n as i64));
                s.touch(i);
            }
            s.check_invariants();
        }
        s.leave();
        if share {
            oc.release_hold();
        }
        settle(oc, excess, idx, d, spare_ref + byte_refs(pool, excess));
    })
}

/// An object charged `old` bytes for `old_idx` becomes one charged `new <= old` bytes for
/// `new_idx` (a shrinking move of the object's contents to a smaller slot): the tenant
/// loses `old - new`, the stats move, and the objcg loses the refs of the bytes given back.
/// Nothing here checks a limit, so a tenant at its limit can always shrink. The allocator
/// calls it for every shrinking move of a block of the caller's tenant.
pub(crate) fn shrink(id: ObjCgId, old: u64, old_idx: StatIdx, new: u64, new_idx: StatIdx) {
    debug_assert!(new <= old);
    // Usually this thread's slot for `id` holds `new` pre-charged bytes: the new object
    // takes them (with their refs) as an allocation would, and the old object's bytes go
    // back as a free's would, all in this thread's stock.
    if crate::stock::consume(id, Pool::Objects, new, new_idx) {
        uncharge(id, Pool::Objects, old, old_idx);
        return;
    }
    // Else straight to the shared counters and stats, which no limit can refuse.
    let Some(oc) = objcg::lookup(id) else { return };
    // SAFETY: the caller holds the `old` bytes charged to `id`, each a ref on the objcg,
    // dropped only below.
    if let Some(t) = unsafe { oc.read() } {
        if old > new {
            counter::uncharge(&*t, old - new);
        }
        stat::flush(&*t, old_idx.0 as usize, -(old as i64));
        stat::flush(&*t, new_idx.0 as usize, new as i64);
    }
    oc.put(old - new);
}

/// The slow work after a stock critical section: give `uncharge` bytes back to the counter,
/// flush the stat delta `d`, then drop `refs` refs on `oc` (which include the `uncharge`
/// bytes, so the objcg and its tenant stay alive until the uncharge is done).
fn settle(oc: &ObjCg, uncharge: u64, idx: StatIdx, d: i64, refs: u64) {
    if uncharge != 0 {
        // SAFETY: the caller holds `refs >= uncharge` refs on `oc`, put only below.
        if let Some(t) = unsafe { oc.read() } {
            counter::uncharge(&*t, uncharge);
        }
    }
    flush_stat(oc, idx, d);
    oc.put(refs);
}

/// Moves charged objects from objcg `from` to objcg `to` without a round trip through the
/// nodes that count them either way: below the lowest common ancestor of `from`'s node and
/// `to`'s, the `to` side is charged (each node checking its limit) and the `from` side
/// uncharged; that ancestor and everything above count the bytes before and after and are
/// not touched. `parts` gives the bytes per stat index; the stats move the same way, and the
/// bytes' refs move from `from` to `to`. False, with nothing changed, when a limit on the
/// `to` side refuses.
///
/// The caller holds the refs of the bytes on `from` (its objects are charged through it)
/// and a ref on `to`.
pub(crate) fn transfer(from: ObjCgId, to: ObjCgId, parts: &[(StatIdx, u64)]) -> bool {
    let total = parts.iter().fold(0u64, |a, p| a.saturating_add(p.1));
    if total == 0 || from == to {
        return from != to;
    }
    let (Some(f), Some(t)) = (objcg::lookup(from), objcg::lookup(to)) else {
        return false;
    };
    {
        // SAFETY: the caller holds refs on both objcgs for the call (contract).
        let (Some(fnode), Some(tnode)) = (unsafe { f.read() }, unsafe { t.read() }) else {
            return false;
        };
        let Some(lca) = counter::common_ancestor(&*fnode, &*tnode) else {
            return false;
        };
        if !counter::try_charge_below(&*tnode, lca, total) {
            return false;
        }
        counter::uncharge_below(&*fnode, lca, total);
        for &(idx, b) in parts {
            if b != 0 {
                let (k, d) = (idx.0 as usize, b as i64);
                stat::flush_below(&*tnode, lca, k, d);
                stat::flush_below(&*fnode, lca, k, -d);
            }
        }
    }
    // The objects hold `to`'s refs before `from` loses theirs; `from` is not touched after.
    t.get(total);
    f.put(total);
    true
}

/// Gives back this thread's stock slot for `id`, if it has one: for a tenant that just died
/// on this thread (a request), whose slot would otherwise wait for an eviction while the
/// frees of its objects, sent to its parent ([`live_target`]), look for a slot.
///
/// When the tenant's objcg now charges a live parent that has a slot here, the slot's bytes
/// and stat deltas go to the parent's slot instead of the counters (its API pool: they are
/// pre-charged to the parent and above already, and hold no refs), which the next request's
/// first charge borrows from ([`borrow_from_parent`]): a request's end touches no shared
/// line either.
pub(crate) fn release_own_slot(id: ObjCgId) {
    // The slot taken whole, or, handed to the parent's slot, what that slot could not keep
    // (a pool past STOCK_HIGH, a delta past its flush) with the parent's objcg and a ref
    // taken on it (`Some(None)`: handed, no rest). One buffer for both: `hand_to_parent`
    // leaves it empty when it hands nothing, and each `Contents` costs a memset of half a
    // KiB (a tenant per request makes one here per request).
    let mut c = Contents::EMPTY;
    let mut parent: Option<Option<&'static ObjCg>> = None;
    let mut refs = 0;
    STOCK.with(|s| {
        if !s.registered_live() {
            return;
        }
        if s.enter() {
            if let Some(i) = s.find(id) {
                // The slot's ref and its object bytes' refs, put below when the slot goes to
                // the parent's (`release` counts its own otherwise).
                refs = s.bytes[i].load(Relaxed) + 1;
                parent = hand_to_parent(s, i, &mut c);
                if parent.is_none() {
                    s.take_into(i, &mut c);
                }
            }
            s.check_invariants();
        }
        s.leave();
    });
    match parent {
        None => release(&c),
        Some(to) => {
            if let Some(oc) = objcg::lookup(id) {
                // The slot's share and refs, as `release` drops them; its bytes and deltas
                // went to the parent's slot.
                oc.release_hold();
                oc.put(refs);
            }
            if let Some(to) = to {
                drain::give_back(to, &c);
                to.put(1);
            }
        }
    }
}

/// Moves slot `i`, a dead tenant's, into this stock's slot for the live node its objcg now
/// charges, if there is one: the bytes of both pools to that slot's API pool (trimmed to
/// `STOCK_LOW` past `STOCK_HIGH`), the deltas into its deltas ([`Stock::merge_into`]),
/// leaving slot `i` empty. What does not fit goes to `rest` (the target's id, bytes and
/// deltas to give back to the counters). Returns the target's objcg with a ref taken on it
/// for that (`Some(None)` when nothing is left over, without the ref); `None`, with nothing
/// changed, when there is no such slot. In CS.
fn hand_to_parent(s: &Stock, i: usize, rest: &mut Contents) -> Option<Option<&'static ObjCg>> {
    let id = s.ids[i].load(Relaxed);
    let oc = objcg::lookup(id)?;
    let to = {
        // SAFETY: slot i's ref keeps `oc` allocated (the slot is filled until the merge
        // below, and the caller puts that ref only after).
        let t = unsafe { oc.read() }?;
        let to = t.objcg();
        if to == id || to == 0 || !t.is_alive() {
            return None;
        }
        to
    };
    // A slot for the live node's own objcg holds a ref on it, so the id is its.
    let j = s.find(to)?;
    let to_oc = objcg::lookup(to)?;
    s.merge_into(i, j, rest);
    rest.id = to;
    s.stamp(j);
    // The target's slot ref keeps it allocated inside the CS; this one for `rest` after,
    // taken only when there is a rest: the target's refs are a line every thread that
    // serves its requests writes, and its slot usually keeps everything.
    if rest.bytes + rest.api == 0 && rest.dirty == 0 {
        return Some(None);
    }
    to_oc.get(1);
    Some(Some(to_oc))
}

/// Records that a stock may hold `oc`'s tenant's bytes (`drain.rs`): called inside the
/// stock's critical section just before a slot is made for `oc`, or under the thread's
/// object-stock lock just before the allocator's object stock starts keeping `oc`'s
/// objects, so that no drain can come between the record and the fill. A few atomics, no
/// lock, no allocation.
pub(crate) fn note_stocked(oc: &ObjCg) {
    let generation = drain::generation();
    // SAFETY: the caller holds refs on `oc` (the slot ref, or the object stock's objects).
    if let Some(t) = unsafe { oc.read() } {
        counter::note_stocked(&*t, generation);
    }
}

/// Adds a stat delta to the objcg's tenant and its ancestors.
fn flush_stat(oc: &ObjCg, idx: StatIdx, d: i64) {
    if d == 0 {
        return;
    }
    // SAFETY: every caller flushes before dropping its refs.
    if let Some(t) = unsafe { oc.read() } {
        stat::flush(&*t, idx.0 as usize, d);
    }
}
