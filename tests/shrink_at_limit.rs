//! A `realloc` that shrinks a block into a smaller size class (from a larger class or from a
//! large block) moves it to a fresh slot. In a tenant at its limit that new slot used to be
//! charged like any allocation and refused, although the shrink lowers the tenant's usage;
//! `Vec::shrink_to_fit` then aborted the process (found by a bug hunt). Now the charge moves
//! with the block (`charge.rs`, `realloc_shrink_small`, `realloc_shrink_large`), for the C
//! `realloc` too (`raw::realloc`).

use std::alloc::{GlobalAlloc, Layout};

use slabcg::{SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const MAX: u64 = 1 << 20;

/// A tenant limited to `MAX`, holding a block of `layout`, filled to its limit with Sock
/// bytes; returns the block and the Sock bytes to give back.
fn full_tenant_with_block(name: &str, layout: Layout) -> (Tenant, *mut u8, u64) {
    let t = Tenant::new(name);
    t.set_max(MAX);
    let p = {
        let _g = t.enter();
        // SAFETY: layouts here have a non-zero size.
        unsafe { GLOBAL.alloc(layout) }
    };
    assert!(!p.is_null());
    // SAFETY: p holds layout.size() writable bytes.
    unsafe { std::ptr::write_bytes(p, 0xA5, layout.size()) };
    let room = MAX - t.current_exact();
    t.charge(room, StatItem::Sock).unwrap();
    assert_eq!(t.current_exact(), MAX);
    (t, p, room)
}

#[test]
fn shrink_across_classes_succeeds_at_the_limit() {
    for (from, to, align) in [
        (4096usize, 100usize, 8usize),
        (1024, 512, 8),
        (1000, 24, 64),
        // Large blocks shrinking into a size class.
        (300_000, 100, 8),
        (200_000, 100_000, 64),
    ] {
        let layout = Layout::from_size_align(from, align).unwrap();
        let (t, p, room) = full_tenant_with_block("shrink", layout);
        let events = t.events();
        let q = {
            let _g = t.enter();
            // SAFETY: p is live with `layout`; `to` is non-zero.
            unsafe { GLOBAL.realloc(p, layout, to) }
        };
        assert!(
            !q.is_null(),
            "shrink {from} -> {to} (align {align}) refused at the limit"
        );
        assert_eq!(q as usize % align, 0);
        // SAFETY: q holds at least `to` bytes, copied from p.
        assert!(unsafe { std::slice::from_raw_parts(q, to) }
            .iter()
            .all(|&b| b == 0xA5));
        assert_eq!(t.events(), events, "a shrink counts no limit event");
        let st = t.stat();
        assert!(st.current < MAX, "usage dropped: {}", st.current);
        assert_eq!(st.large, 0);
        assert_eq!(
            st.slab,
            st.current - st.sock,
            "the slab bytes are the new block's"
        );
        // SAFETY: q is live with the new layout.
        unsafe { GLOBAL.dealloc(q, Layout::from_size_align(to, align).unwrap()) };
        t.uncharge(room, StatItem::Sock);
        assert_eq!(t.current_exact(), 0);
        let st = t.stat();
        assert_eq!((st.slab, st.large, st.sock), (0, 0, 0));
    }
}

/// Through std, as a program does it: this aborted the process.
#[test]
fn vec_shrink_to_fit_at_the_limit() {
    let t = Tenant::new("vec-shrink");
    t.set_max(MAX);
    let room;
    {
        let _g = t.enter();
        let mut v: Vec<u8> = Vec::with_capacity(4096);
        v.extend_from_slice(&[7u8; 100]);
        room = MAX - t.current_exact();
        t.charge(room, StatItem::Sock).unwrap();
        v.shrink_to_fit();
        assert_eq!(v.capacity(), 100);
        assert!(v.iter().all(|&b| b == 7));
    }
    t.uncharge(room, StatItem::Sock);
    assert_eq!(t.current_exact(), 0);
}

/// A block of another tenant moves to the caller's tenant on a moving realloc (README), so
/// a full caller's tenant still refuses it, and the block stays where it was, charged to
/// its owner.
#[test]
fn shrink_of_another_tenants_block_is_refused_when_full() {
    let owner = Tenant::new("shrink-owner");
    let layout = Layout::from_size_align(4096, 8).unwrap();
    let p = {
        let _g = owner.enter();
        // SAFETY: non-zero size.
        unsafe { GLOBAL.alloc(layout) }
    };
    assert!(!p.is_null());
    let held = owner.current_exact();
    let (full, filler, room) = full_tenant_with_block("shrink-full", Layout::new::<u64>());
    let q = {
        let _g = full.enter();
        // SAFETY: p is live with `layout`.
        unsafe { GLOBAL.realloc(p, layout, 100) }
    };
    assert!(q.is_null());
    assert_eq!(owner.current_exact(), held);
    assert_eq!(full.current_exact(), MAX);
    // SAFETY: p is still live with `layout`; `filler` with its own.
    unsafe {
        GLOBAL.dealloc(p, layout);
        GLOBAL.dealloc(filler, Layout::new::<u64>());
    }
    full.uncharge(room, StatItem::Sock);
    assert_eq!((owner.current_exact(), full.current_exact()), (0, 0));
}

/// Below the limit the same moves take their bytes from the thread's stock; either way the
/// tenant ends up charged exactly what a fresh block of the new size costs.
#[test]
fn shrink_moves_the_charge_exactly() {
    for (from, to) in [(4096usize, 100usize), (300_000, 100), (1024, 512)] {
        let (old, new) = (
            Layout::from_size_align(from, 8).unwrap(),
            Layout::from_size_align(to, 8).unwrap(),
        );
        let fresh = Tenant::new("shrink-fresh");
        let t = Tenant::new("shrink-exact");
        // SAFETY: non-zero sizes.
        let (p, f) = unsafe {
            let g = t.enter();
            let p = GLOBAL.alloc(old);
            drop(g);
            let _f = fresh.enter();
            (p, GLOBAL.alloc(new))
        };
        assert!(!p.is_null() && !f.is_null());
        let q = {
            let _g = t.enter();
            // SAFETY: p is live with `old`.
            unsafe { GLOBAL.realloc(p, old, to) }
        };
        assert!(!q.is_null());
        assert_eq!(t.current_exact(), fresh.current_exact(), "{from} -> {to}");
        let (st, sf) = (t.stat(), fresh.stat());
        assert_eq!((st.slab, st.large), (sf.slab, sf.large));
        assert_eq!(st.slab_classes, sf.slab_classes, "per-class bytes");
        // SAFETY: q and f are live with `new`.
        unsafe {
            GLOBAL.dealloc(q, new);
            GLOBAL.dealloc(f, new);
        }
        assert_eq!((t.current_exact(), fresh.current_exact()), (0, 0));
    }
}

/// A large block aligned above a page shrinking into another such block: the tail is
/// unmapped in place, the alignment stays, and the charge drops by the difference. It used
/// to allocate the new block first, which a full tenant refused.
#[test]
fn shrink_of_a_block_aligned_above_a_page_stays_in_place_at_the_limit() {
    const ALIGN: usize = 64 << 10;
    let (from, to) = (600_000usize, 200_000usize);
    let layout = Layout::from_size_align(from, ALIGN).unwrap();
    let (t, p, room) = full_tenant_with_block("shrink-aligned", layout);
    let before = t.stat().large;
    let q = {
        let _g = t.enter();
        // SAFETY: p is live with `layout`; `to` is non-zero.
        unsafe { GLOBAL.realloc(p, layout, to) }
    };
    assert_eq!(q, p, "shrunk in place");
    assert_eq!(q as usize % ALIGN, 0);
    // SAFETY: q holds at least `to` bytes, unchanged.
    assert!(unsafe { std::slice::from_raw_parts(q, to) }
        .iter()
        .all(|&b| b == 0xA5));
    let st = t.stat();
    assert!(
        st.large < before,
        "the charge dropped: {} -> {}",
        before,
        st.large
    );
    // SAFETY: q is a live allocation of GLOBAL.
    assert_eq!(st.large as usize, unsafe { SlabAlloc::usable_size(q) });
    assert_eq!(st.current, st.large + st.sock);
    // SAFETY: q is live with the new layout.
    unsafe { GLOBAL.dealloc(q, Layout::from_size_align(to, ALIGN).unwrap()) };
    t.uncharge(room, StatItem::Sock);
    assert_eq!(t.current_exact(), 0);
}

/// The C `realloc` (`raw::realloc`, which libslabcg's `realloc` calls) moves the charge the
/// same way: a large block, and a small block aligned above a page (`memalign`, a large
/// block too), shrunk into a size class at the limit.
#[test]
fn c_realloc_shrinks_into_a_class_at_the_limit() {
    use slabcg::allocator::raw;
    for (name, size, align, to) in [
        ("c-shrink-large", 300_000usize, 8usize, 112usize),
        ("c-shrink-memalign", 3000, 8192, 100),
    ] {
        let t = Tenant::new(name);
        t.set_max(MAX);
        // In the tenant only for the allocation and the realloc: at its limit, a failed
        // assertion's message could not be allocated there.
        let (p, room) = {
            let _g = t.enter();
            let p = raw::alloc(size, align);
            assert!(!p.is_null());
            // SAFETY: p holds size writable bytes.
            unsafe { std::ptr::write_bytes(p, 0x5A, size) };
            (p, MAX - t.current_exact())
        };
        t.charge(room, StatItem::Sock).unwrap();
        let q = {
            let _g = t.enter();
            // SAFETY: p is live; on success it is freed.
            unsafe { raw::realloc(p, to) }
        };
        let full = t.current_exact();
        t.uncharge(room, StatItem::Sock);
        assert!(!q.is_null(), "{name}: a shrink refused at the limit");
        assert!(full < MAX, "{name}: the shrink lowered the usage");
        // SAFETY: q holds at least `to` bytes, the first `to` of p's.
        assert!(
            (0..to).all(|i| unsafe { *q.add(i) } == 0x5A),
            "{name}: contents"
        );
        // SAFETY: q is live, freed once.
        unsafe { raw::free(q) };
        assert_eq!(t.current_exact(), 0, "{name}: nothing left charged");
    }
}
