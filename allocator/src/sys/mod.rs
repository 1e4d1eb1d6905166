//! The allocator's view of the OS layer: `slabcg-sys` (its contract is in that crate's
//! root) under the names this crate's call sites use.
//!
//! Under `cfg(test)` the mapping calls go through [`fault`], which can make them fail on
//! purpose, so that unit tests run the undo paths after a refused mapping.

pub use slabcg_sys::{
    advise_huge, check_page_size, current_cpu, fatal, now_ms, process_id, protect_none, protect_rw,
    release, resident_bytes, yield_now, PAGE,
};

/// The atomics of the structures a loom model checks (`ObjectStock`, `Bin`): core's, or
/// loom's under `cfg(loom)`.
pub(crate) use slabcg_sys::sync;

/// Per-thread words in the initial-exec TLS model (feature `ie-tls`, for the C library).
#[cfg(feature = "ie-tls")]
pub(crate) use slabcg_sys::fast_tls;

#[cfg(not(test))]
pub use slabcg_sys::{map, map_aligned, map_aligned_at, remap, remap_to, unmap};

#[cfg(test)]
pub use fault::{map, map_aligned, map_aligned_at, remap, remap_to, unmap};

pub mod thread;

/// Fault injection for the allocator's unit tests: a per-thread switch that lets the next
/// `skip` mappings (`map`, `map_aligned`, `map_aligned_at`, `remap`, `remap_to`) through and then fails
/// the `count` after them, as an OS out of address space or memory would. It also keeps the
/// net bytes this thread mapped ([`net_mapped`]), so a test sees a mapping leaked by an
/// undo path.
#[cfg(test)]
pub mod fault {
    use core::cell::Cell;
    use core::ptr;

    thread_local! {
        /// Mappings still let through before failing; failures left; failures made.
        static STATE: (Cell<u32>, Cell<u32>, Cell<u32>) =
            const { (Cell::new(0), Cell::new(0), Cell::new(0)) };
        /// Bytes this thread mapped minus bytes it unmapped.
        static NET: Cell<isize> = const { Cell::new(0) };
    }

    /// Bytes this thread mapped minus those it unmapped (through this module), so far.
    pub fn net_mapped() -> isize {
        NET.with(Cell::get)
    }

    fn note(p: *mut u8, bytes: isize) -> *mut u8 {
        if !p.is_null() {
            let _ = NET.try_with(|n| n.set(n.get() + bytes));
        }
        p
    }

    /// On this thread, lets the next `skip` mappings succeed, then fails the `count` after
    /// them (so `fail_after(k - 1, 1)` fails the k-th one). Resets the failure count.
    pub fn fail_after(skip: u32, count: u32) {
        STATE.with(|s| {
            s.0.set(skip);
            s.1.set(count);
            s.2.set(0);
        });
    }

    /// Ends fault injection on this thread; returns how many mappings were made to fail.
    pub fn clear() -> u32 {
        STATE.with(|s| {
            s.0.set(0);
            s.1.set(0);
            s.2.replace(0)
        })
    }

    /// Whether this mapping must fail (and counts it).
    fn fail_now() -> bool {
        STATE
            .try_with(|s| {
                if s.1.get() == 0 {
                    return false;
                }
                if s.0.get() > 0 {
                    s.0.set(s.0.get() - 1);
                    return false;
                }
                s.1.set(s.1.get() - 1);
                s.2.set(s.2.get() + 1);
                true
            })
            .unwrap_or(false)
    }

    /// [`slabcg_sys::map`], or null when injected.
    pub fn map(len: usize) -> *mut u8 {
        if fail_now() {
            return ptr::null_mut();
        }
        note(slabcg_sys::map(len), len as isize)
    }

    /// [`slabcg_sys::map_aligned`], or null when injected.
    pub fn map_aligned(len: usize, align: usize) -> *mut u8 {
        if fail_now() {
            return ptr::null_mut();
        }
        note(slabcg_sys::map_aligned(len, align), len as isize)
    }

    /// [`slabcg_sys::map_aligned_at`], or null when injected.
    pub fn map_aligned_at(len: usize, align: usize, offset: usize) -> *mut u8 {
        if fail_now() {
            return ptr::null_mut();
        }
        note(slabcg_sys::map_aligned_at(len, align, offset), len as isize)
    }

    /// [`slabcg_sys::remap`], or null when injected (the mapping is then unchanged, as
    /// when the OS refuses).
    ///
    /// # Safety
    /// As [`slabcg_sys::remap`].
    pub unsafe fn remap(p: *mut u8, old_len: usize, new_len: usize) -> *mut u8 {
        if fail_now() {
            return ptr::null_mut();
        }
        // SAFETY: forwarded contract.
        let q = unsafe { slabcg_sys::remap(p, old_len, new_len) };
        note(q, new_len as isize - old_len as isize)
    }

    /// [`slabcg_sys::remap_to`], or false when injected (nothing changed, as when the OS
    /// refuses before touching the destination). A move replaces the destination, which
    /// was counted when it was mapped: the net shrinks by the source's bytes.
    ///
    /// # Safety
    /// As [`slabcg_sys::remap_to`].
    pub unsafe fn remap_to(p: *mut u8, old_len: usize, new_len: usize, dst: *mut u8) -> bool {
        if fail_now() {
            return false;
        }
        // SAFETY: forwarded contract.
        let moved = unsafe { slabcg_sys::remap_to(p, old_len, new_len, dst) };
        if moved {
            let _ = NET.try_with(|n| n.set(n.get() - old_len as isize));
        }
        moved
    }

    /// [`slabcg_sys::unmap`], counted.
    ///
    /// # Safety
    /// As [`slabcg_sys::unmap`].
    pub unsafe fn unmap(p: *mut u8, len: usize) {
        let _ = NET.try_with(|n| n.set(n.get() - len as isize));
        // SAFETY: forwarded contract.
        unsafe { slabcg_sys::unmap(p, len) }
    }
}
