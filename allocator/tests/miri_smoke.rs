//! A small tour of the allocator sized for Miri (scripts/verify.sh runs it under
//! `cargo +nightly miri test`; it also runs, in milliseconds, with the normal tests). The
//! allocator is this binary's global allocator, so the test harness, threads, channels and
//! the accounting's own allocations all go through it too; the tests call it directly where
//! they want a particular path. Every test ends with its blocks freed and checks tenants
//! that are back to zero.
//!
//! Covered: size classes on one thread (bin refill, bin overflow to the transfer cache,
//! flush to slabs), on two threads (remote frees, thread exit flushing a bin), realloc
//! within a class, across classes and into and out of large allocations, large allocations
//! (page-aligned, over-aligned, zeroed, cached and reused, shrunk and grown), a dedicated
//! cache (single and bulk), and accounted allocations inside a tenant scope (size classes,
//! large, dedicated), freed on the allocating thread and on another, with a drain of every
//! stock.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;
use std::thread;

use slabcg_accounting::{drain_all_stocks, Tenant};
use slabcg_allocator::{Cache, SlabAlloc};

#[path = "common/pattern.rs"]
mod pattern;
use pattern::{check, fill};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// Blocks handed between threads (raw pointers are not `Send`).
struct Blocks(Vec<(usize, Layout)>);

/// Bytes of a block worth filling and checking: the first and last 64 (the interpreter is
/// slow; the ends are where an overlap would show).
fn ends(p: *mut u8, size: usize, seed: u8, write: bool) {
    let head = size.min(64);
    let tail = size.saturating_sub(64).max(head);
    for (off, n) in [(0, head), (tail, size - tail)] {
        // SAFETY: off + n <= size.
        let q = unsafe { p.add(off) };
        if write {
            fill(q, n, seed);
        } else {
            check(q, n, seed);
        }
    }
}

fn alloc_filled(l: Layout, seed: u8) -> *mut u8 {
    // SAFETY: every layout used here has a non-zero size.
    let p = unsafe { GLOBAL.alloc(l) };
    assert!(!p.is_null());
    assert_eq!(p as usize % l.align(), 0);
    ends(p, l.size(), seed, true);
    p
}

fn free_checked(p: *mut u8, l: Layout, seed: u8) {
    ends(p, l.size(), seed, false);
    // SAFETY: p was allocated with l and is freed once.
    unsafe { GLOBAL.dealloc(p, l) };
}

/// More blocks of one class than a thread bin holds (256 of 16 bytes): refills, then frees
/// that overflow the bin into the transfer cache and the slabs; then a few classes up to
/// 128 KiB, and 16- and 64-byte alignments (the out-of-line class path).
#[test]
fn size_classes_one_thread() {
    let l = Layout::from_size_align(16, 8).unwrap();
    let ps: Vec<*mut u8> = (0..300).map(|i| alloc_filled(l, i as u8)).collect();
    for (i, &p) in ps.iter().enumerate().rev() {
        free_checked(p, l, i as u8);
    }
    for (size, align) in [
        (1, 1),
        (24, 8),
        (100, 4),
        (1000, 8),
        (5000, 8),
        (40_000, 8),
        (128 * 1024, 8),
        (48, 16),
        (200, 64),
    ] {
        let l = Layout::from_size_align(size, align).unwrap();
        let ps: Vec<*mut u8> = (0..3).map(|i| alloc_filled(l, i)).collect();
        for (i, p) in ps.into_iter().enumerate() {
            free_checked(p, l, i as u8);
        }
    }
}

