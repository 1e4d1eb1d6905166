//! A randomized multi-tenant workload checked against a ledger: the body of the bounded
//! `tests/stress.rs` (CI) and of the opt-in `examples/stress.rs` (minutes, more threads).
//!
//! Worker threads allocate (plain and zeroed, 1 byte to large, alignments up to 8 KiB, and
//! from an accounted dedicated cache, one by one and in bulk), free, reallocate, hand objects
//! to each other through a shared pool, and charge and uncharge Sock bytes, each inside a
//! random tenant's scope (sometimes nested in another's). One tenant's limit is tight, so its
//! charges fail and drain all the time; an observer thread checks `current <= max`, drains
//! every stock and trims the allocator meanwhile. Every object carries a stamp that is
//! checked when it is freed or moved, so overlapping blocks or lost copies are caught.
//!
//! Each epoch ends at a barrier where every live tenant's `current_exact()` must equal the
//! ledger of its subtree (objects and Sock bytes), and its `stat()` must add up. Between
//! epochs tenants that still own live objects are dropped: their charges move to the parent,
//! which the ledger follows. At the end everything is freed and every tenant reads 0.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use slabcg::allocator::class_for;
use slabcg::{Cache, StatItem, Tenant};

/// How much work a run does.
#[derive(Clone, Copy)]
pub struct Config {
    pub threads: usize,
    pub epochs: usize,
    pub ops_per_epoch: usize,
    /// The most objects one thread keeps live.
    pub live_cap: usize,
    /// Percent of allocations that are large (above 128 KiB).
    pub large_percent: u64,
    /// Every this many epochs (0: never), the check also runs in a child forked at the
    /// barrier, where the workers' stocks and object stocks are orphans to drain.
    pub fork_every: usize,
    pub seed: u64,
}

/// What a run did, for the opt-in runner's report.
#[derive(Default, Debug)]
pub struct Report {
    pub ops: u64,
    pub refused: u64,
    pub checks: u64,
    /// Objects the tight tenant's reclaim callback freed.
    pub reclaimed: u64,
    /// Checks that also ran in a forked child.
    pub forks: u64,
    /// `events.high` of the tight tenant (its `high` is half its `max`).
    pub high_events: u64,
}

/// One tenant of the workload's tree.
struct Node {
    name: &'static str,
    /// Index in `TREE`; parents come before their children.
    parent: Option<usize>,
    /// 0 = no limit.
    max: u64,
    /// The epoch after whose check the test drops the tenant (`usize::MAX` = never).
    dropped_after: usize,
}

const fn node(name: &'static str, parent: Option<usize>, max: u64, dropped_after: usize) -> Node {
    Node {
        name,
        parent,
        max,
        dropped_after,
    }
}

const TREE: [Node; 6] = [
    node("stress-a", None, 256 << 20, usize::MAX),
    node("stress-a1", Some(0), 0, usize::MAX),
    node("stress-a2", Some(0), 0, 0),
    node("stress-b", None, 0, usize::MAX),
    node("stress-b-tight", Some(3), 1 << 20, usize::MAX),
    node("stress-c", None, 0, 1),
];
/// The tenant with the 1 MiB limit (and a reclaim callback).
const TIGHT: usize = 4;

#[path = "../../allocator/tests/common/mod.rs"]
mod rng;
use rng::Rng;

#[path = "stamp.rs"]
mod stamp;
use stamp::{allocate, check_stamp, restamp_resized, take_fresh, write_stamp};

/// The accounted dedicated cache (one per process, outliving every run's objects).
fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| {
        Cache::builder("stress", Layout::from_size_align(200, 8).unwrap())
            .account(true)
            .build()
    })
}

#[derive(Clone, Copy)]
struct Obj {
    p: usize,
    /// For a dedicated-cache object, the cache's layout.
    layout: Layout,
    /// From `cache()` rather than the global allocator.
    cached: bool,
    usable: u64,
    /// Index in `TREE` of the tenant charged.
    t: usize,
    stamp: u64,
}

/// Whether tenant `t`'s charges count in tenant `i`'s `current` (t is in i's subtree).
fn in_subtree(mut t: usize, i: usize) -> bool {
    loop {
        if t == i {
            return true;
        }
        match TREE[t].parent {
            Some(parent) => t = parent,
            None => return false,
        }
    }
}

