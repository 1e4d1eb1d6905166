//! `stats()` counts the slots waiting in the hand-back (free, still charged, as a tagged
//! bin's) as cached, not as objects the program holds: before, once every object was freed,
//! `classes[c].objects`, `allocated` and `allocated_charged` still counted the chains a
//! consumer handed back, up to 4 MiB until the next drain or decay (found by a review).
//! Alone in its binary: the count is process-wide.

use std::hint::black_box;

use slabcg::allocator::testing::{class_of, handback_counts};
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const SIZE: usize = 64;

#[test]
fn handed_back_slots_are_not_live_objects_in_stats() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let c = class_of(SIZE);
    let a = Tenant::new("handback-stats-producer");
    let b = Tenant::new("handback-stats-consumer");
    let base = slabcg::stats().classes[c].objects;
    let a2 = a.clone();
    let objs: Vec<Vec<u8>> = std::thread::spawn(move || {
        let _in = a2.enter();
        (0..4000).map(|i| black_box(vec![i as u8; SIZE])).collect()
    })
    .join()
    .unwrap();
    let b2 = b.clone();
    std::thread::spawn(move || {
        let _in = b2.enter();
        let warm = black_box(vec![0u8; SIZE]);
        for v in objs {
            drop(black_box(v));
        }
        drop(warm);
    })
    .join()
    .unwrap();
    let h = handback_counts();
    let after = slabcg::stats().classes[c].objects;
    assert!(h.chains > 0, "the consumer handed chains back");
    // Every one of the 4,000 objects was freed; allow some noise from the harness.
    assert!(
        after <= base + 64,
        "stats() reports {} live objects of class {SIZE} B more than before, all of them freed ({} slots wait in the hand-back)",
        after - base,
        h.bytes / SIZE
    );
}
