//! The `hardened` feature (`cargo test -p slabcg-allocator --features hardened --test
//! hardened`): a write after free that overwrites a free-list link is reported when the link
//! is next followed, a double free of a slot anywhere in the thread's bin is reported at
//! the second free, and every segment is followed by a `PROT_NONE` guard page. The checks
//! that must end the process run in a child process each.
#![cfg(feature = "hardened")]

#[path = "common/child.rs"]
mod child;

use std::alloc::{GlobalAlloc, Layout};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use child::{is_child, run_child_expect_fatal};
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

/// A read running off the end of a segment faults (SIGSEGV) instead of reaching whatever
/// is mapped next.
#[test]
fn a_read_past_a_segment_faults() {
    const NAME: &str = "a_read_past_a_segment_faults";
    if !is_child(NAME) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture"])
            .env("SLABCG_CHILD", NAME)
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSEGV),
            "{:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        return;
    }
    let p = Box::new([7u8; 64]);
    let end = (&*p as *const [u8; 64] as usize & !(SEGMENT - 1)) + SEGMENT;
    // SAFETY: deliberately invalid: the first byte past the segment.
    let v = unsafe { std::ptr::read_volatile(end as *const u8) };
    println!("not detected: {v}");
}
