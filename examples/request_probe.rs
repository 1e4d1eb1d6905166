//! A tenant per request, as a service or query engine makes them: each request is a new
//! child tenant that allocates 48 objects of 8 B to 4 KiB and frees them, then dies. For
//! instruction counts (callgrind) and time per request.
//!
//! ```sh
//! cargo build --release --example request_probe
//! valgrind --tool=callgrind target/release/examples/request_probe 20000   # instructions / 20,000
//! valgrind --tool=callgrind target/release/examples/request_probe 20000 fixed  # same sizes each time
//! target/release/examples/request_probe 200000                            # ns per request
//! ```

use slabcg::{SlabAlloc, Tenant};
#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    // "fixed": every request allocates the same 48 sizes (a service's requests of one
    // shape); by default each request draws new ones.
    let fixed = std::env::args().nth(2).is_some_and(|a| a == "fixed");
    let svc = Tenant::new("svc");
    let mut objs: Vec<Vec<u8>> = Vec::with_capacity(64);
    let mut seed = 1u64;
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        let req = svc.child("req");
        {
            let _in = req.enter();
            if fixed {
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
    }
    println!(
        "{:.0} ns per request",
        t0.elapsed().as_nanos() as f64 / n as f64
    );
}
