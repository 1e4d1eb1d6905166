//! A tenant per request on many threads, checked against a ledger: the body of the bounded
//! `tests/request_stress.rs` (CI) and of `examples/request_stress.rs` (as long as asked).
//!
//! Every worker serves requests in turn: each is a new child tenant of one of three customers
//! (one with a tight limit), entered for the request's work and dropped at its end. A request
//! allocates a random burst (16 B to 8 KiB, now and then a large block; about a quarter from
//! accounted dedicated caches of odd sizes, now and then 8 at once by `alloc_bulk`, so that
//! their fronts' kept bins serve and keep them), frees some of it (a cache's by `free_bulk`
//! now and then),
//! frees objects that earlier requests of any thread and customer left in a shared pool (the
//! objects of dead tenants, freed inside a live one's scope: larson's shape), and leaves some
//! of its own there. So requests die with live objects all the time, their charges move to
//! their customer, and other threads free them.
//!
//! At the end of each round every worker waits at a barrier while one checks each customer's
//! `current_exact()` against the ledger (the pool's objects of that customer, by usable
//! size), the service's against their sum, and the tight customer against its limit. At the
//! end the pool is freed: every customer reads 0 and no dead request's objcg is left.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::{Condvar, Mutex};
use std::thread;

use slabcg::accounting::testing;
use slabcg::{Cache, SlabAlloc, Tenant};

/// How much work a run does.
#[derive(Clone, Copy)]
pub struct Config {
    pub threads: usize,
    pub rounds: usize,
    pub requests_per_round: usize,
    pub seed: u64,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    pub requests: u64,
    pub allocations: u64,
    /// Allocations refused by the tight customer's limit.
    pub refused: u64,
    /// Objects of dead requests freed inside another request's scope.
    pub freed_from_pool: u64,
    /// The most objects the pool held.
    pub max_pool: usize,
    /// Rounds checked against the ledger.
    pub checks: u64,
    /// Live requests checked against their own objects.
    pub request_checks: u64,
    /// `free_bulk` calls on a dedicated cache.
    pub bulk_frees: u64,
}

/// The customers: name and max (bytes). The last is tight, so its requests are refused.
const CUSTOMERS: [(&str, u64); 3] = [
    ("customer-a", u64::MAX),
    ("customer-b", u64::MAX),
    ("customer-tight", 256 << 10),
];
const TIGHT: usize = 2;
/// The most objects the pool holds (its buffer is allocated once, outside any scope).
const POOL_CAP: usize = 6000;
/// The most objects one request allocates.
const BURST: usize = 48;
/// The accounted dedicated caches requests allocate from: object sizes (odd ones, seed 004's
/// shape), one 64-byte aligned.
const CACHES: [(usize, usize); 3] = [(72, 8), (200, 8), (1144, 64)];
/// Objects of one `alloc_bulk`.
const BULK: usize = 8;

/// A barrier that a panicking worker breaks, so that a failed check ends the run with its
/// message instead of leaving the others waiting forever.
struct Barrier {
    n: usize,
    /// (threads waiting, generation, broken)
    state: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl Barrier {
    fn new(n: usize) -> Barrier {
        Barrier {
            n,
            state: Mutex::new((0, 0, false)),
            cv: Condvar::new(),
        }
    }

    /// Waits for all `n`; true for one of them (the leader). Panics once the barrier is
    /// broken.
    fn wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!s.2, "another worker failed");
        s.0 += 1;
        if s.0 == self.n {
            s.0 = 0;
            s.1 += 1;
            self.cv.notify_all();
            return true;
        }
        let generation = s.1;
        while s.1 == generation && !s.2 {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        assert!(!s.2, "another worker failed");
        false
    }

    fn break_it(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.cv.notify_all();
    }
}

/// Breaks the barrier when its worker unwinds.
struct BreakOnPanic<'a>(&'a Barrier);

impl Drop for BreakOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.break_it();
        }
    }
}

