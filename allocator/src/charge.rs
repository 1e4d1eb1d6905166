//! The hooks between the allocator and the accounting: charge after choosing a slot, record
//! the owner in the slot's metadata, and uncharge the recorded owner on free, whichever thread
//! frees.
//!
//! Charged objects live in the accounted twin of their size class (kmalloc-cg-N), so:
//! - an allocation outside any tenant scope never reaches this file;
//! - a free reaches it only when accounting was ever used and the object's address says it is
//!   accounted (a bit test, `segment::ACCOUNTED_BIT`: no header load). A free that keeps the
//!   slot charged reads no segment header at all (the class geometry is in the thread
//!   cache); one that uncharges checks the slot against its header first.
//!
//! A same-thread, same-tenant alloc/free pair neither charges nor uncharges: the free reads
//! the owner word, keeps the slot charged in the thread's object stock (`object_stock.rs`)
//! and the next allocation takes it back. Everything else goes through the byte stock
//! (`slabcg-accounting`).
//!
//! Owner words (where a slot records its owner, and how an address finds it) are
//! `owner.rs`.
//!
//! Who is charged (documented for users):
//! - `alloc`/`alloc_zeroed`: the calling thread's current tenant, with the usable size.
//! - `dealloc`: the tenant recorded in the object (after reparenting, its ancestor).
//! - `realloc` that stays in place (same size class, a large block grown by mremap, or any
//!   large block shrunk: its tail is unmapped): the recorded owner keeps the object; a
//!   large block's owner is charged or uncharged the difference (a refused growth charge
//!   fails the realloc and leaves the block as it was).
//! - `realloc` that moves: like `alloc` in the caller's current tenant, then `dealloc` of the
//!   old block, so a block reallocated under another tenant moves to that tenant. One
//!   exception, with the same result: a shrink into a size class of a block (a larger
//!   class's slot, or a large block) that is already the caller's tenant's moves the
//!   block's charge with it instead of charging the new block first, so no limit can refuse
//!   it (`realloc_shrink_small`, `realloc_shrink_large`).

use core::sync::atomic::{AtomicU32, Ordering};

use slabcg_accounting::hooks::{self, ObjCgId, StatIdx};

use crate::large::CHARGED_LARGE;
use crate::object_stock::Pop;
use crate::owner::is_accounted;
use crate::size_class::{class_size, Kind};
use crate::{class_caches, init, large, sweep, thread_cache};

/// The owner word of slot `p` of size class `c`, from this thread cache's copy of the
/// class's geometry (`owner::class_owner_word`).
///
/// # Safety
/// `p` must be a slot of the accounted cache of class `c`.
#[inline(always)]
unsafe fn class_owner_word(p: *mut u8, c: usize) -> *const AtomicU32 {
    // SAFETY: caller's contract.
    thread_cache::with(|tc| unsafe { tc.owner_word(p, c) })
}

/// Allocates a slot of class `c` charged to `cg` (non-zero): from the object stock when it
/// holds one, else through the byte stock. Null when the charge is refused or memory is
/// exhausted (then nothing stays charged).
#[inline(always)]
pub fn alloc_small(c: usize, cg: ObjCgId) -> *mut u8 {
    match thread_cache::with(|tc| tc.tagged_pop(c, cg)) {
        Pop::Hit(p) => p,
        Pop::Empty => alloc_small_charging(c, cg),
        // SAFETY: p is what tagged_pop(c, cg) just returned as Foreign.
        Pop::Foreign(p) => unsafe { alloc_small_refused(c, cg, p) },
    }
}

