//! The report of one tenant's numbers (`TenantStat`, cgroup v2 `memory.stat`-like text),
//! and what the allocator registers about its slab stat indexes for it: class sizes, cache
//! names, owner-metadata geometry. Written once each, at allocator init or when a dedicated
//! cache is built; read only when a report is made. No fast path comes here.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use crate::counter::{Events, Reach};
use crate::node::Node;
use crate::types::{ObjCgId, SlabMeta, StatIdx, MAX_SLAB_CLASSES};

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
    let _tree = crate::tree::tree_lock();
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
    /// The tenant's name (`Tenant::name`).
    pub name: String,
    /// The tenant's path below the root, "/"-separated (`Tenant::path`).
    pub path: String,
    /// Bytes charged (`Tenant::current`), read after the drain that `stat()` starts with.
    pub current: u64,
    /// The highest `current` so far (`Tenant::peak`).
    pub peak: u64,
    /// `u64::MAX` = unlimited.
    pub max: u64,
    /// `u64::MAX` = unlimited.
    pub high: u64,
    /// This tenant's events and its descendants' (memory.events).
    pub events: Events,
    /// This tenant's own events (memory.events.local).
    pub events_local: Events,
    /// Usage is above `high` (`Tenant::under_pressure`).
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
    /// Bytes of large allocations (`StatItem::Large`).
    pub large: u64,
    /// Bytes charged as `StatItem::Sock` (socket buffers, through `Tenant::charge`).
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
            events: Events::read(c, Reach::Subtree),
            events_local: Events::read(c, Reach::Local),
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
