//! The cost of entering a tenant on every poll: a future polled a million times, bare and
//! wrapped by `Tenant::scope` (`Scoped`: the kill-epoch look, the scope frame, the waker
//! compare). Target (issue: async tenants): at most 5 ns more per poll.
//!
//! `cargo bench --bench scoped_poll`; instructions: `examples/poll_probe.rs`.

#[path = "common/poll_loop.rs"]
mod poll_loop;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use poll_loop::{drive, PendingN};
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const POLLS: u64 = 1_000_000;

fn scoped_poll(c: &mut Criterion) {
    let t = Tenant::new("poll");
    let mut g = c.benchmark_group("poll_1M");
    g.throughput(Throughput::Elements(POLLS));
    g.sample_size(20);
    g.bench_function("bare", |b| b.iter(|| drive(PendingN(POLLS - 1, 0))));
    g.bench_function("scoped", |b| {
        b.iter(|| drive(t.scope(PendingN(POLLS - 1, 0))))
    });
    g.finish();
}

criterion_group!(benches, scoped_poll);
criterion_main!(benches);
