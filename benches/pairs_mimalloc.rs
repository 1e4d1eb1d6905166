//! Alloc+free pairs with `mimalloc` as the global allocator (body: `common/pairs.rs`).
//! Run: `cargo bench --bench pairs_mimalloc`; all four and a table: `scripts/bench-pairs.sh`.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/pairs.rs"]
mod pairs;

fn bench(c: &mut criterion::Criterion) {
    pairs::bench(c, "mimalloc");
}

criterion::criterion_group! {
    name = benches;
    config = pairs::config();
    targets = bench
}
criterion::criterion_main!(benches);
