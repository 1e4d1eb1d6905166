//! Undo paths after a refused mapping: each test has the OS layer refuse a mapping
//! (`sys::fault`, unit tests only) at one place the allocator maps, and checks that the call
//! reports the failure and leaves nothing behind: no mapping kept (the thread's net mapped
//! bytes), no charge kept (the tenant's `current_exact`), no object counted, the block or
//! cache still usable afterwards.
//!
//! The places: a new segment (`Segment::create`, for size classes and dedicated caches
//! alike, from `SlabCache::new_slab`), a large allocation's fresh mapping (below 2 MiB `map`,
//! from 2 MiB `map_aligned`, over-aligned `map` then trimmed), the growth of a cached
//! mapping (`large::take_cached`'s gather, which maps the new extent first), and the growth of a large block
//! (`large::realloc`'s `remap`, and `GlobalAlloc::realloc`'s fallback after it).

use core::alloc::{GlobalAlloc, Layout};
use std::sync::{Mutex, MutexGuard};

use slabcg_accounting::Tenant;

use crate::dedicated::Cache;
use crate::global::SlabAlloc;
use crate::sys::fault;

static A: SlabAlloc = SlabAlloc::new();

/// One fault test at a time: they read the large-mapping cache and the thread's mappings.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with the mappings after the first `skip` refused, `count` of them; returns what
/// `f` returned and how many mappings were refused.
fn refusing<R>(skip: u32, count: u32, f: impl FnOnce() -> R) -> (R, u32) {
    fault::fail_after(skip, count);
    let r = f();
    (r, fault::clear())
}

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// Bytes a large block of `size` maps (its header page and its page-rounded size).
fn large_len(size: usize) -> isize {
    crate::large::extent_for(crate::large::usable_for(size).unwrap()) as isize
}

#[test]
fn a_refused_segment_fails_the_allocation_and_leaves_the_cache_empty() {
    let _s = serial();
    for account in [false, true] {
        let name = if account {
            "fault-seg-acc"
        } else {
            "fault-seg"
        };
        let c = Cache::builder(name, layout(1000, 8))
            .account(account)
            .build();
        let net = fault::net_mapped();
        let (got, refused) = refusing(0, 1, || c.alloc());
        assert!(got.is_none(), "an allocation without a segment succeeded");
        assert_eq!(
            refused, 1,
            "the first allocation of a new cache maps a segment"
        );
        assert_eq!(fault::net_mapped(), net, "a refused segment left a mapping");
        assert_eq!(c.live_objects(), 0);

        let mut out = [core::ptr::null_mut(); 8];
        let (n, refused) = refusing(0, u32::MAX, || c.alloc_bulk(&mut out));
        assert_eq!(n, 0, "a bulk allocation without a segment succeeded");
        assert!(refused >= 1);
        assert_eq!(fault::net_mapped(), net);
        assert_eq!(c.live_objects(), 0);

        // The cache works once the OS gives memory again, and its lists are sound.
        let p = c.alloc().expect("the allocation after the refusal");
        assert_eq!(c.live_objects(), 1);
        assert_eq!(
            fault::net_mapped(),
            net + (crate::segment::SEGMENT + crate::segment::GUARD) as isize
        );
        // SAFETY: p is a live object of c, freed once.
        unsafe { c.free(p) };
        let n = c.alloc_bulk(&mut out);
        assert_eq!(n, out.len());
        // SAFETY: the objects just allocated from c, freed once.
        unsafe { c.free_bulk(&out) };
        assert_eq!(c.live_objects(), 0);
    }
}

