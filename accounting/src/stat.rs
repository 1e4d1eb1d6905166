//! Per-tenant statistics (hierarchical, like cgroup v2 `memory.stat`: a tenant's numbers
//! include its descendants, dead ones too) and their report text.
//!
//! Stat deltas are batched in stock slots (`stock.rs`) and flushed here, to the node and
//! every ancestor, when a slot's delta for one index passes `STAT_FLUSH` or the slot is
//! drained. Drift bound: a tenant's reported stat can differ from the truth by at most
//! `STAT_FLUSH` per (thread, stock slot, stat index) until `current_exact()` or
//! `drain_all_stocks()`; the same holds for `sock`, as in the kernel's batched `MEMCG_SOCK`.

use core::fmt;
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use crate::hooks::{ObjCgId, SlabMeta, StatIdx, MAX_SLAB_CLASSES};
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
            // Saturating, so that repeated uncharges of too many bytes (a caller bug) cannot
            // wrap a stat; flushes are batched, so the CAS loop is off the fast paths.
            let _ = s.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_add(d)));
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

/// Adds `d` at `idx` to `node` and its ancestors strictly below `stop` (`node` or one of
/// its ancestors): the stats of bytes moving between branches (`charge::transfer`), `d > 0`
/// on the receiving side, `d < 0` on the giving side.
pub(crate) fn flush_below(node: &Node, stop: &Node, idx: usize, d: i64) {
    let mut cur = Some(node);
    while let Some(n) = cur.filter(|n| !core::ptr::eq(*n, stop)) {
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
    let Some(slot) = SLAB_NAMES.get(idx) else {
        return false;
    };
    // The key lives as long as the process: no tenant pays for it.
    let _root = crate::scope::unscoped();
    // The key of the cache's `slab_<key> <bytes>` line: `cache_` (so that no name reads as
    // a size class's `slab_<size>`), the name with each character outside [A-Za-z0-9_.-]
    // made `_` (a line is `key value`), and `_<index>` when another cache's key is the same.
    // Under the tree lock, so that two caches named alike at once get different keys.
    let mut key = String::from("cache_");
    key.extend(name.chars().map(|ch| {
        if ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-') {
            ch
        } else {
            '_'
        }
    }));
    let _tree = crate::tenant::tree_lock();
    if SLAB_NAMES
        .iter()
        .any(|n| n.get().is_some_and(|k| **k == *key))
    {
        key.push_str(&format!("_{idx}"));
    }
    slot.set(key.into()).is_ok()
}

/// See `hooks::set_slab_class_sizes`. The first registration wins.
pub(crate) fn set_class_sizes(sizes: &'static [u32]) {
    let _ = CLASS_SIZES.set(sizes);
}

/// Bytes of owner metadata per charged slab object: one objcg id.
const OWNER_BYTES: u64 = core::mem::size_of::<ObjCgId>() as u64;

/// The `SlabMeta` of each slab stat index (`hooks::set_slab_meta`), packed into one word so
/// that a reader sees either 0 (not registered) or a whole registration, never half of one:
/// bits 0..21 `object_size`, 21..42 `paid_per_slab`, 42..63 `objects_per_slab`. Written
/// once, read only by `TenantStat::read`; no fast path touches it.
static SLAB_META: [AtomicU64; MAX_SLAB_CLASSES] = [const { AtomicU64::new(0) }; MAX_SLAB_CLASSES];
const META_FIELD_BITS: u32 = 21;
const META_FIELD_MAX: u64 = (1 << META_FIELD_BITS) - 1;

/// See `hooks::set_slab_meta`.
pub(crate) fn set_slab_meta(idx: usize, m: SlabMeta) -> bool {
    let [size, paid, per] = [m.object_size, m.paid_per_slab, m.objects_per_slab]
        .map(|v| u64::try_from(v).unwrap_or(u64::MAX));
    if size == 0 || per == 0 || size.max(paid).max(per) > META_FIELD_MAX {
        return false;
    }
    let packed = size | paid << META_FIELD_BITS | per << (2 * META_FIELD_BITS);
    SLAB_META
        .get(idx)
        .is_some_and(|w| w.compare_exchange(0, packed, Relaxed, Relaxed).is_ok())
}

/// (object_size, paid_per_slab, objects_per_slab) of slab stat index `idx`, if registered.
fn slab_meta(idx: usize) -> Option<(u64, u64, u64)> {
    let w = SLAB_META.get(idx)?.load(Relaxed);
    if w == 0 {
        return None;
    }
    let field = |i: u32| (w >> (i * META_FIELD_BITS)) & META_FIELD_MAX;
    Some((field(0), field(1), field(2)))
}

