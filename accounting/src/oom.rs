//! What happens at `max` (policy), and killing: cgroup v2's `memory.max` followed by the
//! kernel's memcg OOM killer, except that the victim is a tenant and the process lives.
//!
//! A charge refused by tenant `R`'s `max`, after the charge ladder drained every stock and
//! ran `R`'s reclaim callback (`charge.rs`), comes to [`out_of_memory`], which decides under
//! the tree lock (so that two chargers refused at once do not each kill):
//! - `R`'s policy is [`OomPolicy::Fail`]: the charge fails (null from `alloc`).
//! - [`OomPolicy::Kill`]: first the charge is tried again (another charger may have opened
//!   the window meanwhile). If a killed tenant of `R`'s subtree is still *dying* (it has
//!   work in flight, futures or wrapped closures not yet at a safe point, and was killed
//!   less than `DYING_GRACE` ago), nothing more is killed, as the kernel waits for an exiting
//!   OOM victim until its OOM reaper gives up on it. Otherwise the victim is the
//!   not-yet-killed Kill-policy tenant of the subtree (`R` included) with the most memory of
//!   its own (usage minus its live children's), as memcg picks the biggest task rather than
//!   a cgroup; it is marked killed, with its descendants (`memory.oom.group`). At most one
//!   victim per charge. Either way `R`'s overdraft window opens
//!   (`Counter::open_overdraft`): charges may pass `max` by up to the overdraft until an
//!   uncharge brings usage back to `max`, so that the work in flight reaches its next safe
//!   point, and the charge is tried again. Past `max + overdraft` the charge fails as under
//!   `Fail`; the next refusal picks the next victim unless one is still dying.
//!
//! Nothing here blocks on another tenant's work: the victim is only marked. Its `Scoped`
//! futures are woken by the reaper thread (waking a runtime's waker inside `alloc` could
//! take a lock the allocating code holds); they see the kill through [`epoch`] at their next
//! poll. The scan takes the tree lock and allocates as the root, as the reclaim step does.
//!
//! Kill state, per node: `killed` is set once (0 = alive) and never cleared; a node is
//! killed when it or an ancestor is (`killed_by`). `KILL_EPOCH` counts kills, so a safe
//! point that saw no new kill since its last look reads one shared, rarely written word.
//!
//! Fork: the waiter lists' locks are not held across `fork`. A child forked while another
//! thread registered a waker may find that tenant's list locked for good; only user-context
//! paths take those locks (never the tree lock's holders, never `alloc`), so at worst the
//! child's reaper or a registration there hangs. The parent's wakers mean nothing in the
//! child anyway.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::charge::Retry;
use crate::counter::{self, Event};
use crate::node::Node;
use crate::oom_state::{OomPolicy, BY_OOM, BY_REQUEST, KILLED_NOT};
use crate::scope;
use crate::tree::{self, TreeGuard};

/// How long a killed tenant with work in flight holds off further kills in its subtree (the
/// kernel's OOM reaper waits about 2 s before it lets the killer pick another victim).
const DYING_GRACE: Duration = Duration::from_secs(1);

/// Counts kills; bumped (SeqCst) after a victim's `killed` is set.
static KILL_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The number of kills so far: a safe point that saw this value before has no new kill to
/// look for.
#[inline(always)]
pub(crate) fn epoch() -> u64 {
    KILL_EPOCH.load(Ordering::SeqCst)
}

/// The killed node that `node` dies with: itself or its nearest killed ancestor.
pub(crate) fn killed_by(node: &Node) -> Option<&Node> {
    let mut cur = Some(node);
    while let Some(n) = cur {
        if n.oom.killed.load(Ordering::Acquire) != KILLED_NOT {
            return Some(n);
        }
        cur = n.parent_node();
    }
    None
}

fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Nanoseconds since `clock_base()`: a vDSO clock read, no allocation.
fn now_ns() -> u64 {
    clock_base().elapsed().as_nanos() as u64
}