#[test]
fn a_refused_large_mapping_returns_null_and_keeps_no_charge() {
    let _s = serial();
    let t = Tenant::new("fault-large");
    let _g = t.enter();
    // Below 2 MiB (`map`), from 2 MiB on (`map_aligned`), over-aligned (`map`, trimmed).
    // Zeroed, so that no cached mapping can serve them.
    let big = if cfg!(miri) { 2 << 20 } else { 4 << 20 };
    for l in [
        layout(256 << 10, 8),
        layout(big, 8),
        layout(256 << 10, 64 << 10),
    ] {
        let charged = t.current_exact();
        let net = fault::net_mapped();
        // SAFETY: l has a non-zero size.
        let (p, refused) = refusing(0, 1, || unsafe { A.alloc_zeroed(l) });
        assert!(
            p.is_null(),
            "{l:?}: an allocation without its mapping succeeded"
        );
        assert_eq!(refused, 1, "{l:?}");
        assert_eq!(t.current_exact(), charged, "{l:?}: the charge stayed");
        assert_eq!(fault::net_mapped(), net, "{l:?}: a mapping stayed");

        // SAFETY: as above.
        let p = unsafe { A.alloc_zeroed(l) };
        assert!(
            !p.is_null() && (p as usize).is_multiple_of(l.align()),
            "{l:?}"
        );
        // SAFETY: p is live, with at least l.size() writable bytes.
        let usable = unsafe {
            *p.add(l.size() - 1) = 1;
            SlabAlloc::usable_size(p)
        };
        assert_eq!(t.current_exact(), charged + usable as u64, "{l:?}");
        // SAFETY: p was allocated with l, freed once.
        unsafe { A.dealloc(p, l) };
        assert_eq!(t.current_exact(), charged, "{l:?}");
    }
}

#[test]
fn a_refused_remap_leaves_the_large_block_as_it_was() {
    let _s = serial();
    let t = Tenant::new("fault-remap");
    let _g = t.enter();
    let l = layout(256 << 10, 8);
    // SAFETY: l has a non-zero size.
    let p = unsafe { A.alloc_zeroed(l) };
    assert!(!p.is_null());
    // SAFETY: p has l.size() writable bytes.
    unsafe { core::ptr::write_bytes(p, 0x5a, l.size()) };
    let charged = t.current_exact();
    let net = fault::net_mapped();
    // SAFETY: p is live.
    let usable = unsafe { SlabAlloc::usable_size(p) };

    // The growth itself (the charge goes first, and must be given back).
    // SAFETY: p is a live large block aligned to 8.
    let (r, refused) = refusing(0, 1, || unsafe { crate::charge::realloc_large(p, 1 << 20) });
    assert!(matches!(r, crate::charge::LargeResize::Failed));
    assert_eq!(refused, 1);
    assert_eq!(t.current_exact(), charged, "the growth's charge stayed");
    assert_eq!(fault::net_mapped(), net);
    // SAFETY: p is still live, unchanged.
    unsafe {
        assert_eq!(SlabAlloc::usable_size(p), usable);
        assert!((0..l.size()).all(|i| *p.add(i) == 0x5a));
    }

    // Through `GlobalAlloc::realloc`, with its fallback refused too: null, the block kept.
    // (No cached mapping may serve the fallback either.)
    crate::stats::trim();
    // SAFETY: p was allocated with l.
    let (q, refused) = refusing(0, u32::MAX, || unsafe { A.realloc(p, l, 1 << 20) });
    assert!(q.is_null(), "a growth without mappings succeeded");
    assert!(refused >= 1);
    assert_eq!(t.current_exact(), charged);
    // SAFETY: as above.
    unsafe {
        assert_eq!(SlabAlloc::usable_size(p), usable);
        assert!((0..l.size()).all(|i| *p.add(i) == 0x5a));
    }

    // Only the remap refused: the fallback moves the block.
    // SAFETY: as above.
    let (q, refused) = refusing(0, 1, || unsafe { A.realloc(p, l, 1 << 20) });
    assert!(!q.is_null(), "the fallback after a refused remap failed");
    assert_eq!(refused, 1);
    // SAFETY: q is live with at least 1 MiB; it holds p's bytes.
    unsafe {
        assert!((0..l.size()).all(|i| *q.add(i) == 0x5a));
        // A block whose old address were still marked dead would abort here.
        A.dealloc(q, layout(1 << 20, 8));
    }
    assert_eq!(t.current_exact(), charged - usable as u64);
}

