//! Per-thread stocks (the kernel's `memcg_stock_pcp` + `obj_stock_pcp`, per thread instead
//! of per CPU): each of `NR_SLOTS` slots caches one objcg id, bytes pre-charged to that
//! objcg's tenant counter but not yet given out, and per-stat-index deltas not yet flushed to
//! the tenant's shared stats.
//!
//! The pre-charged bytes are in two pools. `bytes` serves allocations: each of its bytes holds
//! a ref on the objcg, which the object charged with it takes over, so that a free on any
//! thread, after the tenant is gone, still finds the objcg (`objcg.rs`). `api` serves
//! `Tenant::charge`/`uncharge`, whose caller holds a tenant handle: its bytes hold no refs,
//! so an uncharge through another tenant than the one charged (an ancestor, after the child
//! was dropped), or of more than was charged, cannot take refs that objects hold.
//!
//! Invariants, per slot `i` of a stock, whenever `in_cs == 0`:
//! - `ids[i] == 0  =>  bytes[i] == api[i] == 0 && stats[i] == [0; NR_STAT]` (an empty slot
//!   holds nothing);
//! - `ids[i] != 0  =>` the slot holds exactly one slot ref on objcg `ids[i]`, and `bytes[i]`
//!   of that objcg's refs; `bytes[i] <= STOCK_HIGH`; `api[i] <= STOCK_HIGH`;
//!   `|stats[i][k]| <= STAT_FLUSH`;
//! - `stats[i][k] != 0  =>  dirty[i] & (1 << (k % 64)) != 0` (a set bit may be stale: it
//!   only says where to look), and `ids[i] == 0 => dirty[i] == 0`.
//!
//! Who touches what:
//! - the owner thread: everything, but `ids`, `bytes`, `api`, `stats` and `dirty` only between
//!   `enter()` and `leave()` (the critical section, CS) and only when `enter()` saw no
//!   `steal`; `flags`, `clock`, `stamps` are owner-only.
//! - a drainer (`drain.rs`, holding the registry lock): `steal`, reads `in_cs`, and takes
//!   `ids`/`bytes`/`api`/`stats`/`dirty` once it saw `in_cs == 0` after setting `steal` and running
//!   a remote barrier; `next` (the registry link); `seen` and `idle` (the idle-stock decay,
//!   which also reads `clock` and `ids` without the protocol, only to choose).
//! - `listed`, `hnext`, `hprev` (the list of stocks that may hold something, `drain.rs`):
//!   written under the registry lock, by the owner when it joins the list before making a
//!   slot, by a drainer when it leaves a stock empty (then within the steal protocol, so
//!   an owner reads a stable `listed` inside its CS).
//!
//! Forwarding entries (`charge::forward`), per entry `j`, whenever `in_cs == 0`:
//! - `fwd_dead[j] == 0  =>  fwd_owed[j] == 0 && fwd_gen[j] == 0`;
//! - `fwd_dead[j] != 0  =>  fwd_set(fwd_dead[j]) == j - j % FWD_WAYS && fwd_owed[j] >= 1`,
//!   no other entry names `fwd_dead[j]`, and the entry
//!   holds `fwd_owed[j]` refs on objcg `fwd_dead[j]` (a dead tenant's): bytes of its objects
//!   freed on this thread and moved, uncharged from it, into the API pool of the slot that
//!   `fwd_gen[j]` names, whose refs are put when the entry goes. So the id cannot be
//!   recycled while the entry names it.
//! - `fwd_gen[j]` is the `gens` value of the slot fill the entry was made against; the entry
//!   forwards only while that slot still holds that fill (`fwd_slot`), which holds the ref
//!   that keeps the target's id from being recycled. A slot taken alone (an eviction) needs
//!   no care: the entries naming it stop forwarding and keep what they owe.
//!
//! The owner touches the entries only in its CS, a drainer only through the steal protocol,
//! as the slots; `gens` and `fills` are the owner's alone.
//!
//! And: `listed == false  =>  ids[i] == 0` and `fwd_dead[j] == 0` for every `i`, `j`, whenever
//! `in_cs == 0`. A slot is
//! made only inside a CS that saw `listed` (`charge.rs`), an entry only in a CS that found a
//! slot, and only a drainer that emptied every slot and entry clears it, so the stocks off that list hold nothing and no drain visits them.
//!
//! All shared fields are atomics used with `Relaxed` loads/stores, which compile to plain
//! moves: the fast path has no read-modify-write and touches only this thread's lines.
//! The ordering argument for `in_cs`/`steal` is in `drain.rs`.
//!
//! Reentrancy: nothing inside a CS calls out (no allocation, no callback), so the stock is
//! never mutated re-entrantly; a signal handler that allocates is outside the contract.

use crate::sys::sync::{
    self, AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};

use crate::kin_entry::KinCache;
use crate::types::{ObjCgId, StatIdx, NR_STAT};

/// Slots per stock (the kernel's `NR_MEMCG_STOCK`).
pub(crate) const NR_SLOTS: usize = 7;
/// Bytes a refill charges to the counter at once (a quarter, then exactly what is asked, near
/// a `max` or `high`: `charge::charge_counter`): the kernel's
/// `MEMCG_CHARGE_BATCH` (64 pages). With 64 KiB, a thread allocating objects of 8 KiB and
/// more (the server shape's 8 B-32 KiB) went to the shared counters every few allocations.
pub(crate) const CHARGE_BATCH: u64 = 256 << 10;
/// A slot holding more than this after an uncharge gives back everything above `STOCK_LOW`.
pub(crate) const STOCK_HIGH: u64 = 2 * CHARGE_BATCH;
pub(crate) const STOCK_LOW: u64 = CHARGE_BATCH;
/// A cached stat delta is flushed to the shared stats once its magnitude passes this (one
/// charge batch: a stat per size class flushed every two 32 KiB objects at 64 KiB).
pub(crate) const STAT_FLUSH: i64 = 256 << 10;

