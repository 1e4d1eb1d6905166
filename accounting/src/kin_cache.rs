//! Children's counts on their parent, cached per thread: what lets a tenant per query scale
//! with the threads that serve one parent.
//!
//! Each child's birth and death writes its parent: `handles` (a live child keeps its parent
//! alive), `adopted` (its objcg is re-pointed there at its death) and the `Arc` strong count
//! (the child's reference on its parent, and its objcg's once re-pointed). Threads creating
//! and dropping children of one parent bounced those lines between them: two threads ran
//! fewer queries than one. As the kernel's `percpu_ref` counts on per-CPU words until the
//! ref is killed, a thread that keeps creating children of a parent caches that parent's
//! counts in a `KinEntry`, one of the `WAYS` of its `KinCache` (in its stock, so the
//! registry reaches it): its births, deaths, re-pointings and node drops then change only
//! that word, with a compare-and-swap on its own line, and the strong references come from
//! credits the entry took in a batch. A worker serving a few customers' requests in turn
//! caches each customer.
//!
//! The protocol, for a parent P:
//! - P's `handles` holds [`BIAS`] while `P.kin.percpu` is set, so no sum of the shared count
//!   and the entries' births and deaths (which may be negative there) takes it to 0. The flag
//!   is set (and `BIAS` added) by the first install of an entry for P, and cleared (the
//!   entries emptied into the shared counts, `BIAS` removed by the caller) when P's last
//!   `Tenant` handle goes ([`kill`], keyed on `ext`), so P then dies as before, when its
//!   last child does. Both happen under the registry lock, as every install and eviction
//!   does; so under it, an entry names P only while P's flag is set, and the entries a kill
//!   empties are all there are. A handle taken again afterwards (`upgrade`) may install
//!   again; its drop kills again.
//! - An entry for P keeps P's node alive while it names it: P cannot die while it holds
//!   `BIAS`, and it holds it until a kill emptied every entry. So a thread that finds one
//!   of its entries naming a node may count on it, and the births and deaths it counts
//!   there only reach `handles` through a fold under the lock: a kill's sweep, an
//!   eviction, a refresh (`cache`), the thread's exit.
//! - Entries are keyed by P's node address (at most one of a thread's `WAYS` names P);
//!   only their owner installs one, so the owner reading its own entries sees one name P,
//!   or sees it emptied by a sweep (its exchange then fails and it takes the shared path,
//!   which is always right).
//! - A thread caches P once it counted [`STREAK`] births of P on the shared path (per
//!   recent parent, in a small table where a parent among many loses its slot before it
//!   gets there: `KinCache::note_birth`), so that a worker serving the requests of many
//!   customers in turn does not install and evict on every request; with every way taken,
//!   an install evicts the ways in turn.
//!
//! Cost: a kill walks every registered stock under the registry lock (O(threads), as a
//! drain does), once per death of a parent that some thread cached: a service's customer,
//! not each query. Each thread's stock holds the `WAYS` entries and the counting table,
//! about 260 bytes.
//!
//! Fork: the child's copies of other threads' entries go back to their parents, their
//! credits stay taken (`drain::fork_child`).

use std::sync::Arc;

use core::sync::atomic::Ordering;

use crate::drain;
use crate::kin_entry::KinOp;
use crate::node::Node;
use crate::stock::STOCK;

/// What a parent's `handles` holds while threads may cache its children's counts: more than
/// the entries' births and deaths can ever take away (each entry holds at most 2,048 either
/// way: 2^29 threads would be needed), and small enough that the `BIAS`es of kills still
/// on their way to remove theirs, while a re-install added one (`kill`), cannot wrap it.
pub(crate) const BIAS: usize = 1 << 40;
const _: () = assert!(usize::BITS == 64);

/// Births of one parent a thread counts on the shared path before it caches its counts
/// (fewer under Miri, whose tests make few).
const STREAK: u32 = if cfg!(miri) { 2 } else { 8 };

/// Strong references an entry takes at once (the births and re-pointings spend them, node
/// drops and zombie sweeps give them back).
const CREDITS: u32 = 64;
const _: () = assert!(CREDITS <= crate::kin_entry::CREDITS_MAX);

/// The key of `parent`'s entries: its node's address from `Arc::as_ptr`, whose provenance
/// (`into_raw`'s) covers the counts, as `drain::release_credits` and `Arc::from_raw` on
/// the credits need; a pointer cast from a `&Node` would not do.
fn key(parent: &Arc<Node>) -> *const u8 {
    Arc::as_ptr(parent) as *const u8
}

/// The child's reference on its parent, and the parent's count of it: from this thread's
/// entry when it caches the parent, else from the shared counts.
#[inline]
pub(crate) fn birth(parent: &Arc<Node>) -> Arc<Node> {
    if STOCK.with(|s| s.kin.apply(key(parent), KinOp::Birth)) {
        // SAFETY: the credit just spent is a strong reference on the parent's allocation
        // that the entry held; `as_ptr` has the provenance `into_raw` gives.
        return unsafe { Arc::from_raw(Arc::as_ptr(parent)) };
    }
    birth_slow(parent)
}

