//! A same-thread `TypedCache` pair that must go through the thread's front: shared by
//! `tests/typed_cache.rs` (an unaccounted cache, its front's bin) and
//! `tests/dedicated_kept.rs` (an accounted one in a tenant, its kept bin).

use slabcg::{Cache, TypedCache};

/// Warms `cache`'s front with `warm` boxes (past `front::WARM_ALLOCS`, the locked
/// allocations before a front opens), then checks that a dropped box's slot lands in the bin
/// that `held` counts, that the next allocation takes that very slot back, and that neither
/// took a front slow path. Were the front's tag compare to miss (the fast paths of `alloc`
/// and of the box's drop dispatch on it), an accounted slot would be uncharged into the
/// plain bin, and an unaccounted one would go through the slow paths, which push and pop the
/// same bin: the count of slow paths is what tells.
pub fn pair_goes_through(
    cache: &TypedCache<[u64; 6]>,
    warm: usize,
    held: impl Fn(&Cache) -> usize,
    what: &str,
) {
    let boxes: Vec<_> = (0..warm)
        .map(|i| cache.alloc([i as u64; 6]).unwrap())
        .collect();
    drop(boxes);
    let b = cache.alloc([7; 6]).unwrap();
    let addr = &*b as *const [u64; 6] as usize;
    let n = held(cache.cache());
    let slow = Cache::front_slow_paths_on_this_thread();
    drop(b);
    assert_eq!(
        held(cache.cache()),
        n + 1,
        "the drop put the slot in {what}"
    );
    let b = cache.alloc([8; 6]).unwrap();
    assert_eq!(
        &*b as *const [u64; 6] as usize, addr,
        "the next alloc took it back from {what}"
    );
    assert_eq!(held(cache.cache()), n);
    assert_eq!(
        Cache::front_slow_paths_on_this_thread(),
        slow,
        "the pair took a front slow path"
    );
}
