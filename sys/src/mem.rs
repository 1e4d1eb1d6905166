//! Mappings: anonymous memory from the OS, given back, advised, resized; the page size; the
//! resident set. See the contract in the crate root.
//!
//! Under Miri (`cfg(miri)`, scripts/verify.sh) some calls have narrow fallbacks, because Miri
//! models `mmap`/`munmap`/`mremap` only as malloc/free/realloc of whole mappings and has no
//! `madvise`; each fallback says what it gives up. Only the interpreter ever runs them.

use core::ptr;

/// The OS page size every layout computation assumes. Checked against `sysconf` at startup
/// (see [`check_page_size`]); a kernel with bigger pages still works because every mapping we
/// make is a multiple of this and `mmap` rounds up.
pub const PAGE: usize = 4096;

/// `mmap` flags of every mapping. Miri accepts exactly `MAP_PRIVATE | MAP_ANONYMOUS`;
/// `MAP_NORESERVE` only tells the kernel not to reserve swap for the range, which changes
/// nothing the program can observe short of running out of memory.
#[cfg(not(miri))]
const MAP_FLAGS: libc::c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
#[cfg(miri)]
const MAP_FLAGS: libc::c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;

/// Maps `len` bytes of fresh, zeroed, read-write anonymous memory. Null on failure.
pub fn map(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping with no fixed address cannot alias existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            MAP_FLAGS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

/// Maps `len` bytes whose start is a multiple of `align` (a power of two >= PAGE), by mapping
/// `len + align` and unmapping the unaligned head and the tail. Null on failure.
pub fn map_aligned(len: usize, align: usize) -> *mut u8 {
    map_aligned_at(len, align, 0)
}

/// Maps `len` bytes starting at `offset` past a multiple of `align` (a power of two >= PAGE;
/// `offset` a page multiple below `align`), by mapping `len + align` and unmapping what lies
/// before and after. Null on failure.
pub fn map_aligned_at(len: usize, align: usize, offset: usize) -> *mut u8 {
    debug_assert!(align.is_power_of_two() && offset < align && offset.is_multiple_of(PAGE));
    let Some(total) = len.checked_add(align) else {
        return ptr::null_mut();
    };
    let raw = map(total);
    if raw.is_null() {
        return raw;
    }
    // The first address >= raw that is `offset` past a multiple of `align`: at most
    // `align - PAGE` bytes in, so `len` bytes from it stay inside the mapping.
    let start = (raw as usize).wrapping_sub(offset).wrapping_add(align - 1) & !(align - 1);
    let start = start.wrapping_add(offset);
    let head = start - raw as usize;
    let tail = total - head - len;
    // SAFETY: both ranges lie inside the mapping just made and are page multiples, since raw,
    // start and len are page aligned.
    unsafe {
        if head != 0 {
            unmap(raw, head);
        }
        if tail != 0 {
            unmap((start + len) as *mut u8, tail);
        }
    }
    start as *mut u8
}

/// Unmaps a range.
///
/// # Safety
/// `p..p+len` must be a page-aligned range this crate mapped and no longer uses.
pub unsafe fn unmap(p: *mut u8, len: usize) {
    #[cfg(not(miri))]
    // SAFETY: the caller guarantees the range is ours and dead.
    unsafe {
        libc::munmap(p.cast(), len);
    }
    // Miri can only munmap a whole mapping, exactly as mmap returned it, while this crate
    // unmaps parts (the unaligned head and tail in `map_aligned_at`, a shrunk large block's
    // tail, pieces of split cached mappings). So under Miri the range stays allocated (Miri
    // does not report mmap memory as leaked) and is made uninitialised instead: any later read
    // of it, which on Linux would fault, is reported by Miri as a read of uninitialised
    // memory. What this gives up: a write after unmap goes unnoticed.
    #[cfg(miri)]
    // SAFETY: the caller guarantees the range is ours, mapped and dead, so overwriting it
    // (with uninitialised bytes) affects nothing anybody may still read.
    unsafe {
        forget_contents(p, len)
    }
}

/// Makes `p..p+len` uninitialised, a page at a time (one typed copy each in the interpreter).
///
/// # Safety
/// `p..p+len` must be writable memory nobody may read any more.
#[cfg(miri)]
unsafe fn forget_contents(p: *mut u8, len: usize) {
    use core::mem::MaybeUninit;
    let mut off = 0;
    while off < len {
        // SAFETY: off < len, so the chunk lies in the caller's writable range; MaybeUninit
        // has alignment 1.
        unsafe {
            if len - off >= PAGE {
                p.add(off)
                    .cast::<MaybeUninit<[u8; PAGE]>>()
                    .write(MaybeUninit::uninit());
                off += PAGE;
            } else {
                p.add(off)
                    .cast::<MaybeUninit<u8>>()
                    .write(MaybeUninit::uninit());
                off += 1;
            }
        }
    }
}

/// Tells the kernel the range's contents are no longer needed: the pages stop counting as
/// resident and read back as zero when touched again.
///
/// # Safety
/// `p..p+len` must be a page-aligned range this crate mapped whose contents nobody needs.
pub unsafe fn release(p: *mut u8, len: usize) {
    #[cfg(not(miri))]
    // SAFETY: the caller guarantees the range is ours and its contents are dead; MADV_DONTNEED
    // on a private anonymous mapping only drops the pages.
    unsafe {
        libc::madvise(p.cast(), len, libc::MADV_DONTNEED);
    }
    // Miri has no madvise. What MADV_DONTNEED does to a private anonymous mapping, as far as
    // the program can tell, is that the range reads back as zero: write the zeros.
    #[cfg(miri)]
    // SAFETY: the caller guarantees the range is ours, writable and its contents dead.
    unsafe {
        ptr::write_bytes(p, 0, len)
    }
}

/// Asks for transparent huge pages on a range (where the kernel's THP mode is `madvise`):
/// one fault per 2 MiB instead of per 4 KiB when the range is touched. A hint; ignored when
/// unsupported.
///
/// # Safety
/// `p..p+len` must be a page-aligned range this crate mapped.
pub unsafe fn advise_huge(p: *mut u8, len: usize) {
    // Not under Miri, which has no madvise: the hint changes no contents.
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: the caller guarantees the range is ours; MADV_HUGEPAGE changes no contents.
    unsafe {
        libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE);
    }
    #[cfg(any(not(target_os = "linux"), miri))]
    let _ = (p, len);
}

