//! Large allocations: requests above the largest size class, or aligned above a page. Each
//! gets its own mapping, with a one-page header just before the object:
//!
//! ```text
//!   base                     ptr = base + PAGE (aligned as asked)
//!   [ LargeHeader ... pad ]  [ object: usable bytes, a page multiple ]
//!   map_len == PAGE + usable
//! ```
//!
//! Growing and shrinking use `mremap`, which moves page tables instead of copying bytes. A
//! fresh mapping reads as zero, so `alloc_zeroed` needs no memset.
//!
//! Freed mappings of up to 64 MiB are kept in a small cache (at most `MAPPING_ENTRIES`
//! mappings, and at most as many bytes as live large allocations hold, between 64 MiB and
//! 1 GiB; oldest evicted first) and reused by the next large allocation, best fit, the rest
//! of a bigger mapping going back to the cache: a program that keeps replacing big buffers
//! then pays neither the `mmap`/`munmap` pair nor a page fault per page. `trim()` unmaps
//! the cache; zeroed allocations always take a fresh mapping.

use core::ptr;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::lock::SpinLock;
use crate::sys::{self, PAGE};
use crate::{addr_map, unmapped};

const MAGIC: usize = 0x51ab_c91a_56e0_0001;

#[repr(C)]
struct LargeHeader {
    magic: usize,
    /// Bytes mapped from the header (which is the mapping's start) on.
    map_len: usize,
    /// Owner objcg id (0 = uncharged); written by the charge hooks.
    owner: AtomicU32,
}

/// Usable bytes of live large allocations that are charged to a tenant (for `stats()` and
/// the root tenant's view). Updated by the charge hooks (`charge.rs`), on the
/// large-allocation slow paths only.
pub static CHARGED_LARGE: AtomicUsize = AtomicUsize::new(0);

/// Live large allocations and their mapped bytes, for `stats()`.
pub static COUNT: AtomicUsize = AtomicUsize::new(0);
pub static MAPPED: AtomicUsize = AtomicUsize::new(0);
/// Bytes of freed mappings kept for reuse.
pub static CACHED: AtomicUsize = AtomicUsize::new(0);

const MAPPING_ENTRIES: usize = 32;
const MAPPINGS_MIN_BYTES: usize = 64 << 20;
const MAPPINGS_MAX_BYTES: usize = 1 << 30;
const MAPPING_MAX_ONE: usize = 64 << 20;

/// The cache's byte bound: as much as live large allocations hold, within bounds.
fn mapping_cache_bytes() -> usize {
    MAPPED
        .load(Ordering::Relaxed)
        .clamp(MAPPINGS_MIN_BYTES, MAPPINGS_MAX_BYTES)
}

/// The mapping cache: freed mappings kept for reuse, `entries[..n]`, oldest first.
///
/// Invariant ([`MappingCache::check`]): `bytes == Σ entries[..n].1 == CACHED`, `n <=
/// MAPPING_ENTRIES`, every length a positive page multiple of at most `MAPPING_MAX_ONE`
/// (a tail cut from a longer one is shorter still).
struct MappingCache {
    entries: [(usize, usize); MAPPING_ENTRIES],
    n: usize,
    bytes: usize,
}

static MAPPINGS: SpinLock<MappingCache> = SpinLock::new(MappingCache {
    entries: [(0, 0); MAPPING_ENTRIES],
    n: 0,
    bytes: 0,
});

impl MappingCache {
    /// The invariant (struct docs), under the lock (the caller holds `self`).
    fn check(&self) {
        let sum: usize = self.entries[..self.n].iter().map(|e| e.1).sum();
        if self.n > MAPPING_ENTRIES || sum != self.bytes || CACHED.load(Ordering::Relaxed) != sum {
            crate::invariant::broken("mapping cache: bytes != Σ lengths");
        }
        if self.entries[..self.n]
            .iter()
            .any(|e| e.1 == 0 || e.1 % PAGE != 0 || e.1 > MAPPING_MAX_ONE)
        {
            crate::invariant::broken("mapping cache: a length is not a page multiple in bounds");
        }
    }

