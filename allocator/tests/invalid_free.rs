//! Invalid frees end the process with a message instead of corrupting memory: pointers the
//! allocator never handed out, pointers into the middle of a slot, and double frees. Each
//! test runs in a child process of its own, which must die with the expected message.

#[path = "common/child.rs"]
mod child;

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::NonNull;

use child::{is_child, run_child_expect_fatal, run_child_expect_fatal_one_of};
use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// The report of a double free caught when a slot already heads the thread's bin.
const AT_HEAD: &str = "slabcg: fatal: double free (the slot is already the first free slot";
/// The report of a double free caught when a flush finds the slot free in its cache.
const IN_CACHE: &str = "slabcg: fatal: double free (the slot is already free in its cache)";

/// Allocates a block of layout `l` and frees it twice in a row; the child must not get past
/// the second free.
fn alloc_and_free_twice(l: Layout) {
    // SAFETY: deliberately invalid: the second free of p.
    unsafe {
        let p = GLOBAL.alloc(l);
        assert!(!p.is_null());
        GLOBAL.dealloc(p, l);
        GLOBAL.dealloc(p, l);
    }
    println!("not detected");
}

/// The same pointer freed twice in a row. Pushing it again would link the slot to itself,
/// and every later allocation of the class would return it.
#[test]
fn back_to_back_double_free_is_reported() {
    const NAME: &str = "back_to_back_double_free_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, AT_HEAD);
    }
    alloc_and_free_twice(Layout::from_size_align(48, 8).unwrap());
}

/// The same inside a tenant: the first free keeps the slot charged in the object stock,
/// the second must not put it in a second bin.
#[test]
fn back_to_back_double_free_in_a_tenant_is_reported() {
    const NAME: &str = "back_to_back_double_free_in_a_tenant_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, "slabcg: fatal: double free of an accounted object");
    }
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _scope = tenant.enter();
    alloc_and_free_twice(Layout::from_size_align(48, 8).unwrap());
}

/// A double free after the first free's slot went back to its slab (`trim` flushes the
/// thread's bins and the transfer cache), with a live neighbour in the slab: the second
/// free's flush finds the slot on the slab's free list.
#[test]
fn double_free_after_the_slot_went_home_is_reported() {
    const NAME: &str = "double_free_after_the_slot_went_home_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, IN_CACHE);
    }
    let l = Layout::from_size_align(48, 8).unwrap();
    // SAFETY: deliberately invalid: the second free of p, after it went home.
    unsafe {
        let neighbour = GLOBAL.alloc(l);
        let p = GLOBAL.alloc(l);
        GLOBAL.dealloc(p, l);
        slabcg_allocator::trim();
        GLOBAL.dealloc(p, l);
        slabcg_allocator::trim();
        std::hint::black_box(neighbour);
    }
    println!("not detected");
}

/// The same, the second free made on another thread, whose exit gives its bin back as one
/// batch: the batch's check on its way to the transfer cache finds the slot.
#[test]
fn double_free_on_another_thread_is_reported() {
    const NAME: &str = "double_free_on_another_thread_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, IN_CACHE);
    }
    use std::sync::{Arc, Barrier};
    let l = Layout::from_size_align(48, 8).unwrap();
    // SAFETY: valid layout.
    let (neighbour, p) = unsafe { (GLOBAL.alloc(l), GLOBAL.alloc(l) as usize) };
    let (opened, freed) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let t = {
        let (opened, freed) = (opened.clone(), freed.clone());
        std::thread::spawn(move || {
            // Open this thread's bin while p is live, so the refill's batch does not hold
            // it (a thread that only frees would send its first frees home one by one).
            drop(std::hint::black_box(Box::new([0u8; 48])));
            opened.wait();
            freed.wait();
            // SAFETY: deliberately invalid: p again, after its first free went home.
            unsafe { GLOBAL.dealloc(p as *mut u8, l) };
        })
    };
    opened.wait();
    // SAFETY: p is live, freed once here.
    unsafe { GLOBAL.dealloc(p as *mut u8, l) };
    slabcg_allocator::trim();
    freed.wait();
    t.join().unwrap();
    println!("not detected: {neighbour:?}");
}

