//! A dead tenant costs an objcg, not a tenant: a tenant per request, each leaving one object
//! behind, for 10,000,000 requests (past the 4,194,303 ids the table used to hold). The
//! bookkeeping per dead tenant stays under 64 bytes, the parent's exact usage equals the
//! live bytes, and once the objects are freed (here or on other threads) and `trim()` ran,
//! the allocator is back where it started. `SLABCG_DEAD_TENANTS=N` changes the count.
//!
//! The tests of this file run one at a time (a lock): each measures `stats()` of the
//! whole process.

use std::sync::Mutex;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn requests() -> usize {
    std::env::var("SLABCG_DEAD_TENANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000)
}

/// What a request leaves behind: a 16-byte object, charged to the request's tenant.
type Leftover = Box<[u64; 2]>;

/// Allocated and resident bytes after draining every stock, freeing zombies and trimming.
fn settled() -> (usize, usize) {
    slabcg::drain_all_stocks();
    slabcg::trim();
    let s = slabcg::stats();
    (s.allocated, s.resident)
}

/// `n` requests under `parent`, each in a tenant of its own that dies leaving one object.
fn leaky_requests(parent: &Tenant, n: usize, kept: &mut Vec<Leftover>) {
    for i in 0..n {
        let req = parent.child("request");
        let obj = {
            let _in = req.enter();
            Box::new([i as u64, !(i as u64)])
        };
        kept.push(obj);
    }
}

fn check_cost_then_free(free_on_threads: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let n = requests();
    let parent = Tenant::new("service");
    let mut kept: Vec<Leftover> = Vec::with_capacity(n);
    let (alloc0, res0) = settled();
    leaky_requests(&parent, n, &mut kept);
    let live = (n * 16) as u64;
    assert_eq!(
        parent.current_exact(),
        live,
        "the parent carries every dead request's object"
    );
    let (alloc1, _) = settled();
    let per_dead = (alloc1 - alloc0 - live as usize) as f64 / n as f64;
    eprintln!(
        "{n} dead tenants with one live object each: {per_dead:.1} bytes of bookkeeping each \
         (id table {} bytes)",
        slabcg::accounting::testing::objcg_table_bytes()
    );
    assert!(per_dead <= 64.0, "{per_dead} bytes per dead tenant");

    if free_on_threads == 0 {
        drop(kept);
    } else {
        let per = n.div_ceil(free_on_threads);
        let mut parts = Vec::new();
        while !kept.is_empty() {
            let at = kept.len().saturating_sub(per);
            parts.push(kept.split_off(at));
        }
        drop(kept);
        let hs: Vec<_> = parts
            .into_iter()
            .map(|p| std::thread::spawn(move || drop(p)))
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    assert_eq!(parent.current_exact(), 0);
    drop(parent);
    let (alloc2, res2) = settled();
    eprintln!(
        "after freeing: allocated {alloc0} -> {alloc2}, resident {res0} -> {res2} \
         (id table {} bytes)",
        slabcg::accounting::testing::objcg_table_bytes()
    );
    assert!(
        alloc2 <= alloc0 + (1 << 20),
        "allocated {alloc0} -> {alloc2} after everything was freed"
    );
    assert!(
        res2 <= res0 + (32 << 20),
        "resident {res0} -> {res2} after everything was freed"
    );
}

#[test]
fn ten_million_dead_tenants_cost_their_objcgs_only() {
    check_cost_then_free(0);
}

#[test]
fn leftovers_freed_on_other_threads() {
    check_cost_then_free(4);
}

/// Nested tenants die in a random order while their objects live; every ancestor's exact
/// usage stays the sum of its subtree's live objects, and everything comes back.
#[test]
fn nested_tenants_dying_in_random_order() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (alloc0, _) = settled();
    let root = Tenant::new("nested");
    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for round in 0..20 {
        // Three levels: 8 children of `root`, 8 grandchildren each, an object at every
        // node (sized by level).
        let mut nodes: Vec<(Tenant, usize)> = Vec::new();
        // Reserved outside every tenant: its growth would be charged to the scope it
        // happens in.
        let mut objs: Vec<Vec<u8>> = Vec::with_capacity(72);
        for _ in 0..8 {
            let c = root.child("c");
            for _ in 0..8 {
                nodes.push((c.child("g"), 64));
            }
            nodes.push((c, 512));
        }
        for (t, size) in &nodes {
            let _in = t.enter();
            objs.push(Vec::with_capacity(*size));
        }
        let live: u64 = objs.iter().map(|v| v.capacity() as u64).sum();
        // Drop the handles in a random order (a child dies only once its last handle and
        // its live children are gone).
        while !nodes.is_empty() {
            let i = (next() % nodes.len() as u64) as usize;
            drop(nodes.swap_remove(i));
        }
        assert_eq!(root.current_exact(), live, "round {round}");
        // Free the objects in a random order too.
        while !objs.is_empty() {
            let i = (next() % objs.len() as u64) as usize;
            drop(objs.swap_remove(i));
        }
        assert_eq!(root.current_exact(), 0, "round {round}");
    }
    drop(root);
    let (alloc1, _) = settled();
    assert!(
        alloc1 <= alloc0 + (1 << 20),
        "allocated {alloc0} -> {alloc1}"
    );
}
