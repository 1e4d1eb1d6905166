//! Work carried into a tenant: futures ([`Scoped`], [`InTenant`]) and closures
//! ([`Tenant::wrap`]), and the safe points where a killed tenant's work ends.
//!
//! A tokio task moves between worker threads at every `.await`, so a thread scope cannot
//! follow it; `Scoped` enters its tenant around every poll instead (as tracing's
//! `Instrument` enters its span), and around the drop of the inner future, which for an
//! aborted task happens outside any poll. Per poll that is one read of the kill epoch (a
//! shared word written only by kills), the thread-local stores of a scope frame, and, when
//! the inner future is pending, a `will_wake` compare against the waker it registered:
//! no lock, no allocation, no write to a shared line. The waker is registered with the
//! tenant on the first pending poll (and again only if the task's waker changes), so that
//! a kill can wake a victim asleep on a timer.
//!
//! Kill protocol (`oom.rs` sets the flag, then bumps the epoch; the reaper then locks each
//! killed tenant's waiter list and wakes what it finds): a pending poll registers its waker
//! *before* its last look at the epoch. If the reaper's lock came first, the registration's
//! lock acquires after it and the look sees the new epoch; otherwise the reaper finds the
//! waker. Either way a pending future of a killed tenant is not left asleep.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use crate::node::Tenant;
use crate::objcg;
use crate::oom::{self, Killed};
use crate::scope;

/// A future carried into a tenant: made by [`Tenant::scope`], [`InTenant::in_tenant`] or
/// [`InTenant::in_current_tenant`].
///
/// Every poll of the inner future, and its drop, runs inside the tenant's scope, whichever
/// thread polls, so its allocations are charged exactly as inside [`Tenant::enter`]. The
/// output is `Ok` with the inner future's output, or `Err(Killed)` once the tenant (or an
/// ancestor) was killed: then the inner future is dropped, inside the tenant, at the next
/// poll, without being polled again. A killed tenant's pending futures are woken so that
/// this happens promptly. `Scoped<F>` is `Send` when `F` is (for `tokio::spawn`) and `Unpin`
/// when `F` is. Allocations the runtime makes for the task outside its polls (the spawn
/// itself) belong to the spawner's scope.
///
/// ```
/// use slabcg_accounting::{InTenant, Tenant};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     use std::task::{Context, Poll, Waker};
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = Context::from_waker(Waker::noop());
/// #     loop { if let Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
/// let customer = Tenant::new("customer-9");
/// let request = async { vec![0u8; 4096].len() };
/// // With tokio: tokio::spawn(request.in_tenant(&customer)).await
/// assert_eq!(block_on(request.in_tenant(&customer)), Ok(4096));
///
/// customer.kill();
/// let err = block_on(customer.scope(async { 1 })).unwrap_err();
/// assert_eq!(err.tenant(), "customer-9");
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Scoped<F> {
    /// Structurally pinned: never moved out, only dropped in place (`drop_inner`).
    inner: Option<F>,
    tenant: Tenant,
    /// The kill epoch at the last look (`oom::epoch`).
    seen: u64,
    /// The registered waker's index in the tenant's list, and a copy to compare with.
    waiter: Option<(usize, Waker)>,
    /// Whether this future still counts as work in flight of its tenant.
    inflight: bool,
}

impl<F> Scoped<F> {
    fn new(tenant: Tenant, inner: F) -> Scoped<F> {
        tenant.node().oom.start_work();
        Scoped {
            inner: Some(inner),
            tenant,
            seen: 0,
            waiter: None,
            inflight: true,
        }
    }

    /// The tenant this future runs in.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// The killed tenant's error if a kill happened since the last look and took this
    /// tenant down.
    #[inline(always)]
    fn killed(&mut self) -> Option<Killed> {
        let e = oom::epoch();
        if e == self.seen {
            return None;
        }
        self.seen = e;
        self.killed_slow()
    }

    #[cold]
    #[inline(never)]
    fn killed_slow(&self) -> Option<Killed> {
        oom::killed_by(self.tenant.node()).map(oom::killed_error)
    }

    /// Drops the inner future in place, inside the tenant.
    fn drop_inner(&mut self) {
        if self.inner.is_some() {
            let _in = scope::enter_borrowed(&self.tenant);
            // SAFETY: `inner` is structurally pinned; setting it to None drops the future in
            // place, which the pinning contract allows.
            unsafe { Pin::new_unchecked(&mut self.inner) }.set(None);
        }
    }

    /// The end of this future's work: unregister, and stop counting it in flight.
    fn finish(&mut self) {
        if let Some((i, _)) = self.waiter.take() {
            oom::remove_waiter(self.tenant.node(), i);
        }
        if core::mem::take(&mut self.inflight) {
            self.tenant.node().oom.end_work();
        }
    }

    /// Keeps the tenant's record of this task's waker current.
    #[inline(always)]
    fn register(&mut self, waker: &Waker) {
        match &mut self.waiter {
            Some((_, w)) if w.will_wake(waker) => {}
            _ => self.register_slow(waker),
        }
    }

