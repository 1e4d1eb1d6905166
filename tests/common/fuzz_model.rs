//! The action interpreter and shadow model of the fuzz target (`fuzz/fuzz_targets/model.rs`)
//! and of its bounded replay (`tests/fuzz_replay.rs`): one file, compiled by both.
//!
//! [`run`] decodes bytes into actions (allocate, free, reallocate, the size classes' and a
//! dedicated cache's bulk calls, a `TenantAlloc`, enter and leave scopes, create and drop
//! tenants, limits and OOM policy, kill, reclaim callbacks, Sock charges, drain, trim, a
//! quiescent check) and runs them on one thread against a model that predicts:
//! - every live block's contents (a stamp, checked at free and realloc), alignment and usable
//!   size, and which tenant it is charged to (the scope's, a realloc's rules, reparenting);
//! - whether each charge is refused: with every tenant on the charged path under
//!   `OomPolicy::Fail` (never `Kill`), exactly when some ancestor's `max` is below its ledger
//!   plus the charge, after the lowest such ancestor's reclaim callback ran (which must run
//!   then, once, with the bytes asked, and never otherwise); a refusal leaves the ledger as it
//!   was and counts `events.max` / `events.oom` on the refusing tenant. With `Kill` on the
//!   path only the bounds are checked: a success stays within `max + overdraft`, a refusal
//!   happens only above `max`, a kill only marks tenants (never un-marks);
//! - at each `Check` action and at the end, every tenant's `current_exact()`, `stat()` and
//!   (in runs without `Kill`) `events_local()` against the model's ledger.
//!
//! Everything runs on the calling thread; the model's own bookkeeping never allocates inside
//! a tenant's scope (its vectors are reserved up front, and the rest runs under
//! `hooks::unscoped`), so the ledger is exact. Each run creates its own tenants and frees
//! everything it allocated, so runs are independent (libFuzzer calls it millions of times in
//! one process).

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

use slabcg::accounting::hooks;
use slabcg::allocator::class_for;
use slabcg::allocator_api2::alloc::Allocator;
use slabcg::{Cache, OomPolicy, ScopeGuard, StatItem, Tenant, TenantAlloc};

#[allow(dead_code)] // the includers use a part each
#[path = "stamp.rs"]
mod stamp;
use stamp::{check_stamp, expected_usable, restamp_resized, take_fresh, write_stamp};

/// What one run did.
#[derive(Default, Debug, Clone, Copy)]
pub struct Stats {
    /// Actions decoded and run.
    pub actions: u64,
    /// Charges a limit refused (as the model predicted).
    pub refused: u64,
    /// Reclaim callbacks that ran.
    pub reclaims: u64,
    /// Quiescent checks of every tenant against the ledger.
    pub checks: u64,
}

/// The most tenants one run creates, the most live blocks and pooled blocks it keeps.
const MAX_NODES: usize = 12;
const MAX_LIVE: usize = 1024;
const MAX_POOL: usize = 256;
/// Largest bulk call.
const MAX_BULK: usize = 48;
/// Blocks a reclaim callback frees at most.
const RECLAIM_BATCH: usize = 4;
const NAMES: [&str; MAX_NODES] = [
    "fz0", "fz1", "fz2", "fz3", "fz4", "fz5", "fz6", "fz7", "fz8", "fz9", "fz10", "fz11",
];
/// `OomState`'s default overdraft cap.
const DEFAULT_OVERDRAFT_CAP: u64 = 64 << 20;

/// The dedicated caches (process-wide: a cache outlives every run's objects).
fn caches() -> &'static [Cache; 2] {
    static CACHES: OnceLock<[Cache; 2]> = OnceLock::new();
    CACHES.get_or_init(|| {
        let _root = hooks::unscoped();
        [
            Cache::builder("fuzz-200", Layout::from_size_align(200, 8).unwrap())
                .account(true)
                .build(),
            // Seed 004's odd-sized struct, cache-line aligned.
            Cache::builder("fuzz-2312", Layout::from_size_align(2312, 8).unwrap())
                .hwcache_align(true)
                .account(true)
                .build(),
        ]
    })
}

/// Where a block came from (and how it must be freed).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Source {
    /// The global allocator (also a `TenantAlloc`'s, freed the same way).
    Global,
    /// Dedicated cache `caches()[i]`.
    Cache(usize),
}

#[derive(Clone, Copy, Debug)]
struct Obj {
    p: usize,
    layout: Layout,
    src: Source,
    usable: u64,
    /// The tenant (node index) charged; None: the root (unscoped).
    owner: Option<usize>,
    stamp: u64,
}

impl Obj {
    fn large(&self) -> bool {
        self.src == Source::Global && class_for(self.layout.size(), self.layout.align()).is_none()
    }
}

/// The model's own code runs in the root scope: its allocations (and a failed assertion's
/// message) must be neither charged to the tenant of the scope an action entered nor
/// refused by its limit. This guard, innermost on the thread's scope stack, holds that root
/// scope; [`exposed`] lifts it while an action under test runs in the entered scopes.
type RootScope = Option<Box<dyn std::any::Any>>;

/// Runs `f` in the scopes the actions entered (`root` lifted meanwhile).
fn exposed<R>(root: &mut RootScope, f: impl FnOnce() -> R) -> R {
    *root = None;
    let r = f();
    *root = Some(Box::new(hooks::unscoped()));
    r
}

/// Frees `o`, in the entered scopes, after checking its stamp.
fn free_obj(root: &mut RootScope, o: &Obj) {
    // SAFETY: o is live with o.layout (from its source), freed once (the model removed it).
    unsafe { check_stamp(o.p as *const u8, o.layout.size(), o.stamp, true) };
    // SAFETY: as above.
    exposed(root, || unsafe { free_raw(o) });
}

