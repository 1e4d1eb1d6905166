//! The cost of a Prometheus scrape (`slabcg::prometheus::render`) with many tenants and many
//! idle threads holding stock: one drain per scrape, then the tree is read once.
//!
//! ```sh
//! cargo run --release --example metrics_probe -- 10000 1000    # TENANTS THREADS
//! ```
//! Prints the median of 7 scrapes (ms), the text's size and its number of series.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn main() {
    let mut args = std::env::args().skip(1);
    let tenants: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let svc = Tenant::new("svc");
    let ts: Vec<Tenant> = (0..tenants)
        .map(|i| {
            let t = svc.child(&format!("customer-{i}"));
            t.set_max(64 << 20);
            t
        })
        .collect();
    // Idle threads, each of which charged a tenant (so its stock holds pre-charged bytes and
    // a drain has to visit it), parked until the scrapes are done.
    let start = Arc::new(Barrier::new(threads + 1));
    let end = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (t, start, end) = (ts[i % tenants].clone(), start.clone(), end.clone());
            std::thread::Builder::new()
                .stack_size(128 << 10)
                .spawn(move || {
                    let kept = {
                        let _in = t.enter();
                        let v: Vec<Box<[u8; 256]>> = (0..16).map(|_| Box::new([0; 256])).collect();
                        v
                    };
                    start.wait();
                    end.wait();
                    drop(kept);
                })
                .unwrap()
        })
        .collect();
    start.wait();
    let mut ms = Vec::new();
    let mut text = String::new();
    for _ in 0..7 {
        let t0 = Instant::now();
        text = slabcg::prometheus::render();
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    let series = text.lines().filter(|l| !l.starts_with('#')).count();
    println!(
        "{tenants} tenants, {threads} idle threads: render() median {:.1} ms (min {:.1}, max {:.1}), {} KiB, {series} series",
        ms[3],
        ms[0],
        ms[6],
        text.len() >> 10
    );
    end.wait();
    for h in handles {
        h.join().unwrap();
    }
}
