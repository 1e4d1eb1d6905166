//! Issue 18: a dedicated cache's `alloc`+`free` pair (what `TypedCache` wraps) against a
//! `Box::new` + drop pair of a type of the same layout, outside any tenant and inside one
//! (the cache accounted, the Box charged through the size classes' object stock).
//!
//! The same for a `TypedCache<T>` pair (`alloc(value)` + drop of the `CacheBox`) against a
//! `Box<T>` pair, the form the target is stated for.
//!
//! `cargo bench --bench dedicated_front`. Prints ns per pair of each variant, the median of
//! 15 alternating rounds in this process, and the ratios cache / Box (the figure to watch;
//! the target is 1.10 or less). `FRONT_ONLY=<variant>` runs one variant once (see `main`),
//! for `valgrind --tool=callgrind`.

use std::alloc::Layout;
use std::hint::black_box;
use std::time::Instant;

use slabcg::{Cache, SlabAlloc, Tenant, TypedCache};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const ROUNDS: usize = 15;
const PAIRS: usize = 2_000_000;

/// The object both sides allocate: 64 bytes, a size class of its own.
type Obj = [u64; 8];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / PAIRS as f64
}

fn boxes() {
    for i in 0..PAIRS {
        let b = Box::new([i as u64; 8]);
        black_box(&b);
    }
}

/// As [`boxes`], with the object's address escaping (`black_box(&*b)`) instead of the box:
/// the box then stays in registers, as it does in code that allocates, uses and drops.
fn boxes_addr() {
    for i in 0..PAIRS {
        let b = Box::new([i as u64; 8]);
        black_box(&*b);
    }
}

fn cache_pairs(c: &Cache) {
    for i in 0..PAIRS {
        let p = c.alloc().unwrap();
        // SAFETY: a fresh 64-byte slot, aligned for Obj (the cache's layout).
        unsafe { (p.as_ptr() as *mut Obj).write([i as u64; 8]) };
        black_box(p);
        // SAFETY: allocated just above, freed once.
        unsafe { c.free(p) };
    }
}

fn typed_pairs(c: &TypedCache<Obj>) {
    for i in 0..PAIRS {
        let b = c.alloc([i as u64; 8]).ok().unwrap();
        black_box(&b);
    }
}

/// As [`typed_pairs`], with the object's address escaping, as in [`boxes_addr`]: a
/// `CacheBox` is two words (the slot and its cache), so `black_box(&b)` spills both and the
/// free reloads the cache through the stack, where a `Box` spills one.
fn typed_pairs_addr(c: &TypedCache<Obj>) {
    for i in 0..PAIRS {
        let b = c.alloc([i as u64; 8]).ok().unwrap();
        black_box(&*b);
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let plain = Cache::builder("bench-front", Layout::new::<Obj>()).build();
    let acct = Cache::builder("bench-front-acct", Layout::new::<Obj>())
        .account(true)
        .build();
    let typed: TypedCache<Obj> = TypedCache::new("bench-front-typed", false);
    let typed_acct: TypedCache<Obj> = TypedCache::new("bench-front-typed-acct", true);
    let t = Tenant::new("bench-front");
    // `FRONT_ONLY=<variant>` runs one variant once, for callgrind (instructions per pair =
    // total / PAIRS): box, cache, typed, box-addr, typed-addr, or the same with `-tenant`.
    if let Ok(v) = std::env::var("FRONT_ONLY") {
        let _g = v.ends_with("-tenant").then(|| t.enter());
        let ns = match v.trim_end_matches("-tenant") {
            "box" => time(&mut boxes),
            "box-addr" => time(&mut boxes_addr),
            "typed-addr" if _g.is_some() => time(&mut || typed_pairs_addr(&typed_acct)),
            "typed-addr" => time(&mut || typed_pairs_addr(&typed)),
            "cache" if _g.is_some() => time(&mut || cache_pairs(&acct)),
            "cache" => time(&mut || cache_pairs(&plain)),
            "typed" if _g.is_some() => time(&mut || typed_pairs(&typed_acct)),
            "typed" => time(&mut || typed_pairs(&typed)),
            _ => panic!(
                "FRONT_ONLY: box, cache, typed, box-addr or typed-addr, optionally with -tenant"
            ),
        };
        println!("{v}: {ns:.2} ns/pair");
        return;
    }
    let names = [
        "box",
        "cache",
        "typed",
        "box in tenant",
        "cache in tenant",
        "typed in tenant",
        "box, addr",
        "typed, addr",
        "box, addr, tenant",
        "typed, addr, tenant",
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut ratio: [Vec<f64>; 6] = Default::default();
    for _ in 0..ROUNDS {
        let b = time(&mut boxes);
        let c = time(&mut || cache_pairs(&plain));
        let ty = time(&mut || typed_pairs(&typed));
        let ba = time(&mut boxes_addr);
        let tya = time(&mut || typed_pairs_addr(&typed));
        let (bt, ct, tyt, bat, tyat) = {
            let _g = t.enter();
            (
                time(&mut boxes),
                time(&mut || cache_pairs(&acct)),
                time(&mut || typed_pairs(&typed_acct)),
                time(&mut boxes_addr),
                time(&mut || typed_pairs_addr(&typed_acct)),
            )
        };
        for (v, x) in ns
            .iter_mut()
            .zip([b, c, ty, bt, ct, tyt, ba, tya, bat, tyat])
        {
            v.push(x);
        }
        ratio[0].push(c / b);
        ratio[1].push(ct / bt);
        ratio[2].push(ty / b);
        ratio[3].push(tyt / bt);
        ratio[4].push(tya / ba);
        ratio[5].push(tyat / bat);
    }
    for (n, v) in names.iter().zip(ns) {
        println!("{n:>16}: {:6.2} ns/pair", median(v));
    }
    let [r0, r1, r2, r3, r4, r5] = ratio;
    println!("cache/box, no tenant:  {:.3}", median(r0));
    println!("cache/box, in tenant:  {:.3}", median(r1));
    println!("typed/box, no tenant:  {:.3}", median(r2));
    println!("typed/box, in tenant:  {:.3}", median(r3));
    println!("typed/box, addr, no tenant:  {:.3}", median(r4));
    println!("typed/box, addr, in tenant:  {:.3}", median(r5));
}