// Miri has no `mremap`, so there the mapping cache never gathers cached mappings into a new
// extent: the refusal this test makes would fall on the fresh mapping instead, a case
// `a_refused_large_mapping_returns_null_and_keeps_no_charge` covers.
#[cfg_attr(miri, ignore = "gathering needs mremap, which Miri does not model")]
#[test]
fn a_refused_growth_of_a_cached_mapping_unmaps_it() {
    let _s = serial();
    // Bigger than what the other unit tests free, so that ours is the cache's biggest.
    let (small, big) = (40 << 20, 48 << 20);
    crate::stats::trim();
    let ls = layout(small, 8);
    // SAFETY: a non-zero size; freed once, into the mapping cache.
    unsafe {
        let p = A.alloc_zeroed(ls);
        assert!(!p.is_null());
        A.dealloc(p, ls);
    }
    let net = fault::net_mapped();
    let lb = layout(big, 8);
    // Not zeroed: the cache is asked first; nothing fits, so its mappings are gathered into
    // a new extent, whose mapping is the one refused.
    // SAFETY: a non-zero size.
    let (q, refused) = refusing(0, 1, || unsafe { A.alloc(lb) });
    assert_eq!(refused, 1, "the cached mapping was not gathered");
    assert!(!q.is_null(), "no fresh mapping after the refused growth");
    assert_eq!(
        fault::net_mapped() - net,
        large_len(big) - large_len(small),
        "the cached mapping that could not grow was kept (or lost without unmapping)"
    );
    // SAFETY: q is live with big bytes; allocated with lb, freed once.
    unsafe {
        *q.add(big - 1) = 1;
        A.dealloc(q, lb);
    }
}

/// A bulk that runs out of memory part way (the second segment refused) gives back every
/// object it took and every run it charged: 0, nothing charged, nothing live, the entries
/// it wrote reset; the first segment stays with the cache, which works afterwards. For a
/// dedicated cache and for a size class.
#[test]
fn a_bulk_refused_part_way_gives_back_what_it_took() {
    let _s = serial();
    let t = Tenant::new("fault-bulk");
    let _g = t.enter();

    // 256 KiB objects: a few per segment, so 20 need more than one.
    let c = Cache::builder("fault-bulk", layout(256 << 10, 8))
        .account(true)
        .build();
    let net = fault::net_mapped();
    let mut out = [core::ptr::null_mut(); 20];
    let (n, refused) = refusing(1, u32::MAX, || c.alloc_bulk(&mut out));
    assert_eq!(n, 0, "a bulk without its second segment succeeded");
    assert!(refused >= 1, "the bulk never needed a second segment");
    assert!(
        out.iter().all(|p| p.is_null()),
        "an entry kept a freed object"
    );
    assert_eq!(t.current_exact(), 0, "the bulk's charge stayed");
    assert_eq!(
        c.live_objects(),
        0,
        "objects taken before the refusal stayed live"
    );
    assert_eq!(
        fault::net_mapped(),
        net + (crate::segment::SEGMENT + crate::segment::GUARD) as isize,
        "the first segment is the cache's, nothing else stays mapped"
    );
    assert_eq!(c.alloc_bulk(&mut out), out.len());
    let each = c.info().object_size as u64;
    assert_eq!(t.current_exact(), out.len() as u64 * each);
    // SAFETY: the objects just allocated from c, freed once.
    unsafe { c.free_bulk(&out) };
    assert_eq!(t.current_exact(), 0);
    assert_eq!(c.live_objects(), 0);

    // The largest size class, every mapping refused: what its slabs had free is taken and
    // given back.
    let l = layout(128 << 10, 8);
    let mut out = [core::ptr::null_mut(); if cfg!(miri) { 40 } else { 64 }];
    let net = fault::net_mapped();
    let (n, refused) = refusing(0, u32::MAX, || crate::bulk::alloc_bulk(l, &mut out));
    assert_eq!(n, 0);
    assert!(refused >= 1);
    assert!(out.iter().all(|p| p.is_null()));
    assert_eq!(t.current_exact(), 0, "the size-class bulk's charge stayed");
    assert_eq!(fault::net_mapped(), net);
    assert_eq!(crate::bulk::alloc_bulk(l, &mut out), out.len());
    assert_eq!(t.current_exact(), out.len() as u64 * (128 << 10));
    // SAFETY: the blocks just allocated with l, freed once.
    unsafe { crate::bulk::free_bulk(l, &out) };
    assert_eq!(t.current_exact(), 0);
}
