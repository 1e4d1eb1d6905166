//! Recently unmapped large blocks: so that a second free of a large block whose mapping is
//! already gone is reported with a message instead of crashing on its header page.
//!
//! A large block's checks read its header, one page below the pointer. Once the mapping is
//! returned to the OS that read faults (SIGSEGV, no message). Before a mapping that held a
//! block goes, the block's pointer is written into a small table (direct-mapped by address);
//! a free or resize first looks the pointer up there. Every block handed out clears its own
//! entry, so a new block the OS maps at the same address is never taken for a dead one.
//!
//! Best effort: a later unmapped block whose pointer hashes to the same entry replaces the
//! earlier one, which then goes unnoticed again. No locks, no allocation: one load on each
//! free, one store per unmapped block, one load (and rarely a store) per new block.
//!
//! Ordering: the entry is written before the `munmap`, and a new block's entry is cleared
//! after the `mmap` that returned its address, so an address the kernel hands out again is
//! never left marked dead (`SeqCst`, so that the two threads' accesses to the entry are
//! ordered as their system calls are).

use core::sync::atomic::{AtomicUsize, Ordering};

const ENTRIES: usize = 256;

static DEAD: [AtomicUsize; ENTRIES] = [const { AtomicUsize::new(0) }; ENTRIES];

fn entry(p: usize) -> &'static AtomicUsize {
    // Blocks are page aligned: hash the page number (Fibonacci hashing).
    let h = ((p >> 12) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56;
    &DEAD[h as usize % ENTRIES]
}

/// Records that the block at `p` is about to be unmapped. Call before the `munmap`.
pub fn bury(p: *mut u8) {
    entry(p as usize).store(p as usize, Ordering::SeqCst);
}

/// Clears `p`'s entry: a block now lives at `p`. Call after the mapping is made.
pub fn revive(p: *mut u8) {
    let e = entry(p as usize);
    if e.load(Ordering::SeqCst) == p as usize {
        // A stale burial of this address by another block may be replaced meanwhile by a
        // third block's: then the compare fails and that one stays, as it should.
        let _ = e.compare_exchange(p as usize, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Whether `p` is a block that was unmapped (and not handed out again since).
pub fn is_dead(p: *mut u8) -> bool {
    entry(p as usize).load(Ordering::SeqCst) == p as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buried address reads dead until it is revived; reviving another address, even one
    /// that shares its entry, leaves it dead; burying one that shares its entry replaces it
    /// (best effort, module docs). The addresses are made up: no block lives there.
    #[test]
    fn buried_blocks_are_dead_until_revived() {
        let p = 0x7f00_dead_0000usize as *mut u8;
        // Another page-aligned address with the same entry as p.
        let same = (1..1usize << 20)
            .map(|k| (p as usize + (k << 12)) as *mut u8)
            .find(|&q| core::ptr::eq(entry(q as usize), entry(p as usize)))
            .unwrap();
        assert!(!is_dead(p));
        bury(p);
        assert!(is_dead(p));
        assert!(!is_dead(same), "only the buried address itself is dead");
        revive(same);
        assert!(is_dead(p), "reviving another address leaves p dead");
        revive(p);
        assert!(!is_dead(p));
        bury(p);
        bury(same);
        assert!(is_dead(same));
        assert!(!is_dead(p), "a later burial in the same entry replaces p");
        revive(same);
        assert!(!is_dead(same));
    }
}