/// `(owner_meta, owner_meta_paid)` for the given per-index slab bytes. Objects are counted
/// per index as `bytes / object_size`; the paid share is `objects * paid_per_slab /
/// objects_per_slab`, rounded to the nearest byte once per index, which is exact whenever
/// the objects fill whole slabs and off by less than a byte per index otherwise. Indexes
/// with no registration (slab charged through `Tenant::charge`, dedicated caches beyond the
/// named ones) count no objects.
fn owner_meta(slab_classes: &[u64; MAX_SLAB_CLASSES]) -> (u64, u64) {
    let mut used = 0u64;
    let mut paid = 0u64;
    for (i, &bytes) in slab_classes.iter().enumerate() {
        let Some((size, per_slab, objects_per_slab)) = slab_meta(i) else {
            continue;
        };
        let objects = bytes / size;
        used = used.saturating_add(objects.saturating_mul(OWNER_BYTES));
        // u128: objects (< 2^64) times per_slab (< 2^21) cannot overflow it.
        let share = (u128::from(objects) * u128::from(per_slab) + u128::from(objects_per_slab / 2))
            / u128::from(objects_per_slab);
        paid = paid.saturating_add(u64::try_from(share).unwrap_or(u64::MAX));
    }
    (used, paid)
}

/// A snapshot of one tenant's memory numbers. `Display` prints cgroup v2 style lines.
///
/// For the root, `current`, `slab` and `large` also count what was allocated outside every
/// scope (the per-class lines count charged objects only), and `peak` is the highest charged
/// usage, raised to `current` when that is higher (unscoped bytes have no recorded peak).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantStat {
    pub name: String,
    /// The tenant's path below the root, "/"-separated (`Tenant::path`).
    pub path: String,
    pub current: u64,
    pub peak: u64,
    /// `u64::MAX` = unlimited.
    pub max: u64,
    /// `u64::MAX` = unlimited.
    pub high: u64,
    /// This tenant's events and its descendants' (memory.events).
    pub events: Events,
    /// This tenant's own events (memory.events.local).
    pub events_local: Events,
    pub under_pressure: bool,
    /// All slab bytes: the sum of `slab_classes` plus slab charged through `Tenant::charge`.
    pub slab: u64,
    /// Bytes per slab size class index.
    pub slab_classes: [u64; MAX_SLAB_CLASSES],
    /// Bytes of owner metadata (one 4-byte objcg id per object) that this tenant's charged
    /// slab objects use: 4 x the objects counted in `slab_classes` (each index's bytes over
    /// its object size). Slab charged through `Tenant::charge` and dedicated caches without
    /// their own `slab_cache_<name>` line hold no counted objects.
    pub owner_meta: u64,
    /// The part of the owner metadata that costs memory: objects whose owner words live in
    /// an array carved from the slab (`MetaPlacement::External`) pay for the slots that
    /// slab gave up (`meta_cost_slots * stride` per slab, shared by its `objects_per_slab`
    /// objects); words in per-slot padding or the leftover tail are free. Because whole
    /// slots are given up, this can exceed the 4 bytes per object that the words use.
    pub owner_meta_paid: u64,
    pub large: u64,
    pub sock: u64,
}

impl TenantStat {
    pub(crate) fn read(node: &Node, current: u64) -> TenantStat {
        let c = &node.counter;
        let mut slab_classes = [0u64; MAX_SLAB_CLASSES];
        for (i, s) in slab_classes.iter_mut().enumerate() {
            *s = node.stats.get(i);
        }
        let slab =
            slab_classes.iter().sum::<u64>() + node.stats.get(StatIdx::SLAB_OTHER.0 as usize);
        // Derived here rather than counted per allocation, so the fast paths pay nothing;
        // like the slab bytes it comes from, it covers the whole subtree.
        let (owner_meta, owner_meta_paid) = owner_meta(&slab_classes);
        TenantStat {
            name: node.name().to_owned(),
            path: node.path(),
            current,
            peak: c.peak(),
            max: c.max(),
            high: c.high(),
            events: Events::read(c, false),
            events_local: Events::read(c, true),
            under_pressure: c.under_pressure(),
            slab,
            slab_classes,
            owner_meta,
            owner_meta_paid,
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
        writeln!(f, "events.oom_kill {}", self.events.oom_kill)?;
        writeln!(f, "events_local.high {}", self.events_local.high)?;
        writeln!(f, "events_local.max {}", self.events_local.max)?;
        writeln!(f, "events_local.oom {}", self.events_local.oom)?;
        writeln!(f, "events_local.oom_kill {}", self.events_local.oom_kill)?;
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
        writeln!(f, "owner_meta {}", self.owner_meta)?;
        writeln!(f, "owner_meta_paid {}", self.owner_meta_paid)?;
        writeln!(f, "large {}", self.large)?;
        writeln!(f, "sock {}", self.sock)
    }
}
