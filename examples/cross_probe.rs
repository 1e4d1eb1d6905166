//! Frees of another tenant's objects, the shape that costs most with accounting on (issue 20:
//! rptest, the server shape, mstress, larson with a tenant per request): every free uncharges
//! an owner that is not the thread's tenant, and every allocation charges. One thread, fixed
//! work, for instruction counts (callgrind) and time per object.
//!
//! Modes (second argument):
//! - `live` (default): two threads, each in a live tenant of its own, take turns; each
//!   frees the batch of 8 objects of 32 B the other allocated last and allocates one of its
//!   own (two workers of rptest or the server shape that free each other's objects);
//! - `swap`: one thread, two live tenants A and B entered in turn, each freeing the other's
//!   last batch and allocating its own (a thread that serves two tenants in turn);
//! - `dead`: a new child tenant per batch (a request) allocates 8 objects and frees the 8 the
//!   previous, now dead, request left (larson with a tenant per request);
//! - `interleave K`: one thread, K live tenants entered in turn, each freeing its own last
//!   batch and allocating the next (a tokio worker polling K requests that each await I/O
//!   between allocations); `interleave-plain K`: the same with no tenant;
//! - `plain`: the `swap` pattern with no tenant (the floor); `live-plain`: `live`'s.
//!
//! Under callgrind compare the allocator's functions' inclusive counts, not the totals: the
//! two threads of `live` wait for their turn in a spin loop.
//!
//! ```sh
//! cargo build --release --example cross_probe
//! valgrind --tool=callgrind target/release/examples/cross_probe 200000 live  # instructions / (8 x 200,000)
//! target/release/examples/cross_probe 2000000 dead                           # ns per object
//! ```

use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const BATCH: usize = 8;

fn layout() -> Layout {
    Layout::from_size_align(32, 8).expect("valid layout")
}

/// Frees the non-null pointers of `prev` and replaces each with a fresh allocation.
fn replace(prev: &mut [*mut u8; BATCH], r: usize) {
    for p in prev.iter_mut() {
        if !p.is_null() {
            // SAFETY: allocated below with `layout()` in an earlier batch, freed once.
            unsafe { dealloc(*p, layout()) };
        }
        // SAFETY: a valid non-zero layout.
        *p = unsafe { alloc(layout()) };
        assert!(!p.is_null(), "allocation refused");
        // SAFETY: p is a live 32-byte allocation.
        unsafe { p.write_volatile(r as u8) };
    }
}

/// `live`: two threads in tenants of their own hand one batch back and forth `n` times.
fn live(n: usize, tenants: Option<(slabcg::Tenant, slabcg::Tenant)>) -> f64 {
    static BATCH_PTRS: [AtomicPtr<u8>; BATCH] =
        [const { AtomicPtr::new(std::ptr::null_mut()) }; BATCH];
    static TURN: AtomicUsize = AtomicUsize::new(0);
    let t0 = std::time::Instant::now();
    let (a, b) = match tenants {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    std::thread::scope(|s| {
        for (me, tenant) in [(0usize, a), (1, b)] {
            s.spawn(move || {
                let _in = tenant.as_ref().map(slabcg::Tenant::enter);
                let mut r = me;
                while r < n {
                    while TURN.load(Ordering::Acquire) != r {
                        std::hint::spin_loop();
                        std::thread::yield_now();
                    }
                    let mut batch = [std::ptr::null_mut(); BATCH];
                    for (b, p) in batch.iter_mut().zip(&BATCH_PTRS) {
                        *b = p.load(Ordering::Relaxed);
                    }
                    replace(&mut batch, r);
                    for (b, p) in batch.iter().zip(&BATCH_PTRS) {
                        p.store(*b, Ordering::Relaxed);
                    }
                    TURN.store(r + 1, Ordering::Release);
                    r += 2;
                }
            });
        }
    });
    for p in &BATCH_PTRS {
        // SAFETY: allocated with `layout()` in the last batch.
        unsafe { dealloc(p.load(Ordering::Relaxed), layout()) };
    }
    t0.elapsed().as_nanos() as f64
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let mode = std::env::args().nth(2).unwrap_or_else(|| "live".into());
    let svc = Tenant::new("svc");
    let a = svc.child("a");
    let b = svc.child("b");
    let total_ns = match mode.as_str() {
        "live" => live(n, Some((a, b))),
        "live-plain" => live(n, None),
        "interleave" | "interleave-plain" => {
            let k: usize = std::env::args()
                .nth(3)
                .and_then(|a| a.parse().ok())
                .unwrap_or(4);
            let tenants: Vec<Tenant> = (0..k).map(|i| svc.child(&format!("t{i}"))).collect();
            let mut prev = vec![[std::ptr::null_mut::<u8>(); BATCH]; k];
            let t0 = std::time::Instant::now();
            for r in 0..n {
                let i = r % k;
                let _in = (mode == "interleave").then(|| tenants[i].enter());
                replace(&mut prev[i], r);
            }
            let ns = t0.elapsed().as_nanos() as f64;
            for batch in prev {
                for p in batch.into_iter().filter(|p| !p.is_null()) {
                    // SAFETY: allocated with `layout()` in an earlier batch.
                    unsafe { dealloc(p, layout()) };
                }
            }
            ns
        }
        "swap" | "dead" | "plain" => {
            let mut prev = [std::ptr::null_mut::<u8>(); BATCH];
            let t0 = std::time::Instant::now();
            for r in 0..n {
                let tenant = match mode.as_str() {
                    "swap" => Some(if r % 2 == 0 { a.clone() } else { b.clone() }),
                    "dead" => Some(svc.child("request")),
                    _ => None,
                };
                let _in = tenant.as_ref().map(Tenant::enter);
                replace(&mut prev, r);
            }
            let ns = t0.elapsed().as_nanos() as f64;
            for p in prev {
                // SAFETY: allocated with `layout()` in the last batch.
                unsafe { dealloc(p, layout()) };
            }
            ns
        }
        other => panic!("unknown mode {other}: live, swap, interleave, dead, plain, live-plain or interleave-plain"),
    };
    let ns = total_ns / (n * BATCH) as f64;
    println!("cross_probe {mode}: {n} batches of {BATCH}, {ns:.2} ns per alloc+free");
}
