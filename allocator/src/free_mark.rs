//! The free mark: how a flush recognises a slot that is already on its slab's free list (a
//! double free) without a bitmap and without any work on the fast path.
//!
//! While a slot sits on its slab's free list its second word holds `KEY ^ address`. Slots
//! leave the list only through `SlabCache::refill`, which clears the mark; freshly carved
//! slots are cleared too, since a reused slab still holds the marks of its earlier life. So
//! a slot that reaches a flush already marked is, almost surely, already free. Almost: a
//! program's data may happen to equal the mark, so a marked slot is only a suspect, and the
//! flush confirms by finding the slot on the list before it reports
//! (`SlabCache::is_free_in`). A false suspect costs one walk of a slab's free list.
//!
//! Slots parked in the parked batches are not marked: clearing their marks would cost the
//! refill that takes a batch a walk over it (a chain of cache misses in a producer/consumer
//! program), where today it takes the batch in O(1). Slots in thread bins carry no mark
//! either; a bin's own commonest double free is caught when the slot already heads it
//! (`Bin::push`).
//!
//! Only slots of 16 bytes or more have a second word: every size class but the 8-byte one,
//! and dedicated caches whose stride is at least 16 (less those that keep an owner word
//! there, [`fits`]).

use crate::slab::FreeObj;
use crate::slab::{MetaPlacement, SlabLayout};

/// Mixed with the address, so that a slot's mark is not the same word in every slot (a
/// program filling memory with one value marks nothing).
const KEY: usize = 0x5abc_f7ee_c91a_d0f1_u64 as usize;

/// Whether the free slots of a cache of this layout carry the mark. They need a second word
/// that holds nothing of ours (slots of 16 bytes or more; an accounted cache with its owner
/// words in the slots' padding may keep one there, for an object of up to 12 bytes aligned
/// to 16, and that word must keep reading 0 while the slot is free, since a second free is
/// told from a first by it), and a build that can read the mark soundly ([`HAS_LOAD`]).
pub fn fits(l: &SlabLayout) -> bool {
    const WORD: usize = core::mem::size_of::<usize>();
    HAS_LOAD
        && l.stride >= 2 * WORD
        && !(l.meta == MetaPlacement::Padding && l.meta_offset < 2 * WORD)
}

/// Whether this build can read a freed slot's second word soundly. A program may leave it
/// uninitialised (struct padding, `MaybeUninit` contents), and Rust reads of uninitialised
/// memory as an integer are undefined behaviour, however harmless the machine load. The
/// mark is therefore read with one machine load in inline assembly, which yields whatever
/// bytes are there: on x86-64 and AArch64. Elsewhere, and under Miri (which runs no
/// assembly), caches go without the mark.
pub const HAS_LOAD: bool = cfg!(all(
    not(miri),
    any(target_arch = "x86_64", target_arch = "aarch64")
));

/// The machine word at `p`, whatever its bytes (see [`HAS_LOAD`]).
///
/// # Safety
/// `p` must be valid for an aligned 8-byte read.
#[inline(always)]
unsafe fn load(p: *const usize) -> usize {
    #[cfg(all(not(miri), target_arch = "x86_64"))]
    {
        let v: usize;
        // SAFETY: the caller's pointer is valid for an aligned word read; the asm only loads.
        unsafe {
            core::arch::asm!("mov {v}, qword ptr [{p}]", v = out(reg) v, p = in(reg) p,
                options(nostack, readonly, preserves_flags));
        }
        v
    }
    #[cfg(all(not(miri), target_arch = "aarch64"))]
    {
        let v: usize;
        // SAFETY: as above.
        unsafe {
            core::arch::asm!("ldr {v}, [{p}]", v = out(reg) v, p = in(reg) p,
                options(nostack, readonly, preserves_flags));
        }
        v
    }
    #[cfg(not(all(not(miri), any(target_arch = "x86_64", target_arch = "aarch64"))))]
    {
        // Only the unit tests read marks here (`fits` is false): they write the word first.
        // SAFETY: the caller's pointer is valid for a word read.
        unsafe { *p }
    }
}

/// The word that holds the mark. Slots start at multiples of their stride, a multiple of 8,
/// from a slab aligned to its size, so the word is aligned.
///
/// # Safety
/// `o` must be a slot of at least 16 bytes that the caller may read.
unsafe fn word(o: *mut FreeObj) -> *mut usize {
    // SAFETY: the caller's slot has a second word.
    unsafe { (o as *mut usize).add(1) }
}

/// Whether `o` carries the mark.
///
/// # Safety
/// As [`word`].
pub unsafe fn is_set(o: *mut FreeObj) -> bool {
    // SAFETY: caller's contract.
    unsafe { load(word(o)) == KEY ^ o as usize }
}

/// Marks `o` as free in its cache.
///
/// # Safety
/// `o` must be a slot of at least 16 bytes that nobody else uses.
pub unsafe fn set(o: *mut FreeObj) {
    // SAFETY: caller's contract.
    unsafe { *word(o) = KEY ^ o as usize };
}