/// Whether a charge to `t` may be refused: some tenant on its path to the root has a `max`.
fn limited(t: usize) -> bool {
    (0..TREE.len()).any(|i| TREE[i].max != 0 && in_subtree(t, i))
}

fn random_layout(rng: &mut Rng, large_percent: u64) -> Layout {
    let r = rng.next();
    let size = if r % 100 < large_percent {
        (128 << 10) + 1 + (r >> 8) as usize % (512 << 10)
    } else {
        match r % 10 {
            0..=5 => 1 + (r >> 8) as usize % 256,
            6..=8 => 1 + (r >> 8) as usize % 8192,
            _ => 1 + (r >> 8) as usize % (128 << 10),
        }
    };
    // Mostly the alignments Rust types have; now and then one above a page.
    let align = match (r >> 50) % 16 {
        0..=9 => 8,
        10 => 1,
        11 => 16,
        12 => 64,
        13 => 256,
        14 => 4096,
        _ => 8192,
    };
    Layout::from_size_align(size, align).unwrap()
}

/// One worker thread's state.
struct Worker {
    id: u64,
    rng: Rng,
    live: Vec<Obj>,
    /// Sock bytes this thread charged and has not uncharged, per tenant.
    sock: [u64; TREE.len()],
    stamps: u64,
    report: Report,
}

impl Worker {
    fn stamp(&mut self) -> u64 {
        self.stamps += 1;
        (self.id << 48) | self.stamps
    }

    /// A random live tenant index (its handle is in `tenants`).
    fn pick(&mut self, tenants: &[Option<Tenant>]) -> usize {
        loop {
            let t = self.rng.below(tenants.len());
            if tenants[t].is_some() {
                return t;
            }
        }
    }

    fn refused(&mut self, t: usize, what: &str) {
        assert!(
            limited(t),
            "{what} refused for unlimited tenant {}",
            TREE[t].name
        );
        self.report.refused += 1;
    }

    fn alloc(&mut self, tenants: &[Option<Tenant>], large_percent: u64) {
        let t = self.pick(tenants);
        let layout = random_layout(&mut self.rng, large_percent);
        let zeroed = self.rng.below(8) == 0;
        let nested = self.rng.below(6) == 0;
        let outer = self.pick(tenants);
        let p = {
            // The inner scope wins while it lives.
            let _outer = nested.then(|| tenants[outer].as_ref().unwrap().enter());
            let _scope = tenants[t].as_ref().unwrap().enter();
            allocate(layout, zeroed)
        };
        if p.is_null() {
            return self.refused(t, "allocation");
        }
        let stamp = self.stamp();
        // SAFETY: allocate just returned p (non-null) for layout.
        let usable = unsafe { take_fresh(p, layout, zeroed, stamp) };
        self.live.push(Obj {
            p: p as usize,
            layout,
            cached: false,
            usable,
            t,
            stamp,
        });
    }

    /// Objects from the accounted dedicated cache: one, or a bulk run.
    fn alloc_cached(&mut self, tenants: &[Option<Tenant>]) {
        let t = self.pick(tenants);
        let c = cache();
        let layout = Layout::from_size_align(c.info().object_size, 8).unwrap();
        let mut got = [std::ptr::null_mut::<u8>(); 16];
        let n = 1 + self.rng.below(16);
        let k = {
            let _scope = tenants[t].as_ref().unwrap().enter();
            if n == 1 {
                match c.alloc() {
                    Some(p) => {
                        got[0] = p.as_ptr();
                        1
                    }
                    None => 0,
                }
            } else {
                c.alloc_bulk(&mut got[..n])
            }
        };
        if k == 0 {
            return self.refused(t, "cache allocation");
        }
        for &p in &got[..k] {
            assert!(!p.is_null());
            let stamp = self.stamp();
            // SAFETY: p holds object_size bytes.
            unsafe { write_stamp(p, layout.size(), stamp) };
            self.live.push(Obj {
                p: p as usize,
                layout,
                cached: true,
                usable: layout.size() as u64,
                t,
                stamp,
            });
        }
    }