/// The tagged bin's slot was refused: one of `cg`'s own whose owner word a transfer left
/// (`ClassBins::stale`) is claimed and returned here, out of line (inline, the claim kept
/// LTO from inlining `__rust_alloc` into constant-layout callers); anything else goes on to
/// [`alloc_small_put_back`].
///
/// # Safety
/// As [`ThreadCache::claim_stale`]: `p` is what `tagged_pop(c, cg)` just returned as
/// `Pop::Foreign`, for this `cg`.
#[inline(never)]
unsafe fn alloc_small_refused(c: usize, cg: ObjCgId, p: *mut u8) -> *mut u8 {
    // SAFETY: caller's contract.
    match thread_cache::with(|tc| unsafe { tc.claim_stale(c, cg, p) }) {
        Some(p) => p,
        // SAFETY: caller's contract.
        None => unsafe { alloc_small_put_back(c, cg, p) },
    }
}

/// The tagged bin held a slot of another tenant (or a drainer has been at it): put it back;
/// when that tenant died, its objects may be handed to `cg` in place first
/// (`object_stock::transfer_on_miss`: the first allocation of a request's new tenant takes
/// one of the previous request's objects); else charge.
///
/// # Safety
/// As [`ThreadCache::put_back`].
#[cold]
#[inline(never)]
unsafe fn alloc_small_put_back(c: usize, cg: ObjCgId, p: *mut u8) -> *mut u8 {
    // SAFETY: caller's contract.
    thread_cache::with(|tc| unsafe { tc.put_back(c, p) });
    // A request's first allocation comes here (its tenant is new). A service whose requests
    // are served from the kept slots the previous request left takes no bin refill, the
    // path that paces the decay sweep, so the memory a burst left idle (a runaway request
    // killed at its limit) stayed resident for good; this path paces the sweep too.
    if thread_cache::with(|tc| tc.tick_slow()) {
        sweep::maybe();
    }
    if thread_cache::with(|tc| tc.transfer_on_miss(cg)) {
        match thread_cache::with(|tc| tc.tagged_pop(c, cg)) {
            Pop::Hit(q) => return q,
            Pop::Empty => {}
            // After a transfer, the popped slot is one of those it left stale: claimed. Were
            // it refused, this comes back here once, and the transfer (`miss_cg` is `cg`
            // now) does not run again.
            // SAFETY: q is what tagged_pop(c, cg) just returned as Foreign.
            Pop::Foreign(q) => return unsafe { alloc_small_refused(c, cg, q) },
        }
    }
    alloc_small_charging(c, cg)
}

/// The allocation path that charges, after the tagged bins had nothing for `cg`.
#[inline(never)]
fn alloc_small_charging(c: usize, cg: ObjCgId) -> *mut u8 {
    // Slots of cg another thread freed and handed back still charged (`handback.rs`).
    let p = thread_cache::with(|tc| tc.take_handed(c, cg));
    if !p.is_null() {
        // A thread fed by the hand-back takes no bin refill, the path that paces the decay
        // sweep (as `alloc_small_put_back` says): this one paces it too.
        if thread_cache::with(|tc| tc.tick_slow()) {
            sweep::maybe();
        }
        return p;
    }
    let p = charge_slot(c, cg);
    if !p.is_null() {
        thread_cache::with(|tc| tc.note_charged(cg));
    }
    p
}

/// Takes bytes from the byte stock, a slot from the uncharged accounted bin, and writes the
/// owner. Null when the charge is refused or memory is exhausted (nothing stays charged).
#[inline(always)]
fn charge_slot(c: usize, cg: ObjCgId) -> *mut u8 {
    let size = class_size(c);
    // SAFETY: cg is this thread's current scope (alloc_small's caller read it).
    if !unsafe { hooks::charge(cg, size, StatIdx::slab(c)) } {
        return core::ptr::null_mut();
    }
    let mut p = thread_cache::with(|tc| tc.bin(c, Kind::Accounted).pop());
    if p.is_null() {
        p = init::alloc_slow(c, Kind::Accounted);
        if p.is_null() {
            // SAFETY: the `size` bytes charged to cg just above, given back unused.
            unsafe { hooks::uncharge(cg, size, StatIdx::slab(c)) };
            return p;
        }
    }
    // SAFETY: p is a slot of the accounted cache of class c.
    unsafe { (*class_owner_word(p, c)).store(cg, Ordering::Relaxed) };
    p
}

