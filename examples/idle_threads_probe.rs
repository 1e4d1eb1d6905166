//! Stocks with many idle threads: N threads each enter one tenant (max 64 MiB), allocate a
//! few KiB (kept) and go idle. Prints the pre-charged drift (`current()` minus
//! `current_exact()`) as they go idle and 300 ms later (after the background decay), and
//! the cost of a refused charge once one thread has filled the tenant to its limit
//! (fallible 1 MiB reserves, as a `try_reserve` loop makes them).
//!
//! ```sh
//! cargo run --release --example idle_threads_probe -- 1000     # THREADS
//! ```

use std::time::Instant;

use slabcg::{SlabAlloc, Tenant};

#[path = "../tests/common/idle_threads.rs"]
mod idle_threads;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let t = Tenant::new("pool");
    t.set_max(64 << 20);
    let idle = idle_threads::IdleThreads::start(&t, threads);
    let first = t.current();
    // Past two decay intervals, idle threads' stocks are given back in the background.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let cur = t.current();
    let exact = t.current_exact();
    let drift0 = first.saturating_sub(exact);
    let drift = cur - exact;
    // Fill to the limit from this thread, then time refusals.
    let mut blocks: Vec<Vec<u8>> = Vec::with_capacity(128);
    let mut refused = 0u32;
    let t0;
    let first_refusal;
    {
        let _in = t.enter();
        loop {
            let mut v: Vec<u8> = Vec::new();
            let t1 = Instant::now();
            if v.try_reserve_exact(1 << 20).is_err() {
                first_refusal = t1.elapsed().as_secs_f64() * 1e6;
                break;
            }
            blocks.push(v);
        }
        t0 = Instant::now();
        for _ in 0..100 {
            let mut v: Vec<u8> = Vec::new();
            if v.try_reserve_exact(1 << 20).is_err() {
                refused += 1;
            }
        }
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / 100.0;
    println!(
        "{threads} idle threads: drift {:.1} MiB as they go idle, {:.2} MiB 300 ms later \
         (current {:.1} MiB, exact {:.1} MiB, {:.1} MiB of it kept by the idle threads); the \
         first refused 1 MiB charge at the limit \
         {first_refusal:.1} us, the next 100 {us:.1} us each ({refused}/100 refused)",
        drift0 as f64 / (1 << 20) as f64,
        drift as f64 / (1 << 20) as f64,
        cur as f64 / (1 << 20) as f64,
        exact as f64 / (1 << 20) as f64,
        (threads as u64 * idle_threads::KEPT_PER_THREAD) as f64 / (1 << 20) as f64,
    );
    drop(blocks);
    idle.finish();
}
