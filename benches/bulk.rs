//! Bulk vs one by one, accounting on (inside a tenant scope): ns per object to allocate n
//! objects and free them, for n = 1, 8, 32, 128, from an accounted dedicated cache
//! (`Cache::alloc_bulk`/`free_bulk` vs `alloc`/`free`) and from a size class
//! (`slabcg::alloc_bulk`/`free_bulk` vs `GlobalAlloc::alloc`/`dealloc` with slabcg as the
//! global allocator). Prints a table with the bulk/single ratio.
//!
//! `cargo bench --bench bulk` (about 20 s). Times are the median of 7 alternating rounds in
//! this process: ratios' raw material, not absolute claims.

use std::alloc::Layout;
use std::hint::black_box;
use std::ptr::NonNull;
use std::time::Instant;

use slabcg::{alloc_bulk, free_bulk, Cache, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const ROUNDS: usize = 7;

/// ns per object of `single` and `bulk`, each doing `n` objects per call: the medians of
/// ROUNDS rounds, the two alternated.
fn pair(n: usize, mut single: impl FnMut(), mut bulk: impl FnMut()) -> (f64, f64) {
    let calls = (2_000_000 / n).max(2000);
    for _ in 0..calls / 10 {
        single();
        bulk();
    }
    let (mut s, mut b) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..calls {
            single();
        }
        s.push(t.elapsed().as_nanos() as f64 / (n * calls) as f64);
        let t = Instant::now();
        for _ in 0..calls {
            bulk();
        }
        b.push(t.elapsed().as_nanos() as f64 / (n * calls) as f64);
    }
    s.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (s[ROUNDS / 2], b[ROUNDS / 2])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let tenant = Tenant::new("bulk-bench");
    let l = Layout::from_size_align(256, 8).unwrap();
    let cache = Cache::builder("bulk-bench", l).account(true).build();
    println!("| cache | n | single ns/object | bulk ns/object | bulk / single |");
    println!("|---|---:|---:|---:|---:|");
    // `BULK_ONLY=class` skips the dedicated cache (for a profile of the size classes).
    let dedicated = std::env::var("BULK_ONLY").map_or(true, |v| v != "class");
    // `BULK_N=<n>` runs that count only (for callgrind: instructions per object).
    let only_n: Option<usize> = std::env::var("BULK_N").ok().and_then(|v| v.parse().ok());
    let counts = move || {
        [1usize, 8, 32, 128]
            .into_iter()
            .filter(move |&n| only_n.is_none_or(|m| m == n))
    };
    for n in counts().filter(|_| dedicated) {
        let _g = tenant.enter();
        let (mut ptrs, mut many) = (vec![std::ptr::null_mut(); n], vec![std::ptr::null_mut(); n]);
        let (s, b) = pair(
            n,
            || {
                for p in ptrs.iter_mut() {
                    *p = cache.alloc().unwrap().as_ptr();
                }
                for &p in ptrs.iter() {
                    // SAFETY: allocated from cache just above, freed once.
                    unsafe { cache.free(NonNull::new_unchecked(black_box(p))) };
                }
            },
            || {
                assert_eq!(cache.alloc_bulk(black_box(&mut many[..])), n);
                // SAFETY: allocated from cache just above, freed once.
                unsafe { cache.free_bulk(black_box(&many[..])) };
            },
        );
        println!(
            "| dedicated 256 B | {n} | {s:.1} | {b:.1} | {:.2}x |",
            b / s
        );
        drop(_g);
    }
    for n in counts() {
        let _g = tenant.enter();
        let (mut ptrs, mut many) = (vec![std::ptr::null_mut(); n], vec![std::ptr::null_mut(); n]);
        let (s, b) = pair(
            n,
            || {
                for p in ptrs.iter_mut() {
                    // SAFETY: a non-zero size.
                    *p = unsafe { std::alloc::alloc(l) };
                }
                for &p in ptrs.iter() {
                    // SAFETY: allocated with l just above, freed once.
                    unsafe { std::alloc::dealloc(black_box(p), l) };
                }
            },
            || {
                assert_eq!(alloc_bulk(l, black_box(&mut many[..])), n);
                // SAFETY: allocated with l just above, freed once.
                unsafe { free_bulk(l, black_box(&many[..])) };
            },
        );
        println!(
            "| size class 256 B | {n} | {s:.1} | {b:.1} | {:.2}x |",
            b / s
        );
        drop(_g);
    }
    drain_and_check(&tenant);
}

fn drain_and_check(t: &Tenant) {
    assert_eq!(t.current_exact(), 0, "the bench left objects charged");
}
