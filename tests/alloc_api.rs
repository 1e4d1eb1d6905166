//! allocator-api2: collections built with `TenantAlloc::new(&t)` are charged to `t` whatever
//! scope the building thread is in (another tenant's, or none), exactly their blocks' usable
//! sizes, and uncharged when dropped; `&Cache` as an allocator for layouts that fit it.

use std::alloc::Layout;

use allocator_api2::alloc::Allocator;
use allocator_api2::boxed::Box as ABox;
use allocator_api2::vec::Vec as AVec;
use slabcg::{Cache, SlabAlloc, Tenant, TenantAlloc};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// The usable size of a live slabcg block.
fn usable(p: *const u8) -> u64 {
    // SAFETY: callers pass live blocks.
    unsafe { SlabAlloc::usable_size(p) as u64 }
}

#[test]
fn a_vec_is_charged_to_its_tenant_in_any_scope() {
    let t = Tenant::new("api-vec");
    let other = Tenant::new("api-vec-other");
    for in_other in [false, true] {
        let g = in_other.then(|| other.enter());
        let other_before = other.current_exact();
        let mut v: AVec<u64, TenantAlloc> = AVec::new_in(TenantAlloc::new(&t));
        for i in 0..1000 {
            v.push(i);
            if i % 97 == 0 {
                // Every growth moves or resizes the block: the charge follows it.
                assert_eq!(
                    t.current_exact(),
                    usable(v.as_ptr().cast()),
                    "in_other {in_other}, {i}"
                );
            }
        }
        // Past the size classes: a large block.
        v.extend(0..100_000);
        assert_eq!(t.current_exact(), usable(v.as_ptr().cast()));
        assert!(t.current_exact() >= 101_000 * 8);
        // A shrink back into a size class.
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(t.current_exact(), usable(v.as_ptr().cast()));
        assert_eq!(&v[..], &(0..10).collect::<Vec<u64>>()[..]);
        assert_eq!(
            other.current_exact(),
            other_before,
            "the thread's scope was charged"
        );
        drop(v);
        assert_eq!(t.current_exact(), 0, "in_other {in_other}");
        drop(g);
    }
}