/// A double free on a consumer's thread, while the first free waits deeper in its bin: the
/// second push links the bin's list into a loop, and the bin gives back its whole list
/// (`bin::DRY_GIVE_BACKS`) without a walk that would cut it. The walk that checks the list
/// before its slots are parked stops after the bin's count and reports the loop (it used to
/// be unbounded: the thread spun for ever). A hardened build checks every free and reports
/// the second one at once.
#[test]
fn double_free_deep_in_a_consumers_bin_is_reported() {
    const NAME: &str = "double_free_deep_in_a_consumers_bin_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal_one_of(
            NAME,
            &[
                "slabcg: fatal: corrupted free chain",
                "slabcg: fatal: double free (the slot is already free in this thread's bin)",
            ],
        );
    }
    let l = Layout::from_size_align(256, 8).unwrap();
    // SAFETY: valid layout.
    let ps: Vec<usize> = (0..20_000)
        .map(|_| unsafe { GLOBAL.alloc(l) } as usize)
        .collect();
    assert!(ps.iter().all(|&p| p != 0));
    std::thread::spawn(move || {
        // A consumer: enough frees for its bin to give back whole.
        for &p in &ps[..10_000] {
            // SAFETY: allocated above, freed once.
            unsafe { GLOBAL.dealloc(p as *mut u8, l) };
        }
        let (x, y) = (ps[10_000], ps[10_001]);
        // SAFETY: deliberately invalid: x again, below y, which heads the bin.
        unsafe {
            GLOBAL.dealloc(x as *mut u8, l);
            GLOBAL.dealloc(y as *mut u8, l);
            GLOBAL.dealloc(x as *mut u8, l);
        }
        for &p in &ps[10_002..] {
            // SAFETY: allocated above, freed once.
            unsafe { GLOBAL.dealloc(p as *mut u8, l) };
        }
    })
    .join()
    .unwrap();
    println!("not detected");
}

/// A double free of a slot a request left in the object stock, after the next request took
/// the stock over in place: the slot keeps the first request's owner word until an
/// allocation takes it or claims it ahead (`ClassBins::stale`; the bottom slot, freed again
/// here, is the last one claimed), so the second free uncharges that request and
/// clears the word, and the allocation that reaches the slot reports it. Hardened builds,
/// which rewrite the words at the transfer, report it at the free. Debug builds stop
/// earlier, at the accounting's assertion on the first request's refs, which the transfer
/// moved away and the second free's uncharge gives back again (in a release build that
/// uncharge goes unnoticed: documented in `object_stock.rs`).
#[test]
fn double_free_of_a_slot_handed_to_the_next_request_is_reported() {
    const NAME: &str = "double_free_of_a_slot_handed_to_the_next_request_is_reported";
    if !is_child(NAME) {
        let message = if cfg!(feature = "hardened") {
            "slabcg: fatal: double free (the slot is already free in this thread's bin)"
        } else if cfg!(debug_assertions) {
            "refs underflow"
        } else {
            "slabcg: fatal: double free of an accounted object (a slot kept for the next tenant"
        };
        return run_child_expect_fatal(NAME, message);
    }
    let l = Layout::from_size_align(48, 8).unwrap();
    let customer = slabcg_accounting::Tenant::new("customer");
    let mut ptrs = Vec::with_capacity(32);
    {
        let first = customer.child("first");
        let _in = first.enter();
        // SAFETY: valid layout; each block freed once here.
        unsafe {
            for _ in 0..32 {
                ptrs.push(GLOBAL.alloc(l));
            }
            for &p in &ptrs {
                GLOBAL.dealloc(p, l);
            }
        }
    }
    let next = customer.child("next");
    let _in = next.enter();
    // SAFETY: the first allocation takes the stock over; then deliberately invalid: the
    // slot freed first (the bottom of the bin) freed again, and the bin emptied.
    unsafe {
        let _ = GLOBAL.alloc(l);
        GLOBAL.dealloc(ptrs[0], l);
        for _ in 0..64 {
            let _ = std::hint::black_box(GLOBAL.alloc(l));
        }
    }
    println!("not detected");
}

