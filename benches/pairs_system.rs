//! Alloc+free pairs with `system` as the global allocator (body: `common/pairs.rs`).
//! Run: `cargo bench --bench pairs_system`; all four and a table: `scripts/bench-pairs.sh`.

#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

#[path = "common/pairs.rs"]
mod pairs;

fn bench(c: &mut criterion::Criterion) {
    pairs::bench(c, "system");
}

criterion::criterion_group! {
    name = benches;
    config = pairs::config();
    targets = bench
}
criterion::criterion_main!(benches);
