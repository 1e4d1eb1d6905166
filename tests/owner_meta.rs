//! Owner metadata in `tenant.stat()`: `owner_meta` (4 bytes of objcg id per charged slab
//! object) and `owner_meta_paid` (what that metadata costs: the slots an `External` array
//! takes from its slab), derived at stat time from the per-class slab bytes.

use std::alloc::{GlobalAlloc, Layout};

use slabcg::allocator::testing::ACCOUNTED;
use slabcg::allocator::testing::META_BYTES;
use slabcg::allocator::SlabLayout;
use slabcg::{Cache, MetaPlacement, SlabAlloc, Tenant, TenantStat};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

// Tests in this binary share the allocator and run in parallel; each uses its own tenants,
// whose stats only count what was allocated inside their scopes.

/// What `owner_meta_paid` must report for `n` objects of a cache with layout `l`: the bytes of
/// the slots given up per slab, shared by the slab's objects, rounded once.
fn expected_paid(l: &SlabLayout, n: u64) -> u64 {
    match l.meta {
        MetaPlacement::External => {
            let per_slab = (l.meta_cost_slots * l.stride) as u64;
            let objects = l.objects as u64;
            (n * per_slab + objects / 2) / objects
        }
        _ => 0,
    }
}

fn line(stat: &TenantStat, key: &str) -> u64 {
    let text = stat.to_string();
    let found = text
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {key:?} line in\n{text}"));
    found.parse().unwrap()
}

fn check(stat: &TenantStat, owner_meta: u64, paid: u64) {
    assert_eq!(stat.owner_meta, owner_meta, "{stat}");
    assert_eq!(stat.owner_meta_paid, paid, "{stat}");
    assert_eq!(line(stat, "owner_meta"), owner_meta);
    assert_eq!(line(stat, "owner_meta_paid"), paid);
}

