//! Memory goes back to the OS, and fork leaves a usable child. These tests run in a child
//! process each, so other tests' allocations do not disturb the RSS figures.

#[path = "common/child.rs"]
mod child;

use child::{is_child, run_child};
use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn trim_returns_a_gigabyte_burst() {
    if !is_child("trim_returns_a_gigabyte_burst") {
        return run_child("trim_returns_a_gigabyte_burst");
    }
    let start = slabcg_allocator::stats().process_rss;
    // 1 GiB of small objects of mixed classes, then free them all.
    let mut v: Vec<Box<[u8]>> = Vec::with_capacity(5_000_000);
    let mut total = 0usize;
    let mut i = 0usize;
    while total < 1 << 30 {
        let size = [48usize, 200, 256, 700, 1000][i % 5];
        v.push(vec![i as u8; size].into_boxed_slice());
        total += size;
        i += 1;
    }
    let peak = slabcg_allocator::stats().process_rss;
    assert!(
        peak > start + (900 << 20),
        "burst not resident? {start} -> {peak}"
    );
    drop(v);
    slabcg_allocator::trim();
    let end = slabcg_allocator::stats().process_rss;
    println!("rss start {start} peak {peak} after trim {end}");
    assert!(
        end < start + (64 << 20),
        "rss start {start} peak {peak} after trim {end}"
    );
    println!("CHILD-OK");
}

#[test]
fn stats_count_what_the_program_holds() {
    if !is_child("stats_count_what_the_program_holds") {
        return run_child("stats_count_what_the_program_holds");
    }
    // 1536-byte objects: a class nothing else in this process uses.
    let c = slabcg_allocator::testing::class_of(1536);
    let held = |s: &slabcg_allocator::AllocStats| s.classes[c].objects;
    let base = held(&slabcg_allocator::stats());
    let v: Vec<Box<[u8; 1536]>> = (0..4000).map(|_| Box::new([7u8; 1536])).collect();
    assert_eq!(held(&slabcg_allocator::stats()), base + 4000);
    // Freed objects sit in thread bins and transfer caches: cached, not held.
    drop(v);
    let s = slabcg_allocator::stats();
    assert_eq!(held(&s), base, "{s}");
    assert!(s.classes[c].cached > 0);
    println!("CHILD-OK");
}

#[test]
fn remote_frees_by_a_new_thread_go_home() {
    if !is_child("remote_frees_by_a_new_thread_go_home") {
        return run_child("remote_frees_by_a_new_thread_go_home");
    }
    use std::alloc::{alloc, dealloc, Layout};
    // Objects handed to new worker threads (cache-scratch): a worker that frees one and then
    // allocates must not get the same object back, or it would write into a cache line that
    // the other workers' objects share.
    let l = Layout::from_size_align(8, 1).unwrap();
    // SAFETY: valid layout; each block is freed once.
    let ps: Vec<usize> = (0..4).map(|_| unsafe { alloc(l) } as usize).collect();
    for &p in &ps {
        let q = std::thread::spawn(move || {
            // SAFETY: p was allocated with l and is freed once, here.
            unsafe { dealloc(p as *mut u8, l) };
            // SAFETY: valid layout.
            let q = unsafe { alloc(l) } as usize;
            // SAFETY: allocated just above.
            unsafe { dealloc(q as *mut u8, l) };
            q
        })
        .join()
        .unwrap();
        assert_ne!(q, p, "the worker got the remote object back");
        assert!(
            q / 64 != p / 64,
            "the worker's object shares a cache line with the remote one"
        );
    }
    println!("CHILD-OK");
}

#[test]
fn fork_from_multithreaded_program() {
    if !is_child("fork_from_multithreaded_program") {
        return run_child("fork_from_multithreaded_program");
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    // Threads hammer the shared caches so that fork is likely to land while a lock is held.
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut keep: Vec<Vec<u8>> = Vec::new();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    // Small and large blocks, so that fork can land inside either path.
                    let len = if i.is_multiple_of(64) {
                        200_000 + i % 3_000_000
                    } else {
                        16 + i % 3000
                    };
                    keep.push(vec![t as u8; len]);
                    if keep.len() > 500 {
                        keep.clear();
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for round in 0..20 {
        // SAFETY: the child only allocates, frees and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut v: Vec<Vec<u8>> = Vec::new();
            for i in 0..20_000 {
                v.push(vec![round as u8; 8 + i % 5000]);
            }
            let ok = v.iter().enumerate().all(|(i, x)| x.len() == 8 + i % 5000);
            drop(v);
            let t = std::thread::spawn(|| vec![1u8; 100_000].len())
                .join()
                .unwrap();
            // SAFETY: _exit is always safe to call.
            unsafe { libc::_exit(if ok && t == 100_000 { 0 } else { 3 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child {round} status {status}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    println!("CHILD-OK");
}