/// Forwarding entries per stock (`charge::forward`; a power of two), in sets of
/// `FWD_WAYS`. A thread freeing the objects of many dead requests at random (larson: about
/// 150 dead requests hold a lane's 2,000 objects, their ids spread over a thousand) finds
/// the entry of the request that allocated the object unless its set filled with others
/// since. Direct-mapped, 128 entries missed on a quarter of larson's frees and 256 on 15%
/// (ids hash like random keys: 150 in 256 entries collide often); 4-way, 256 entries miss
/// on 4.3% (85 k of 1.96 M frees; 5 KiB per thread).
pub(crate) const NR_FWD: usize = 256;
/// Entries per set of the forwarding table.
pub(crate) const FWD_WAYS: usize = 4;
// A slot fill's generation carries the slot index in its low 3 bits (`fill`).
const _: () = assert!(
    NR_SLOTS <= 8 && NR_FWD.is_power_of_two() && FWD_WAYS.is_power_of_two() && FWD_WAYS < NR_FWD
);

/// The first entry of the set a dead objcg's forwarding entry is in.
#[inline(always)]
pub(crate) fn fwd_set(dead: ObjCgId) -> usize {
    // A multiplicative hash, not the low bits: threads take ids 16 at a time, so one
    // thread's ids come in runs spaced by the other threads' runs, and the low bits would
    // put them in a fraction of the sets.
    let sets = NR_FWD / FWD_WAYS;
    (dead.wrapping_mul(0x9E37_79B1) >> (32 - sets.trailing_zeros())) as usize * FWD_WAYS
}

/// `flags` bits (owner only).
pub(crate) const REGISTERED: u8 = 1;
pub(crate) const EXITED: u8 = 2;
pub(crate) const IN_RECLAIM: u8 = 4;

#[repr(C, align(64))]
pub(crate) struct Stock {
    pub(crate) in_cs: AtomicBool,
    pub(crate) steal: AtomicBool,
    pub(crate) flags: AtomicU8,
    /// The slot the charge fast path looks at: the one most recently used by a slow path
    /// (`touch`) or found by a charge's search. Always < NR_SLOTS. Owner only.
    mru: AtomicU8,
    /// The slot the uncharge fast path looks at: the one an uncharge's search last found.
    /// Apart from `mru` because a thread that frees another tenant's objects and allocates
    /// for its own (two workers that free each other's objects) alternates between two
    /// slots: with one hint both sides missed and searched on every object. Always <
    /// NR_SLOTS. Owner only.
    mru_free: AtomicU8,
    pub(crate) ids: [AtomicU32; NR_SLOTS],
    pub(crate) bytes: [AtomicU64; NR_SLOTS],
    /// Pre-charged bytes for `Tenant::charge`, holding no objcg refs (module docs).
    pub(crate) api: [AtomicU64; NR_SLOTS],
    clock: AtomicU64,
    stamps: [AtomicU64; NR_SLOTS],
    /// Registry links (a doubly-linked list, so that a thread's exit unlinks in O(1) among
    /// thousands); read and written only under the registry lock.
    pub(crate) next: AtomicPtr<Stock>,
    pub(crate) prev: AtomicPtr<Stock>,
    /// `clock` as the idle-stock decay last saw it, and whether this pass takes the stock
    /// (`drain::drain_idle`). Under the registry lock.
    pub(crate) seen: AtomicU64,
    pub(crate) idle: AtomicBool,
    /// On the list of stocks that may hold something, with its links (module docs).
    pub(crate) listed: AtomicBool,
    pub(crate) hnext: AtomicPtr<Stock>,
    pub(crate) hprev: AtomicPtr<Stock>,
    stats: [[AtomicI32; NR_STAT]; NR_SLOTS],
    /// Per slot, which stat deltas may be non-zero, folded modulo 64 (module invariants):
    /// giving a slot back reads the few set ones instead of all `NR_STAT`, which a tenant
    /// per query pays on every eviction.
    dirty: [AtomicU64; NR_SLOTS],
    /// Per slot, the generation of its last fill: `fills << 3 | i`, with `fills` counting
    /// this stock's fills (owner only, module docs).
    gens: [AtomicU64; NR_SLOTS],
    fills: AtomicU64,
    /// Forwarding entries (module docs).
    fwd_dead: [AtomicU32; NR_FWD],
    fwd_gen: [AtomicU64; NR_FWD],
    fwd_owed: [AtomicU64; NR_FWD],
    /// The way a full set's next new entry replaces (`fwd_note`), advanced each time.
    fwd_turn: AtomicU8,
    /// This thread's cached counts on a few parent tenants (`kin_cache.rs`).
    pub(crate) kin: KinCache,
    /// This thread's zombie list (`objcg::push_on`): dead objcgs whose last ref this thread
    /// dropped, while its stock is registered. Core's atomic even under loom: no model
    /// touches it.
    pub(crate) zombies: core::sync::atomic::AtomicU64,
}

thread_local! {
    /// Const-initialised and without `Drop`: access is a plain TLS offset, no lazy-init
    /// check. Thread exit is handled by the pthread key that registering the stock arms
    /// on the slow path (`drain.rs`, `register`).
    pub(crate) static STOCK: Stock = const { Stock::new() };
}