    fn remove(&mut self, i: usize) -> (usize, usize) {
        let e = self.entries[i];
        self.entries.copy_within(i + 1..self.n, i);
        self.n -= 1;
        self.bytes -= e.1;
        CACHED.store(self.bytes, Ordering::Relaxed);
        e
    }
}

/// A cached mapping of at least `len` bytes, cut to exactly `len` (the rest stays cached),
/// or null.
fn take_cached(len: usize) -> *mut u8 {
    let mut c = MAPPINGS.lock();
    let mut best = usize::MAX;
    for i in 0..c.n {
        let l = c.entries[i].1;
        if l >= len && (best == usize::MAX || l < c.entries[best].1) {
            best = i;
        }
    }
    if best == usize::MAX {
        // Nothing big enough: grow the biggest cached mapping with mremap, so only the
        // missing pages are new (its resident pages move along with their page tables).
        let mut big = usize::MAX;
        for i in 0..c.n {
            if big == usize::MAX || c.entries[i].1 > c.entries[big].1 {
                big = i;
            }
        }
        if big == usize::MAX {
            return ptr::null_mut();
        }
        let (base, l) = c.remove(big);
        drop(c);
        // The mapping may move: whatever block once lived at its start is gone (the new
        // block revives the entry if it stays put).
        unmapped::bury((base + PAGE) as *mut u8);
        // SAFETY: base..base+l is a whole cached mapping nobody uses.
        let q = unsafe { sys::remap(base as *mut u8, l, len) };
        if q.is_null() {
            // SAFETY: as above; it cannot be grown, so it goes.
            unsafe { sys::unmap(base as *mut u8, l) };
        }
        return q;
    }
    let (base, l) = c.remove(best);
    if l > len {
        // The tail is a mapping of its own from now on (munmap and mremap work on any page
        // range); it takes the freed entry's place.
        let n = c.n;
        c.entries[n] = (base + len, l - len);
        c.n += 1;
        c.bytes += l - len;
        CACHED.store(c.bytes, Ordering::Relaxed);
    }
    base as *mut u8
}

/// Keeps a freed mapping for reuse, evicting the oldest ones beyond the bounds. False when
/// the mapping is too big to keep (the caller unmaps it).
fn keep_cached(base: *mut u8, len: usize) -> bool {
    if len > MAPPING_MAX_ONE {
        return false;
    }
    let mut evicted = [(0usize, 0usize); MAPPING_ENTRIES];
    let mut ne = 0;
    let bound = mapping_cache_bytes();
    let mut c = MAPPINGS.lock();
    while c.n > 0 && (c.n == MAPPING_ENTRIES || c.bytes + len > bound) {
        evicted[ne] = c.remove(0);
        ne += 1;
    }
    let n = c.n;
    c.entries[n] = (base as usize, len);
    c.n += 1;
    c.bytes += len;
    CACHED.store(c.bytes, Ordering::Relaxed);
    drop(c);
    for &(b, l) in &evicted[..ne] {
        unmapped::bury((b + PAGE) as *mut u8);
        // SAFETY: evicted mappings are ours and unused.
        unsafe { sys::unmap(b as *mut u8, l) };
    }
    true
}

/// Fork support: hold the mapping cache's lock across `fork`.
pub fn fork_prepare() {
    MAPPINGS.lock_raw();
}

/// Fork support: release the lock taken by [`fork_prepare`] (parent and child).
///
/// # Safety
/// After `fork_prepare` in this thread (or in the fork child).
pub unsafe fn fork_release() {
    // SAFETY: forwarded contract.
    unsafe { MAPPINGS.unlock_raw() }
}

/// Checks the mapping cache's invariant (`crate::invariant`).
pub(crate) fn check() {
    MAPPINGS.lock().check();
}

/// Unmaps every cached mapping (trim).
pub fn trim() {
    loop {
        let mut c = MAPPINGS.lock();
        if c.n == 0 {
            return;
        }
        let (b, l) = c.remove(0);
        drop(c);
        unmapped::bury((b + PAGE) as *mut u8);
        // SAFETY: a cached mapping is ours and unused.
        unsafe { sys::unmap(b as *mut u8, l) };
    }
}

