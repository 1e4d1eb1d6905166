//! slabcg-accounting: hierarchical, memcg-style memory accounting with per-thread stocks.
//!
//! ## Vocabulary (see DESIGN.md)
//! **tenant**: a node of the accounting tree; the **root** is never limited. **objcg**: what
//! a charged allocation points to (a `u32` id); it points to its tenant and is re-pointed
//! to the parent when the tenant dies (reparenting). **charge/uncharge**: add/remove bytes to
//! a tenant and all its ancestors (the root included). **counter**: the shared hierarchical
//! value. **stock**: a thread's private reserve of bytes already charged to the counter.
//! **drain**: give a stock back. **current, peak, max, high, events**: as in cgroup v2.
//!
//! ## Call tree of the fast path
//! ```text
//! hooks::charge(id, n, idx)                      #[inline(always)]
//!   stock::consume: STOCK (TLS, const, no Drop)
//!     in_cs = 1; light_barrier (a compiler fence); if steal -> miss
//!     the most recently used slot holds id? (else search the other 6, out of line)
//!     bytes[i] >= n && stat delta stays small -> bytes[i] -= n; stats[i][idx] += n
//!     in_cs = 0
//!   miss -> charge::charge_slow                  #[cold] #[inline(never)]
//!     a new slot takes a share of the objcg's stock budget (objcg::try_hold, 4 slots per
//!     CPU for one objcg) and a place on the holding list (drain::join); without a share
//!     only n is charged, straight to the counters;
//!     refill: borrow a batch from the parent's slot (a dead sibling's bytes), else charge
//!     one (256 KiB; else n rounded up to 64 KiB near a max or high, or above a high:
//!     counter::try_charge_batch, a CAS walk up the ancestors) or exactly n
//!     (counter::try_charge), evict LRU slot,
//!     failure ladder: exact n -> drain (unless clean) -> retry -> reclaim callback -> retry
//!     -> (if a callback ran) drain (unless clean) -> retry -> OOM killer (under Kill)
//!     (reclaim and the OOM killer are policy: reached only through the `charge::Ladder`
//!     that hooks::charge and Tenant::charge hand in, `tenant::LADDER`)
//!     (a drain walks the holding list, after the allocator's object drain of the threads
//!     on its armed list, `hooks::set_object_drain` -> callbacks.rs; evicted and drained
//!     slots go back through `drain::release`)
//! hooks::uncharge(id, n, idx): the mirror image (stock::refill / charge::uncharge_slow).
//! Tenant::charge / uncharge: the same paths on the slot's API pool, whose bytes hold no
//! objcg refs (stock.rs).
//! ```
//!
//! ## Layers (bottom to top)
//! Each file imports only files below it (`../shared/tools/modcycles.py` prints no ring);
//! mechanism (counter, stat, stock, objcg, drain, charge) never calls policy (oom, tenant)
//! except through the `charge::Ladder` it is handed.
//! 1. `types.rs`: plain shared types and constants (`ObjCgId`, `StatIdx`, `NR_STAT`,
//!    `SlabMeta`, `ObjectDrain`, `Unscoped`); imports nothing of the crate.
//! 2. `sys.rs`: the OS (membarrier, thread exit, environment, warnings).
//! 3. `callbacks.rs`: what the allocator registers (activation, object drain, root usage).
//! 4. `counter.rs`: the hierarchical counter (`page_counter`), its events and `Events`.
//! 5. `stat.rs`: a node's shared stat counters and the walk that flushes deltas up.
//! 6. `oom_state.rs`: a node's OOM state (policy choice, overdraft, kill mark, waiters).
//! 7. `kin_entry.rs`: a thread's cached counts on a few parents (births, deaths, credits).
//! 8. `stock.rs`: the per-thread stock and its fast paths (`consume`, `refill`); it holds
//!    the thread's `KinCache`.
//! 9. `node.rs`: a tree node (the data above, tree links, objcg list, reclaim callback) and
//!    the `Tenant` handle type.
//! 10. `scope.rs`: the thread's current objcg, the `enter()` guard, the root scope.
//! 11. `objcg.rs`: the owner indirection (id table, refs, reader sections, zombies).
//! 12. `tree.rs`: the tree lock, the root node, the walk of live tenants, fork locks.
//! 13. `drain.rs`: the stock registry and holding list, drains, thread exit, `release`
//!     (and `release_kin`, what an emptied kin entry held).
//! 14. `kin_cache.rs`: children's counts on their parent cached per thread (install, the
//!     sweep when the parent's last handle goes, the birth and death entry points; a
//!     node's drop gives its reference back to them in `node.rs`).
//! 15. `charge.rs`: the charge/uncharge slow paths and the failure ladder (mechanism).
//! 16. `report.rs`: `TenantStat` and the slab geometry the allocator registers for it.
//! 17. `oom.rs`: policy at `max`: victim choice, kill, overdraft, the background thread.
//! 18. `tenant.rs`: the `Tenant` API, lifecycle and reparenting, reclaim, `LADDER`.
//! 19. `task.rs`: futures and closures carried into a tenant, safe points.
//! 20. `hooks.rs`: the façade the allocator calls; only forwards, nothing imports it.
//!
//! ## Who touches what
//! - `Stock` (stock.rs): its owner thread, plus a drainer holding the registry lock after a
//!   membarrier handshake (drain.rs). Owner never uses atomic RMW on it.
//! - `Counter` (counter.rs) and `Stats` (stat.rs) of a node: any thread, atomics, slow
//!   paths only (batch refills, trims, flushes, drains).
//! - An objcg's stock budget count (objcg.rs): any thread, one atomic when a stock slot is
//!   made for it or taken; the holding list of stocks (drain.rs): under the registry lock.
//! - `ObjCg` (objcg.rs): refs by any slow path; `tenant` written only in user context under
//!   the tree lock (reparenting), read lock-free by slow paths that hold a ref.
//! - Tree structure, names, objcg lists, reclaim callbacks (node.rs; changed by tenant.rs
//!   under the tree lock of tree.rs): user context only.
//! - What the allocator registers about its slab stat indexes (report.rs: class sizes, cache
//!   names, owner-metadata geometry): written once each, at allocator init or when a
//!   dedicated cache is built; read only by `stat()`, which derives `owner_meta` from it.
//! - Activation (scope.rs): the first `enter()` of a non-root tenant runs the allocator's
//!   hook (`hooks::set_on_activate`, kept in callbacks.rs) before any scope is entered, so
//!   the allocator can tell its threads that frees may meet accounted objects.
//!
//! - At `max` (oom.rs, state in oom_state.rs): the charge ladder's last step, under the
//!   tree lock, kills a victim under `OomPolicy::Kill` and opens the refusing tenant's
//!   overdraft window (a counter field); killed futures (task.rs) see it through a kill
//!   epoch at their next poll and are woken by the background thread, which also gives
//!   idle threads' stocks back (`drain::drain_idle`) once many threads hold stocks.
//! - Objcg readers (objcg.rs): every slow-path use of the node an objcg points at is a short
//!   read section; a tenant's death re-points its objcgs after their readers left, then its
//!   node is freed.
//!
//! Runtime paths (everything the hooks reach) never allocate through the global allocator,
//! never panic and never unwind. The charge and uncharge paths take the registry spin lock,
//! whose holders do bounded work; only a charge at its limit goes further, into the reclaim
//! callback and the OOM killer under the tree lock (tree.rs). User-facing APIs may
//! allocate.
//!
//! Dropping a value can call upward where importing cannot: a `ScopeGuard` (scope.rs) or a
//! `Tenant` handle (node.rs) that is the last handle runs `Drop for Tenant` (tenant.rs:
//! death, reparenting). Both are dropped in user context only.
//!
//! ## Public API
//! Every module but `hooks` is private. Applications use the crate-root re-exports
//! ([`Tenant`], [`ScopeGuard`], [`Scoped`] and [`InTenant`], [`StatItem`], [`TenantStat`],
//! [`Events`], [`OomPolicy`], [`Killed`], [`ChargeError`], ...). [`hooks`] is the façade the
//! allocator crate calls (charge, uncharge, registration, fork support), public because the
//! allocator is another crate. The hidden `testing` module holds probes of the internals for
//! the workspace's own tests; it is not part of the API.

