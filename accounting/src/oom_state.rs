//! The OOM state of one tenant node (data only, below the node that holds it): its
//! [`OomPolicy`], its overdraft, whether and when it was killed, its work in flight and the
//! wakers of its pending futures. What is done with it at `max` is policy, in `oom.rs`.

use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use crate::counter::Counter;

/// What happens when a charge does not fit under a tenant's `max`.
///
/// Set per tenant with [`Tenant::set_oom_policy`](crate::Tenant::set_oom_policy); it
/// governs charges refused by *that* tenant's limit, and, for `Kill`, makes the tenant a
/// candidate victim when its own or an ancestor's limit is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OomPolicy {
    /// The charge fails: `alloc` returns null (infallible Rust allocations then abort the
    /// process), `Tenant::charge` returns `Err`. The default, as before kills existed.
    #[default]
    Fail,
    /// A victim in the subtree is killed and the charge goes through the overdraft
    /// ([`Tenant::set_overdraft`](crate::Tenant::set_overdraft)): `current` may reach
    /// `max + overdraft` until the victim's work is dropped at its next safe point.
    Kill,
}

/// `OomState::killed`: not killed, or why it was.
pub(crate) const KILLED_NOT: u8 = 0;
pub(crate) const BY_OOM: u8 = 1;
pub(crate) const BY_REQUEST: u8 = 2;

/// The overdraft when none was set: as much as `max`, at most 64 MiB, so that a `Vec`
/// holding half the limit can double (its new buffer and the old one both charged) while
/// the kill takes effect.
const DEFAULT_OVERDRAFT_CAP: u64 = 64 << 20;
/// `OomState::overdraft` before `set_overdraft`.
const UNSET: u64 = u64::MAX;

/// The OOM state of one node.
pub(crate) struct OomState {
    policy: AtomicU8,
    overdraft: AtomicU64,
    /// `KILLED_NOT`, or why it was killed (`BY_OOM`, `BY_REQUEST`); set once (`oom.rs`).
    pub(crate) killed: AtomicU8,
    /// When it was killed, in nanoseconds since `oom::clock_base()`.
    pub(crate) killed_at: AtomicU64,
    /// Futures (`Scoped`) and wrapped closures of this tenant not finished yet: the work a
    /// kill waits for before it counts the victim as gone.
    pub(crate) inflight: AtomicUsize,
    /// Wakers of this tenant's pending `Scoped` futures, woken when it is killed.
    waiters: Mutex<Waiters>,
}

/// Registered wakers: `slots[i]` is `Some` while the future that registered index `i` is
/// alive; free indexes are in `free`.
pub(crate) struct Waiters {
    pub(crate) slots: Vec<Option<Waker>>,
    pub(crate) free: Vec<usize>,
}

impl OomState {
    pub(crate) const fn new(policy: OomPolicy) -> OomState {
        OomState {
            policy: AtomicU8::new(policy as u8),
            overdraft: AtomicU64::new(UNSET),
            killed: AtomicU8::new(KILLED_NOT),
            killed_at: AtomicU64::new(0),
            inflight: AtomicUsize::new(0),
            waiters: Mutex::new(Waiters {
                slots: Vec::new(),
                free: Vec::new(),
            }),
        }
    }
    pub(crate) fn policy(&self) -> OomPolicy {
        match self.policy.load(Ordering::Relaxed) {
            0 => OomPolicy::Fail,
            _ => OomPolicy::Kill,
        }
    }
    pub(crate) fn set_policy(&self, p: OomPolicy) {
        self.policy.store(p as u8, Ordering::Relaxed);
    }
    pub(crate) fn set_overdraft(&self, bytes: u64) {
        // u64::MAX means "unset"; nobody can use that much anyway.
        self.overdraft
            .store(bytes.min(UNSET - 1), Ordering::Relaxed);
    }
    pub(crate) fn overdraft(&self, max: u64) -> u64 {
        match self.overdraft.load(Ordering::Relaxed) {
            UNSET => max.min(DEFAULT_OVERDRAFT_CAP),
            v => v,
        }
    }
    /// An open overdraft window follows a new `max` or overdraft (racy with the uncharge
    /// that closes it: then the window reopens at the next refusal, which is fine).
    pub(crate) fn limits_changed(&self, c: &Counter) {
        if c.overdraft_open() {
            c.open_overdraft(self.overdraft(c.max()));
        }
    }
    /// One more piece of work in flight (a `Scoped` future or a wrapped closure).
    pub(crate) fn start_work(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
    }
    /// That work finished or was dropped.
    pub(crate) fn end_work(&self) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
    }
    pub(crate) fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }
}
