//! A node of the tenant tree and the handle on it: the data every layer above reads
//! (counter, stats, OOM state, the tree links, how many dead objcgs point here), with no
//! policy.
//! What the handle does, and the lifecycle (death, reparenting), are in `tenant.rs`.
//!
//! A tenant lives while `handles > 0`, where `handles + Σ entries' births = live Tenant
//! handles + live children + (BIAS while percpu)` (a live child keeps its parent alive; the
//! threads' cached counts and `BIAS` are `kin_cache.rs`'s); its death starts when `handles`
//! reaches 0 and `Node::dead` records that, for the readers that ask (`Node::is_alive`).
//! The `Node` is owned by `Arc`s: the handles' (`Tenant`), its children's (`parent`), one
//! per objcg pointing at it (`objcg.rs`), and the credits threads' entries hold.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::counter::{Counter, Hierarchy};
use crate::kin_entry::KinOp;
use crate::oom_state::{OomPolicy, OomState};
use crate::stat::{StatHierarchy, Stats};
use crate::stock::STOCK;
use crate::types::ObjCgId;

/// A tenant's reclaim callback (`Tenant::set_reclaim`).
pub(crate) type Reclaim = Arc<dyn Fn(&Tenant, u64) + Send + Sync>;

/// The two counts every child's birth and death writes on its parent, on a cache line of
/// their own: the threads that serve one parent's requests bounce this line between them
/// (a `lock` add at each birth and two at each death), and nothing the charge and free
/// paths read shares it (the liveness flag, the objcg, the OOM state, the counter). Padding
/// rather than alignment: `KIN_PAD` bytes on each side keep every other field out of any
/// 64-byte line the counts touch wherever the node lies, and first in the node they keep
/// the `Arc`'s reference counts (which each child's birth and death writes too) off the
/// fields' lines, while the node stays 8-aligned (an over-aligned allocation would leave
/// the allocator's fast path).
#[repr(C)]
pub(crate) struct Kin {
    _before: [u8; KIN_PAD],
    /// `live Tenant handles + live children`, less what threads' entries count, plus
    /// `BIAS` while `percpu` (module docs).
    pub(crate) handles: AtomicUsize,
    /// `adopted + Σ entries' adopted == objcgs pointing here other than this node's own`
    /// (dead descendants' objcgs, re-pointed here by their deaths), exact whenever no
    /// death or zombie sweep is in flight; during one it may be higher, never lower, since
    /// a death counts an objcg here before it re-points it and a sweep uncounts one only
    /// after clearing it. While threads cache counts (`percpu`) the shared part alone may
    /// be lower, even below 0 (wrapping); a death reads it only after the kill that folded
    /// every entry in (`kin_cache.rs`). A death with `adopted == 0` has nothing but its own
    /// objcg to re-point, so it needs no lock and no search (`tenant::die`).
    pub(crate) adopted: AtomicUsize,
    /// `ext == live Tenant handles`: the count `handles` mixes with the live children,
    /// apart, so that the drop of the last one can end the per-thread caching of the
    /// children's counts (`kin_cache.rs`).
    pub(crate) ext: AtomicUsize,
    /// Whether threads may cache the children's counts (`kin_cache.rs`): while set,
    /// `handles` also holds `kin_cache::BIAS`. Changed only under the registry lock.
    pub(crate) percpu: AtomicBool,
    _after: [u8; KIN_PAD],
}

/// A line less the 8 bytes an 8-aligned neighbour can share with it.
const KIN_PAD: usize = 56;

// The layout `Kin` and `Node` promise (both `repr(C)`): the counts first in the node, with
// `KIN_PAD` bytes on each side.
const _: () = assert!(
    core::mem::offset_of!(Node, kin) == 0
        && core::mem::offset_of!(Kin, handles) == KIN_PAD
        && core::mem::offset_of!(Kin, adopted) == KIN_PAD + 8
        && core::mem::offset_of!(Kin, ext) == KIN_PAD + 16
        && core::mem::offset_of!(Kin, percpu) == KIN_PAD + 24
        && core::mem::size_of::<Kin>() == 2 * KIN_PAD + 32
);

impl Kin {
    fn new(handles: usize) -> Kin {
        Kin {
            _before: [0; KIN_PAD],
            handles: AtomicUsize::new(handles),
            adopted: AtomicUsize::new(0),
            ext: AtomicUsize::new(handles),
            percpu: AtomicBool::new(false),
            _after: [0; KIN_PAD],
        }
    }
}