/// What one slot held, taken out so it can be given back outside the CS.
pub(crate) struct Contents {
    pub(crate) id: ObjCgId,
    /// Bytes that each hold a ref on the objcg.
    pub(crate) bytes: u64,
    /// Bytes that hold none.
    pub(crate) api: u64,
    pub(crate) stats: [i32; NR_STAT],
    /// Where `stats` may be non-zero: bit `k % 64` for index `k` (as `Stock::dirty`).
    pub(crate) dirty: u64,
}

impl Contents {
    pub(crate) const EMPTY: Contents = Contents {
        id: 0,
        bytes: 0,
        api: 0,
        stats: [0; NR_STAT],
        dirty: 0,
    };

    /// The indices of `stats` that may be non-zero, with their deltas (zeros skipped).
    pub(crate) fn deltas(&self) -> impl Iterator<Item = (usize, i32)> + '_ {
        dirty_indices(self.dirty).filter_map(|k| match self.stats.get(k) {
            Some(&d) if d != 0 => Some((k, d)),
            _ => None,
        })
    }
}

/// The stat indices a folded dirty mask covers: for each set bit `b`, `b`, `b + 64`, ...
/// below `NR_STAT`.
fn dirty_indices(mask: u64) -> DirtyIndices {
    DirtyIndices {
        mask,
        next: NR_STAT,
    }
}

/// [`dirty_indices`]' iterator: a set bit's first index, then its later ones 64 apart, with
/// two words of state and no nested iterator (a request's tenant leaves some forty dirty
/// indices, which a give-back of its slot walks once or twice).
struct DirtyIndices {
    /// The set bits not visited yet.
    mask: u64,
    /// The next index of the current bit's run (`>= NR_STAT`: the run is over).
    next: usize,
}

impl Iterator for DirtyIndices {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.next < NR_STAT {
            let k = self.next;
            self.next += 64;
            return Some(k);
        }
        if self.mask == 0 {
            return None;
        }
        let b = self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        self.next = b + 64;
        // b < 64 < NR_STAT (asserted below), so b is an index.
        Some(b)
    }
}

const _: () = assert!(NR_STAT > 64);

/// What the forwarding entries owed, taken out with the slots: refs to put on dead objcgs
/// (`drain::release_taken`).
pub(crate) struct Owed {
    pub(crate) ids: [ObjCgId; NR_FWD],
    pub(crate) refs: [u64; NR_FWD],
}

/// Everything a stock held: its slots and its forwarding entries.
pub(crate) struct Taken {
    pub(crate) slots: [Contents; NR_SLOTS],
    pub(crate) owed: Owed,
}

/// Which pool of a slot an operation uses (module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Pool {
    /// Allocations: bytes that hold objcg refs.
    Objects,
    /// `Tenant::charge`/`uncharge`: bytes that hold none.
    Api,
}

