//! Per-query tenants in a thread pool, checked against a ledger: the body of the bounded
//! `tests/churn.rs` (CI) and of the opt-in `examples/churn.rs`.
//!
//! The shape of a query engine or request server: one long-lived `service` tenant with a
//! limit and a reclaim callback, and a fresh tenant per query (a child of the service, now
//! and then a top-level one), with a small limit or none, created and dropped all the time.
//! Each worker keeps more queries open than a thread's stock has slots and works in their
//! scopes (sometimes nested in the service's): it allocates, frees, reallocates, charges and
//! uncharges Sock bytes, and hands results to a shared pool whose objects other threads free
//! long after their query ended. A query that ends may leave Sock bytes charged; they are
//! given back later through the service (or the root), which carries them from then on.
//! Workers are fresh threads every epoch (open queries move to other threads), and
//! short-lived helper threads run one query each and exit while others work and drain.
//!
//! After every epoch, once every thread that charged has exited, each open query's and the
//! service's `current()`, read **without a drain**, must equal the ledger (thread exit gave
//! every stock back), and `stat()` must add up. At the end everything is freed, the service
//! reads 0, the local `events.max` of the service and of every query add up to the
//! refusals the workers saw, and objcg ids were recycled: the largest id stays below a bound set by the
//! tenants that can be referenced at once, not by the thousands of queries created.

use std::alloc::{self, Layout};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use slabcg::{StatItem, Tenant};

#[path = "../../allocator/tests/common/mod.rs"]
mod rng;
use rng::Rng;

#[path = "stamp.rs"]
mod stamp;
use stamp::{allocate, check_stamp, restamp_resized, take_fresh};

/// How much work a run does.
#[derive(Clone, Copy)]
pub struct Config {
    pub threads: usize,
    pub epochs: usize,
    pub ops_per_epoch: usize,
    /// Queries each worker keeps open (a thread's byte stock has 7 slots).
    pub open_queries: usize,
    /// The most result objects waiting in the shared pool.
    pub pool_cap: usize,
    /// The service's limit.
    pub service_max: u64,
    pub seed: u64,
}

/// What a run did.
#[derive(Default, Debug)]
pub struct Report {
    pub queries: u64,
    pub helper_threads: u64,
    pub ops: u64,
    /// Allocations and charges refused by a limit.
    pub refused: u64,
    /// Objects the service's reclaim callback freed.
    pub reclaimed: u64,
    pub checks: u64,
    /// The largest objcg id any query got, and the bound it must stay under.
    pub max_objcg_id: u32,
    pub id_bound: u32,
}

/// Objects one query keeps before it frees instead of allocating.
const QUERY_OBJECTS: usize = 64;
/// Helper threads a worker starts per epoch, at most.
const HELPERS_PER_WORKER: usize = 8;

/// Who an object is charged to.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Owner {
    Service,
    /// A query by serial number; `top`: a top-level tenant rather than the service's child.
    Query {
        serial: u64,
        top: bool,
    },
}

#[derive(Clone, Copy)]
struct Obj {
    p: usize,
    layout: Layout,
    usable: u64,
    owner: Owner,
    stamp: u64,
}

struct Query {
    serial: u64,
    tenant: Tenant,
    top: bool,
    /// 0 = no limit of its own.
    max: u64,
    objs: Vec<Obj>,
    /// Sock bytes charged and not given back.
    sock: u64,
}

impl Query {
    fn owner(&self) -> Owner {
        Owner::Query {
            serial: self.serial,
            top: self.top,
        }
    }
}