/// Makes a page range inaccessible (`PROT_NONE`): a guard page, where any read or write
/// faults. False when the OS refuses (the range stays as it was).
///
/// # Safety
/// `p..p+len` must be a page-aligned range this crate mapped that nobody uses.
pub unsafe fn protect_none(p: *mut u8, len: usize) -> bool {
    // Miri has no mprotect; only the `hardened` allocator asks, which Miri does not run.
    #[cfg(not(miri))]
    // SAFETY: the caller guarantees the range is ours and unused; only its protection changes.
    unsafe {
        libc::mprotect(p.cast(), len, libc::PROT_NONE) == 0
    }
    #[cfg(miri)]
    {
        let _ = (p, len);
        false
    }
}

/// Makes a page range readable and writable again (undoes [`protect_none`]). False when the
/// OS refuses (the range stays as it was).
///
/// # Safety
/// `p..p+len` must be a page-aligned range this crate mapped.
pub unsafe fn protect_rw(p: *mut u8, len: usize) -> bool {
    #[cfg(not(miri))]
    // SAFETY: the caller guarantees the range is ours; access only widens.
    unsafe {
        libc::mprotect(p.cast(), len, libc::PROT_READ | libc::PROT_WRITE) == 0
    }
    #[cfg(miri)]
    {
        let _ = (p, len);
        false
    }
}

