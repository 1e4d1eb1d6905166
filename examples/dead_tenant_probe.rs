//! What a dead tenant with a live object costs: a tenant per request, each leaving one
//! 16-byte object behind, for N requests. Prints the time per request, the bookkeeping per
//! dead tenant (`stats().allocated` growth beyond the live objects) and what stays after
//! the objects are freed and `trim()` ran. Public API only, so it runs on older commits too.
//!
//! ```sh
//! cargo run --release --example dead_tenant_probe -- 1000000
//! ```

use std::time::Instant;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn settled() -> usize {
    slabcg::drain_all_stocks();
    slabcg::trim();
    slabcg::stats().allocated
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let parent = Tenant::new("service");
    let mut kept: Vec<Box<[u64; 2]>> = Vec::with_capacity(n);
    let a0 = settled();
    let t0 = Instant::now();
    for i in 0..n {
        let req = parent.child("request");
        let obj = {
            let _in = req.enter();
            Box::new([i as u64, 0])
        };
        kept.push(obj);
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    let a1 = settled();
    let per_dead = (a1 - a0 - n * 16) as f64 / n as f64;
    drop(kept);
    drop(parent);
    let a2 = settled();
    println!(
        "{n} requests, each leaving a 16 B object: {ns:.0} ns per request, {per_dead:.1} B \
         of bookkeeping per dead tenant, {:.1} MiB left after freeing and trim",
        (a2 as f64 - a0 as f64) / (1 << 20) as f64
    );
}
