//! The seed patches' experiments as named rows for the bench report. Writes
//! `target/bench-report/seeds/seeds.csv` (`experiment,variant,metric,value,unit,note`; each row
//! is compared with the `baseline` variant of its experiment and metric) and prints it.
//!
//! `cargo bench --bench seeds` (about a minute). Times are the median of 7 alternating rounds
//! in this process; they are ratios' raw material, not absolute claims.
//!
//! - 003 accounting on/off: batches of 4 allocs then 4 frees, 32 B and 4 KiB, no tenant vs
//!   inside a tenant scope, 1 thread.
//! - 000 bulk: allocate and free n objects of a dedicated accounted cache in a tenant scope,
//!   one by one vs `alloc_bulk`/`free_bulk`.
//! - 001 Sock: charge+uncharge of 1500 B through the stock (stat batched) vs the same plus a
//!   shared stat atomic updated on every call (what batching avoids).
//! - 002 owner metadata: bytes of owner metadata per 1 MiB of accounted objects for each size
//!   class, kernel-style (an 8-byte pointer per object in a separate array) vs ours.
//! - 004 packing: objects per 32 KiB for odd-sized structs, power-of-two kmalloc vs a
//!   dedicated cache.

use std::alloc::Layout;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

#[path = "common/batch4.rs"]
mod batch4;
use batch4::batch4;

use slabcg::{Cache, MetaPlacement, SlabAlloc, StatItem, Tenant};
use slabcg_allocator::SlabLayout;
use slabcg_allocator::{class_size, NUM_CLASSES};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const ROUNDS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// ns per unit of `f`, which performs `units` units per call; median over ROUNDS rounds.
fn time_ns(units: u64, calls: u64, mut f: impl FnMut()) -> f64 {
    let mut v = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..calls {
            f();
        }
        v.push(t.elapsed().as_nanos() as f64 / (units * calls) as f64);
    }
    median(v)
}