/// Frees an accounted slot of class `c`: kept charged in the object stock when its owner is
/// this thread's tag, else uncharged from its recorded owner (unless the slow path keeps it
/// after all: a full tagged bin, or an adoption, `ThreadCache::keep_slow`).
///
/// # Safety
/// `p` must be a live slot of the accounted cache of class `c`.
#[inline(always)]
pub unsafe fn free_small(p: *mut u8, c: usize) {
    // SAFETY: caller's contract.
    let owner = unsafe { (*class_owner_word(p, c)).load(Ordering::Relaxed) };
    // SAFETY: caller's contract; the slot is charged to `owner`.
    if unsafe { thread_cache::with(|tc| tc.tagged_push(c, owner, p)) } {
        return;
    }
    // SAFETY: caller's contract.
    unsafe { free_small_uncharging(p, c) }
}

/// The free path that uncharges the owner and clears the owner word, after the checks,
/// unless `ThreadCache::keep_slow` keeps the slot (its owner's full tagged bin gives back
/// half first, or the thread adopts its owner's objects).
///
/// # Safety
/// As [`free_small`].
#[inline(never)]
unsafe fn free_small_uncharging(p: *mut u8, c: usize) {
    // Before anything is written through the owner address computed from p, make sure p is
    // a slot of this accounted class: an invalid free (a foreign pointer, the middle of a
    // slot, the wrong layout) is reported instead of clearing some other slot's owner.
    let w = class_caches::cache(c, Kind::Accounted).checked_owner_word(p);
    // The tagged push refuses a slot that already heads the tagged bin: a double free.
    if thread_cache::with(|tc| tc.tagged_is_head(c, p)) {
        crate::sys::fatal(
            "double free of an accounted object (the slot is already the first kept slot of this thread)",
        );
    }
    let owner = w.load(Ordering::Relaxed);
    if owner == 0 {
        crate::sys::fatal("double free of an accounted object (owner already cleared)");
    }
    // A full bin of the tag's objects, or a run of frees of another tenant's (out of line).
    // SAFETY: p is a checked slot of class c's accounted cache, charged to owner, given up.
    if unsafe { thread_cache::with(|tc| tc.keep_slow(c, owner, p)) } {
        return;
    }
    w.store(0, Ordering::Relaxed);
    // SAFETY: the slot was charged `class_size(c)` to `owner` when allocated, and its owner
    // word, cleared just now, said so (a second free finds 0 and stops above).
    unsafe { hooks::uncharge(owner, class_size(c), StatIdx::slab(c)) };
    // SAFETY: caller's contract: a live slot of this class, given up; uncharged just above.
    unsafe { free_uncharged(p, c) };
    // A drainer may be why the slot was not kept: give back what it left in the bins.
    thread_cache::with(|tc| {
        if tc.must_reclaim() {
            tc.reclaim();
        }
    });
}

/// Puts the accounted slot `p` of class `c`, charged to nobody and its owner word cleared,
/// in this thread's bin of uncharged slots (or, the bin full, back towards its slab).
///
/// # Safety
/// `p` must be a live slot of the accounted cache of class `c`, given up.
unsafe fn free_uncharged(p: *mut u8, c: usize) {
    // SAFETY: caller's contract.
    unsafe {
        if !thread_cache::with(|tc| tc.bin(c, Kind::Accounted).push(p)) {
            init::free_slow(p, c, Kind::Accounted);
        }
    }
}

