//! The C allocation functions, with glibc's semantics where C leaves a choice.
//!
//! - Alignment: blocks of more than 8 bytes are 16-byte aligned (`alignof(max_align_t)` on
//!   x86-64), by rounding the size up to 16 (every size class that is a multiple of 16 is
//!   16-aligned); blocks of at most 8 bytes are 8-aligned, as mimalloc and jemalloc do.
//! - Failure: null with `errno = ENOMEM` (out of memory, or the current tenant's `max`
//!   refused the charge); sizes whose product overflows (`calloc`, `reallocarray`) fail the
//!   same way without allocating.
//! - `malloc(0)` returns a unique pointer that `free` accepts; `realloc(p, 0)` with a non-null
//!   `p` frees it and returns null (glibc); `realloc(NULL, n)` is `malloc(n)`; `free(NULL)`
//!   does nothing.
//! - Alignment arguments: `posix_memalign` returns `EINVAL` unless the alignment is a power of
//!   two and a multiple of `sizeof(void *)`; `aligned_alloc` fails with `EINVAL` unless it is
//!   a power of two (glibc 2.38 and C17); `memalign` rounds a non-power of two up, as glibc
//!   does; `valloc` and `pvalloc` align to the page (`pvalloc` also rounds the size up to
//!   pages).
//! - `free_sized` and `free_aligned_sized` (C23) ignore the size and alignment and free as
//!   `free` does (as glibc): a wrong size from the caller cannot send a block to a wrong class.

use core::ffi::{c_int, c_void};
use core::ptr;

use slabcg_allocator::raw::{self, c_size};

/// The OS page, for `valloc` / `pvalloc`.
const PAGE: usize = 4096;

/// Sets `errno`.
#[cold]
fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// A block of `c_size(n)` bytes, or null with ENOMEM: the fast path inline, everything else
/// in [`alloc_slow`], a tail call, so that `malloc` sets up no stack frame.
#[inline(always)]
fn alloc(n: usize) -> *mut c_void {
    let p = raw::c_malloc_fast(n);
    if !p.is_null() {
        return p.cast();
    }
    alloc_slow(n)
}

/// [`alloc`] past the thread's bin: a refill, a tenant's charge, a large block, a failure.
/// `extern "C"`, which cannot unwind, so that the caller needs no unwind landing pad around
/// the call and makes it a jump.
#[cold]
#[inline(never)]
extern "C" fn alloc_slow(n: usize) -> *mut c_void {
    let p = raw::alloc(c_size(n), 8);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// The size asked of `raw::alloc` (at alignment 8) for `size` bytes aligned to `align <=
/// 16`: C's `malloc` size (`c_size`, 16-aligned above 8 bytes), and at least 16 when 16 is
/// asked for, since the slots of the 8-byte class are only 8 apart.
fn small_aligned_size(align: usize, size: usize) -> usize {
    if align > 8 {
        c_size(size.max(16))
    } else {
        c_size(size)
    }
}

/// Allocates `size` bytes aligned to `align` (a power of two), or null with ENOMEM.
fn alloc_aligned(align: usize, size: usize) -> *mut c_void {
    let p = if align <= 16 {
        raw::alloc(small_aligned_size(align, size), 8)
    } else {
        raw::alloc(size, align)
    };
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// C `malloc`: `size` bytes, or null with `errno = ENOMEM`.
///
/// # Safety
/// None beyond C's: the block must be freed once, with this library's `free` (or `realloc`).
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    alloc(size)
}

/// C `free`: gives `p` back; null does nothing. A pointer this library did not hand out, or
/// one freed twice, is reported where the allocator can tell (the process then aborts with a
/// message).
///
/// # Safety
/// `p` must be null or a live block of this library, freed once.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: forwarded contract.
    if unsafe { raw::c_free_fast(p.cast()) } {
        return;
    }
    // SAFETY: forwarded contract; the fast path did nothing.
    unsafe { free_slow(p) }
}

