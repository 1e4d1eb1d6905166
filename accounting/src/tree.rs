//! The tenant tree as a whole: its lock (`TREE`), the root node, the walk of the live
//! tenants, and the locks held across `fork`. Lifecycle work (die, free zombies, `tenant.rs`)
//! is user context and serialised by `TREE`; of the hooks, only the charge failure ladder
//! takes it, briefly, to read a reclaim callback (`tenant::run_reclaim`); every holder of
//! `TREE` runs as the root, so it never enters that ladder itself (`tree_lock`).

use core::cell::UnsafeCell;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::node::{locked, Node};
use crate::objcg;
use crate::oom_state::OomPolicy;
use crate::scope::{self, RootScope};

static TREE: Mutex<()> = Mutex::new(());
static ROOT: OnceLock<Arc<Node>> = OnceLock::new();

pub(crate) fn root_node() -> &'static Arc<Node> {
    ROOT.get_or_init(|| {
        // The static's own handle (1): the root never dies.
        Node::new_arc(None, "root".into(), 1, OomPolicy::Fail)
    })
}

/// Calls `f` for every live tenant but the root, in no particular order. Each node is
/// readable during its call (a read section of its objcg, which a death without the tree
/// lock waits for), not after: a tenant seen alive may die as soon as the call returns.
/// Tenants created or dying meanwhile may or may not be seen. A tenant is seen through its
/// own objcg, which points at it while it lives.
pub(crate) fn for_each_live(_tree: &TreeGuard, mut f: impl FnMut(&Node)) {
    // SAFETY: the caller holds TREE, under which alone objcgs are freed; the walk brackets
    // each call in a read section against the re-pointing of a lock-free death.
    unsafe {
        objcg::for_each_allocated(|id, node| {
            if node.objcg() == id && node.is_alive() {
                f(node)
            }
        })
    };
}

/// The tree lock, taken as the root: every holder may allocate, and an allocation refused
/// inside (charged to a full tenant) would run the charge ladder, whose reclaim step takes
/// this lock again. Fields drop in order: the lock first, then the root scope.
pub(crate) struct TreeGuard {
    _lock: MutexGuard<'static, ()>,
    _root: RootScope,
}

pub(crate) fn tree_lock() -> TreeGuard {
    let root = scope::unscoped();
    TreeGuard {
        _lock: locked(&TREE),
        _root: root,
    }
}

/// The tree lock if no other thread holds it now: for work that may wait for a later call
/// (the lifecycle paths' zombie sweeps), so that two threads starting and ending tenants do
/// not pass the lock back and forth.
pub(crate) fn try_tree_lock() -> Option<TreeGuard> {
    let root = scope::unscoped();
    let lock = match TREE.try_lock() {
        Ok(g) => g,
        // Poisoning is ignored, as in `locked`.
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    Some(TreeGuard {
        _lock: lock,
        _root: root,
    })
}

/// Fork support: the tree lock and the objcg id allocator's lock, held by the forking thread
/// from before `fork` until after it in both processes, so that the child never inherits
/// one held by a thread that does not exist there. Only the forking thread touches this,
/// between its prepare and its parent (or child) handler; a second thread forking at the
/// same time waits for the tree lock in `lock_for_fork` until the first has released.
struct ForkLocks(UnsafeCell<Option<(MutexGuard<'static, ()>, objcg::IdsGuard)>>);

// SAFETY: one thread at a time, serialised by `TREE` itself (see above).
unsafe impl Sync for ForkLocks {}

static FORK_LOCKS: ForkLocks = ForkLocks(UnsafeCell::new(None));

/// Before `fork`: builds the root if no thread has (one being built by another thread would
/// stay half-built in the child) and takes the tree and id locks, which every other lock of
/// the process may be taken under (their holders allocate), so they come first.
pub(crate) fn lock_for_fork() {
    {
        let _root = scope::unscoped();
        let _ = root_node();
    }
    let held = (locked(&TREE), objcg::lock_ids());
    // SAFETY: this thread holds TREE: no other thread is between lock_for_fork and
    // unlock_after_fork.
    unsafe { *FORK_LOCKS.0.get() = Some(held) };
}

/// After `fork`, in the parent and in the child: releases what [`lock_for_fork`] took.
pub(crate) fn unlock_after_fork() {
    // SAFETY: called by the thread that ran lock_for_fork (in the child, its only thread),
    // which holds TREE.
    let held = unsafe { (*FORK_LOCKS.0.get()).take() };
    drop(held);
}
