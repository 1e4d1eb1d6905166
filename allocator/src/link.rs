//! Free-list links: the first word of every free slot, which chains it to the next one on
//! whatever list holds it (a slab's free list, a thread bin, a parked batch, a chain in
//! flight). Every read and write of a link goes through [`FreeObj::next`] and
//! [`FreeObj::set_next`].
//!
//! Default build: the link is the next slot's address, a plain load and store.
//!
//! `hardened` feature (mimalloc's secure mode): the word holds the address mixed with the
//! slot's own address and a per-process random secret, `rotl(next ^ slot, 29) ^ key` (the
//! key from one `getrandom` draw, made when the first segment is). A program that writes into
//! a freed slot (use after free) cannot forge a link without the secret: the decoded value
//! is then all but certain to lie outside every segment, and the pop that meets it reports
//! the corruption (`sys::fatal`) instead of handing that address out. Mixing in the slot's
//! address makes equal links in two slots different words. Not cryptography: someone who
//! reads a free slot and knows both addresses learns the secret, as in mimalloc.
//!
//! The hardened build also clears the link of a slot it hands out (no secret-derived word
//! is left to the program to read, and a live slot never looks free), and checks on every
//! push whether the slot's first word is already a valid link: then the slot is free
//! already, and the bin it goes to is walked to confirm the double free
//! ([`FreeObj::looks_free`], used by `Bin::push`).

#[cfg(feature = "hardened")]
use crate::addr_map;

/// A free slot: its first word links it into a free list.
#[repr(C)]
pub struct FreeObj {
    #[cfg(not(feature = "hardened"))]
    link: *mut FreeObj,
    /// The encoded link (module docs).
    #[cfg(feature = "hardened")]
    link: usize,
}

impl FreeObj {
    /// A slot whose link reads null (the loom models' slots, which are not in segments).
    #[cfg(all(test, loom, not(feature = "hardened")))]
    pub(crate) const fn unlinked() -> FreeObj {
        FreeObj {
            link: core::ptr::null_mut(),
        }
    }

    /// The slot after `o` on its list (null at the end).
    ///
    /// # Safety
    /// `o` must be a free slot whose link was written by [`set_next`](Self::set_next).
    #[inline(always)]
    pub unsafe fn next(o: *mut FreeObj) -> *mut FreeObj {
        #[cfg(not(feature = "hardened"))]
        // SAFETY: caller's contract.
        unsafe {
            (*o).link
        }
        #[cfg(feature = "hardened")]
        {
            // SAFETY: caller's contract.
            let n = decode(o, unsafe { (*o).link });
            if !is_link(n) {
                corrupt_link();
            }
            n as *mut FreeObj
        }
    }

    /// Links `o` to `n` (null: end of the list).
    ///
    /// # Safety
    /// `o` must be a slot that nobody uses (it becomes, or is, free).
    #[inline(always)]
    pub unsafe fn set_next(o: *mut FreeObj, n: *mut FreeObj) {
        #[cfg(not(feature = "hardened"))]
        // SAFETY: caller's contract.
        unsafe {
            (*o).link = n
        };
        #[cfg(feature = "hardened")]
        // SAFETY: caller's contract.
        unsafe {
            (*o).link = encode(o, n as usize)
        };
    }

    /// Hardened builds: clears the link of a slot being handed out (module docs). Nothing
    /// in the default build.
    ///
    /// # Safety
    /// `o` must be a slot just taken off a list, not yet handed out.
    #[inline(always)]
    pub unsafe fn clear_link(o: *mut FreeObj) {
        #[cfg(feature = "hardened")]
        // SAFETY: caller's contract.
        unsafe {
            (*o).link = 0
        };
        #[cfg(not(feature = "hardened"))]
        let _ = o;
    }

