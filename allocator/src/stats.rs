//! `stats()` and `trim()`.
//!
//! Statistics are gathered on read from counters the slow paths keep anyway: slots a cache
//! handed out minus slots sitting in thread bins (each thread's bin counts, read racily but
//! never torn; for dedicated caches the front bins tagged with the cache) is what the
//! program holds. The fast paths touch nothing extra.

use core::fmt;
use core::sync::atomic::Ordering;

use crate::segment::{geometry, GUARD, SEGMENT};
use crate::size_class::{class_size, Kind, NUM_CLASSES};
use crate::{class_caches, large, sys, thread_cache};

/// Counts for one size class (plain and accounted caches together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// The class's object size.
    pub size: usize,
    /// Objects the program holds.
    pub objects: usize,
    /// Free slots cached in thread bins, parked batches and the hand-back (accounted slots
    /// kept charged for the next allocation of their tenant).
    pub cached: usize,
    /// Slabs with at least one object handed out (the plain cache's and its accounted
    /// twin's).
    pub active_slabs: usize,
    /// Empty slabs kept resident as a reserve.
    pub empty_slabs: usize,
    /// Bytes per slab of the plain cache; the accounted twin's may differ (its owner words
    /// change the packing), so use `active_bytes` for what the slabs hold.
    pub slab_bytes: usize,
    /// Bytes of the active slabs, both caches.
    pub active_bytes: usize,
}

/// A snapshot of the allocator's memory. Exact when no other thread allocates meanwhile.
#[derive(Clone, Copy, Debug)]
pub struct AllocStats {
    /// Bytes the program holds (usable sizes of live allocations).
    pub allocated: usize,
    /// Bytes of slabs holding at least one object, plus large mappings.
    pub active: usize,
    /// Bytes this allocator keeps resident: active slabs, the empty reserve, segment headers'
    /// used part and large mappings.
    pub resident: usize,
    /// Bytes of address space mapped.
    pub mapped: usize,
    /// Bytes of allocator metadata: segment headers, and the slots that accounted slabs give
    /// up for owner-metadata arrays (External placement).
    pub metadata: usize,
    /// Bytes of `allocated` charged to tenants (objects in accounted slabs, charged large
    /// allocations).
    pub allocated_charged: usize,
    /// Live large allocations.
    pub large_count: usize,
    /// Usable bytes of live large allocations (part of `allocated`).
    pub large_allocated: usize,
    /// Dedicated caches built (`Cache`; a rebuilt one that reuses a dropped core counts once).
    pub dedicated_caches: usize,
    /// Objects the program holds from dedicated caches.
    pub dedicated_objects: usize,
    /// Their bytes, object size times objects (part of `allocated`).
    pub dedicated_bytes: usize,
    /// Bytes dedicated caches keep resident (part of `resident`).
    pub dedicated_resident: usize,
    /// Bytes of `PROT_NONE` guard pages (part of `mapped`, never resident): one page after
    /// every segment and after every live large block in builds with the `hardened`
    /// feature, 0 otherwise.
    pub guard: usize,
    /// Resident set size of the whole process as the OS reports it (0 where unknown).
    pub process_rss: usize,
    /// Per size class.
    pub classes: [ClassStats; NUM_CLASSES],
}

