//! glibc's heap introspection calls, answered from slabcg's own statistics: `malloc_stats`
//! prints `slabcg_allocator::stats()` to standard error, `malloc_trim` gives the reserves
//! back to the OS (`slabcg_allocator::trim`). A program that calls them (or a person with a
//! debugger attached: `call malloc_stats()`) sees where slabcg's memory is, instead of
//! glibc's counters of a heap it no longer uses.

use core::ffi::c_int;
use core::fmt::{self, Write};

/// Formats into a stack buffer and writes it to standard error whenever it fills, so that
/// the report never allocates (it may run while the heap is in any state).
struct Stderr {
    buf: [u8; 512],
    len: usize,
}

impl Stderr {
    fn flush(&mut self) {
        // The buffer only ever receives whole `&str`s split at char boundaries below, so
        // its filled part is UTF-8.
        if let Ok(s) = core::str::from_utf8(&self.buf[..self.len]) {
            slabcg_sys::warn(s);
        }
        self.len = 0;
    }
}

impl Write for Stderr {
    fn write_str(&mut self, mut s: &str) -> fmt::Result {
        while !s.is_empty() {
            if self.len == self.buf.len() {
                self.flush();
            }
            let mut n = s.len().min(self.buf.len() - self.len);
            while !s.is_char_boundary(n) {
                n -= 1;
            }
            if n == 0 {
                // A multi-byte char that does not fit the rest of the buffer.
                self.flush();
                continue;
            }
            self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            s = &s[n..];
        }
        Ok(())
    }
}

/// glibc `malloc_stats`: prints slabcg's statistics to standard error (bytes held, active,
/// resident, mapped and metadata, large blocks, then one line per size class in use: size,
/// objects held, objects cached in thread bins, active and empty slabs, bytes per slab).
#[no_mangle]
pub extern "C" fn malloc_stats() {
    let mut out = Stderr {
        buf: [0; 512],
        len: 0,
    };
    let _ = write!(out, "slabcg:\n{}", slabcg_allocator::stats());
    out.flush();
}

/// glibc `malloc_trim`: gives the allocator's reserves (empty slabs, cached large mappings,
/// the calling thread's bins) back to the OS; `pad` is ignored. Returns 1, as glibc does
/// when memory was released, since slabcg cannot tell cheaply whether any was. Safe to call
/// at any time outside a signal handler.
#[no_mangle]
pub extern "C" fn malloc_trim(_pad: usize) -> c_int {
    slabcg_allocator::trim();
    1
}
