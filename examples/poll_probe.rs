//! Instructions (callgrind) and time per poll of a future wrapped by `Tenant::scope`,
//! against the bare future: see `benches/common/poll_loop.rs`.
//!
//! ```sh
//! cargo build --release --example poll_probe
//! valgrind --tool=callgrind target/release/examples/poll_probe 1000000 bare
//! valgrind --tool=callgrind target/release/examples/poll_probe 1000000 scoped
//! target/release/examples/poll_probe 10000000 alt   # ns per poll, both, alternated
//! ```
//! (instructions per poll = the difference of the two totals / polls.)

#[path = "../benches/common/poll_loop.rs"]
mod poll_loop;

use std::time::Instant;

use poll_loop::{drive, PendingN};
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn ns_per_poll(t: &Tenant, n: u64, scoped: bool) -> f64 {
    let t0 = Instant::now();
    let polls = if scoped {
        drive(t.scope(PendingN(n - 1, 0)))
    } else {
        drive(PendingN(n - 1, 0))
    };
    t0.elapsed().as_nanos() as f64 / polls as f64
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mode = args.next().unwrap_or_else(|| "alt".into());
    let t = Tenant::new("poll");
    match mode.as_str() {
        "bare" => println!("bare {:.2} ns/poll", ns_per_poll(&t, n, false)),
        "scoped" => println!("scoped {:.2} ns/poll", ns_per_poll(&t, n, true)),
        _ => {
            let (mut bare, mut scoped) = (Vec::new(), Vec::new());
            for _ in 0..11 {
                bare.push(ns_per_poll(&t, n, false));
                scoped.push(ns_per_poll(&t, n, true));
            }
            bare.sort_by(f64::total_cmp);
            scoped.sort_by(f64::total_cmp);
            let (b, s) = (bare[5], scoped[5]);
            println!(
                "median of 11 alternated runs of {n} polls: bare {b:.2} ns, scoped {s:.2} ns, \
                 entering costs {:.2} ns per poll",
                s - b
            );
        }
    }
}
