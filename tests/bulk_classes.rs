//! Bulk allocation for the size classes (`slabcg::alloc_bulk` / `free_bulk`) and the run
//! charging both bulk paths share (seed 000 and its review): all or nothing at a tenant's
//! limit, also when only a later run is refused, byte counts past 32 bits, a bulk of
//! 300,000, and bulk and single frees mixed across threads with exact accounting after the
//! stocks are drained.

use std::alloc::Layout;
use std::collections::HashSet;
use std::sync::Mutex;

use slabcg::allocator::{class_for, class_size};
use slabcg::{alloc_bulk, drain_all_stocks, free_bulk, stats, Cache, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn class_bytes(l: Layout) -> u64 {
    class_size(class_for(l.size(), l.align()).unwrap()) as u64
}

/// Objects of `l`'s class held by the program (both of its caches).
fn class_objects(l: Layout) -> usize {
    stats().classes[class_for(l.size(), l.align()).unwrap()].objects
}

#[test]
fn a_refused_bulk_charges_and_allocates_nothing() {
    let l = Layout::from_size_align(1000, 8).unwrap();
    let each = class_bytes(l);
    let t = Tenant::new("bulk-limit");
    t.set_max(256 << 10);
    let mut out = vec![std::ptr::null_mut(); 1000];
    let n = {
        let _g = t.enter();
        alloc_bulk(l, &mut out)
    };
    assert_eq!(n, 0, "a bulk over the limit succeeded");
    assert!(out.iter().all(|p| p.is_null()));
    assert_eq!(t.current_exact(), 0, "the refused bulk left a charge");
    assert!(t.events().max >= 1);
    // What fits goes through, charged exactly its class size each.
    let mut fit = vec![std::ptr::null_mut(); 100];
    let n = {
        let _g = t.enter();
        alloc_bulk(l, &mut fit)
    };
    assert_eq!(n, 100);
    assert_eq!(t.current_exact(), 100 * each);
    let report = t.stat().to_string();
    assert!(
        report.contains(&format!("slab_{each} {}", 100 * each)),
        "{report}"
    );
    // SAFETY: the blocks came from alloc_bulk with l, each freed once.
    unsafe { free_bulk(l, &fit) };
    assert_eq!(t.current_exact(), 0);
}

/// A bulk whose bytes need several runs (1 GiB each) and more than 32 bits: the runs before
/// the refused one are uncharged, and the byte count never wraps (a wrapped 32-bit count of
/// 40,000 x 128 KiB would be a small charge that fits the limit).
#[test]
fn a_bulk_refused_on_a_later_run_uncharges_the_runs_before_it() {
    let l = Layout::from_size_align(128 << 10, 8).unwrap();
    assert_eq!(class_bytes(l), 128 << 10);
    let t = Tenant::new("bulk-runs");
    for (count, max) in [(16_384usize, 3u64 << 29), (40_000, 4 << 30)] {
        t.set_max(max);
        let mut out = vec![std::ptr::null_mut(); count];
        // After `out`, which may itself be a 128 KiB block.
        let objects = class_objects(l);
        let events = t.events().max;
        let n = {
            let _g = t.enter();
            alloc_bulk(l, &mut out)
        };
        assert_eq!(n, 0, "{count} x 128 KiB under a max of {max}");
        assert!(out.iter().all(|p| p.is_null()));
        assert_eq!(t.current_exact(), 0, "{count}: charged runs were kept");
        assert!(t.peak() <= max);
        assert_eq!(t.events().max, events + 1, "{count}: one refusal");
        assert_eq!(class_objects(l), objects, "{count}: objects were taken");
    }
    // The same count that wraps a 32-bit byte count fits a dedicated cache's math too.
    let c = Cache::builder("bulk-runs", Layout::from_size_align(128 << 10, 8).unwrap())
        .account(true)
        .build();
    let mut out = vec![std::ptr::null_mut(); 40_000];
    let n = {
        let _g = t.enter();
        c.alloc_bulk(&mut out)
    };
    assert_eq!(n, 0);
    assert_eq!(t.current_exact(), 0);
    assert_eq!(c.live_objects(), 0);
}

#[test]
fn a_bulk_of_300000() {
    let l = Layout::from_size_align(64, 8).unwrap();
    let each = class_bytes(l);
    let t = Tenant::new("bulk-300k");
    let mut out = vec![std::ptr::null_mut(); 300_000];
    let n = {
        let _g = t.enter();
        alloc_bulk(l, &mut out)
    };
    assert_eq!(n, 300_000);
    let distinct: HashSet<usize> = out.iter().map(|&p| p as usize).collect();
    assert_eq!(distinct.len(), 300_000, "a block was handed out twice");
    for &p in &out {
        assert!(!p.is_null() && (p as usize).is_multiple_of(8));
        // SAFETY: each block has 64 writable bytes.
        unsafe { std::ptr::write_bytes(p, 0x5a, 64) };
    }
    assert_eq!(t.current_exact(), 300_000 * each);
    // Freed from another scope: the owner words say whom to uncharge.
    let other = Tenant::new("bulk-300k-other");
    {
        let _g = other.enter();
        // SAFETY: the blocks came from alloc_bulk with l, each freed once.
        unsafe { free_bulk(l, &out) };
    }
    assert_eq!(t.current_exact(), 0);
    assert_eq!(other.current_exact(), 0);

    // Outside any scope, and from a dedicated cache.
    assert_eq!(alloc_bulk(l, &mut out), 300_000);
    assert_eq!(t.current_exact(), 0);
    // SAFETY: as above.
    unsafe { free_bulk(l, &out) };
    let c = Cache::builder("bulk-300k", l).account(true).build();
    let n = {
        let _g = t.enter();
        c.alloc_bulk(&mut out)
    };
    assert_eq!(n, 300_000);
    assert_eq!(c.live_objects(), 300_000);
    assert_eq!(t.current_exact(), 300_000 * c.info().object_size as u64);
    // SAFETY: the objects came from c's alloc_bulk, each freed once.
    unsafe { c.free_bulk(&out) };
    assert_eq!(c.live_objects(), 0);
    assert_eq!(t.current_exact(), 0);
}

/// Producers allocate in bulk inside tenant `a`; consumers on other threads, inside tenant
/// `b` or in no scope, free them one by one with `dealloc` and in bulk with `free_bulk`,
/// mixed with their own single allocations freed in bulk. After the stocks are drained
/// every tenant is back to exactly zero, and at the midpoint `a` holds exactly what it
/// allocated.
#[test]
fn bulk_and_single_frees_mixed_across_threads_account_exactly() {
    let layouts = [
        Layout::from_size_align(24, 8).unwrap(),
        Layout::from_size_align(200, 8).unwrap(),
        Layout::from_size_align(3000, 8).unwrap(),
        Layout::from_size_align(512, 64).unwrap(),
    ];
    let a = Tenant::new("bulk-mixed-a");
    let b = Tenant::new("bulk-mixed-b");
    let batches: Mutex<Vec<(usize, Vec<usize>)>> = Mutex::new(Vec::new());
    let per_thread = 200;
    std::thread::scope(|s| {
        for id in 0..4usize {
            let (a, batches) = (&a, &batches);
            s.spawn(move || {
                for round in 0..per_thread {
                    let k = (id + round) % layouts.len();
                    let mut out = vec![std::ptr::null_mut(); 1 + (round * 7 + id) % 64];
                    let g = a.enter();
                    assert_eq!(alloc_bulk(layouts[k], &mut out), out.len());
                    drop(g);
                    let addrs = out.iter().map(|&p| p as usize).collect();
                    batches.lock().unwrap().push((k, addrs));
                }
            });
        }
    });
    let batches = batches.into_inner().unwrap();
    let expected: u64 = batches
        .iter()
        .map(|(k, v)| v.len() as u64 * class_bytes(layouts[*k]))
        .sum();
    assert_eq!(a.current_exact(), expected);

    let queue = Mutex::new(batches);
    std::thread::scope(|s| {
        // Joined explicitly: the scope's own end does not wait for the threads' exit hooks,
        // which give back what their object stocks kept charged to b.
        let mut freers = Vec::new();
        for id in 0..3usize {
            let (b, queue) = (&b, &queue);
            freers.push(s.spawn(move || {
                let _g = (id != 0).then(|| b.enter());
                let mut own: Vec<Vec<*mut u8>> = vec![Vec::new(); layouts.len()];
                let mut i = 0usize;
                loop {
                    let next = queue.lock().unwrap().pop();
                    let Some((k, addrs)) = next else { break };
                    let l = layouts[k];
                    let ptrs: Vec<*mut u8> = addrs.iter().map(|&p| p as *mut u8).collect();
                    let half = if i.is_multiple_of(3) {
                        0
                    } else {
                        ptrs.len() / 2
                    };
                    for &p in &ptrs[..half] {
                        // SAFETY: p came from alloc_bulk with l, freed once.
                        unsafe { std::alloc::dealloc(p, l) };
                    }
                    // SAFETY: as above.
                    unsafe { free_bulk(l, &ptrs[half..]) };
                    // Our own single allocations (charged to b, or to nobody), freed in bulk.
                    // SAFETY: l has a non-zero size.
                    own[k].push(unsafe { std::alloc::alloc(l) });
                    if own[k].len() == 16 {
                        // SAFETY: allocated with l just above, each freed once.
                        unsafe { free_bulk(l, &own[k]) };
                        own[k].clear();
                    }
                    i += 1;
                }
                for (k, rest) in own.iter().enumerate() {
                    // SAFETY: allocated with layouts[k], each freed once.
                    unsafe { free_bulk(layouts[k], rest) };
                }
            }));
        }
        for f in freers {
            f.join().unwrap();
        }
    });
    drain_all_stocks();
    assert_eq!(a.current_exact(), 0, "a: bulk objects left charged");
    assert_eq!(b.current_exact(), 0, "b: objects left charged");
}

/// One `free_bulk` of blocks of several owners, interleaved: each stretch of one owner is
/// uncharged from that owner.
#[test]
fn one_free_bulk_uncharges_each_owner() {
    let l = Layout::from_size_align(48, 8).unwrap();
    let each = class_bytes(l);
    let tenants = [Tenant::new("bulk-owner-1"), Tenant::new("bulk-owner-2")];
    let mut all = Vec::with_capacity(120);
    for round in 0..12 {
        let t = &tenants[round % 2];
        let mut out = [std::ptr::null_mut(); 5];
        let _g = t.enter();
        assert_eq!(alloc_bulk(l, &mut out), 5);
        // SAFETY: l has a non-zero size.
        let single = unsafe { std::alloc::alloc(l) };
        all.extend_from_slice(&out);
        all.push(single);
    }
    for t in &tenants {
        assert_eq!(t.current_exact(), 36 * each);
    }
    // SAFETY: every block was allocated with l (in bulk or singly), each freed once.
    unsafe { free_bulk(l, &all) };
    for t in &tenants {
        assert_eq!(t.current_exact(), 0, "{}", t.name());
    }
}

/// Slots in this thread's bin of uncharged accounted slots of `l`'s class (a free that
/// uncharges pushes there; one kept charged in the object stock does not).
fn uncharged_in_bin(l: Layout) -> u32 {
    let c = class_for(l.size(), l.align()).unwrap();
    slabcg::allocator::testing::thread_cache::with(|tc| {
        tc.bin(c, slabcg::allocator::testing::Kind::Accounted)
            .count()
    })
}

#[test]
fn a_tenant_bulk_reuses_the_objects_its_bulk_free_kept_charged() {
    let l = Layout::from_size_align(256, 8).unwrap();
    let each = class_bytes(l);
    // Its own thread: the thread's object stock is tagged only by this test's tenant.
    std::thread::spawn(move || {
        let t = Tenant::new("bulk-kept");
        let g = t.enter();
        let mut out = [std::ptr::null_mut(); 32];
        // A few rounds so the thread's object stock is tagged for t (retag after a miss).
        for _ in 0..4 {
            assert_eq!(alloc_bulk(l, &mut out), 32);
            // SAFETY: every block came from alloc_bulk with l, each freed once.
            unsafe { free_bulk(l, &out) };
        }
        let uncharged = uncharged_in_bin(l);
        assert_eq!(alloc_bulk(l, &mut out), 32);
        // Sorted copies on the stack: nothing allocated in t's scope besides the objects.
        let mut first = out;
        first.sort();
        // SAFETY: as above.
        unsafe { free_bulk(l, &out) };
        // The free kept all 32 charged (the uncharged bin did not grow) ...
        assert_eq!(
            uncharged_in_bin(l),
            uncharged,
            "free_bulk did not keep the objects"
        );
        assert!(t.current() >= 32 * each);
        // ... and the next bulk takes the same ones back without touching that bin.
        assert_eq!(alloc_bulk(l, &mut out), 32);
        let mut again = out;
        again.sort();
        assert_eq!(again, first);
        assert_eq!(uncharged_in_bin(l), uncharged);
        assert_eq!(t.current_exact(), 32 * each);
        // A drain uncharges the kept objects in place; the frees after it account exactly.
        // SAFETY: as above.
        unsafe { free_bulk(l, &out) };
        drain_all_stocks();
        assert_eq!(t.current_exact(), 0);
        assert_eq!(alloc_bulk(l, &mut out), 32);
        assert_eq!(t.current_exact(), 32 * each);
        // SAFETY: as above.
        unsafe { free_bulk(l, &out) };
        drop(g);
        assert_eq!(t.current_exact(), 0);
    })
    .join()
    .unwrap();
}

/// A size class's `free_bulk` skips null entries wherever they are (first, at odd and even
/// places inside a run the keep loop takes two at a time, last), inside a tenant (where the
/// slots are kept charged) and outside: every object is freed once and nothing stays charged.
#[test]
fn null_entries_are_skipped_anywhere_in_a_bulk_free() {
    let l = Layout::from_size_align(200, 8).unwrap();
    let t = Tenant::new("bulk-nulls");
    for in_tenant in [true, false] {
        let _g = in_tenant.then(|| t.enter());
        let before = class_objects(l);
        let mut out = vec![std::ptr::null_mut(); 9];
        assert_eq!(alloc_bulk(l, &mut out), 9);
        let mut ptrs = Vec::new();
        for (i, &p) in out.iter().enumerate() {
            if i == 0 || i == 3 || i == 6 {
                ptrs.push(std::ptr::null_mut());
            }
            ptrs.push(p);
        }
        ptrs.push(std::ptr::null_mut());
        assert_eq!(ptrs.len(), 13);
        // SAFETY: every non-null entry came from alloc_bulk with l, once.
        unsafe { free_bulk(l, &ptrs) };
        // The two vectors were charged too.
        drop((out, ptrs));
        drop(_g);
        drain_all_stocks();
        assert_eq!(class_objects(l), before, "in a tenant: {in_tenant}");
        assert_eq!(t.current_exact(), 0, "in a tenant: {in_tenant}");
    }
}
