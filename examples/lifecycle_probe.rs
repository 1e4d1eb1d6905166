//! The whole life of a per-query tenant, repeated, for instruction counts (callgrind) and
//! for timing one thread against several: the query of `cargo bench --bench accounting --
//! tenant_lifecycle` (`benches/common/query.rs`: a child of a service with a limit, a scope
//! with a 300-byte scratch buffer and a 64-byte result that outlives the query, the drop),
//! with the last 1,000 results of each thread kept alive.
//!
//! ```sh
//! cargo build --release --example lifecycle_probe
//! target/release/examples/lifecycle_probe 300000 1          # QUERIES THREADS: us per query
//! target/release/examples/lifecycle_probe 300000 2
//! target/release/examples/lifecycle_probe 300000 2 separate # a service per thread
//! target/release/examples/lifecycle_probe 300000 2 customers 3 # 3 shared services in turn
//! valgrind --tool=callgrind target/release/examples/lifecycle_probe 20000 1
//! ```
//! (instructions per query = total / QUERIES; thread start-up and the ring's first fill
//! are included, a few percent at 20,000 queries.) With `separate`, each thread's queries
//! are children of their own service, so the service's lines are not shared between the
//! threads; the tree lock, the objcg ids and the root still are.

use slabcg::{SlabAlloc, Tenant};

#[path = "../benches/common/query.rs"]
mod query;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const RESULTS_ALIVE: usize = 1000;

fn service(name: &str) -> Tenant {
    let t = Tenant::new(name);
    t.set_max(1 << 30);
    t
}

/// One query: its tenant is born, allocates, and dies while its result lives on (in
/// `ring`, replacing the oldest result).
fn query(service: &Tenant, ring: &mut [Option<Box<[u8; 64]>>], next: &mut usize) {
    drop(ring[*next].replace(query::query(service)));
    *next = (*next + 1) % ring.len();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: usize| -> usize {
        args.get(i).map_or(default, |s| {
            s.parse().unwrap_or_else(|_| {
                eprintln!("usage: lifecycle_probe [QUERIES] [THREADS] [separate | customers N]");
                std::process::exit(2)
            })
        })
    };
    let queries = arg(1, 100_000);
    let threads = arg(2, 1).max(1);
    let separate = args.get(3).is_some_and(|s| s == "separate");
    // `customers N`: each thread's queries go to N shared services in turn (a worker
    // serving the requests of several customers).
    let customers = if args.get(3).is_some_and(|s| s == "customers") {
        arg(4, 3).max(1)
    } else {
        1
    };
    let shared = service("service");
    let others: Vec<Tenant> = (1..customers).map(|_| service("service")).collect();
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let svcs: Vec<Tenant> = if separate {
                vec![service("service")]
            } else {
                std::iter::once(&shared).chain(&others).cloned().collect()
            };
            s.spawn(move || {
                let mut ring: Vec<Option<Box<[u8; 64]>>> =
                    (0..RESULTS_ALIVE).map(|_| None).collect();
                let mut next = 0;
                for i in 0..queries {
                    query(&svcs[i % svcs.len()], &mut ring, &mut next);
                }
            });
        }
    });
    let us = start.elapsed().as_secs_f64() * 1e6 / queries as f64;
    println!(
        "{queries} queries on each of {threads} thread(s){}: {us:.3} us per query per thread, \
         {:.2} queries per us in all",
        if separate {
            ", a service each".to_owned()
        } else if customers > 1 {
            format!(", {customers} services in turn")
        } else {
            String::new()
        },
        threads as f64 / us
    );
    // Everything given back: the service holds nothing once the results are gone.
    assert_eq!(shared.current_exact(), 0);
    for o in &others {
        assert_eq!(o.current_exact(), 0);
    }
}
