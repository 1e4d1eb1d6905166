//! Memory goes back to the OS, and fork leaves a usable child. These tests run in a child
//! process each, so other tests' allocations do not disturb the RSS figures.

use std::process::Command;

use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn run_child(test: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("SLABCG_CHILD", test)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{test} failed:\n{text}");
    assert!(text.contains("CHILD-OK"), "{test} did not run:\n{text}");
}

/// Runs `test` in a child process that must die with `message` on stderr.
fn run_child_expect_fatal(test: &str, message: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env("SLABCG_CHILD", test)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{test}: the child survived");
    assert!(err.contains(message), "{test}: stderr: {err}");
}

fn is_child(test: &str) -> bool {
    std::env::var("SLABCG_CHILD").as_deref() == Ok(test)
}

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
    let c = slabcg_allocator::size_class::class_of(1536);
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

#[test]
fn invalid_free_is_reported() {
    if !is_child("invalid_free_is_reported") {
        return run_child_expect_fatal("invalid_free_is_reported", "slabcg: fatal:");
    }
    use std::alloc::{GlobalAlloc, Layout};
    let l = Layout::from_size_align(64, 8).unwrap();
    let mut local = [0u8; 64];
    // SAFETY: deliberately invalid: freeing stack memory must be detected, not corrupt the heap.
    // Enough frees to overflow the thread bin, whose flush validates every slot.
    unsafe {
        for _ in 0..10_000 {
            GLOBAL.dealloc(local.as_mut_ptr(), l);
        }
    }
    println!("not detected");
}

#[test]
fn misaligned_free_to_accounted_cache_is_reported() {
    if !is_child("misaligned_free_to_accounted_cache_is_reported") {
        return run_child_expect_fatal(
            "misaligned_free_to_accounted_cache_is_reported",
            "slabcg: fatal: free of a pointer that is not the start of a slot",
        );
    }
    use std::alloc::Layout;
    let c = slabcg_allocator::Cache::builder("victim", Layout::from_size_align(4096, 8).unwrap())
        .account(true)
        .build();
    let p = c.alloc().unwrap();
    // SAFETY: deliberately invalid: a pointer into the middle of a slot must be reported
    // before its computed owner address (outside the slab's metadata) is written.
    unsafe { c.free(std::ptr::NonNull::new_unchecked(p.as_ptr().add(8))) };
    println!("not detected");
}

/// An uncharging free computes the owner address from the pointer: a pointer into the middle
/// of an accounted slot must be reported before that address (another slot's owner word) is
/// cleared and its tenant uncharged. The free runs on a thread whose object stock does not
/// hold the tenant, so it takes the uncharging path.
#[test]
fn misaligned_free_of_accounted_size_class_object_is_reported() {
    const NAME: &str = "misaligned_free_of_accounted_size_class_object_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: free of a pointer that is not the start of a slot",
        );
    }
    use std::alloc::{GlobalAlloc, Layout};
    let l = Layout::from_size_align(64, 8).unwrap();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let p = {
        let _scope = tenant.enter();
        // SAFETY: valid layout.
        unsafe { GLOBAL.alloc(l) as usize }
    };
    std::thread::spawn(move || {
        // Open this thread's accounted bin of the class first (under another tenant, so the
        // object stock does not hold `victim`), so the free below can take the fast path: a
        // closed bin sends frees straight to the validating flush.
        let other = slabcg_accounting::Tenant::new("other");
        {
            let _scope = other.enter();
            drop(std::hint::black_box(vec![0u8; 64]));
        }
        // SAFETY: deliberately invalid: the middle of a live accounted slot.
        unsafe { GLOBAL.dealloc((p + 8) as *mut u8, l) };
        // Exit before this thread's bins are flushed (the flush would catch the pointer
        // too, but only after the wrong owner word was cleared).
        println!("not detected");
        std::process::exit(0);
    })
    .join()
    .ok();
}

/// After the first tenant scope, a foreign pointer whose address has the accounted bit set
/// goes to the accounted free path. It must end in the fatal report (the uncharging path
/// validates the slot before writing), not in a debug assertion that reads a header the
/// allocator never wrote, and not in a write to the foreign memory. `fill` is what the
/// foreign memory holds, so what the free reads as the owner word: 0, or all ones (which
/// once equalled the "no tag" value of an idle object stock, and got the pointer kept).
fn foreign_pointer_with_the_accounted_bit(name: &str, fill: u8) {
    if !is_child(name) {
        return run_child_expect_fatal(
            name,
            "slabcg: fatal: free of a pointer that slabcg did not allocate",
        );
    }
    use std::alloc::{GlobalAlloc, Layout};
    let tenant = slabcg_accounting::Tenant::new("activate");
    drop(tenant.enter());
    // 16 MiB the allocator did not map, and in it a pointer 4 KiB past an odd multiple of
    // 4 MiB: its 4 MiB "header" and its computed owner word are readable, so the free gets
    // as far as the owner comparison.
    let len = 16 << 20;
    // SAFETY: an anonymous private mapping; never unmapped (the process ends in the fatal).
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as usize;
    assert_ne!(base, libc::MAP_FAILED as usize);
    // SAFETY: base..base+len is the writable mapping just made.
    unsafe { std::ptr::write_bytes(base as *mut u8, fill, len) };
    let p = ((base + (8 << 20) - 1) & !((8 << 20) - 1)) + (4 << 20) + 4096;
    assert!(p + (1 << 20) < base + len);
    let l = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: deliberately invalid: a pointer slabcg never handed out.
    unsafe { GLOBAL.dealloc(p as *mut u8, l) };
    println!("not detected");
}

#[test]
fn foreign_pointer_with_the_accounted_bit_is_reported() {
    foreign_pointer_with_the_accounted_bit("foreign_pointer_with_the_accounted_bit_is_reported", 0);
}

#[test]
fn foreign_pointer_reading_as_owner_all_ones_is_reported() {
    foreign_pointer_with_the_accounted_bit(
        "foreign_pointer_reading_as_owner_all_ones_is_reported",
        0xff,
    );
}
