//! Per-tenant statistics (hierarchical, like cgroup v2 `memory.stat`: a tenant's numbers
//! include its descendants, dead ones too) and their report text.
//!
//! Stat deltas are batched in stock slots (`stock.rs`) and flushed here, to the node and
//! every ancestor, when a slot's delta for one index passes `STAT_FLUSH` or the slot is
//! drained. Drift bound: a tenant's reported stat can differ from the truth by at most
//! `STAT_FLUSH` per (thread, stock slot, stat index) until `current_exact()` or
//! `drain_all_stocks()`; the same holds for `sock`, as in the kernel's batched `MEMCG_SOCK`.

use core::fmt;
use core::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::OnceLock;

use crate::hooks::{StatIdx, MAX_SLAB_CLASSES};
use crate::tenant::{Events, Node};

/// Number of stat indexes: the slab classes, then `LARGE`, `SOCK`, `SLAB_OTHER`.
pub(crate) const NR_STAT: usize = MAX_SLAB_CLASSES + 3;

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

/// The shared, hierarchical stat counters of one node.
pub(crate) struct Stats {
    v: [AtomicI64; NR_STAT],
}

impl Stats {
    pub(crate) const fn new() -> Stats {
        Stats {
            v: [const { AtomicI64::new(0) }; NR_STAT],
        }
    }
    /// Adds `d` at `idx` on this node only (the caller walks ancestors). Out-of-range
    /// indexes are ignored rather than panicking: this runs inside the allocator.
    pub(crate) fn add(&self, idx: usize, d: i64) {
        if let Some(s) = self.v.get(idx) {
            s.fetch_add(d, Relaxed);
        }
    }
    /// Reads `idx`, clamping a transiently negative sum (a flush of an uncharge can land
    /// before the flush of its charge) to 0.
    pub(crate) fn get(&self, idx: usize) -> u64 {
        self.v.get(idx).map_or(0, |s| s.load(Relaxed).max(0) as u64)
    }
}

/// Adds `d` at `idx` to `node` and all its ancestors.
pub(crate) fn flush(node: &Node, idx: usize, d: i64) {
    if d == 0 {
        return;
    }
    let mut cur = Some(node);
    while let Some(n) = cur {
        n.stats.add(idx, d);
        cur = n.parent_node();
    }
}

static CLASS_SIZES: OnceLock<&'static [u32]> = OnceLock::new();

/// Names of slab stat indices that are not size classes (dedicated caches); see
/// `hooks::set_slab_name`.
static SLAB_NAMES: [OnceLock<Box<str>>; MAX_SLAB_CLASSES] =
    [const { OnceLock::new() }; MAX_SLAB_CLASSES];

pub(crate) fn set_slab_name(idx: usize, name: &str) -> bool {
    match SLAB_NAMES.get(idx) {
        Some(n) => n.set(name.into()).is_ok(),
        None => false,
    }
}

/// See `hooks::set_slab_class_sizes`. The first registration wins.
pub(crate) fn set_class_sizes(sizes: &'static [u32]) {
    let _ = CLASS_SIZES.set(sizes);
}

/// A snapshot of one tenant's memory numbers. `Display` prints cgroup v2 style lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantStat {
    pub name: String,
    pub current: u64,
    pub peak: u64,
    /// `u64::MAX` = unlimited.
    pub max: u64,
    /// `u64::MAX` = unlimited.
    pub high: u64,
    pub events: Events,
    pub under_pressure: bool,
    /// All slab bytes: the sum of `slab_classes` plus slab charged through `Tenant::charge`.
    pub slab: u64,
    /// Bytes per slab size class index.
    pub slab_classes: [u64; MAX_SLAB_CLASSES],
    pub large: u64,
    pub sock: u64,
}

impl TenantStat {
    pub(crate) fn read(name: &str, node: &Node, current: u64) -> TenantStat {
        let c = &node.counter;
        let mut slab_classes = [0u64; MAX_SLAB_CLASSES];
        for (i, s) in slab_classes.iter_mut().enumerate() {
            *s = node.stats.get(i);
        }
        let slab =
            slab_classes.iter().sum::<u64>() + node.stats.get(StatIdx::SLAB_OTHER.0 as usize);
        TenantStat {
            name: name.to_owned(),
            current,
            peak: c.peak(),
            max: c.max(),
            high: c.high(),
            events: Events {
                high: c.ev_high.load(Relaxed),
                max: c.ev_max.load(Relaxed),
                oom: c.ev_oom.load(Relaxed),
            },
            under_pressure: c.under_pressure(),
            slab,
            slab_classes,
            large: node.stats.get(StatIdx::LARGE.0 as usize),
            sock: node.stats.get(StatIdx::SOCK.0 as usize),
        }
    }
}

struct Limit(u64);
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == u64::MAX {
            f.write_str("max")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl fmt::Display for TenantStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "current {}", self.current)?;
        writeln!(f, "peak {}", self.peak)?;
        writeln!(f, "max {}", Limit(self.max))?;
        writeln!(f, "high {}", Limit(self.high))?;
        writeln!(f, "events.high {}", self.events.high)?;
        writeln!(f, "events.max {}", self.events.max)?;
        writeln!(f, "events.oom {}", self.events.oom)?;
        writeln!(f, "slab {}", self.slab)?;
        let sizes = CLASS_SIZES.get().copied().unwrap_or(&[]);
        for (i, &b) in self.slab_classes.iter().enumerate() {
            if b != 0 {
                match (sizes.get(i), SLAB_NAMES[i].get()) {
                    (Some(sz), _) => writeln!(f, "slab_{sz} {b}")?,
                    (None, Some(name)) => writeln!(f, "slab_{name} {b}")?,
                    (None, None) => writeln!(f, "slab_class{i} {b}")?,
                }
            }
        }
        writeln!(f, "large {}", self.large)?;
        writeln!(f, "sock {}", self.sock)
    }
}
