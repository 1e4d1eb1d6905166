//! Per-tenant statistics (hierarchical, like cgroup v2 `memory.stat`: a tenant's numbers
//! include its descendants, dead ones too).
//!
//! Stat deltas are batched in stock slots (`stock.rs`) and flushed here, to the node and
//! every ancestor, when a slot's delta for one index passes `STAT_FLUSH` or the slot is
//! drained. Drift bound: a tenant's reported stat can differ from the truth by at most
//! `STAT_FLUSH` per (thread, stock slot, stat index) until `current_exact()` or
//! `drain_all_stocks()`; the same holds for `sock`, as in the kernel's batched `MEMCG_SOCK`.
//!
//! Mechanism only: the counters of one node and the walk that adds a delta to a node and its
//! ancestors, for any node type that has them ([`StatHierarchy`], as `counter.rs` walks
//! [`Hierarchy`]). The report built from them is `report.rs`.

use core::sync::atomic::{AtomicI64, Ordering::Relaxed};

use crate::counter::Hierarchy;
use crate::types::{StatIdx, MAX_SLAB_CLASSES, NR_STAT};

/// A kind of charged resource, for [`crate::Tenant::charge`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StatItem {
    /// Slab memory that does not belong to one size class (reported under `slab`).
    Slab,
    /// Large allocations.
    Large,
    /// Socket buffers (batched per thread, like the kernel's `MEMCG_SOCK`).
    Sock,
}

impl StatItem {
    pub(crate) fn idx(self) -> StatIdx {
        match self {
            StatItem::Slab => StatIdx::SLAB_OTHER,
            StatItem::Large => StatIdx::LARGE,
            StatItem::Sock => StatIdx::SOCK,
        }
    }
}

/// The shared, hierarchical stat counters of one node. A new node's are all zero, made by
/// zeroing its memory (`Node::new_arc`): no constructor, so none builds 1 KiB by value.
pub(crate) struct Stats {
    v: [AtomicI64; NR_STAT],
}

impl Stats {
    /// Whether every stat is zero (a new node's).
    pub(crate) fn is_zero(&self) -> bool {
        self.v.iter().all(|s| s.load(Relaxed) == 0)
    }
    /// Adds `d` at `idx` on this node only (the caller walks ancestors). Out-of-range
    /// indexes are ignored rather than panicking: this runs inside the allocator.
    pub(crate) fn add(&self, idx: usize, d: i64) {
        if let Some(s) = self.v.get(idx) {
            // Saturating, so that repeated uncharges of too many bytes (a caller bug) cannot
            // wrap a stat; flushes are batched, so the CAS loop is off the fast paths.
            let _ = s.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_add(d)));
        }
    }
    /// [`add`](Self::add) with a delta of some kept objects' bytes (a transfer's,
    /// [`flush_below`]): on a size class's or dedicated cache's own index, one `lock xadd`
    /// instead of the saturating compare-and-swap loop, which a transfer of a request's
    /// object stock ran some forty times. Those indices only ever move by objects' sizes
    /// (`Tenant::charge` reaches only `SLAB_OTHER`, `LARGE` and `SOCK`), so they stay far
    /// from either end of the range, where saturating and wrapping adds agree. `SLAB_OTHER`
    /// (the dedicated caches past the indices' number share it with the API) saturates.
    pub(crate) fn add_object_bytes(&self, idx: usize, d: i64) {
        match self.v.get(idx) {
            Some(s) if idx < MAX_SLAB_CLASSES => {
                s.fetch_add(d, Relaxed);
            }
            _ => self.add(idx, d),
        }
    }
    /// Reads `idx`, clamping a transiently negative sum (a flush of an uncharge can land
    /// before the flush of its charge) to 0.
    pub(crate) fn get(&self, idx: usize) -> u64 {
        self.v.get(idx).map_or(0, |s| s.load(Relaxed).max(0) as u64)
    }
}

/// A node of the tree that has shared stats (the tenant node, `node.rs`).
pub(crate) trait StatHierarchy: Hierarchy {
    fn stats(&self) -> &Stats;
}

/// Adds `d` at `idx` to `node` and all its ancestors.
pub(crate) fn flush<N: StatHierarchy>(node: &N, idx: usize, d: i64) {
    if d == 0 {
        return;
    }
    let mut cur = Some(node);
    while let Some(n) = cur {
        n.stats().add(idx, d);
        cur = n.parent();
    }
}

/// Adds `d` at `idx` to `node` and its ancestors strictly below `stop` (`node` or one of
/// its ancestors): the stats of kept objects' bytes moving between branches
/// (`charge::transfer`), `d > 0` on the receiving side, `d < 0` on the giving side; `idx` is
/// a size class's or dedicated cache's ([`Stats::add_object_bytes`]).
pub(crate) fn flush_below<N: StatHierarchy>(node: &N, stop: &N, idx: usize, d: i64) {
    let mut cur = Some(node);
    while let Some(n) = cur.filter(|n| !core::ptr::eq(*n, stop)) {
        n.stats().add_object_bytes(idx, d);
        cur = n.parent();
    }
}
