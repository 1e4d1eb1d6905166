//! Freed memory is kept for reuse, within bounds, and given back at a pace (`decay.rs`): the
//! mapping cache gathers freed large extents into a new one instead of faulting fresh pages,
//! never holds more than its bound, and empties after two decay intervals of use; empty
//! slabs stay up to the cache's recent peak and decay the same way; `trim()` gives back all
//! of it at once. Each test runs in a child process of its own, so that other tests'
//! allocations and frees neither disturb the figures nor tick the decay.

#[path = "common/child.rs"]
mod child;

use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use child::{is_child, run_child};
use slabcg_allocator::testing::{class_of, large_cached, DECAY_INTERVAL_MS};
use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const MIB: usize = 1 << 20;
const PAGE: usize = 4096;
/// Pages of a large block's extent that are not its usable bytes: the header, and in
/// hardened builds the guard page after the block.
const OVERHEAD: usize = if cfg!(feature = "hardened") {
    2 * PAGE
} else {
    PAGE
};

fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the zeroed struct it is given.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_minflt
    }
}

fn big(size: usize) -> Layout {
    Layout::from_size_align(size, 16).unwrap()
}

/// Allocates a large block and writes `byte` into every page of it.
fn touched(size: usize, byte: u8) -> *mut u8 {
    // black_box: the package builds with optimisations, which may drop an allocation
    // that is only written and freed.
    // SAFETY: a non-zero size.
    let p = std::hint::black_box(unsafe { alloc(big(size)) });
    assert!(!p.is_null());
    for off in (0..size).step_by(PAGE) {
        // SAFETY: off < size.
        unsafe { *p.add(off) = byte };
    }
    p
}

/// Sleeps through a decay interval, then has the mapping cache check the clock (a large
/// allocation and free of 3 MiB, which no cached extent holds back).
fn large_tick() {
    std::thread::sleep(Duration::from_millis(DECAY_INTERVAL_MS + 50));
    let p = touched(3 * MIB, 1);
    // SAFETY: allocated just above with this layout.
    unsafe { dealloc(p, big(3 * MIB)) };
}

/// Three freed 4 MiB extents serve a 10 MiB block: their pages are moved into it (the old
/// contents show through, touching them faults nothing), only 2 MiB stay cached; what stays
/// cached unused goes back after two decay intervals of activity.
#[test]
fn freed_extents_are_gathered_into_a_bigger_block_then_decay() {
    if !is_child("freed_extents_are_gathered_into_a_bigger_block_then_decay") {
        return run_child("freed_extents_are_gathered_into_a_bigger_block_then_decay");
    }
    slabcg_allocator::trim();
    // 4 MiB less the header page (and guard): an extent of exactly 4 MiB.
    let four = 4 * MIB - OVERHEAD;
    let blocks: Vec<*mut u8> = (0..3).map(|_| touched(four, 0xab)).collect();
    for &p in &blocks {
        // SAFETY: allocated by `touched` with this layout, freed once.
        unsafe { dealloc(p, big(four)) };
    }
    assert_eq!(large_cached(), 12 * MIB, "the freed extents were not kept");

    let ten = 10 * MIB - OVERHEAD;
    // SAFETY: a non-zero size.
    let q = std::hint::black_box(unsafe { alloc(big(ten)) });
    assert!(!q.is_null());
    assert_eq!(
        large_cached(),
        2 * MIB,
        "the block did not take the cached extents"
    );
    // All of it is old pages (4 + 4 + 2 MiB moved, less the header page), but for the two
    // pages that held the second and third old blocks' headers (and, hardened, the first
    // and second blocks' guard pages, never written).
    let faults = minor_faults();
    let old = (0..ten)
        .step_by(PAGE)
        .filter(|&off| {
            // SAFETY: off < ten.
            unsafe { *q.add(off) == 0xab }
        })
        .count();
    let faulted = minor_faults() - faults;
    assert!(
        old >= ten / PAGE - 2 - (OVERHEAD / PAGE - 1) * 2,
        "only {old} pages came from the freed blocks"
    );
    assert!(faulted < 16, "reading moved pages faulted {faulted} times");
    // SAFETY: allocated above with this layout, freed once.
    unsafe { dealloc(q, big(ten)) };
    assert!(large_cached() >= 10 * MIB);

    // Nothing reuses it: two intervals later only the last tick's own block is cached.
    large_tick();
    large_tick();
    assert!(
        large_cached() <= 4 * MIB,
        "the mapping cache kept {} bytes through two idle intervals",
        large_cached()
    );
    println!("CHILD-OK");
}

