//! Large allocations: requests above the largest size class, or aligned above a page. Each
//! gets its own mapping, its *extent*, with a one-page header just before the object:
//!
//! ```text
//!   base                     ptr = base + PAGE (aligned as asked)
//!   [ LargeHeader ... pad ]  [ object: usable bytes, a page multiple ] [ guard ] [ slack ]
//!   map_len == PAGE + usable + GUARD, rounded up to a multiple of 2 MiB from 2 MiB on
//! ```
//!
//! `GUARD` is a page in hardened builds (feature `hardened`), none otherwise: while the
//! block lives, the page right after its usable bytes is `PROT_NONE`, so a write or read
//! running off the end of a large block faults at once, as one running off a segment does.
//! The guard moves with the block's end (a realloc in place or by `mremap`) and is removed
//! before the extent goes to the mapping cache, whose extents are plain read-write memory.
//! A guard the kernel refuses (its map count at `vm.max_map_count`) leaves that block
//! unguarded, still correct; one it refuses to remove keeps the extent out of the cache (it
//! is unmapped), or makes [`realloc`] return null with the block unchanged (the global
//! allocator's realloc then moves the block to a new one).
//!
//! Extents of 2 MiB and more start on a 2 MiB boundary, are a multiple of 2 MiB and ask for
//! transparent huge pages, so touching one costs a fault per 2 MiB, not per 4 KiB. The slack
//! (less than 2 MiB, never touched by the block) costs address space, not memory, and lets a
//! growth stay in place. Growing beyond the extent moves the pages with `mremap` (page
//! tables move, bytes are not copied). A fresh mapping reads as zero, so `alloc_zeroed`
//! needs no memset.
//!
//! Freed extents of up to 64 MiB are kept in the *mapping cache* (at most `MAPPING_ENTRIES`,
//! and at most as many bytes as live large allocations hold, between 64 MiB and 1 GiB;
//! oldest evicted first) and reused by the next large allocation: the best fitting one, cut
//! to size (the rest stays cached), or, when none is big enough, several *gathered* into one
//! new extent by moving their pages there (`mremap` to a fixed address; 2 MiB aligned, so
//! huge pages stay huge), the missing part fresh. A program that keeps replacing big buffers
//! then pays neither `mmap`/`munmap` nor page faults for memory it had before. What stays
//! in the cache unused for a whole decay interval is unmapped (`crate::decay`); `trim()`
//! unmaps all of it; zeroed allocations always take a fresh mapping. Cached extents are not
//! charged to anyone: a block's charge goes at its free (`charge.rs`).

use core::ptr;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::decay::Decay;
use crate::lock::SpinLock;
use crate::sys::{self, PAGE};
use crate::{addr_map, unmapped};

const MAGIC: usize = 0x51ab_c91a_56e0_0001;

#[repr(C)]
struct LargeHeader {
    magic: usize,
    /// Bytes mapped from the header (which is the mapping's start) on: the extent.
    map_len: usize,
    /// The object's bytes, a page multiple; `PAGE + usable <= map_len`.
    usable: usize,
    /// Owner objcg id (0 = uncharged); written by the charge hooks.
    owner: AtomicU32,
    /// Whether the page after `usable` is a guard now (`GUARD`, hardened builds).
    guarded: bool,
}

/// The guard page after a live large block's usable bytes: a page in hardened builds,
/// none by default (module docs).
const GUARD: usize = if cfg!(feature = "hardened") { PAGE } else { 0 };

/// Live large blocks whose guard page is set (for `stats().guard`).
static GUARDED: AtomicUsize = AtomicUsize::new(0);

/// Bytes of the guard pages of live large blocks (part of `MAPPED`).
pub fn guard_bytes() -> usize {
    GUARDED.load(Ordering::Relaxed) * GUARD
}

