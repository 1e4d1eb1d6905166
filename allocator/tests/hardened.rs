//! The `hardened` feature (`cargo test -p slabcg-allocator --features hardened --test
//! hardened`): a write after free that overwrites a free-list link is reported when the link
//! is next followed, a double free of a slot anywhere in the thread's bin is reported at
//! the second free, and every segment and every live large block is followed by a
//! `PROT_NONE` guard page. The checks that must end the process run in a child process each.
#![cfg(feature = "hardened")]

#[path = "common/child.rs"]
mod child;

use std::alloc::{GlobalAlloc, Layout};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use child::{is_child, run_child, run_child_expect_fatal};
use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const SEGMENT: usize = 4 << 20;

fn l48() -> Layout {
    Layout::from_size_align(48, 8).unwrap()
}

/// A write after free into a slot's first word (its free-list link), then the allocation
/// that pops the slot: the link decodes outside every segment and the pop reports it,
/// instead of handing out the address the program wrote.
#[test]
fn a_write_after_free_into_a_link_is_reported() {
    const NAME: &str = "a_write_after_free_into_a_link_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, "slabcg: fatal: corrupted free list");
    }
    // SAFETY: deliberately invalid: a write into a freed slot.
    unsafe {
        let a = GLOBAL.alloc(l48());
        let b = GLOBAL.alloc(l48());
        GLOBAL.dealloc(b, l48());
        GLOBAL.dealloc(a, l48());
        // What a program that kept a stale pointer would write: another heap address.
        *(a as *mut usize) = b as usize;
        let c = GLOBAL.alloc(l48());
        let d = GLOBAL.alloc(l48());
        println!("not detected: {c:?} {d:?}");
    }
}

/// The stored link is not the next slot's address (it is encoded), and a zeroed first
/// word (the commonest write after free) is caught too.
#[test]
fn links_are_not_plain_addresses_and_a_zeroed_link_is_reported() {
    const NAME: &str = "links_are_not_plain_addresses_and_a_zeroed_link_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(NAME, "slabcg: fatal: corrupted free list");
    }
    // SAFETY: the reads of freed slots stay inside their mapped slab; the write of 0 is the
    // deliberate write after free.
    unsafe {
        let a = GLOBAL.alloc(l48());
        let b = GLOBAL.alloc(l48());
        GLOBAL.dealloc(a, l48());
        GLOBAL.dealloc(b, l48());
        // b heads the bin and links to a.
        let w = *(b as *const usize);
        assert_ne!(w, a as usize, "the link is stored encoded");
        *(b as *mut usize) = 0;
        let c = GLOBAL.alloc(l48());
        let d = GLOBAL.alloc(l48());
        println!("not detected: {c:?} {d:?}");
    }
}

/// A double free of a slot that no longer heads the bin (another free came between): the
/// default build's fast path only catches the slot at the head, and this one would link
/// the slot into the bin twice (a cycle: the bin then hands it out again and again).
#[test]
fn a_double_free_behind_the_bin_head_is_reported() {
    const NAME: &str = "a_double_free_behind_the_bin_head_is_reported";
    if !is_child(NAME) {
        return run_child_expect_fatal(
            NAME,
            "slabcg: fatal: double free (the slot is already free in this thread's bin)",
        );
    }
    // SAFETY: deliberately invalid: the second free of a.
    unsafe {
        let a = GLOBAL.alloc(l48());
        let b = GLOBAL.alloc(l48());
        GLOBAL.dealloc(a, l48());
        GLOBAL.dealloc(b, l48());
        GLOBAL.dealloc(a, l48());
    }
    println!("not detected");
}

/// Slots handed out again are clean: their first word reads 0 (no encoded link is left to
/// the program), and freeing a live slot whose data is arbitrary is not taken for a double
/// free, over many rounds of the bins filling and flushing.
#[test]
fn live_slots_never_look_free() {
    let sizes = [8usize, 16, 48, 256, 4000];
    for round in 0..50 {
        let mut v = Vec::new();
        for (k, &s) in sizes.iter().enumerate().cycle().take(5000) {
            let l = Layout::from_size_align(s, 8).unwrap();
            // SAFETY: a valid layout; the block is written within its size.
            let p = unsafe { GLOBAL.alloc(l) };
            assert!(!p.is_null());
            // SAFETY: p holds at least 8 bytes.
            unsafe {
                assert_eq!(*(p as *const usize), 0, "an allocated slot's first word");
                *(p as *mut usize) = (round * 7919 + k) ^ p as usize;
            }
            v.push((p, l));
        }
        for (p, l) in v {
            // SAFETY: each block is live, freed once with its layout.
            unsafe { GLOBAL.dealloc(p, l) };
        }
    }
    slabcg_allocator::testing::check_invariants();
}