/// Whatever is freed, the mapping cache holds at most its bound: 64 MiB once nothing large
/// is live (as much as live blocks hold, 64 MiB to 1 GiB).
#[test]
fn the_mapping_cache_keeps_at_most_its_bound() {
    if !is_child("the_mapping_cache_keeps_at_most_its_bound") {
        return run_child("the_mapping_cache_keeps_at_most_its_bound");
    }
    slabcg_allocator::trim();
    let size = 30 * MIB;
    // Touch one page each: the bound is on bytes held, resident or not.
    let blocks: Vec<*mut u8> = (0..40)
        .map(|i| {
            // SAFETY: a non-zero size.
            let p = std::hint::black_box(unsafe { alloc(big(size)) });
            assert!(!p.is_null());
            // SAFETY: p has size bytes.
            unsafe { *p = i as u8 };
            p
        })
        .collect();
    let mut most = 0;
    for &p in &blocks {
        // SAFETY: allocated above with this layout, freed once.
        unsafe { dealloc(p, big(size)) };
        most = most.max(large_cached());
    }
    assert!(large_cached() > 0, "nothing kept for reuse");
    assert!(
        large_cached() <= 64 * MIB,
        "{} bytes cached with nothing live",
        large_cached()
    );
    assert!(most <= 1 << 30, "{most} bytes cached at once");
    println!("CHILD-OK");
}

/// Empty slabs stay (resident, for the next batch) up to the cache's peak in use, the
/// process's resident set does not grow by freeing, and they go back to the OS after two
/// decay intervals in which the cache is used a little; `trim()` gives back the rest and the
/// mapping cache at once.
#[test]
fn empty_slabs_are_kept_up_to_the_peak_then_decay_and_trim_takes_all() {
    if !is_child("empty_slabs_are_kept_up_to_the_peak_then_decay_and_trim_takes_all") {
        return run_child("empty_slabs_are_kept_up_to_the_peak_then_decay_and_trim_takes_all");
    }
    // 1536-byte objects: a class nothing else in this process uses.
    let c = class_of(1536);
    let class = |s: &slabcg_allocator::AllocStats| s.classes[c];
    slabcg_allocator::trim();
    let v: Vec<Box<[u8; 1536]>> = (0..40 * MIB / 1536)
        .map(|_| Box::new([7u8; 1536]))
        .collect();
    let peak = slabcg_allocator::stats();
    drop(v);
    let freed = slabcg_allocator::stats();
    let slab = class(&freed).slab_bytes;
    let kept = class(&freed).empty_slabs * slab;
    assert!(
        kept > 16 * MIB,
        "only {kept} bytes of empty slabs kept for reuse"
    );
    assert!(
        class(&freed).empty_slabs + class(&freed).active_slabs <= class(&peak).active_slabs,
        "more slabs than at the peak:\npeak {peak}\nfreed {freed}"
    );
    assert!(
        freed.process_rss <= peak.process_rss + MIB,
        "freeing grew the resident set: {} -> {}",
        peak.process_rss,
        freed.process_rss
    );

    // A little use of the class in each of two intervals: the idle slabs go.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(DECAY_INTERVAL_MS + 50));
        let w: Vec<Box<[u8; 1536]>> = (0..300).map(|_| Box::new([1u8; 1536])).collect();
        drop(w);
    }
    let decayed = slabcg_allocator::stats();
    assert!(
        class(&decayed).empty_slabs * slab <= 2 * MIB,
        "the empty slabs did not decay:\nfreed {freed}\ndecayed {decayed}"
    );
    assert!(
        decayed.process_rss + 24 * MIB < freed.process_rss,
        "the resident set did not follow: {} -> {}",
        freed.process_rss,
        decayed.process_rss
    );

    // Kept again, and a large extent cached: trim gives back both at once.
    let v: Vec<Box<[u8; 1536]>> = (0..8 * MIB / 1536).map(|_| Box::new([7u8; 1536])).collect();
    drop(v);
    let p = touched(8 * MIB, 2);
    // SAFETY: allocated by `touched` with this layout, freed once.
    unsafe { dealloc(p, big(8 * MIB)) };
    assert!(large_cached() > 0 && class(&slabcg_allocator::stats()).empty_slabs > 0);
    slabcg_allocator::trim();
    let trimmed = slabcg_allocator::stats();
    assert_eq!(large_cached(), 0, "trim kept cached extents");
    assert_eq!(class(&trimmed).empty_slabs, 0, "trim kept empty slabs");
    println!("CHILD-OK");
}