/// A double free of a slot deep in a full tagged bin: the push refuses it (the bin is full),
/// the free gives the bin's newest half back, the slot with it, and finds its owner word
/// cleared: reported, instead of uncharging the tenant again and listing the slot twice.
#[test]
fn double_free_of_a_slot_in_a_full_kept_bin_is_reported() {
    const NAME: &str = "double_free_of_a_slot_in_a_full_kept_bin_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: double free of an accounted object (it was in the thread's kept slots)",
        );
    }
    let l = Layout::from_size_align(48, 8).unwrap();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _in = tenant.enter();
    // The tagged bin of the 48-byte class holds 1,024 slots (`tagged_max`).
    let ptrs: Vec<*mut u8> = (0..1024)
        // SAFETY: valid layout.
        .map(|_| unsafe { GLOBAL.alloc(l) })
        .collect();
    // SAFETY: each block freed once (the bin fills up); then deliberately invalid: a slot
    // 24 below the bin's head, in its newest half, freed again.
    unsafe {
        for &p in &ptrs {
            GLOBAL.dealloc(p, l);
        }
        GLOBAL.dealloc(ptrs[1000], l);
    }
    println!("not detected");
}

/// A dedicated cache has no thread bins: a double free with live neighbours used to put the
/// slot on its slab's free list twice, and the cache then handed it out twice.
#[test]
fn double_free_in_a_dedicated_cache_is_reported() {
    const NAME: &str = "double_free_in_a_dedicated_cache_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, IN_CACHE);
    }
    dedicated_double_free(false);
}

/// In a dedicated cache of 40-byte objects (accounted or not), with live neighbours in the
/// slab: frees one object, then another, then the first again, then allocates twice (which
/// would hand the first one out twice).
fn dedicated_double_free(account: bool) {
    let c = slabcg_allocator::Cache::builder("victim", Layout::from_size_align(40, 8).unwrap())
        .account(account)
        .build();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _scope = tenant.enter();
    let neighbour = c.alloc().unwrap();
    let p: NonNull<u8> = c.alloc().unwrap();
    let other = c.alloc().unwrap();
    // SAFETY: deliberately invalid: the second free of p, after a valid free.
    unsafe {
        c.free(p);
        c.free(other);
        c.free(p);
    }
    let (a, b) = (c.alloc().unwrap(), c.alloc().unwrap());
    println!("not detected: {a:?} {b:?} {neighbour:?}");
}

/// The same in an accounted dedicated cache inside a tenant: the first free uncharged the
/// object; the second must be reported, not uncharge it again.
#[test]
fn double_free_in_an_accounted_dedicated_cache_is_reported() {
    const NAME: &str = "double_free_in_an_accounted_dedicated_cache_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, IN_CACHE);
    }
    dedicated_double_free(true);
}

#[test]
fn invalid_free_is_reported() {
    if !is_child("invalid_free_is_reported") {
        return run_child_expect_fatal("invalid_free_is_reported", "slabcg: fatal:");
    }
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
    let c = slabcg_allocator::Cache::builder("victim", Layout::from_size_align(4096, 8).unwrap())
        .account(true)
        .build();
    let p = c.alloc().unwrap();
    // SAFETY: deliberately invalid: a pointer into the middle of a slot must be reported
    // before its computed owner address (outside the slab's metadata) is written.
    unsafe { c.free(std::ptr::NonNull::new_unchecked(p.as_ptr().add(8))) };
    println!("not detected");
}

