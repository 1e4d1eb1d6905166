//! glibc's vector `memcmp` reads a short string with one masked load of a whole vector from
//! its address, past the data; when the masked-off bytes reach a page that is not present,
//! the CPU takes a fault-suppression assist of hundreds of cycles on every call. So the 64
//! bytes after any byte of a live object of the short-string classes (up to 64 bytes) must
//! lie in memory that is present: those classes end every slab with `slab::VECTOR_TAIL`
//! unused bytes, and the read stays in the object's own one-page slab.
//!
//! The test fills slabs of each such class, frees every slab of alternate 64 KiB blocks, and
//! trims, which releases those slabs to the OS (`MADV_DONTNEED`: not present until touched;
//! the test checks that some were). Each surviving object's 64 bytes are then checked with
//! `mincore`. Without the tail, the last slot of a slab before a released one fails. It runs
//! in a child process, so that no other test's objects keep slabs alive.

#[path = "common/child.rs"]
mod child;

use std::alloc::{alloc, dealloc, Layout};

use child::{is_child, run_child};
use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const PAGE: usize = 4096;
/// The widest vector a string routine may read (AVX-512; glibc 2.36's `memcmp` reads 32).
const WINDOW: usize = 64;
/// Slabs of the classes below are one page, so freeing every object in a block of this size
/// empties whole slabs.
const BLOCK: usize = 64 << 10;

/// Whether the page holding `addr` is present in this process.
fn resident(addr: usize) -> bool {
    let page = addr & !(PAGE - 1);
    let mut v = 0u8;
    // SAFETY: one page, one byte of output; mincore only reads the page tables.
    let r = unsafe { libc::mincore(page as *mut libc::c_void, PAGE, &mut v) };
    // ENOMEM: not mapped at all, which is as bad as not present.
    r == 0 && v & 1 == 1
}

fn check_class(size: usize) -> usize {
    let layout = Layout::from_size_align(size, 8).unwrap();
    // Enough objects for several 64 KiB blocks of slabs.
    let n = 6 * BLOCK / size;
    let mut objs: Vec<usize> = (0..n)
        .map(|_| {
            // SAFETY: a non-zero size.
            let p = unsafe { alloc(layout) };
            assert!(!p.is_null());
            // Write the whole object, as its user would: its pages are present.
            // SAFETY: p holds `size` bytes.
            unsafe { p.write_bytes(0xa5, size) };
            p as usize
        })
        .collect();
    objs.sort_unstable();
    let (keep, free): (Vec<usize>, Vec<usize>) = objs
        .into_iter()
        .partition(|&p| (p / BLOCK).is_multiple_of(2));
    for &p in &free {
        // SAFETY: allocated above with `layout`, freed once.
        unsafe { dealloc(p as *mut u8, layout) };
    }
    slabcg_allocator::trim();
    // Otherwise the check below would pass whatever the layout.
    assert!(
        free.iter().any(|&p| !resident(p)),
        "class of {size} B: trim released no freed slab"
    );
    let mut checked = 0;
    for &p in &keep {
        // Every page that a window from any byte of the object can reach.
        let last = p + size - 1 + WINDOW - 1;
        let mut page = p & !(PAGE - 1);
        while page <= last {
            assert!(
                resident(page),
                "class of {size} B: the object at {p:#x} is followed within {WINDOW} bytes of \
                 its end by the page {page:#x}, which is not present"
            );
            page += PAGE;
        }
        checked += 1;
    }
    for &p in &keep {
        // SAFETY: allocated above with `layout`, freed once.
        unsafe { dealloc(p as *mut u8, layout) };
    }
    checked
}

#[test]
fn a_vector_read_past_a_small_object_stays_in_present_memory() {
    const NAME: &str = "a_vector_read_past_a_small_object_stays_in_present_memory";
    if !is_child(NAME) {
        return run_child(NAME);
    }
    for size in [8, 16, 24, 32, 40, 48, 56, 64] {
        assert!(check_class(size) > 0, "class of {size} B: nothing kept");
    }
    println!("CHILD-OK");
}