/// A live object outside any request: who it is charged to and what it holds.
struct Obj {
    addr: usize,
    layout: Layout,
    /// The dedicated cache it came from (an index of `CACHES`), or None: the global allocator.
    cache: Option<usize>,
    customer: usize,
    usable: u64,
    stamp: u64,
}

/// xorshift64*: reproducible per thread, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_layout(rng: &mut Rng) -> Layout {
    let size = match rng.below(64) {
        0 => 64 * 1024 + rng.below(240 * 1024),
        1..=40 => 16 + rng.below(240),
        _ => 256 + rng.below(8 * 1024 - 256),
    };
    Layout::from_size_align(size, 8).unwrap()
}

/// Allocates in the current scope and stamps the first and last word; `None` when refused.
fn allocate(layout: Layout, customer: usize, stamp: u64) -> Option<Obj> {
    // SAFETY: a non-zero size.
    let p = unsafe { alloc(layout) };
    if p.is_null() {
        return None;
    }
    Some(stamped(p, layout, None, customer, stamp))
}

/// The object at `p` (from the global allocator, or from cache `cache`), stamped.
fn stamped(p: *mut u8, layout: Layout, cache: Option<usize>, customer: usize, stamp: u64) -> Obj {
    // SAFETY: p is a fresh block of layout.size() >= 8 bytes, aligned to 8.
    unsafe {
        (p as *mut u64).write(stamp);
        (p.add(layout.size() - 8) as *mut u64).write_unaligned(!stamp);
    }
    // A dedicated cache charges its object size (`CacheInfo::object_size`, the layout's).
    let usable = match cache {
        // SAFETY: p is a live allocation of the global SlabAlloc.
        None => (unsafe { SlabAlloc::usable_size(p) }) as u64,
        Some(_) => layout.size() as u64,
    };
    Obj {
        addr: p as usize,
        layout,
        cache,
        customer,
        usable,
        stamp,
    }
}

/// One object of dedicated cache `i` in the current scope, stamped; `None` when refused.
fn allocate_cached(caches: &[Cache], i: usize, customer: usize, stamp: u64) -> Option<Obj> {
    let p = caches[i].alloc()?;
    Some(stamped(
        p.as_ptr(),
        cache_layout(i),
        Some(i),
        customer,
        stamp,
    ))
}

/// `BULK` objects of dedicated cache `i` in one `alloc_bulk`, stamped; all or nothing.
fn allocate_bulk(
    caches: &[Cache],
    i: usize,
    customer: usize,
    stamp: &mut u64,
    out: &mut Vec<Obj>,
) -> bool {
    let mut ptrs = [std::ptr::null_mut(); BULK];
    if caches[i].alloc_bulk(&mut ptrs) == 0 {
        assert!(
            ptrs.iter().all(|p| p.is_null()),
            "a refused bulk handed out objects"
        );
        return false;
    }
    for p in ptrs {
        *stamp += 1;
        out.push(stamped(p, cache_layout(i), Some(i), customer, *stamp));
    }
    true
}

fn cache_layout(i: usize) -> Layout {
    Layout::from_size_align(CACHES[i].0, CACHES[i].1).unwrap()
}

/// The accounted dedicated caches of a run.
fn build_caches() -> Vec<Cache> {
    (0..CACHES.len())
        .map(|i| {
            Cache::builder(&format!("stress-{}", CACHES[i].0), cache_layout(i))
                .account(true)
                .build()
        })
        .collect()
}

/// Checks the stamps and frees.
fn free(caches: &[Cache], o: Obj) {
    let p = check_stamps(&o);
    match o.cache {
        // SAFETY: o is a live block of o.layout; freed once, here.
        None => unsafe { dealloc(p, o.layout) },
        // SAFETY: o is a live object of that cache; freed once, here.
        Some(i) => unsafe { caches[i].free(NonNull::new_unchecked(p)) },
    }
}

