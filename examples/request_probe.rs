//! A tenant per request, as a service or query engine makes them: each request is a new
//! child tenant that allocates and frees, then dies. For instruction counts (callgrind) and
//! time per request.
//!
//! Modes (second argument):
//! - `random` (default): 48 objects of 8 B to 4 KiB, new sizes each request;
//! - `fixed`: the same 48 sizes every request (requests of one shape);
//! - `records`: the working set of `examples/tenant_service`'s `GET /work?kb=16` (a map of
//!   80 records of owned strings, serialized to JSON), for three customers in turn, each
//!   request a child of its customer;
//! - `records-plain`: the same work with no tenant at all (the floor).
//!
//! ```sh
//! cargo build --release --example request_probe
//! valgrind --tool=callgrind target/release/examples/request_probe 20000 fixed  # instructions / 20,000
//! target/release/examples/request_probe 200000 records                         # ns per request
//! ```

use std::collections::BTreeMap;

use serde::Serialize;
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[derive(Serialize)]
struct Record {
    id: u64,
    name: String,
    tags: Vec<String>,
    score: f64,
}

/// The service's `kb=16` request: 80 records, serialized; returns the JSON's length.
fn records() -> usize {
    let map: BTreeMap<String, Record> = (0..80u64)
        .map(|i| {
            let rec = Record {
                id: i,
                name: format!("customer record number {i}"),
                tags: (0..3).map(|t| format!("tag-{}", (i + t) % 17)).collect(),
                score: (i % 1000) as f64 / 8.0,
            };
            (format!("key-{i:08}"), rec)
        })
        .collect();
    serde_json::to_vec(&map).expect("serializable").len()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let mode = std::env::args().nth(2).unwrap_or_else(|| "random".into());
    let svc = Tenant::new("svc");
    let customers: Vec<Tenant> = (0..3).map(|i| svc.child(&format!("c{i}"))).collect();
    let mut objs: Vec<Vec<u8>> = Vec::with_capacity(64);
    let mut seed = 1u64;
    let mut sink = 0usize;
    let t0 = std::time::Instant::now();
    for r in 0..n {
        match mode.as_str() {
            "records-plain" => sink += records(),
            "records" => {
                let req = customers[r % 3].child("request");
                let _in = req.enter();
                sink += records();
            }
            "random" | "fixed" => {
                let req = svc.child("req");
                let _in = req.enter();
                if mode == "fixed" {
                    seed = 1;
                }
                for _ in 0..48 {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let sz = 8 + ((seed >> 33) as usize % 4096);
                    objs.push(Vec::with_capacity(sz));
                }
                objs.clear();
            }
            other => panic!("unknown mode {other}"),
        }
    }
    println!(
        "{:.0} ns per request ({mode}, {sink} bytes of JSON)",
        t0.elapsed().as_nanos() as f64 / n as f64
    );
}