    #[cold]
    #[inline(never)]
    fn register_slow(&mut self, waker: &Waker) {
        match &mut self.waiter {
            Some((i, w)) => {
                w.clone_from(waker);
                oom::update_waiter(self.tenant.node(), *i, waker.clone());
            }
            None => {
                let i = oom::add_waiter(self.tenant.node(), waker.clone());
                self.waiter = Some((i, waker.clone()));
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn end_killed(&mut self, k: Killed) -> Poll<Result<F::Output, Killed>>
    where
        F: Future,
    {
        self.drop_inner();
        self.finish();
        Poll::Ready(Err(k))
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = Result<F::Output, Killed>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: only `inner` is pinned, and it is never moved out (see `drop_inner`).
        let this = unsafe { self.get_unchecked_mut() };
        if let Some(k) = this.killed() {
            return this.end_killed(k);
        }
        let polled = {
            let _in = scope::enter_borrowed(&this.tenant);
            match this.inner.as_mut() {
                // SAFETY: `inner` is structurally pinned (this future is).
                Some(f) => unsafe { Pin::new_unchecked(f) }.poll(cx),
                None => panic!("slabcg: Scoped future polled after it completed"),
            }
        };
        match polled {
            Poll::Ready(v) => {
                this.drop_inner();
                this.finish();
                Poll::Ready(Ok(v))
            }
            Poll::Pending => {
                this.register(cx.waker());
                // After registering: see the module doc.
                match this.killed() {
                    Some(k) => this.end_killed(k),
                    None => Poll::Pending,
                }
            }
        }
    }
}

impl<F> Drop for Scoped<F> {
    fn drop(&mut self) {
        self.drop_inner();
        self.finish();
    }
}

/// Carries any future into a tenant (implemented for every `Future`).
pub trait InTenant: Future + Sized {
    /// This future, run inside `tenant` (see [`Scoped`]).
    fn in_tenant(self, tenant: &Tenant) -> Scoped<Self> {
        tenant.scope(self)
    }
    /// This future, run inside the tenant the calling thread is in now: carries the
    /// spawner's scope into `tokio::spawn`, as tracing's `in_current_span`.
    fn in_current_tenant(self) -> Scoped<Self> {
        Scoped::new(crate::tenant::current_tenant(), self)
    }
}

impl<F: Future> InTenant for F {}

impl Tenant {
    /// Runs `fut` inside this tenant, on whichever thread polls it (see [`Scoped`]).
    pub fn scope<F: Future>(&self, fut: F) -> Scoped<F> {
        Scoped::new(self.clone(), fut)
    }

    /// `f`, made to run inside this tenant wherever it is called: for
    /// `tokio::task::spawn_blocking`, thread pools and callbacks. Like a future, it counts
    /// as this tenant's work in flight while it runs (a dying victim's work). A killed
    /// tenant's closure still runs (it cannot be stopped from outside): call
    /// [`check`](Tenant::check) or [`checkpoint`](crate::checkpoint) in its loops.
    ///
    /// ```
    /// use slabcg_accounting::{current_tenant, Tenant};
    /// let job = Tenant::new("report-job");
    /// let work = job.wrap(|| current_tenant().name().to_owned());
    /// assert_eq!(std::thread::spawn(work).join().unwrap(), "report-job");
    /// ```
    pub fn wrap<F, R>(&self, f: F) -> impl FnOnce() -> R
    where
        F: FnOnce() -> R,
    {
        let tenant = self.clone();
        move || {
            struct Work<'a>(&'a Tenant);
            impl Drop for Work<'_> {
                fn drop(&mut self) {
                    self.0.node().oom.end_work();
                }
            }
            tenant.node().oom.start_work();
            let _work = Work(&tenant);
            let _in = tenant.enter();
            f()
        }
    }

    /// Counts work of this tenant in flight until the guard drops, as a [`Scoped`] future
    /// or a [`wrap`](Tenant::wrap)ped closure does. After a kill, the OOM killer picks no new
    /// victim in the refusing subtree (for up to a second) while the killed tenant still has
    /// work in flight: that work is winding down and freeing. Hold one while a killed
    /// request's memory that lives outside its future is freed, so that the next refusal
    /// waits for it instead of killing another victim.
    ///
    /// ```
    /// use slabcg_accounting::Tenant;
    /// let request = Tenant::new("request");
    /// let working_set: Vec<String> = Vec::new();
    /// let freeing = request.work_in_flight();
    /// drop(working_set); // freed in slices, with yields, in a real service
    /// drop(freeing);
    /// ```
    pub fn work_in_flight(&self) -> InFlight {
        self.node().oom.start_work();
        InFlight {
            tenant: self.clone(),
        }
    }
}

/// Work of a tenant in flight, from [`Tenant::work_in_flight`] until dropped.
#[must_use = "the work ends when the guard drops"]
pub struct InFlight {
    tenant: Tenant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.tenant.node().oom.end_work();
    }
}

/// A safe point for synchronous code: `Err(Killed)` once the tenant this thread is in now,
/// or one of its ancestors, was killed. `Ok` outside every scope. One load when nothing was
/// ever killed.
///
/// ```
/// use slabcg_accounting::{checkpoint, Tenant};
/// let job = Tenant::new("import");
/// let _in = job.enter();
/// assert!(checkpoint().is_ok());
/// job.kill();
/// assert_eq!(checkpoint().unwrap_err().tenant(), "import");
/// ```
pub fn checkpoint() -> Result<(), Killed> {
    if oom::epoch() == 0 {
        return Ok(());
    }
    // No handle is made (a shared-line write per call): the live scope that set the id
    // holds one.
    let Some(oc) = objcg::lookup(scope::current_objcg()) else {
        return Ok(());
    };
    // SAFETY: the live scope guard (or `Scoped`) that set this thread's current id holds a
    // handle on its tenant, hence the objcg's alive ref, for as long as the scope lasts.
    let Some(node) = (unsafe { oc.read() }) else {
        return Ok(());
    };
    let killed = oom::killed_by(&node).map(|k| k.arc());
    drop(node);
    match killed {
        None => Ok(()),
        // The error is made (it allocates) after the reader section.
        Some(k) => Err(k.map_or_else(oom::killed_unnamed, |k| oom::killed_error(&k))),
    }
}