#[inline]
fn header(p: *mut u8) -> *mut LargeHeader {
    p.wrapping_sub(PAGE) as *mut LargeHeader
}

pub fn usable_for(size: usize) -> Option<usize> {
    let s = size.max(1).checked_add(PAGE - 1)? & !(PAGE - 1);
    if s > isize::MAX as usize / 2 {
        return None;
    }
    Some(s)
}

/// Bytes from which a fresh mapping is aligned to a huge page and marked for THP.
const HUGE: usize = 2 << 20;

/// A fresh mapping of `len` bytes; from 2 MiB on it starts on a huge-page boundary and asks
/// for transparent huge pages, so touching it costs one fault per 2 MiB, not per 4 KiB.
fn map_fresh(len: usize) -> *mut u8 {
    if len < HUGE {
        return sys::map(len);
    }
    let p = sys::map_aligned(len, HUGE);
    if !p.is_null() {
        // SAFETY: p..p+len was just mapped by us.
        unsafe { sys::advise_huge(p, len) };
    }
    p
}

/// Maps a large allocation of at least `size` bytes aligned to `align`. `zeroed` asks for
/// zero-filled memory (a fresh mapping). Null when impossible.
pub fn alloc(size: usize, align: usize, zeroed: bool) -> *mut u8 {
    let Some(usable) = usable_for(size) else {
        return ptr::null_mut();
    };
    let map_len = PAGE + usable;
    let p = if align <= PAGE {
        let mut base = if zeroed {
            ptr::null_mut()
        } else {
            take_cached(map_len)
        };
        if base.is_null() {
            base = map_fresh(map_len);
        }
        if base.is_null() {
            return base;
        }
        // SAFETY: the mapping is map_len >= 2 * PAGE bytes.
        unsafe { base.add(PAGE) }
    } else {
        // Map extra, then cut so that the object is aligned and the header page precedes it.
        let Some(total) = map_len.checked_add(align) else {
            return ptr::null_mut();
        };
        let raw = sys::map(total);
        if raw.is_null() {
            return raw;
        }
        let p = (raw as usize + PAGE + align - 1) & !(align - 1);
        let base = p - PAGE;
        let head = base - raw as usize;
        let tail = total - head - map_len;
        // SAFETY: both ranges are page-aligned parts of the mapping just made, outside
        // [base, base + map_len).
        unsafe {
            if head != 0 {
                sys::unmap(raw, head);
            }
            if tail != 0 {
                sys::unmap((base + map_len) as *mut u8, tail);
            }
        }
        p as *mut u8
    };
    // SAFETY: the header page is mapped, writable and ours.
    unsafe {
        ptr::write(
            header(p),
            LargeHeader {
                magic: MAGIC,
                map_len,
                owner: AtomicU32::new(0),
            },
        );
    }
    if !addr_map::insert_large(header(p).cast()) {
        // No room for the map's leaf: a block the free path could not recognise is no
        // block. (The mapping is fresh or was cached; either way nobody else has it.)
        // SAFETY: header(p)..+map_len is the mapping made or taken above, unused.
        unsafe { sys::unmap(header(p).cast(), map_len) };
        return ptr::null_mut();
    }
    COUNT.fetch_add(1, Ordering::Relaxed);
    MAPPED.fetch_add(map_len, Ordering::Relaxed);
    unmapped::revive(p);
    p
}

/// Reports a pointer whose header page is not one of a live large allocation
/// (`addr_map`): a block freed before (its mapping gone, or cached), or an address slabcg
/// never handed out (a direct `mmap`, another allocator's memory, a page inside a block).
#[cold]
#[inline(never)]
fn not_a_large_block(p: *mut u8) -> ! {
    if unmapped::is_dead(p) {
        sys::fatal("double free, or use after free, of a large block (its mapping is gone)");
    }
    sys::fatal("free of a pointer that slabcg did not allocate, or a double free (large)")
}