/// Clears `o`'s mark.
///
/// # Safety
/// As [`set`].
pub unsafe fn clear(o: *mut FreeObj) {
    // SAFETY: caller's contract.
    unsafe { *word(o) = 0 };
}

#[cfg(test)]
mod tests {
    use core::alloc::Layout;

    use super::*;
    use crate::dedicated::Cache;
    use crate::size_class::class_of;

    /// A live object whose second word happens to equal the mark is freed as usual: the
    /// flush suspects it, finds it nowhere in the cache, and goes on. Taken again, the slot
    /// comes back with the mark cleared.
    #[test]
    #[cfg_attr(miri, ignore = "Miri runs the caches without the mark (HAS_LOAD)")]
    fn data_that_looks_like_the_mark_is_not_a_double_free() {
        let c = Cache::builder("mark-lookalike", Layout::from_size_align(40, 8).unwrap()).build();
        let keep = c.alloc().unwrap();
        let a = c.alloc().unwrap();
        let o = a.as_ptr() as *mut FreeObj;
        // SAFETY: a is a live 40-byte object of c, ours until freed.
        unsafe {
            set(o);
            c.free(a);
        }
        let again = c.alloc().unwrap();
        assert_eq!(again, a, "the slab hands its last freed slot out first");
        // SAFETY: again is a live 40-byte object of c.
        assert!(!unsafe { is_set(o) }, "a slot leaves the cache unmarked");
        assert_eq!(c.live_objects(), 2);
        // SAFETY: both are live objects of c, freed once.
        unsafe {
            c.free(again);
            c.free(keep);
        }
    }

    /// A batch of slots whose data looks like the mark goes through the parked batches (the
    /// check suspects it, finds none of its slots on a slab's free list, and parks it), and
    /// comes back whole. Sent to their slabs, the slots are marked; taken again, cleared.
    #[test]
    #[cfg_attr(miri, ignore = "Miri runs the caches without the mark (HAS_LOAD)")]
    fn a_batch_with_lookalike_data_is_parked_and_slots_leave_their_slab_unmarked() {
        // A size class that nothing else in this test binary allocates from.
        let core = crate::class_caches::cache(class_of(1800), crate::size_class::Kind::Plain);
        let chain = core.refill(4, 4);
        assert_eq!(chain.count, 4);
        let slots = chain_slots(chain.head);
        for &o in &slots {
            // SAFETY: o is a slot refill just handed over; marks fit (1800 B).
            unsafe { set(o) };
        }
        // SAFETY: the chain of 4 slots refill returned, given back whole.
        unsafe { core.flush(chain.head, chain.count) };
        let back = core.refill(4, 4);
        let mut got = chain_slots(back.head);
        got.sort();
        let mut want = slots.clone();
        want.sort();
        assert_eq!(got, want, "the parked batch comes back whole");
        // One at a time, each goes to its slab's free list, marked.
        for o in chain_slots(back.head) {
            // SAFETY: o is one of the 4 slots refill returned, given back once as a
            // one-slot chain.
            unsafe {
                FreeObj::set_next(o, core::ptr::null_mut());
                core.flush(o, 1);
                assert!(is_set(o), "a slot on its slab's free list is marked");
            }
        }
        let again = core.refill(4, 4);
        for o in chain_slots(again.head) {
            // SAFETY: a slot refill just handed over.
            assert!(!unsafe { is_set(o) }, "a slot leaves its slab unmarked");
        }
        // SAFETY: the chain refill returned, given back whole.
        unsafe { core.flush(again.head, again.count) };
    }

    /// An accounted cache of 8-byte objects aligned to 16 keeps each owner word in the
    /// slot's second word: it goes without the mark, and a freed object's owner word reads
    /// 0 (what tells a second free from a first).
    #[test]
    fn owner_words_in_the_second_word_keep_the_mark_out() {
        let l = Layout::from_size_align(8, 16).unwrap();
        let c = Cache::builder("mark-owner", l).account(true).build();
        let g = &c.core.layout;
        assert_eq!((g.meta, g.meta_offset), (MetaPlacement::Padding, 8));
        assert!(!fits(g));
        assert_eq!(
            fits(&Cache::builder("mark-plain", l).build().core.layout),
            HAS_LOAD
        );
        let tenant = slabcg_accounting::Tenant::new("mark-owner");
        let _scope = tenant.enter();
        let keep = c.alloc().unwrap();
        let p = c.alloc().unwrap();
        // SAFETY: p is a live object of c, freed once; its slot stays mapped and is only
        // read after.
        unsafe {
            c.free(p);
            assert_eq!(
                *(p.as_ptr().add(8) as *const u32),
                0,
                "owner word of a free slot"
            );
            c.free(keep);
        }
    }

    /// The slots of a chain, in order.
    fn chain_slots(head: *mut FreeObj) -> Vec<*mut FreeObj> {
        let mut v = Vec::new();
        let mut o = head;
        while !o.is_null() {
            v.push(o);
            // SAFETY: o is a slot of a chain a refill handed over.
            o = unsafe { FreeObj::next(o) };
        }
        v
    }
}