/// Allocates `n` objects of size class `c` inside `t`'s scope, checks the stat of `t` and of
/// its parent, frees them and checks that both return to 0.
fn size_class_round_trip(t: &Tenant, c: usize, n: usize) {
    let l = ACCOUNTED[c].layout;
    let layout = Layout::from_size_align(l.object_size, 8).unwrap();
    // Allocated outside the scope: only the n objects are charged to t.
    let mut ptrs: Vec<*mut u8> = Vec::with_capacity(n);
    {
        let _g = t.enter();
        for _ in 0..n {
            // SAFETY: a valid, non-zero layout.
            let p = unsafe { GLOBAL.alloc(layout) };
            assert!(!p.is_null());
            ptrs.push(p);
        }
    }
    let st = t.stat();
    assert_eq!(st.slab_classes[c], (n * l.object_size) as u64, "{st}");
    let used = (n * META_BYTES) as u64;
    let paid = expected_paid(&l, n as u64);
    check(&st, used, paid);
    // Hierarchical, like the slab bytes it is derived from.
    let parent = t.parent().unwrap();
    check(&parent.stat(), used, paid);
    for p in ptrs {
        // SAFETY: allocated above with `layout`, freed once.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
    check(&t.stat(), 0, 0);
    check(&parent.stat(), 0, 0);
}

#[test]
fn size_classes_report_owner_meta() {
    // Size classes are multiples of 8 with alignment 8: no padding, so the owner words go to
    // the leftover tail when it has room and to a carved array otherwise. Test one of each.
    let first = |m: MetaPlacement| {
        (0..ACCOUNTED.len())
            .find(|&c| ACCOUNTED[c].layout.meta == m)
            .unwrap_or_else(|| panic!("no size class with {m:?} metadata"))
    };
    let leftover = first(MetaPlacement::Leftover);
    let external = first(MetaPlacement::External);
    // The accounted twins are built exactly as this public layout computes.
    for c in [leftover, external] {
        let l = ACCOUNTED[c].layout;
        assert_eq!(SlabLayout::for_class(l.object_size, true), Some(l));
    }

    let parent = Tenant::new("meta-classes");
    let t = parent.child("meta-classes-child");
    let l = ACCOUNTED[external].layout;
    assert!(l.meta_cost_slots > 0);
    // Whole slabs: the paid figure is exactly what those slabs gave up.
    let whole = 3 * l.objects;
    size_class_round_trip(&t, external, whole);
    assert_eq!(
        expected_paid(&l, whole as u64),
        (3 * l.meta_cost_slots * l.stride) as u64
    );
    assert!(expected_paid(&l, whole as u64) > 0);
    // Part of a slab: rounded to the nearest byte.
    size_class_round_trip(&t, external, l.objects / 2 + 1);
    // Owner words in the leftover tail cost nothing.
    size_class_round_trip(&t, leftover, 1000);
}

#[test]
fn dedicated_caches_report_owner_meta() {
    let parent = Tenant::new("meta-dedicated");
    let t = parent.child("meta-dedicated-child");
    let cases = [
        // 4096-byte objects fill their slab: the owner array costs slots.
        ("meta-4096", 4096, MetaPlacement::External),
        // 100-byte objects aligned to 8 have 4 bytes of padding.
        ("meta-100", 100, MetaPlacement::Padding),
        // 2312-byte objects leave a tail big enough for every owner word.
        ("meta-2312", 2312, MetaPlacement::Leftover),
    ];
    for (name, size, placement) in cases {
        let c = Cache::builder(name, Layout::from_size_align(size, 8).unwrap())
            .account(true)
            .build();
        let i = c.info();
        assert_eq!(i.meta, placement, "{name}: {i:?}");
        let n = 2 * i.objects_per_slab + 1;
        let mut out = vec![std::ptr::null_mut(); n];
        {
            let _g = t.enter();
            assert_eq!(c.alloc_bulk(&mut out), n);
        }
        let st = t.stat();
        assert_eq!(line(&st, &format!("slab_cache_{name}")), (n * size) as u64);
        let paid = match placement {
            MetaPlacement::External => {
                assert!(i.meta_cost_slots > 0);
                let per_slab = i.meta_cost_slots * i.stride;
                ((n * per_slab + i.objects_per_slab / 2) / i.objects_per_slab) as u64
            }
            _ => 0,
        };
        if placement == MetaPlacement::External {
            assert!(paid > 0);
        }
        check(&st, (n * META_BYTES) as u64, paid);
        check(&parent.stat(), (n * META_BYTES) as u64, paid);
        // SAFETY: every pointer came from c's alloc_bulk and is freed once.
        unsafe { c.free_bulk(&out) };
        check(&t.stat(), 0, 0);
        check(&parent.stat(), 0, 0);
    }
}

#[test]
fn uncharged_and_unaccounted_objects_have_no_owner_meta() {
    let t = Tenant::new("meta-none");
    // An unaccounted dedicated cache charges nothing, so it reports no metadata.
    let c = Cache::builder("meta-plain", Layout::from_size_align(64, 8).unwrap()).build();
    let p = {
        let _g = t.enter();
        c.alloc().unwrap()
    };
    check(&t.stat(), 0, 0);
    // SAFETY: allocated from c, freed once.
    unsafe { c.free(p) };
    // Slab charged by hand is not made of objects.
    t.charge(4096, slabcg::StatItem::Slab).unwrap();
    let st = t.stat();
    assert_eq!(st.slab, 4096);
    check(&st, 0, 0);
    t.uncharge(4096, slabcg::StatItem::Slab);
    check(&t.stat(), 0, 0);
}

/// A process with a few dozen accounted dedicated caches (more than the dozen the stats
/// once had room for) sees each in its own `slab_cache_<name>` line and in `owner_meta`.
#[test]
fn dozens_of_dedicated_caches_each_get_a_line() {
    let t = Tenant::new("meta-many");
    let caches: Vec<Cache> = (0..40)
        .map(|k| {
            let size = 48 + 8 * k;
            Cache::builder(
                &format!("meta-many-{k}"),
                Layout::from_size_align(size, 8).unwrap(),
            )
            .account(true)
            .build()
        })
        .collect();
    // Allocated outside the scope: only the cache objects are charged to t.
    let mut ptrs = Vec::with_capacity(caches.len());
    {
        let _g = t.enter();
        for c in &caches {
            ptrs.push(c.alloc().unwrap());
        }
    }
    let st = t.stat();
    for (k, c) in caches.iter().enumerate() {
        assert_eq!(
            line(&st, &format!("slab_cache_meta-many-{k}")),
            c.info().object_size as u64
        );
    }
    assert_eq!(st.owner_meta, (caches.len() * META_BYTES) as u64, "{st}");
    for (c, p) in caches.iter().zip(ptrs) {
        // SAFETY: allocated from c, freed once.
        unsafe { c.free(p) };
    }
    check(&t.stat(), 0, 0);
}
