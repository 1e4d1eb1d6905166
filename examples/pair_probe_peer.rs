//! `pair_probe`'s loops with mimalloc as the global allocator, to compare slabcg's accounted
//! pair with the best peer's unaccounted one in the same shape of loop:
//!
//! ```sh
//! cargo build --release --example pair_probe --example pair_probe_peer
//! target/release/examples/pair_probe_peer 20000000 32 const   # mimalloc, compile-time layout
//! target/release/examples/pair_probe 20000000 tenant 32 const # slabcg, inside a tenant
//! ```
//! (without `const`, the layout is known only at run time; `inlined` calls the global
//! allocator's methods directly, as `pair_probe ... inlined` does.) mimalloc is a C library, so its
//! fast path stays a call even where LTO inlines slabcg's into the loop: that is the
//! difference a user of either allocator sees.

#[path = "../benches/common/probe_loops.rs"]
mod probe_loops;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let batches: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000_000);
    let size: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(32);
    // An optional third argument: `const` or `inlined` (`probe_loops::run_shape`).
    let shape = args.next().unwrap_or_default();
    probe_loops::run_shape(&GLOBAL, &shape, size, 1000);
    println!(
        "mimalloc {size} B{}{shape}: {:.2} ns/pair",
        if shape.is_empty() { "" } else { " " },
        probe_loops::run_shape(&GLOBAL, &shape, size, batches)
    );
}
