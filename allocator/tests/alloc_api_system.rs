//! `TenantAlloc`, the size classes' bulk calls and typed caches in a program whose global
//! allocator is the system's, not slabcg: they allocate from slabcg directly, so the tenant
//! is charged and uncharged all the same, and std's own allocations never reach slabcg.

use std::alloc::Layout;

use allocator_api2::vec::Vec as AVec;
use slabcg_accounting::Tenant;
use slabcg_allocator::{alloc_bulk, free_bulk, SlabAlloc, TenantAlloc, TypedCache};

#[test]
fn tenant_alloc_charges_without_slabcg_as_the_global_allocator() {
    let t = Tenant::new("system-global");
    let mut v: AVec<u32, TenantAlloc> = AVec::new_in(TenantAlloc::new(&t));
    v.extend(0..10_000);
    // SAFETY: v's buffer is a live slabcg block.
    let usable = unsafe { SlabAlloc::usable_size(v.as_ptr().cast()) } as u64;
    assert_eq!(t.current_exact(), usable);
    // std's Vec inside the scope goes to the system allocator: not charged.
    let plain: Vec<u64> = {
        let _g = t.enter();
        (0..10_000).collect()
    };
    assert_eq!(t.current_exact(), usable);
    drop((v, plain));
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn bulk_and_typed_caches_without_slabcg_as_the_global_allocator() {
    let t = Tenant::new("system-bulk");
    let l = Layout::from_size_align(96, 8).unwrap();
    let mut out = vec![std::ptr::null_mut(); 64];
    let n = {
        let _g = t.enter();
        alloc_bulk(l, &mut out)
    };
    assert_eq!(n, 64);
    assert_eq!(t.current_exact(), 64 * 96);
    // SAFETY: the blocks came from alloc_bulk with l, each freed once.
    unsafe { free_bulk(l, &out) };
    assert_eq!(t.current_exact(), 0);

    let c: TypedCache<[u64; 10]> = TypedCache::new("system-typed", true);
    let b = {
        let _g = t.enter();
        c.alloc([3; 10]).ok().unwrap()
    };
    assert_eq!(t.current_exact(), c.cache().info().object_size as u64);
    assert_eq!(b.iter().sum::<u64>(), 30);
    drop(b);
    assert_eq!(t.current_exact(), 0);
}
