//! Dedicated caches in the allocator's statistics, the root tenant's usage and report, and
//! `trim()`.
//! Alone in its binary, so that the dedicated-cache figures move only with this test.

use std::alloc::Layout;

use slabcg::{Cache, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn dedicated_caches_count_in_stats_root_usage_and_trim() {
    let layout = Layout::from_size_align(1000, 8).unwrap();
    let plain = Cache::builder("stats-plain", layout).build();
    let charged = Cache::builder("stats-charged", layout)
        .account(true)
        .build();
    let size = plain.info().object_size as u64;
    let t = Tenant::new("stats-tenant");
    let n = 5_000;
    let mut held = Vec::with_capacity(2 * n + 1_000);
    let before = slabcg::stats();
    let root_before = Tenant::root().current();
    for _ in 0..n {
        held.push((&plain, plain.alloc().unwrap()));
    }
    {
        let _s = t.enter();
        for _ in 0..n {
            held.push((&charged, charged.alloc().unwrap()));
        }
    }
    // Objects of the accounted cache allocated outside every scope are nobody's charge:
    // they are the root's, not part of `allocated_charged`.
    let m = 1_000;
    for _ in 0..m {
        held.push((&charged, charged.alloc().unwrap()));
    }
    let during = slabcg::stats();
    assert_eq!(
        during.dedicated_objects - before.dedicated_objects,
        2 * n + m
    );
    assert_eq!(
        (during.dedicated_bytes - before.dedicated_bytes) as u64,
        (2 * n + m) as u64 * size
    );
    assert!(during.allocated - before.allocated >= (2 * n + m) * size as usize);
    assert_eq!(
        (during.allocated_charged - before.allocated_charged) as u64,
        n as u64 * size
    );
    assert!(during.resident >= during.allocated);
    assert_eq!(t.current_exact(), n as u64 * size);
    // The root's report adds up: its unscoped bytes are in `slab` and `large` (they were in
    // `current` alone, and `peak` was below `current`).
    let big = Layout::from_size_align(4 << 20, 8).unwrap();
    // SAFETY: a valid layout; freed below. black_box: an optimised build may otherwise
    // elide an allocation that is only compared with null (the test failed in --release).
    let block = std::hint::black_box(unsafe { std::alloc::alloc(big) });
    assert!(!block.is_null());
    let root = Tenant::root().stat();
    assert_eq!(root.slab + root.large + root.sock, root.current, "{root}");
    assert!(root.large >= 4 << 20, "{root}");
    assert!(root.slab >= (2 * n + m) as u64 * size, "{root}");
    assert!(root.peak >= root.current, "{root}");
    // SAFETY: allocated just above with `big`.
    unsafe { std::alloc::dealloc(block, big) };
    // The root holds the unscoped objects too (and its children's charges).
    let root_growth = Tenant::root().current() - root_before;
    let expected = (2 * n + m) as u64 * size;
    assert!(
        root_growth >= expected && root_growth < expected + (1 << 20),
        "root grew by {root_growth}, not {expected}"
    );
    for (cache, p) in held {
        // SAFETY: allocated above from this cache, freed once.
        unsafe { cache.free(p) };
    }
    let freed = slabcg::stats();
    assert_eq!(freed.dedicated_objects, before.dedicated_objects);
    // The freed slabs are kept as a reserve until trimmed; trim returns them.
    slabcg::trim();
    let trimmed = slabcg::stats();
    assert!(
        trimmed.dedicated_resident < freed.dedicated_resident,
        "trim kept the dedicated caches' empty slabs: {} -> {}",
        freed.dedicated_resident,
        trimmed.dedicated_resident
    );
    assert!(during.dedicated_resident >= 2 * n * size as usize);
    assert_eq!(t.current_exact(), 0);
}