/// Grows or shrinks a mapping, moving it if needed. Null on failure (the old mapping is then
/// unchanged).
///
/// # Safety
/// `p..p+old_len` must be a whole mapping this crate made.
#[cfg(all(target_os = "linux", not(miri)))]
pub unsafe fn remap(p: *mut u8, old_len: usize, new_len: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the mapping is ours; MREMAP_MAYMOVE keeps the contents.
    let q = unsafe { libc::mremap(p.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
    if q == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        q.cast()
    }
}

/// Moves the mapping `p..p+old_len` (grown to `new_len`, the new pages fresh and zero) to
/// `dst`, replacing what was mapped at `dst..dst+new_len`: page tables move, no byte is
/// copied, and huge pages stay huge when `p`, `dst` and `old_len` are multiples of 2 MiB.
/// False on failure: the old mapping is then unchanged, and `dst..dst+new_len` may have been
/// unmapped (the kernel clears the destination first). Always false without `mremap` and
/// under Miri.
///
/// # Safety
/// `p..p+old_len` must be ours (one mapping or part of one; several only on kernels that
/// move several, 6.17 on), and `dst..dst+new_len` ours too, unused and not overlapping it.
#[cfg(all(target_os = "linux", not(miri)))]
pub unsafe fn remap_to(p: *mut u8, old_len: usize, new_len: usize, dst: *mut u8) -> bool {
    // SAFETY: the caller guarantees both ranges are ours and disjoint; MREMAP_FIXED only
    // replaces the destination, which nobody uses.
    let q = unsafe {
        libc::mremap(
            p.cast(),
            old_len,
            new_len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            dst.cast::<libc::c_void>(),
        )
    };
    q == dst.cast()
}

/// Without `mremap` (and under Miri, which moves only whole mappings to addresses it picks):
/// never moves; callers fall back to fresh memory.
///
/// # Safety
/// As the Linux version.
#[cfg(any(not(target_os = "linux"), miri))]
pub unsafe fn remap_to(_p: *mut u8, _old_len: usize, _new_len: usize, _dst: *mut u8) -> bool {
    false
}

/// Without `mremap`, the caller falls back to allocate-copy-free. Also the Miri version:
/// Miri's `mremap` resizes only a whole mapping as `mmap` returned it, while this crate
/// remaps pieces of them (the aligned middle of a `map_aligned` mapping, the parts of a split
/// cached mapping); a refused remap is a path the callers already handle.
///
/// # Safety
/// As the Linux version.
#[cfg(any(not(target_os = "linux"), miri))]
pub unsafe fn remap(_p: *mut u8, _old_len: usize, _new_len: usize) -> *mut u8 {
    ptr::null_mut()
}

/// Returns true when the kernel's page size is the one the layouts were computed for.
pub fn check_page_size() -> bool {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    p > 0 && p as usize <= PAGE
}

/// Resident set size of this process in bytes, from /proc/self/statm (0 when unavailable).
/// Allocation-free: reads into a stack buffer.
pub fn resident_bytes() -> usize {
    // Miri's isolation forbids opening files; 0 is this function's "unavailable".
    if cfg!(miri) {
        return 0;
    }
    let path = b"/proc/self/statm\0";
    let mut buf = [0u8; 128];
    // SAFETY: path is NUL-terminated; buf is a valid writable buffer of its length.
    let n = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return 0;
    }
    // statm: size resident shared ... (in pages); take the second field.
    let mut fields = buf[..n as usize].split(|&b| b == b' ');
    fields.next();
    let mut pages = 0usize;
    for &b in fields.next().unwrap_or(&[]) {
        if b.is_ascii_digit() {
            pages = pages * 10 + (b - b'0') as usize;
        }
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
    pages * page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_aligned_at_lands_on_the_offset() {
        const ALIGN: usize = 8 << 20;
        for offset in [0, 4 << 20, PAGE] {
            // Each try maps 12 MiB, which Miri cannot give back (see `unmap`): one there.
            for _ in 0..if cfg!(miri) { 1 } else { 8 } {
                let p = map_aligned_at(4 << 20, ALIGN, offset);
                assert!(!p.is_null());
                assert_eq!(p as usize % ALIGN, offset);
                // SAFETY: p..p+4 MiB is the fresh writable mapping just made; unmapped once.
                unsafe {
                    *p = 1;
                    *p.add((4 << 20) - 1) = 2;
                    unmap(p, 4 << 20);
                }
            }
        }
    }
}