/// The mapping after every segment is a `PROT_NONE` page (in /proc/self/maps), and stats
/// count the guard pages.
#[test]
fn every_segment_is_followed_by_a_guard_page() {
    let p = Box::new([7u8; 64]);
    let seg = &*p as *const [u8; 64] as usize & !(SEGMENT - 1);
    let end = seg + SEGMENT;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let guard = maps.lines().find(|l| {
        let range = l.split(' ').next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        usize::from_str_radix(a, 16).unwrap() == end
            && usize::from_str_radix(b, 16).unwrap() == end + 4096
    });
    let guard = guard.unwrap_or_else(|| panic!("no mapping at {end:#x}:\n{maps}"));
    assert!(guard.contains(" ---p "), "{guard}");
    let s = slabcg_allocator::stats();
    assert!(s.guard >= 4096 && s.guard.is_multiple_of(4096), "{s}");
    assert!(s.mapped >= s.guard + SEGMENT);
}

/// Runs `test` in a child process that must die of SIGSEGV (a guard page's fault).
fn run_child_expect_sigsegv(test: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env("SLABCG_CHILD", test)
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{test}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A read running off the end of a segment faults (SIGSEGV) instead of reaching whatever
/// is mapped next.
#[test]
fn a_read_past_a_segment_faults() {
    const NAME: &str = "a_read_past_a_segment_faults";
    if !is_child(NAME) {
        return run_child_expect_sigsegv(NAME);
    }
    let p = Box::new([7u8; 64]);
    let end = (&*p as *const [u8; 64] as usize & !(SEGMENT - 1)) + SEGMENT;
    // SAFETY: deliberately invalid: the first byte past the segment.
    let v = unsafe { std::ptr::read_volatile(end as *const u8) };
    println!("not detected: {v}");
}

/// The `/proc/self/maps` line of the mapping that starts at `start`, if any.
fn mapping_at(start: usize) -> Option<(usize, String)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().find_map(|l| {
        let range = l.split(' ').next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        (a == start).then(|| (b - a, l.to_string()))
    })
}

/// Whether the page at `addr` is a guard: a `PROT_NONE` mapping of one page starts there.
fn is_guard(addr: usize) -> bool {
    matches!(mapping_at(addr), Some((4096, l)) if l.contains(" ---p "))
}

/// Fills `len` bytes at `p` and reads them back: every byte of the block is usable.
///
/// # Safety
/// `p..p+len` is a live allocation.
unsafe fn fill_and_check(p: *mut u8, len: usize, v: u8) {
    // SAFETY: caller's contract.
    unsafe {
        std::ptr::write_bytes(p, v, len);
        assert!(std::slice::from_raw_parts(p, len).iter().all(|&b| b == v));
    }
}

