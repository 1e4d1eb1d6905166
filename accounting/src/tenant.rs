//! Tenants: the handle's API (limits, events, charges, reclaim), lifecycle and reparenting,
//! and the policy the charge ladder is handed ([`LADDER`]). Policy layer: the mechanism
//! below (counter, stock, drain, charge) never calls into this file except through
//! `LADDER`.
//!
//! A [`Tenant`] is a handle on a `Node` (`node.rs`). Liveness of a tenant is `handles > 0`,
//! where `handles = live Tenant handles + live children` (a live child keeps its parent
//! alive), once the counts threads cache for the parent of many children are folded in
//! (`kin_cache.rs`, at the drop of its last handle). When `handles` drops to 0 the tenant
//! dies (`die`): every objcg pointing at it (its own and those inherited from dead
//! children) is re-pointed to the parent, and its own objcg loses its alive ref. The
//! `Node` is owned by `Arc`s: the handles' (`Tenant`), its children's (`parent`), one per
//! objcg pointing at it (`objcg.rs`), and the credits threads' kin entries hold.
//! Re-pointing moves the objcgs' references to the parent, so a dead tenant's node is freed
//! as soon as its last handle goes, whatever objects it still owns (as the kernel frees an
//! offlined memcg and keeps only its obj_cgroup); its statistics need no folding, since
//! every ancestor's already include them. Zombie objcgs (no refs left) are freed in user
//! context (`free_zombies`).
//!
//! Lifecycle work (die, free zombies) is user context. Creating a child takes no lock
//! beyond the objcg id allocator's (mostly not that either: ids come from a thread's batch)
//! and the registry lock when a thread starts caching the parent's counts; the death of a
//! tenant that adopted no objcgs takes none, but the drop of a cached parent's last handle
//! takes the registry lock (`kin_cache::kill`); the rest of a death, and zombie sweeps,
//! are serialised by `TREE` (`tree.rs`).

use core::fmt;
use core::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::callbacks;
use crate::charge::{self, Ladder, Refused};
use crate::counter::{self, Events, Reach};
use crate::drain;
use crate::kin_cache;
use crate::node::{locked, upgrade, Node, Reclaim, Tenant};
use crate::objcg;
use crate::oom::{self, Killed};
use crate::oom_state::OomPolicy;
use crate::report::TenantStat;
use crate::scope::{self, ScopeGuard};
use crate::stat::{self, StatItem};
use crate::stock::{self, Pool};
use crate::tree::{for_each_live, root_node, tree_lock, try_tree_lock, TreeGuard};
use crate::types::ObjCgId;

/// The policy steps of the charge failure ladder, handed to the mechanism
/// (`charge::charge_slow`) by its two callers, `hooks::charge` and [`Tenant::charge`].
pub(crate) static LADDER: Ladder = Ladder {
    reclaim: run_reclaim,
    out_of_memory: oom::out_of_memory,
};

/// A charge refused by a tenant's `max`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChargeError {
    /// Name of the ancestor (or the tenant itself) whose limit refused.
    pub tenant: String,
    /// Bytes asked for.
    pub bytes: u64,
    /// The refusing tenant's `max` at the time.
    pub max: u64,
}

impl fmt::Display for ChargeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "charge of {} bytes refused by tenant '{}' (max {})",
            self.bytes, self.tenant, self.max
        )
    }
}

impl std::error::Error for ChargeError {}

/// Why [`Tenant::try_child`] made no tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TenantError {
    /// Every objcg id (all of `u32` but 0) is held by a live tenant or by a dead tenant
    /// whose objects are still alive.
    OutOfIds,
}

impl fmt::Display for TenantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TenantError::OutOfIds => f.write_str(
                "out of objcg ids: 4294967295 tenants, and dead tenants with live objects, \
                 exist at once",
            ),
        }
    }
}

impl std::error::Error for TenantError {}

impl Tenant {
    /// The root tenant: never limited; owns every unscoped allocation.
    pub fn root() -> Tenant {
        Tenant::from_counted(root_node().clone())
    }

    /// A new child of the root.
    pub fn new(name: &str) -> Tenant {
        // Without a handle on the root (two more writes of its shared line per tenant).
        child_of(root_node(), name).unwrap_or_else(|e| out_of_ids(e))
    }

    /// A new child of this tenant.
    pub fn child(&self, name: &str) -> Tenant {
        self.try_child(name).unwrap_or_else(|e| out_of_ids(e))
    }