/// Frees `o` without a check.
///
/// # Safety
/// `o` must be live, and not used again.
unsafe fn free_raw(o: &Obj) {
    // SAFETY: caller's contract.
    unsafe {
        match o.src {
            Source::Global => alloc::dealloc(o.p as *mut u8, o.layout),
            Source::Cache(i) => caches()[i].free(NonNull::new_unchecked(o.p as *mut u8)),
        }
    }
}

/// Whether `o` still holds its stamp (no panic: reclaim callbacks' panics are swallowed).
///
/// # Safety
/// `o` must be live.
unsafe fn intact(o: &Obj) -> bool {
    let size = o.layout.size();
    let bytes = o.stamp.to_le_bytes();
    let n = size.min(8);
    // SAFETY: o holds size >= n bytes.
    let prefix = unsafe { std::slice::from_raw_parts(o.p as *const u8, n) };
    prefix == &bytes[..n]
}

/// One reclaim callback's run, as it logged it.
#[derive(Clone, Copy)]
struct Reclaimed {
    /// The node whose callback ran.
    who: usize,
    bytes: u64,
    /// Bytes it freed per owner (node index; root-owned blocks are not counted).
    freed: [(Option<usize>, u64, bool); RECLAIM_BATCH],
    n: usize,
    /// A freed block had lost its stamp.
    corrupt: bool,
}

/// What the reclaim callbacks share with the model: blocks handed over for reclaim and the
/// callbacks' log. Locked only outside the allocator's calls (the callbacks run inside them).
struct Pool {
    objs: Vec<Obj>,
    log: Vec<Reclaimed>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    Fail,
    Kill,
}

/// One tenant of the run, as the model sees it.
struct Node {
    parent: Option<usize>,
    /// The run's handle (None once dropped).
    handle: Option<Tenant>,
    /// Scopes of it on the scope stack.
    scopes: u32,
    max: u64,
    policy: Policy,
    /// Ever had `OomPolicy::Kill` (an overdraft window may be open).
    ever_kill: bool,
    overdraft: Option<u64>,
    /// Killed (by `kill`, or seen killed by the OOM killer).
    killed: bool,
    reclaim: bool,
    /// `max` was set below the ledger, and no drain has found the usage back under it
    /// since: until one does, blocks freed in the tenant's scope can stay charged in the
    /// thread's object stock (usage above `max`) and an allocation can take them back
    /// without a charge, so a charge above `max` may pass (the usage does not grow).
    over: bool,
    /// Direct charges: blocks and Sock bytes charged to this node itself.
    objects: u64,
    large: u64,
    sock: u64,
    /// `events_local()` max and oom expected.
    ev_max: u64,
    ev_oom: u64,
}

impl Node {
    fn overdraft_bytes(&self) -> u64 {
        self.overdraft
            .unwrap_or(self.max.min(DEFAULT_OVERDRAFT_CAP))
    }
}

/// What the model says about a charge of `bytes` to a node before it is made.
#[derive(Clone, Copy, Debug)]
struct Prediction {
    /// No tenant on the path ever had `Kill`: the outcome is exact.
    strict: bool,
    /// The lowest node whose `max` the charge would pass (None: it fits).
    refuser: Option<usize>,
    /// A node whose `max` the charge would pass is `over` its max: it may pass anyway.
    uncertain: bool,
    /// It stays within `max + overdraft` (Kill nodes) or `max` (others) everywhere.
    within_bounds: bool,
}

/// Reads the action stream.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn u8(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
    /// A block size: mostly small, some of a few KiB, now and then large.
    fn size(&mut self) -> Option<usize> {
        let cat = self.u8()?;
        let v = self.u16()? as usize;
        Some(match cat {
            0..=159 => 1 + v % 256,
            160..=219 => 1 + v % 8192,
            220..=249 => 1 + (v * 2) % (128 << 10),
            _ => (128 << 10) + 1 + v * 16,
        })
    }
    fn align(&mut self) -> Option<usize> {
        Some(match self.u8()? {
            0..=179 => 8,
            180..=199 => 1,
            200..=219 => 16,
            220..=234 => 64,
            235..=244 => 256,
            245..=251 => 4096,
            252..=254 => 8192,
            _ => 65536,
        })
    }
}

/// The interpreter's state for one run.
struct Model {
    nodes: Vec<Node>,
    live: Vec<Obj>,
    pool: Arc<Mutex<Pool>>,
    /// Entered scopes, innermost last, with their node.
    scopes: Vec<(ScopeGuard, usize)>,
    stamps: u64,
    root: RootScope,
    /// Some tenant ever had `Kill`: events are not predicted exactly.
    any_kill: bool,
    /// Sock bytes left charged to tenants dropped meanwhile, given back through the root at
    /// the end.
    orphan_sock: u64,
    stats: Stats,
}

