//! Typed caches: `TypedCache<T>` keeps values in a dedicated cache behind `CacheBox`, which
//! drops the value once and frees its slot; a box's pair stays in the thread's front; a
//! refused charge gives the value back intact; zero-sized and over-aligned types; shared by
//! threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use slabcg::{Cache, CacheBox, SlabAlloc, Tenant, TenantAlloc, TypedCache};

#[path = "common/typed_pair.rs"]
mod typed_pair;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[derive(Debug, PartialEq)]
struct Request {
    id: u64,
    body: [u8; 200],
}

#[test]
fn values_live_in_the_cache_and_leave_with_their_box() {
    let c: TypedCache<Request> = TypedCache::new("typed-basic", false);
    assert!(c.cache().info().object_size >= std::mem::size_of::<Request>());
    let mut boxes: Vec<CacheBox<'_, Request>> = (0..100)
        .map(|i| {
            c.alloc(Request {
                id: i,
                body: [i as u8; 200],
            })
            .ok()
            .unwrap()
        })
        .collect();
    assert_eq!(c.cache().live_objects(), 100);
    for b in &mut boxes {
        b.id *= 2;
    }
    for (i, b) in boxes.iter().enumerate() {
        assert_eq!(b.id, 2 * i as u64);
        assert!(b.body.iter().all(|&x| x == i as u8));
    }
    let last = CacheBox::into_inner(boxes.pop().unwrap());
    assert_eq!(last.id, 198);
    assert_eq!(c.cache().live_objects(), 99);
    drop(boxes);
    assert_eq!(c.cache().live_objects(), 0);
}

static DROPS: AtomicUsize = AtomicUsize::new(0);