    /// A new child of this tenant, or an error when the objcg id space is full: every one
    /// of the 4,294,967,295 ids is held by a live tenant or by a dead tenant's live objects.
    /// Ids of dead tenants whose objects are all freed come back.
    pub fn try_child(&self, name: &str) -> Result<Tenant, TenantError> {
        child_of(&self.node, name)
    }

    /// The name this tenant was created with (the root's is `"root"`).
    pub fn name(&self) -> &str {
        self.node.name()
    }

    /// The parent tenant; `None` for the root.
    pub fn parent(&self) -> Option<Tenant> {
        let p = self.node.parent.as_ref()?;
        // Alive: this live tenant holds a count on it.
        Some(Tenant::from_counted(p.clone()))
    }

    fn is_root(&self) -> bool {
        self.node.parent.is_none()
    }

    /// Sets the hard limit (`u64::MAX` = unlimited). Ignored on the root. Lowering it below
    /// the current usage first takes back the bytes pre-charged into every thread's stock
    /// (one drain); what is really in use is not evicted, and later charges fail until
    /// usage drops.
    pub fn set_max(&self, bytes: u64) {
        if self.is_root() {
            return;
        }
        self.node.counter.set_max(bytes);
        self.node.oom.limits_changed(&self.node.counter);
        // Bytes pre-charged into stocks count in `current` but are spent without a look at
        // `max` (that is what makes them cheap). Above the new limit, give them back, so
        // that every later charge is checked against it; as a write to cgroup's memory.max
        // drains the per-CPU stocks.
        if self.node.counter.usage() > bytes {
            drain::drain_all();
        }
    }
    /// The hard limit in bytes (`u64::MAX`: unlimited, the default).
    pub fn max(&self) -> u64 {
        self.node.counter.max()
    }
    /// Sets the soft limit: going above it never fails, it counts `events.high` and raises
    /// [`under_pressure`](Self::under_pressure). Stock refills stop at it (a refill that
    /// would cross it is a quarter one or exactly what is asked). The charge that takes
    /// usage across it first takes back what every thread's stock pre-charged (one drain,
    /// at most one per 10 ms for the tenant and 1,000 a second for the process after a
    /// burst of 64, skipped when nothing was stocked since the last), and raises the
    /// pressure and counts the event only if the tenant's objects keep it above: pressure
    /// follows what is in use, not the refills a task left on each thread it ran on.
    /// Charges meanwhile leave the decision to it. Lowering it below the current usage
    /// first takes back the bytes pre-charged into every thread's stock (one drain), as
    /// `set_max` does. Ignored on the root.
    pub fn set_high(&self, bytes: u64) {
        if self.is_root() {
            return;
        }
        let old = self.node.counter.high();
        self.node.counter.set_high(bytes);
        // Bytes pre-charged into stocks count in usage: below it, give them back so that the
        // pressure follows what is in use; as a write to cgroup's memory.high drains stocks.
        // Only when lowered: a controller that raises it or writes it again pays no drain.
        if bytes < old && self.node.counter.usage() > bytes {
            drain::drain_all();
        }
    }
    /// The soft limit in bytes (`u64::MAX`: none, the default).
    pub fn high(&self) -> u64 {
        self.node.counter.high()
    }
    /// True while usage is above `high` (cleared when an uncharge brings it back).
    pub fn under_pressure(&self) -> bool {
        self.node.counter.under_pressure()
    }

    /// Charges this thread's allocations to this tenant until the guard drops. Nests.
    pub fn enter(&self) -> ScopeGuard {
        scope::enter(self.clone(), self.node.objcg())
    }

    /// Bytes charged, including bytes pre-charged into stocks. For the root: the sum of all
    /// tenants plus the allocator's unscoped usage (`hooks::set_root_usage_source`).
    pub fn current(&self) -> u64 {
        oom::housekeeping();
        let c = self.node.counter.usage();
        if self.is_root() {
            c.saturating_add(callbacks::root_usage())
        } else {
            c
        }
    }

    /// Drains every thread's stock, then reads `current`.
    pub fn current_exact(&self) -> u64 {
        drain::drain_all();
        self.current()
    }

    /// The highest `current` seen so far, in bytes.
    pub fn peak(&self) -> u64 {
        self.node.counter.peak()
    }

    /// This tenant's events and its descendants' (cgroup v2 `memory.events`).
    pub fn events(&self) -> Events {
        Events::read(&self.node.counter, Reach::Subtree)
    }

    /// This tenant's own events (cgroup v2 `memory.events.local`).
    pub fn events_local(&self) -> Events {
        Events::read(&self.node.counter, Reach::Local)
    }