/// A size class the program stops using still gives its idle memory back: the empty slabs
/// and the parked batches of a class freed in a burst (outside every tenant, inside one: the
/// accounted twin, and a dedicated cache's) go back to the OS within a few decay
/// intervals while the program only allocates from other classes (`sweep.rs`: the parked
/// batches go back to their slabs after one idle interval, and the slabs they empty after
/// one more), and so do cached large extents while no large block is allocated or freed.
#[test]
fn a_class_no_longer_used_decays_while_others_are_used() {
    if !is_child("a_class_no_longer_used_decays_while_others_are_used") {
        return run_child("a_class_no_longer_used_decays_while_others_are_used");
    }
    // 2560-byte objects, and 3584-byte ones charged to a tenant (the accounted twin's
    // slabs): classes nothing else in this process uses.
    let c = class_of(2560);
    let class = |s: &slabcg_allocator::AllocStats| s.classes[c];
    let ca = class_of(3584);
    assert_ne!(c, ca);
    // The accounted twin alone (the class's stats add the plain cache's).
    let twin = &slabcg_allocator::testing::ACCOUNTED[ca];
    let twin_empty = || twin.counters.empty_slabs.load(Relaxed) * twin.layout.slab_bytes();
    let twin_parked = || twin.counters.transfer.load(Relaxed);
    slabcg_allocator::trim();
    let v: Vec<Box<[u8; 2560]>> = (0..16 * MIB / 2560)
        .map(|_| Box::new([7u8; 2560]))
        .collect();
    drop(v);
    // In one tenant scope: a burst in a size class's accounted twin (3,584 B) and one in an
    // accounted dedicated cache, whose handle is kept (its slabs must decay while it lives).
    let cache = slabcg_allocator::Cache::builder("burst", Layout::new::<[u8; 1000]>())
        .account(true)
        .build();
    let tenant = slabcg_accounting::Tenant::new("burst");
    {
        let _scope = tenant.enter();
        let v: Vec<Box<[u8; 3584]>> = (0..8 * MIB / 3584).map(|_| Box::new([5u8; 3584])).collect();
        drop(v);
        let objs: Vec<_> = (0..8 * MIB / 1000)
            .map(|_| cache.alloc().expect("memory"))
            .collect();
        for o in objs {
            // SAFETY: allocated from `cache` above, freed once.
            unsafe { cache.free(o) };
        }
    }
    let p = touched(8 * MIB, 2);
    // SAFETY: allocated by `touched` with this layout, freed once.
    unsafe { dealloc(p, big(8 * MIB)) };
    let freed = slabcg_allocator::stats();
    let slab = class(&freed).slab_bytes;
    assert!(
        class(&freed).empty_slabs * slab > 8 * MIB && large_cached() >= 8 * MIB,
        "the burst's memory is kept for reuse at first:\n{freed}"
    );
    assert!(
        freed.dedicated_resident > 4 * MIB,
        "the dedicated cache's burst is kept for reuse at first:\n{freed}"
    );
    assert!(
        twin_empty() > 4 * MIB,
        "the tenant's burst is kept for reuse at first:\n{freed}"
    );

    // Only 64-byte objects from here on: a bin of them refills every 128 allocations, and
    // every 64th refill looks at the clock; naps of 10 ms add up to six decay intervals.
    for _ in 0..6 * DECAY_INTERVAL_MS / 10 {
        let w: Vec<Box<[u8; 64]>> = (0..20_000).map(|_| Box::new([1u8; 64])).collect();
        drop(w);
        std::thread::sleep(Duration::from_millis(10));
    }
    let decayed = slabcg_allocator::stats();
    assert!(
        class(&decayed).empty_slabs * slab <= 256 * 1024,
        "the unused class's empty slabs did not decay:\nfreed {freed}\ndecayed {decayed}"
    );
    assert!(
        class(&decayed).cached * class(&decayed).size <= 256 * 1024,
        "the unused class's parked batches stayed:\nfreed {freed}\ndecayed {decayed}"
    );
    assert!(
        twin_empty() <= 256 * 1024 && twin_parked() == 0,
        "the tenant's class did not decay: {} bytes of empty slabs, {} slots parked",
        twin_empty(),
        twin_parked()
    );
    assert!(
        decayed.dedicated_resident <= MIB,
        "the dedicated cache did not decay:\nfreed {freed}\ndecayed {decayed}"
    );
    drop(cache);
    // The loop's own vectors (160 KB, large blocks) keep a small extent cached.
    assert!(
        large_cached() < MIB,
        "the cached extent did not decay: {} bytes cached",
        large_cached()
    );
    println!("CHILD-OK");
}

