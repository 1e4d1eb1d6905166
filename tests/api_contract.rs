//! Every name and signature of the public API contract in DESIGN.md, used once the way an
//! external user would, through the root crate only.

use std::alloc::Layout;
use std::ptr::NonNull;

use slabcg::{
    AllocStats, Cache, CacheInfo, ChargeError, Events, MetaPlacement, ScopeGuard, SlabAlloc,
    StatItem, Tenant, TenantStat,
};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn contract_compiles_and_behaves() {
    let v: Box<[u8; 100]> = Box::new([1u8; 100]);
    // SAFETY: v's buffer is a live allocation of SlabAlloc.
    assert!(unsafe { SlabAlloc::usable_size(v.as_ptr()) } >= 100);
    let s: AllocStats = slabcg::stats();
    assert!(s.allocated >= 100 && !format!("{s}").is_empty() && !format!("{s:?}").is_empty());
    slabcg::trim();

    let root: Tenant = Tenant::root();
    assert_eq!(root.max(), u64::MAX);
    let t = Tenant::new("contract");
    let c = t.child("child");
    assert_eq!(c.name(), "child");
    assert_eq!(c.parent(), Some(t.clone()));
    t.set_max(1 << 20);
    t.set_high(1 << 19);
    assert_eq!((t.max(), t.high()), (1 << 20, 1 << 19));
    {
        let _g: ScopeGuard = c.enter();
        assert_eq!(slabcg::current_tenant(), c);
        // black_box: an optimised build may otherwise elide an allocation it sees unused.
        let kept = std::hint::black_box(vec![0u8; 1000]);
        assert!(t.current() >= 1000);
        assert!(t.current_exact() >= 1000);
        drop(kept);
    }
    assert!(t.peak() >= 1000);
    let e: Events = t.events();
    assert_eq!((e.high, e.max, e.oom), (0, 0, 0));
    let st: TenantStat = t.stat();
    assert!(st.to_string().contains("current"));
    t.charge(4096, StatItem::Sock).unwrap();
    let err: ChargeError = t.charge(2 << 20, StatItem::Sock).unwrap_err();
    assert!(err.to_string().contains("contract"), "{err}");
    let _: &dyn std::error::Error = &err;
    t.uncharge(4096, StatItem::Sock);
    let _ = (StatItem::Slab, StatItem::Large);
    slabcg::drain_all_stocks();
    assert_eq!(t.current_exact(), 0);

    let cache: Cache = Cache::builder("contract", Layout::new::<[u64; 5]>())
        .hwcache_align(false)
        .account(true)
        .build();
    let p: NonNull<u8> = cache.alloc().unwrap();
    // SAFETY: allocated from cache.
    unsafe { cache.free(p) };
    let mut out = [std::ptr::null_mut(); 16];
    assert_eq!(cache.alloc_bulk(&mut out), 16);
    // SAFETY: allocated from cache just above.
    unsafe { cache.free_bulk(&out) };
    let i: CacheInfo = cache.info();
    assert_eq!((i.object_size, i.align), (40, 8));
    assert!(i.stride >= 40 && i.slab_bytes >= 4096 && i.objects_per_slab > 0);
    assert!(i.leftover_bytes < i.slab_bytes);
    assert!(matches!(
        i.meta,
        MetaPlacement::None
            | MetaPlacement::Leftover
            | MetaPlacement::Padding
            | MetaPlacement::External
    ));
}