    /// A snapshot of this tenant's numbers. Like a read of cgroup v2's memory.stat, which
    /// flushes the per-CPU statistics first, it first gives every thread's stock back (one
    /// membarrier), so `current` and the per-kind bytes are exact at the time of the call.
    pub fn stat(&self) -> TenantStat {
        let _root = scope::unscoped();
        drain::drain_all();
        free_zombies();
        read_stat(&self.node)
    }

    /// The stats of every live tenant, the root first, then by path, after one drain of
    /// every thread's stock (a scrape of 10,000 tenants drains once, not 10,000 times). The
    /// tree lock is held while the list is read, so tenants created or dropped meanwhile
    /// are either in it or not.
    pub fn all_stats() -> Vec<TenantStat> {
        let _root = scope::unscoped();
        drain::drain_all();
        free_zombies();
        let mut out = vec![read_stat(root_node())];
        {
            let tree = tree_lock();
            for_each_live(&tree, |n| out.push(read_stat(n)));
        }
        out[1..].sort_unstable_by(|a, b| a.path.cmp(&b.path));
        out
    }

    /// Charges a non-heap resource (e.g. socket buffers) through this thread's stock.
    pub fn charge(&self, bytes: u64, item: StatItem) -> Result<(), ChargeError> {
        let idx = item.idx();
        // No usage can be that large, and stat deltas are i64.
        if bytes > i64::MAX as u64 {
            return Err(self.error(&self.node, bytes));
        }
        if self.is_root() {
            // The root is never limited.
            let _ = counter::try_charge(&*self.node, bytes);
            stat::flush(&*self.node, idx.0 as usize, bytes as i64);
            return Ok(());
        }
        let id = self.node.objcg();
        if stock::consume(id, Pool::Api, bytes, idx) {
            return Ok(());
        }
        charge::charge_slow(id, Pool::Api, bytes, idx, &LADDER).map_err(|Refused(r)| {
            // SAFETY: the refusing node is this tenant or an ancestor, alive while we are.
            self.error(unsafe { &*r }, bytes)
        })
    }

    fn error(&self, node: &Node, bytes: u64) -> ChargeError {
        let _root = scope::unscoped();
        ChargeError {
            tenant: node.name().to_owned(),
            bytes,
            max: node.counter.max(),
        }
    }

    /// Gives back bytes charged with [`charge`](Self::charge), on any thread: through this
    /// tenant, or, once a tenant charged was dropped, through its parent (which carries its
    /// charges from then on). These bytes hold no reference on the tenant: giving them back
    /// needs a handle on it (as a socket keeps its memcg) or, after it is dropped, on its
    /// parent.
    ///
    /// Uncharging more than is outstanding is a bug in the caller. It cannot corrupt the
    /// allocator's ownership records (which objects' frees rely on); its effects stay in the
    /// numbers, as with the kernel's `page_counter_cancel`:
    /// - the excess can sit in this thread's stock as credit that later charges of this
    ///   tenant use without charging the counter (at most 512 KiB per thread, until a drain);
    /// - the usage of this tenant and of each ancestor stops at 0 on its own, so an ancestor
    ///   can lose usage that its other children hold, and stats can read low;
    /// - when a counter would go below 0, a warning is printed (once per process).
    pub fn uncharge(&self, bytes: u64, item: StatItem) {
        let idx = item.idx();
        // More than any charge can have been (`charge` refuses above i64::MAX).
        let bytes = bytes.min(i64::MAX as u64);
        #[cfg(debug_assertions)]
        counter::note_api_uncharge();
        if self.is_root() {
            counter::uncharge(&*self.node, bytes);
            stat::flush(&*self.node, idx.0 as usize, -(bytes as i64));
            return;
        }
        charge::uncharge(self.node.objcg(), Pool::Api, bytes, idx);
    }

    /// Sets the callback run before a charge refused by this tenant's `max` fails: it gets
    /// this tenant and the bytes asked, and may free memory. It runs outside every stock
    /// critical section and is never re-entered on the same thread (a charge failing inside
    /// it just fails). Its own allocations belong to the root, so it may allocate while its
    /// tenant is full. A panic in it is caught and ignored.
    pub fn set_reclaim(&self, callback: impl Fn(&Tenant, u64) + Send + Sync + 'static) {
        let _root = scope::unscoped();
        let new: Reclaim = Arc::new(callback);
        let old = {
            let _tree = tree_lock();
            // Before this handle can be dropped: its death, ordered after that drop by
            // `handles`, sees the flag and takes the callback under TREE.
            self.node.has_reclaim.store(true, Ordering::Relaxed);
            locked(&self.node.reclaim).replace(new)
        };
        // Outside TREE: the old callback may own the last handle of a tenant (`die`).
        drop(old);
    }
}

