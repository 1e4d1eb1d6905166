//! The tenant service's `/work` request body without the HTTP stack: build a `BTreeMap` of
//! about `KB` KiB of records (short `String` keys and names, a `Vec` of tags), serialize it
//! to JSON, drop both; `N` times on one thread. It separates the allocator's share of the
//! service's time from the server's, and runs under `perf` or callgrind.
//!
//! ```text
//! cargo run --release --example service_work_probe -- [N] [KB] [tenant|request]
//! cargo run --release --example service_work_probe --features service-mimalloc -- [N] [KB]
//! ```
//!
//! Defaults: N = 10000, KB = 16 (the load runs' request). With `tenant`, the requests run in
//! one tenant; with `request`, each in a new child of it, as the service runs them (slabcg
//! builds only). Prints the seconds spent building, serializing and
//! dropping. BENCHMARKS.md section 6 compares builds with it, alternated.

use std::collections::BTreeMap;
use std::time::Instant;

#[cfg(feature = "service-mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "service-jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[cfg(not(any(feature = "service-mimalloc", feature = "service-jemalloc")))]
#[global_allocator]
static GLOBAL: slabcg::SlabAlloc = slabcg::SlabAlloc::new();

// The service's records (`record`), built the way its `/work` builds them.
#[path = "tenant_service/service.rs"]
#[allow(dead_code)] // the probe takes only the working set from the service
mod service;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(10_000, |s| s.parse().expect("N"));
    let kb: u64 = args.next().map_or(16, |s| s.parse().expect("KB"));
    let mode = args.next().unwrap_or_default();
    let tenant = slabcg::Tenant::new("probe");
    let _scope = (mode == "tenant").then(|| tenant.enter());
    let per_request = mode == "request";
    let records = service::records(kb);
    let (mut build, mut ser, mut drop_s, mut bytes) = (0.0, 0.0, 0.0, 0usize);
    for _ in 0..n {
        let t = Instant::now();
        // As the service: a child tenant per request, entered while it builds and serializes.
        let request = per_request.then(|| tenant.child("request"));
        let scope = request.as_ref().map(|r| r.enter());
        // One insert at a time, as the service builds it (`collect` would sort and bulk-load).
        let mut set = BTreeMap::new();
        for i in 0..records {
            let (k, r) = service::record(i);
            set.insert(k, r);
        }
        let t1 = Instant::now();
        let json = serde_json::to_vec(&set).expect("serializable");
        let t2 = Instant::now();
        bytes += json.len();
        drop(json);
        drop(set);
        drop(scope);
        drop(request);
        build += (t1 - t).as_secs_f64();
        ser += (t2 - t1).as_secs_f64();
        drop_s += t2.elapsed().as_secs_f64();
    }
    println!(
        "total {:.3} s: build {build:.3}, serialize {ser:.3}, drop {drop_s:.3} ({bytes} bytes of JSON)",
        build + ser + drop_s
    );
}
