//! Misuse of the safe accounting API: `Tenant::uncharge` of more than was charged. Alone in
//! its binary, because by design it takes the usage of the tenant's ancestors, the root
//! included, down to 0, which other tests reading the root would see.

use std::alloc::{GlobalAlloc, Layout};
use std::thread;

use slabcg::{SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn alloc_in(t: &Tenant, layout: Layout) -> *mut u8 {
    let _g = t.enter();
    // SAFETY: valid layout.
    unsafe { GLOBAL.alloc(layout) }
}

/// Uncharging more than was charged is a caller bug: usage stops at 0, and the ownership of
/// objects (whose frees uncharge through the objcg whatever happened to `uncharge`) stays
/// intact, also after the tenant is dropped.
#[test]
fn over_uncharge_stops_at_zero_and_keeps_objects_owned() {
    let parent = Tenant::new("over-parent");
    let t = parent.child("over-child");
    let l = Layout::from_size_align(4000, 8).unwrap();
    let objects: Vec<usize> = (0..32).map(|_| alloc_in(&t, l) as usize).collect();
    assert!(objects.iter().all(|&p| p != 0));
    t.charge(100, StatItem::Sock).unwrap();
    t.uncharge(1 << 40, StatItem::Sock);
    t.uncharge(u64::MAX, StatItem::Large);
    assert_eq!(t.current_exact(), 0);
    assert_eq!(parent.current_exact(), 0);
    // The stats stop at their ends too: three uncharges of 2^62 would wrap a plain sum
    // around to +2^62 (4 EiB of socket buffers); saturated, it reads 0.
    for _ in 0..3 {
        t.uncharge(1 << 62, StatItem::Sock);
    }
    assert_eq!((t.stat().sock, parent.stat().sock), (0, 0));
    // The tenant still works: charges count from 0 and its limit holds.
    t.set_max(64 << 10);
    t.charge(64 << 10, StatItem::Sock).unwrap();
    assert!(t.charge(1, StatItem::Sock).is_err());
    t.uncharge(64 << 10, StatItem::Sock);
    assert_eq!(t.current_exact(), 0);
    // Dropped with live objects: their frees, on other threads, must find their owner (in a
    // debug build a lost objcg reference panics), and nothing may come out negative.
    drop(t);
    let freer = thread::spawn(move || {
        for p in objects {
            // SAFETY: live, allocated with l, freed once.
            unsafe { GLOBAL.dealloc(p as *mut u8, l) };
        }
    });
    freer.join().unwrap();
    assert_eq!(parent.current_exact(), 0);
    let again = parent.child("over-again");
    let p = alloc_in(&again, l);
    assert!(!p.is_null());
    // SAFETY: live.
    let usable = unsafe { SlabAlloc::usable_size(p) } as u64;
    assert_eq!(parent.current_exact(), usable);
    // SAFETY: live, allocated with l.
    unsafe { GLOBAL.dealloc(p, l) };
    assert_eq!(parent.current_exact(), 0);
}