/// What happens at `max`, killing, safe points, and work carried into the tenant.
impl Tenant {
    /// Sets what happens when a charge does not fit under this tenant's `max` even after
    /// every stock was drained and the reclaim callback ran: [`OomPolicy::Fail`] (the
    /// default) fails the charge; [`OomPolicy::Kill`] kills a victim in this tenant's subtree
    /// and lets the charge through the overdraft (see [`OomPolicy`]). Children created
    /// afterwards inherit the policy. Ignored on the root.
    ///
    /// ```
    /// use slabcg_accounting::{OomPolicy, Tenant};
    /// let customer = Tenant::new("customer-7");
    /// customer.set_max(64 << 20);
    /// customer.set_oom_policy(OomPolicy::Kill);
    /// assert_eq!(customer.child("request-1").oom_policy(), OomPolicy::Kill);
    /// ```
    pub fn set_oom_policy(&self, policy: OomPolicy) {
        if !self.is_root() {
            self.node.oom.set_policy(policy);
        }
    }
    /// This tenant's [`OomPolicy`].
    pub fn oom_policy(&self) -> OomPolicy {
        self.node.oom.policy()
    }
    /// Sets how far past `max` charges may go, under [`OomPolicy::Kill`], between the kill
    /// of a victim and the release of its memory: `current` stays at most `max + overdraft`.
    /// Until set, the overdraft is `min(max, 64 MiB)` ([`Tenant::overdraft`] reads it).
    pub fn set_overdraft(&self, bytes: u64) {
        self.node.oom.set_overdraft(bytes);
        self.node.oom.limits_changed(&self.node.counter);
    }
    /// The overdraft in force: the one set with [`set_overdraft`](Self::set_overdraft), else
    /// `min(max, 64 MiB)`, room for a `Vec` that held half the limit to double while the
    /// kill is decided.
    pub fn overdraft(&self) -> u64 {
        self.node.oom.overdraft(self.node.counter.max())
    }
    /// Kills this tenant and its descendants (as cgroup's `memory.oom.group`): their
    /// [`Scoped`](crate::Scoped) futures are woken and resolve to `Err(Killed)` at their
    /// next poll (after dropping the inner future inside the tenant), and
    /// [`check`](Self::check) and [`checkpoint`](crate::checkpoint) return `Err`. For a
    /// service's own reasons (a timeout, an admin); not counted in `events.oom_kill`.
    ///
    /// A killed tenant stays killed: scopes can still be entered and charged (so the work
    /// being dropped is uncharged correctly), but no future runs in it again. A service
    /// replaces a killed tenant with a new one. Ignored on the root.
    pub fn kill(&self) {
        if !self.is_root() {
            oom::kill(&self.node);
        }
    }
    /// Whether this tenant or one of its ancestors was killed.
    pub fn is_killed(&self) -> bool {
        oom::killed_by(&self.node).is_some()
    }
    /// A safe point for synchronous code: `Err(Killed)` once this tenant or an ancestor was
    /// killed (by the OOM killer or [`kill`](Self::kill)), naming the killed tenant.
    ///
    /// ```
    /// use slabcg_accounting::Tenant;
    /// let job = Tenant::new("batch-job");
    /// assert!(job.check().is_ok());
    /// job.kill();
    /// let err = job.check().unwrap_err();
    /// assert_eq!(err.tenant(), "batch-job");
    /// ```
    pub fn check(&self) -> Result<(), Killed> {
        match oom::killed_by(&self.node) {
            None => Ok(()),
            Some(k) => Err(oom::killed_error(k)),
        }
    }
    /// The tenant's path below the root, "/"-separated (`"svc/customer-42"`; `"root"` for
    /// the root), as the metrics label it. A "/" or "%" in a name is percent-encoded, so
    /// only siblings of one name share a path:
    ///
    /// ```
    /// use slabcg_accounting::Tenant;
    /// let svc = Tenant::new("svc");
    /// assert_eq!(svc.child("customer-42").path(), "svc/customer-42");
    /// assert_eq!(svc.child("a/b%").path(), "svc/a%2Fb%25");
    /// ```
    pub fn path(&self) -> String {
        let _root = scope::unscoped();
        self.node.path()
    }
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }
}