    fn free_one(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let k = self.rng.below(self.live.len());
        if self.live[k].cached && self.rng.below(4) == 0 {
            return self.free_cached_bulk();
        }
        free(self.live.swap_remove(k));
    }

    /// Frees up to 16 of this thread's cache objects with one `free_bulk`.
    fn free_cached_bulk(&mut self) {
        let mut run = [std::ptr::null_mut::<u8>(); 16];
        let mut n = 0;
        let mut i = 0;
        while i < self.live.len() && n < run.len() {
            let o = self.live[i];
            if o.cached {
                // SAFETY: o is live; its stamp is checked before the bulk free below.
                unsafe { check_stamp(o.p as *const u8, o.layout.size(), o.stamp, true) };
                run[n] = o.p as *mut u8;
                n += 1;
                self.live.swap_remove(i);
            } else {
                i += 1;
            }
        }
        // SAFETY: n live objects of `cache()`, each freed once.
        unsafe { cache().free_bulk(&run[..n]) };
    }

    fn realloc(&mut self, tenants: &[Option<Tenant>], large_percent: u64) {
        if self.live.is_empty() {
            return;
        }
        let k = self.rng.below(self.live.len());
        let o = self.live[k];
        if o.cached {
            return;
        }
        // A large block goes to another large size half the time, so that in-place resizes
        // (and their charges and refusals) are common.
        let large = class_for(o.layout.size(), o.layout.align()).is_none();
        let percent = if large && self.rng.below(2) == 0 {
            100
        } else {
            large_percent
        };
        let new_size = random_layout(&mut self.rng, percent).size();
        let t = self.pick(tenants);
        let q = {
            let _scope = tenants[t].as_ref().unwrap().enter();
            // SAFETY: o is live with o.layout; new_size is non-zero and fits the alignment.
            unsafe { alloc::realloc(o.p as *mut u8, o.layout, new_size) }
        };
        // Who is charged (charge.rs): a block that stays in its size class, or a large block
        // resized in place (grown by mremap when aligned to at most a page; any shrink),
        // keeps its owner; any other move charges the caller's tenant. (A failed mremap
        // falls back to a move: on a healthy machine it does not.)
        let align = o.layout.align();
        let keeps_owner = match (
            class_for(o.layout.size(), align),
            class_for(new_size, align),
        ) {
            (Some(a), Some(b)) => a == b,
            (None, None) => align <= 4096 || new_size <= o.layout.size(),
            _ => false,
        };
        if q.is_null() {
            // The block is untouched. In place, only its owner's limit can refuse the growth;
            // a move is refused by the caller's.
            let payer = if keeps_owner { o.t } else { t };
            return self.refused(payer, "realloc");
        }
        let stamp = self.stamp();
        // SAFETY: realloc returned q with new_size bytes.
        let (layout, usable) = unsafe { restamp_resized(q, o.layout, o.stamp, new_size, stamp) };
        self.live[k] = Obj {
            p: q as usize,
            layout,
            cached: false,
            usable,
            t: if keeps_owner { o.t } else { t },
            stamp,
        };
    }

    fn sock(&mut self, tenants: &[Option<Tenant>]) {
        let t = self.pick(tenants);
        let tenant = tenants[t].as_ref().unwrap();
        if self.sock[t] > 0 && self.rng.below(2) == 0 {
            let n = 1 + self.rng.next() % self.sock[t];
            tenant.uncharge(n, StatItem::Sock);
            self.sock[t] -= n;
        } else {
            let n = 1 + self.rng.next() % (64 << 10);
            match tenant.charge(n, StatItem::Sock) {
                Ok(()) => self.sock[t] += n,
                Err(e) => {
                    let by = TREE.iter().position(|x| x.name == e.tenant);
                    assert!(
                        by.is_some_and(|i| TREE[i].max != 0 && in_subtree(t, i)),
                        "{e} for {}: not a limited ancestor",
                        TREE[t].name
                    );
                    self.refused(t, "sock charge");
                }
            }
        }
    }