/// Marks `node` killed for `why`; false if it already was.
fn mark(node: &Node, why: u8) -> bool {
    // The first kill's time stands: storing it again on each `Tenant::kill` of a killed
    // tenant (a watchdog killing again every 100 ms) kept its grace (`is_dying`) from ever
    // ending while it had work in flight, and no other victim was chosen. Two first kills
    // racing may both store a time, a few nanoseconds apart.
    if node.oom.killed.load(Ordering::Acquire) != KILLED_NOT {
        return false;
    }
    node.oom.killed_at.store(now_ns(), Ordering::Relaxed);
    let marked = node
        .oom
        .killed
        .compare_exchange(KILLED_NOT, why, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok();
    if marked {
        // After the flag: a safe point that sees the new epoch sees the flag.
        KILL_EPOCH.fetch_add(1, Ordering::SeqCst);
    }
    marked
}

/// `Tenant::kill`. The futures are woken by the reaper, not here: a reclaim callback (which
/// runs inside `alloc`) may call it.
pub(crate) fn kill(node: &Node) {
    if mark(node, BY_REQUEST) {
        request_wake();
    }
}

/// Whether the kill that took `n` down still holds off further kills: `n` has work in
/// flight and its killer acted less than `DYING_GRACE` ago.
fn is_dying(n: &Node, now: u64) -> bool {
    let Some(k) = killed_by(n) else { return false };
    n.oom.inflight.load(Ordering::Relaxed) > 0
        && now.saturating_sub(k.oom.killed_at.load(Ordering::Relaxed))
            < DYING_GRACE.as_nanos() as u64
}

/// The error when the killed node is gone already (cannot happen while the caller's scope
/// holds its tenant; kept so that no path panics).
pub(crate) fn killed_unnamed() -> Killed {
    let _root = scope::unscoped();
    Killed {
        tenant: String::from("?"),
        by_oom: false,
        max: u64::MAX,
    }
}

/// The error for work of a tenant that `killed` (itself or an ancestor) took down.
/// Allocates, as the root.
pub(crate) fn killed_error(killed: &Node) -> Killed {
    let _root = scope::unscoped();
    Killed {
        tenant: killed.path(),
        by_oom: killed.oom.killed.load(Ordering::Relaxed) == BY_OOM,
        max: killed.counter.max(),
    }
}

/// The charge ladder's last step for a charge that `refused`'s `max` refused: under the
/// tree lock, retries it (`retry`: `Err` names the refusing node), killing a victim and
/// opening the overdraft window as the module doc says; `Err` with the node that refused
/// last when the charge must fail. Runs outside every stock critical section; allocates as
/// the root.
///
/// The charge ladder (`charge.rs`, mechanism) reaches it only through the `charge::Ladder`
/// it is handed (`tenant::LADDER`), hence the `dyn` retry.
pub(crate) fn out_of_memory(refused: &Node, retry: &mut Retry<'_>) -> Result<(), *const Node> {
    let kill_policy = |r: &Node| r.oom.policy() == OomPolicy::Kill && r.parent_node().is_some();
    if !kill_policy(refused) {
        return Err(refused);
    }
    let _root = scope::unscoped();
    let tree = tree::tree_lock();
    let mut r: *const Node = refused;
    let mut killed = false;
    // The node whose window this call opened last: opening it again cannot help.
    let mut opened: *const Node = core::ptr::null();
    // Each round either returns or opens a window that was closed, or kills (once), or
    // moves on to another refusing ancestor: a handful of rounds at most.
    for _ in 0..8 {
        r = match retry() {
            Ok(()) => return Ok(()),
            Err(r) => r,
        };
        // SAFETY: the refusing node is the charging tenant or an ancestor of it, alive while
        // the charger holds its refs.
        let node = unsafe { &*r };
        if !kill_policy(node) {
            return Err(r);
        }
        let open = node.counter.overdraft_open() || core::ptr::eq(opened, node);
        match choose(&tree, node) {
            Choice::Dying if !open => {}
            Choice::Victim(v) if !killed => {
                // `v` is a strong reference: the victim may have died since `choose` saw
                // it (a death without adopted objcgs takes no lock), and marking a dead
                // tenant harms nothing.
                if mark(&v, BY_OOM) {
                    counter::record_event(&*v, Event::OomKill);
                }
                killed = true;
                request_wake();
            }
            // The window is open and exhausted while a victim dies, or this charge has
            // killed already, or nothing is left to kill.
            _ => return Err(r),
        }
        node.counter
            .open_overdraft(node.oom.overdraft(node.counter.max()));
        opened = node;
    }
    Err(r)
}

enum Choice {
    /// A killed tenant of the subtree still has work in flight.
    Dying,
    /// Kill this one.
    Victim(Arc<Node>),
    /// No Kill-policy tenant with memory of its own is left to kill.
    Nothing,
}

/// One live tenant of the refusing subtree, as the victim choice sees it.
struct Member {
    node: *const Node,
    parent: *const Node,
    usage: u64,
    own: u64,
    /// Its node, kept readable after the walk, if it may be killed.
    candidate: Option<Arc<Node>>,
}

fn is_in(node: &Node, root: &Node) -> bool {
    let mut cur = Some(node);
    while let Some(n) = cur {
        if core::ptr::eq(n, root) {
            return true;
        }
        cur = n.parent_node();
    }
    false
}

/// The victim choice for a charge refused by `r`: see the module doc.
fn choose(tree: &TreeGuard, r: &Node) -> Choice {
    let mut members: Vec<Member> = Vec::new();
    let mut dying = false;
    let now = now_ns();
    tree::for_each_live(tree, |n| {
        if !is_in(n, r) {
            return;
        }
        let killed = killed_by(n).is_some();
        dying |= is_dying(n, now);
        let usage = n.counter.usage();
        members.push(Member {
            node: n,
            parent: n
                .parent_node()
                .map_or(core::ptr::null(), |p| p as *const Node),
            usage,
            own: usage,
            candidate: (!killed && n.oom.policy() == OomPolicy::Kill)
                .then(|| n.arc())
                .flatten(),
        });
    });
    if dying {
        return Choice::Dying;
    }
    // Memory of its own: usage minus that of its live children (all of which are members).
    members.sort_unstable_by_key(|m| m.node as usize);
    for i in 0..members.len() {
        let (parent, usage) = (members[i].parent, members[i].usage);
        if let Ok(p) = members.binary_search_by_key(&(parent as usize), |m| m.node as usize) {
            members[p].own = members[p].own.saturating_sub(usage);
        }
    }
    members
        .iter()
        .filter(|m| m.candidate.is_some() && m.own > 0)
        // The first of equals wins (max_by_key would take the last).
        .fold(None::<&Member>, |best, m| match best {
            Some(b) if b.own >= m.own => Some(b),
            _ => Some(m),
        })
        .and_then(|m| m.candidate.clone())
        .map_or(Choice::Nothing, Choice::Victim)
}

// --- Waking killed futures -----------------------------------------------------------

/// Registers the waker of a pending `Scoped` future of `node`; returns its index.
pub(crate) fn add_waiter(node: &Node, waker: Waker) -> usize {
    ensure_reaper();
    let _root = scope::unscoped();
    let mut w = node.oom.waiters();
    match w.free.pop() {
        Some(i) if i < w.slots.len() => {
            w.slots[i] = Some(waker);
            i
        }
        _ => {
            w.slots.push(Some(waker));
            w.slots.len() - 1
        }
    }
}

/// Replaces the waker at `index` (the future is now polled by another task context).
pub(crate) fn update_waiter(node: &Node, index: usize, waker: Waker) {
    let old = {
        let mut w = node.oom.waiters();
        w.slots.get_mut(index).and_then(|s| s.replace(waker))
    };
    // Dropped outside the lock: a waker's drop may run arbitrary code.
    drop(old);
}

/// Unregisters index `index`.
pub(crate) fn remove_waiter(node: &Node, index: usize) {
    let _root = scope::unscoped();
    let old = {
        let mut w = node.oom.waiters();
        let old = w.slots.get_mut(index).and_then(Option::take);
        if old.is_some() {
            w.free.push(index);
        }
        old
    };
    drop(old);
}

/// Wakes the registered futures of every killed tenant. User context (the reaper): takes
/// the tree lock to find the killed tenants, then, with the tree lock released, each one's
/// waiter lock; allocates as the root, and calls the wakers with no lock held.
fn wake_killed() {
    let _root = scope::unscoped();
    let mut killed: Vec<Arc<Node>> = Vec::new();
    {
        let tree = tree::tree_lock();
        tree::for_each_live(&tree, |n| {
            if killed_by(n).is_some() {
                killed.extend(n.arc());
            }
        });
    }
    let mut wakers: Vec<Waker> = Vec::new();
    for n in &killed {
        wakers.extend(n.oom.waiters().slots.iter().flatten().cloned());
    }
    // The nodes' last references may go here: a node's drop takes no lock.
    drop(killed);
    for w in wakers {
        w.wake();
    }
}

/// The background thread ("slabcg-bg": it wakes killed futures and runs the idle-stock
/// decay), leaked once spawned: `Thread::unpark` through it neither allocates nor
/// locks, so the OOM path inside `alloc` can call it.
struct Reaper {
    thread: std::thread::Thread,
}

static REAPER: AtomicPtr<Reaper> = AtomicPtr::new(core::ptr::null_mut());
static WAKE_PENDING: AtomicBool = AtomicBool::new(false);
/// Set while a thread spawns the reaper ([`ensure_reaper`]); cleared in a fork child.
static SPAWNING: AtomicBool = AtomicBool::new(false);

/// Asks the reaper to wake the killed tenants' futures. Allocation-free, lock-free: called
/// on the OOM path inside `alloc`, and by `Tenant::kill`. Without a reaper (no future ever
/// waited) there is nothing to wake; one spawned later finds `WAKE_PENDING` set.
fn request_wake() {
    WAKE_PENDING.store(true, Ordering::SeqCst);
    let r = REAPER.load(Ordering::Acquire);
    // SAFETY: a published reaper is never freed.
    if let Some(r) = unsafe { r.as_ref() } {
        r.thread.unpark();
    }
}

/// Spawns the reaper if this process has none yet. User context.
fn ensure_reaper() {
    if !REAPER.load(Ordering::Acquire).is_null() {
        return;
    }
    // One spawner at a time; the others go on, as the spawner wakes the reaper it publishes
    // for whatever came meanwhile (`WAKE_PENDING`, `DECAYING`). A flag, not a lock: a child
    // forked while a thread of its parent held a lock here waited on it for ever
    // (`fork_child` clears the flag).
    if SPAWNING
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    if REAPER.load(Ordering::Acquire).is_null() {
        let _root = scope::unscoped();
        let spawned = std::thread::Builder::new()
            .name("slabcg-bg".into())
            .spawn(reaper_main);
        // If the OS refuses a thread, the next registration tries again; until then kills
        // are seen at the victims' next polls only.
        if let Ok(handle) = spawned {
            let r = Box::new(Reaper {
                thread: handle.thread().clone(),
            });
            REAPER.store(Box::into_raw(r), Ordering::Release);
            // A kill (or the idle decay's start) before the reaper existed may be waiting.
            request_wake();
        }
    }
    SPAWNING.store(false, Ordering::Release);
}

/// How often the background thread gives idle threads' stocks back, once there are more
/// threads with stocks than a few per CPU (`drain::decay_wanted`).
pub(crate) const DECAY_INTERVAL: Duration = Duration::from_millis(100);

/// Set once the idle-stock decay was asked for (`housekeeping`); reset in a fork child.
static DECAYING: AtomicBool = AtomicBool::new(false);

/// The background thread: wakes killed tenants' futures when asked, and, once many threads
/// hold stocks, gives idle threads' stocks back every `DECAY_INTERVAL`.
fn reaper_main() {
    let _root = scope::unscoped();
    let mut last_decay = Instant::now();
    loop {
        if WAKE_PENDING.swap(false, Ordering::SeqCst) {
            wake_killed();
            continue;
        }
        if DECAYING.load(Ordering::Relaxed) {
            std::thread::park_timeout(DECAY_INTERVAL);
            if last_decay.elapsed() >= DECAY_INTERVAL {
                crate::drain::drain_idle();
                last_decay = Instant::now();
            }
        } else {
            std::thread::park();
        }
    }
}

/// User context (tenant creation, `current()`, stats): starts the idle-stock decay, and the
/// background thread for it, once more threads hold stocks than a few per CPU. One relaxed
/// load when there is nothing to do.
pub(crate) fn housekeeping() {
    if DECAYING.load(Ordering::Relaxed) || !crate::drain::decay_wanted() {
        return;
    }
    DECAYING.store(true, Ordering::Relaxed);
    ensure_reaper();
    let r = REAPER.load(Ordering::Acquire);
    // SAFETY: a published reaper is never freed.
    if let Some(r) = unsafe { r.as_ref() } {
        r.thread.unpark();
    }
}

/// Fork support, in the child: the reaper thread did not survive; the next registration
/// spawns a new one. The old one's handle is leaked (a few bytes per fork).
pub(crate) fn fork_child() {
    REAPER.store(core::ptr::null_mut(), Ordering::Relaxed);
    SPAWNING.store(false, Ordering::Relaxed);
    DECAYING.store(false, Ordering::Relaxed);
}

/// The work of a killed tenant, ended at a safe point: a `Scoped` future resolves to it,
/// and [`Tenant::check`](crate::Tenant::check) / [`checkpoint`](crate::checkpoint) return
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Killed {
    tenant: String,
    by_oom: bool,
    max: u64,
}

impl Killed {
    /// The path of the killed tenant (the one whose work this was, or the ancestor it died
    /// with), as [`Tenant::path`](crate::Tenant::path) gives it.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// True when the OOM killer chose it; false for [`Tenant::kill`](crate::Tenant::kill).
    pub fn by_oom(&self) -> bool {
        self.by_oom
    }
    /// The killed tenant's `max` when the error was made (`u64::MAX`: unlimited).
    pub fn max(&self) -> u64 {
        self.max
    }
}

impl fmt::Display for Killed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.by_oom {
            write!(f, "tenant '{}' was killed: out of memory", self.tenant)?;
            if self.max != u64::MAX {
                write!(f, " (max {} bytes)", self.max)?;
            }
            Ok(())
        } else {
            write!(f, "tenant '{}' was killed", self.tenant)
        }
    }
}

impl std::error::Error for Killed {}
