//! A fixed amount of alloc+free work for instruction counting with callgrind:
//! batches of 4 allocations then 4 frees of 32 B and of 4 KiB, either with no tenant or
//! inside one tenant's scope.
//!
//! ```sh
//! cargo build --release --example pair_probe
//! valgrind --tool=callgrind target/release/examples/pair_probe 1000000 plain
//! valgrind --tool=callgrind target/release/examples/pair_probe 1000000 tenant
//! valgrind --tool=callgrind target/release/examples/pair_probe 1000000 tenant 32   # one size
//! valgrind --tool=callgrind target/release/examples/pair_probe 1000000 tenant 32 const
//! ```
//! (`const`: the layout is a compile-time constant, so the allocator's fast path is inlined
//! into the loop and folded for the size; see `run_const`. `inlined`: the fast path is
//! inlined into the loop but the layout is known only at run time, the shape LTO gives the
//! seeds bench's loop (the criterion `acct_` groups call `__rust_alloc`); see
//! `probe_loops::run_inlined`. Neither: every pair goes through the `__rust_alloc` call.)
//! (instructions per pair = total / (sizes x 4 x batches); the difference between the two
//! runs is what accounting adds.) Without valgrind it prints ns per pair.
//!
//! Mode `shared` is `tenant` in slabs whose other slots are charged to another tenant
//! (`share_slabs`), as in a thread pool that serves many tenants: a design that keys its fast
//! path on a slab-wide owner pays there (BENCHMARKS.md section 3 measured one).
//!
//! `pair_probe alt ROUNDS BATCHES [const|inlined] [shared]` interleaves short plain and tenant runs in one
//! process (ROUNDS of BATCHES each) and prints the minimum and median ns/pair of each and the median
//! of the per-round ratios (each tenant run against the plain run just before it), which
//! survives a noisy machine better than a ratio of separate runs. The plain rounds run after
//! a scope was entered, as plain allocations do in any process that uses tenants (their frees
//! test the accounted address bit either way). `scripts/acct-overhead.sh` repeats it and
//! summarises the ratios.

use slabcg::{SlabAlloc, Tenant};

#[path = "../benches/common/probe_loops.rs"]
mod probe_loops;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// One timed run in the shape named by `shape` (see `probe_loops::run_shape`).
fn run_shape(shape: &str, size: usize, batches: usize) -> f64 {
    probe_loops::run_shape(&GLOBAL, shape, size, batches)
}

/// Makes the slabs that `tenant`'s next `size`-byte allocations come from shared with
/// another tenant: allocates objects of both tenants in turn (so neighbouring slots of one
/// slab go to different tenants), frees `tenant`'s inside its scope (into its object stock)
/// and keeps the other's live until the process ends. A free in such a slab finds no sole
/// owner, as in a thread pool that serves many tenants.
fn share_slabs(tenant: &Tenant, size: usize) {
    let other = Tenant::new("probe-other");
    let layout = std::alloc::Layout::from_size_align(size, 8).unwrap();
    let mut mine = Vec::new();
    for _ in 0..512 {
        for (t, keep) in [(tenant, true), (&other, false)] {
            let _scope = t.enter();
            // SAFETY: a valid non-zero layout.
            let p = unsafe { std::alloc::alloc(layout) };
            assert!(!p.is_null());
            if keep {
                mine.push(p);
            }
            // The other tenant's objects stay allocated (and charged) for good.
        }
    }
    let _scope = tenant.enter();
    for p in mine {
        // SAFETY: allocated above with `layout`, freed once.
        unsafe { std::alloc::dealloc(p, layout) };
    }
}

fn alternate(rounds: usize, batches: usize, shape: &str, shared: bool) {
    let tenant = Tenant::new("probe");
    for size in [32, 4096] {
        if shared {
            share_slabs(&tenant, size);
        }
        let (mut plain, mut scoped, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let p = run_shape(shape, size, batches);
            let t = {
                let _scope = tenant.enter();
                run_shape(shape, size, batches)
            };
            plain.push(p);
            scoped.push(t);
            ratios.push(t / p);
        }
        for v in [&mut plain, &mut scoped, &mut ratios] {
            v.sort_by(f64::total_cmp);
        }
        let (pm, tm) = (plain[0], scoped[0]);
        let (pq, tq) = (plain[rounds / 2], scoped[rounds / 2]);
        println!(
            "{size} B: plain min {pm:.2} med {pq:.2} | tenant min {tm:.2} med {tq:.2} ns/pair | \
             tenant/plain: of mins {:.3}, of medians {:.3}, median of round ratios {:.3}",
            tm / pm,
            tq / pq,
            ratios[rounds / 2]
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    if std::env::args().nth(1).as_deref() == Some("alt") {
        let rounds = args.nth(1).and_then(|s| s.parse().ok()).unwrap_or(200);
        let batches = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
        let shape = args.next().unwrap_or_default();
        let shared = args.next().as_deref() == Some("shared");
        return alternate(rounds, batches, &shape, shared);
    }
    let batches: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000_000);
    let mode = args.next().unwrap_or_else(|| "plain".into());
    // An optional third argument restricts the run to one size.
    let sizes: Vec<usize> = match args.next().and_then(|s| s.parse().ok()) {
        Some(size) => vec![size],
        None => vec![32, 4096],
    };
    // An optional fourth argument: `const` (a compile-time layout, 32 or 4096 only) or
    // `inlined`.
    let shape = args.next().unwrap_or_default();
    let tenant = Tenant::new("probe");
    for size in &sizes {
        if mode == "shared" {
            share_slabs(&tenant, *size);
        }
    }
    let _scope = (mode != "plain").then(|| tenant.enter());
    for size in sizes {
        run_shape(&shape, size, 1000);
        println!(
            "{mode} {size} B: {:.2} ns/pair",
            run_shape(&shape, size, batches)
        );
    }
}
