//! A request pool refilled in bursts, the way io_uring's submission path refills its
//! request cache (`__io_alloc_req_refill`: `kmem_cache_alloc_bulk` of 8 `io_kiocb`s from an
//! accounted cache whenever the free list runs dry; seed 000's only real bulk user).
//!
//! A tenant ("ring") submits bursts of 2048 requests; each submission takes a request from
//! the pool's free list and refills it with 8 at a time when empty; completions go back in
//! batches of 32, and every 32 bursts the ring is recycled (the pool given back to the
//! cache). Run once with one-by-one refills and frees and once with `alloc_bulk` /
//! `free_bulk`, for a dedicated cache and for a size class; prints the throughput and the
//! tenant's slab lines.
//!
//! What the figures are: whole patterns, not bulk calls alone (`benches/bulk.rs` times
//! those). A recycle frees every request, which empties slabs, and slabcg gives the pages
//! of empty slabs beyond a reserve back to the OS: the refills after it fault them in
//! again. The dedicated cache pays that in both modes; the size class one by one keeps the
//! freed requests in the thread's bins and object stock, while `free_bulk` sends what the
//! bin cannot hold back to the slabs, so its bulk mode pays it too (seen here as bulk
//! slower than one by one for the size class).
//!
//! `cargo run --release --example request_pool [total requests, default 2^24]`

use std::alloc::Layout;
use std::ptr::NonNull;
use std::time::Instant;

use slabcg::{alloc_bulk, free_bulk, Cache, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// About the size of an io_kiocb.
#[allow(dead_code)]
struct Request {
    opcode: u8,
    flags: u32,
    user_data: u64,
    fd: i32,
    rest: [u64; 28],
}

const BURST: usize = 2048;
const REFILL: usize = 8;
const COMPLETE: usize = 32;
const RECYCLE: usize = 32;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Single,
    Bulk,
}

/// Where requests come from: the accounted dedicated cache, or the size class of their
/// layout.
enum Source<'a> {
    Dedicated(&'a Cache),
    Class(Layout),
}

impl Source<'_> {
    fn refill(&self, mode: Mode, out: &mut [*mut u8]) -> usize {
        match (self, mode) {
            (Source::Dedicated(c), Mode::Bulk) => c.alloc_bulk(out),
            (Source::Class(l), Mode::Bulk) => alloc_bulk(*l, out),
            (Source::Dedicated(c), Mode::Single) => {
                for p in out.iter_mut() {
                    *p = c.alloc().expect("request").as_ptr();
                }
                out.len()
            }
            (Source::Class(l), Mode::Single) => {
                for p in out.iter_mut() {
                    // SAFETY: a non-zero size.
                    *p = unsafe { std::alloc::alloc(*l) };
                    assert!(!p.is_null());
                }
                out.len()
            }
        }
    }

    /// # Safety
    /// Every pointer came from `refill` of this source, and is freed once.
    unsafe fn free(&self, mode: Mode, ptrs: &[*mut u8]) {
        // SAFETY (every arm): the caller's contract.
        match (self, mode) {
            (Source::Dedicated(c), Mode::Bulk) => unsafe { c.free_bulk(ptrs) },
            (Source::Class(l), Mode::Bulk) => unsafe { free_bulk(*l, ptrs) },
            (Source::Dedicated(c), Mode::Single) => {
                for &p in ptrs {
                    unsafe { c.free(NonNull::new_unchecked(p)) };
                }
            }
            (Source::Class(l), Mode::Single) => {
                for &p in ptrs {
                    unsafe { std::alloc::dealloc(p, *l) };
                }
            }
        }
    }
}

/// Submits `total` requests in bursts; returns ns per request.
fn run(src: &Source<'_>, mode: Mode, total: usize) -> f64 {
    let mut free_list: Vec<*mut u8> = Vec::with_capacity(BURST + REFILL);
    let mut inflight: Vec<*mut u8> = Vec::with_capacity(BURST);
    let mut refill = [std::ptr::null_mut(); REFILL];
    let start = Instant::now();
    let mut submitted = 0;
    let mut round = 0usize;
    while submitted < total {
        for _ in 0..BURST {
            let req = match free_list.pop() {
                Some(r) => r,
                None => {
                    assert_eq!(src.refill(mode, &mut refill), REFILL, "refill refused");
                    free_list.extend_from_slice(&refill[1..]);
                    refill[0]
                }
            };
            // Prepare the submission: the fields a real SQE fills.
            // SAFETY: req is a live block of at least size_of::<Request>() bytes, aligned.
            unsafe {
                let r = req as *mut Request;
                (*r).opcode = 6;
                (*r).user_data = submitted as u64;
                (*r).fd = 3;
            }
            inflight.push(req);
            submitted += 1;
        }
        // Completions come back in batches; their requests go back to the pool.
        for batch in inflight.chunks(COMPLETE) {
            free_list.extend_from_slice(batch);
        }
        inflight.clear();
        round += 1;
        if round.is_multiple_of(RECYCLE) {
            // The ring goes away: its cached requests go back to the cache, in batches.
            for batch in free_list.chunks(COMPLETE) {
                // SAFETY: every request came from src's refill and is freed once.
                unsafe { src.free(mode, batch) };
            }
            free_list.clear();
        }
    }
    for batch in free_list.chunks(COMPLETE) {
        // SAFETY: as above.
        unsafe { src.free(mode, batch) };
    }
    start.elapsed().as_nanos() as f64 / submitted as f64
}

fn main() {
    let total: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1 << 24);
    let ring = Tenant::new("ring");
    ring.set_max(256 << 20);
    let layout = Layout::new::<Request>();
    let cache = Cache::builder("io_kiocb", layout).account(true).build();
    println!(
        "{total} requests of {} bytes, bursts of {BURST}, refills of {REFILL}, completions of {COMPLETE}, ring recycled every {RECYCLE} bursts",
        layout.size()
    );
    // Each source: the recycles free the whole pool, so each refill pattern reaches the
    // cache; for the stat lines, a pool is kept alive at the end.
    for (name, src) in [
        ("dedicated cache io_kiocb", Source::Dedicated(&cache)),
        ("size class", Source::Class(layout)),
    ] {
        let _g = ring.enter();
        let mut ns = [0.0; 2];
        for _ in 0..3 {
            ns[0] += run(&src, Mode::Single, total / 3);
            ns[1] += run(&src, Mode::Bulk, total / 3);
        }
        let (single, bulk) = (ns[0] / 3.0, ns[1] / 3.0);
        println!(
            "{name:>26}: one by one {single:6.1} ns/request ({:6.1} M/s), bulk {bulk:6.1} ns/request ({:6.1} M/s), bulk/single {:.2}x",
            1e3 / single,
            1e3 / bulk,
            bulk / single
        );
    }
    // A pool left in the ring, to show what the tenant holds.
    let mut pool = vec![std::ptr::null_mut(); 4096];
    let _g = ring.enter();
    assert_eq!(cache.alloc_bulk(&mut pool), pool.len());
    drop(_g);
    let stat = ring.stat();
    println!(
        "ring with a pool of {} requests: current {} B, peak {} B",
        pool.len(),
        ring.current_exact(),
        stat.peak
    );
    for line in stat.to_string().lines() {
        if line.starts_with("slab") {
            println!("  {line}");
        }
    }
    // SAFETY: the requests came from cache's alloc_bulk, each freed once.
    unsafe { cache.free_bulk(&pool) };
    assert_eq!(ring.current_exact(), 0);
}