/// The same with the calling thread's front of the cache open and the object charged to a
/// tenant: the front's free must report the pointer before it clears an owner word and
/// uncharges.
#[test]
fn misaligned_free_of_charged_object_in_an_open_front_is_reported() {
    const NAME: &str = "misaligned_free_of_charged_object_in_an_open_front_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: free of a pointer that is not the start of a slot",
        );
    }
    let (c, tenant) = accounted_victim();
    let _scope = tenant.enter();
    // Open this thread's front of c: its warm-up allocations, freed again.
    let warm: Vec<_> = (0..9).map(|_| c.alloc().unwrap()).collect();
    for p in warm {
        // SAFETY: allocated just above, freed once.
        unsafe { c.free(p) };
    }
    assert!(c.slots_in_my_front() > 0);
    let p = c.alloc().unwrap();
    // SAFETY: deliberately invalid: the middle of a live charged slot.
    unsafe { c.free(NonNull::new_unchecked(p.as_ptr().add(8))) };
    // Exit before the front is flushed (the flush would catch the pointer too, but only
    // after the wrong owner word was cleared and the tenant uncharged).
    println!("not detected");
    std::process::exit(0);
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

/// Past the mapping cache's per-mapping bound (64 MiB) a freed large block is unmapped at
/// once: its second free used to fault on the header page (SIGSEGV, no message).
#[test]
fn double_free_of_an_unmapped_large_block_is_reported() {
    const NAME: &str = "double_free_of_an_unmapped_large_block_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: double free, or use after free, of a large block",
        );
    }
    alloc_and_free_twice(Layout::from_size_align(65 << 20, 8).unwrap());
}

/// The other side: blocks that the OS maps again at a freed block's address, moved by
/// `realloc` or cut from the mapping cache are live, and freeing them is fine.
#[test]
fn large_blocks_at_reused_addresses_free_normally() {
    let big = Layout::from_size_align(65 << 20, 8).unwrap();
    let mid = Layout::from_size_align(3 << 20, 8).unwrap();
    let mut seen = std::collections::HashSet::new();
    for i in 0..20usize {
        // SAFETY: valid layouts; every block is written inside its size and freed once
        // with the layout it has at that point.
        unsafe {
            let p = GLOBAL.alloc(big);
            assert!(!p.is_null());
            *p = i as u8;
            *p.add(big.size() - 1) = i as u8;
            seen.insert(p as usize);
            let q = GLOBAL.realloc(p, big, (66 << 20) + i * 4096);
            assert!(!q.is_null());
            assert_eq!(*q, i as u8);
            let ql = Layout::from_size_align((66 << 20) + i * 4096, 8).unwrap();
            let r = GLOBAL.alloc(mid);
            assert!(!r.is_null());
            GLOBAL.dealloc(q, ql);
            let r2 = GLOBAL.realloc(r, mid, 5 << 20);
            assert!(!r2.is_null());
            GLOBAL.dealloc(r2, Layout::from_size_align(5 << 20, 8).unwrap());
        }
    }
    slabcg_allocator::trim();
    // SAFETY: as above.
    unsafe {
        let p = GLOBAL.alloc(mid);
        assert!(!p.is_null());
        GLOBAL.dealloc(p, mid);
    }
    assert!(!seen.is_empty());
}

/// A page-aligned pointer from a direct `mmap`, the page below it unmapped: where a large
/// block's header would be. The free used to read that page and fault (SIGSEGV, no
/// message); the large-block map (`addr_map`) tells it is no block first.
fn foreign_page(name: &str, free: impl FnOnce(*mut u8)) {
    if !is_child(name) {
        return run_child_expect_fatal(
            name,
            "slabcg: fatal: free of a pointer that slabcg did not allocate",
        );
    }
    // SAFETY: an anonymous private mapping, its first page unmapped again; the rest is
    // never unmapped (the process ends in the fatal).
    let p = unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            1 << 16,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        libc::munmap(m, 4096);
        (m as *mut u8).add(4096)
    };
    free(p);
    println!("not detected");
}

#[test]
fn sizeless_free_of_a_foreign_page_is_reported() {
    // SAFETY: deliberately invalid: a pointer slabcg never handed out.
    foreign_page("sizeless_free_of_a_foreign_page_is_reported", |p| unsafe {
        slabcg_allocator::raw::free(p)
    });
}

