//! A thread that retagged for a tenant while the tenant's stock budget was spent gets no
//! object-stock capacity at that moment (`note_retag`); once the budget has room and its
//! byte stock holds a slot for the tenant, it must start keeping the tenant's freed objects
//! (`object_stock::recheck_caching`), not charge and uncharge every object until the next
//! change of tenant.

use std::hint::black_box;
use std::sync::{Arc, Barrier};

use slabcg::accounting::{hooks, testing};
use slabcg::allocator::testing::class_of;
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[path = "common/kept_free.rs"]
mod kept_free;
use kept_free::free_is_kept;

#[test]
fn caching_resumes_once_the_budget_has_room() {
    hooks::set_idle_decay(false);
    let c = class_of(256);
    let t = Tenant::new("review2-budget");
    let budget = testing::stock_budget_slots() as usize;
    // `budget` threads take every share of t's stock budget and hold their slots.
    let charged = Arc::new(Barrier::new(budget + 1));
    let release = Arc::new(Barrier::new(budget + 1));
    let holders: Vec<_> = (0..budget)
        .map(|_| {
            let (t, charged, release) = (t.clone(), charged.clone(), release.clone());
            std::thread::spawn(move || {
                let v = {
                    let _in = t.enter();
                    black_box(vec![1u8; 256])
                };
                charged.wait();
                release.wait();
                drop(v);
            })
        })
        .collect();
    charged.wait();
    {
        // This thread retags for t past the budget: no capacity (correct for now).
        let _in = t.enter();
        for _ in 0..10 {
            drop(black_box(vec![1u8; 256]));
        }
        assert!(
            !hooks::stock_holds(t.objcg_id()),
            "precondition: past the budget"
        );
    }
    release.wait();
    for h in holders {
        h.join().unwrap(); // their shares come back at thread exit
    }
    let _in = t.enter();
    for _ in 0..200 {
        drop(black_box(vec![1u8; 256]));
    }
    assert!(
        hooks::stock_holds(t.objcg_id()),
        "precondition: this thread's byte stock now has a slot for t"
    );
    assert!(
        free_is_kept(c),
        "the budget has room and the byte stock a slot, but the object stock never caches again"
    );
}