/// Not a panic: `child` is called from code that cannot handle an error, and reaching here
/// needs over four billion tenants and dead tenants' objcgs alive at once.
fn out_of_ids(e: TenantError) -> ! {
    crate::sys::warn(&format!("slabcg: fatal: {e}\n"));
    std::process::abort();
}

/// [`Tenant::try_child`] of the tenant `parent_node`, on which the caller holds a handle (or
/// the root, which never dies).
fn child_of(parent_node: &Arc<Node>, name: &str) -> Result<Tenant, TenantError> {
    let _root = scope::unscoped();
    free_zombies_if_due();
    oom::housekeeping();
    // No `TREE` here: the parent cannot die meanwhile (the caller's handle keeps it alive,
    // so `die` cannot run on it), and nothing else can see the new node or its objcg until
    // this returns.
    // The child keeps its parent alive: counted, and its reference on the parent
    // taken, in this thread's cached counts when they are the parent's (`kin_cache.rs`).
    let parent = kin_cache::birth(parent_node);
    // A child inherits its parent's policy, so that the requests under a Kill-policy
    // customer are themselves candidates for the OOM killer.
    let node = Node::new_arc(Some(parent), name.into(), 1, parent_node.oom.policy());
    let raw = Arc::into_raw(node.clone());
    let id = match objcg::alloc(raw).or_else(|_| {
        // Ids of dead tenants whose last objects are freed may wait in stocks and on
        // the zombie list: give them back, then try once more.
        drain::drain_all();
        free_zombies();
        objcg::alloc(raw)
    }) {
        Ok(id) => id,
        Err(objcg::IdsFull) => {
            // SAFETY: `alloc` failed, so the reference from into_raw is still ours.
            drop(unsafe { Arc::from_raw(raw) });
            // The node never got an objcg: it dies without reparenting anything, but its
            // count on the parent goes as a child's would.
            node.kin.handles.store(0, Ordering::Relaxed);
            node.kin.ext.store(0, Ordering::Relaxed);
            node.dead.store(true, Ordering::Relaxed);
            drop(node);
            kin_cache::unbirth(parent_node);
            return Err(TenantError::OutOfIds);
        }
    };
    node.objcg.store(id, Ordering::Relaxed);
    Ok(Tenant { node })
}

/// A stat of `node` as it is now (the caller drained first if it wants it exact).
fn read_stat(node: &Node) -> TenantStat {
    let usage = node.counter.usage();
    if node.parent.is_some() {
        return TenantStat::read(node, usage);
    }
    // The root also holds what was allocated outside every scope: read once, so that
    // `current`, `slab` and `large` agree.
    let u = callbacks::root_unscoped();
    let mut stat = TenantStat::read(node, usage);
    stat.current = usage.saturating_add(u.slab).saturating_add(u.large);
    stat.slab = stat.slab.saturating_add(u.slab);
    stat.large = stat.large.saturating_add(u.large);
    stat.peak = stat.peak.max(stat.current);
    stat
}

/// Runs `node`'s reclaim callback, if any and if the tenant is still alive, and says
/// whether one ran. Called by the charge ladder, outside every CS, with `IN_RECLAIM` set.
pub(crate) fn run_reclaim(node: &Node, bytes: u64) -> bool {
    // Whatever the callback allocates (a log line, a panic's payload) belongs to the root,
    // like the kernel's reclaim dipping into reserves: charged to the full tenant it would
    // be refused, and an infallible allocation would abort the process.
    let _root = scope::unscoped();
    // TREE: see `Node::reclaim`. This thread holds no lock here (the charge ladder runs
    // outside every lock), and TREE's holders never run a charge ladder (they allocate as
    // the root, which is never refused).
    let cb = {
        let _tree = tree_lock();
        locked(&node.reclaim).clone()
    };
    let Some(cb) = cb else { return false };
    let Some(t) = upgrade(node) else { return false };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(&t, bytes)));
    true
}

impl Drop for Tenant {
    fn drop(&mut self) {
        // The last handle ends the caching of the children's counts (`kin_cache::kill`),
        // whose `BIAS` then goes with this handle's count.
        let killed =
            self.node.kin.ext.fetch_sub(1, Ordering::AcqRel) == 1 && kin_cache::kill(&self.node);
        let count = if killed { 1 + kin_cache::BIAS } else { 1 };
        if self.node.kin.handles.fetch_sub(count, Ordering::Release) == count {
            fence(Ordering::Acquire);
            let _root = scope::unscoped();
            die(&self.node);
            charge::release_own_slot(self.node.objcg());
            free_zombies_if_due();
        }
    }
}