/// Two threads allocate and hand blocks to each other: each frees the other's blocks
/// (remote frees land in the freeing thread's bin), and the spawned thread exits with a
/// bin holding the main thread's blocks (flushed by the thread-exit hook).
#[test]
fn size_classes_two_threads() {
    let layouts = [
        Layout::from_size_align(8, 8).unwrap(),
        Layout::from_size_align(72, 8).unwrap(),
        Layout::from_size_align(3000, 8).unwrap(),
    ];
    let (to_worker, worker_rx) = mpsc::channel::<Blocks>();
    let (to_main, main_rx) = mpsc::channel::<Blocks>();
    let worker = thread::spawn(move || {
        let mine: Vec<(usize, Layout)> = (0..40)
            .map(|i| {
                let l = layouts[i % layouts.len()];
                (alloc_filled(l, 100 + i as u8) as usize, l)
            })
            .collect();
        to_main.send(Blocks(mine)).unwrap();
        let theirs = worker_rx.recv().unwrap();
        for (i, &(p, l)) in theirs.0.iter().enumerate() {
            free_checked(p as *mut u8, l, i as u8);
        }
    });
    let mine: Vec<(usize, Layout)> = (0..40)
        .map(|i| {
            let l = layouts[i % layouts.len()];
            (alloc_filled(l, i as u8) as usize, l)
        })
        .collect();
    to_worker.send(Blocks(mine)).unwrap();
    let theirs = main_rx.recv().unwrap();
    for (i, &(p, l)) in theirs.0.iter().enumerate() {
        free_checked(p as *mut u8, l, 100 + i as u8);
    }
    worker.join().unwrap();
    // The worker's exit flushed its bins: those slots are reusable from here.
    let again: Vec<*mut u8> = (0..40).map(|i| alloc_filled(layouts[0], i)).collect();
    for (i, p) in again.into_iter().enumerate() {
        free_checked(p, layouts[0], i as u8);
    }
}

/// realloc keeps the contents within a class, across classes, into a large allocation,
/// between large sizes (growing moves the block: no mremap under Miri; shrinking unmaps
/// the tail) and back down into a class.
#[test]
fn realloc_through_every_category() {
    let mut l = Layout::from_size_align(10, 8).unwrap();
    let mut p = alloc_filled(l, 7);
    for new_size in [12, 300, 9000, 200_000, 400_000, 150_000, 100_000, 40, 10] {
        let keep = l.size().min(new_size).min(64);
        // SAFETY: p is live with layout l; new_size is non-zero.
        let q = unsafe { GLOBAL.realloc(p, l, new_size) };
        assert!(!q.is_null(), "realloc to {new_size}");
        check(q, keep, 7);
        l = Layout::from_size_align(new_size, 8).unwrap();
        fill(q, l.size().min(64), 7);
        p = q;
    }
    free_checked(p, l, 7);
}

/// Large allocations: page-aligned ones (freed into the mapping cache and reused, cut from a
/// bigger cached mapping), an over-aligned one (cut out of a bigger mapping), a zeroed one,
/// and the usable size.
#[test]
fn large_allocations() {
    let l = Layout::from_size_align(300_000, 8).unwrap();
    let p = alloc_filled(l, 1);
    // SAFETY: p is a live allocation of SlabAlloc.
    assert!(unsafe { SlabAlloc::usable_size(p) } >= l.size());
    free_checked(p, l, 1);
    // Reuses (part of) the cached mapping.
    let small = Layout::from_size_align(140_000, 8).unwrap();
    let q = alloc_filled(small, 2);
    free_checked(q, small, 2);

    let aligned = Layout::from_size_align(20_000, 64 * 1024).unwrap();
    let a = alloc_filled(aligned, 3);
    free_checked(a, aligned, 3);

    let zl = Layout::from_size_align(200_000, 8).unwrap();
    // SAFETY: a valid non-zero layout, freed below with it.
    let z = unsafe { GLOBAL.alloc_zeroed(zl) };
    assert!(!z.is_null());
    for off in [0, 4095, 4096, 100_000, 199_999] {
        // SAFETY: off < 200_000.
        assert_eq!(unsafe { *z.add(off) }, 0);
    }
    // SAFETY: allocated above with zl.
    unsafe { GLOBAL.dealloc(z, zl) };
    slabcg_allocator::trim();
}

