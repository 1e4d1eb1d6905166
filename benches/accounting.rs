//! Seed 003 experiment on slabcg: no tenant vs inside one tenant's scope (1 and 2 threads,
//! 32 B and 4 KiB), and seed 001's Sock charges (batched in the stock vs a shared stat atomic
//! updated on every charge). Compare with `accounting_cap` (mimalloc + one shared atomic).
//! Also the cost of a per-query tenant's whole life (`tenant_lifecycle`).
//!
//! `cargo bench --bench accounting` ; summary: `scripts/bench-accounting.sh`

#[path = "common/accounting_pairs.rs"]
mod pairs;
#[path = "common/query.rs"]
mod query;

use std::hint::black_box;
use std::sync::atomic::{AtomicI64, Ordering};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use slabcg::{SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn accounting(c: &mut Criterion) {
    pairs::bench_variant(c, "slabcg_no_tenant", || ());
    let t = Tenant::new("bench");
    pairs::bench_variant(c, "slabcg_tenant", move || t.enter());
}

/// Seed 001: a socket-buffer charge+uncharge pair through the stock (stats batched), vs the
/// same plus an unbatched shared stat update per charge, which is what the stock avoids.
fn sock(c: &mut Criterion) {
    static SHARED_STAT: AtomicI64 = AtomicI64::new(0);
    let t = Tenant::new("sock");
    let mut g = c.benchmark_group("sock_charge_uncharge_1500B");
    g.throughput(Throughput::Elements(1));
    g.bench_function("batched_stat", |b| {
        b.iter(|| {
            t.charge(black_box(1500), StatItem::Sock).unwrap();
            t.uncharge(black_box(1500), StatItem::Sock);
        })
    });
    g.bench_function("shared_stat_every_charge", |b| {
        b.iter(|| {
            t.charge(black_box(1500), StatItem::Sock).unwrap();
            SHARED_STAT.fetch_add(1500, Ordering::Relaxed);
            t.uncharge(black_box(1500), StatItem::Sock);
            SHARED_STAT.fetch_sub(1500, Ordering::Relaxed);
        })
    });
    g.finish();

    // The same with two threads charging one tenant: the shared stat's cache line now
    // bounces between the cores on every charge, which is what seed 001 measured.
    let mut g = c.benchmark_group("sock_charge_uncharge_1500B_2threads");
    g.throughput(Throughput::Elements(2));
    for (name, shared) in [("batched_stat", false), ("shared_stat_every_charge", true)] {
        let t = t.clone();
        g.bench_function(name, move |b| {
            let t = t.clone();
            b.iter_custom(move |iters| sock_threads(&t, iters, shared))
        });
    }
    g.finish();
}

/// Runs `iters` Sock charge+uncharge pairs on each of two threads (optionally with the shared
/// stat update); returns the slowest thread's time.
fn sock_threads(t: &Tenant, iters: u64, shared: bool) -> std::time::Duration {
    static SHARED_STAT: AtomicI64 = AtomicI64::new(0);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let (t, barrier) = (t.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let start = std::time::Instant::now();
                for _ in 0..iters {
                    t.charge(black_box(1500), StatItem::Sock).unwrap();
                    if shared {
                        SHARED_STAT.fetch_add(1500, Ordering::Relaxed);
                    }
                    t.uncharge(black_box(1500), StatItem::Sock);
                    if shared {
                        SHARED_STAT.fetch_sub(1500, Ordering::Relaxed);
                    }
                }
                start.elapsed()
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
}

/// One query's tenant from birth to death, as a server runs a tenant per request: a child of
/// the service with a limit, a scope with two allocations (one a result that outlives the
/// query), and the drop (which moves the result's charge to the service). The results of
/// the last `results` queries stay alive; each iteration frees the oldest, whose dead
/// query's objcg is then freed, so the service's list of inherited objcgs stays `results`
/// long.
fn lifecycle(c: &mut Criterion) {
    let service = Tenant::new("service");
    let mut g = c.benchmark_group("tenant_lifecycle");
    g.throughput(Throughput::Elements(1));
    for results in [0usize, 1000, 100_000] {
        let service = service.clone();
        g.bench_function(
            BenchmarkId::new("query_with_results_alive", results),
            move |b| {
                let mut queries = Queries::new(&service, results);
                b.iter(|| queries.run_one());
            },
        );
    }
    // Two threads starting and ending queries of one service at once (1,000 results alive
    // each): the tree lock serialises tenant creation and drop.
    g.throughput(Throughput::Elements(2));
    g.bench_function("query_2threads", move |b| {
        b.iter_custom(|iters| {
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let (service, barrier) = (service.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        let mut queries = Queries::new(&service, 1000);
                        barrier.wait();
                        let start = std::time::Instant::now();
                        for _ in 0..iters {
                            queries.run_one();
                        }
                        start.elapsed()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
        })
    });
    g.finish();
}

/// Queries of one service whose last `results` results stay alive (see [`lifecycle`]).
struct Queries {
    service: Tenant,
    ring: Vec<Option<Box<[u8; 64]>>>,
    next: usize,
}

impl Queries {
    /// Starts with the ring of results already full.
    fn new(service: &Tenant, results: usize) -> Queries {
        let mut q = Queries {
            service: service.clone(),
            ring: (0..results).map(|_| None).collect(),
            next: 0,
        };
        for _ in 0..results {
            q.run_one();
        }
        q
    }

    fn run_one(&mut self) {
        let result = query::query(&self.service);
        if !self.ring.is_empty() {
            drop(self.ring[self.next].replace(result));
            self.next = (self.next + 1) % self.ring.len();
        }
    }
}

criterion_group! { name = benches; config = pairs::configure(); targets = accounting, sock, lifecycle }
criterion_main!(benches);