    /// Gives an object to the shared pool, or takes one (the taker frees it later: a
    /// cross-thread free that must uncharge the owner).
    fn trade(&mut self, pool: &Mutex<Vec<Obj>>) {
        let mut pool = pool.lock().unwrap();
        if self.rng.below(2) == 0 && !self.live.is_empty() {
            let k = self.rng.below(self.live.len());
            pool.push(self.live.swap_remove(k));
        } else if let Some(o) = pool.pop() {
            self.live.push(o);
        }
    }

    fn epoch(&mut self, cfg: &Config, tenants: &[Option<Tenant>], pool: &Mutex<Vec<Obj>>) {
        for _ in 0..cfg.ops_per_epoch {
            match self.rng.below(100) {
                0..=34 => self.alloc(tenants, cfg.large_percent),
                35..=39 => self.alloc_cached(tenants),
                40..=64 => self.free_one(),
                65..=74 => self.realloc(tenants, cfg.large_percent),
                75..=84 => self.trade(pool),
                _ => self.sock(tenants),
            }
            while self.live.len() > cfg.live_cap {
                self.free_one();
            }
            self.report.ops += 1;
        }
    }
}

fn free(o: Obj) {
    // SAFETY: o is live with o.layout (from the cache when `cached`), and this is its only
    // free.
    unsafe {
        check_stamp(o.p as *const u8, o.layout.size(), o.stamp, true);
        if o.cached {
            cache().free(NonNull::new_unchecked(o.p as *mut u8));
        } else {
            alloc::dealloc(o.p as *mut u8, o.layout);
        }
    }
}

/// What the workers publish at the end of an epoch.
#[derive(Default)]
struct Ledger {
    objects: Vec<Obj>,
    sock: [u64; TREE.len()],
}

/// Checks every live tenant against the ledger (all workers at the barrier).
fn check(tenants: &[Option<Tenant>], ledger: &Ledger, epoch: usize) {
    // The allocator's own equations (slab free counts, bin counts, object-stock sums), walked
    // while the workers wait at the barrier.
    slabcg::allocator::testing::check_invariants();
    for (i, tenant) in tenants.iter().enumerate() {
        let Some(tenant) = tenant else { continue };
        let objects: u64 = ledger
            .objects
            .iter()
            .filter(|o| in_subtree(o.t, i))
            .map(|o| o.usable)
            .sum();
        let sock: u64 = (0..TREE.len())
            .filter(|&t| in_subtree(t, i))
            .map(|t| ledger.sock[t])
            .sum();
        let large: u64 = ledger
            .objects
            .iter()
            .filter(|o| in_subtree(o.t, i) && !o.cached)
            .filter(|o| class_for(o.layout.size(), o.layout.align()).is_none())
            .map(|o| o.usable)
            .sum();
        let name = TREE[i].name;
        if i == TIGHT {
            // No spurious failure: the idle workers' stocks hold bytes pre-charged to this
            // tenant, yet everything up to its max must still be chargeable (draining them).
            let room = TREE[i].max - (objects + sock);
            if room > 0 {
                tenant
                    .charge(room, StatItem::Sock)
                    .unwrap_or_else(|e| panic!("epoch {epoch}: {e} with {room} bytes of room"));
                tenant.uncharge(room, StatItem::Sock);
            }
        }
        let current = tenant.current_exact();
        assert_eq!(
            current,
            objects + sock,
            "epoch {epoch}: {name} against the ledger"
        );
        let stat = tenant.stat();
        assert_eq!(stat.current, current, "epoch {epoch}: {name} stat.current");
        assert_eq!(stat.sock, sock, "epoch {epoch}: {name} stat.sock");
        assert_eq!(
            stat.slab + stat.large + stat.sock,
            current,
            "epoch {epoch}: {name}: slab + large + sock\n{stat}"
        );
        assert_eq!(stat.large, large, "epoch {epoch}: {name} stat.large");
        assert!(stat.peak >= current, "epoch {epoch}: {name}: peak");
        if TREE[i].max != 0 {
            assert!(current <= TREE[i].max, "epoch {epoch}: {name} over its max");
            assert!(
                stat.peak <= TREE[i].max,
                "epoch {epoch}: {name}: peak over max"
            );
        }
    }
    // Only this workload charges Sock in its process, and a dropped top-level tenant's
    // charges move to the root: the root's Sock is the whole ledger's.
    let all: u64 = ledger.sock.iter().sum();
    assert_eq!(
        Tenant::root().stat().sock,
        all,
        "epoch {epoch}: root stat.sock"
    );
}