/// The tenant behind `node` died: reparent its objcgs, drop its objcg's alive ref, and
/// release its count on the parent (which may die in turn).
///
/// A tenant that adopted no objcgs (`Node::adopted == 0`, the usual request or query, which
/// freed what it allocated or whose objects were all freed by now) and has no reclaim
/// callback dies without the tree lock: only its own objcg points at it, and it re-points
/// that one itself, as a writer that waits for the objcg's readers (`ObjCg::repoint`).
/// Nothing else re-points to or from this node meanwhile: no live child is left to die into
/// it, and the parent cannot die before this releases its count on it. The first tenant up
/// the chain that adopted objcgs takes the lock (kept for the rest of the chain), sweeps the
/// zombies (which are most of what it adopted: the dead requests' objcgs whose objects are
/// freed) and, if some are left, finds the rest in one walk of the objcg table.
///
/// A fork while a death without the lock is in flight leaves that death half done in the
/// child, whose copy of the dying thread does not exist: the node, and each ancestor it was
/// keeping, is never freed there (a leak, not a dangling pointer), `adopted` counts at
/// most one objcg too many, which only makes a later death walk the table, and a node whose
/// `dead` flag was not stored yet reads as alive there (`is_alive` is only ever a hint).
fn die(node: &Node) {
    let mut reclaims = Vec::new();
    let mut dead = Vec::new();
    let mut swept = Swept::default();
    let mut tree: Option<TreeGuard> = None;
    let mut cur = node;
    while let Some(parent_arc) = cur.parent.as_ref() {
        let parent: &Node = parent_arc;
        // Its `handles` just reached 0. Relaxed, as the readers of `is_alive` take it as a
        // hint: each holds a read section or a ref that keeps what it then touches valid
        // whether or not the death has started (as when they read `handles`).
        cur.dead.store(true, Ordering::Relaxed);
        // Acquire: pairs with the Release of the children's `handles` decrements, after
        // which they counted their objcgs here; a zombie sweep's uncount seen late only
        // takes the lock for nothing.
        if tree.is_none()
            && (cur.kin.adopted.load(Ordering::Acquire) != 0
                || cur.has_reclaim.load(Ordering::Relaxed))
        {
            tree = Some(tree_lock());
        }
        if let Some(g) = &tree {
            if cur.kin.adopted.load(Ordering::Relaxed) != 0 {
                // Every thread's: what is left of them points here, and the walk below
                // would re-point it.
                drain::collect_zombies();
                sweep_zombies(g, &mut swept);
            }
            if cur.kin.adopted.load(Ordering::Relaxed) != 0 {
                reparent_adopted(g, cur, parent_arc);
            }
            reclaims.extend(locked(&cur.reclaim).take());
        }
        // In this order, each step in this thread's cached counts on the parent when they
        // are the parent's (`kin_cache.rs`), else in its shared counts: the objcg counted
        // there, re-pointed there, and only then this child's count on the parent released
        // (until then the parent cannot die, and a sweep of the entry in between only moves
        // what it counted to the shared counts).
        if let Some(oc) = objcg::lookup(cur.objcg()) {
            // Counted before it points there (`Node::adopted`).
            let to = if kin_cache::adopt(parent_arc) {
                // The entry's credit, spent just now.
                Arc::as_ptr(parent_arc)
            } else {
                parent.kin.adopted.fetch_add(1, Ordering::Relaxed);
                Arc::into_raw(Arc::clone(parent_arc))
            };
            // SAFETY: the objcg's alive ref keeps it allocated; `tenant` points at `cur`
            // (only `die` re-points an objcg, and `cur` is dying once); `to` owns a strong
            // reference on the parent, with `into_raw`'s provenance (`as_ptr` has it too).
            unsafe { repoint_to(oc, cur, to) };
            // The allocator's charged free objects kept for this tenant go back now (to the
            // parent, where the objcg points): nobody allocates for it any more. Before the
            // alive ref goes, so that the id is still this objcg's (not recycled for another
            // tenant) during the call. Deferred past the tree lock, which the allocator's
            // callbacks have no business running under (the usual death, without it, makes
            // the call at once and allocates nothing for it).
            if tree.is_some() {
                dead.push(oc);
            } else {
                callbacks::on_death(oc.id());
                oc.put(1);
            }
        }
        // A count in the entry: the parent holds `BIAS` while the entry names it, so this
        // death does not end it.
        if kin_cache::death(parent_arc) || parent.kin.handles.fetch_sub(1, Ordering::Release) != 1 {
            break;
        }
        fence(Ordering::Acquire);
        cur = parent;
    }
    drop(tree);
    for oc in dead {
        callbacks::on_death(oc.id());
        // The alive ref, kept for the call (above).
        oc.put(1);
    }
    // Reclaim callbacks may own handles whose drop re-enters `die`: drop them unlocked.
    drop(reclaims);
    swept.release();
}

