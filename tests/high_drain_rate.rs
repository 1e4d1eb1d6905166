//! A tenant whose objects sit just under its `high` while another thread frees what it
//! allocates crosses the `high` again every few dozen allocations (the freeing thread's
//! stock keeps the freed bytes, refills bring usage back up after each drain). Each
//! crossing may drain the stocks (`tests/high_drain.rs`), but at most once per 10 ms for a
//! tenant: unbounded, that was a drain (a barrier on every CPU, a walk of the stocks) every
//! 33 allocations, from inside `alloc` (found by a review).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const HIGH: u64 = 4 << 20;
const L: Layout = match Layout::from_size_align(4096, 8) {
    Ok(l) => l,
    Err(_) => panic!("valid layout"),
};

fn alloc() -> usize {
    // SAFETY: `L` has a non-zero size.
    let p = unsafe { GLOBAL.alloc(L) };
    assert!(!p.is_null());
    p as usize
}

fn free(p: usize) {
    // SAFETY: `p` is live, allocated with `L`.
    unsafe { GLOBAL.dealloc(p as *mut u8, L) };
}

#[test]
fn crossings_at_high_drain_at_most_once_per_interval() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let t = Tenant::new("high-rate");
    t.set_high(HIGH);
    // 48 objects under `high`: the band where every crossing found stocks to take back.
    let keep: Vec<usize> = {
        let _g = t.enter();
        (0..HIGH / 4096 - 48).map(|_| alloc()).collect()
    };
    let (tx, rx) = mpsc::sync_channel::<usize>(32);
    let consumer = thread::spawn(move || rx.into_iter().for_each(free));
    const N: u64 = 200_000;
    let walks = slabcg::accounting::testing::drain_walks();
    let start = Instant::now();
    {
        let _g = t.enter();
        for _ in 0..N {
            tx.send(alloc()).unwrap();
        }
    }
    let ms = start.elapsed().as_millis() as u64;
    drop(tx);
    consumer.join().unwrap();
    let walks = slabcg::accounting::testing::drain_walks() - walks;
    keep.into_iter().for_each(free);
    // One per 10 ms of the run, and a few for the intervals' edges.
    assert!(
        walks <= ms / 10 + 5,
        "{walks} drains in {ms} ms over {N} allocations at high"
    );
    // Every object came back (std's channel keeps a small per-thread context it made in
    // the tenant's scope).
    assert!(t.current_exact() < 4096, "{}", t.current_exact());
}