#![warn(missing_docs)]

// The layer order, bottom to top, is the design note's "Layers" list above.
mod callbacks;
mod charge;
mod counter;
mod drain;
pub mod hooks;
mod kin_cache;
mod kin_entry;
mod node;
mod objcg;
mod oom;
mod oom_state;
mod report;
mod scope;
mod stat;
mod stock;
mod sys;
mod task;
mod tenant;
mod tree;
mod types;

pub use counter::Events;
pub use node::Tenant;
pub use oom::Killed;
pub use oom_state::OomPolicy;
pub use report::TenantStat;
pub use scope::ScopeGuard;
pub use stat::StatItem;
pub use task::{checkpoint, InFlight, InTenant, Scoped};
pub use tenant::{current_tenant, drain_all_stocks, ChargeError, TenantError};

/// Probes of the accounting's internals for the workspace's own tests; not a stable API
/// (hidden from the docs, may change in any release).
#[doc(hidden)]
pub mod testing {
    use crate::types::ObjCgId;

    /// Whether `id` is currently an allocated objcg (false once it died and was freed).
    /// `accounting/tests/reparent.rs`, `tests/request_transfer.rs`: a zombie objcg is freed.
    pub fn objcg_live(id: ObjCgId) -> bool {
        crate::objcg::is_live(id)
    }