/// What every thread of a run shares.
struct Shared {
    service: Tenant,
    pool: Mutex<Vec<Obj>>,
    pool_cap: usize,
    /// Sock bytes that ended queries left charged: [service's children, top-level ones
    /// (now the root's)]. Given back through the service or the root, by any thread.
    orphan_sock: Mutex<[u64; 2]>,
    serial: AtomicU64,
    stamps: AtomicU64,
    ops: AtomicU64,
    refused: AtomicU64,
    /// `events.max` and `events.oom` of the queries that ended, summed.
    query_max_events: AtomicU64,
    query_oom_events: AtomicU64,
    max_objcg_id: AtomicU32,
    reclaimed: AtomicU64,
    helpers: Mutex<Vec<JoinHandle<()>>>,
    helper_count: AtomicU64,
}

/// Frees `o` after checking its stamp.
fn free(o: Obj) {
    // SAFETY: o is live with o.layout, and this is its only free.
    unsafe {
        check_stamp(o.p as *const u8, o.layout.size(), o.stamp, true);
        alloc::dealloc(o.p as *mut u8, o.layout);
    }
}

/// Mostly small blocks, some of a few KiB, now and then one above the size classes.
fn random_layout(rng: &mut Rng) -> Layout {
    let r = rng.next();
    let size = match r % 100 {
        0..=59 => 1 + (r >> 8) as usize % 512,
        60..=89 => 1 + (r >> 8) as usize % 4096,
        90..=98 => 1 + (r >> 8) as usize % (64 << 10),
        _ => (128 << 10) + 1 + (r >> 8) as usize % (384 << 10),
    };
    let align = match (r >> 50) % 8 {
        0..=5 => 8,
        6 => 16,
        _ => 64,
    };
    Layout::from_size_align(size, align).unwrap()
}