/// Forks while the workers wait at the barrier (the observer may be draining or trimming),
/// and runs `check` in the child, whose only thread must drain the other threads' orphaned
/// stocks to match the ledger. Panics unless the child exits cleanly.
fn check_in_child(table: &Mutex<Vec<Option<Tenant>>>, ledger: &Ledger, epoch: usize) {
    // SAFETY: the child only runs `check` (which allocates through slabcg, whose fork
    // handlers leave it usable, and takes `table`, which no thread holds now) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // A child that hangs is killed, which fails the parent's check below.
        // SAFETY: plain libc call in the child.
        unsafe { libc::alarm(60) };
        check(&table.lock().unwrap(), ledger, epoch);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "epoch {epoch}: the check failed in a forked child (status {status:#x})"
    );
}

/// Runs the workload; panics (naming the epoch and tenant) on the first disagreement.
pub fn run(cfg: &Config) -> Report {
    stamp::abort_on_panic();
    let mut handles: Vec<Option<Tenant>> = Vec::new();
    for n in &TREE {
        let t = match n.parent {
            Some(p) => handles[p].as_ref().unwrap().child(n.name),
            None => Tenant::new(n.name),
        };
        if n.max != 0 {
            t.set_max(n.max);
            t.set_high(n.max / 2);
        }
        handles.push(Some(t));
    }
    let pool: Arc<Mutex<Vec<Obj>>> = Arc::new(Mutex::new(Vec::new()));
    // Before the tight tenant's charges fail, its callback frees up to 4 of its objects
    // waiting in the pool (the ledger reads the pool at each barrier, so it follows). It runs
    // in that tenant's scope, where an allocation could itself be refused: it allocates
    // nothing.
    let reclaimed = Arc::new(AtomicU64::new(0));
    {
        let (pool, reclaimed) = (pool.clone(), reclaimed.clone());
        handles[TIGHT].as_ref().unwrap().set_reclaim(move |_, _| {
            let mut taken: [Option<Obj>; 4] = [None; 4];
            let mut n = 0;
            {
                let mut p = pool.lock().unwrap();
                let mut i = 0;
                while i < p.len() && n < taken.len() {
                    if p[i].t == TIGHT {
                        taken[n] = Some(p.swap_remove(i));
                        n += 1;
                    } else {
                        i += 1;
                    }
                }
            }
            for o in taken.into_iter().flatten() {
                free(o);
            }
            reclaimed.fetch_add(n as u64, Ordering::Relaxed);
        });
    }
    let table = Arc::new(Mutex::new(handles));
    let published: Arc<Mutex<Ledger>> = Arc::default();
    // Workers and this thread meet twice per epoch: once when the ledgers are published, once
    // when the check is done.
    let barrier = Arc::new(Barrier::new(cfg.threads + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let observed = Arc::new(AtomicU64::new(0));

    let observer = {
        let (table, stop, observed) = (table.clone(), stop.clone(), observed.clone());
        thread::spawn(move || {
            let limited: Vec<(Tenant, u64)> = table
                .lock()
                .unwrap()
                .iter()
                .zip(&TREE)
                .filter(|(_, n)| n.max != 0)
                .map(|(t, n)| (t.clone().unwrap(), n.max))
                .collect();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (t, max) in &limited {
                    let current = t.current();
                    assert!(current <= *max, "{} at {current} over max {max}", t.name());
                }
                n += 1;
                if n.is_multiple_of(64) {
                    slabcg::drain_all_stocks();
                }
                if n.is_multiple_of(256) {
                    slabcg::trim();
                }
                thread::sleep(Duration::from_micros(50));
            }
            observed.store(n, Ordering::Relaxed);
        })
    };

    let workers: Vec<_> = (0..cfg.threads)
        .map(|i| {
            let (table, pool, published, barrier) = (
                table.clone(),
                pool.clone(),
                published.clone(),
                barrier.clone(),
            );
            let cfg = *cfg;
            thread::spawn(move || {
                let mut w = Worker {
                    id: i as u64 + 1,
                    rng: Rng(cfg.seed ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)),
                    live: Vec::with_capacity(cfg.live_cap + 1),
                    sock: [0; TREE.len()],
                    stamps: 0,
                    report: Report::default(),
                };
                for _ in 0..cfg.epochs {
                    // Handles only for the epoch: a dropped tenant's last handle must go.
                    let tenants = table.lock().unwrap().clone();
                    w.epoch(&cfg, &tenants, &pool);
                    drop(tenants);
                    {
                        let mut l = published.lock().unwrap();
                        l.objects.extend_from_slice(&w.live);
                        for (s, mine) in l.sock.iter_mut().zip(w.sock) {
                            *s += mine;
                        }
                    }
                    barrier.wait();
                    barrier.wait();
                }
                (w.live, w.sock, w.report)
            })
        })
        .collect();

    let (mut checks, mut forks) = (0, 0);
    for epoch in 0..cfg.epochs {
        barrier.wait();
        {
            let mut l = published.lock().unwrap();
            l.objects.extend_from_slice(&pool.lock().unwrap());
            check(&table.lock().unwrap(), &l, epoch);
            if cfg.fork_every != 0 && epoch % cfg.fork_every == cfg.fork_every - 1 {
                check_in_child(&table, &l, epoch);
                forks += 1;
            }
            *l = Ledger::default();
            checks += 1;
        }
        // Drop the tenants due now: their live objects (in the workers' ledgers) move to the
        // parent, which the next check sees through `in_subtree`.
        let mut t = table.lock().unwrap();
        for (i, entry) in t.iter_mut().enumerate() {
            if TREE[i].dropped_after == epoch {
                *entry = None;
            }
        }
        drop(t);
        barrier.wait();
    }

    let mut report = Report {
        checks,
        forks,
        reclaimed: reclaimed.load(Ordering::Relaxed),
        ..Report::default()
    };
    let mut sock = [0u64; TREE.len()];
    for w in workers {
        let (live, s, r) = w.join().unwrap();
        for o in live {
            free(o);
        }
        for (total, mine) in sock.iter_mut().zip(s) {
            *total += mine;
        }
        report.ops += r.ops;
        report.refused += r.refused;
    }
    for o in pool.lock().unwrap().drain(..) {
        free(o);
    }
    stop.store(true, Ordering::Relaxed);
    observer.join().unwrap();
    assert!(observed.load(Ordering::Relaxed) > 0);
    let tenants = table.lock().unwrap().clone();
    // Uncharge the Sock bytes still out, each from the tenant it was charged to (dropped
    // tenants' go through their parent, which holds them after reparenting).
    for (t, &n) in sock.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let mut owner = t;
        while tenants[owner].is_none() {
            match TREE[owner].parent {
                Some(parent) => owner = parent,
                None => break,
            }
        }
        // A dropped top-level tenant's charges went to the root.
        match &tenants[owner] {
            Some(tenant) => tenant.uncharge(n, StatItem::Sock),
            None => Tenant::root().uncharge(n, StatItem::Sock),
        }
    }
    for (i, tenant) in tenants.iter().enumerate() {
        if let Some(tenant) = tenant {
            assert_eq!(
                tenant.current_exact(),
                0,
                "{} after everything was freed",
                TREE[i].name
            );
        }
    }
    // Every refusal the workers saw was one charge refused by a limit, counted once on the
    // refusing tenant (the limited ones are never dropped).
    let (mut max_events, mut oom_events) = (0, 0);
    for (i, tenant) in tenants.iter().enumerate() {
        if TREE[i].max != 0 {
            let e = tenant
                .as_ref()
                .expect("limited tenants stay")
                .events_local();
            max_events += e.max;
            oom_events += e.oom;
        }
    }
    assert_eq!(
        max_events, report.refused,
        "events.max against the refusals seen"
    );
    assert_eq!(
        oom_events, report.refused,
        "events.oom against the refusals seen"
    );
    report.high_events = tenants[TIGHT].as_ref().unwrap().events().high;
    report
}
