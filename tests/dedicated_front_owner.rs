//! An accounted dedicated cache's front and its owner words: for every owner-word placement
//! (per-slot padding, the slab's tail, the carved array, and cache-line padding), objects
//! allocated through the front and through its slow path and freed through both, here and
//! on a thread whose front is closed, leave their tenant exact: a word computed in the
//! wrong place is clobbered by the object's own bytes or read as the wrong owner. (Written
//! for a per-bin copy of the geometry, which was measured and not kept: no gain.)

use std::alloc::Layout;

use slabcg::{Cache, MetaPlacement, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// Locked allocations before a thread's front opens (`front::WARM_ALLOCS`), plus one.
const WARM: usize = 9;
/// Objects each round holds at once: more than the refills hand the front at a time, so
/// both the fast pops and the slow path's slots are among them.
const HELD: usize = 400;

fn nn(a: usize) -> std::ptr::NonNull<u8> {
    std::ptr::NonNull::new(a as *mut u8).unwrap()
}

#[test]
fn front_owner_words_are_exact_for_every_placement() {
    let cases = [
        (
            "fo-pad",
            Layout::from_size_align(100, 8).unwrap(),
            false,
            MetaPlacement::Padding,
        ),
        (
            "fo-hw",
            Layout::from_size_align(200, 8).unwrap(),
            true,
            MetaPlacement::Padding,
        ),
        (
            "fo-tail",
            Layout::from_size_align(2312, 8).unwrap(),
            false,
            MetaPlacement::Leftover,
        ),
        (
            "fo-ext",
            Layout::from_size_align(64, 8).unwrap(),
            false,
            MetaPlacement::External,
        ),
        (
            "fo-xfs",
            Layout::from_size_align(992, 64).unwrap(),
            false,
            MetaPlacement::Padding,
        ),
    ];
    for (name, layout, hw, meta) in cases {
        let c = Cache::builder(name, layout)
            .hwcache_align(hw)
            .account(true)
            .build();
        assert_eq!(c.info().meta, meta, "{name}");
        let size = c.info().object_size;
        let t = Tenant::new(name);
        // Open this thread's front outside any tenant (owner 0 objects).
        let ps: Vec<_> = (0..WARM).map(|_| c.alloc().unwrap()).collect();
        for p in ps {
            // SAFETY: allocated just above from c, freed once.
            unsafe { c.free(p) };
        }
        assert!(c.slots_in_my_front() > 0, "{name}: the front did not open");
        let mut held = Vec::with_capacity(HELD);
        let mut plain = Vec::with_capacity(HELD);
        for round in 0..3 {
            {
                let _g = t.enter();
                for _ in 0..HELD {
                    held.push(c.alloc().unwrap().as_ptr() as usize);
                }
            }
            // Objects of no tenant from the same front, between them.
            for _ in 0..HELD / 4 {
                plain.push(c.alloc().unwrap().as_ptr() as usize);
            }
            for &a in held.iter().chain(&plain) {
                // SAFETY: a live object of `size` bytes, the caller's.
                unsafe { std::ptr::write_bytes(a as *mut u8, 0xA5, size) };
            }
            assert_eq!(
                t.current_exact(),
                (HELD * size) as u64,
                "{name} round {round}: charged"
            );
            // Half freed here (the front's geometry), half on a thread whose front of this
            // cache is closed (the segment header), in and out of the tenant's scope.
            let theirs = held.split_off(HELD / 2);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for &a in &theirs {
                        // SAFETY: a live object of c, freed once.
                        unsafe { c.free(nn(a)) };
                    }
                });
            });
            {
                let _g = t.enter();
                for a in held.drain(..) {
                    // SAFETY: a live object of c, freed once.
                    unsafe { c.free(nn(a)) };
                }
            }
            assert_eq!(t.current_exact(), 0, "{name} round {round}: uncharged");
            for a in plain.drain(..) {
                // SAFETY: a live object of c, freed once.
                unsafe { c.free(nn(a)) };
            }
            assert_eq!(
                t.current_exact(),
                0,
                "{name} round {round}: owner 0 objects"
            );
            assert_eq!(c.live_objects(), 0, "{name} round {round}: live");
        }
    }
}
