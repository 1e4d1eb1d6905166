//! A thread keeps caching its tenant's freed objects (the object stock) after events that
//! retag it before its next allocation is charged: a drain from another thread (which takes
//! the byte stock's slot, so the retag sees no slot for the tenant), and a request that
//! follows one whose objects could not be handed over in place. Without that, every free
//! would uncharge and every allocation charge until the next change of tenant.

use std::hint::black_box;

use slabcg::allocator::testing::class_of;
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[path = "common/kept_free.rs"]
mod kept_free;
use kept_free::free_is_kept;

#[test]
fn caching_survives_a_remote_drain() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let c = class_of(256);
    let a = Tenant::new("review2-caching");
    let a2 = a.clone();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let drainer = std::thread::spawn(move || {
        wait.recv().unwrap();
        let _ = a2.current_exact();
        done.send(()).unwrap();
    });
    let held = {
        let _in = a.enter();
        for _ in 0..200 {
            drop(black_box(vec![1u8; 256]));
        }
        assert!(
            free_is_kept(c),
            "precondition: the object stock caches for the tenant"
        );
        // One object of class c stays in the tagged bin (the one free_is_kept freed).
        a.current()
    };
    // Outside the scope (no accounted allocation on this thread meanwhile), another thread
    // drains every stock: this thread's tag becomes DRAINED, its byte slot is taken.
    go.send(()).unwrap();
    finished.recv().unwrap();
    drainer.join().unwrap();
    assert!(
        a.current() < held,
        "the drain uncharged this thread's stocks"
    );
    let _in = a.enter();
    // First allocation after the drain: class c's tagged bin holds a DRAINED slot.
    for _ in 0..200 {
        drop(black_box(vec![1u8; 256]));
    }
    assert!(
        free_is_kept(c),
        "after a remote drain the thread no longer keeps its tenant's freed objects"
    );
}

/// The same through a tenant per request: the previous request left more than
/// `TRANSFER_MAX` (1,024) objects in the tagged bins, so the next request's first allocation
/// (a slot of a class whose tagged bin is non-empty) gives them back instead of
/// transferring, before that allocation made the byte slot: the new request never caches.
#[test]
fn a_request_after_a_big_one_still_caches() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let c = class_of(256);
    let customer = Tenant::new("review2-big");
    {
        let r1 = customer.child("r1");
        let _in = r1.enter();
        let mut v: Vec<Vec<u8>> = Vec::with_capacity(1100);
        for i in 0..1000 {
            v.push(black_box(vec![i as u8; 16]));
        }
        for i in 0..100 {
            v.push(black_box(vec![i as u8; 256]));
        }
        drop(v); // > 1,024 slots kept for r1, class 256 among them
    }
    let r2 = customer.child("r2");
    let _in = r2.enter();
    for _ in 0..200 {
        drop(black_box(vec![1u8; 256]));
    }
    assert!(
        free_is_kept(c),
        "the request after a big one does not keep its freed objects"
    );
}

/// Slots in this thread's bin of uncharged accounted slots of class `c` (an uncharging free
/// pushes there).
fn uncharged(c: usize) -> u32 {
    use slabcg::allocator::testing::{thread_cache, Kind};
    thread_cache::with(|tc| tc.bin(c, Kind::Accounted).count())
}

/// A thread that switches back to a live tenant and frees one of its objects before it
/// allocates (a worker polling a request again after an await) keeps the object charged
/// in its object stock, retagged for that tenant, instead of uncharging it and charging the
/// next allocation; and the usage stays exact.
#[test]
fn a_switch_back_whose_first_act_is_a_free_keeps_the_object() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let c = class_of(256);
    let svc = Tenant::new("switch-free");
    let (a, b) = (svc.child("a"), svc.child("b"));
    // The holder is allocated outside the scopes: only the 256-byte objects are charged.
    let mut held_a: Vec<Vec<u8>> = Vec::with_capacity(16);
    {
        let _in = a.enter();
        held_a.extend((0..8).map(|_| black_box(vec![1u8; 256])));
    }
    // Tenant b tags the stock, its bins left empty: one of its objects freed, then taken back.
    let held_b = {
        let _in = b.enter();
        let v = black_box(vec![2u8; 256]);
        drop(v);
        black_box(vec![3u8; 256])
    };
    let before = uncharged(c);
    {
        let _in = a.enter();
        drop(held_a.pop());
        assert_eq!(
            uncharged(c),
            before,
            "the free of a's object after the switch was uncharged"
        );
        // The next allocation takes the kept slot back.
        held_a.push(black_box(vec![4u8; 256]));
        assert_eq!(uncharged(c), before);
    }
    let size = slabcg::allocator::class_size(c) as u64;
    assert_eq!(a.current_exact(), 8 * size);
    assert_eq!(b.current_exact(), size);
    drop(held_a);
    drop(held_b);
    assert_eq!((a.current_exact(), b.current_exact()), (0, 0));
}