/// Re-points every objcg `cur` adopted to its parent, and counts them there. Under TREE,
/// once the zombies are swept: what is left are dead descendants' objcgs with live objects.
fn reparent_adopted(_tree: &TreeGuard, cur: &Node, parent_arc: &Arc<Node>) {
    let own = cur.objcg();
    let mut moved = 0usize;
    // SAFETY: under TREE; `cur` is dying, so nothing re-points an objcg to it meanwhile
    // (no live child is left).
    unsafe {
        objcg::for_each_pointing_at(cur, |oc| {
            if oc.id() == own {
                return;
            }
            parent_arc.kin.adopted.fetch_add(1, Ordering::Relaxed);
            // SAFETY: under TREE no objcg is freed; it points at `cur` (just seen); the
            // pointer owns the reference it gets.
            repoint_to(oc, cur, Arc::into_raw(Arc::clone(parent_arc)));
            moved += 1;
        })
    };
    let counted = cur.kin.adopted.swap(0, Ordering::Relaxed);
    debug_assert!(
        counted == moved || objcg::forked(),
        "{counted} objcgs counted as adopted, {moved} found"
    );
}

/// Re-points `oc` from `cur` to the parent `to_ptr`, releasing its reference on `cur`.
///
/// # Safety
/// `oc` stays allocated for the call and points at `cur`, which lives until the caller
/// returns (the handle being dropped, or up the chain its dead child's `parent`), and no
/// other thread re-points it meanwhile. `to_ptr` owns a strong reference on the parent,
/// which moves to `oc`, and has the provenance of `Arc::into_raw`.
unsafe fn repoint_to(oc: &objcg::ObjCg, cur: &Node, to_ptr: *const Node) {
    // The objcg's new reference on the parent, as a pointer from `into_raw` (or `as_ptr`,
    // which `into_raw` is made of): its provenance covers the whole `ArcInner`, counts
    // included. `parent` cast to a pointer covers only the `Node` after them, so
    // `Arc::increment_strong_count` on it, and the `Arc::from_raw` that later releases it
    // (`free_zombies`, or the next `die` up), would reach the counts through a pointer not
    // allowed to: Stacked Borrows rejects that, and `Arc`'s raw-pointer functions accept
    // only `into_raw` pointers.
    // SAFETY: invariant: an objcg's `tenant` is null or a pointer from `Arc::into_raw`
    // owning one strong reference (`child`, or `to_ptr` here), so `old` may go back through
    // `Arc::from_raw`, which releases the reference on `cur` that comes back; `cur` lives on
    // by the caller's promise.
    unsafe {
        let old = oc.repoint(to_ptr);
        debug_assert!(core::ptr::eq(old, cur));
        drop(Arc::from_raw(old));
    }
}

/// Drains every thread's stock (idle threads included) and frees dead objcgs. After it
/// returns, `current()` of every tenant equals its live charges exactly (until the next
/// charge refills a stock).
pub fn drain_all_stocks() {
    drain::drain_all();
    free_zombies();
}

/// The tenant this thread's allocations are charged to now (the root outside any scope).
pub fn current_tenant() -> Tenant {
    let id = scope::current_objcg();
    if let Some(oc) = objcg::lookup(id) {
        // SAFETY: the live ScopeGuard that set `id` holds a handle, hence the alive ref.
        if let Some(t) = unsafe { oc.read() }.and_then(|n| upgrade(&n)) {
            return t;
        }
    }
    Tenant::root()
}

/// Frees dead objcgs: uncounts them from the nodes they point at, recycles their ids (and
/// the chunks of the table that empty out) and releases their nodes. User context only
/// (allocates, locks).
pub(crate) fn free_zombies() {
    let mut swept = Swept::default();
    let g = tree_lock();
    drain::collect_zombies();
    sweep_zombies(&g, &mut swept);
    drop(g);
    swept.release();
}

/// The nodes a sweep took references on, released once the tree lock is dropped.
#[derive(Default)]
struct Swept(Vec<*const Node>);

impl Swept {
    fn release(self) {
        for n in self.0 {
            // SAFETY: the objcg's strong reference (from `Arc::into_raw` in `child`, or
            // moved to it by `die`), taken from the entry, which `take_zombies` cleared:
            // this is the only release.
            unsafe { Arc::decrement_strong_count(n) };
        }
    }
}

