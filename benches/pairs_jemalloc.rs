//! Alloc+free pairs with `jemalloc` as the global allocator (body: `common/pairs.rs`).
//! Run: `cargo bench --bench pairs_jemalloc`; all four and a table: `scripts/bench-pairs.sh`.

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[path = "common/pairs.rs"]
mod pairs;

fn bench(c: &mut criterion::Criterion) {
    pairs::bench(c, "jemalloc");
}

criterion::criterion_group! {
    name = benches;
    config = pairs::config();
    targets = bench
}
criterion::criterion_main!(benches);
