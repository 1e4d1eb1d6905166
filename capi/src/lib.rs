//! slabcg-capi: slabcg as a C library, `libslabcg.so`.
//!
//! # Design note
//!
//! Three parts:
//! - [`malloc`]: the C allocation functions (`malloc`, `free`, `calloc`, `realloc`,
//!   `reallocarray`, `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`,
//!   `malloc_usable_size`, C23's `free_sized` / `free_aligned_sized`), exported under their C
//!   names so that `LD_PRELOAD=libslabcg.so prog` (or linking `-lslabcg` before libc)
//!   replaces the C library's allocator for the whole process, the dynamic loader and libc
//!   included.
//! - [`introspect`]: glibc's `malloc_stats` and `malloc_trim`, from slabcg's statistics.
//! - [`tenant`]: the C tenant API of `capi/include/slabcg.h` (create, limit, enter, read,
//!   drop), a thin layer over `slabcg_accounting::Tenant`.
//!
//! Call tree of the fast paths:
//! ```text
//! malloc(n)  → round n to 16 above 8 → slabcg_allocator::raw::alloc → global::alloc_impl
//! free(p)    → raw::free → segment bitmap → class from the segment header → global::free_class
//!            → not a segment: charge::free_large (header page before p)
//! ```
//!
//! Rules every exported function keeps:
//! - it never unwinds (a panic inside aborts: the functions are `extern "C"`), and bad input
//!   from C (a null handle, a bad alignment, an overflowing size) is an error code or a null
//!   with `errno`, never an abort; heap corruption the allocator detects (a double or invalid
//!   free) aborts with a message, as it does for Rust;
//! - nothing on the allocator's paths calls `malloc`: the library's own Rust allocations go to
//!   slabcg directly (the `#[global_allocator]` below), so they never re-enter through the C
//!   symbols;
//! - it works before `main`: the allocator's state is static and its thread-locals are
//!   const-initialised, so the first call (from the dynamic loader or libc's start-up) needs
//!   no constructor; process-wide set-up runs on the first slow path
//!   (`init_once` in `slabcg-allocator`'s `init.rs`).
//!
//! The per-thread words of the malloc and free paths are initial-exec TLS (feature `ie-tls`,
//! on by default; `slabcg_sys::fast_tls`), not the general-dynamic model of a shared
//! library's `thread_local!`, which calls `__tls_get_addr` on every access (136 -> 105
//! instructions per malloc+free pair). So the library's TLS must be static: loaded with the
//! program (LD_PRELOAD or `DT_NEEDED`); a `dlopen` of `libslabcg.so`, or of a plugin linked
//! against it, fails with "cannot allocate memory in static TLS block" (it was never
//! supported as malloc: the C library's allocator would already own the process's heap).
//! `--no-default-features` builds a general-dynamic library for such loaders.

#![warn(missing_docs)]

pub mod introspect;
pub mod malloc;
pub mod tenant;

/// The library's own Rust allocations (tenant handles, report strings, the accounting's
/// tree) go straight to slabcg, not through the exported C symbols.
#[global_allocator]
static GLOBAL: slabcg_allocator::SlabAlloc = slabcg_allocator::SlabAlloc::new();