/// A bin opens small and grows with use: the first allocation of a class of 4 KiB objects
/// takes a couple of slots from the slabs, not 64 KiB of them (each slot a refill hands over
/// gets its link written, so it becomes resident).
#[test]
fn a_bin_opens_small_and_grows_with_use() {
    if !is_child("a_bin_opens_small_and_grows_with_use") {
        return run_child("a_bin_opens_small_and_grows_with_use");
    }
    let c = class_of(4096);
    let class = |s: &slabcg_allocator::AllocStats| s.classes[c];
    let one = std::hint::black_box(Box::new([3u8; 4096]));
    let first = slabcg_allocator::stats();
    assert!(
        class(&first).cached * 4096 <= 16 * 1024,
        "the first refill took {} slots:\n{first}",
        class(&first).cached
    );
    drop(one);
    // In steady use the bin reaches its full size (128 KiB: 32 slots of 4 KiB), so a batch
    // of 24 allocations and frees is served by the bin without a trip to the slabs.
    for _ in 0..8 {
        let w: Vec<Box<[u8; 4096]>> = (0..24).map(|_| Box::new([1u8; 4096])).collect();
        drop(std::hint::black_box(w));
    }
    let warm = slabcg_allocator::stats();
    assert!(
        class(&warm).cached >= 24,
        "the bin did not grow: {} cached:\n{warm}",
        class(&warm).cached
    );
    println!("CHILD-OK");
}