impl Shared {
    fn stamp(&self) -> u64 {
        self.stamps.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A new query: a child of the service (1 in 8: a top-level tenant), with a limit of
    /// 64 KiB to 1 MiB or (1 in 3) none. Created outside any scope, as a server does.
    fn open(&self, rng: &mut Rng) -> Query {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
        let top = rng.below(8) == 0;
        let name = format!("query-{serial}");
        let tenant = if top {
            Tenant::new(&name)
        } else {
            self.service.child(&name)
        };
        let max = if rng.below(3) == 0 {
            0
        } else {
            (64 << 10) + rng.next() % (960 << 10)
        };
        if max != 0 {
            tenant.set_max(max);
            tenant.set_high(max / 2);
        }
        self.max_objcg_id
            .fetch_max(tenant.objcg_id(), Ordering::Relaxed);
        Query {
            serial,
            tenant,
            top,
            max,
            objs: Vec::new(),
            sock: 0,
        }
    }

    /// Ends `q`: frees some of its objects, hands the rest to the pool as results, leaves its
    /// Sock bytes charged half the time, and drops its last handle.
    fn close(&self, mut q: Query, rng: &mut Rng) {
        while let Some(o) = q.objs.pop() {
            if rng.below(2) == 0 {
                free(o);
            } else {
                self.give(o);
            }
        }
        if q.sock > 0 && rng.below(2) == 0 {
            q.tenant.uncharge(q.sock, StatItem::Sock);
            q.sock = 0;
        }
        let e = q.tenant.events_local();
        self.query_max_events.fetch_add(e.max, Ordering::Relaxed);
        self.query_oom_events.fetch_add(e.oom, Ordering::Relaxed);
        self.check_limits(&q);
        let (sock, top) = (q.sock, q.top);
        // The last handle: the query's charges (results in the pool, Sock bytes) move to its
        // parent now. Only then may other threads give those Sock bytes back through it.
        drop(q);
        if sock > 0 {
            self.orphan_sock.lock().unwrap()[top as usize] += sock;
        }
    }

    /// A result into the pool, or freed when the pool is full.
    fn give(&self, o: Obj) {
        let mut pool = self.pool.lock().unwrap();
        if pool.len() < self.pool_cap {
            pool.push(o);
        } else {
            drop(pool);
            free(o);
        }
    }

    /// Frees a result some query (probably ended, probably on another thread) left.
    fn take(&self, rng: &mut Rng) {
        let o = {
            let mut pool = self.pool.lock().unwrap();
            if pool.is_empty() {
                return;
            }
            let k = rng.below(pool.len());
            pool.swap_remove(k)
        };
        free(o);
    }

    /// Gives back some Sock bytes that ended queries left, through their new owner.
    fn give_back_orphans(&self, rng: &mut Rng) {
        let which = rng.below(2);
        let n = {
            let mut o = self.orphan_sock.lock().unwrap();
            if o[which] == 0 {
                return;
            }
            let n = 1 + rng.next() % o[which];
            o[which] -= n;
            n
        };
        if which == 0 {
            self.service.uncharge(n, StatItem::Sock);
        } else {
            Tenant::root().uncharge(n, StatItem::Sock);
        }
    }

    /// `current <= max` for the query and the service, at any moment.
    fn check_limits(&self, q: &Query) {
        if q.max != 0 {
            let c = q.tenant.current();
            assert!(
                c <= q.max,
                "query-{} at {c} over its max {}",
                q.serial,
                q.max
            );
        }
        let (c, max) = (self.service.current(), self.service.max());
        assert!(c <= max, "service at {c} over its max {max}");
    }

    fn refused(&self, q: &Query, owner: Owner, what: &str) {
        // Only a top-level query without a limit has no limit on its path.
        assert!(
            owner == Owner::Service || q.max != 0 || !q.top,
            "{what} refused for query-{}, which no limit covers",
            q.serial
        );
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// An allocation in the query's scope (1 in 4 nested in the service's), or in the
    /// service's own scope (1 in 8).
    fn alloc(&self, q: &mut Query, rng: &mut Rng) {
        if q.objs.len() >= QUERY_OBJECTS {
            let k = rng.below(q.objs.len());
            return free(q.objs.swap_remove(k));
        }
        let layout = random_layout(rng);
        let zeroed = rng.below(8) == 0;
        let owner = if rng.below(8) == 0 {
            Owner::Service
        } else {
            q.owner()
        };
        let nested = rng.below(4) == 0;
        let p = {
            let _outer = nested.then(|| self.service.enter());
            let _scope = match owner {
                Owner::Service => self.service.enter(),
                Owner::Query { .. } => q.tenant.enter(),
            };
            allocate(layout, zeroed)
        };
        if p.is_null() {
            return self.refused(q, owner, "allocation");
        }
        let stamp = self.stamp();
        // SAFETY: allocate just returned p (non-null) for layout.
        let usable = unsafe { take_fresh(p, layout, zeroed, stamp) };
        q.objs.push(Obj {
            p: p as usize,
            layout,
            usable,
            owner,
            stamp,
        });
    }

    /// Resizes one of the query's objects in its owner's scope, so the owner stays the same
    /// whether the block moves or not.
    fn realloc(&self, q: &mut Query, rng: &mut Rng) {
        if q.objs.is_empty() {
            return;
        }
        let k = rng.below(q.objs.len());
        let o = q.objs[k];
        let new_size = random_layout(rng).size();
        let p = {
            let _scope = match o.owner {
                Owner::Service => self.service.enter(),
                Owner::Query { .. } => q.tenant.enter(),
            };
            // SAFETY: o is live with o.layout; new_size is non-zero and fits the alignment.
            unsafe { alloc::realloc(o.p as *mut u8, o.layout, new_size) }
        };
        if p.is_null() {
            // The block is untouched.
            return self.refused(q, o.owner, "realloc");
        }
        let stamp = self.stamp();
        // SAFETY: realloc returned p with new_size bytes.
        let (layout, usable) = unsafe { restamp_resized(p, o.layout, o.stamp, new_size, stamp) };
        q.objs[k] = Obj {
            p: p as usize,
            layout,
            usable,
            owner: o.owner,
            stamp,
        };
    }

    /// Charges or gives back Sock bytes of the query (1 byte to 16 KiB).
    fn sock(&self, q: &mut Query, rng: &mut Rng) {
        if q.sock > 0 && rng.below(2) == 0 {
            let n = 1 + rng.next() % q.sock;
            q.tenant.uncharge(n, StatItem::Sock);
            q.sock -= n;
            return;
        }
        let n = 1 + rng.next() % (16 << 10);
        match q.tenant.charge(n, StatItem::Sock) {
            Ok(()) => q.sock += n,
            Err(e) => {
                assert!(
                    (e.tenant == q.tenant.name() && q.max != 0)
                        || (e.tenant == "service" && !q.top),
                    "{e} for query-{}: not a limited ancestor",
                    q.serial
                );
                self.refused(q, q.owner(), "sock charge");
            }
        }
    }

    /// A helper thread: one query from start to end, then exit (its stocks go back with it).
    fn spawn_helper(self: &Arc<Self>, seed: u64) {
        let shared = self.clone();
        let h = thread::spawn(move || {
            let mut rng = Rng(seed | 1);
            let mut q = shared.open(&mut rng);
            for _ in 0..50 + rng.below(200) {
                match rng.below(10) {
                    0..=5 => shared.alloc(&mut q, &mut rng),
                    6 => shared.sock(&mut q, &mut rng),
                    7 => shared.take(&mut rng),
                    _ => {
                        if let Some(o) = q.objs.pop() {
                            shared.give(o);
                        }
                    }
                }
                shared.ops.fetch_add(1, Ordering::Relaxed);
            }
            shared.close(q, &mut rng);
        });
        self.helpers.lock().unwrap().push(h);
        self.helper_count.fetch_add(1, Ordering::Relaxed);
    }

    /// One worker thread's epoch over its share of the open queries.
    fn work(self: &Arc<Self>, cfg: &Config, queries: &mut Vec<Query>, rng: &mut Rng) {
        let mut helpers = 0;
        for _ in 0..cfg.ops_per_epoch {
            if queries.is_empty() || (queries.len() < cfg.open_queries && rng.below(8) == 0) {
                queries.push(self.open(rng));
            }
            let i = rng.below(queries.len());
            let q = &mut queries[i];
            match rng.below(100) {
                0..=39 => self.alloc(q, rng),
                40..=59 => {
                    if !q.objs.is_empty() {
                        let k = rng.below(q.objs.len());
                        free(q.objs.swap_remove(k));
                    }
                }
                60..=64 => self.realloc(q, rng),
                65..=74 => self.sock(q, rng),
                75..=81 => {
                    if let Some(o) = q.objs.pop() {
                        self.give(o);
                    }
                }
                82..=89 => self.take(rng),
                90..=91 => self.give_back_orphans(rng),
                92..=97 => {
                    let q = queries.swap_remove(i);
                    self.close(q, rng);
                }
                _ => {
                    if helpers < HELPERS_PER_WORKER && rng.below(16) == 0 {
                        helpers += 1;
                        self.spawn_helper(rng.next());
                    }
                }
            }
            if let Some(q) = queries.get(i) {
                self.check_limits(q);
            }
            self.ops.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Every open query and the service against the ledger, with every thread that charged
/// them gone: `current()` must be exact without a drain.
fn check(shared: &Shared, open: &[Query], epoch: usize) {
    let pool = shared.pool.lock().unwrap();
    let objs = || open.iter().flat_map(|q| q.objs.iter()).chain(pool.iter());
    let is_large = |o: &&Obj| o.usable > 128 << 10;
    for q in open {
        let mine = |o: &&Obj| o.owner == q.owner();
        let objects: u64 = objs().filter(mine).map(|o| o.usable).sum();
        let large: u64 = objs().filter(mine).filter(is_large).map(|o| o.usable).sum();
        let name = q.tenant.name();
        let current = q.tenant.current();
        assert_eq!(
            current,
            objects + q.sock,
            "epoch {epoch}: {name} against the ledger, read without a drain after every \
             thread that charged it exited"
        );
        let stat = q.tenant.stat();
        assert_eq!(stat.current, current, "epoch {epoch}: {name} stat.current");
        assert_eq!(stat.sock, q.sock, "epoch {epoch}: {name} stat.sock");
        assert_eq!(stat.large, large, "epoch {epoch}: {name} stat.large");
        assert_eq!(
            stat.slab + stat.large + stat.sock,
            current,
            "epoch {epoch}: {name}: slab + large + sock\n{stat}"
        );
        if q.max != 0 {
            assert!(stat.peak <= q.max, "epoch {epoch}: {name}: peak over max");
        }
    }
    let orphans = *shared.orphan_sock.lock().unwrap();
    let service_owned = |o: &&Obj| !matches!(o.owner, Owner::Query { top: true, .. });
    let objects: u64 = objs().filter(service_owned).map(|o| o.usable).sum();
    let sock: u64 = open.iter().filter(|q| !q.top).map(|q| q.sock).sum::<u64>() + orphans[0];
    let s = &shared.service;
    assert_eq!(
        s.current(),
        objects + sock,
        "epoch {epoch}: service against the ledger, read without a drain"
    );
    let stat = s.stat();
    assert_eq!(stat.sock, sock, "epoch {epoch}: service stat.sock");
    assert_eq!(
        stat.slab + stat.large + stat.sock,
        stat.current,
        "epoch {epoch}: service: slab + large + sock\n{stat}"
    );
    assert!(stat.peak <= s.max(), "epoch {epoch}: service peak over max");
    // Only this workload charges Sock in its process; top-level queries' leftovers are the
    // root's.
    let all = open.iter().map(|q| q.sock).sum::<u64>() + orphans[0] + orphans[1];
    assert_eq!(
        Tenant::root().stat().sock,
        all,
        "epoch {epoch}: root stat.sock"
    );
}

/// Runs the workload; panics on the first disagreement.
pub fn run(cfg: &Config) -> Report {
    stamp::abort_on_panic();
    let service = Tenant::new("service");
    service.set_max(cfg.service_max);
    service.set_high(cfg.service_max / 2);
    let shared = Arc::new(Shared {
        service,
        pool: Mutex::new(Vec::with_capacity(cfg.pool_cap)),
        pool_cap: cfg.pool_cap,
        orphan_sock: Mutex::new([0; 2]),
        serial: AtomicU64::new(0),
        stamps: AtomicU64::new(0),
        ops: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        query_max_events: AtomicU64::new(0),
        query_oom_events: AtomicU64::new(0),
        max_objcg_id: AtomicU32::new(0),
        reclaimed: AtomicU64::new(0),
        helpers: Mutex::new(Vec::new()),
        helper_count: AtomicU64::new(0),
    });
    // Before the service's charges fail, free up to 4 results charged to it (or to a query
    // under it). It runs in the refusing thread, in some scope: it allocates nothing.
    {
        let weak = Arc::downgrade(&shared);
        shared.service.set_reclaim(move |_, _| {
            let Some(shared) = weak.upgrade() else { return };
            let mut taken: [Option<Obj>; 4] = [None; 4];
            let mut n = 0;
            {
                let mut pool = shared.pool.lock().unwrap();
                let mut i = 0;
                while i < pool.len() && n < taken.len() {
                    if matches!(pool[i].owner, Owner::Query { top: true, .. }) {
                        i += 1;
                    } else {
                        taken[n] = Some(pool.swap_remove(i));
                        n += 1;
                    }
                }
            }
            for o in taken.into_iter().flatten() {
                free(o);
            }
            shared.reclaimed.fetch_add(n as u64, Ordering::Relaxed);
        });
    }
    let mut rng = Rng(cfg.seed | 1);
    let mut open: Vec<Query> = Vec::new();
    let mut checks = 0;
    for epoch in 0..cfg.epochs {
        // Fresh threads every epoch; each open query goes to one of them at random.
        let mut shares: Vec<Vec<Query>> = (0..cfg.threads).map(|_| Vec::new()).collect();
        for q in open.drain(..) {
            shares[rng.below(cfg.threads)].push(q);
        }
        let workers: Vec<_> = shares
            .into_iter()
            .map(|mut queries| {
                let (shared, cfg, seed) = (shared.clone(), *cfg, rng.next());
                thread::spawn(move || {
                    let mut rng = Rng(seed | 1);
                    shared.work(&cfg, &mut queries, &mut rng);
                    queries
                })
            })
            .collect();
        // Drain and trim while they work, as a monitoring thread would.
        let mut spins = 0u64;
        while !workers.iter().all(|w| w.is_finished()) {
            slabcg::drain_all_stocks();
            if spins.is_multiple_of(16) {
                slabcg::trim();
            }
            spins += 1;
            thread::sleep(std::time::Duration::from_micros(200));
        }
        for w in workers {
            open.extend(w.join().unwrap());
        }
        let helpers = std::mem::take(&mut *shared.helpers.lock().unwrap());
        for h in helpers {
            h.join().unwrap();
        }
        check(&shared, &open, epoch);
        checks += 1;
    }

    for q in open.drain(..) {
        shared.close(q, &mut rng);
    }
    for o in shared.pool.lock().unwrap().drain(..) {
        free(o);
    }
    let orphans = std::mem::take(&mut *shared.orphan_sock.lock().unwrap());
    shared.service.uncharge(orphans[0], StatItem::Sock);
    Tenant::root().uncharge(orphans[1], StatItem::Sock);
    assert_eq!(
        shared.service.current_exact(),
        0,
        "service after everything was freed"
    );
    assert_eq!(Tenant::root().stat().sock, 0, "root stat.sock at the end");
    let e = shared.service.events_local();
    let refused = shared.refused.load(Ordering::Relaxed);
    assert_eq!(
        e.max + shared.query_max_events.load(Ordering::Relaxed),
        refused,
        "events.max of the service and the queries against the refusals seen"
    );
    assert_eq!(
        e.oom + shared.query_oom_events.load(Ordering::Relaxed),
        refused,
        "events.oom of the service and the queries against the refusals seen"
    );
    // An estimate of the ids taken at once, not a worst case: the open queries, the ended
    // ones whose results wait in the pool, those named by the stock slots of the threads
    // alive at once (workers, their helpers, this thread), those each worker holds in its
    // batch or as zombies of its own not swept yet, a refill's batch per helper (its one
    // query from it), plus the service and a margin for other tenants of the process,
    // zombies on the shared list, forwarding entries and batches grown past a refill. Runs
    // here stay at 450-650 (on 2 loaded vCPUs); ids never recycled pass it after about as
    // many queries, and `tests/churn.rs` checks it ran four times as many at least.
    let helpers = cfg.threads * HELPERS_PER_WORKER;
    let threads = cfg.threads + helpers + 1;
    let stock_slots = slabcg::accounting::testing::stock_slots();
    let (id_refill, id_batch_cap, own_zombies) = slabcg::accounting::testing::objcg_id_batches();
    let id_bound = (cfg.threads * cfg.open_queries
        + cfg.pool_cap
        + threads * (stock_slots + 1)
        + cfg.threads * (id_batch_cap + own_zombies)
        + helpers * id_refill
        + 64) as u32;
    let max_objcg_id = shared.max_objcg_id.load(Ordering::Relaxed);
    assert!(
        max_objcg_id <= id_bound,
        "objcg id {max_objcg_id} above {id_bound}: ids of dropped queries are not recycled"
    );
    Report {
        queries: shared.serial.load(Ordering::Relaxed),
        helper_threads: shared.helper_count.load(Ordering::Relaxed),
        ops: shared.ops.load(Ordering::Relaxed),
        refused,
        reclaimed: shared.reclaimed.load(Ordering::Relaxed),
        checks,
        max_objcg_id,
        id_bound,
    }
}
