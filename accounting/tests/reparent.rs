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
