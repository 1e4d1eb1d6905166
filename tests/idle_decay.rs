//! The idle-stock decay: with many more threads holding stocks than CPUs, the bytes that
//! idle threads' stocks hold pre-charged go back in the background, so `current()` comes
//! within 1 MiB per CPU of the exact usage without any drain being asked for.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn idle_threads_give_their_stocks_back() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (8 * cpus).max(64);
    let t = Tenant::new("decay");
    t.set_max(1 << 30);
    let ready = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (t, ready, done) = (t.clone(), ready.clone(), done.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    let kept: Vec<Box<[u8; 512]>> = {
                        let _in = t.enter();
                        (0..8).map(|_| Box::new([1; 512])).collect()
                    };
                    ready.wait();
                    done.wait();
                    drop(kept);
                })
                .unwrap()
        })
        .collect();
    ready.wait();
    // Each thread keeps 8 boxes of 512 B and the 64-byte vector holding them.
    let exact = (threads * (8 * 512 + 64)) as u64;
    let first = t.current();
    assert!(
        first > exact + (1 << 20),
        "the stocks hold pre-charged bytes at first: {first}"
    );
    let bound = exact + cpus as u64 * (1 << 20);
    let t0 = Instant::now();
    let mut now = first;
    while now > bound && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        now = t.current();
    }
    assert!(
        now <= bound,
        "current {now} still above {bound} after {:?}",
        t0.elapsed()
    );
    assert_eq!(t.current_exact(), exact);
    done.wait();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(t.current_exact(), 0);
}