/// Checks the stamps that `stamped` wrote; the object's address.
fn check_stamps(o: &Obj) -> *mut u8 {
    let p = o.addr as *mut u8;
    // SAFETY: o is a live object of o.layout's size that `stamped` stamped.
    unsafe {
        let (head, tail) = (
            (p as *const u64).read(),
            (p.add(o.layout.size() - 8) as *const u64).read_unaligned(),
        );
        assert!(
            head == o.stamp && tail == !o.stamp,
            "an object lost its contents: {p:?}, {} bytes of customer {}, stamp {:#x}, \
             head {head:#x}, tail {tail:#x}",
            o.layout.size(),
            o.customer,
            o.stamp
        );
    }
    p
}

/// One request of customer `k`: born, works, dies with what it left in the pool.
#[allow(clippy::too_many_arguments)]
fn request(
    customers: &[Tenant],
    caches: &[Cache],
    pool: &Mutex<Vec<Obj>>,
    mine: &mut Vec<Obj>,
    ids: &mut Vec<u32>,
    rng: &mut Rng,
    stamp: &mut u64,
    report: &mut Report,
) {
    let k = rng.below(customers.len());
    let req = customers[k].child("request");
    ids.push(req.objcg_id());
    {
        let _in = req.enter();
        for _ in 0..1 + rng.below(BURST) {
            *stamp += 1;
            let got = match rng.below(16) {
                0 => allocate_bulk(caches, rng.below(caches.len()), k, stamp, mine),
                1..=3 => allocate_cached(caches, rng.below(caches.len()), k, *stamp)
                    .map(|o| mine.push(o))
                    .is_some(),
                _ => allocate(random_layout(rng), k, *stamp)
                    .map(|o| mine.push(o))
                    .is_some(),
            };
            if !got {
                assert_eq!(k, TIGHT, "an unlimited customer refused an allocation");
                report.refused += 1;
            }
            report.allocations += 1;
        }
        // Half of the burst is freed by the request itself (its own objects); now and then
        // one cache's share of it by `free_bulk` (the pointers on the stack: nothing may
        // allocate here, in the tight customer's scope, but what the test counts).
        if rng.below(4) == 0 {
            let i = rng.below(caches.len());
            let mut ptrs = [std::ptr::null_mut(); BULK * 8];
            let (mut n, mut j) = (0, 0);
            while j < mine.len() && n < ptrs.len() {
                if mine[j].cache == Some(i) {
                    ptrs[n] = check_stamps(&mine.swap_remove(j));
                    n += 1;
                } else {
                    j += 1;
                }
            }
            if n > 0 {
                // SAFETY: live objects of that cache, each once, taken out of `mine`.
                unsafe { caches[i].free_bulk(&ptrs[..n]) };
                report.bulk_frees += 1;
            }
        }
        for _ in 0..mine.len() / 2 {
            let i = rng.below(mine.len());
            free(caches, mine.swap_remove(i));
        }
    }
    if report.requests.is_multiple_of(64) {
        // The request itself owns exactly its live objects (checked outside its scope: the
        // drain allocates).
        let live: u64 = mine.iter().map(|o| o.usable).sum();
        assert_eq!(
            req.current_exact(),
            live,
            "a live request against its objects"
        );
        let s = req.stat();
        assert_eq!(
            s.slab + s.large,
            live,
            "a live request's slab and large stats"
        );
        report.request_checks += 1;
    }
    {
        let _in = req.enter();
        let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
        // Objects of earlier, dead requests (any customer, any thread), freed in this scope:
        // fewer while the pool is below half full, so that it fills (the objects of
        // hundreds of dead requests, more than a thread's forwarding entries) and stays so.
        let n = if pool.len() > POOL_CAP / 2 {
            rng.below(2 * BURST / 3)
        } else {
            rng.below(BURST / 6)
        }
        .min(pool.len());
        for _ in 0..n {
            let i = rng.below(pool.len());
            free(caches, pool.swap_remove(i));
            report.freed_from_pool += 1;
        }
        // The rest outlives the request, when the pool has room.
        while let Some(o) = mine.pop() {
            if pool.len() < POOL_CAP {
                pool.push(o);
            } else {
                free(caches, o);
            }
        }
        report.max_pool = report.max_pool.max(pool.len());
    }
    report.requests += 1;
    drop(req);
}