/// Gathers allocator statistics. Allocation-free.
pub fn stats() -> AllocStats {
    let mut classes_out = [ClassStats::default(); NUM_CLASSES];
    let mut cached = [[0usize; 2]; NUM_CLASSES];
    thread_cache::for_each_bin_count(|c, kind, n| {
        cached[c][usize::from(kind == Kind::Accounted)] += n as usize
    });
    // Slots in the hand-back are free and cached (still charged, as a tagged bin's are).
    let mut handed = [0usize; NUM_CLASSES];
    crate::handback::add_slots(&mut handed);
    for (c, n) in handed.iter().enumerate() {
        cached[c][1] += n;
    }
    let mut s = AllocStats {
        allocated: 0,
        active: 0,
        resident: 0,
        mapped: 0,
        metadata: 0,
        allocated_charged: large::CHARGED_LARGE.load(Ordering::Relaxed),
        large_count: large::COUNT.load(Ordering::Relaxed),
        large_allocated: 0,
        dedicated_caches: 0,
        dedicated_objects: 0,
        dedicated_bytes: 0,
        dedicated_resident: 0,
        guard: 0,
        process_rss: sys::resident_bytes(),
        classes: classes_out,
    };
    for (c, out) in classes_out.iter_mut().enumerate() {
        out.size = class_size(c);
        out.cached = cached[c][0] + cached[c][1];
        out.slab_bytes = class_caches::PLAIN[c].layout.slab_bytes();
        for (acc, cache) in [&class_caches::PLAIN[c], &class_caches::ACCOUNTED[c]]
            .into_iter()
            .enumerate()
        {
            let k = &cache.counters;
            // Slots parked in the parked batches left their slabs but nobody holds them.
            let parked = k.transfer.load(Ordering::Relaxed);
            out.cached += parked;
            let held = k
                .used
                .load(Ordering::Relaxed)
                .saturating_sub(cached[c][acc] + parked);
            out.objects += held;
            if acc == 1 {
                s.allocated_charged += held * out.size;
            }
            let (active, empty) = add_slabs(&mut s, cache);
            out.active_slabs += active;
            out.active_bytes += active * cache.layout.slab_bytes();
            out.empty_slabs += empty;
        }
        s.allocated += out.objects * out.size;
    }
    // Dedicated caches: what they handed out, less what waits in their parked batches and in
    // the threads' fronts (`front.rs`), is what the program holds.
    crate::cache::for_each_dedicated(|cache| {
        let k = &cache.counters;
        let (in_fronts, charged_in_fronts) = thread_cache::front_counts(cache);
        let held = k
            .used
            .load(Ordering::Relaxed)
            .saturating_sub(k.transfer.load(Ordering::Relaxed) + in_fronts);
        // The core's count plus the live threads' net counts; the core's alone may have
        // wrapped below zero (objects charged on one thread, freed on another), so the sum
        // is taken modulo 2^64.
        let charged = (k.charged.load(Ordering::Relaxed) as isize)
            .wrapping_add(charged_in_fronts)
            .max(0) as usize;
        let bytes = held * cache.layout.object_size;
        s.dedicated_caches += 1;
        s.dedicated_objects += held;
        s.dedicated_bytes += bytes;
        s.allocated += bytes;
        // Objects allocated outside every scope carry no owner: they are the root's.
        s.allocated_charged += charged.min(held) * cache.layout.object_size;
        let resident = s.resident;
        add_slabs(&mut s, cache);
        s.dedicated_resident += s.resident - resident;
    });
    let large_bytes = large::MAPPED.load(Ordering::Relaxed);
    let large_cached = large::CACHED.load(Ordering::Relaxed);
    s.large_allocated = large::USABLE.load(Ordering::Relaxed);
    s.allocated += s.large_allocated;
    s.active += large_bytes;
    let large_guard = large::guard_bytes();
    s.resident += large_bytes.saturating_sub(large_guard) + large_cached;
    s.mapped += large_bytes + large_cached;
    s.guard += large_guard;
    s.classes = classes_out;
    s
}

/// Adds `cache`'s slabs and segments to `s`'s active, resident, mapped and metadata bytes;
/// returns its (active, empty) slab counts.
fn add_slabs(s: &mut AllocStats, cache: &crate::cache::SlabCache) -> (usize, usize) {
    let k = &cache.counters;
    let slab = cache.layout.slab_bytes();
    let active = k.active_slabs.load(Ordering::Relaxed);
    let empty = k.empty_slabs.load(Ordering::Relaxed);
    let segs = k.segments.load(Ordering::Relaxed);
    let (header, _, _) = geometry(cache.layout.slab_shift);
    s.active += active * slab;
    s.resident += (active + empty) * slab + segs * header;
    s.mapped += segs * (SEGMENT + GUARD);
    s.guard += segs * GUARD;
    s.metadata += segs * header + active * cache.layout.meta_bytes_paid();
    (active, empty)
}

/// Gives free memory back to the OS now: this thread's cached slots (its dedicated caches'
/// fronts included) and every parked batch
/// go back to their slabs, every empty slab of every cache (size classes and dedicated) is
/// released, and cached large mappings are unmapped. Other threads' bins (bounded to 128 KiB
/// per class each) are left alone.
pub fn trim() {
    thread_cache::flush_current();
    crate::handback::release_all(false);
    for c in class_caches::PLAIN
        .iter()
        .chain(class_caches::ACCOUNTED.iter())
    {
        c.trim();
    }
    crate::cache::for_each_dedicated(|c| c.trim());
    large::trim();
}

impl fmt::Display for AllocStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "allocated {}", self.allocated)?;
        writeln!(f, "active {}", self.active)?;
        writeln!(f, "resident {}", self.resident)?;
        writeln!(f, "mapped {}", self.mapped)?;
        writeln!(f, "metadata {}", self.metadata)?;
        writeln!(f, "allocated_charged {}", self.allocated_charged)?;
        writeln!(f, "large_count {}", self.large_count)?;
        writeln!(f, "large_allocated {}", self.large_allocated)?;
        writeln!(f, "dedicated_caches {}", self.dedicated_caches)?;
        writeln!(f, "dedicated_objects {}", self.dedicated_objects)?;
        writeln!(f, "dedicated_bytes {}", self.dedicated_bytes)?;
        writeln!(f, "dedicated_resident {}", self.dedicated_resident)?;
        writeln!(f, "guard {}", self.guard)?;
        writeln!(f, "process_rss {}", self.process_rss)?;
        writeln!(
            f,
            "class size objects cached active_slabs empty_slabs slab_bytes"
        )?;
        for c in self
            .classes
            .iter()
            .filter(|c| c.objects + c.cached + c.active_slabs > 0)
        {
            writeln!(
                f,
                "{:>5} {:>7} {:>6} {:>12} {:>11} {:>10}",
                c.size, c.objects, c.cached, c.active_slabs, c.empty_slabs, c.slab_bytes
            )?;
        }
        Ok(())
    }
}