/// A shrinking `realloc` of the accounted slot `p` (class `old_c`) into the smaller class
/// `new_c`, done without a new charge: a tenant at its limit would refuse the new block as
/// an allocation although the shrink lowers its usage, and std's collections treat a shrink
/// as infallible. When the block is the caller's tenant's own, moves its first `copy` bytes
/// to a fresh slot of `new_c` with the charge ([`move_into_slot`]) and frees the old slot
/// uncharged. Null, with nothing changed, for a block of another tenant (the move charges
/// the caller's tenant: the ordinary path decides) or when memory is exhausted.
///
/// # Safety
/// `p` must be a live allocation of class `old_c` with `copy` bytes to keep, `copy <=
/// class_size(new_c)`; on success it is freed.
#[cold]
#[inline(never)]
pub unsafe fn realloc_shrink_small(p: *mut u8, old_c: usize, new_c: usize, copy: usize) -> *mut u8 {
    let cg = hooks::current_objcg();
    if cg == 0 || !is_accounted(p) || class_size(new_c) >= class_size(old_c) {
        return core::ptr::null_mut();
    }
    class_caches::cache(old_c, Kind::Accounted).check_slot_start(p);
    // SAFETY: p is a slot of the accounted cache of class old_c (just checked).
    let w = unsafe { &*class_owner_word(p, old_c) };
    if w.load(Ordering::Relaxed) != cg {
        return core::ptr::null_mut();
    }
    // SAFETY: p's owner word says class_size(old_c) bytes of it are charged to cg; p holds
    // `copy` bytes to keep.
    let q = unsafe { move_into_slot(cg, class_size(old_c), StatIdx::slab(old_c), new_c, p, copy) };
    if !q.is_null() {
        // p's charge went to q: p goes back charged to nobody.
        w.store(0, Ordering::Relaxed);
        // SAFETY: p is a live slot of the accounted class old_c, given up.
        unsafe { free_uncharged(p, old_c) };
    }
    q
}

/// [`realloc_shrink_small`] for a large block shrinking into size class `new_c`.
///
/// # Safety
/// `p` must be a live large allocation with `copy` bytes to keep, `copy <=
/// class_size(new_c)`; on success it is freed.
#[cold]
#[inline(never)]
pub unsafe fn realloc_shrink_large(p: *mut u8, new_c: usize, copy: usize) -> *mut u8 {
    let cg = hooks::current_objcg();
    if cg == 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: caller's contract: p is a live large allocation.
    let (owner, usable) = unsafe { (large::owner(p), large::usable_size(p)) };
    if owner.load(Ordering::Relaxed) != cg || class_size(new_c) >= usable {
        return core::ptr::null_mut();
    }
    // SAFETY: the large header says `usable` bytes of p are charged to cg.
    let q = unsafe { move_into_slot(cg, usable, StatIdx::LARGE, new_c, p, copy) };
    if !q.is_null() {
        owner.store(0, Ordering::Relaxed);
        CHARGED_LARGE.fetch_sub(usable, Ordering::Relaxed);
        // SAFETY: p is a live large allocation, given up, charged to nobody now.
        unsafe { large::free(p) };
    }
    q
}

/// Takes a fresh slot of the accounted class `c`, records `cg` as its owner, turns the
/// `old` bytes charged to `cg` for `old_idx` into the slot's smaller charge
/// ([`hooks::shrink_charge`], which no limit refuses) and copies `copy` bytes from `src`
/// into it. Null, with nothing changed, when memory is exhausted.
///
/// # Safety
/// `old` bytes charged to `cg` for `old_idx` are outstanding and held by the block at
/// `src`, which the caller frees uncharged on success; `copy <= class_size(c) < old`.
unsafe fn move_into_slot(
    cg: ObjCgId,
    old: usize,
    old_idx: StatIdx,
    c: usize,
    src: *const u8,
    copy: usize,
) -> *mut u8 {
    let mut q = thread_cache::with(|tc| tc.bin(c, Kind::Accounted).pop());
    if q.is_null() {
        q = init::alloc_slow(c, Kind::Accounted);
        if q.is_null() {
            return q;
        }
    }
    // SAFETY: q is a fresh slot of the accounted cache of class c; the caller's `old`
    // bytes now pay for it (the smaller charge), and src holds `copy` bytes.
    unsafe {
        (*class_owner_word(q, c)).store(cg, Ordering::Relaxed);
        hooks::shrink_charge(cg, old, old_idx, class_size(c), StatIdx::slab(c));
        core::ptr::copy_nonoverlapping(src, q, copy);
    }
    q
}