/// One node of the accounting tree (memcg). `repr(C)`: the fields are laid out in this
/// order, the read-mostly ones (`objcg`, `dead`, `has_reclaim`, the links) on the line
/// after `kin`, away from the lines children's births and deaths write ([`Kin`]).
#[repr(C)]
pub(crate) struct Node {
    pub(crate) kin: Kin,
    /// This tenant's objcg (0 for the root, which is never charged through an objcg).
    pub(crate) objcg: AtomicU32,
    /// Set once, when `kin.handles` reached 0 and the tenant started dying (`tenant::die`):
    /// what [`Node::is_alive`] reads, so that the charge and free paths that check a
    /// parent's liveness read a line nobody writes while it lives.
    pub(crate) dead: AtomicBool,
    /// Whether `reclaim` was ever set: a death without one takes no lock to clear it.
    pub(crate) has_reclaim: AtomicBool,
    pub(crate) parent: Option<Arc<Node>>,
    /// This node's own allocation, so that a `&Node` (all the charge paths have) can become
    /// a handle again without rebuilding an `Arc` from a pointer that only covers the node.
    /// Written with the other fields, before the node is initialised ([`Node::new_arc`]):
    /// a `OnceLock` set just after cost a tenant's creation about 80 instructions.
    pub(crate) this: Weak<Node>,
    pub(crate) name: Box<str>,
    /// Taken only under `TREE`, so that no thread holds it across a `fork` (the fork
    /// handlers hold `TREE`).
    pub(crate) reclaim: Mutex<Option<Reclaim>>,
    /// What happens at this tenant's `max`, and whether it was killed (`oom_state.rs`; the
    /// policy that uses it is `oom.rs`).
    pub(crate) oom: OomState,
    pub(crate) counter: Counter,
    pub(crate) stats: Stats,
}

impl Node {
    /// A new node in its own `Arc`, built in place. A `Node` is about 1.3 KiB, nearly all
    /// of it the stats' atomics, which start at zero: built by value and moved into the
    /// `Arc`, it was zeroed on the stack and copied twice, a tenth of what creating and
    /// dropping a tenant per query costs. Here the stats are zeroed where they lie and the
    /// other fields written there.
    pub(crate) fn new_arc(
        parent: Option<Arc<Node>>,
        name: Box<str>,
        handles: usize,
        policy: OomPolicy,
    ) -> Arc<Node> {
        let mut a = Arc::<Node>::new_uninit();
        let Some(m) = Arc::get_mut(&mut a) else {
            unreachable!("a new Arc has no other reference")
        };
        let p = m.as_mut_ptr();
        // The allocation's weak handle, as a `Weak<Node>`: `MaybeUninit<Node>` has `Node`'s
        // size and alignment. `Weak::from_raw` asks for a pointer from `Weak::into_raw` and
        // says nothing of a change of pointee type; `Arc::from_raw` allows one of the same
        // size and alignment, and the two share the allocation's layout, so this leans on
        // the documented `Arc` rule (Miri accepts it under stacked and tree borrows). Taken
        // after `p`, since `get_mut` refuses an `Arc` with weak handles; it touches the
        // counts, not the node `p` writes. Nothing upgrades it before the node is
        // initialised: only the node holds it.
        // SAFETY: as just said.
        let this = unsafe { Weak::from_raw(Weak::into_raw(Arc::downgrade(&a)).cast::<Node>()) };
        // SAFETY: `p` points to this unique, uninitialised allocation of a `Node`, and every
        // field is written below through raw pointers, with no reference to the rest
        // (`_every_field_is_written` lists the fields, as a reminder for a new one). `stats`
        // is an array of `AtomicI64`, which has the representation of `i64`, so zero bytes
        // are a valid `Stats` with every stat at 0.
        let node = unsafe {
            (&raw mut (*p).stats).write_bytes(0, 1);
            (&raw mut (*p).counter).write(Counter::new());
            (&raw mut (*p).parent).write(parent);
            (&raw mut (*p).this).write(this);
            (&raw mut (*p).name).write(name);
            (&raw mut (*p).objcg).write(AtomicU32::new(0));
            (&raw mut (*p).kin).write(Kin::new(handles));
            (&raw mut (*p).dead).write(AtomicBool::new(false));
            (&raw mut (*p).has_reclaim).write(AtomicBool::new(false));
            (&raw mut (*p).reclaim).write(Mutex::new(None));
            (&raw mut (*p).oom).write(OomState::new(policy));
            a.assume_init()
        };
        debug_assert!(node.stats.is_zero());
        debug_assert!(core::ptr::eq(node.this.as_ptr(), Arc::as_ptr(&node)));
        node
    }
}

/// The fields [`Node::new_arc`] writes: adding a field to `Node` fails to compile here
/// until it is listed, a reminder to write it in `new_arc` too.
#[allow(dead_code)]
fn _every_field_is_written(n: &Node) {
    let Node {
        counter: _,
        stats: _,
        parent: _,
        this: _,
        name: _,
        objcg: _,
        kin: _,
        dead: _,
        has_reclaim: _,
        reclaim: _,
        oom: _,
    } = n;
}