#[test]
fn large_dealloc_of_a_foreign_page_is_reported() {
    // SAFETY: deliberately invalid: a pointer slabcg never handed out, with a large layout.
    foreign_page("large_dealloc_of_a_foreign_page_is_reported", |p| unsafe {
        GLOBAL.dealloc(p, Layout::from_size_align(1 << 20, 8).unwrap())
    });
}

/// With `hardened`, the sizeless free checks a slot's start at once: a pointer into the
/// middle of a slot is reported on the spot (the default build trusts it there: 20
/// instructions per C pair, `raw::slot_class`).
#[cfg(feature = "hardened")]
#[test]
fn sizeless_free_into_the_middle_of_a_slot_is_reported() {
    const NAME: &str = "sizeless_free_into_the_middle_of_a_slot_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: free of a pointer that is not the start of a slot",
        );
    }
    let p = slabcg_allocator::raw::alloc(100, 8);
    // SAFETY: deliberately invalid: 16 bytes into a live slot.
    unsafe { slabcg_allocator::raw::free(p.add(16)) };
    println!("not detected");
}

/// An accounted dedicated cache of 256-byte objects and a tenant to charge them to, for the
/// tests that free into a charged front.
fn accounted_victim() -> (slabcg_allocator::Cache, slabcg_accounting::Tenant) {
    let c = slabcg_allocator::Cache::builder("victim", Layout::from_size_align(256, 8).unwrap())
        .account(true)
        .build();
    (c, slabcg_accounting::Tenant::new("victim"))
}

/// Opens the calling thread's front of accounted cache `c` in the current tenant and leaves
/// slots kept charged there (`front.rs`: the object stock's bin in the front).
fn open_kept_front(c: &slabcg_allocator::Cache) {
    for n in [9, 32] {
        let v: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
        for p in v {
            // SAFETY: allocated just above, freed once.
            unsafe { c.free(p) };
        }
    }
    assert!(c.kept_in_my_front() > 0, "the front keeps slots charged");
}

/// A free into an accounted cache of another cache's object of the same layout, where the
/// free would keep the slot charged (its owner word, read from the other cache's slab, is the
/// thread's tenant): reported before the slot reaches the kept bin, from which the next
/// allocation would hand it out while the other cache still has it live.
#[test]
fn free_of_another_caches_object_into_a_kept_bin_is_reported() {
    const NAME: &str = "free_of_another_caches_object_into_a_kept_bin_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: free of a pointer of another cache or size class",
        );
    }
    let (a, b) = two_accounted_caches();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _scope = tenant.enter();
    open_kept_front(&b);
    let x = a.alloc().unwrap();
    // SAFETY: deliberately invalid: a's object freed into b.
    unsafe { b.free(x) };
    let y = b.alloc().unwrap();
    println!("not detected: {x:?} {y:?}");
    std::process::exit(0);
}

/// How a double free deeper in a kept bin is reported: at the second push in hardened builds
/// (`Bin::check_push`), else by the next walk of the bin's chain.
const KEPT_LOOP: &str = if cfg!(feature = "hardened") {
    "slabcg: fatal: double free (the slot is already free in this thread's bin)"
} else {
    "slabcg: fatal: a thread's kept free slots link in a loop"
};

/// In tenant `t`, opens the thread's front of a new accounted cache and frees one of its
/// objects again while the first free sits second in the kept bin (which links the bin's
/// chain into a loop). Returns the cache.
fn double_free_below_the_kept_head(t: &slabcg_accounting::Tenant) -> slabcg_allocator::Cache {
    let c = slabcg_allocator::Cache::builder("victim", Layout::from_size_align(256, 8).unwrap())
        .account(true)
        .build();
    let _scope = t.enter();
    open_kept_front(&c);
    let (p, q) = (c.alloc().unwrap(), c.alloc().unwrap());
    // SAFETY: deliberately invalid: p freed again after q, while it is second in the bin.
    unsafe {
        c.free(p);
        c.free(q);
        c.free(p);
    }
    c
}

