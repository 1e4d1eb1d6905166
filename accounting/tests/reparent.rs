//! Reparenting. In its own test binary, run as one test, because it checks that an objcg id
//! is freed, which a concurrently created tenant could otherwise reuse at once.

mod common;

use common::{charge, give_back};
use slabcg_accounting::hooks::{self, StatIdx};
use slabcg_accounting::testing;
use slabcg_accounting::{drain_all_stocks, Tenant};
use std::thread;

#[test]
fn reparenting_all() {
    reparenting();
    reparenting_two_levels();
    forwarded_frees_on_a_live_thread();
}

/// Drop a tenant with live charges; uncharge later via its objcg id: the parent ends at 0,
/// the objcg is freed.
fn reparenting() {
    let parent = Tenant::new("reparent-parent");
    let child = parent.child("reparent-child");
    let id = child.objcg_id();
    {
        let _g = child.enter();
        assert!(charge(hooks::current_objcg(), 1000, StatIdx::slab(3)));
        assert!(charge(hooks::current_objcg(), 300, StatIdx::LARGE));
    }
    assert_eq!(child.current_exact(), 1300);
    drop(child);
    assert_eq!(parent.current_exact(), 1300);
    assert!(testing::objcg_live(id), "live charges keep the objcg");
    // A grandchild dying too: objcgs inherited by the parent move up again.
    thread::spawn(move || {
        give_back(id, 1000, StatIdx::slab(3));
        give_back(id, 300, StatIdx::LARGE);
    })
    .join()
    .unwrap();
    assert_eq!(parent.current_exact(), 0);
    drain_all_stocks();
    assert!(!testing::objcg_live(id), "zombie freed");
    let st = parent.stat();
    assert_eq!((st.slab, st.large), (0, 0));
}

/// Two-level reparenting: grandchild dies, then its parent; charges land on the survivor.
fn reparenting_two_levels() {
    let top = Tenant::new("rp2-top");
    let mid = top.child("rp2-mid");
    let leaf = mid.child("rp2-leaf");
    let id = leaf.objcg_id();
    assert!(charge(id, 5000, StatIdx::slab(0)));
    drop(leaf);
    drop(mid);
    assert_eq!(top.current_exact(), 5000);
    give_back(id, 5000, StatIdx::slab(0));
    assert_eq!(top.current_exact(), 0);
    drain_all_stocks();
    assert!(!testing::objcg_live(id));
}

/// A dead child's objects freed on a thread whose stock has a slot for the parent are
/// forwarded there (`charge::forward`): the parent's usage stays exact, and the refs the
/// forwarding entry owes are put by a drain, so the dead child's objcg is freed then, while
/// this thread lives on.
fn forwarded_frees_on_a_live_thread() {
    let parent = Tenant::new("fwd-parent");
    // A slot for the parent in this thread's stock.
    assert!(charge(parent.objcg_id(), 100, StatIdx::slab(1)));
    let child = parent.child("fwd-child");
    let id = child.objcg_id();
    for _ in 0..4 {
        assert!(charge(id, 200, StatIdx::slab(2)));
    }
    drop(child);
    assert_eq!(parent.current_exact(), 900);
    // The first free makes the entry, the next ones find it.
    for _ in 0..4 {
        give_back(id, 200, StatIdx::slab(2));
    }
    assert_eq!(parent.current_exact(), 100);
    let st = parent.stat();
    assert_eq!(st.slab, 100);
    drain_all_stocks();
    assert!(
        !testing::objcg_live(id),
        "the forwarding entry's refs were put"
    );
    give_back(parent.objcg_id(), 100, StatIdx::slab(1));
    assert_eq!(parent.current_exact(), 0);
}