#[cold]
#[inline(never)]
fn birth_slow(parent: &Arc<Node>) -> Arc<Node> {
    let k = key(parent);
    // The root too: it never dies, so its entries are only evicted, but `Tenant::new` per
    // query writes its counts as a service's children do the service's.
    // Counted per parent, or cached already (its credits ran out, or its births reached the
    // end of their range: refilled, or folded and installed again).
    let counted = STOCK.with(|s| s.kin.note_birth(k) >= STREAK || s.kin.holds(k));
    if counted && cache(parent, Enable::Yes) && STOCK.with(|s| s.kin.apply(k, KinOp::Birth)) {
        // SAFETY: as in `birth`.
        return unsafe { Arc::from_raw(Arc::as_ptr(parent)) };
    }
    parent.kin.handles.fetch_add(1, Ordering::Relaxed);
    parent.clone()
}

/// Whether [`cache`] may start the caching of a parent's counts (set `percpu`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Enable {
    /// A birth: its caller holds a handle, whose drop will end the caching again (or the
    /// parent is the root, never killed).
    Yes,
    /// A death's refresh: its caller holds no handle, and the parent's last one may be gone
    /// already (its kill done), so nothing would end a caching started here.
    No,
}

/// Makes one of this thread's entries cache `parent` with fresh credits: a refill when one
/// caches it already with none left, else an install into the way `KinCache` picks (the
/// one caching it, whose counts this folds: also what a count at the end of its range
/// needs; an empty one; or the next in turn, evicted and folded). False when the thread
/// cannot have an entry (its stock is not registered, or it is exiting), or when `enable`
/// is `No` and the parent's caching ended. The parent cannot die meanwhile: the caller
/// holds a handle on it, or is a child not yet counted out.
fn cache(parent: &Arc<Node>, enable: Enable) -> bool {
    let k = key(parent);
    // The owner's own flags: registration and exit are this thread's doing.
    if !STOCK.with(|s| s.registered_live()) {
        return false;
    }
    // The references first: the parent is alive (the caller's handle), and none of this may
    // happen under the registry lock (the allocator takes it on some paths).
    for _ in 0..CREDITS {
        // SAFETY: `as_ptr` has `into_raw`'s provenance; the strong count is at least the
        // caller's.
        unsafe { Arc::increment_strong_count(Arc::as_ptr(parent)) };
    }
    let ok = STOCK.with(|s| {
        if s.kin.credits(k) == Some(0) {
            return s.kin.apply(k, KinOp::AddCredits(CREDITS));
        }
        let g = drain::registry_lock();
        if !parent.kin.percpu.load(Ordering::Relaxed) {
            if enable == Enable::No {
                return false;
            }
            parent.kin.handles.fetch_add(BIAS, Ordering::Relaxed);
            parent.kin.percpu.store(true, Ordering::Relaxed);
        }
        let (way, old) = s.kin.take_for_install(k);
        let old = old.map(|t| (t.node, drain::release_kin(&t)));
        s.kin.install(way, parent.objcg(), k, CREDITS);
        drop(g);
        if let Some((node, credits)) = old {
            drain::release_credits(node, u64::from(credits));
        }
        true
    });
    if !ok {
        drain::release_credits(k, u64::from(CREDITS));
    }
    ok
}