/// Puts the guard page after the usable bytes of the block whose header is `h` (hardened
/// builds; nothing otherwise). A refusal leaves the block unguarded (module docs).
///
/// # Safety
/// `h` is the header of a live large block without a guard, whose extent holds
/// `PAGE + usable + GUARD` bytes.
unsafe fn set_guard(h: *mut LargeHeader) {
    if GUARD == 0 {
        return;
    }
    // SAFETY: caller's contract: the page after the usable bytes is in the extent, unused.
    unsafe {
        let g = (h as *mut u8).add(PAGE + (*h).usable);
        (*h).guarded = sys::protect_none(g, GUARD);
        if (*h).guarded {
            GUARDED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Removes the block's guard page, if it has one; false when the kernel refuses (the page
/// stays `PROT_NONE`, so the caller must not reuse the extent as plain memory).
///
/// # Safety
/// `h` is the header of a live large block.
unsafe fn clear_guard(h: *mut LargeHeader) -> bool {
    // SAFETY: caller's contract; `guarded` says the page after the usable bytes is the guard.
    unsafe {
        if GUARD == 0 || !(*h).guarded {
            return true;
        }
        let g = (h as *mut u8).add(PAGE + (*h).usable);
        if !sys::protect_rw(g, GUARD) {
            return false;
        }
        (*h).guarded = false;
    }
    GUARDED.fetch_sub(1, Ordering::Relaxed);
    true
}

/// Usable bytes of live large allocations that are charged to a tenant (for `stats()` and
/// the root tenant's view). Updated by the charge hooks (`charge.rs`), on the
/// large-allocation slow paths only.
pub static CHARGED_LARGE: AtomicUsize = AtomicUsize::new(0);

/// Live large allocations, their extents' bytes and their usable bytes, for `stats()`.
pub static COUNT: AtomicUsize = AtomicUsize::new(0);
pub static MAPPED: AtomicUsize = AtomicUsize::new(0);
pub static USABLE: AtomicUsize = AtomicUsize::new(0);
/// Bytes of freed mappings kept for reuse.
pub static CACHED: AtomicUsize = AtomicUsize::new(0);

const MAPPING_ENTRIES: usize = 32;
const MAPPINGS_MIN_BYTES: usize = 64 << 20;
const MAPPINGS_MAX_BYTES: usize = 1 << 30;
const MAPPING_MAX_ONE: usize = 64 << 20;

/// The huge page: extents from here on are aligned to it and a multiple of it.
const HUGE: usize = 2 << 20;

/// The cache's byte bound: as much as live large allocations hold, within bounds. Live plus
/// cached thus stays within twice the live bytes (and 1 GiB over them), so a burst of frees
/// cannot keep more than that, and the decay gives back what the program stopped reusing.
fn mapping_cache_bytes() -> usize {
    MAPPED
        .load(Ordering::Relaxed)
        .clamp(MAPPINGS_MIN_BYTES, MAPPINGS_MAX_BYTES)
}

/// Whether a cached extent is one of the huge kind (2 MiB aligned and a multiple of it),
/// which huge requests take and gather; the others are below 2 MiB.
fn is_huge(len: usize) -> bool {
    len >= HUGE
}

/// Whether an extent starts on a huge page and is a whole number of them.
fn huge_aligned(base: usize, len: usize) -> bool {
    base.is_multiple_of(HUGE) && len.is_multiple_of(HUGE)
}

/// The mapping cache: freed extents kept for reuse, `entries[..n]`, oldest first.
///
/// Invariant ([`MappingCache::check`]): `bytes == Σ entries[..n].1 == CACHED`, `n <=
/// MAPPING_ENTRIES`, every length a positive page multiple of at most `MAPPING_MAX_ONE`,
/// those of at least `HUGE` (and their bases) multiples of `HUGE`.
struct MappingCache {
    entries: [(usize, usize); MAPPING_ENTRIES],
    n: usize,
    bytes: usize,
    decay: Decay,
}

static MAPPINGS: SpinLock<MappingCache> = SpinLock::new(MappingCache {
    entries: [(0, 0); MAPPING_ENTRIES],
    n: 0,
    bytes: 0,
    decay: Decay::new(),
});

/// Extents taken out of the cache under its lock, unmapped or moved after it is dropped
/// (system calls stay outside the lock).
struct Taken {
    e: [(usize, usize); MAPPING_ENTRIES + 1],
    n: usize,
}

impl Taken {
    const fn new() -> Taken {
        Taken {
            e: [(0, 0); MAPPING_ENTRIES + 1],
            n: 0,
        }
    }

    fn push(&mut self, e: (usize, usize)) {
        // Never more than the cache held plus one: the callers take at most that many.
        if self.n < self.e.len() {
            self.e[self.n] = e;
            self.n += 1;
        } else {
            // SAFETY: e is an extent of ours nobody uses (it left the cache).
            unsafe { unmap_extent(e) };
        }
    }

    fn as_slice(&self) -> &[(usize, usize)] {
        &self.e[..self.n]
    }

    /// Unmaps every extent taken.
    fn unmap_all(&self) {
        for &e in self.as_slice() {
            // SAFETY: taken extents are ours and unused (they left the cache).
            unsafe { unmap_extent(e) };
        }
    }
}

/// Unmaps a freed extent, recording the block that lived at its start as dead.
///
/// # Safety
/// The extent must be ours and unused.
unsafe fn unmap_extent((b, l): (usize, usize)) {
    unmapped::bury((b + PAGE) as *mut u8);
    // SAFETY: caller's contract.
    unsafe { sys::unmap(b as *mut u8, l) };
}

impl MappingCache {
    /// The invariant (struct docs), under the lock (the caller holds `self`).
    fn check(&self) {
        let sum: usize = self.entries[..self.n].iter().map(|e| e.1).sum();
        if self.n > MAPPING_ENTRIES || sum != self.bytes || CACHED.load(Ordering::Relaxed) != sum {
            crate::invariant::broken("mapping cache: bytes != Σ lengths");
        }
        if self.entries[..self.n].iter().any(|e| {
            e.1 == 0
                || e.1 % PAGE != 0
                || e.1 > MAPPING_MAX_ONE
                || (is_huge(e.1) && !huge_aligned(e.0, e.1))
        }) {
            crate::invariant::broken("mapping cache: a length is not a page multiple in bounds");
        }
    }

    /// The cached bytes below entry `i` (older than it).
    fn bytes_below(&self, i: usize) -> usize {
        self.entries[..i].iter().map(|e| e.1).sum()
    }

    fn remove(&mut self, i: usize) -> (usize, usize) {
        let e = self.entries[i];
        let at = self.bytes_below(i);
        self.entries.copy_within(i + 1..self.n, i);
        self.n -= 1;
        self.bytes -= e.1;
        CACHED.store(self.bytes, Ordering::Relaxed);
        // The newer extents moved down: those below the mark stay idle, not the ones that
        // moved down to it (a best fit taking an old extent leaves a just freed one idle
        // for a whole interval, not for what remains of this one).
        self.decay.taken_out(at, e.1);
        e
    }

    /// Appends an extent (the caller made room).
    fn push(&mut self, e: (usize, usize)) {
        debug_assert!(self.n < MAPPING_ENTRIES);
        let n = self.n;
        self.entries[n] = e;
        self.n += 1;
        self.bytes += e.1;
        CACHED.store(self.bytes, Ordering::Relaxed);
    }

    /// Cuts `len` bytes off the front of entry `i` (longer than `len`): the front is the
    /// caller's, the rest stays cached in its place.
    fn cut_front(&mut self, i: usize, len: usize) -> usize {
        let (b, l) = self.entries[i];
        debug_assert!(l > len);
        self.entries[i] = (b + len, l - len);
        self.bytes -= len;
        CACHED.store(self.bytes, Ordering::Relaxed);
        let at = self.bytes_below(i);
        self.decay.taken_out(at, len);
        b
    }

    /// When a decay interval is over, takes out what stayed idle through it, oldest
    /// extents first (the tail of a huge one when only part of it is due).
    fn decay(&mut self, now: u64, out: &mut Taken) {
        let mut due = self.decay.due(now, self.bytes).unwrap_or(0);
        while due >= PAGE && self.n > 0 {
            let (b, l) = self.entries[0];
            if l <= due {
                out.push(self.remove(0));
                due -= l;
                continue;
            }
            let cut = if is_huge(l) { due & !(HUGE - 1) } else { 0 };
            if cut > 0 {
                // The tail, so the rest keeps its start (and the block recorded there).
                self.entries[0] = (b, l - cut);
                self.bytes -= cut;
                CACHED.store(self.bytes, Ordering::Relaxed);
                self.decay.observe(self.bytes);
                // The caller unmaps the tail; no block starts there, so the burial of its
                // start that comes with it marks nothing live.
                out.push((b + l - cut, cut));
            }
            break;
        }
    }
}

/// Unmaps what stayed idle in the mapping cache through a decay interval, the check that
/// large allocations and frees make, for a program that stopped making them (`sweep.rs`).
/// Skips when the cache's lock is held: its holder makes the check.
pub fn decay_idle() {
    let now = sys::now_ms();
    let mut gone = Taken::new();
    let Some(mut c) = MAPPINGS.try_lock() else {
        return;
    };
    c.decay(now, &mut gone);
    drop(c);
    gone.unmap_all();
}

/// A cached extent of exactly `len` bytes (best fit, cut to size; or gathered from several
/// when `len` is huge and none is big enough), or null.
fn take_cached(len: usize) -> *mut u8 {
    let now = sys::now_ms();
    let mut gone = Taken::new();
    let mut pieces = Taken::new();
    let mut c = MAPPINGS.lock();
    c.decay(now, &mut gone);
    let huge = is_huge(len);
    let mut best = usize::MAX;
    for i in 0..c.n {
        let l = c.entries[i].1;
        if is_huge(l) == huge && l >= len && (best == usize::MAX || l < c.entries[best].1) {
            best = i;
        }
    }
    let mut found = ptr::null_mut();
    if best != usize::MAX {
        found = if c.entries[best].1 > len {
            c.cut_front(best, len) as *mut u8
        } else {
            c.remove(best).0 as *mut u8
        };
    } else if huge {
        // Nothing big enough: take the biggest extents until they cover `len` (the last
        // one cut to what is missing), to be moved into one new extent below.
        let mut have = 0;
        while have < len {
            let mut big = usize::MAX;
            for i in 0..c.n {
                let l = c.entries[i].1;
                if is_huge(l) && (big == usize::MAX || l > c.entries[big].1) {
                    big = i;
                }
            }
            if big == usize::MAX {
                break;
            }
            let l = c.entries[big].1;
            if have + l > len {
                let b = c.cut_front(big, len - have);
                pieces.push((b, len - have));
                have = len;
            } else {
                pieces.push(c.remove(big));
                have += l;
            }
        }
    }
    drop(c);
    gone.unmap_all();
    if pieces.n > 0 {
        // SAFETY: the pieces left the cache: ours, unused, huge-aligned.
        found = unsafe { gather(&pieces, len) };
    }
    found
}

/// Moves `pieces` (huge-aligned extents nobody uses) into the front of a new extent of `len`
/// bytes, the rest of it fresh, and returns it; null (every piece unmapped, nothing kept)
/// when the OS refuses.
///
/// # Safety
/// The pieces are ours, unused, each a multiple of `HUGE` at a `HUGE`-aligned base, and
/// together at most `len`.
unsafe fn gather(pieces: &Taken, len: usize) -> *mut u8 {
    let dst = map_fresh(len, len);
    if dst.is_null() {
        pieces.unmap_all();
        return dst;
    }
    let mut off = 0;
    for (k, &(b, l)) in pieces.as_slice().iter().enumerate() {
        // Whatever block once lived at the piece's start is gone; the new block revives
        // its own address.
        unmapped::bury((b + PAGE) as *mut u8);
        // SAFETY: the piece and dst + off.. (inside the new extent, since the pieces sum to
        // at most len) are ours and unused; both are HUGE aligned.
        let moved = unsafe { move_pages(b, l, dst as usize + off) };
        if moved < l {
            // The OS refused (out of mappings): give up the gather. What moved goes with
            // the new extent; the rest of this piece and the pieces after it are unmapped.
            // SAFETY: as above; each range is unmapped once.
            unsafe {
                sys::unmap(dst, len);
                sys::unmap((b + moved) as *mut u8, l - moved);
                for &e in &pieces.as_slice()[k + 1..] {
                    unmap_extent(e);
                }
            }
            return ptr::null_mut();
        }
        off += l;
    }
    dst
}

/// Moves the pages of `src..src+len` to `dst..dst+len` (both HUGE aligned, `len` a multiple
/// of HUGE): in one call, or, on kernels that move only one mapping at a time (before 6.17;
/// a gathered extent is several), one huge page at a time, which never spans two of ours.
/// Returns the bytes moved, a prefix; the source past them is unchanged, the destination
/// past them possibly unmapped.
///
/// # Safety
/// Both ranges are ours, unused and disjoint.
unsafe fn move_pages(src: usize, len: usize, dst: usize) -> usize {
    // SAFETY: caller's contract.
    if unsafe { sys::remap_to(src as *mut u8, len, len, dst as *mut u8) } {
        return len;
    }
    let mut off = 0;
    while off < len {
        // SAFETY: caller's contract, for the part of both ranges at off.
        let ok =
            unsafe { sys::remap_to((src + off) as *mut u8, HUGE, HUGE, (dst + off) as *mut u8) };
        if !ok {
            break;
        }
        off += HUGE;
    }
    off
}

/// Keeps a freed extent for reuse, evicting the oldest ones beyond the bounds. False when
/// it is not to be kept (too big, or a huge one that lost its alignment by a resize): the
/// caller unmaps it.
fn keep_cached(base: *mut u8, len: usize) -> bool {
    if len > MAPPING_MAX_ONE || (is_huge(len) && !huge_aligned(base as usize, len)) {
        return false;
    }
    let now = sys::now_ms();
    let mut gone = Taken::new();
    let bound = mapping_cache_bytes();
    let mut c = MAPPINGS.lock();
    c.decay(now, &mut gone);
    while c.n > 0 && (c.n == MAPPING_ENTRIES || c.bytes + len > bound) {
        let e = c.remove(0);
        gone.push(e);
    }
    c.push((base as usize, len));
    drop(c);
    gone.unmap_all();
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
        let e = c.remove(0);
        drop(c);
        // SAFETY: a cached mapping is ours and unused.
        unsafe { unmap_extent(e) };
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

/// The extent of a block of `usable` bytes (a result of [`usable_for`]): header and object,
/// rounded up to a multiple of `HUGE` from `HUGE` on (no overflow: `usable` is at most
/// `isize::MAX / 2`).
pub fn extent_for(usable: usize) -> usize {
    let len = PAGE + usable + GUARD;
    if is_huge(len) {
        (len + HUGE - 1) & !(HUGE - 1)
    } else {
        len
    }
}

/// A fresh mapping of `len` bytes for a block whose header, object and guard take its first
/// `used` bytes; from 2 MiB on it starts on a huge-page boundary and asks for transparent
/// huge pages on the huge pages that `used` fills, so touching them costs one fault per
/// 2 MiB, not per 4 KiB. The last, partly used one stays in 4 KiB pages: a table of 2 MiB
/// (a power of two, as hash tables are) lies 4 KiB into the extent's second huge page, which
/// as a huge page made the block 4 MiB resident (redis's key table under LD_PRELOAD). The
/// price is up to 511 faults of 4 KiB per block: mimalloc-bench's malloc-large takes 7,675
/// minor faults against 520 with the last huge page advised too, in the same time
/// (BENCHMARKS.md section 9).
fn map_fresh(len: usize, used: usize) -> *mut u8 {
    if !is_huge(len) {
        return sys::map(len);
    }
    let p = sys::map_aligned(len, HUGE);
    let advised = used.min(len) & !(HUGE - 1);
    if !p.is_null() && advised > 0 {
        // SAFETY: p..p+advised lies in what was just mapped by us.
        unsafe { sys::advise_huge(p, advised) };
    }
    p
}

/// Maps a large allocation of at least `size` bytes aligned to `align`. `zeroed` asks for
/// zero-filled memory (a fresh mapping). Null when impossible.
pub fn alloc(size: usize, align: usize, zeroed: bool) -> *mut u8 {
    let Some(usable) = usable_for(size) else {
        return ptr::null_mut();
    };
    let map_len = extent_for(usable);
    let p = if align <= PAGE {
        let mut base = if zeroed {
            ptr::null_mut()
        } else {
            take_cached(map_len)
        };
        if base.is_null() {
            base = map_fresh(map_len, PAGE + usable + GUARD);
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
                usable,
                owner: AtomicU32::new(0),
                guarded: false,
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
    // SAFETY: the block's header, just written; map_len covers PAGE + usable + GUARD.
    unsafe { set_guard(header(p)) };
    COUNT.fetch_add(1, Ordering::Relaxed);
    MAPPED.fetch_add(map_len, Ordering::Relaxed);
    USABLE.fetch_add(usable, Ordering::Relaxed);
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

/// Frees a large allocation: its extent goes to the mapping cache, or is unmapped.
///
/// # Safety
/// `p` must be a live large allocation.
pub unsafe fn free(p: *mut u8) {
    // SAFETY: caller's contract.
    unsafe {
        let h = checked(p);
        let len = (*h).map_len;
        // Cached extents are plain memory: one whose guard stays is not cached (it goes
        // with the unmapping, so it is no longer counted).
        let plain = clear_guard(h);
        if !plain {
            GUARDED.fetch_sub(1, Ordering::Relaxed);
        }
        (*h).magic = 0;
        addr_map::remove_large(h.cast());
        COUNT.fetch_sub(1, Ordering::Relaxed);
        MAPPED.fetch_sub(len, Ordering::Relaxed);
        USABLE.fetch_sub((*h).usable, Ordering::Relaxed);
        if !plain || !keep_cached(h as *mut u8, len) {
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
    unsafe { (*checked(p)).usable }
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
/// allocation is then unchanged). A shrink always stays in place (the extent's tail is
/// unmapped); a growth within the extent too; a bigger growth may move the mapping, which
/// keeps only page alignment.
///
/// # Safety
/// `p` must be a live large allocation, aligned to at most PAGE unless `new_size` does not
/// grow it.
pub unsafe fn realloc(p: *mut u8, new_size: usize) -> *mut u8 {
    let Some(usable) = usable_for(new_size) else {
        return ptr::null_mut();
    };
    let new_len = extent_for(usable);
    // SAFETY: caller's contract: p is live and its header readable.
    unsafe {
        let h = checked(p);
        let (old_len, old_usable) = ((*h).map_len, (*h).usable);
        if usable == old_usable {
            return p;
        }
        // The guard moves to the new end (a moved extent would carry it along, into the
        // middle of the block).
        if !clear_guard(h) {
            return ptr::null_mut();
        }
        if new_len <= old_len {
            if new_len < old_len {
                sys::unmap((h as *mut u8).add(new_len), old_len - new_len);
                (*h).map_len = new_len;
                MAPPED.fetch_sub(old_len - new_len, Ordering::Relaxed);
            }
            (*h).usable = usable;
            USABLE.fetch_add(usable, Ordering::Relaxed);
            USABLE.fetch_sub(old_usable, Ordering::Relaxed);
            set_guard(h);
            return p;
        }
        // The block may move: its old address is dead unless it stays (revived below).
        unmapped::bury(p);
        addr_map::remove_large(h.cast());
        let nb = grow(h as *mut u8, old_len, new_len, PAGE + usable + GUARD);
        if nb.is_null() {
            unmapped::revive(p);
            // The leaf of the block's own header page exists: the insert cannot fail.
            let _ = addr_map::insert_large(h.cast());
            set_guard(h);
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
        (*nh).usable = usable;
        set_guard(nh);
        MAPPED.fetch_add(new_len - old_len, Ordering::Relaxed);
        USABLE.fetch_add(usable - old_usable, Ordering::Relaxed);
        unmapped::revive(nb.add(PAGE));
        nb.add(PAGE)
    }
}

/// Grows the extent `h..h+old_len` to `new_len`, moving it: a huge one into a fresh
/// huge-aligned extent (so its huge pages stay, and it can be cached again when freed), else
/// where the kernel likes. Null when the OS refuses (the extent is then unchanged).
///
/// # Safety
/// `h..h+old_len` is a live block's extent; the block will take its first `used` bytes
/// (`map_fresh`).
unsafe fn grow(h: *mut u8, old_len: usize, new_len: usize, used: usize) -> *mut u8 {
    if is_huge(old_len) && huge_aligned(h as usize, old_len) {
        let dst = map_fresh(new_len, used);
        if !dst.is_null() {
            // SAFETY: the extent is ours; dst is a fresh extent of new_len, disjoint from it.
            if unsafe { sys::remap_to(h, old_len, old_len, dst) } {
                return dst;
            }
            // SAFETY: dst is ours and unused (the move did not happen).
            unsafe { sys::unmap(dst, new_len) };
        }
    }
    // SAFETY: caller's contract (on kernels before 6.17 this fails for a gathered extent,
    // which spans several mappings: the caller then copies).
    unsafe { sys::remap(h, old_len, new_len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `take_cached` / `keep_cached` / `decay_idle` read the clock before they take the
    /// cache's lock. Two threads at an interval's end: B (read `t + 1`) gets the lock first
    /// and decays, starting a new interval at `t + 1`; then A (read `t`, before B) decays
    /// with `now` one ms before the tick: `Decay::due` sees `t - (t + 1)` wrap to 2^64 - 1,
    /// takes the interval as over, and every extent (all under the new mark, which is all
    /// of them) goes, though none was idle for a moment.
    #[test]
    fn a_decay_with_a_clock_read_before_the_last_one_takes_nothing() {
        let mut c = MappingCache {
            entries: [(0, 0); MAPPING_ENTRIES],
            n: 0,
            bytes: 0,
            decay: Decay::new(),
        };
        let t = 10_000_000;
        // Three extents (fake addresses: nothing is mapped or unmapped here).
        for k in 0..3 {
            c.entries[k] = (0x1000_0000 * (k + 1), 16 * PAGE);
            c.n += 1;
            c.bytes += 16 * PAGE;
        }
        // B: the interval that began at `t - interval` ends; all three were reused in it.
        c.decay.due(t - interval(), 0);
        let mut gone = Taken::new();
        c.decay(t + 1, &mut gone);
        assert_eq!(gone.n, 0, "nothing stayed idle through the interval");
        // A, whose clock read came first.
        let mut gone = Taken::new();
        c.decay(t, &mut gone);
        assert_eq!(
            gone.n, 0,
            "a decay whose clock read came before the tick unmapped {} of 3 extents, none idle",
            gone.n
        );
    }

    fn interval() -> u64 {
        crate::decay::interval_ms()
    }
}
