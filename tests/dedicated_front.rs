//! The per-thread front of dedicated caches (issue 18): same-thread pairs stay in the
//! thread's front, remote frees land in the freeing thread's front (after the first 64 go
//! home), a consumer's front gives back whole bins, thread exit and `trim()` give front slots
//! back, and an accounted cache keeps exact ownership with single and bulk frees mixed across
//! threads, before and after its tenant dies.

use std::alloc::Layout;
use std::collections::HashSet;
use std::sync::Arc;

use slabcg::{Cache, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// Locked allocations before a thread's front opens (`front::WARM_ALLOCS`), plus one.
const WARM: usize = 9;
/// Frees a thread sends home before its front opens (`front::HOME_FREES`).
const HOME: usize = 64;

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// Sendable pointers.
fn addrs(ps: &[*mut u8]) -> Vec<usize> {
    ps.iter().map(|&p| p as usize).collect()
}

fn nn(a: usize) -> std::ptr::NonNull<u8> {
    std::ptr::NonNull::new(a as *mut u8).unwrap()
}

/// Opens the calling thread's front of `c`: `WARM` allocations, freed again.
fn warm_up(c: &Cache) {
    let ps: [_; WARM] = std::array::from_fn(|_| c.alloc().unwrap());
    for p in ps {
        // SAFETY: allocated just above from c, freed once.
        unsafe { c.free(p) };
    }
}

#[test]
fn same_thread_pairs_stay_in_the_front() {
    let c = Cache::builder("front-pairs", layout(88)).build();
    assert!(c.front_index().is_some());
    warm_up(&c);
    assert!(c.slots_in_my_front() > 0, "the front did not open");
    for _ in 0..10_000 {
        let p = c.alloc().unwrap();
        // SAFETY: 88 writable bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0xA5, 88) };
        // SAFETY: allocated just above, freed once.
        unsafe { c.free(p) };
    }
    assert_eq!(c.live_objects(), 0);
    // A pair is a pop and a push of this thread's front: the slot freed is the next one out.
    let p = c.alloc().unwrap();
    let in_front = c.slots_in_my_front();
    // SAFETY: allocated just above, freed once.
    unsafe { c.free(p) };
    assert_eq!(c.slots_in_my_front(), in_front + 1);
    assert_eq!(c.alloc().unwrap(), p);
    // Slots in this front are not another thread's to take: its allocations come from the
    // cache's slabs, never this thread's front.
    let mine: HashSet<usize> = {
        let held: Vec<_> = (0..50).map(|_| c.alloc().unwrap()).collect();
        let set = held.iter().map(|p| p.as_ptr() as usize).collect();
        for q in held {
            // SAFETY: allocated just above, freed once.
            unsafe { c.free(q) };
        }
        set
    };
    assert!(c.slots_in_my_front() >= 50);
    // Joined, not only waited for (the scope's end does not wait for the thread's exit,
    // which hands its front's slots back before `live_objects` below may count them).
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let theirs: Vec<_> = (0..50).map(|_| c.alloc().unwrap()).collect();
            for q in &theirs {
                assert!(
                    !mine.contains(&(q.as_ptr() as usize)),
                    "another thread got a slot from this thread's front"
                );
            }
            for q in theirs {
                // SAFETY: allocated just above, freed once.
                unsafe { c.free(q) };
            }
        });
        h.join().unwrap();
    });
    // SAFETY: p is live, freed once.
    unsafe { c.free(p) };
    assert_eq!(c.live_objects(), 0);
    slabcg::allocator::testing::check_invariants();
}

#[test]
fn remote_frees_land_in_the_freeing_threads_front() {
    let c = Cache::builder("front-remote", layout(200)).build();
    let n = 300;
    let ps: Vec<_> = (0..n).map(|_| c.alloc().unwrap().as_ptr()).collect();
    let a = addrs(&ps);
    assert_eq!(c.live_objects(), n);
    let c = &c;
    // Joined: see `same_thread_pairs_stay_in_the_front`.
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            // This thread never allocated from c: the first frees go home, then its front
            // opens and keeps what it frees (up to its capacity), which its own next
            // allocations reuse.
            for &p in &a[..HOME] {
                // SAFETY: allocated by the main thread from c, freed once.
                unsafe { c.free(nn(p)) };
            }
            assert_eq!(c.slots_in_my_front(), 0, "the first frees went home");
            // SAFETY: as above.
            unsafe { c.free(nn(a[HOME])) };
            assert_eq!(c.slots_in_my_front(), 1, "the next free opened the front");
            for &p in &a[HOME + 1..] {
                // SAFETY: as above.
                unsafe { c.free(nn(p)) };
            }
            assert!(c.slots_in_my_front() > 0, "remote frees opened no front");
            assert_eq!(c.live_objects(), 0);
            let freed: HashSet<usize> = a.iter().copied().collect();
            let again: Vec<_> = (0..10).map(|_| c.alloc().unwrap()).collect();
            assert!(
                again.iter().all(|q| freed.contains(&(q.as_ptr() as usize))),
                "the freeing thread did not reuse what it freed"
            );
            let distinct: HashSet<_> = again.iter().collect();
            assert_eq!(distinct.len(), again.len(), "a slot handed out twice");
            for q in again {
                // SAFETY: allocated just above, freed once.
                unsafe { c.free(q) };
            }
            slabcg::allocator::testing::check_invariants();
        });
        h.join().unwrap();
    });
    assert_eq!(c.live_objects(), 0);
}