/// [`free`] past the thread's bin (null, large blocks, accounted slots, a full bin), a tail
/// call so that `free` sets up no stack frame (`extern "C"`: see [`alloc_slow`]).
///
/// # Safety
/// As [`free`].
#[cold]
#[inline(never)]
unsafe extern "C" fn free_slow(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { raw::free(p.cast()) }
}

/// C `calloc`: `n * size` zeroed bytes; null with ENOMEM when the product overflows.
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let p = raw::alloc_zeroed(c_size(total), 8);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// C `realloc`: null `p` is `malloc(size)`; size 0 frees `p` and returns null (glibc); a
/// failure returns null with ENOMEM and leaves `p` as it was.
///
/// # Safety
/// `p` must be null or a live block of this library; on success it must not be used again
/// (unless it is the pointer returned).
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return alloc(size);
    }
    if size == 0 {
        // SAFETY: p is a live block (caller's contract).
        unsafe { raw::free(p.cast()) };
        return ptr::null_mut();
    }
    // SAFETY: p is a live, non-null block; the size is not zero.
    let q = unsafe { raw::realloc(p.cast(), c_size(size)) };
    if q.is_null() {
        set_errno(libc::ENOMEM);
    }
    q.cast()
}

/// `reallocarray` (glibc, BSD): `realloc(p, n * size)`, failing with ENOMEM (and `p`
/// unchanged) when the product overflows.
///
/// # Safety
/// As [`realloc`].
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded contract.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// POSIX `posix_memalign`: stores a block of `size` bytes aligned to `align` in `*out` and
/// returns 0; `EINVAL` when `align` is not a power of two multiple of `sizeof(void *)` (or
/// `out` is null), `ENOMEM` when out of memory. `*out` is unchanged on failure; `errno` is
/// not set here (a failed mapping may have set it, as under glibc).
///
/// # Safety
/// `out` must be null or valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if out.is_null()
        || !align.is_power_of_two()
        || !align.is_multiple_of(core::mem::size_of::<usize>())
    {
        return libc::EINVAL;
    }
    let p = if align <= 16 {
        raw::alloc(small_aligned_size(align, size), 8)
    } else {
        raw::alloc(size, align)
    };
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: out is non-null and, by the caller's contract, writable.
    unsafe { *out = p.cast() };
    0
}

/// C11 `aligned_alloc`: `size` bytes aligned to `align`, which must be a power of two (else
/// null with EINVAL, as glibc 2.38 does); any size is accepted (C17).
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    alloc_aligned(align, size)
}

/// `memalign` (obsolete): as `aligned_alloc`, but an alignment that is not a power of two is
/// rounded up to one (glibc); one above `2^63` fails with EINVAL.
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    let Some(align) = align.max(1).checked_next_power_of_two() else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    alloc_aligned(align, size)
}

/// `valloc` (obsolete): `size` bytes aligned to the page.
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    alloc_aligned(PAGE, size)
}

/// `pvalloc` (obsolete): `size` rounded up to whole pages (one page for 0), page aligned;
/// null with ENOMEM when the rounding overflows.
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let Some(rounded) = size.max(1).checked_add(PAGE - 1) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    alloc_aligned(PAGE, rounded & !(PAGE - 1))
}

/// glibc `malloc_usable_size`: the bytes usable at `p` (at least the size asked); 0 for null.
///
/// # Safety
/// `p` must be null or a live block of this library.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    // SAFETY: forwarded contract.
    unsafe { raw::usable_size(p.cast()) }
}

/// C23 `free_sized`: frees `p` as `free` does (the size is not trusted: see the module note).
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: usize) {
    // SAFETY: forwarded contract.
    unsafe { raw::free(p.cast()) }
}

/// C23 `free_aligned_sized`: frees `p` as `free` does.
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, _align: usize, _size: usize) {
    // SAFETY: forwarded contract.
    unsafe { raw::free(p.cast()) }
}