/// Runs the actions `data` encodes against the model; panics at the first disagreement.
pub fn run(data: &[u8]) -> Stats {
    let root: RootScope = Some(Box::new(hooks::unscoped()));
    caches();
    let mut m = {
        Model {
            nodes: Vec::with_capacity(MAX_NODES),
            live: Vec::with_capacity(MAX_LIVE + MAX_BULK + 1),
            pool: Arc::new(Mutex::new(Pool {
                objs: Vec::with_capacity(MAX_POOL),
                log: Vec::with_capacity(4),
            })),
            scopes: Vec::with_capacity(64),
            stamps: 0,
            root,
            any_kill: false,
            orphan_sock: 0,
            stats: Stats::default(),
        }
    };
    // A small tree to start with: a, its child, and b.
    m.create(None);
    m.create(Some(0));
    m.create(None);
    static TRACE: OnceLock<bool> = OnceLock::new();
    let trace = *TRACE.get_or_init(|| std::env::var_os("SLABCG_FUZZ_TRACE").is_some());
    let mut input = Input { data, pos: 0 };
    loop {
        if trace {
            // Unbuffered and allocation-free: safe inside a full tenant's scope.
            eprintln!("action {} at byte {}", m.stats.actions, input.pos);
        }
        if m.step(&mut input).is_none() {
            break;
        }
        m.stats.actions += 1;
    }
    m.finish();
    let stats = m.stats;
    // The root scope ends last: the model's vectors were allocated in it.
    let root = m.root.take();
    drop(m);
    drop(root);
    stats
}

impl Model {
    fn stamp(&mut self) -> u64 {
        self.stamps += 1;
        // Never 0 (a zeroed block must not pass for stamped).
        0x5eed_0000_0000_0000 | self.stamps
    }

    /// The innermost scope's node (None: the root).
    fn current(&self) -> Option<usize> {
        self.scopes.last().map(|&(_, n)| n)
    }