/// A dedicated cache: single and bulk allocation and freeing, unaccounted.
#[test]
fn dedicated_cache_single_and_bulk() {
    let cache = Cache::builder("miri-plain", Layout::new::<[u64; 37]>()).build();
    let size = cache.info().object_size;
    let one = cache.alloc().unwrap();
    fill(one.as_ptr(), size, 9);
    let mut many = [std::ptr::null_mut(); 20];
    assert_eq!(cache.alloc_bulk(&mut many), 20);
    for (i, &p) in many.iter().enumerate() {
        fill(p, 16, i as u8);
    }
    assert_eq!(cache.live_objects(), 21);
    for (i, &p) in many.iter().enumerate() {
        check(p, 16, i as u8);
    }
    check(one.as_ptr(), size, 9);
    // SAFETY: every pointer came from this cache and is freed once.
    unsafe {
        cache.free_bulk(&many);
        cache.free(one);
    }
    assert_eq!(cache.live_objects(), 0);
}

/// Accounted allocations inside a tenant scope: size classes (one freed in the scope, kept in
/// the object stock; others freed on another thread, uncharged there), a large allocation, an
/// accounted dedicated cache's objects; a drain of every stock, after which the tenant's
/// exact usage is what it still holds, then zero.
/// Reallocates a fresh block of `from` down to `to` and checks the kept bytes.
fn shrink_keeps(from: Layout, to: Layout, seed: u8) {
    // SAFETY: both layouts have a non-zero size, `to` is smaller; each block is used within
    // its size and freed once with its layout.
    unsafe {
        let p = GLOBAL.alloc(from);
        assert!(!p.is_null());
        std::ptr::write_bytes(p, seed, to.size());
        let q = GLOBAL.realloc(p, from, to.size());
        assert!(!q.is_null());
        assert!(std::slice::from_raw_parts(q, to.size())
            .iter()
            .all(|&b| b == seed));
        GLOBAL.dealloc(q, to);
    }
}

#[test]
fn accounted_allocations_in_a_tenant() {
    let tenant = Tenant::new("miri");
    let small = Layout::from_size_align(48, 8).unwrap();
    let mid = Layout::from_size_align(2000, 8).unwrap();
    let big = Layout::from_size_align(100_000, 8).unwrap();
    let cache = Cache::builder("miri-acct", Layout::new::<[u8; 600]>())
        .account(true)
        .build();
    let (blocks, objs) = {
        let _scope = tenant.enter();
        // Same tenant, same thread: the free keeps the slot charged in the object stock and
        // the next allocation takes it back.
        let a = alloc_filled(small, 1);
        free_checked(a, small, 1);
        let b = alloc_filled(small, 2);
        assert_eq!(a, b, "the object stock hands the same slot back");
        let mut blocks = vec![(b as usize, small)];
        for i in 0..10 {
            blocks.push((alloc_filled(mid, 10 + i) as usize, mid));
        }
        blocks.push((alloc_filled(big, 30) as usize, big));
        // A shrink into a smaller class of the tenant's own block moves its charge with it,
        // from a class (`realloc_shrink_small`) and from a large block (`..._large`).
        shrink_keeps(mid, small, 0x5A);
        shrink_keeps(Layout::from_size_align(200_000, 8).unwrap(), small, 0x3C);
        let mut objs = [std::ptr::null_mut(); 4];
        assert_eq!(cache.alloc_bulk(&mut objs), 4);
        let one = cache.alloc().unwrap();
        (blocks, (objs, one))
    };
    assert!(tenant.current_exact() >= (100_000 + 10 * 2000 + 48 + 5 * 600) as u64);

    // Frees on another thread uncharge the recorded owner there.
    let blocks = Blocks(blocks);
    thread::spawn(move || {
        let seeds = [2].into_iter().chain(10..20).chain([30]);
        for (&(p, l), seed) in blocks.0.iter().zip(seeds) {
            free_checked(p as *mut u8, l, seed);
        }
    })
    .join()
    .unwrap();
    drain_all_stocks();
    let obj = cache.info().object_size as u64;
    assert_eq!(tenant.current_exact(), 5 * obj);

    let (objs, one) = objs;
    // SAFETY: from this cache, each freed once.
    unsafe {
        cache.free_bulk(&objs);
        cache.free(one);
    }
    drain_all_stocks();
    assert_eq!(tenant.current_exact(), 0);
}