fn row(
    out: &mut String,
    exp: &str,
    variant: &str,
    metric: &str,
    value: f64,
    unit: &str,
    note: &str,
) {
    let _ = writeln!(out, "{exp},{variant},{metric},{value:.3},{unit},{note}");
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut out = String::from("experiment,variant,metric,value,unit,note\n");
    let tenant = Tenant::new("seeds");

    // 003: accounting on/off.
    for size in [32usize, 4096] {
        let l = Layout::from_size_align(size, 8).unwrap();
        let calls = 2_000_000;
        for _ in 0..10_000 {
            batch4(l);
        }
        let off = time_ns(4, calls, || batch4(l));
        let on = {
            let _g = tenant.enter();
            for _ in 0..10_000 {
                batch4(l);
            }
            time_ns(4, calls, || batch4(l))
        };
        let m = format!("ns_per_pair_{size}B");
        row(
            &mut out,
            "003 accounting on/off",
            "baseline",
            &m,
            off,
            "ns",
            "no tenant",
        );
        row(
            &mut out,
            "003 accounting on/off",
            "tenant",
            &m,
            on,
            "ns",
            "inside tenant.enter()",
        );
    }

    // 000: bulk vs one by one, accounted dedicated cache, in a tenant scope.
    let cache = Cache::builder("seed000", Layout::from_size_align(256, 8).unwrap())
        .account(true)
        .build();
    for n in [8usize, 32, 128] {
        let _g = tenant.enter();
        let mut ptrs = vec![std::ptr::null_mut(); n];
        let calls = (400_000 / n as u64).max(1000);
        let single = time_ns(n as u64, calls, || {
            for p in ptrs.iter_mut() {
                *p = cache.alloc().unwrap().as_ptr();
            }
            for &p in ptrs.iter() {
                // SAFETY: allocated from cache just above.
                unsafe { cache.free(std::ptr::NonNull::new_unchecked(p)) };
            }
        });
        let bulk = time_ns(n as u64, calls, || {
            assert_eq!(cache.alloc_bulk(&mut ptrs), n);
            // SAFETY: allocated from cache just above.
            unsafe { cache.free_bulk(&ptrs) };
        });
        let m = format!("ns_per_object_n{n}");
        row(
            &mut out,
            "000 bulk alloc+free",
            "baseline",
            &m,
            single,
            "ns",
            "alloc/free one by one",
        );
        row(
            &mut out,
            "000 bulk alloc+free",
            "bulk",
            &m,
            bulk,
            "ns",
            "alloc_bulk/free_bulk",
        );
    }
    drop(cache);

    // 001: Sock charges with the stat batched in the stock vs updated on every call.
    static SHARED: AtomicI64 = AtomicI64::new(0);
    let sock = Tenant::new("seed001");
    let batched = time_ns(1, 3_000_000, || {
        sock.charge(black_box(1500), StatItem::Sock).unwrap();
        sock.uncharge(black_box(1500), StatItem::Sock);
    });
    let shared = time_ns(1, 3_000_000, || {
        sock.charge(black_box(1500), StatItem::Sock).unwrap();
        SHARED.fetch_add(1500, Ordering::Relaxed);
        sock.uncharge(black_box(1500), StatItem::Sock);
        SHARED.fetch_sub(1500, Ordering::Relaxed);
    });
    let m = "ns_per_charge_uncharge";
    row(
        &mut out,
        "001 sock stat batching",
        "baseline",
        m,
        shared,
        "ns",
        "shared stat atomic per call (1 thread: uncontended)",
    );
    row(
        &mut out,
        "001 sock stat batching",
        "batched",
        m,
        batched,
        "ns",
        "stat delta batched in the stock",
    );

    // 002: owner metadata bytes per MiB of accounted objects, per size class.
    let mut kernel = 0.0;
    let mut ours = 0.0;
    let mut free_classes = 0;
    for c in 0..NUM_CLASSES {
        let l = SlabLayout::for_class(class_size(c), true).unwrap();
        let per_mib = (1 << 20) as f64 / l.stride as f64;
        kernel += per_mib * 8.0;
        let cost = match l.meta {
            MetaPlacement::External => per_mib * 4.0,
            _ => {
                free_classes += 1;
                0.0
            }
        };
        ours += cost;
    }
    let n = NUM_CLASSES as f64;
    row(
        &mut out,
        "002 owner metadata",
        "baseline",
        "bytes_per_MiB_avg_over_classes",
        kernel / n,
        "B",
        "8-byte pointer per object in a separate array",
    );
    row(
        &mut out,
        "002 owner metadata",
        "slabcg",
        "bytes_per_MiB_avg_over_classes",
        ours / n,
        "B",
        &format!("4-byte id; free in tail or padding for {free_classes} of {NUM_CLASSES} classes"),
    );
    let l64 = SlabLayout::new(64, 8, true, false).unwrap();
    row(
        &mut out,
        "002 owner metadata",
        "baseline",
        "bytes_per_object_64B",
        8.0,
        "B",
        "kernel",
    );
    row(
        &mut out,
        "002 owner metadata",
        "slabcg",
        "bytes_per_object_64B",
        if l64.meta == MetaPlacement::External {
            4.0
        } else {
            0.0
        },
        "B",
        &format!("{:?}", l64.meta),
    );

    // 004: dedicated-cache packing for odd sizes.
    for size in [2312usize, 2896, 1100, 700, 3000] {
        let kmalloc = (32 * 1024) / size.next_power_of_two();
        let c = Cache::builder("seed004", Layout::from_size_align(size, 8).unwrap()).build();
        let i = c.info();
        let per_32k = (i.objects_per_slab as f64) * (32.0 * 1024.0) / i.slab_bytes as f64;
        let m = format!("objects_per_32KiB_{size}B");
        row(
            &mut out,
            "004 dedicated cache packing",
            "baseline",
            &m,
            kmalloc as f64,
            "objects",
            "power-of-two kmalloc class",
        );
        row(
            &mut out,
            "004 dedicated cache packing",
            "dedicated",
            &m,
            per_32k,
            "objects",
            &format!(
                "slab {} KiB with {} objects",
                i.slab_bytes / 1024,
                i.objects_per_slab
            ),
        );
    }

    print!("{out}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-report/seeds");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("seeds.csv"), &out);
        eprintln!("wrote {}", dir.join("seeds.csv").display());
    }
}