/// A service with a tenant per request, its load steady: every request is served from the
/// slots the previous request left (handed over in the object stock), so no bin refills,
/// the slow path that used to pace the decay sweep alone. The memory a burst left idle (a
/// runaway request killed at its limit, here 16 MiB of 2,048-byte objects in its own
/// tenant) must still go back within a few decay intervals: each request's first
/// allocation, under its new tenant, counts towards the sweep too (`sweep.rs`).
#[test]
fn a_burst_decays_while_a_tenant_per_request_load_goes_on() {
    if !is_child("a_burst_decays_while_a_tenant_per_request_load_goes_on") {
        return run_child("a_burst_decays_while_a_tenant_per_request_load_goes_on");
    }
    let burst = class_of(2048);
    let twin = &slabcg_allocator::testing::ACCOUNTED[burst];
    let twin_empty = || twin.counters.empty_slabs.load(Relaxed) * twin.layout.slab_bytes();
    let service = slabcg_accounting::Tenant::new("service");
    {
        let runaway = service.child("runaway");
        let _scope = runaway.enter();
        let v: Vec<Box<[u8; 2048]>> = (0..16 * MIB / 2048)
            .map(|_| Box::new([9u8; 2048]))
            .collect();
        drop(v);
    }
    assert!(
        twin_empty() > 8 * MIB,
        "the runaway's memory is kept for reuse at first: {} bytes of empty slabs",
        twin_empty()
    );
    // The steady load: requests of 32 objects of 64 bytes each, each in a new child tenant,
    // 50 of them between naps of 10 ms, for six decay intervals.
    let mut served = 0usize;
    for _ in 0..6 * DECAY_INTERVAL_MS / 10 {
        for _ in 0..50 {
            let request = service.child("request");
            let _scope = request.enter();
            let w: Vec<Box<[u8; 64]>> = (0..32).map(|i| Box::new([i as u8; 64])).collect();
            served += std::hint::black_box(&w).len();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(served, 6 * DECAY_INTERVAL_MS as usize / 10 * 50 * 32);
    assert!(
        twin_empty() <= 256 * 1024,
        "the runaway's memory stayed resident under a tenant-per-request load: {} bytes of \
         empty slabs",
        twin_empty()
    );
    assert_eq!(service.current_exact(), 0);
    println!("CHILD-OK");
}

/// The same without tenants: a steady load served from the threads' bins alone takes no
/// slow path at all, so the memory a burst left idle goes back only with the background
/// decay thread (`start_decay_thread`), which this program started.
#[test]
fn a_burst_decays_under_a_steady_load_with_the_decay_thread() {
    if !is_child("a_burst_decays_under_a_steady_load_with_the_decay_thread") {
        return run_child("a_burst_decays_under_a_steady_load_with_the_decay_thread");
    }
    slabcg_allocator::start_decay_thread().expect("a thread");
    let c = class_of(2048);
    let class = |s: &slabcg_allocator::AllocStats| s.classes[c];
    let v: Vec<Box<[u8; 2048]>> = (0..16 * MIB / 2048)
        .map(|_| Box::new([9u8; 2048]))
        .collect();
    drop(v);
    let freed = slabcg_allocator::stats();
    let slab = class(&freed).slab_bytes;
    assert!(
        class(&freed).empty_slabs * slab > 8 * MIB,
        "the burst's memory is kept for reuse at first:\n{freed}"
    );
    // The steady load: 32 objects of 64 bytes allocated and freed, again and again, between
    // naps of 10 ms, for six decay intervals: after the first round the bin serves them all.
    let mut served = 0usize;
    for _ in 0..6 * DECAY_INTERVAL_MS / 10 {
        for _ in 0..50 {
            let w: Vec<Box<[u8; 64]>> = (0..32).map(|i| Box::new([i as u8; 64])).collect();
            served += std::hint::black_box(&w).len();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(served, 6 * DECAY_INTERVAL_MS as usize / 10 * 50 * 32);
    let decayed = slabcg_allocator::stats();
    assert!(
        class(&decayed).empty_slabs * slab <= 256 * 1024,
        "the burst's memory stayed resident under a steady load:\nfreed {freed}\ndecayed {decayed}"
    );
    println!("CHILD-OK");
}

/// `set_decay_interval_ms` clamps to 10 ms-1 h and paces the decay: with an interval of
/// 2 s, the burst's memory is still kept after one default interval (500 ms) of a steady
/// load with the background thread; set back to 100 ms, it goes within a few of those.
#[test]
fn the_decay_interval_can_be_set() {
    if !is_child("the_decay_interval_can_be_set") {
        return run_child("the_decay_interval_can_be_set");
    }
    assert_eq!(slabcg_allocator::set_decay_interval_ms(0), 10);
    assert_eq!(slabcg_allocator::set_decay_interval_ms(u64::MAX), 3_600_000);
    assert_eq!(slabcg_allocator::set_decay_interval_ms(2_000), 2_000);
    slabcg_allocator::start_decay_thread().expect("a thread");
    let c = class_of(2048);
    let empty = || {
        let s = slabcg_allocator::stats();
        s.classes[c].empty_slabs * s.classes[c].slab_bytes
    };
    let v: Vec<Box<[u8; 2048]>> = (0..16 * MIB / 2048)
        .map(|_| Box::new([9u8; 2048]))
        .collect();
    drop(v);
    let steady = |ms: u64| {
        for _ in 0..ms / 10 {
            let w: Vec<Box<[u8; 64]>> = (0..32).map(|i| Box::new([i as u8; 64])).collect();
            std::hint::black_box(&w);
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    steady(DECAY_INTERVAL_MS + 200);
    assert!(
        empty() > 8 * MIB,
        "a 2 s interval kept the burst for 700 ms: {} bytes of empty slabs",
        empty()
    );
    slabcg_allocator::set_decay_interval_ms(100);
    steady(2_500);
    assert!(
        empty() <= 256 * 1024,
        "a 100 ms interval gave the burst back within 2.5 s: {} bytes of empty slabs",
        empty()
    );
    println!("CHILD-OK");
}