/// A double free below the kept bin's head: the next walk of the bin (here the give-back a
/// drain makes) reports it instead of walking for ever with the thread's stock lock held.
#[test]
fn double_free_deeper_in_a_kept_bin_is_reported_when_the_bin_is_walked() {
    const NAME: &str = "double_free_deeper_in_a_kept_bin_is_reported_when_the_bin_is_walked";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, KEPT_LOOP);
    }
    let _c = double_free_below_the_kept_head(&slabcg_accounting::Tenant::new("victim"));
    slabcg_accounting::drain_all_stocks();
    println!("not detected");
    std::process::exit(0);
}

/// The same double free, found by a retag that gives the kept slots back to the thread's own
/// uncharged bin (another tenant's allocations, past the misses a retag waits for): each push
/// there rewrites a link, so the loop is found by the slot's owner word, already cleared on
/// the first visit, not by the walk's length; the slot is not handed out twice.
#[test]
fn double_free_deeper_in_a_kept_bin_is_reported_by_a_retag() {
    const NAME: &str = "double_free_deeper_in_a_kept_bin_is_reported_by_a_retag";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, KEPT_LOOP);
    }
    // The victim stays alive: the retag waits for its misses (a dead tag goes back at once).
    let victim = slabcg_accounting::Tenant::new("victim");
    let c = double_free_below_the_kept_head(&victim);
    let other = slabcg_accounting::Tenant::new("other");
    let _scope = other.enter();
    let live: Vec<_> = (0..200).map(|_| c.alloc().unwrap()).collect();
    println!("not detected: {}", live.len());
    std::process::exit(0);
}

/// A slot given twice to one `free_bulk` (not back to back), where the bulk keeps both: the
/// hardened build reports it as the bulk links it again; the default build reports the bin it
/// corrupted when the bin is next walked (here by a drain's give-back) instead of handing the
/// slot out twice.
#[test]
fn a_slot_twice_in_one_free_bulk_is_reported() {
    const NAME: &str = "a_slot_twice_in_one_free_bulk_is_reported";
    if !is_child(NAME) {
        let expected = if cfg!(feature = "hardened") {
            "slabcg: fatal: double free in free_bulk (the slot is already being kept by this call)"
        } else {
            "slabcg: fatal:"
        };
        return run_child_expect_fatal(NAME, expected);
    }
    let l = Layout::from_size_align(256, 8).unwrap();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _scope = tenant.enter();
    // Warm the class's object stock for the tenant: frees under it are kept.
    let mut warm = [std::ptr::null_mut(); 64];
    for _ in 0..3 {
        assert_eq!(slabcg_allocator::alloc_bulk(l, &mut warm), 64);
        // SAFETY: allocated just above with l, each freed once.
        unsafe { slabcg_allocator::free_bulk(l, &warm) };
    }
    let mut two = [std::ptr::null_mut(); 2];
    assert_eq!(slabcg_allocator::alloc_bulk(l, &mut two), 2);
    // SAFETY: deliberately invalid: two[0] twice in one bulk, with another slot between.
    unsafe { slabcg_allocator::free_bulk(l, &[two[0], two[1], two[0]]) };
    slabcg_accounting::drain_all_stocks();
    let mut again = [std::ptr::null_mut(); 8];
    let n = slabcg_allocator::alloc_bulk(l, &mut again);
    println!("not detected: {n} {again:?}");
    std::process::exit(0);
}

/// A dedicated cache's `free_bulk` that keeps its slots checks the segment once per slab
/// (`SlabRun`), the slot start for every pointer: a pointer into the middle of a slot, in the
/// slab of the pointers kept before it, is reported before anything is written through it.
#[test]
fn a_middle_of_slot_pointer_in_a_kept_free_bulk_is_reported() {
    const NAME: &str = "a_middle_of_slot_pointer_in_a_kept_free_bulk_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: free of a pointer that is not the start of a slot",
        );
    }
    let (c, tenant) = accounted_victim();
    let _scope = tenant.enter();
    open_kept_front(&c);
    let mut objs = [std::ptr::null_mut(); 4];
    assert_eq!(c.alloc_bulk(&mut objs), 4);
    // SAFETY: deliberately invalid: objs[1] + 8 is the middle of a live slot.
    unsafe { c.free_bulk(&[objs[0], objs[1], objs[1].add(8), objs[2]]) };
    println!("not detected");
    std::process::exit(0);
}