    /// Node indexes that hold a handle.
    fn handled(&self, pick: u8) -> Option<usize> {
        let n = self.nodes.iter().filter(|n| n.handle.is_some()).count();
        if n == 0 {
            return None;
        }
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.handle.is_some())
            .nth(pick as usize % n)
            .map(|(i, _)| i)
    }

    fn alive(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        n.handle.is_some()
            || n.scopes > 0
            || (0..self.nodes.len()).any(|c| self.nodes[c].parent == Some(i) && self.alive(c))
    }

    /// `t` is `i` or one of its descendants.
    fn in_subtree(&self, mut t: usize, i: usize) -> bool {
        loop {
            if t == i {
                return true;
            }
            match self.nodes[t].parent {
                Some(p) => t = p,
                None => return false,
            }
        }
    }

    /// Bytes the subtree of `i` holds: (all, large, sock).
    fn ledger(&self, i: usize) -> (u64, u64, u64) {
        let (mut all, mut large, mut sock) = (0, 0, 0);
        for (t, n) in self.nodes.iter().enumerate() {
            if self.in_subtree(t, i) {
                all += n.objects + n.sock;
                large += n.large;
                sock += n.sock;
            }
        }
        (all, large, sock)
    }

    /// The node a charge meant for `t` reaches: `t`, or after it died its nearest live
    /// ancestor (reparenting).
    fn anchor(&self, mut t: usize) -> Option<usize> {
        loop {
            if self.alive(t) {
                return Some(t);
            }
            t = self.nodes[t].parent?;
        }
    }

    fn predict(&self, t: usize, bytes: u64) -> Prediction {
        let mut p = Prediction {
            strict: true,
            refuser: None,
            uncertain: false,
            within_bounds: true,
        };
        let mut cur = Some(t);
        while let Some(a) = cur {
            let n = &self.nodes[a];
            let need = self.ledger(a).0.saturating_add(bytes);
            p.strict &= !n.ever_kill;
            if n.max != u64::MAX && need > n.max && p.refuser.is_none() {
                p.refuser = Some(a);
            }
            let bound = if n.ever_kill {
                n.max.saturating_add(n.overdraft_bytes())
            } else {
                n.max
            };
            p.within_bounds &= need <= bound || n.over;
            p.uncertain |= need > n.max && n.over;
            cur = n.parent;
        }
        p
    }

    /// Applies the reclaim callbacks' log after a charge of `bytes` to `t` predicted `pre`,
    /// checking that the right callback ran (strict) or at least one on the path.
    fn take_reclaims(&mut self, t: usize, bytes: u64, pre: &Prediction, what: &str) {
        let log: [Option<Reclaimed>; 2] = {
            let mut pool = self.pool.lock().unwrap();
            assert!(pool.log.len() <= 1, "reclaim ran {} times", pool.log.len());
            let first = pool.log.pop();
            [first, None]
        };
        let ran = log[0];
        if pre.strict {
            let expected = pre.refuser.filter(|&r| self.nodes[r].reclaim);
            match (expected, ran) {
                (None, None) => {}
                // Served by a block kept charged: the charge never reached the ladder.
                (Some(_), None) if pre.uncertain => {}
                (Some(r), Some(got)) => {
                    assert_eq!(got.who, r, "the reclaim callback of the wrong tenant ran");
                    // A bulk call takes blocks kept charged in the thread's object stock or
                    // front first: the ladder asks for the rest.
                    if what.contains("bulk") {
                        assert!(got.bytes > 0 && got.bytes <= bytes, "reclaim: bytes asked");
                    } else {
                        assert_eq!(got.bytes, bytes, "reclaim callback: bytes asked");
                    }
                }
                (e, g) => panic!(
                    "reclaim callback: expected {e:?}, ran {:?} (charge of {bytes} to {t})",
                    g.map(|g| g.who)
                ),
            }
        } else if let Some(got) = ran {
            assert!(
                self.in_subtree(t, got.who),
                "reclaim of a tenant off the path"
            );
        }
        if let Some(got) = ran {
            assert!(
                !got.corrupt,
                "a block the reclaim callback freed lost its stamp"
            );
            self.stats.reclaims += 1;
            for &(owner, usable, large) in &got.freed[..got.n] {
                self.uncharge_obj(owner, usable, large);
            }
        }
    }

    /// A charge of `bytes` to node `t` was made (`ok`) or refused: checks it against the
    /// prediction made before it (`pre`), after applying what reclaim freed.
    fn judge(&mut self, t: usize, bytes: u64, pre: Prediction, ok: bool, what: &str) {
        self.take_reclaims(t, bytes, &pre, what);
        let post = self.predict(t, bytes);
        if post.strict && post.uncertain {
            // Either way is right; a refusal drained every stock (see below).
        } else if post.strict {
            assert_eq!(
                ok,
                post.refuser.is_none(),
                "{what} of {bytes} B to {}: ledger {:?}, max {}, refuser {:?}",
                NAMES[t],
                self.ledger(t),
                self.nodes[t].max,
                post.refuser
            );
        } else if ok {
            assert!(
                post.within_bounds,
                "{what} of {bytes} B to {}: a charge passed max + overdraft: {}",
                NAMES[t],
                self.path_text(t)
            );
        } else {
            assert!(
                post.refuser.is_some(),
                "{what}: refused below max (Kill path)"
            );
        }
        if !ok {
            self.stats.refused += 1;
            if let Some(r) = post.refuser {
                self.nodes[r].ev_max += 1;
                self.nodes[r].ev_oom += 1;
            }
            // The refusal drained the stocks of the refusing tenant's subtree (not the
            // others: a block a reclaim callback freed can stay charged in this thread's
            // object stock to its owner elsewhere in the tree, and pay for that tenant's
            // next charges without a look at its `max`).
            if let Some(r) = post.refuser {
                self.drained_under(r);
            }
        }
    }

    /// The path from `t` up, for failure messages: name, ledger, max, overdraft, policy.
    fn path_text(&self, t: usize) -> String {
        let mut out = String::new();
        let mut cur = Some(t);
        while let Some(a) = cur {
            let n = &self.nodes[a];
            out += &format!(
                "[{} ledger {} current {:?} over {} max {} overdraft {} kill {}/{}] ",
                NAMES[a],
                self.ledger(a).0,
                n.handle.as_ref().map(|h| h.current()),
                n.over,
                n.max,
                n.overdraft_bytes(),
                n.policy == Policy::Kill,
                n.ever_kill
            );
            cur = n.parent;
        }
        out
    }

    /// Every stock was drained: usage is the ledger again.
    fn drained(&mut self) {
        for i in 0..self.nodes.len() {
            self.settled(i);
        }
    }

    /// The stocks of `r`'s subtree were drained.
    fn drained_under(&mut self, r: usize) {
        for i in 0..self.nodes.len() {
            if self.in_subtree(i, r) {
                self.settled(i);
            }
        }
    }

    /// Node `i`'s usage is its ledger (nothing of its subtree is kept charged in a stock).
    fn settled(&mut self, i: usize) {
        let over = self.ledger(i).0 > self.nodes[i].max;
        self.nodes[i].over &= over;
    }

    fn charge_obj(&mut self, owner: Option<usize>, usable: u64, large: bool) {
        if let Some(t) = owner {
            self.nodes[t].objects += usable;
            if large {
                self.nodes[t].large += usable;
            }
        }
    }

    fn uncharge_obj(&mut self, owner: Option<usize>, usable: u64, large: bool) {
        if let Some(t) = owner {
            self.nodes[t].objects -= usable;
            if large {
                self.nodes[t].large -= usable;
            }
        }
    }

    fn push(&mut self, o: Obj) {
        self.charge_obj(o.owner, o.usable, o.large());
        self.live.push(o);
    }

    fn remove(&mut self, k: usize) -> Obj {
        let o = self.live.swap_remove(k);
        self.uncharge_obj(o.owner, o.usable, o.large());
        o
    }

    fn create(&mut self, parent: Option<usize>) {
        if self.nodes.len() == MAX_NODES {
            return;
        }
        let name = NAMES[self.nodes.len()];
        let (handle, policy, killed) = match parent {
            Some(p) => {
                let parent = self.nodes[p].handle.as_ref().unwrap();
                let h = exposed(&mut self.root, || parent.child(name));
                (h, self.nodes[p].policy, self.killed(p))
            }
            None => (
                exposed(&mut self.root, || Tenant::new(name)),
                Policy::Fail,
                false,
            ),
        };
        // Children inherit the policy; a killed parent's children are killed.
        assert_eq!(
            handle.oom_policy() == OomPolicy::Kill,
            policy == Policy::Kill,
            "inherited policy"
        );
        if handle.is_killed() != killed {
            // Only the OOM killer marks tenants the model did not kill.
            assert!(
                handle.is_killed() && self.any_kill,
                "a new child's is_killed"
            );
        }
        self.nodes.push(Node {
            parent,
            handle: Some(handle),
            scopes: 0,
            max: u64::MAX,
            policy,
            ever_kill: policy == Policy::Kill,
            overdraft: None,
            killed: false,
            reclaim: false,
            over: false,
            objects: 0,
            large: 0,
            sock: 0,
            ev_max: 0,
            ev_oom: 0,
        });
    }

    fn killed(&self, i: usize) -> bool {
        let mut cur = Some(i);
        while let Some(c) = cur {
            if self.nodes[c].killed {
                return true;
            }
            cur = self.nodes[c].parent;
        }
        false
    }

    /// Global allocation in the current scope.
    fn alloc(&mut self, layout: Layout, zeroed: bool) {
        let owner = self.current();
        let usable = expected_usable(layout);
        let pre = owner.map(|t| self.predict(t, usable));
        let p = exposed(&mut self.root, || stamp::allocate(layout, zeroed));
        if let (Some(t), Some(pre)) = (owner, pre) {
            self.judge(t, usable, pre, !p.is_null(), "alloc");
        } else {
            assert!(!p.is_null(), "an unscoped allocation failed");
        }
        if p.is_null() {
            return;
        }
        let stamp = self.stamp();
        // SAFETY: allocate just returned p for layout.
        let got = unsafe { take_fresh(p, layout, zeroed, stamp) };
        assert_eq!(got, usable);
        self.push(Obj {
            p: p as usize,
            layout,
            src: Source::Global,
            usable,
            owner,
            stamp,
        });
    }

    /// An allocation through a `TenantAlloc` of `t`, whatever the scope.
    fn alloc_for(&mut self, t: usize, layout: Layout) {
        let a = TenantAlloc::new(self.nodes[t].handle.as_ref().unwrap());
        let usable = expected_usable(layout);
        let pre = self.predict(t, usable);
        let r = exposed(&mut self.root, || a.allocate(layout));
        self.judge(t, usable, pre, r.is_ok(), "TenantAlloc::allocate");
        let Ok(block) = r else { return };
        let p = block.as_ptr() as *mut u8;
        assert!(block.len() >= layout.size());
        let stamp = self.stamp();
        // SAFETY: a fresh block of layout.
        let got = unsafe { take_fresh(p, layout, false, stamp) };
        assert_eq!(got, usable);
        drop(a);
        self.push(Obj {
            p: p as usize,
            layout,
            src: Source::Global,
            usable,
            owner: Some(t),
            stamp,
        });
    }

    fn free(&mut self, k: usize) {
        let o = self.remove(k);
        free_obj(&mut self.root, &o);
    }

    fn realloc(&mut self, k: usize, new_size: usize) {
        let o = self.live[k];
        if o.src != Source::Global {
            return;
        }
        let align = o.layout.align();
        let caller = self.current();
        let new_layout = Layout::from_size_align(new_size, align).unwrap();
        let new_usable = expected_usable(new_layout);
        let (old_c, new_c) = (
            class_for(o.layout.size(), align),
            class_for(new_size, align),
        );
        // Who pays (allocator/src/charge.rs): same class: nothing changes; a large block
        // resized in place (grown when aligned to at most a page; any shrink): its owner pays
        // the difference; a shrink into a size class of the caller's own block: the charge
        // moves, never refused; anything else: a new block in the caller's tenant.
        enum Kind {
            Same,
            InPlace,
            ShrinkMove,
            Move,
        }
        let kind = match (old_c, new_c) {
            (Some(a), Some(b)) if a == b => Kind::Same,
            (None, None) if align <= 4096 || new_size <= o.layout.size() => Kind::InPlace,
            (_, Some(_)) if new_size < o.layout.size() && caller.is_some() && caller == o.owner => {
                Kind::ShrinkMove
            }
            _ => Kind::Move,
        };
        let judged = match kind {
            Kind::InPlace if new_usable > o.usable => o
                .owner
                .and_then(|t| self.anchor(t))
                .map(|a| (a, new_usable - o.usable)),
            Kind::Move => caller.map(|t| (t, new_usable)),
            _ => None,
        };
        let pre = judged.map(|(t, n)| self.predict(t, n));
        // SAFETY: o is live with o.layout; new_size is non-zero and fits the alignment.
        let q = exposed(&mut self.root, || unsafe {
            alloc::realloc(o.p as *mut u8, o.layout, new_size)
        });
        if let (Some((t, n)), Some(pre)) = (judged, pre) {
            self.judge(t, n, pre, !q.is_null(), "realloc");
        } else {
            assert!(!q.is_null(), "a realloc no limit can refuse failed");
        }
        if q.is_null() {
            // SAFETY: the block is untouched and live.
            unsafe { check_stamp(o.p as *const u8, o.layout.size(), o.stamp, true) };
            return;
        }
        let stamp = self.stamp();
        // SAFETY: realloc returned q with new_size bytes.
        let (layout, usable) = unsafe { restamp_resized(q, o.layout, o.stamp, new_size, stamp) };
        assert_eq!(q as usize % align, 0, "realloc lost the alignment");
        let owner = match kind {
            Kind::Move => caller,
            _ => o.owner,
        };
        self.remove(k);
        self.push(Obj {
            p: q as usize,
            layout,
            src: Source::Global,
            usable,
            owner,
            stamp,
        });
    }

    fn alloc_bulk(&mut self, layout: Layout, count: usize) {
        let mut out = [std::ptr::null_mut::<u8>(); MAX_BULK];
        let out = &mut out[..count];
        let owner = self.current();
        let class = class_for(layout.size(), layout.align());
        let usable = expected_usable(layout);
        let bytes = usable * count as u64;
        let pre = match (owner, class) {
            (Some(t), Some(_)) => Some((t, self.predict(t, bytes))),
            _ => None,
        };
        let n = exposed(&mut self.root, || slabcg::alloc_bulk(layout, out));
        if class.is_none() {
            assert_eq!(n, 0, "alloc_bulk of a layout no class serves");
            return;
        }
        assert!(n == 0 || n == count, "alloc_bulk: {n} of {count}");
        match pre {
            Some((t, pre)) => self.judge(t, bytes, pre, n == count, "alloc_bulk"),
            None => assert_eq!(n, count, "an unscoped alloc_bulk failed"),
        }
        for &p in &out[..n] {
            let stamp = self.stamp();
            // SAFETY: a fresh block of layout from alloc_bulk.
            let got = unsafe { take_fresh(p, layout, false, stamp) };
            assert_eq!(got, usable);
            self.push(Obj {
                p: p as usize,
                layout,
                src: Source::Global,
                usable,
                owner,
                stamp,
            });
        }
    }

    /// Frees up to `count` blocks like the one at `k` (same source and layout) with one bulk
    /// call: the size classes' `free_bulk`, or the cache's.
    fn free_bulk(&mut self, k: usize, count: usize) {
        let like = self.live[k];
        if like.large() {
            return self.free(k);
        }
        let mut run = [std::ptr::null_mut::<u8>(); MAX_BULK];
        let mut n = 0;
        let mut i = 0;
        while i < self.live.len() && n < count {
            let o = self.live[i];
            if o.src == like.src && o.layout == like.layout {
                // SAFETY: o is live.
                unsafe { check_stamp(o.p as *const u8, o.layout.size(), o.stamp, true) };
                run[n] = o.p as *mut u8;
                n += 1;
                self.remove(i);
            } else {
                i += 1;
            }
        }
        // SAFETY: n live blocks of that source and layout, each freed once.
        exposed(&mut self.root, || unsafe {
            match like.src {
                Source::Global => slabcg::free_bulk(like.layout, &run[..n]),
                Source::Cache(c) => caches()[c].free_bulk(&run[..n]),
            }
        });
    }

    fn cache_alloc(&mut self, c: usize, count: usize) {
        let cache = &caches()[c];
        let info = cache.info();
        let layout = Layout::from_size_align(info.object_size, info.align).unwrap();
        let usable = info.object_size as u64;
        let owner = self.current();
        let bytes = usable * count as u64;
        let pre = owner.map(|t| (t, self.predict(t, bytes)));
        let mut out = [std::ptr::null_mut::<u8>(); MAX_BULK];
        let n = exposed(&mut self.root, || {
            if count == 1 {
                match cache.alloc() {
                    Some(p) => {
                        out[0] = p.as_ptr();
                        1
                    }
                    None => 0,
                }
            } else {
                cache.alloc_bulk(&mut out[..count])
            }
        });
        assert!(n == 0 || n == count, "Cache::alloc_bulk: {n} of {count}");
        match pre {
            Some((t, pre)) => self.judge(
                t,
                bytes,
                pre,
                n == count,
                if count == 1 {
                    "cache alloc"
                } else {
                    "cache alloc_bulk"
                },
            ),
            None => assert_eq!(n, count, "an unscoped cache allocation failed"),
        }
        for &p in &out[..n] {
            assert_eq!(p as usize % info.align, 0, "misaligned cache object");
            let stamp = self.stamp();
            // SAFETY: a fresh object of object_size bytes.
            unsafe { write_stamp(p, layout.size(), stamp) };
            self.push(Obj {
                p: p as usize,
                layout,
                src: Source::Cache(c),
                usable,
                owner,
                stamp,
            });
        }
    }

    fn sock_charge(&mut self, t: usize, bytes: u64) {
        let pre = self.predict(t, bytes);
        let h = self.nodes[t].handle.clone().unwrap();
        let r = exposed(&mut self.root, || h.charge(bytes, StatItem::Sock));
        if let Err(e) = &r {
            let by = NAMES.iter().position(|&n| n == e.tenant);
            let by = by.filter(|&b| b < self.nodes.len() && self.in_subtree(t, b));
            assert!(by.is_some(), "{e}: not an ancestor of {}", NAMES[t]);
        }
        self.judge(t, bytes, pre, r.is_ok(), "charge");
        if r.is_ok() {
            self.nodes[t].sock += bytes;
        }
    }

    /// Hands block `k` to the reclaim pool (still live, still charged).
    fn give(&mut self, k: usize) {
        let o = self.live.swap_remove(k);
        let mut pool = self.pool.lock().unwrap();
        if pool.objs.len() < MAX_POOL {
            pool.objs.push(o);
        } else {
            drop(pool);
            self.live.push(o);
        }
    }

    fn set_reclaim(&mut self, t: usize) {
        self.nodes[t].reclaim = true;
        let pool = self.pool.clone();
        // Frees up to RECLAIM_BATCH pooled blocks (the oldest first) and logs what it freed.
        // It allocates nothing (the log is reserved) and never panics.
        self.nodes[t]
            .handle
            .as_ref()
            .unwrap()
            .set_reclaim(move |_, bytes| {
                let Ok(mut pool) = pool.lock() else { return };
                let mut r = Reclaimed {
                    who: t,
                    bytes,
                    freed: [(None, 0, false); RECLAIM_BATCH],
                    n: 0,
                    corrupt: false,
                };
                while r.n < RECLAIM_BATCH && !pool.objs.is_empty() {
                    let o = pool.objs.remove(0);
                    // SAFETY: a pooled block is live; the pool gave it up.
                    unsafe {
                        r.corrupt |= !intact(&o);
                        free_raw(&o);
                    }
                    r.freed[r.n] = (o.owner, o.usable, o.large());
                    r.n += 1;
                }
                if pool.log.len() < pool.log.capacity() {
                    pool.log.push(r);
                }
            });
    }

    fn set_max(&mut self, t: usize, sel: u8) {
        let ledger = self.ledger(t).0;
        let max = match sel {
            1..=63 => ledger + sel as u64 * 1024,
            64..=127 => ledger + (sel as u64 - 64) * (16 << 10),
            128..=191 => (sel as u64 - 128) * (64 << 10),
            192..=223 => ledger.saturating_sub((sel as u64 - 192) * 4096),
            _ => u64::MAX,
        };
        self.nodes[t].max = max;
        self.nodes[t].over |= max < ledger;
        let h = self.nodes[t].handle.as_ref().unwrap();
        h.set_max(max);
        assert_eq!(h.max(), max);
    }

    fn drop_tenant(&mut self, t: usize, keep_sock: bool) {
        let sock = self.nodes[t].sock;
        if sock > 0 && !keep_sock {
            self.nodes[t]
                .handle
                .as_ref()
                .unwrap()
                .uncharge(sock, StatItem::Sock);
            self.nodes[t].sock = 0;
        }
        if self.nodes[t].sock > 0 {
            // Carried by the parent once the tenant dies; given back through the root at
            // the end (when every tenant of the run is gone).
            self.orphan_sock += self.nodes[t].sock;
        }
        let h = self.nodes[t].handle.take();
        exposed(&mut self.root, || drop(h));
    }

    /// Every tenant with a handle against the ledger (the thread is quiescent: nothing else
    /// charges the run's tenants).
    #[allow(clippy::needless_range_loop)] // the body updates self.nodes[i]
    fn check(&mut self) {
        self.stats.checks += 1;
        slabcg::allocator::testing::check_invariants();
        let mut drained = false;
        for i in 0..self.nodes.len() {
            let Some(h) = self.nodes[i].handle.clone() else {
                continue;
            };
            let (all, large, sock) = self.ledger(i);
            let current = h.current_exact();
            drained = true;
            assert_eq!(current, all, "{} against the ledger", NAMES[i]);
            let stat = h.stat();
            assert_eq!(stat.current, current, "{}: stat.current", NAMES[i]);
            assert_eq!(stat.sock, sock, "{}: stat.sock", NAMES[i]);
            assert_eq!(stat.large, large, "{}: stat.large", NAMES[i]);
            assert_eq!(
                stat.slab + stat.large + stat.sock,
                current,
                "{}: slab + large + sock",
                NAMES[i]
            );
            assert!(h.peak() >= current, "{}: peak below current", NAMES[i]);
            if !self.any_kill {
                let e = h.events_local();
                assert_eq!(
                    (e.max, e.oom),
                    (self.nodes[i].ev_max, self.nodes[i].ev_oom),
                    "{}: events_local (max, oom)",
                    NAMES[i]
                );
                assert_eq!(e.oom_kill, 0, "{}: an OOM kill without Kill", NAMES[i]);
            }
            let killed = h.is_killed();
            let model = self.killed(i);
            if killed != model {
                assert!(
                    killed && self.any_kill,
                    "{}: is_killed {killed}, the model says {model}",
                    NAMES[i]
                );
                // The OOM killer took it (or an ancestor) down.
                self.nodes[i].killed = true;
            }
            assert_eq!(h.check().is_err(), killed, "{}: check()", NAMES[i]);
        }
        // current_exact() drained every stock, when a tenant with a handle was there to ask
        // (without one, nothing was drained: a tenant whose `max` was set below its usage
        // may still have stocks charged above it).
        if drained {
            self.drained();
        }
    }

    fn checkpoint(&mut self) {
        let r = exposed(&mut self.root, slabcg::checkpoint);
        let model = self.current().is_some_and(|t| self.killed(t));
        if r.is_err() != model {
            assert!(
                r.is_err() && self.any_kill,
                "checkpoint {r:?}, the model says killed = {model}"
            );
        }
    }

    /// Leaves the innermost scope.
    fn leave(&mut self) {
        if let Some((g, t)) = self.scopes.pop() {
            exposed(&mut self.root, || drop(g));
            self.nodes[t].scopes -= 1;
        }
    }

    /// One action; None when the input is used up.
    fn step(&mut self, input: &mut Input) -> Option<()> {
        let op = input.u8()?;
        match op {
            0..=59 => {
                let (size, align, z) = (input.size()?, input.align()?, input.u8()?);
                if self.live.len() >= MAX_LIVE {
                    self.free(z as usize % self.live.len());
                } else {
                    self.alloc(Layout::from_size_align(size, align).unwrap(), z < 32);
                }
            }
            60..=99 => {
                let k = input.u16()? as usize;
                if !self.live.is_empty() {
                    self.free(k % self.live.len());
                }
            }
            100..=124 => {
                let (k, size) = (input.u16()? as usize, input.size()?);
                if !self.live.is_empty() {
                    self.realloc(k % self.live.len(), size);
                }
            }
            125..=134 => {
                let (size, align, count) = (input.size()?, input.align()?, input.u8()?);
                let count = 1 + count as usize % MAX_BULK;
                if self.live.len() + count <= MAX_LIVE {
                    self.alloc_bulk(Layout::from_size_align(size, align).unwrap(), count);
                }
            }
            135..=142 => {
                let (k, count) = (input.u16()? as usize, input.u8()?);
                if !self.live.is_empty() {
                    self.free_bulk(k % self.live.len(), 1 + count as usize % MAX_BULK);
                }
            }
            143..=152 => {
                let (c, count) = (input.u8()?, input.u8()?);
                let count = if count < 128 {
                    1
                } else {
                    1 + count as usize % MAX_BULK
                };
                if self.live.len() + count <= MAX_LIVE {
                    self.cache_alloc(c as usize % 2, count);
                }
            }
            153..=160 => {
                let (k, count) = (input.u16()? as usize, input.u8()?);
                if !self.live.is_empty() {
                    let k = k % self.live.len();
                    if count < 128 || self.live[k].src == Source::Global {
                        self.free(k);
                    } else {
                        self.free_bulk(k, 1 + count as usize % MAX_BULK);
                    }
                }
            }
            161..=165 => {
                let (t, size, align) = (input.u8()?, input.size()?, input.align()?);
                if let Some(t) = self.handled(t) {
                    if self.live.len() < MAX_LIVE {
                        self.alloc_for(t, Layout::from_size_align(size, align).unwrap());
                    }
                }
            }
            166..=171 => {
                let k = input.u16()? as usize;
                if !self.live.is_empty() {
                    self.give(k % self.live.len());
                }
            }
            172..=185 => {
                let t = input.u8()?;
                if let Some(t) = self.handled(t) {
                    if self.scopes.len() < self.scopes.capacity() {
                        let h = self.nodes[t].handle.as_ref().unwrap();
                        let g = exposed(&mut self.root, || h.enter());
                        self.scopes.push((g, t));
                        self.nodes[t].scopes += 1;
                    }
                }
            }
            186..=197 => self.leave(),
            198..=202 => {
                let p = input.u8()?;
                let parent = if p < 64 { None } else { self.handled(p) };
                self.create(parent);
            }
            203..=206 => {
                let (t, keep) = (input.u8()?, input.u8()?);
                if let Some(t) = self.handled(t) {
                    self.drop_tenant(t, keep < 128);
                }
            }
            207..=215 => {
                let (t, sel) = (input.u8()?, input.u8()?);
                if let Some(t) = self.handled(t) {
                    self.set_max(t, sel);
                }
            }
            216..=217 => {
                let (t, sel) = (input.u8()?, input.u8()?);
                if let Some(t) = self.handled(t) {
                    let high = if sel == 255 {
                        u64::MAX
                    } else {
                        sel as u64 * 8192
                    };
                    self.nodes[t].handle.as_ref().unwrap().set_high(high);
                }
            }
            218..=220 => {
                let (t, sel) = (input.u8()?, input.u8()?);
                if let Some(t) = self.handled(t) {
                    let (policy, p) = if sel < 200 {
                        (Policy::Fail, OomPolicy::Fail)
                    } else {
                        (Policy::Kill, OomPolicy::Kill)
                    };
                    let n = &mut self.nodes[t];
                    n.policy = policy;
                    n.ever_kill |= policy == Policy::Kill;
                    self.any_kill |= policy == Policy::Kill;
                    n.handle.as_ref().unwrap().set_oom_policy(p);
                }
            }
            221..=222 => {
                let (t, sel) = (input.u8()?, input.u8()?);
                if let Some(t) = self.handled(t) {
                    let bytes = sel as u64 * 4096;
                    // A smaller overdraft shrinks an open window without a drain: stocks
                    // may hold bytes charged through the larger one (as with `max` set
                    // below the usage, `over`).
                    let n = &mut self.nodes[t];
                    n.over |= n.ever_kill && bytes < n.overdraft_bytes();
                    self.nodes[t].overdraft = Some(bytes);
                    let h = self.nodes[t].handle.as_ref().unwrap();
                    h.set_overdraft(bytes);
                    assert_eq!(h.overdraft(), bytes);
                }
            }
            223..=225 => {
                let t = input.u8()?;
                if let Some(t) = self.handled(t) {
                    self.set_reclaim(t);
                }
            }
            226..=227 => {
                let t = input.u8()?;
                if let Some(t) = self.handled(t) {
                    let h = self.nodes[t].handle.as_ref().unwrap();
                    exposed(&mut self.root, || h.kill());
                    self.nodes[t].killed = true;
                }
            }
            228..=230 => self.checkpoint(),
            231..=237 => {
                let (t, n) = (input.u8()?, input.u16()?);
                if let Some(t) = self.handled(t) {
                    self.sock_charge(t, 1 + n as u64);
                }
            }
            238..=242 => {
                let (t, n) = (input.u8()?, input.u16()?);
                if let Some(t) = self.handled(t) {
                    let n = (1 + n as u64).min(self.nodes[t].sock);
                    if n > 0 {
                        self.nodes[t]
                            .handle
                            .as_ref()
                            .unwrap()
                            .uncharge(n, StatItem::Sock);
                        self.nodes[t].sock -= n;
                    }
                }
            }
            243..=245 => {
                exposed(&mut self.root, slabcg::drain_all_stocks);
                self.drained();
            }
            246..=247 => exposed(&mut self.root, slabcg::trim),
            248..=255 => self.check(),
        }
        Some(())
    }

    /// Leaves every scope, frees everything, checks that the tenants read their leftover
    /// Sock bytes only, and drops them.
    fn finish(&mut self) {
        while !self.scopes.is_empty() {
            self.leave();
        }
        self.check();
        let pooled = std::mem::take(&mut self.pool.lock().unwrap().objs);
        for o in &pooled {
            self.uncharge_obj(o.owner, o.usable, o.large());
            free_obj(&mut self.root, o);
        }
        while !self.live.is_empty() {
            self.free(self.live.len() - 1);
        }
        for i in 0..self.nodes.len() {
            let sock = self.nodes[i].sock;
            if let Some(h) = self.nodes[i].handle.as_ref() {
                h.uncharge(sock, StatItem::Sock);
                self.nodes[i].sock = 0;
            }
        }
        // What is left: the Sock bytes of dropped tenants, in their ancestors' ledgers.
        self.check();
        for i in 0..self.nodes.len() {
            if self.nodes[i].handle.is_some() {
                self.drop_tenant(i, false);
            }
        }
        // Every tenant of the run is gone: the root carries what they left.
        if self.orphan_sock > 0 {
            Tenant::root().uncharge(self.orphan_sock, StatItem::Sock);
        }
        drop(pooled);
    }
}

#[allow(dead_code)] // the fuzz target runs libFuzzer's inputs only
/// A pseudo-random action stream of `len` bytes from `seed` (for bounded runs without a
/// corpus).
pub fn random_input(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
