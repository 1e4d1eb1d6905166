//! Stocks with many idle threads: N threads each enter one tenant (max 64 MiB), allocate a
//! few KiB (kept) and go idle. Prints the pre-charged drift (`current()` minus
//! `current_exact()`) as they go idle and 300 ms later (after the background decay), and
//! the cost of a refused charge once one thread has filled the tenant to its limit
//! (fallible 1 MiB reserves, as a `try_reserve` loop makes them).
//!
//! With `keep`, the idle-stock decay is off: the idle threads keep what their stocks hold
//! until the refusals drain it (the drift 300 ms later is then the drift as they go idle).
//!
//! ```sh
//! cargo run --release --example idle_threads_probe -- 1000 [keep]    # THREADS
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
    if std::env::args().nth(2).as_deref() == Some("keep") {
        slabcg::accounting::hooks::set_idle_decay(false);
    }
    // The first drain registers the process for membarrier (milliseconds, once): not
    // what is measured here.
    slabcg::drain_all_stocks();
    let t = Tenant::new("pool");
    t.set_max(64 << 20);
    let idle = idle_threads::IdleThreads::start(&t, threads);
    let first = t.current();
    // Past two decay intervals, idle threads' stocks are given back in the background.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let cur = t.current();
    // The exact usage without a drain: what the threads keep (the drain below would empty
    // the stocks that the first refusal is to find with `keep`).
    let exact = threads as u64 * idle_threads::KEPT_PER_THREAD;
    let drift0 = first.saturating_sub(exact);
    let drift = cur.saturating_sub(exact);
    // Fill to the limit from this thread, then time refusals.
    let mut blocks: Vec<Vec<u8>> = Vec::with_capacity(128);
    let mut refused = 0u32;
    let t0;
    let first_refusal;
    let mut slowest = 0f64;
    {
        let _in = t.enter();
        loop {
            let mut v: Vec<u8> = Vec::new();
            let t1 = Instant::now();
            if v.try_reserve_exact(1 << 20).is_err() {
                first_refusal = t1.elapsed().as_secs_f64() * 1e6;
                break;
            }
            // A reserve that drained the idle threads' stocks and then fit.
            slowest = slowest.max(t1.elapsed().as_secs_f64() * 1e6);
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
         slowest 1 MiB reserve while filling {slowest:.1} us, the first refused one \
         {first_refusal:.1} us, the next 100 {us:.1} us each ({refused}/100 refused)",
        drift0 as f64 / (1 << 20) as f64,
        drift as f64 / (1 << 20) as f64,
        cur as f64 / (1 << 20) as f64,
        exact as f64 / (1 << 20) as f64,
        (threads as u64 * idle_threads::KEPT_PER_THREAD) as f64 / (1 << 20) as f64,
    );
    assert_eq!(t.current_exact(), exact + (blocks.len() << 20) as u64);
    drop(blocks);
    idle.finish();
}