/// A consumer's front (a thread that only frees the cache's objects) gives back half of its
/// full bin a few times, then all of it each time, as a size class's bin does
/// (`bin::DRY_GIVE_BACKS`); every slot stays accounted for.
#[test]
fn a_consumers_front_gives_back_whole_bins() {
    let c = Cache::builder("front-consumer", layout(200)).build();
    let n = 20_000;
    let a = addrs(
        &(0..n)
            .map(|_| c.alloc().unwrap().as_ptr())
            .collect::<Vec<_>>(),
    );
    let c = &c;
    // Joined: see `same_thread_pairs_stay_in_the_front`.
    let drops = std::thread::scope(|s| {
        s.spawn(move || {
            let mut drops = Vec::new();
            let mut before = c.slots_in_my_front();
            for &p in &a {
                // SAFETY: allocated by the main thread from c, freed once.
                unsafe { c.free(nn(p)) };
                let after = c.slots_in_my_front();
                if after < before {
                    drops.push(after);
                }
                before = after;
            }
            slabcg::allocator::testing::check_invariants();
            drops
        })
        .join()
        .unwrap()
    });
    assert!(drops.len() >= 8, "too few give-backs to tell: {drops:?}");
    assert!(drops[0] > 1, "the first give-back keeps half: {drops:?}");
    assert!(
        drops[drops.len() - 5..].iter().all(|&k| k == 1),
        "a consumer's later give-backs are whole: {drops:?}"
    );
    assert_eq!(c.live_objects(), 0);
}

#[test]
fn thread_exit_gives_front_slots_back() {
    let c = Arc::new(Cache::builder("front-exit", layout(512)).build());
    let c2 = c.clone();
    // A joined (not scoped) thread: join returns after its exit hooks ran.
    std::thread::spawn(move || {
        let ps: Vec<_> = (0..100).map(|_| c2.alloc().unwrap()).collect();
        for p in ps {
            // SAFETY: allocated just above, freed once.
            unsafe { c2.free(p) };
        }
        assert!(c2.slots_in_my_front() > 0);
        assert_eq!(c2.live_objects(), 0);
    })
    .join()
    .unwrap();
    assert_eq!(
        c.slots_in_fronts(),
        0,
        "an exited thread's front still counts"
    );
    assert_eq!(c.live_objects(), 0);
    // Every slot went back to the cache (parked batches, which trim returns to their
    // slabs): nothing is handed out, so no slab stays active. Slots lost with the thread
    // would keep theirs active.
    slabcg::trim();
    assert_eq!(
        c.active_slabs(),
        0,
        "the exited thread's slots did not go back"
    );
}

#[test]
fn trim_empties_the_calling_threads_fronts() {
    let c = Cache::builder("front-trim", layout(1000)).build();
    let ps: Vec<_> = (0..100).map(|_| c.alloc().unwrap()).collect();
    for p in ps {
        // SAFETY: allocated just above, freed once.
        unsafe { c.free(p) };
    }
    assert!(c.slots_in_my_front() > 0);
    assert!(
        c.active_slabs() > 0,
        "slots in the front keep their slabs active"
    );
    slabcg::trim();
    assert_eq!(
        c.slots_in_my_front(),
        0,
        "trim left slots in this thread's front"
    );
    assert_eq!(c.active_slabs(), 0, "trim left the cache's slabs active");
    assert_eq!(c.live_objects(), 0);
    // The front works again after the trim.
    let p = c.alloc().unwrap();
    // SAFETY: allocated just above, freed once.
    unsafe { c.free(p) };
    assert_eq!(c.live_objects(), 0);
}