/// Undoes a birth whose child never lived (its node is dropped already).
pub(crate) fn unbirth(parent: &Arc<Node>) {
    if !STOCK.with(|s| s.kin.apply(key(parent), KinOp::Death)) {
        parent.kin.handles.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A dying child's objcg is to be counted on `parent` and hold a reference on it: true when
/// this thread's entry caching it took both (the caller re-points with
/// `Arc::as_ptr(parent)`), false
/// when the caller updates the shared counts.
#[inline]
pub(crate) fn adopt(parent: &Arc<Node>) -> bool {
    let k = key(parent);
    STOCK.with(|s| s.kin.apply(k, KinOp::Adopt))
        || (refreshed(parent) && STOCK.with(|s| s.kin.apply(k, KinOp::Adopt)))
}

/// A child of `parent` died on this thread (its objcg re-pointed already): true when this
/// thread's entry counted it (the parent, holding `BIAS`, does not die of it), false when
/// the caller releases the shared count.
#[inline]
pub(crate) fn death(parent: &Arc<Node>) -> bool {
    let k = key(parent);
    STOCK.with(|s| s.kin.apply(k, KinOp::Death))
        || (refreshed(parent) && STOCK.with(|s| s.kin.apply(k, KinOp::Death)))
}

/// One of this thread's entries names `parent` but refused a count (its credits ran out,
/// or the count is at the end of its range): refilled, or folded and installed again, so
/// that a thread doing only deaths does not go back to the shared counts for good.
#[cold]
#[inline(never)]
fn refreshed(parent: &Arc<Node>) -> bool {
    STOCK.with(|s| s.kin.holds(key(parent))) && cache(parent, Enable::No)
}

/// A zombie objcg pointing at `node` is uncounted there, its reference on `node` released:
/// into the entry of this thread caching `node` (true), else the caller does both.
pub(crate) fn unadopt(node: *const Node) -> bool {
    STOCK.with(|s| s.kin.apply(node as *const u8, KinOp::Unadopt))
}

/// The last `Tenant` handle on `node` is gone: when threads may cache its children's
/// counts, ends that (every entry emptied into the shared counts) and returns true; the
/// caller then removes [`BIAS`] from `handles` with its own count.
pub(crate) fn kill(node: &Arc<Node>) -> bool {
    if !node.kin.percpu.load(Ordering::Relaxed) {
        return false;
    }
    let k = key(node);
    let mut credits = 0u64;
    {
        let g = drain::registry_lock();
        if !node.kin.percpu.load(Ordering::Relaxed) {
            return false;
        }
        drain::for_each_registered(&g, |s| {
            if let Some(t) = s.kin.take_of(k) {
                credits += u64::from(drain::release_kin(&t));
            }
        });
        // Cleared after the folds, Release: a zombie sweep that reads it clear (Acquire)
        // sees the adopted counts folded in (`tenant::sweep_zombies`' check).
        node.kin.percpu.store(false, Ordering::Release);
    }
    // The caller's handle keeps the node: none of these is the last reference.
    drain::release_credits(k, credits);
    true
}

/// The adopted objcgs counted for `node`, in its shared count and in every thread's entry
/// (tests: `Tenant::objcg_list` checks it).
#[cfg(test)]
pub(crate) fn adopted_with_cached(node: &Node) -> isize {
    let shared = |n: &Node| n.kin.adopted.load(Ordering::Relaxed) as i64;
    with_cached(node, shared, |kin, k| kin.adopted_of(k) as i64) as isize
}

/// `handles` of `node` with every thread's cached births folded in, less `BIAS` while
/// `percpu` is set (tests, at quiescence: the live handles plus the live children).
#[cfg(test)]
pub(crate) fn handles_with_cached(node: &Node) -> i64 {
    let shared = |n: &Node| {
        let biased = n.kin.percpu.load(Ordering::Relaxed);
        n.kin.handles.load(Ordering::Relaxed) as i64 - if biased { BIAS as i64 } else { 0 }
    };
    with_cached(node, shared, |kin, k| kin.births_of(k))
}

/// `shared(node)` plus what `of` reads in every thread's entry for `node`, all read under
/// the registry lock so that no fold moves a count meanwhile (tests).
#[cfg(test)]
fn with_cached(
    node: &Node,
    shared: impl Fn(&Node) -> i64,
    of: impl Fn(&crate::kin_entry::KinCache, *const u8) -> i64,
) -> i64 {
    let k = node as *const Node as *const u8;
    let g = drain::registry_lock();
    let mut sum = shared(node);
    drain::for_each_registered(&g, |s| sum += of(&s.kin, k));
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tenant;

    /// A death's refresh never starts the caching again once the parent's last handle
    /// ended it (nothing would end it then, and the parent would never die).
    #[test]
    fn a_refresh_does_not_restart_a_killed_caching() {
        let _serial = crate::tests::serial();
        let parent = Tenant::new("kin-refresh");
        let node = parent.node.clone();
        let kids: Vec<Tenant> = (0..STREAK + 2)
            .map(|i| parent.child(&format!("k{i}")))
            .collect();
        // A charge registers this thread's stock (an entry needs it).
        let id = kids[0].objcg_id();
        // SAFETY: a live tenant's objcg; charged and given back at once.
        unsafe {
            assert!(crate::hooks::charge(id, 64, crate::hooks::StatIdx::slab(0)));
            crate::hooks::uncharge(id, 64, crate::hooks::StatIdx::slab(0));
        }
        let more: Vec<Tenant> = (0..STREAK + 2)
            .map(|i| parent.child(&format!("m{i}")))
            .collect();
        assert!(STOCK.with(|s| s.kin.holds(key(&node))));
        assert!(node.kin.percpu.load(Ordering::Relaxed));
        drop(parent);
        assert!(
            !node.kin.percpu.load(Ordering::Relaxed),
            "the kill ended it"
        );
        assert!(!cache(&node, Enable::No));
        assert!(!node.kin.percpu.load(Ordering::Relaxed));
        assert!(!STOCK.with(|s| s.kin.holds(key(&node))));
        drop(kids);
        drop(more);
        assert!(!node.is_alive(), "the parent died with its last child");
    }
}