/// Checks that `p` is a live large allocation, aborting with a message when it is not one:
/// its header page must be marked in `addr_map` (so a foreign address is reported before
/// its page below is read) and carry the magic word.
///
/// # Safety
/// `p` may be any address: the page below it is read only when `addr_map` marks it as the
/// header page of a live block (a free racing another free of the same block aside, which
/// is a double free already: `addr_map`'s module docs).
unsafe fn checked(p: *mut u8) -> *mut LargeHeader {
    if p as usize & (PAGE - 1) != 0 {
        sys::fatal("free of a pointer that slabcg did not allocate (large, misaligned)");
    }
    let h = header(p);
    if !addr_map::is_large(h.cast()) {
        not_a_large_block(p);
    }
    // SAFETY: addr_map marks h as the header page of a live large block: mapped and ours.
    if unsafe { (*h).magic } != MAGIC {
        sys::fatal("free of a pointer that slabcg did not allocate, or a double free (large)");
    }
    h
}

/// Unmaps a large allocation.
///
/// # Safety
/// `p` must be a live large allocation.
pub unsafe fn free(p: *mut u8) {
    // SAFETY: caller's contract.
    unsafe {
        let h = checked(p);
        let len = (*h).map_len;
        (*h).magic = 0;
        addr_map::remove_large(h.cast());
        COUNT.fetch_sub(1, Ordering::Relaxed);
        MAPPED.fetch_sub(len, Ordering::Relaxed);
        if !keep_cached(h as *mut u8, len) {
            unmapped::bury(p);
            sys::unmap(h as *mut u8, len);
        }
    }
}

/// Usable bytes of a large allocation.
///
/// # Safety
/// `p` must be a live large allocation.
pub unsafe fn usable_size(p: *mut u8) -> usize {
    // SAFETY: caller's contract.
    unsafe { (*checked(p)).map_len - PAGE }
}

/// The owner word of a large allocation (for the charge hooks).
///
/// # Safety
/// `p` must be a live large allocation.
pub unsafe fn owner(p: *mut u8) -> &'static AtomicU32 {
    // SAFETY: caller's contract; the header lives as long as the allocation, and the caller
    // does not keep the reference past the free.
    unsafe { &(*checked(p)).owner }
}

/// Resizes a large allocation in place or by `mremap`. Null when the OS refuses (the
/// allocation is then unchanged). A shrink always stays in place (the tail is unmapped);
/// growth may move the mapping, which keeps only page alignment.
///
/// # Safety
/// `p` must be a live large allocation, aligned to at most PAGE unless `new_size` does not
/// grow it.
pub unsafe fn realloc(p: *mut u8, new_size: usize) -> *mut u8 {
    let Some(usable) = usable_for(new_size) else {
        return ptr::null_mut();
    };
    let new_len = PAGE + usable;
    // SAFETY: caller's contract: p is live and its header readable.
    unsafe {
        let h = checked(p);
        let old_len = (*h).map_len;
        if new_len == old_len {
            return p;
        }
        if new_len < old_len {
            sys::unmap((h as *mut u8).add(new_len), old_len - new_len);
            (*h).map_len = new_len;
            MAPPED.fetch_sub(old_len - new_len, Ordering::Relaxed);
            return p;
        }
        // The block may move: its old address is dead unless it stays (revived below).
        unmapped::bury(p);
        addr_map::remove_large(h.cast());
        let nb = sys::remap(h as *mut u8, old_len, new_len);
        if nb.is_null() {
            unmapped::revive(p);
            // The leaf of the block's own header page exists: the insert cannot fail.
            let _ = addr_map::insert_large(h.cast());
            return nb;
        }
        let nh = nb as *mut LargeHeader;
        (*nh).map_len = new_len;
        if !addr_map::insert_large(nb) {
            // The moved block's GiB has no leaf and none can be mapped (out of memory).
            // The old address is gone, so null would lose the block, and a block no free
            // recognises must not be handed back: report. (One 32 KiB map per GiB, never
            // given back: this needs the OS to refuse it right after a successful mremap.)
            sys::fatal("out of memory for the large-block map while moving a large block");
        }
        MAPPED.fetch_add(new_len - old_len, Ordering::Relaxed);
        unmapped::revive(nb.add(PAGE));
        nb.add(PAGE)
    }
}