/// An accounted cache in a tenant: single and bulk allocations on one thread, freed with
/// single and bulk frees on two others and this one; `current_exact()` is exact while they
/// live and back to zero after, also for objects freed after the tenant's last handle dropped
/// (its parent then carries them). `stats().allocated_charged` follows.
#[test]
fn accounted_front_keeps_exact_ownership_across_threads() {
    let c = Cache::builder("front-acct", layout(120))
        .account(true)
        .build();
    let size = c.info().object_size as u64;
    let parent = Tenant::new("front-acct-parent");
    let t = parent.child("front-acct");
    let stats_before = slabcg::stats().allocated_charged;
    // The vectors are the root's: only the cache's objects are charged to t.
    let mut singles: Vec<*mut u8> = Vec::with_capacity(400);
    let mut bulk = vec![std::ptr::null_mut(); 200];
    {
        let _g = t.enter();
        warm_up(&c);
        for _ in 0..400 {
            singles.push(c.alloc().unwrap().as_ptr());
        }
        assert_eq!(c.alloc_bulk(&mut bulk), 200);
    }
    // Outside the scope: the root's, not t's.
    let unscoped: Vec<_> = (0..50).map(|_| c.alloc().unwrap()).collect();
    assert_eq!(t.current_exact(), 600 * size);
    assert_eq!(c.live_objects(), 650);
    assert_eq!(
        (slabcg::stats().allocated_charged - stats_before) as u64,
        600 * size
    );
    // Mixed across threads: thread 1 frees singles one by one and a bulk run; thread 2
    // frees bulk objects one by one and singles as a bulk run.
    let s = addrs(&singles);
    let b = addrs(&bulk);
    let c = &c;
    // Joined: see `same_thread_pairs_stay_in_the_front`.
    std::thread::scope(|sc| {
        let (s1, b1) = (s[..150].to_vec(), b[..100].to_vec());
        let h1 = sc.spawn(move || {
            for &p in &s1 {
                // SAFETY: live objects of c, each freed once.
                unsafe { c.free(nn(p)) };
            }
            let run: Vec<*mut u8> = b1.iter().map(|&p| p as *mut u8).collect();
            // SAFETY: as above.
            unsafe { c.free_bulk(&run) };
        });
        let (s2, b2) = (s[150..300].to_vec(), b[100..150].to_vec());
        let h2 = sc.spawn(move || {
            for &p in &b2 {
                // SAFETY: as above.
                unsafe { c.free(nn(p)) };
            }
            let run: Vec<*mut u8> = s2.iter().map(|&p| p as *mut u8).collect();
            // SAFETY: as above.
            unsafe { c.free_bulk(&run) };
        });
        h1.join().unwrap();
        h2.join().unwrap();
    });
    assert_eq!(t.current_exact(), 150 * size);
    assert_eq!(c.live_objects(), 200);
    assert_eq!(
        (slabcg::stats().allocated_charged - stats_before) as u64,
        150 * size
    );
    // Reallocating in the tenant from this thread's front (slots freed here, uncharged)
    // charges again; freeing the unscoped ones charges nobody.
    {
        let _g = t.enter();
        let p = c.alloc().unwrap();
        assert_eq!(t.current_exact(), 151 * size);
        // SAFETY: allocated just above, freed once.
        unsafe { c.free(p) };
    }
    for p in unscoped {
        // SAFETY: live objects of c, each freed once.
        unsafe { c.free(p) };
    }
    assert_eq!(t.current_exact(), 150 * size);
    // The tenant dies with 150 objects live: its parent carries them, and freeing them (on
    // another thread, singles and a bulk run) uncharges the parent.
    let parent_base = parent.current_exact() - 150 * size;
    drop(t);
    assert_eq!(parent.current_exact(), parent_base + 150 * size);
    let (s3, b3) = (s[300..].to_vec(), b[150..].to_vec());
    std::thread::scope(|sc| {
        let h = sc.spawn(move || {
            for &p in &s3 {
                // SAFETY: live objects of c, each freed once.
                unsafe { c.free(nn(p)) };
            }
            let run: Vec<*mut u8> = b3.iter().map(|&p| p as *mut u8).collect();
            // SAFETY: as above.
            unsafe { c.free_bulk(&run) };
        });
        h.join().unwrap();
    });
    assert_eq!(parent.current_exact(), parent_base);
    assert_eq!(c.live_objects(), 0);
    assert_eq!(slabcg::stats().allocated_charged, stats_before);
    slabcg::allocator::testing::check_invariants();
}

#[test]
fn bulk_goes_through_the_threads_front() {
    std::thread::spawn(|| {
        let c = Cache::builder("front-bulk", layout(256)).build();
        warm_up(&c);
        let mut out = [std::ptr::null_mut(); 16];
        assert_eq!(c.alloc_bulk(&mut out), 16);
        let before = c.slots_in_my_front();
        // SAFETY: every pointer came from alloc_bulk, each freed once.
        unsafe { c.free_bulk(&out) };
        assert_eq!(
            c.slots_in_my_front(),
            before + 16,
            "free_bulk bypassed the front"
        );
        let freed = addrs(&out);
        assert_eq!(c.alloc_bulk(&mut out), 16);
        assert_eq!(
            c.slots_in_my_front(),
            before,
            "alloc_bulk bypassed the front"
        );
        let mut again = addrs(&out);
        again.sort_unstable();
        let mut freed = freed;
        freed.sort_unstable();
        assert_eq!(again, freed);
        // SAFETY: as above.
        unsafe { c.free_bulk(&out) };
        assert_eq!(c.live_objects(), 0);
    })
    .join()
    .unwrap();
}