    /// Drains of every stock that walked the threads so far. `tests/refusal_drains.rs`: a
    /// refusal that needed no drain does not walk them.
    pub fn drain_walks() -> u64 {
        crate::drain::walks()
    }

    /// Stocks that drains walked so far, and how many stocks are on the list of those that
    /// may hold something now. `tests/many_idle_threads.rs`, the unit tests: a refused
    /// charge walks those, not every thread.
    pub fn drain_visits() -> (u64, usize) {
        crate::drain::visits()
    }

    /// Stock slots, all threads together, that may cache one tenant's objcg at once (4 per
    /// CPU): what stocks pre-charge for it stays under that times 1 MiB (two pools of at most
    /// 512 KiB).
    /// `tests/many_idle_threads.rs`, `tests/object_stock_budget_caching.rs`.
    pub fn stock_budget_slots() -> u32 {
        crate::objcg::hold_budget()
    }

    /// Bytes a stock refill charges at once (`stock::CHARGE_BATCH`).
    pub fn charge_batch() -> u64 {
        crate::stock::CHARGE_BATCH
    }

    /// A cached stat delta's largest magnitude before it is flushed (`stock::STAT_FLUSH`).
    pub fn stat_flush() -> u64 {
        crate::stock::STAT_FLUSH as u64
    }

    /// Bytes the objcg id table holds now (its chunks, directories and free lists): what
    /// dead tenants with live objects cost. `tests/dead_tenants.rs`.
    pub fn objcg_table_bytes() -> usize {
        crate::objcg::table_bytes()
    }

    /// Slots of one thread's byte stock (`stock::NR_SLOTS`), each naming one objcg.
    pub fn stock_slots() -> usize {
        crate::stock::NR_SLOTS
    }

    /// Objcg ids one thread may hold that no live tenant uses: `(refill, batch_cap,
    /// own_zombies)`, the ids a refill of its batch takes, the most its batch keeps, and its
    /// own zombies that wait for its next sweep (`objcg.rs`). `tests/common/churn.rs` bounds
    /// the largest id with them.
    pub fn objcg_id_batches() -> (usize, usize, usize) {
        crate::objcg::id_batches()
    }
}

#[cfg(test)]
mod kin_stress_tests;
#[cfg(test)]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
