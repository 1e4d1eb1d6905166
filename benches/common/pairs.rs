//! Shared body of the `pairs_*` criterion benches: alloc+free pairs in batches of 4.
//!
//! Each bench binary installs its own `#[global_allocator]` and includes this file with
//! `#[path = "common/pairs.rs"] mod pairs;`, so the four binaries run exactly the same code.
//!
//! Workload: allocate 4 objects of size S through `std::alloc::alloc`, `black_box` them, free
//! the 4; S in [`SIZES`]. Reported per pair (`Throughput::Elements(4)` per iteration).
//! - `pairs-1t-<alloc>/<S>`: one thread.
//! - `pairs-2t-<alloc>/<S>`: two persistent worker threads run the same loop concurrently;
//!   `iter_custom` returns the wall time from releasing both until both finished N iterations
//!   each, so one iteration is 2 x 4 = 8 pairs (`Throughput::Elements(8)`).
//!
//! Defaults (overridable on the command line, e.g. `-- --measurement-time 5`): warm-up 1 s,
//! measurement 2 s, 20 samples.

use criterion::{BenchmarkId, Criterion, Throughput};
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Object sizes.
pub const SIZES: [usize; 4] = [16, 32, 256, 4096];
/// Objects allocated before the batch is freed.
pub const BATCH: usize = 4;

/// The criterion configuration shared by the four binaries.
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).expect("layout")
}

/// `iters` times: allocate [`BATCH`] objects, black_box them, free them.
#[inline(never)]
fn pairs(layout: Layout, iters: u64) {
    for _ in 0..iters {
        let mut p = [core::ptr::null_mut::<u8>(); BATCH];
        for slot in p.iter_mut() {
            // SAFETY: `layout` has a non-zero size.
            let q = unsafe { alloc(layout) };
            if q.is_null() {
                handle_alloc_error(layout)
            }
            *slot = q;
        }
        for q in black_box(p) {
            // SAFETY: allocated just above with the same layout, freed once.
            unsafe { dealloc(q, layout) }
        }
    }
}

/// Two worker threads that live for the whole group, so that thread start-up and
/// thread-cache creation stay out of the samples.
struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

struct Shared {
    go: Barrier,
    done: Barrier,
    iters: AtomicU64,
    size: AtomicUsize,
    stop: AtomicBool,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            go: Barrier::new(threads + 1),
            done: Barrier::new(threads + 1),
            iters: AtomicU64::new(0),
            size: AtomicUsize::new(16),
            stop: AtomicBool::new(false),
        });
        let workers = (0..threads)
            .map(|_| {
                let sh = Arc::clone(&shared);
                std::thread::spawn(move || loop {
                    sh.go.wait();
                    if sh.stop.load(Ordering::Acquire) {
                        break;
                    }
                    pairs(
                        layout(sh.size.load(Ordering::Acquire)),
                        sh.iters.load(Ordering::Acquire),
                    );
                    sh.done.wait();
                })
            })
            .collect();
        Pool { shared, workers }
    }

    /// Wall time for every worker to do `iters` iterations of size `size`.
    fn round(&self, iters: u64, size: usize) -> Duration {
        self.shared.iters.store(iters, Ordering::Release);
        self.shared.size.store(size, Ordering::Release);
        self.shared.go.wait();
        let t = Instant::now();
        self.shared.done.wait();
        t.elapsed()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.go.wait();
        for w in self.workers.drain(..) {
            w.join().expect("pairs worker panicked");
        }
    }
}

/// Register the single- and two-thread groups for allocator `name`.
pub fn bench(c: &mut Criterion, name: &str) {
    let mut g = c.benchmark_group(format!("pairs-1t-{name}"));
    g.throughput(Throughput::Elements(BATCH as u64));
    for size in SIZES {
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            let l = layout(size);
            b.iter_custom(|iters| {
                let t = Instant::now();
                pairs(l, iters);
                t.elapsed()
            })
        });
    }
    g.finish();

    const THREADS: usize = 2;
    let pool = Pool::new(THREADS);
    let mut g = c.benchmark_group(format!("pairs-2t-{name}"));
    g.throughput(Throughput::Elements((THREADS * BATCH) as u64));
    for size in SIZES {
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter_custom(|iters| pool.round(iters, size))
        });
    }
    g.finish();
}