/// Each customer against the pool's objects of it (every worker waits at the barrier).
fn check(service: &Tenant, customers: &[Tenant], pool: &[Obj], round: usize) {
    slabcg::allocator::testing::check_invariants();
    let mut total = 0;
    for (k, c) in customers.iter().enumerate() {
        let ledger: u64 = pool
            .iter()
            .filter(|o| o.customer == k)
            .map(|o| o.usable)
            .sum();
        let current = c.current_exact();
        assert_eq!(
            current,
            ledger,
            "round {round}: {} against the ledger",
            c.name()
        );
        let s = c.stat();
        assert_eq!(s.current, current, "round {round}: {} stat", c.name());
        assert_eq!(
            s.slab + s.large,
            ledger,
            "round {round}: {} slab and large stats",
            c.name()
        );
        assert!(
            current <= c.max(),
            "round {round}: {} above its max",
            c.name()
        );
        total += ledger;
    }
    assert_eq!(service.current_exact(), total, "round {round}: the service");
}

/// Runs the workload; panics at the first disagreement.
pub fn run(cfg: &Config) -> Report {
    let service = Tenant::new("request-stress");
    let customers: Vec<Tenant> = CUSTOMERS
        .iter()
        .map(|&(name, max)| {
            let c = service.child(name);
            c.set_max(max);
            c
        })
        .collect();
    let caches = build_caches();
    let pool = Mutex::new(Vec::with_capacity(POOL_CAP));
    let barrier = Barrier::new(cfg.threads);
    let reports: Vec<(Report, Vec<u32>)> = thread::scope(|s| {
        let workers: Vec<_> = (0..cfg.threads)
            .map(|w| {
                let (service, customers, caches, pool, barrier) =
                    (&service, &customers, &caches, &pool, &barrier);
                s.spawn(move || {
                    let _break = BreakOnPanic(barrier);
                    let mut rng =
                        Rng((cfg.seed ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(w as u64 + 1)) | 1);
                    let mut stamp = (w as u64) << 40;
                    let mut mine = Vec::with_capacity(BURST * BULK);
                    let mut ids = Vec::with_capacity(cfg.rounds * cfg.requests_per_round);
                    let mut report = Report::default();
                    for round in 0..cfg.rounds {
                        for _ in 0..cfg.requests_per_round {
                            request(
                                customers,
                                caches,
                                pool,
                                &mut mine,
                                &mut ids,
                                &mut rng,
                                &mut stamp,
                                &mut report,
                            );
                        }
                        if barrier.wait() {
                            check(service, customers, &pool.lock().unwrap(), round);
                            report.checks += 1;
                        }
                        barrier.wait();
                    }
                    (report, ids)
                })
            })
            .collect();
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in pool.lock().unwrap().drain(..) {
        free(&caches, o);
    }
    slabcg::drain_all_stocks();
    for c in &customers {
        assert_eq!(c.current_exact(), 0, "{} after the last free", c.name());
    }
    assert_eq!(service.current_exact(), 0);
    // Every request is dead and its objects are freed: none of their objcgs is left (an id
    // recycled by a later request is dead too by now).
    let mut total = Report::default();
    for (r, ids) in reports {
        for id in ids {
            assert!(
                !testing::objcg_live(id),
                "objcg {id} of a dead request still allocated"
            );
        }
        total.requests += r.requests;
        total.allocations += r.allocations;
        total.refused += r.refused;
        total.freed_from_pool += r.freed_from_pool;
        total.max_pool = total.max_pool.max(r.max_pool);
        total.checks += r.checks;
        total.request_checks += r.request_checks;
        total.bulk_frees += r.bulk_frees;
    }
    total
}