/// A large allocation charged to the current tenant (if any).
#[cold]
#[inline(never)]
pub fn alloc_large(size: usize, align: usize, zeroed: bool) -> *mut u8 {
    let cg = hooks::current_objcg();
    if cg == 0 {
        return large::alloc(size, align, zeroed);
    }
    let Some(usable) = large::usable_for(size) else {
        return core::ptr::null_mut();
    };
    // SAFETY: cg is this thread's current scope (the caller read it).
    if !unsafe { hooks::charge(cg, usable, StatIdx::LARGE) } {
        return core::ptr::null_mut();
    }
    let p = large::alloc(size, align, zeroed);
    if p.is_null() {
        // SAFETY: the `usable` bytes charged to cg just above, given back unused.
        unsafe { hooks::uncharge(cg, usable, StatIdx::LARGE) };
        return p;
    }
    // SAFETY: p is a live large allocation.
    unsafe { large::owner(p).store(cg, Ordering::Relaxed) };
    CHARGED_LARGE.fetch_add(usable, Ordering::Relaxed);
    p
}

/// Frees a large allocation, uncharging its owner.
///
/// # Safety
/// `p` must be a live large allocation.
#[cold]
#[inline(never)]
pub unsafe fn free_large(p: *mut u8) {
    // SAFETY: caller's contract.
    unsafe {
        let owner = large::owner(p).load(Ordering::Relaxed);
        if owner != 0 {
            let usable = large::usable_size(p);
            // hooks::uncharge's contract: a live large block is charged its usable size to
            // the owner its header records (charged at allocation, adjusted by every resize).
            hooks::uncharge(owner, usable, StatIdx::LARGE);
            CHARGED_LARGE.fetch_sub(usable, Ordering::Relaxed);
        }
        large::free(p);
    }
}

/// What [`realloc_large`] did.
pub enum LargeResize {
    /// Resized (in place or moved by mremap); the new pointer.
    Done(*mut u8),
    /// The owner's limit refused the growth: the realloc fails and the block is unchanged.
    Refused,
    /// The OS could not resize in place or by mremap: the caller may move the block.
    Failed,
}

/// Resizes a large allocation in place or by mremap, moving its owner's charge by the
/// difference.
///
/// # Safety
/// `p` must be a live large allocation aligned to at most a page, or one that `new_size`
/// does not grow (a shrink stays in place).
#[cold]
#[inline(never)]
pub unsafe fn realloc_large(p: *mut u8, new_size: usize) -> LargeResize {
    let Some(new_usable) = large::usable_for(new_size) else {
        return LargeResize::Refused;
    };
    // SAFETY: caller's contract.
    unsafe {
        let owner = large::owner(p).load(Ordering::Relaxed);
        let old_usable = large::usable_size(p);
        if owner != 0 && new_usable > old_usable {
            // hooks::charge's contract: the block being resized holds charged bytes of owner.
            if !hooks::charge(owner, new_usable - old_usable, StatIdx::LARGE) {
                return LargeResize::Refused;
            }
            let q = large::realloc(p, new_size);
            if q.is_null() {
                // hooks::uncharge's contract: the growth charged just above, given back unused.
                hooks::uncharge(owner, new_usable - old_usable, StatIdx::LARGE);
                return LargeResize::Failed;
            }
            CHARGED_LARGE.fetch_add(new_usable - old_usable, Ordering::Relaxed);
            return LargeResize::Done(q);
        }
        let q = large::realloc(p, new_size);
        if q.is_null() {
            return LargeResize::Failed;
        }
        if owner != 0 && new_usable < old_usable {
            // hooks::uncharge's contract: the block was charged old_usable to owner; it now
            // holds new_usable.
            hooks::uncharge(owner, old_usable - new_usable, StatIdx::LARGE);
            CHARGED_LARGE.fetch_sub(old_usable - new_usable, Ordering::Relaxed);
        }
        LargeResize::Done(q)
    }
}
