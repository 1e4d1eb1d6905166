//! The cap-style baseline for the seed 003 experiment: mimalloc wrapped in a GlobalAlloc that
//! charges every allocation to one shared atomic counter (what a `cap`-like accounting
//! wrapper does), with mimalloc alone as the unaccounted reference.
//!
//! `cargo bench --bench accounting_cap`

#[path = "common/accounting_pairs.rs"]
mod pairs;

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};

struct CapAlloc {
    inner: mimalloc::MiMalloc,
    used: AtomicUsize,
    on: AtomicBool,
}

// SAFETY: every call is forwarded to mimalloc unchanged; the counter is bookkeeping only.
unsafe impl GlobalAlloc for CapAlloc {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if self.on.load(Ordering::Relaxed) {
            self.used.fetch_add(l.size(), Ordering::Relaxed);
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.alloc(l) }
    }
    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if self.on.load(Ordering::Relaxed) {
            self.used.fetch_sub(l.size(), Ordering::Relaxed);
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: CapAlloc = CapAlloc {
    inner: mimalloc::MiMalloc,
    used: AtomicUsize::new(0),
    on: AtomicBool::new(false),
};

struct On;
impl Drop for On {
    fn drop(&mut self) {
        GLOBAL.on.store(false, Ordering::Relaxed);
    }
}

fn cap(c: &mut Criterion) {
    pairs::bench_variant(c, "mimalloc", || ());
    pairs::bench_variant(c, "mimalloc_shared_atomic", || {
        GLOBAL.on.store(true, Ordering::Relaxed);
        On
    });
}

criterion_group! { name = benches; config = pairs::configure(); targets = cap }
criterion_main!(benches);