impl Stock {
    /// An empty stock, off every list. `const` in every build (under loom too, see
    /// `slabcg_sys::sync`), for the thread-local.
    pub(crate) const fn new() -> Stock {
        Stock {
            in_cs: AtomicBool::new(false),
            steal: AtomicBool::new(false),
            flags: AtomicU8::new(0),
            mru: AtomicU8::new(0),
            mru_free: AtomicU8::new(0),
            ids: [const { AtomicU32::new(0) }; NR_SLOTS],
            bytes: [const { AtomicU64::new(0) }; NR_SLOTS],
            api: [const { AtomicU64::new(0) }; NR_SLOTS],
            clock: AtomicU64::new(0),
            stamps: [const { AtomicU64::new(0) }; NR_SLOTS],
            next: AtomicPtr::new(core::ptr::null_mut()),
            prev: AtomicPtr::new(core::ptr::null_mut()),
            seen: AtomicU64::new(0),
            idle: AtomicBool::new(false),
            listed: AtomicBool::new(false),
            hnext: AtomicPtr::new(core::ptr::null_mut()),
            hprev: AtomicPtr::new(core::ptr::null_mut()),
            stats: [const { [const { AtomicI32::new(0) }; NR_STAT] }; NR_SLOTS],
            dirty: [const { AtomicU64::new(0) }; NR_SLOTS],
            gens: [const { AtomicU64::new(0) }; NR_SLOTS],
            fills: AtomicU64::new(0),
            fwd_dead: [const { AtomicU32::new(0) }; NR_FWD],
            fwd_gen: [const { AtomicU64::new(0) }; NR_FWD],
            fwd_owed: [const { AtomicU64::new(0) }; NR_FWD],
            fwd_turn: AtomicU8::new(0),
            kin: KinCache::new(),
            zombies: core::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Opens the CS. Returns false if a drainer is stealing: the caller must then not touch
    /// the slots (but must still call `leave`). See `drain.rs` for why a compiler fence is
    /// enough on this side.
    #[inline(always)]
    pub(crate) fn enter(&self) -> bool {
        self.in_cs.store(true, Relaxed);
        crate::sys::light_barrier();
        // Acquire: pairs with the drainer's Release clear of `steal`, so we see its writes
        // to the slots.
        !self.steal.load(Acquire)
    }

    /// Closes the CS. Release: a drainer that reads `in_cs == 0` sees our slot writes.
    #[inline(always)]
    pub(crate) fn leave(&self) {
        self.in_cs.store(false, Release);
    }

    /// Runs `op` on the owner's slot for `id` inside the critical section: the most recently
    /// used slot when it is `id`'s, else the others, searched out of line (still without
    /// atomics), which makes the hit the MRU slot. So a thread working for one tenant at a
    /// time compares one id here. False when a drainer is stealing, no slot holds `id` or
    /// `op` declined. The owner's whole side of the protocol (`enter`, the slot, `leave`).
    #[inline(always)]
    pub(crate) fn with_slot(&self, id: ObjCgId, op: impl Fn(&Stock, usize) -> bool) -> bool {
        let mut ok = false;
        if self.enter() {
            ok = match self.hint_for(&self.mru, id) {
                Some(i) => op(self, i),
                None => self.other_slot(&self.mru, id).is_some_and(|i| op(self, i)),
            };
        }
        self.leave();
        ok
    }

    /// Fast path of a charge on this stock: take `n` bytes from `pool` of the slot for
    /// `id`, in the CS. False (nothing changed) when that misses.
    #[inline(always)]
    pub(crate) fn consume(&self, id: ObjCgId, pool: Pool, n: u64, idx: StatIdx) -> bool {
        self.with_slot(id, |s, i| s.try_take(i, pool, n, idx))
    }

    /// Fast path of an uncharge on this stock: give `n` bytes back to `pool` of the slot
    /// for `id`, in the CS; when no slot holds `id`, a freed object's bytes may still go
    /// through `id`'s forwarding entry ([`Stock::refill_forwarded`]). False (nothing
    /// changed) when that misses.
    #[inline(always)]
    pub(crate) fn refill(&self, id: ObjCgId, pool: Pool, n: u64, idx: StatIdx) -> bool {
        let mut ok = false;
        if self.enter() {
            ok = match self.hint_for(&self.mru_free, id) {
                Some(i) => self.try_give(i, pool, n, idx),
                None => self.refill_forwarded(id, pool, n, idx).unwrap_or_else(|| {
                    self.other_slot(&self.mru_free, id)
                        .is_some_and(|i| self.try_give(i, pool, n, idx))
                }),
            };
        }
        self.leave();
        ok
    }

    /// The free of `n` bytes of the dead objcg `id`'s object through its forwarding entry:
    /// the hit half of `charge::forward`, done in the caller's CS. The bytes go to the
    /// entry's slot's API pool, pre-charged to the live ancestor and holding no refs, and
    /// the entry owes their `n` refs. So a request's objects freed after it died cost about
    /// what the ancestor's own do: no second CS, no objcg lookup, no atomics. `None` when
    /// `id` has no usable entry (or the bytes are not an object's); `Some(false)`, nothing
    /// changed, when the slot declined them (the slow path trims and flushes). An entry
    /// exists only on a listed stock (module invariants), so no flag check is needed. An
    /// objcg with an entry usually has no slot of its own here (`forward` makes the entry
    /// after a search found none), so the entry is looked up before the other slots; when a
    /// later charge did give the dead objcg a slot (a realloc growing its block), the entry
    /// wins unless `mru_free` names that slot, and either route accounts the bytes right.
    /// In CS.
    #[inline(always)]
    fn refill_forwarded(&self, id: ObjCgId, pool: Pool, n: u64, idx: StatIdx) -> Option<bool> {
        if !matches!(pool, Pool::Objects) || n == 0 {
            return None;
        }
        let (j, i) = self.fwd_hit(id)?;
        if !self.try_give(i, Pool::Api, n, idx) {
            return Some(false);
        }
        debug_assert!(self.listed());
        self.fwd_owed[j].store(self.fwd_owed[j].load(Relaxed) + n, Relaxed);
        self.stamp(i);
        self.check_invariants();
        Some(true)
    }

    /// A drainer's request, under the registry lock, before its remote barrier: an owner
    /// whose `enter` the barrier orders after this store sees it and keeps off the slots
    /// (`drain.rs`).
    pub(crate) fn request_steal(&self) {
        self.steal.store(true, SeqCst);
    }

    /// The drainer's second half after its barrier reached the owner: waits for the owner
    /// to leave its CS, takes every slot and forwarding entry, runs `unlist` (the holding list, still inside the
    /// steal), then clears `steal` with Release, which publishes all of it to the owner's
    /// next `enter`. The caller gives the contents back (`drain::release`).
    pub(crate) fn take_stolen(&self, unlist: impl FnOnce(&Stock)) -> Taken {
        wait_out(&self.in_cs);
        let taken = self.take_all();
        unlist(self);
        self.steal.store(false, Release);
        taken
    }

    /// The drainer's second half when its barrier did not reach the owner: only withdraws
    /// the request.
    pub(crate) fn withdraw_steal(&self) {
        self.steal.store(false, Release);
    }

    #[inline(always)]
    pub(crate) fn find(&self, id: ObjCgId) -> Option<usize> {
        (0..NR_SLOTS).find(|&i| self.ids[i].load(Relaxed) == id)
    }

    /// Slot `i`'s pool of pre-charged bytes for `pool`.
    #[inline(always)]
    pub(crate) fn pool(&self, i: usize, pool: Pool) -> &AtomicU64 {
        match pool {
            Pool::Objects => &self.bytes[i],
            Pool::Api => &self.api[i],
        }
    }

    /// Fast-path take of `n` bytes from `pool` and `+n` on the stat delta. False (nothing
    /// changed) if the pool lacks bytes or the delta would need a flush.
    #[inline(always)]
    pub(crate) fn try_take(&self, i: usize, pool: Pool, n: u64, idx: StatIdx) -> bool {
        let b = self.pool(i, pool).load(Relaxed);
        let Some(st) = self.stats[i].get(idx.0 as usize) else {
            return false;
        };
        if b < n {
            return false;
        }
        // n <= b <= STOCK_HIGH, so no overflow in i64.
        let old = st.load(Relaxed);
        let d = old as i64 + n as i64;
        if d > STAT_FLUSH {
            return false;
        }
        self.pool(i, pool).store(b - n, Relaxed);
        st.store(d as i32, Relaxed);
        if old == 0 {
            self.mark(i, idx);
        }
        true
    }

    /// Fast-path give-back of `n` bytes to `pool` and `-n` on the stat delta. False (nothing
    /// changed) if the pool would pass `STOCK_HIGH` or the delta would need a flush.
    #[inline(always)]
    pub(crate) fn try_give(&self, i: usize, pool: Pool, n: u64, idx: StatIdx) -> bool {
        let b = self.pool(i, pool).load(Relaxed).wrapping_add(n);
        let Some(st) = self.stats[i].get(idx.0 as usize) else {
            return false;
        };
        // `b > STOCK_HIGH` also rejects any n > STOCK_HIGH (bytes ever uncharged are < 2^63).
        if b > STOCK_HIGH {
            return false;
        }
        let old = st.load(Relaxed);
        let d = old as i64 - n as i64;
        if d < -STAT_FLUSH {
            return false;
        }
        self.pool(i, pool).store(b, Relaxed);
        st.store(d as i32, Relaxed);
        if old == 0 {
            self.mark(i, idx);
        }
        true
    }

    /// Adds `n` bytes to slot `i`'s `pool`, keeping `STOCK_LOW` of a pool that would pass
    /// `STOCK_HIGH`; returns the excess the caller gives back to the counter. In CS.
    pub(crate) fn add_trimmed(&self, i: usize, pool: Pool, n: u64) -> u64 {
        let b = self.pool(i, pool).load(Relaxed).saturating_add(n);
        let (kept, excess) = if b > STOCK_HIGH {
            (STOCK_LOW, b - STOCK_LOW)
        } else {
            (b, 0)
        };
        self.pool(i, pool).store(kept, Relaxed);
        excess
    }

    /// Adds `d` to slot `i`'s delta at `idx`; returns what must be flushed to the shared
    /// stats instead (0 if it stayed cached). In CS.
    pub(crate) fn add_stat(&self, i: usize, idx: StatIdx, d: i64) -> i64 {
        let Some(st) = self.stats[i].get(idx.0 as usize) else {
            return d;
        };
        let old = st.load(Relaxed);
        let v = (old as i64).saturating_add(d);
        if v.unsigned_abs() > STAT_FLUSH as u64 {
            st.store(0, Relaxed);
            v
        } else {
            st.store(v as i32, Relaxed);
            if old == 0 {
                self.mark(i, idx);
            }
            0
        }
    }

    /// Records that slot `i`'s delta at `idx` may be non-zero. Called when a delta leaves
    /// 0, so a slot busy with one size class pays it once per round trip through 0. In CS.
    #[inline(always)]
    fn mark(&self, i: usize, idx: StatIdx) {
        let m = self.dirty[i].load(Relaxed);
        self.dirty[i].store(m | 1 << (idx.0 % 64), Relaxed);
    }

    /// Marks slot `i` as used now (approximate LRU: stamped on every slow-path visit, and a
    /// busy slot sees one at least every `CHARGE_BATCH` bytes). In CS.
    pub(crate) fn touch(&self, i: usize) {
        self.mru.store(i as u8, Relaxed);
        let c = self.clock.load(Relaxed) + 1;
        self.clock.store(c, Relaxed);
        self.stamps[i].store(c, Relaxed);
    }

    /// An empty slot, if any. In CS.
    pub(crate) fn empty_slot(&self) -> Option<usize> {
        self.find(0)
    }

    /// An empty slot, else the least recently stamped one. In CS.
    pub(crate) fn victim(&self) -> usize {
        self.empty_slot().unwrap_or_else(|| {
            (0..NR_SLOTS)
                .min_by_key(|&i| self.stamps[i].load(Relaxed))
                .unwrap_or(0)
        })
    }

    /// Moves slot `i`'s contents out, leaving it empty. Only in the owner's CS, or by a
    /// drainer after it saw `in_cs == 0` with `steal` set.
    ///
    /// Whoever takes has the slot to itself (that is the protocol), so plain loads and stores
    /// do: no read-modify-write. An empty slot holds nothing (invariant above), so a drain of
    /// an idle thread costs one load per empty slot, not one per stat index.
    pub(crate) fn take(&self, i: usize) -> Contents {
        let mut c = Contents::EMPTY;
        self.take_into(i, &mut c);
        c
    }

    /// [`take`](Self::take) into `c`, which must be empty (`Contents::EMPTY`): the eviction
    /// path fills its own `Contents` in place rather than moving half a KiB.
    pub(crate) fn take_into(&self, i: usize, c: &mut Contents) {
        debug_assert!(c.id == 0 && c.dirty == 0 && c.stats.iter().all(|&d| d == 0));
        c.id = self.ids[i].load(Relaxed);
        if c.id == 0 {
            debug_assert!(
                self.bytes[i].load(Relaxed) == 0
                    && self.api[i].load(Relaxed) == 0
                    && self.dirty[i].load(Relaxed) == 0
                    && self.stats[i].iter().all(|s| s.load(Relaxed) == 0)
            );
            return;
        }
        self.ids[i].store(0, Relaxed);
        c.bytes = self.bytes[i].load(Relaxed);
        self.bytes[i].store(0, Relaxed);
        c.api = self.api[i].load(Relaxed);
        self.api[i].store(0, Relaxed);
        c.dirty = self.dirty[i].load(Relaxed);
        self.dirty[i].store(0, Relaxed);
        debug_assert!(self.stats[i]
            .iter()
            .enumerate()
            .all(|(k, s)| s.load(Relaxed) == 0 || c.dirty & 1 << (k % 64) != 0));
        for k in dirty_indices(c.dirty) {
            if let (Some(d), Some(s)) = (c.stats.get_mut(k), self.stats[i].get(k)) {
                *d = s.load(Relaxed);
                if *d != 0 {
                    s.store(0, Relaxed);
                }
            }
        }
    }

    /// Moves slot `i`'s contents into slot `j` (`i != j`), leaving `i` empty: both of `i`'s
    /// pools to `j`'s `Pool::Api` (kept to `STOCK_LOW` past `STOCK_HIGH`, as
    /// [`add_trimmed`](Self::add_trimmed)), its deltas into `j`'s. What `j` cannot keep goes to
    /// `rest`, which must be empty: the trimmed bytes to `rest.api`, a delta past its flush
    /// to `rest.stats` (`rest.id` is left to the caller). One pass over `i`'s dirty deltas,
    /// where a take into a `Contents` and a hand-over from it took three: a request's tenant
    /// that dies on its thread gives its slot to its parent's this way. In CS.
    pub(crate) fn merge_into(&self, i: usize, j: usize, rest: &mut Contents) {
        debug_assert!(i != j && rest.dirty == 0 && rest.bytes == 0 && rest.api == 0);
        let bytes = self.bytes[i].load(Relaxed) + self.api[i].load(Relaxed);
        rest.api = self.add_trimmed(j, Pool::Api, bytes);
        let dirty = self.dirty[i].load(Relaxed);
        for k in dirty_indices(dirty) {
            let Some(st) = self.stats[i].get(k) else {
                continue;
            };
            let d = st.load(Relaxed);
            if d == 0 {
                continue;
            }
            st.store(0, Relaxed);
            let over = self.add_stat(j, StatIdx(k as u8), i64::from(d));
            if over == 0 {
                continue;
            }
            if let Some(r) = rest.stats.get_mut(k) {
                // |over| <= STAT_FLUSH + |d| fits an i32 (both are at most 2^18).
                *r = over as i32;
                rest.dirty |= 1 << (k % 64);
            }
        }
        self.ids[i].store(0, Relaxed);
        self.bytes[i].store(0, Relaxed);
        self.api[i].store(0, Relaxed);
        self.dirty[i].store(0, Relaxed);
        debug_assert!(self.stats[i].iter().all(|s| s.load(Relaxed) == 0));
    }

    /// The owner's slow-path clock (bumped whenever a slow path uses a slot), for the
    /// idle-stock decay. A racy read from another thread: it only chooses.
    pub(crate) fn clock(&self) -> u64 {
        self.clock.load(Relaxed)
    }

    /// Whether this stock is on the list of stocks that may hold something: stable inside
    /// the owner's CS, a hint outside it (module docs).
    pub(crate) fn listed(&self) -> bool {
        self.listed.load(Relaxed)
    }

    /// Whether any slot caches an objcg or any forwarding entry owes refs (racy from another
    /// thread, as `clock`).
    pub(crate) fn holds_any(&self) -> bool {
        self.ids.iter().any(|id| id.load(Relaxed) != 0)
            || self.fwd_dead.iter().any(|id| id.load(Relaxed) != 0)
    }

    /// Takes every slot and every forwarding entry. Same rules as `take`.
    pub(crate) fn take_all(&self) -> Taken {
        let mut owed = Owed {
            ids: [0; NR_FWD],
            refs: [0; NR_FWD],
        };
        for j in 0..NR_FWD {
            let id = self.fwd_dead[j].load(Relaxed);
            if id != 0 {
                owed.ids[j] = id;
                owed.refs[j] = self.fwd_owed[j].load(Relaxed);
                self.fwd_dead[j].store(0, Relaxed);
                self.fwd_gen[j].store(0, Relaxed);
                self.fwd_owed[j].store(0, Relaxed);
            }
        }
        Taken {
            slots: core::array::from_fn(|i| self.take(i)),
            owed,
        }
    }

    /// The slot through which the forwarding entry for the dead objcg `dead` forwards: when
    /// the entry is there and its slot still holds the fill it was made against (module
    /// docs). In CS.
    #[inline(always)]
    pub(crate) fn fwd_slot(&self, dead: ObjCgId) -> Option<usize> {
        self.fwd_hit(dead).map(|(_, i)| i)
    }

    /// [`Stock::fwd_slot`], with the entry: `(j, i)`. In CS.
    #[inline(always)]
    fn fwd_hit(&self, dead: ObjCgId) -> Option<(usize, usize)> {
        let j = self.fwd_entry(dead)?;
        let g = self.fwd_gen[j].load(Relaxed);
        let i = (g & 7) as usize;
        (i < NR_SLOTS && self.ids[i].load(Relaxed) != 0 && self.gens[i].load(Relaxed) == g)
            .then_some((j, i))
    }

    /// The forwarding entry that names the dead objcg `dead`, if any. In CS.
    #[inline(always)]
    fn fwd_entry(&self, dead: ObjCgId) -> Option<usize> {
        let set = fwd_set(dead);
        (set..set + FWD_WAYS).find(|&j| {
            self.fwd_dead
                .get(j)
                .is_some_and(|d| d.load(Relaxed) == dead)
        })
    }

    /// Records that `n` bytes of the dead objcg `dead` were forwarded to slot `i` (which
    /// holds a fill, found by `fwd_slot` or by the caller's read of `dead`'s target in this
    /// CS): the entry for `dead` owes `n` more refs and forwards through slot `i`'s current
    /// fill. Returns the entry it replaced (an id and the refs it owed, for the caller to
    /// put outside the CS), or `(0, 0)`. In CS.
    pub(crate) fn fwd_note(&self, dead: ObjCgId, i: usize, n: u64) -> (ObjCgId, u64) {
        debug_assert!(dead != 0 && n != 0 && self.ids[i].load(Relaxed) != 0);
        let gen = self.gens[i].load(Relaxed);
        if let Some(j) = self.fwd_entry(dead) {
            self.fwd_gen[j].store(gen, Relaxed);
            self.fwd_owed[j].store(self.fwd_owed[j].load(Relaxed) + n, Relaxed);
            return (0, 0);
        }
        // A free way of the set, else one in turn (`fwd_turn`): random-like replacement,
        // nearly LRU's hit rate at this associativity without a stamp per entry.
        let set = fwd_set(dead);
        let j = (set..set + FWD_WAYS)
            .find(|&j| self.fwd_dead[j].load(Relaxed) == 0)
            .unwrap_or_else(|| {
                let t = self.fwd_turn.load(Relaxed);
                self.fwd_turn.store(t.wrapping_add(1), Relaxed);
                set + t as usize % FWD_WAYS
            });
        let (old, owed) = (
            self.fwd_dead[j].load(Relaxed),
            self.fwd_owed[j].load(Relaxed),
        );
        self.fwd_dead[j].store(dead, Relaxed);
        self.fwd_gen[j].store(gen, Relaxed);
        self.fwd_owed[j].store(n, Relaxed);
        (old, owed)
    }

    /// Stamps slot `i` as used now without making it the MRU slot (the fast path's): a
    /// forwarding thread keeps its target's slot from looking least recently used while the
    /// MRU stays the slot of the tenant it charges. In CS.
    pub(crate) fn stamp(&self, i: usize) {
        let c = self.clock.load(Relaxed) + 1;
        self.clock.store(c, Relaxed);
        self.stamps[i].store(c, Relaxed);
    }

    /// Puts a fresh slot for `id` with `bytes` in `pool`. In CS, on a slot just emptied by
    /// `take`.
    pub(crate) fn fill(&self, i: usize, id: ObjCgId, pool: Pool, bytes: u64) {
        debug_assert!(
            self.ids[i].load(Relaxed) == 0
                && self.bytes[i].load(Relaxed) == 0
                && self.api[i].load(Relaxed) == 0
        );
        // Only a stock on the holding list gets a slot (module invariants).
        debug_assert!(self.listed());
        self.ids[i].store(id, Relaxed);
        self.pool(i, pool).store(bytes, Relaxed);
        let f = self.fills.load(Relaxed) + 1;
        self.fills.store(f, Relaxed);
        self.gens[i].store(f << 3 | i as u64, Relaxed);
        self.touch(i);
    }

    /// Whether the stock is registered and its thread not exiting: what its own zombie list
    /// and kin entries need (thread exit and the registry's walks reach them then).
    pub(crate) fn registered_live(&self) -> bool {
        self.flags() & (REGISTERED | EXITED) == REGISTERED
    }

    pub(crate) fn flags(&self) -> u8 {
        self.flags.load(Relaxed)
    }
    pub(crate) fn set_flags(&self, set: u8, clear: u8) {
        let f = self.flags.load(Relaxed);
        self.flags.store((f | set) & !clear, Relaxed);
    }

    /// Walks every slot and checks the module invariants as equations (the level of
    /// mimalloc's `mi_assert_expensive`: O(`NR_SLOTS` x `NR_STAT`) loads). Debug builds only,
    /// called by the owner's slow paths inside a CS that saw no `steal`, where the slots are
    /// the owner's alone; a no-op in release builds.
    #[inline]
    pub(crate) fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        // `steal` may be set meanwhile: a drainer waits for this CS to close before it takes.
        debug_assert!(self.in_cs.load(Relaxed));
        debug_assert!((self.mru.load(Relaxed) as usize) < NR_SLOTS);
        debug_assert!((self.mru_free.load(Relaxed) as usize) < NR_SLOTS);
        let listed = self.listed();
        for j in 0..NR_FWD {
            let (dead, owed) = (
                self.fwd_dead[j].load(Relaxed),
                self.fwd_owed[j].load(Relaxed),
            );
            if dead == 0 {
                debug_assert!(owed == 0 && self.fwd_gen[j].load(Relaxed) == 0);
            } else {
                debug_assert!(listed, "an unlisted stock holds forwarding entry {j}");
                debug_assert!(
                    fwd_set(dead) == j - j % FWD_WAYS && owed != 0,
                    "entry {j}: {dead} owes {owed}"
                );
                let set = j - j % FWD_WAYS;
                debug_assert!(
                    (set..set + FWD_WAYS).all(|k| k == j || self.fwd_dead[k].load(Relaxed) != dead),
                    "objcg {dead} in two forwarding entries"
                );
            }
        }
        for i in 0..NR_SLOTS {
            let id = self.ids[i].load(Relaxed);
            let (bytes, api) = (self.bytes[i].load(Relaxed), self.api[i].load(Relaxed));
            let dirty = self.dirty[i].load(Relaxed);
            if id == 0 {
                // An empty slot holds nothing.
                debug_assert!(
                    bytes == 0 && api == 0 && dirty == 0,
                    "empty stock slot {i} holds bytes"
                );
                debug_assert!(self.stats[i].iter().all(|st| st.load(Relaxed) == 0));
                continue;
            }
            // A slot is made only on a listed stock; each objcg has at most one slot.
            debug_assert!(listed, "an unlisted stock holds slot {i}");
            debug_assert!(
                (0..i).all(|j| self.ids[j].load(Relaxed) != id),
                "objcg {id} in two slots"
            );
            debug_assert!(
                bytes <= STOCK_HIGH && api <= STOCK_HIGH,
                "slot {i}: {bytes} + {api} B"
            );
            for (k, st) in self.stats[i].iter().enumerate() {
                let d = st.load(Relaxed);
                debug_assert!((d as i64).abs() <= STAT_FLUSH, "slot {i} stat {k}: {d}");
                debug_assert!(
                    d == 0 || dirty & 1 << (k % 64) != 0,
                    "slot {i} stat {k} not dirty"
                );
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> u64 {
        let api: u64 = self.api.iter().map(|b| b.load(Relaxed)).sum();
        api + self.bytes.iter().map(|b| b.load(Relaxed)).sum::<u64>()
    }
}

impl Stock {
    /// The slot `hint` (`mru` or `mru_free`) names, if it holds `id`. In CS.
    #[inline(always)]
    fn hint_for(&self, hint: &AtomicU8, id: ObjCgId) -> Option<usize> {
        // `get` keeps the index in bounds without a panic path (a hint < NR_SLOTS anyway),
        // and costs a compare where a `% NR_SLOTS` cost a multiply on every charge and
        // uncharge.
        let i = hint.load(Relaxed) as usize;
        match self.ids.get(i) {
            Some(slot) if slot.load(Relaxed) == id => Some(i),
            _ => None,
        }
    }

    /// The slot holding `id` when `hint` (`mru` or `mru_free`) names another; makes `hint`
    /// name it. Out of line so the hit path stays short, but still free of atomics and
    /// shared lines. In CS.
    #[inline(never)]
    fn other_slot(&self, hint: &AtomicU8, id: ObjCgId) -> Option<usize> {
        let i = self.find(id)?;
        hint.store(i as u8, Relaxed);
        Some(i)
    }
}

/// This thread's stock. The closure only yields the address, so the fast paths below are
/// inlined whole (a closure doing the work was left out of line by the optimiser).
#[inline(always)]
fn with_stock<R>(f: impl FnOnce(&Stock) -> R) -> R {
    let s: *const Stock = STOCK.with(|s| s as *const Stock);
    // SAFETY: a thread-local without Drop lives as long as its thread, and this reference
    // does not outlive this call on this thread.
    f(unsafe { &*s })
}

/// Fast path of a charge: take `n` bytes from `pool` of this thread's slot for `id`.
#[inline(always)]
pub(crate) fn consume(id: ObjCgId, pool: Pool, n: u64, idx: StatIdx) -> bool {
    with_stock(
        #[inline(always)]
        |s| s.consume(id, pool, n, idx),
    )
}

/// Fast path of an uncharge: give `n` bytes back to `pool` of this thread's slot for `id`.
#[inline(always)]
pub(crate) fn refill(id: ObjCgId, pool: Pool, n: u64, idx: StatIdx) -> bool {
    with_stock(
        #[inline(always)]
        |s| s.refill(id, pool, n, idx),
    )
}

/// Whether this thread's stock has a slot for `id` (outside the CS: a drainer may empty it
/// meanwhile, so a hint).
pub(crate) fn holds(id: ObjCgId) -> bool {
    id != 0 && with_stock(|s| s.find(id).is_some())
}

/// The drainer's wait for an owner to leave its critical section (`in_cs`), after the
/// barrier: spins briefly, since the section is a few instructions, then yields, since its
/// owner may have been preempted inside it. Acquire: pairs with the owner's Release store
/// of `in_cs = 0`, so the drainer sees the owner's writes. (Under loom every spin yields to
/// the model's scheduler.)
pub(crate) fn wait_out(in_cs: &AtomicBool) {
    let mut spins = 0u32;
    // The owner's CS is a handful of instructions; it only lasts if it is preempted.
    while in_cs.load(Acquire) {
        spins += 1;
        if spins < 64 || cfg!(loom) {
            sync::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod dirty_tests {
    use super::{dirty_indices, NR_STAT};

    /// Every index whose bit (`k % 64`) is set, ascending by bit then by index: what the
    /// folded mask means, written the slow way.
    fn by_definition(mask: u64) -> Vec<usize> {
        (0..64)
            .filter(|b| mask & 1 << b != 0)
            .flat_map(|b| (b..NR_STAT).step_by(64))
            .collect()
    }

    #[test]
    fn dirty_indices_visit_every_index_of_every_set_bit_once() {
        let masks = [
            0,
            1,
            1 << 63,
            u64::MAX,
            0b111,
            0x8000_0000_0000_0007,
            0x0123_4567_89ab_cdef,
        ];
        for mask in masks {
            assert_eq!(
                dirty_indices(mask).collect::<Vec<_>>(),
                by_definition(mask),
                "mask {mask:#x}"
            );
        }
        // The three bits below NR_STAT - 128 have three indices each.
        assert_eq!(dirty_indices(1).collect::<Vec<_>>(), [0, 64, 128]);
        assert_eq!(dirty_indices(1 << 5).collect::<Vec<_>>(), [5, 69]);
    }
}
