//! Alloc+free pairs with `slabcg` as the global allocator (body: `common/pairs.rs`).
//! Run: `cargo bench --bench pairs_slabcg`; all four and a table: `scripts/bench-pairs.sh`.

#[global_allocator]
static GLOBAL: slabcg::SlabAlloc = slabcg::SlabAlloc::new();

#[path = "common/pairs.rs"]
mod pairs;

fn bench(c: &mut criterion::Criterion) {
    pairs::bench(c, "slabcg");
}

criterion::criterion_group! {
    name = benches;
    config = pairs::config();
    targets = bench
}
criterion::criterion_main!(benches);