    /// Hardened builds: whether the first word of slot `o` (being freed) is a valid link,
    /// so that the slot is already free, almost surely (a live slot's word is the program's
    /// data or the 0 its allocation left, and data that decodes to a link needs the
    /// secret). Always false in the default build.
    ///
    /// # Safety
    /// `o` must be readable for one word.
    #[inline(always)]
    pub unsafe fn looks_free(o: *mut FreeObj) -> bool {
        #[cfg(feature = "hardened")]
        // SAFETY: caller's contract.
        let free = is_link(decode(o, unsafe { (*o).link }));
        #[cfg(not(feature = "hardened"))]
        let free = {
            let _ = o;
            false
        };
        free
    }
}

/// Whether `n` can be a link: null, or a word-aligned address in a segment (every free
/// slot lies in one).
#[cfg(feature = "hardened")]
#[inline(always)]
fn is_link(n: usize) -> bool {
    n == 0 || (n.is_multiple_of(8) && addr_map::is_segment(n as *const u8))
}

/// The secret: 0 until drawn.
#[cfg(feature = "hardened")]
static SECRET: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The process's secret. Drawn by [`draw_secret`] when the first segment is made, before
/// any slot exists: every link is written to and read from a slot, and whichever thread
/// touches a slot learned of it after its segment was made (through the cache's lock, or
/// the program's own synchronisation that handed it the pointer), so it reads the secret
/// drawn by then. Relaxed: the word goes from 0 to its one value once.
#[cfg(feature = "hardened")]
#[inline(always)]
fn secret() -> u64 {
    let k = SECRET.load(core::sync::atomic::Ordering::Relaxed);
    debug_assert!(k != 0, "a free-list link before the first segment");
    k
}

/// Draws the secret unless it is drawn already (`segment::Segment::create`, before the
/// segment's slots can be linked). A compare-and-swap: two first segments made at once
/// agree on one value. Nothing in the default build.
#[inline]
pub fn draw_secret() {
    #[cfg(feature = "hardened")]
    {
        use core::sync::atomic::Ordering;
        if SECRET.load(Ordering::Relaxed) == 0 {
            let k = slabcg_sys::random_u64();
            let _ = SECRET.compare_exchange(0, k, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// The rotation of the encoding: a constant (a rotation by a key-derived count cost three
/// more instructions per link, measured; the secret is in the XOR).
#[cfg(feature = "hardened")]
const ROT: u32 = 29;

#[cfg(feature = "hardened")]
#[inline(always)]
fn encode(o: *mut FreeObj, n: usize) -> usize {
    ((n ^ o as usize) as u64).rotate_left(ROT) as usize ^ secret() as usize
}

#[cfg(feature = "hardened")]
#[inline(always)]
fn decode(o: *mut FreeObj, w: usize) -> usize {
    ((w ^ secret() as usize) as u64).rotate_right(ROT) as usize ^ o as usize
}

#[cfg(feature = "hardened")]
#[cold]
#[inline(never)]
fn corrupt_link() -> ! {
    crate::sys::fatal(
        "corrupted free list (a free slot's link was overwritten: a write after free?)",
    )
}

#[cfg(all(test, feature = "hardened"))]
mod tests {
    use super::*;

    /// A link reads back as written; the stored word is neither the address nor the same
    /// in two slots that link to the same place; a zeroed word does not decode to a link.
    #[test]
    fn links_are_encoded_per_slot() {
        let mut a = [0usize; 2];
        let mut b = [0usize; 2];
        let (oa, ob) = (
            a.as_mut_ptr() as *mut FreeObj,
            b.as_mut_ptr() as *mut FreeObj,
        );
        draw_secret();
        // SAFETY: both are live local words; only encode/decode, no list is walked.
        unsafe {
            (*oa).link = encode(oa, 0x1000);
            (*ob).link = encode(ob, 0x1000);
            assert_eq!(decode(oa, (*oa).link), 0x1000);
            assert_ne!((*oa).link, (*ob).link);
            assert_ne!((*oa).link, 0x1000);
            assert!(!is_link(decode(oa, 0)));
            assert!(is_link(decode(oa, encode(oa, 0))));
        }
    }
}