/// Frees this thread's zombies and the global list's (what [`free_zombies`] and deaths
/// first collect there from every thread), with the tree lock held; the references taken
/// go to `swept`.
fn sweep_zombies(_tree: &TreeGuard, swept: &mut Swept) {
    let mut ids = Vec::new();
    objcg::take_zombies(|id, tenant| {
        // SAFETY: the entry's reference (released by `swept`) keeps `tenant` alive.
        if let Some(t) = unsafe { tenant.as_ref() } {
            // A zombie points at an ancestor of its creator (its death re-pointed it first,
            // counting it there): uncounted only now that the entry is clear.
            debug_assert!(t.objcg() != id, "objcg {id} died before its tenant");
            // Into this thread's cached counts when they are the node's, the reference
            // with it (`kin_cache.rs`); else from the shared count, which then may go
            // below 0 for a while (wrapping) when a death counted the objcg in an entry.
            if !kin_cache::unadopt(tenant) {
                // Read first: a kill after the decrement may fold and clear it; read clear,
                // the kill's folds are seen (`kin_cache::kill`).
                let cached = t.kin.percpu.load(Ordering::Acquire);
                let old = t.kin.adopted.fetch_sub(1, Ordering::Relaxed);
                debug_assert!(old != 0 || cached, "objcg {id}: adopted underflow");
                swept.0.push(tenant);
            }
        }
        ids.push(id);
    });
    // Under TREE, so that an id is never handed out again while a walk of the table could
    // still see its old entry.
    objcg::recycle(&ids);
}

/// Dead objcgs the lifecycle paths let wait before they free them: a tenant per query would
/// otherwise take the tree lock once more per creation or drop, and two threads doing so
/// would pass it back and forth. The cap of a thread's own list: sweeping at it is what
/// keeps a creating thread's list from spilling to the global one.
pub(crate) const ZOMBIE_SWEEP_EVERY: u32 = objcg::OWN_ZOMBIES;

/// Frees zombies on the hot lifecycle paths (creating and dropping tenants), once
/// `ZOMBIE_SWEEP_EVERY` dead objcgs wait on this thread's list and the global one: one lock
/// round trip then frees them. Each thread sweeps its own; the global list gets the
/// zombies of threads without a registered stock or past their own list's cap, and the
/// lists that exits, forks and full sweeps move there. A
/// zombie queued just after the check, or one that another thread is freeing right now, is
/// left to a later call; other threads' lists wait for their own sweeps, their exit, or a
/// full one: `drain_all_stocks()`, `stat()` and deaths of tenants that adopted objcgs call
/// `free_zombies` (or collect) whatever the count.
fn free_zombies_if_due() {
    if objcg::zombie_count() >= ZOMBIE_SWEEP_EVERY {
        // Left to a later call when another thread holds the lock (likely sweeping).
        if let Some(g) = try_tree_lock() {
            let mut swept = Swept::default();
            sweep_zombies(&g, &mut swept);
            drop(g);
            swept.release();
        }
    }
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tenant")
            .field("name", &self.name())
            .field("current", &self.node.counter.usage())
            .field("max", &self.max())
            .finish()
    }
}

impl Tenant {
    /// The objcg id allocations in this tenant's scope carry (0 for the root).
    pub fn objcg_id(&self) -> ObjCgId {
        self.node.objcg()
    }

    /// The shared stat at `idx`, as flushed so far (no drain).
    #[cfg(test)]
    pub(crate) fn stat_flushed(&self, idx: usize) -> u64 {
        self.node.stats.get(idx)
    }

    /// The objcgs that point at this tenant (its own first), after checking that the
    /// adopted ones are counted exactly (`Node::adopted`).
    #[cfg(test)]
    pub(crate) fn objcg_list(&self) -> Vec<ObjCgId> {
        let _g = tree_lock();
        let own = self.node.objcg();
        let mut list = vec![own];
        // SAFETY: under TREE; the tests call this with no child of the tenant alive, so no
        // death re-points an objcg to it meanwhile (nor from it: it is alive).
        unsafe {
            objcg::for_each_pointing_at(&*self.node, |oc| {
                if oc.id() != own {
                    list.push(oc.id());
                }
            })
        };
        assert_eq!(
            kin_cache::adopted_with_cached(&self.node),
            list.len() as isize - 1,
            "adopted counts the objcgs pointing here"
        );
        list
    }
}