struct Counted(#[allow(dead_code)] [u64; 8]);
impl Drop for Counted {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

/// A same-thread pair of an unaccounted cache goes through the thread's front on its fast
/// paths: the dropped box's slot is the front's next one out, and no front slow path ran
/// (`typed_pair`). The accounted twin, which drains elsewhere in this file would disturb,
/// is in `dedicated_kept.rs`.
#[test]
fn a_boxs_pair_stays_in_the_threads_front() {
    // Past the warm-up (`front::WARM_ALLOCS` locked allocations), with room left.
    const WARM: usize = 16;
    let plain: TypedCache<[u64; 6]> = TypedCache::new("typed-front-plain", false);
    typed_pair::pair_goes_through(&plain, WARM, Cache::slots_in_my_front, "the front");
}

#[test]
fn dropping_a_box_runs_the_destructor_once() {
    let c = TypedCache::new("typed-drop", true);
    let before = DROPS.load(Ordering::SeqCst);
    let b = c.alloc(Counted([7; 8])).ok().unwrap();
    assert_eq!(DROPS.load(Ordering::SeqCst), before);
    drop(b);
    assert_eq!(DROPS.load(Ordering::SeqCst), before + 1);
    assert_eq!(c.cache().live_objects(), 0);
    // into_inner moves the value out without dropping it; it drops once, later.
    let v = CacheBox::into_inner(c.alloc(Counted([1; 8])).ok().unwrap());
    assert_eq!(DROPS.load(Ordering::SeqCst), before + 1);
    assert_eq!(c.cache().live_objects(), 0);
    drop(v);
    assert_eq!(DROPS.load(Ordering::SeqCst), before + 2);
}

#[test]
fn a_refused_charge_gives_the_value_back() {
    let c: TypedCache<Request> = TypedCache::new("typed-limit", true);
    let each = c.cache().info().object_size as u64;
    let t = Tenant::new("typed-limit");
    t.set_max(64 << 10);
    // Never grows inside the scope: only the cache's objects are charged.
    let mut kept = Vec::with_capacity(10_000);
    let refused = {
        let _g = t.enter();
        loop {
            let id = kept.len() as u64;
            match c.alloc(Request {
                id,
                body: [0xab; 200],
            }) {
                Ok(b) => kept.push(b),
                Err(v) => break v,
            }
            assert!(kept.len() < 10_000, "the limit never refused");
        }
    };
    assert_eq!(
        refused,
        Request {
            id: kept.len() as u64,
            body: [0xab; 200]
        },
        "the refused value changed"
    );
    assert!(t.events().max >= 1);
    assert_eq!(t.current_exact(), kept.len() as u64 * each);
    assert!(t.current_exact() <= 64 << 10);
    // Dropped on another thread, in no scope: the tenant is uncharged.
    // Joined, not only waited for: a scope's end does not wait for the thread's exit
    // (rust-lang/rust#116179), where its front's slots go back to the cache.
    std::thread::scope(|s| {
        s.spawn(move || drop(kept)).join().unwrap();
    });
    assert_eq!(t.current_exact(), 0);
    assert_eq!(c.cache().live_objects(), 0);
}

static ZST_DROPS: AtomicUsize = AtomicUsize::new(0);
struct Marker;
impl Drop for Marker {
    fn drop(&mut self) {
        ZST_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

#[repr(align(64))]
struct Line([u8; 64]);
#[repr(align(4096))]
struct Page(u8);

#[test]
fn zero_sized_and_over_aligned_types() {
    // A zero-sized type takes no slot and is never refused, but its destructor runs.
    let c = TypedCache::new("typed-zst", true);
    let t = Tenant::new("typed-zst");
    t.set_max(0);
    let b = {
        let _g = t.enter();
        c.alloc(Marker)
            .ok()
            .expect("a zero-sized value was refused")
    };
    assert_eq!(c.cache().live_objects(), 0);
    assert_eq!(t.current_exact(), 0);
    drop(b);
    assert_eq!(ZST_DROPS.load(Ordering::SeqCst), 1);

    let lines = TypedCache::new("typed-line", false);
    let pages = TypedCache::new("typed-page", true);
    let mut keep = Vec::new();
    for i in 0..50u8 {
        let l = lines.alloc(Line([i; 64])).ok().unwrap();
        assert!((&*l as *const Line as usize).is_multiple_of(64));
        let p = pages.alloc(Page(i)).ok().unwrap();
        assert!((&*p as *const Page as usize).is_multiple_of(4096));
        keep.push((l, p));
    }
    for (i, (l, p)) in keep.iter().enumerate() {
        assert!(l.0.iter().all(|&x| x == i as u8));
        assert_eq!(p.0, i as u8);
    }
    drop(keep);
    assert_eq!(
        lines.cache().live_objects() + pages.cache().live_objects(),
        0
    );

    #[repr(align(8192))]
    struct TooAligned(#[allow(dead_code)] u8);
    assert!(TypedCache::<TooAligned>::try_new("typed-8k", false).is_err());
}

fn send_sync<T: Send + Sync>() {}

#[test]
fn caches_and_handles_are_shared_by_threads() {
    // Cell<u32> is Send but not Sync: the cache is still Send + Sync.
    send_sync::<TypedCache<Cell<u32>>>();
    send_sync::<TypedCache<Request>>();
    send_sync::<slabcg::Cache>();
    send_sync::<TenantAlloc>();
    send_sync::<CacheBox<'static, Request>>();

    let c: TypedCache<Request> = TypedCache::new("typed-threads", true);
    let t = Tenant::new("typed-threads");
    // Joined: see above.
    std::thread::scope(|s| {
        let mut hs = Vec::new();
        for k in 0..4u64 {
            let (c, t) = (&c, &t);
            hs.push(s.spawn(move || {
                let _g = t.enter();
                let v: Vec<_> = (0..500)
                    .map(|i| {
                        c.alloc(Request {
                            id: k * 1000 + i,
                            body: [k as u8; 200],
                        })
                        .ok()
                        .unwrap()
                    })
                    .collect();
                assert!(v
                    .iter()
                    .enumerate()
                    .all(|(i, b)| b.id == k * 1000 + i as u64));
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
    });
    assert_eq!(c.cache().live_objects(), 0);
    assert_eq!(t.current_exact(), 0);
}