/// A large block's usable bytes are followed by a guard page while it lives, counted in
/// `stats().guard`; the guard follows the block's end through a shrink in place, growths
/// that move the block (`mremap`, into a huge extent) and a growth in place, and is gone
/// once the block is freed, so the cached extent a later block reuses is plain memory; an
/// over-aligned block has one too. (Gathered extents: `retention.rs`, run hardened in CI.)
#[test]
fn every_large_block_is_followed_by_a_guard_page() {
    // In a child of its own: `stats().guard` counts every segment's guard too, and the
    // other tests' threads map segments.
    const NAME: &str = "every_large_block_is_followed_by_a_guard_page";
    if !is_child(NAME) {
        return run_child(NAME);
    }
    let l = Layout::from_size_align(300_000, 8).unwrap();
    let before = slabcg_allocator::stats().guard;
    // SAFETY: a non-zero size; each pointer below is live when used and freed once.
    unsafe {
        // Nothing between the two `stats()` but the large allocation (reading the maps
        // allocates, and may map a segment with its own guard).
        let p = GLOBAL.alloc(l);
        assert_eq!(slabcg_allocator::stats().guard, before + 4096);
        assert!(!p.is_null());
        let usable = SlabAlloc::usable_size(p);
        assert_eq!(usable, 300_000usize.next_multiple_of(4096));
        assert!(
            is_guard(p as usize + usable),
            "no guard after {p:?}+{usable}"
        );
        fill_and_check(p, usable, 1);

        // Shrink in place: the guard moves down to the new end.
        let q = GLOBAL.realloc(p, l, 150_000);
        assert_eq!(q, p, "a shrink stays in place");
        let u2 = SlabAlloc::usable_size(q);
        assert!(u2 < usable);
        assert!(is_guard(q as usize + u2), "no guard after the shrink");
        fill_and_check(q, u2, 2);

        // Growth past the extent (moved or grown by mremap), then into a huge extent.
        let l2 = Layout::from_size_align(150_000, 8).unwrap();
        let r = GLOBAL.realloc(q, l2, 1_000_000);
        assert!(!r.is_null());
        let u3 = SlabAlloc::usable_size(r);
        assert!(is_guard(r as usize + u3), "no guard after the growth");
        assert!(std::slice::from_raw_parts(r, u2).iter().all(|&b| b == 2));
        fill_and_check(r, u3, 3);
        let l3 = Layout::from_size_align(1_000_000, 8).unwrap();
        let s = GLOBAL.realloc(r, l3, 5 << 20);
        assert!(!s.is_null());
        let u4 = SlabAlloc::usable_size(s);
        assert!(is_guard(s as usize + u4), "no guard after the huge growth");
        fill_and_check(s, u4, 4);

        let l4 = Layout::from_size_align(5 << 20, 8).unwrap();
        GLOBAL.dealloc(s, l4);

        // Growth in place, inside a huge extent's slack: the old guard page becomes usable.
        let l5 = Layout::from_size_align(3 << 20, 8).unwrap();
        let a = GLOBAL.alloc(l5);
        assert!(!a.is_null());
        let ua = SlabAlloc::usable_size(a);
        assert!(is_guard(a as usize + ua));
        let b = GLOBAL.realloc(a, l5, (3 << 20) + (512 << 10));
        assert_eq!(b, a, "a growth within the extent stays in place");
        let ub = SlabAlloc::usable_size(b);
        assert!(
            is_guard(b as usize + ub),
            "no guard after the growth in place"
        );
        fill_and_check(b, ub, 6);

        // Freed: no guard left, and the extent is cached; the block that takes it back can
        // use all of it.
        let l6 = Layout::from_size_align((3 << 20) + (512 << 10), 8).unwrap();
        let (live, cached) = (
            slabcg_allocator::stats().guard,
            slabcg_allocator::testing::large_cached(),
        );
        GLOBAL.dealloc(b, l6);
        assert_eq!(slabcg_allocator::stats().guard, live - 4096);
        assert!(
            slabcg_allocator::testing::large_cached() > cached,
            "the freed extent was not cached"
        );
        assert!(!is_guard(b as usize + ub), "a freed block kept its guard");
        let t = GLOBAL.alloc(l6);
        assert_eq!(t, b, "the cached extent was not reused");
        let u5 = SlabAlloc::usable_size(t);
        fill_and_check(t, u5, 5);
        assert!(is_guard(t as usize + u5));
        GLOBAL.dealloc(t, l6);

        // An over-aligned block (its own mapping, trimmed to the alignment) is guarded too.
        let l7 = Layout::from_size_align(200_000, 1 << 16).unwrap();
        let o = GLOBAL.alloc(l7);
        assert!(!o.is_null() && (o as usize).is_multiple_of(1 << 16));
        let uo = SlabAlloc::usable_size(o);
        assert!(
            is_guard(o as usize + uo),
            "no guard after an over-aligned block"
        );
        fill_and_check(o, uo, 7);
        GLOBAL.dealloc(o, l7);
    }
    slabcg_allocator::testing::check_invariants();
    println!("CHILD-OK");
}

/// A write running one byte past a large block's usable bytes faults (SIGSEGV) instead of
/// reaching whatever the extent or the next mapping holds.
#[test]
fn a_write_past_a_large_block_faults() {
    const NAME: &str = "a_write_past_a_large_block_faults";
    if !is_child(NAME) {
        return run_child_expect_sigsegv(NAME);
    }
    let mut v = vec![0u8; 3 << 20];
    let usable = v.capacity().next_multiple_of(4096);
    // SAFETY: deliberately invalid: the first byte past the block's usable bytes.
    unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(usable), 1) };
    println!("not detected");
}