#[test]
fn a_hashmap_is_charged_to_its_tenant() {
    let t = Tenant::new("api-map");
    let other = Tenant::new("api-map-other");
    let _g = other.enter();
    let mut m = hashbrown::HashMap::new_in(TenantAlloc::new(&t));
    for i in 0..10_000u64 {
        m.insert(i, i * 3);
    }
    assert!(t.current_exact() >= 10_000 * 16, "{}", t.current_exact());
    assert_eq!(other.current_exact(), 0);
    assert_eq!(m.get(&4242), Some(&12726));
    // Moved to another thread (in no scope) and dropped there.
    std::thread::scope(|s| {
        s.spawn(move || drop(m));
    });
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn a_tenant_at_its_limit_refuses_the_allocator() {
    let t = Tenant::new("api-limit");
    t.set_max(64 << 10);
    let a = TenantAlloc::new(&t);
    let mut v: AVec<u8, TenantAlloc> = AVec::new_in(a.clone());
    assert!(v.try_reserve(1 << 20).is_err(), "1 MiB under a 64 KiB max");
    assert!(v.try_reserve(16 << 10).is_ok());
    assert!(t.current_exact() <= 64 << 10);
    assert!(t.events().max >= 1);
    // The refused growth left the block as it was.
    v.extend_from_slice(&[7; 1000]);
    // SAFETY: v's buffer is a live block of `a` with this layout.
    let r = unsafe {
        a.grow(
            std::ptr::NonNull::new_unchecked(v.as_mut_ptr()),
            Layout::array::<u8>(v.capacity()).unwrap(),
            Layout::from_size_align(1 << 20, 1).unwrap(),
        )
    };
    assert!(r.is_err());
    assert!(v.iter().all(|&x| x == 7));
    drop(v);
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn grow_and_shrink_across_alignments() {
    let t = Tenant::new("api-align");
    let a = TenantAlloc::new(&t);
    let l8 = Layout::from_size_align(100, 8).unwrap();
    let p = a.allocate_zeroed(l8).unwrap().cast::<u8>();
    // SAFETY: p is a fresh block of 100 bytes.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 0x11, 100) };
    let l64 = Layout::from_size_align(300, 64).unwrap();
    // SAFETY: p is a live block of `a` allocated with l8; l64 is larger.
    let q = unsafe { a.grow_zeroed(p, l8, l64) }.unwrap().cast::<u8>();
    assert!((q.as_ptr() as usize).is_multiple_of(64));
    // SAFETY: q has 300 bytes: 100 kept, the rest zeroed.
    unsafe {
        assert!((0..100).all(|i| *q.as_ptr().add(i) == 0x11));
        assert!((100..300).all(|i| *q.as_ptr().add(i) == 0));
    }
    assert_eq!(t.current_exact(), usable(q.as_ptr()));
    let l4k = Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: q is live with l64.
    let r = unsafe { a.grow(q, l64, l4k) }.unwrap().cast::<u8>();
    assert!((r.as_ptr() as usize).is_multiple_of(4096));
    let l16 = Layout::from_size_align(40, 16).unwrap();
    // SAFETY: r is live with l4k.
    let s = unsafe { a.shrink(r, l4k, l16) }.unwrap().cast::<u8>();
    // SAFETY: s keeps the first 40 bytes.
    unsafe { assert!((0..40).all(|i| *s.as_ptr().add(i) == 0x11)) };
    assert_eq!(t.current_exact(), usable(s.as_ptr()));
    // Zero sizes take no memory.
    let z = a.allocate(Layout::from_size_align(0, 32).unwrap()).unwrap();
    assert_eq!(z.len(), 0);
    assert!((z.cast::<u8>().as_ptr() as usize).is_multiple_of(32));
    // SAFETY: s is live with l16; z is a zero-sized block of `a`.
    unsafe {
        a.deallocate(s, l16);
        a.deallocate(z.cast(), Layout::from_size_align(0, 32).unwrap());
    }
    assert_eq!(t.current_exact(), 0);
}

#[test]
fn a_cache_reference_is_an_allocator_for_layouts_that_fit() {
    let c = Cache::builder("api-cache", Layout::from_size_align(256, 16).unwrap())
        .account(true)
        .build();
    let t = Tenant::new("api-cache");
    let each = c.info().object_size as u64;
    let b = {
        let _g = t.enter();
        ABox::new_in([5u64; 32], &c)
    };
    assert_eq!(c.live_objects(), 1);
    assert_eq!(
        t.current_exact(),
        each,
        "charged to the scope it was allocated in"
    );
    assert_eq!(b.iter().sum::<u64>(), 160);
    drop(b);
    assert_eq!(t.current_exact(), 0);
    assert_eq!(c.live_objects(), 0);

    // A Vec grows in place while it fits one object, then is refused.
    let mut v: AVec<u8, &Cache> = AVec::new_in(&c);
    assert!(v.try_reserve_exact(10).is_ok());
    let p = v.as_ptr();
    assert!(v.try_reserve_exact(200).is_ok());
    assert_eq!(v.as_ptr(), p, "a growth within the object moved");
    assert!(v.try_reserve_exact(1000).is_err());
    v.extend_from_slice(&[1; 200]);
    drop(v);
    // Layouts that do not fit.
    let r = (&c).allocate(Layout::from_size_align(257, 8).unwrap());
    assert!(r.is_err());
    let r = (&c).allocate(Layout::from_size_align(64, 64).unwrap());
    assert!(r.is_err());
    assert_eq!(c.live_objects(), 0);
}

/// Zero-sized blocks of `&Cache` are dangling and never reach the cache: allocator-api2's
/// `Box` never allocates a zero-sized value but deallocates its dangling pointer (as does an
/// empty boxed slice). Before, that address went to `Cache::free`: pushed on a plain cache's
/// front bin, whose next pop followed it (SIGSEGV), or reported as a foreign free by an
/// accounted one. From a review.
#[test]
fn zero_sized_cache_blocks_never_reach_the_cache() {
    for accounted in [false, true] {
        let c = Cache::builder("zst", Layout::new::<[u64; 4]>())
            .account(accounted)
            .build();
        // Open this thread's front of the cache (its first allocations take the lock).
        for _ in 0..32 {
            drop(ABox::new_in([1u64; 4], &c));
        }
        let live = c.live_objects();
        drop(ABox::new_in((), &c));
        let v: AVec<u64, &Cache> = AVec::new_in(&c);
        drop(v.into_boxed_slice());
        let z = Layout::from_size_align(0, 8).unwrap();
        let b = (&c).allocate_zeroed(z).unwrap();
        // SAFETY: a block of `z` from this allocator, given back once.
        unsafe { (&c).deallocate(b.cast(), z) };
        assert_eq!(c.live_objects(), live);
        // A block grown from zero size is a real object, and shrinking to zero frees it.
        let one = Layout::new::<u64>();
        // SAFETY: the dangling block of `z` from above's allocator contract; `one` fits.
        let g = unsafe { (&c).grow(std::ptr::NonNull::dangling(), z, one) }.unwrap();
        assert_eq!(c.live_objects(), live + 1);
        // SAFETY: `g` is a live block of `one`.
        unsafe { (&c).shrink(g.cast(), one, z) }.unwrap();
        assert_eq!(c.live_objects(), live);
        // The front still hands out real objects.
        let held: Vec<_> = (0..64u64).map(|i| ABox::new_in([i; 4], &c)).collect();
        assert!(held.iter().all(|b| &**b as *const [u64; 4] as usize > 4096));
    }
}
