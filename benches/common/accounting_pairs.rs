//! Shared body of the seed-003 experiment: batches of 4 allocations then 4 frees, 32-byte and
//! 4096-byte objects, one thread and two threads, optionally inside one tenant's scope.
//! Included by `accounting.rs` (slabcg) and `accounting_cap.rs` (mimalloc + a shared atomic).

use std::alloc::Layout;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};

#[path = "batch4.rs"]
mod batch4;
pub use batch4::batch4;

/// Runs `iters` batches on each of `threads` threads, each thread first calling `enter`
/// (which returns a guard kept for the run); returns the wall time of the slowest thread.
pub fn run_threads<G>(
    threads: usize,
    iters: u64,
    l: Layout,
    enter: impl Fn() -> G + Send + Sync + 'static,
) -> Duration
where
    G: 'static,
{
    let enter = Arc::new(enter);
    let barrier = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let enter = enter.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let _g = enter();
                for _ in 0..1000 {
                    batch4(l);
                }
                barrier.wait();
                let t = Instant::now();
                for _ in 0..iters {
                    batch4(l);
                }
                t.elapsed()
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
}

pub fn configure() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

/// Registers the 1-thread and 2-thread groups for one variant.
pub fn bench_variant<G: 'static>(
    c: &mut Criterion,
    variant: &str,
    enter: impl Fn() -> G + Send + Sync + Clone + 'static,
) {
    for size in [32usize, 4096] {
        let l = Layout::from_size_align(size, 8).unwrap();
        let mut g = c.benchmark_group(format!("acct_{size}B_1thread"));
        g.throughput(Throughput::Elements(4));
        let e = enter.clone();
        g.bench_function(variant, move |b| {
            let _guard = e();
            b.iter(|| batch4(l))
        });
        g.finish();
        let mut g = c.benchmark_group(format!("acct_{size}B_2threads"));
        g.throughput(Throughput::Elements(8));
        let e = enter.clone();
        g.bench_function(variant, move |b| {
            let e = e.clone();
            b.iter_custom(move |iters| run_threads(2, iters, l, e.clone()))
        });
        g.finish();
    }
}