/// The same for another cache's object of the same layout after a run of the cache's own:
/// the run's slab check, made again for the other cache's slab, refuses it, and it is
/// reported before it reaches the kept bin.
#[test]
fn another_caches_object_in_a_kept_free_bulk_is_reported() {
    const NAME: &str = "another_caches_object_in_a_kept_free_bulk_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: free of a pointer of another cache or size class",
        );
    }
    let (a, b) = two_accounted_caches();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _scope = tenant.enter();
    open_kept_front(&b);
    let x = a.alloc().unwrap();
    let mut objs = [std::ptr::null_mut(); 3];
    assert_eq!(b.alloc_bulk(&mut objs), 3);
    // SAFETY: deliberately invalid: a's object freed into b, after two of b's.
    unsafe { b.free_bulk(&[objs[0], objs[1], x.as_ptr(), objs[2]]) };
    let y = b.alloc().unwrap();
    println!("not detected: {x:?} {y:?}");
    std::process::exit(0);
}

/// Two accounted dedicated caches of one layout (256 B), whose objects a free into the
/// wrong one must not mix up.
fn two_accounted_caches() -> (slabcg_allocator::Cache, slabcg_allocator::Cache) {
    let l = Layout::from_size_align(256, 8).unwrap();
    let build = |name| {
        slabcg_allocator::Cache::builder(name, l)
            .account(true)
            .build()
    };
    (build("victim-a"), build("victim-b"))
}

/// A tenant's thread overflows its 48-byte tagged bin (1,024 slots): the newest half leaves
/// the bin (for the hand-back, still charged, or given back). Then one of those slots is
/// freed again: its owner word was cleared on the way out, so the free reports it instead
/// of keeping the slot a second time (and the allocations after handing it out twice).
#[test]
fn double_free_of_a_slot_from_an_overflowed_half_is_reported() {
    const NAME: &str = "double_free_of_a_slot_from_an_overflowed_half_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: double free of an accounted object (owner already cleared)",
        );
    }
    let l = Layout::from_size_align(48, 8).unwrap();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _in = tenant.enter();
    // SAFETY: valid layout.
    let ptrs: Vec<*mut u8> = (0..1025).map(|_| unsafe { GLOBAL.alloc(l) }).collect();
    // SAFETY: each block freed once (the 1,025th free overflows the bin); then deliberately
    // invalid: ptrs[600], in the newest half (512..1024) that left the bin, freed again.
    unsafe {
        for &p in &ptrs {
            GLOBAL.dealloc(p, l);
        }
        GLOBAL.dealloc(ptrs[600], l);
    }
    println!("not detected");
}

/// A double free of a slot deeper in a tagged bin that is not full links the bin's list
/// into a loop; when the bin then fills, the walk of its newest half on the way out reports
/// it.
#[test]
fn a_looping_half_is_reported_at_the_overflow() {
    const NAME: &str = "a_looping_half_is_reported_at_the_overflow";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, "slabcg: fatal:");
    }
    let l = Layout::from_size_align(48, 8).unwrap();
    let tenant = slabcg_accounting::Tenant::new("victim");
    let _in = tenant.enter();
    // SAFETY: valid layout.
    let ptrs: Vec<*mut u8> = (0..1100).map(|_| unsafe { GLOBAL.alloc(l) }).collect();
    // SAFETY: each block freed once, but ptrs[990] twice (deliberately invalid), then more
    // until the bin overflows.
    unsafe {
        for &p in &ptrs[..1000] {
            GLOBAL.dealloc(p, l);
        }
        GLOBAL.dealloc(ptrs[990], l);
        for &p in &ptrs[1000..1030] {
            GLOBAL.dealloc(p, l);
        }
    }
    println!("not detected");
}