impl Drop for Node {
    /// Releases the chain of ancestors that only this node kept, one by one: dropping them
    /// recursively (each node's drop dropping its parent) overflowed the stack for a chain
    /// of some 40,000 tenants.
    fn drop(&mut self) {
        let mut parent = self.parent.take();
        // The reference on the parent goes back to this thread's cached counts when they
        // are the parent's (`kin_cache.rs`): the `Arc` count stays, held by the entry.
        if let Some(p) = &parent {
            let node = Arc::as_ptr(p) as *const u8;
            if STOCK.with(|s| s.kin.apply(node, KinOp::GiveCredit)) {
                core::mem::forget(parent.take());
            }
        }
        while let Some(p) = parent {
            parent = match Arc::try_unwrap(p) {
                // The last reference: take its parent before it drops (without recursing).
                Ok(mut node) => node.parent.take(),
                Err(_) => None,
            };
        }
    }
}

impl Hierarchy for Node {
    fn counter(&self) -> &Counter {
        &self.counter
    }
    fn parent(&self) -> Option<&Node> {
        self.parent.as_deref()
    }
}

impl StatHierarchy for Node {
    fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Node {
    pub(crate) fn parent_node(&self) -> Option<&Node> {
        self.parent.as_deref()
    }
    pub(crate) fn objcg(&self) -> ObjCgId {
        self.objcg.load(Ordering::Relaxed)
    }
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
    /// A strong reference to this node's memory (not a handle: it does not keep the tenant
    /// alive, only readable).
    pub(crate) fn arc(&self) -> Option<Arc<Node>> {
        self.this.upgrade()
    }
    /// Whether the tenant's death has not started (`dead` unset: a handle or a live child
    /// still held it a moment ago). A hint for its callers, who race with a death either way.
    pub(crate) fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::Relaxed)
    }
    /// The tenant's path below the root, "/"-separated ("svc/customer-42"); "root" for the
    /// root. A "/" or "%" inside a name is written "%2F" or "%25" (percent-encoding, as a URL
    /// path segment), so two tenants have one path only when they are siblings of one name:
    /// a top-level "a/b" is `a%2Fb`, the child "b" of "a" is `a/b` (the metrics label
    /// tenants by path, and a customer must not be able to name itself into another's
    /// series). Allocates: user context, or as the root.
    pub(crate) fn path(&self) -> String {
        let mut names = Vec::new();
        let mut cur = Some(self);
        while let Some(n) = cur {
            if n.parent.is_none() {
                break;
            }
            names.push(n.name());
            cur = n.parent_node();
        }
        if names.is_empty() {
            return "root".to_owned();
        }
        let mut out = String::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        for (i, name) in names.iter().rev().enumerate() {
            if i > 0 {
                out.push('/');
            }
            push_path_segment(&mut out, name);
        }
        out
    }
}

/// Appends `name` to a path as one segment: "%" as "%25" and "/" as "%2F", the rest as is.
fn push_path_segment(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
}

/// Locks one of the tree's mutexes; a panic while one was held leaves nothing half-done
/// that matters here, so poisoning is ignored.
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A cheap, cloneable handle on a tenant. The tenant lives while any handle or any live
/// child does.
///
/// (Its API and lifecycle, `Drop` included, are in `tenant.rs`; the type is here so that the
/// nodes, which keep the reclaim callbacks that take it, need nothing above them.)
pub struct Tenant {
    pub(crate) node: Arc<Node>,
}

impl Clone for Tenant {
    fn clone(&self) -> Tenant {
        Tenant::from_counted(self.node.clone())
    }
}

impl Tenant {
    /// A new handle on `node`, alive (the caller holds a handle on it, or a live child).
    pub(crate) fn from_counted(node: Arc<Node>) -> Tenant {
        node.kin.handles.fetch_add(1, Ordering::Relaxed);
        node.kin.ext.fetch_add(1, Ordering::Relaxed);
        Tenant { node }
    }
}

impl PartialEq for Tenant {
    fn eq(&self, other: &Tenant) -> bool {
        Arc::ptr_eq(&self.node, &other.node)
    }
}
impl Eq for Tenant {}

/// A new handle on `node` if it is still alive.
pub(crate) fn upgrade(node: &Node) -> Option<Tenant> {
    let mut h = node.kin.handles.load(Ordering::Relaxed);
    loop {
        if h == 0 {
            return None;
        }
        match node
            .kin
            .handles
            .compare_exchange_weak(h, h + 1, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(seen) => h = seen,
        }
    }
    node.kin.ext.fetch_add(1, Ordering::Relaxed);
    // The caller holds a reference into the node, so its strong count is >= 1 and the
    // upgrade cannot fail (if it did, the handle counts taken above would only keep the
    // tenant alive).
    let node = node.arc();
    debug_assert!(node.is_some(), "a referenced node has a strong count");
    let node = node?;
    Some(Tenant { node })
}
