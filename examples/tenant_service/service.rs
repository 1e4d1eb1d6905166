//! The multi-tenant HTTP service of `examples/tenant_service` (also driven in-process by
//! `tests/tenant_service.rs`): each customer, named by the `x-tenant` header (or a `tenant`
//! query parameter), is a tenant under "tenants" with the Kill policy and a limit; each
//! request runs in a child tenant of its own, so one request's blow-up is its own.
//!
//! - `GET /work?kb=N`: builds a working set of about N KiB (a map of owned strings and
//!   small structs), serializes it with serde_json, answers 200 with
//!   `{"tenant":..,"kb":N,"checksum":..,"lane":..,"peak":..}` (the checksum depends only on
//!   N; `peak`: the request tenant's peak bytes, which its high is held against); a
//!   request whose tenant is killed, or whose JSON cannot grow past the limit, answers 503
//!   with a JSON error naming the tenant and its limit (and the customers' shared one,
//!   `total_limit`); 503 too, with `Retry-After`, when the heavy lane is full or busy with
//!   another request of the customer, or when the name is new and the customers' table
//!   ([`Config::max_tenants`]) is full of busy customers.
//! - `GET /spin?ms=N[&lane=heavy]`: N ms of CPU work that allocates nothing (the load runs'
//!   control), on the main workers or on the heavy lane.
//! - `GET /metrics`: `slabcg::prometheus::render()`.
//! - `GET /tenants/NAME/stat`: the customer's memory.stat-like text.
//!
//! **The heavy lane.** A request's tenant has `high` set to [`Config::heavy_bytes`]. A request
//! found above it at a yield point finishes its build on a second runtime whose threads run
//! at nice 19, the lowest nice level: the scheduler gives them about 1.5% of a CPU's weight
//! against each busy main worker, and they use what idle CPU there is. (The kernel slows a
//! cgroup above `memory.high` by reclaim and a sleep penalty; here the service slows a
//! request above its high by CPU priority.) Without the lane, a runaway's build (about 0.14 s
//! for 64 MiB on the 2-vCPU VM of BENCHMARKS.md) holds a main worker, between yields, until
//! its kill. `SCHED_IDLE` ([`Config::heavy_idle`], `--heavy-sched idle`) starves the lane
//! more at full load: a runaway took up to 4.7 s to reach its kill (2.1 s at nice 19), and a
//! `/metrics` scrape, which waits for every thread's stock, up to 512 ms (74 ms at nice 19,
//! as without the lane); below full load, it moves the others' p99 less than nice 19 does
//! (BENCHMARKS.md, section 6). What the lane costs:
//! - under full load a request on it gets little CPU, and keeps its memory meanwhile; at most
//!   [`Config::heavy_queue`] requests are on it at once, and one of each customer, the next
//!   ones answer 503 (so a customer's runaways are killed one at a time, while its other
//!   requests stay under their high: several growing together used up the overdraft of the
//!   first kill while its victim died, and the next refused allocation aborted the process);
//! - a killed request's working set is freed on the lane too; a watchdog on the main workers
//!   frees what is left after 0.2 s (a starved lane), since the OOM killer waits for it only
//!   within a grace period (1 s) before it picks another victim. The kill itself takes
//!   effect at the request's next yield on the lane: under full load that may be later than
//!   the grace, and then the killer may pick another victim;
//! - priority inversion: a lane thread preempted inside the allocator's or the accounting's
//!   short critical sections (a stock, a size class's lock, the OOM walk) makes a main
//!   worker that needs the same one wait until the lane thread runs again (at nice 19, a
//!   scheduler slice at most);
//! - each charge above high counts an `events.high` on the request and its ancestors.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use slabcg::{InTenant, OomPolicy, Tenant};

/// What the service is started with.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Each customer's `max` (bytes).
    pub tenant_max: u64,
    /// Each customer's OOM overdraft (bytes; `None`: the library's, `min(max, 64 MiB)`):
    /// how far the work in flight may pass `max` while the killed request's memory is
    /// freed (`Tenant::set_overdraft`).
    pub overdraft: Option<u64>,
    /// The "tenants" parent's `max` (bytes; `u64::MAX`: unlimited).
    pub total_max: u64,
    /// Run requests in tenants (false: the same service with no tenant at all, for the
    /// load runs' "slabcg without tenants" row).
    pub tenants: bool,
    /// Each request's `high` (bytes): past it, the request finishes on the heavy lane
    /// (`u64::MAX`: no lane; ignored without tenants).
    pub heavy_bytes: u64,
    /// The heavy lane's threads (the example's default: one per CPU). In an A/B on the
    /// 2-vCPU VM of BENCHMARKS.md, two moved the others' p99 by +11% where one moved it by
    /// +47% (6 alternated rounds; why is not established: two keep both CPUs from going idle
    /// between requests, which may spare the normal requests' wake-ups a halted vCPU).
    pub heavy_workers: usize,
    /// Run the heavy lane's threads under `SCHED_IDLE` instead of at nice 19 (module docs).
    pub heavy_idle: bool,
    /// Requests on the heavy lane at once, at most; past it, a request that passes its high
    /// answers 503.
    pub heavy_queue: usize,
    /// How long a killed or cancelled request's frees may take on the heavy lane before a
    /// watchdog on the main workers frees the rest (`release_on_lane`).
    pub heavy_release_budget: std::time::Duration,
    /// Customers' tenants kept at once, at most ([`Customers`]): a new name past it evicts
    /// the least recently used idle customers, or answers 503 when every one has a request
    /// in flight. Bounds what unknown `x-tenant` names cost (a tenant, its map entry, its
    /// metrics series).
    pub max_tenants: usize,
}

pub struct Service {
    cfg: Config,
    parent: Tenant,
    customers: Mutex<Customers>,
    heavy: Option<HeavyLane>,
}

/// The customers' tenants by name, at most [`Config::max_tenants`] of them.
///
/// A request holds its customer's `Arc` until it is done (on the heavy lane too), and the
/// table hands out clones only under its lock (outside it, only a holder clones its own),
/// so an entry whose `Arc` has no other reference, seen under the lock, is idle and stays
/// so until the lock is released: it may be evicted, which drops its tenant (charges it
/// still had go to "tenants", its parent, and its metrics series go). A name seen again
/// gets a new tenant, with its peak and event counts from zero. A killed customer is
/// replaced at once, busy or not ([`Service::customer`]): until its requests in flight
/// have freed what they hold, the name has two tenants, the killed one only shrinking.
#[derive(Default)]
struct Customers {
    by_name: HashMap<String, (Arc<Tenant>, u64)>,
    /// Bumped at every lookup: an entry's last use, for the least-recently-used eviction.
    clock: u64,
}

/// Every customer has a request in flight and the table is full.
#[derive(Debug)]
pub struct TooManyTenants(pub usize);

impl Customers {
    /// Makes room for one more entry in a table of at most `max`: takes out the least
    /// recently used idle entries, an eighth of `max` at a time, so that a stream of new
    /// names costs one pass over the table per `max / 8` names, and returns them for the
    /// caller to drop once it released the lock (a tenant's death takes the tenant tree's
    /// lock). None when every entry is in use.
    fn make_room(&mut self, max: usize) -> Option<Vec<Arc<Tenant>>> {
        if self.by_name.len() < max {
            return Some(Vec::new());
        }
        let mut idle: Vec<(u64, String)> = self
            .by_name
            .iter()
            .filter(|(_, (t, _))| Arc::strong_count(t) == 1)
            .map(|(name, &(_, used))| (used, name.clone()))
            .collect();
        if idle.is_empty() {
            return None;
        }
        let n = (max / 8).clamp(1, idle.len());
        idle.select_nth_unstable(n - 1);
        Some(
            idle[..n]
                .iter()
                .filter_map(|(_, name)| self.by_name.remove(name))
                .map(|(t, _)| t)
                .collect(),
        )
    }
}

/// The low-priority runtime that requests above their `high` finish on, and how many are
/// on it.
struct HeavyLane {
    rt: Option<tokio::runtime::Runtime>,
    queued: Arc<AtomicUsize>,
    max_queued: usize,
    /// The customers with a request on the lane: one at a time each.
    customers: Arc<Mutex<Vec<String>>>,
}

impl HeavyLane {
    fn new(workers: usize, max_queued: usize, idle: bool) -> HeavyLane {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .thread_name("heavy-lane")
            .on_thread_start(move || low_cpu_priority(idle))
            .build()
            .expect("heavy lane runtime");
        HeavyLane {
            rt: Some(rt),
            queued: Arc::new(AtomicUsize::new(0)),
            max_queued,
            customers: Arc::default(),
        }
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.rt
            .as_ref()
            .expect("the lane lives until dropped")
            .handle()
    }

    /// A place on the lane, held until the guard drops; None when the lane is full.
    fn enter(&self) -> Option<LaneSlot> {
        if self.queued.fetch_add(1, Relaxed) >= self.max_queued {
            self.queued.fetch_sub(1, Relaxed);
            return None;
        }
        Some(LaneSlot(self.queued.clone(), None))
    }

    /// [`enter`](Self::enter) for a request of `customer`, refused (with the reason) also
    /// when one of its requests is on the lane already. Its runaways then go one at a time: the OOM killer
    /// takes one victim at a time and holds further kills off while that one dies, and
    /// meanwhile every other request of the customer may use the overdraft, so several
    /// runaways growing together used it up and the next refused allocation aborted the
    /// process. The others answer 503 at their high instead, their memory freed at once.
    fn enter_for(&self, customer: &str) -> Result<LaneSlot, &'static str> {
        let mut on_lane = self.customers.lock().unwrap_or_else(|e| e.into_inner());
        if on_lane.iter().any(|c| c == customer) {
            return Err("heavy lane busy with this customer's request: retry later");
        }
        let mut slot = self.enter().ok_or("heavy lane full: retry later")?;
        on_lane.push(customer.to_owned());
        slot.1 = Some((self.customers.clone(), customer.to_owned()));
        Ok(slot)
    }
}

/// A request's place on the heavy lane (and its customer's, for [`HeavyLane::enter_for`]).
struct LaneSlot(Arc<AtomicUsize>, Option<(Arc<Mutex<Vec<String>>>, String)>);

impl Drop for LaneSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
        if let Some((customers, name)) = self.1.take() {
            let mut on_lane = customers.lock().unwrap_or_else(|e| e.into_inner());
            on_lane.retain(|c| *c != name);
        }
    }
}

/// Set when the handler of a request on the heavy lane is dropped (its client went away):
/// the lane stops building for nobody at its next yield.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

impl Drop for HeavyLane {
    /// The service may be dropped inside the main runtime (the tests do), where dropping a
    /// runtime would block.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread to nice 19, or with `idle` to `SCHED_IDLE` (on Linux both are
/// per thread). An unprivileged thread may always lower itself; if the kernel refuses
/// anyway, the thread says so and runs at its priority.
fn low_cpu_priority(idle: bool) {
    let (refused, what) = if idle {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the
        // calling thread.
        let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        (r != 0, "SCHED_IDLE")
    } else {
        // SAFETY: no pointer is passed; on Linux, PRIO_PROCESS with who 0 is the calling
        // thread only.
        let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
        (r != 0, "nice 19")
    };
    if refused {
        let err = std::io::Error::last_os_error();
        eprintln!("tenant_service: heavy lane: {what} refused ({err}); normal priority");
    }
}

impl Service {
    pub fn new(cfg: Config) -> Arc<Service> {
        let parent = Tenant::new("tenants");
        parent.set_max(cfg.total_max);
        parent.set_oom_policy(OomPolicy::Kill);
        let lane = cfg.tenants && cfg.heavy_bytes != u64::MAX;
        Arc::new(Service {
            cfg,
            parent,
            customers: Mutex::new(Customers::default()),
            heavy: lane.then(|| HeavyLane::new(cfg.heavy_workers, cfg.heavy_queue, cfg.heavy_idle)),
        })
    }

    /// The customer's tenant, made on first use (Kill policy, `tenant_max`); a killed one is
    /// replaced, since a killed tenant stays killed. The caller holds the `Arc` while it
    /// serves the customer: the table does not evict it meanwhile ([`Customers`]). Err when
    /// the name is new, the table full and every customer in it busy.
    pub fn customer(&self, name: &str) -> Result<Arc<Tenant>, TooManyTenants> {
        let mut table = self.customers.lock().unwrap();
        table.clock += 1;
        let now = table.clock;
        if let Some((t, used)) = table.by_name.get_mut(name).filter(|(t, _)| !t.is_killed()) {
            *used = now;
            return Ok(t.clone());
        }
        // A killed customer's entry is replaced below: it needs no room of its own.
        let mut gone = Vec::new();
        if !table.by_name.contains_key(name) {
            match table.make_room(self.cfg.max_tenants.max(1)) {
                Some(evicted) => gone = evicted,
                None => return Err(TooManyTenants(table.by_name.len())),
            }
        }
        let t = Arc::new(self.parent.child(name));
        t.set_max(self.cfg.tenant_max);
        t.set_oom_policy(OomPolicy::Kill);
        if let Some(bytes) = self.cfg.overdraft {
            t.set_overdraft(bytes);
        }
        gone.extend(
            table
                .by_name
                .insert(name.to_owned(), (t.clone(), now))
                .map(|(old, _)| old),
        );
        drop(table);
        // The evicted and the replaced tenants die here, outside the table's lock.
        drop(gone);
        Ok(t)
    }

    /// The customer's tenant if the table has it. An `Arc` clone like [`customer`]'s, not a
    /// second `Tenant` handle: the table sees it held, and does not evict the entry (and
    /// make a second tenant of the name) while a caller reads it.
    pub fn existing(&self, name: &str) -> Option<Arc<Tenant>> {
        let table = self.customers.lock().unwrap();
        table.by_name.get(name).map(|(t, _)| t.clone())
    }
}

pub fn router(svc: Arc<Service>) -> Router {
    Router::new()
        .route("/work", get(work))
        .route("/spin", get(spin))
        .route("/metrics", get(metrics))
        .route("/tenants/{name}/stat", get(stat))
        .with_state(svc)
}

#[derive(Deserialize)]
struct WorkQuery {
    kb: u64,
    tenant: Option<String>,
}

/// One record of a working set.
#[derive(Serialize)]
pub struct Record {
    id: u64,
    name: String,
    tags: Vec<String>,
    score: f64,
}

/// FNV-1a, 64 bits.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// Records in a working set of about `kb` KiB (each record with its key and strings takes
/// about 200 bytes of heap). Saturating: any `kb` a query can carry is a runaway, not an
/// overflow.
pub fn records(kb: u64) -> u64 {
    (kb.saturating_mul(1024) / 200).max(1)
}

/// Record `i` of a working set, with its key.
pub fn record(i: u64) -> (String, Record) {
    let key = format!("key-{i:08}");
    let rec = Record {
        id: i,
        name: format!("customer record number {i}"),
        tags: (0..3).map(|t| format!("tag-{}", (i + t) % 17)).collect(),
        score: (i % 1000) as f64 / 8.0,
    };
    (key, rec)
}

/// Gives the worker to other tasks once: `tokio::task::yield_now`, which puts the task at
/// the back of the worker's queue (a task that wakes itself would go to the LIFO slot and
/// run again at once, ahead of the requests waiting). Polled as the root: tokio parks the
/// waker in a per-worker list that grows inside the poll, which would otherwise be charged
/// to whichever request grew it, for as long as the runtime lives.
async fn yield_now() {
    let mut y = std::pin::pin!(tokio::task::yield_now());
    std::future::poll_fn(|cx| {
        let _root = slabcg::accounting::hooks::unscoped();
        std::future::Future::poll(y.as_mut(), cx)
    })
    .await
}

/// A request's working set.
pub type WorkingSet = BTreeMap<String, Record>;

/// A `/work` request's build: its size, how far it got, and what it built so far. It lives
/// outside the future that builds it, so that a kill (which drops that future at once)
/// leaves the working set to [`release`].
pub struct Work {
    records: u64,
    next: u64,
    set: WorkingSet,
}

impl Work {
    pub fn new(kb: u64) -> Work {
        Work {
            records: records(kb),
            next: 0,
            set: WorkingSet::new(),
        }
    }
}

/// How a [`build`] ended.
pub enum Built {
    /// The checksum of the JSON.
    Done(u64),
    /// `stop()` said so at a yield point: call again (on the heavy lane) to go on.
    Stopped,
    /// The JSON's buffer could not grow: the request's tenant refused it past its limit and
    /// the overdraft the OOM killer grants. The working set is left in the [`Work`].
    OutOfMemory,
}

/// Builds `w`'s working set with a yield every 256 records (a safe point, where a kill takes
/// effect; about 0.2 ms of work), then serializes and frees it and returns the checksum of
/// the JSON.
pub async fn build(w: &mut Work, mut stop: impl FnMut() -> bool) -> Built {
    while w.next < w.records {
        let (k, r) = record(w.next);
        w.set.insert(k, r);
        w.next += 1;
        if w.next.is_multiple_of(256) {
            if stop() {
                return Built::Stopped;
            }
            yield_now().await;
        }
    }
    let mut json = TryVec(Vec::new());
    if serde_json::to_writer(&mut json, &w.set).is_err() {
        return Built::OutOfMemory;
    }
    w.set.clear();
    Built::Done(fnv(&json.0))
}

/// A `Vec<u8>` writer whose growth may fail. Serializing runs in one poll, with no safe point
/// where a kill takes effect, and its buffer doubles: past the tenant's limit and its
/// overdraft (`min(max, 64 MiB)`), `Vec`'s own growth would call `handle_alloc_error` and
/// abort the process, where this ends the request with an error.
struct TryVec(Vec<u8>);

impl std::io::Write for TryVec {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .try_reserve(buf.len())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Frees what a killed build left, 1,024 records at a time with a yield in between: a
/// runaway's working set is hundreds of thousands of objects, and dropping it in one poll
/// would hold a worker for milliseconds while other customers' requests wait behind it.
/// A free needs no scope: each object is uncharged from the tenant that owns it.
pub async fn release(mut set: WorkingSet) {
    while free_slice(&mut set) {
        yield_now().await;
    }
}

/// Frees up to 1,024 records of `set`; whether any are left.
fn free_slice(set: &mut WorkingSet) -> bool {
    for _ in 0..1024 {
        if set.pop_first().is_none() {
            break;
        }
    }
    !set.is_empty()
}

/// [`release`] on the heavy lane, which has idle CPU unless the service is saturated. A
/// watchdog on the main workers (`main`) takes over what is left after `budget`
/// ([`Config::heavy_release_budget`]): a starved lane could not even notice that its time
/// is up, and the OOM killer waits for a victim's frees only within a grace period (1 s)
/// before it picks another one. Returns when every record is freed, by either side.
async fn release_on_lane(
    set: WorkingSet,
    main: &tokio::runtime::Handle,
    budget: std::time::Duration,
) {
    if set.is_empty() {
        return;
    }
    // The lane frees a slice under the lock, the watchdog takes the rest under it: each
    // record is freed once, by one of them.
    let shared = Arc::new(Mutex::new(Some(set)));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let watchdog = main.spawn({
        let shared = shared.clone();
        async move {
            if !budget.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(budget) => {}
                    _ = done_rx => return,
                }
            }
            loop {
                // try_lock: a main worker must not block on a lane thread that the scheduler
                // preempted inside its slice.
                let taken = match shared.try_lock() {
                    Ok(mut rest) => Ok(rest.take()),
                    Err(std::sync::TryLockError::WouldBlock) => Err(()),
                    Err(std::sync::TryLockError::Poisoned(e)) => Ok(e.into_inner().take()),
                };
                match taken {
                    Ok(Some(rest)) => return release(rest).await,
                    Ok(None) => return,
                    Err(()) => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
                }
            }
        }
    });
    loop {
        let left = {
            let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
            let left = g.as_mut().is_some_and(free_slice);
            if !left {
                *g = None;
            }
            left
        };
        if !left {
            break;
        }
        yield_now().await;
    }
    // Wakes a sleeping watchdog (it finds nothing and returns), or waits for the one that took
    // over to finish its frees. A JoinError means the main runtime is shutting down.
    let _ = done_tx.send(());
    let _ = watchdog.await;
}

/// What `build(kb)` answers, computed without a runtime (the tests' oracle).
#[allow(dead_code)] // the example does not call it; tests/tenant_service.rs does
pub fn checksum(kb: u64) -> u64 {
    let map: BTreeMap<String, Record> = (0..records(kb)).map(record).collect();
    fnv(&serde_json::to_vec(&map).expect("serializable"))
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn json(status: StatusCode, v: serde_json::Value) -> Response {
    (status, axum::Json(v)).into_response()
}

async fn work(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Query(q): Query<WorkQuery>,
) -> Response {
    // A header that is there but not text is a bad name, not a missing one (which falls
    // back to the query's `tenant`, then "anonymous").
    let header = match headers.get("x-tenant").map(|v| v.to_str()) {
        Some(Err(_)) => {
            let err = serde_json::json!({"error": "bad tenant name", "tenant": null});
            return json(StatusCode::BAD_REQUEST, err);
        }
        Some(Ok(v)) => Some(v.to_owned()),
        None => None,
    };
    let name = header
        .or(q.tenant)
        .unwrap_or_else(|| "anonymous".to_owned());
    if !valid_name(&name) {
        let err = serde_json::json!({"error": "bad tenant name", "tenant": name});
        return json(StatusCode::BAD_REQUEST, err);
    }
    if !svc.cfg.tenants {
        return match build(&mut Work::new(q.kb), || false).await {
            Built::Done(sum) => json(StatusCode::OK, done(&name, q.kb, sum, "main", None)),
            // A build that never stops finishes, unless memory runs out.
            _ => {
                let err = serde_json::json!({"error": "out of memory", "tenant": name});
                json(StatusCode::SERVICE_UNAVAILABLE, err)
            }
        };
    }
    let customer = match svc.customer(&name) {
        Ok(c) => c,
        Err(TooManyTenants(n)) => {
            let err = serde_json::json!({
                "error": "too many tenants, all busy: retry later",
                "tenant": name,
                "tenants": n,
            });
            let mut resp = json(StatusCode::SERVICE_UNAVAILABLE, err);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return resp;
        }
    };
    // A tenant per request: the OOM killer picks the request with the most memory of its
    // own, so a runaway request dies and the customer's other requests go on.
    let request = customer.child("request");
    request.set_high(svc.cfg.heavy_bytes);
    // The request counts as work in flight until its working set is freed, so the OOM
    // killer waits for those frees before it kills again.
    let in_flight = request.work_in_flight();
    let mut work = Work::new(q.kb);
    let heavy = svc.heavy.as_ref();
    let over_high = || heavy.is_some() && request.under_pressure();
    // The outcome: the checksum, or the 503's error and detail.
    let (outcome, lane) = match build(&mut work, over_high).in_tenant(&request).await {
        Ok(Built::Done(sum)) => (Ok(sum), "main"),
        Ok(Built::OutOfMemory) => {
            release(work.set).await;
            (Err((REFUSED, SERIALIZE_REFUSED.to_owned())), "main")
        }
        Err(killed) => {
            release(work.set).await;
            (Err((KILLED, killed.to_string())), "main")
        }
        Ok(Built::Stopped) => {
            let lane = heavy.expect("stops only with a lane");
            let slot = match lane.enter_for(&name) {
                Ok(slot) => slot,
                Err(why) => {
                    release(work.set).await;
                    let err = serde_json::json!({
                        "error": why,
                        "tenant": name,
                        "high": svc.cfg.heavy_bytes,
                        "lane": "main",
                    });
                    let mut resp = json(StatusCode::SERVICE_UNAVAILABLE, err);
                    resp.headers_mut()
                        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
                    return resp;
                }
            };
            let main = tokio::runtime::Handle::current();
            let budget = svc.cfg.heavy_release_budget;
            let cancelled = Arc::new(AtomicBool::new(false));
            let _cancel = CancelOnDrop(cancelled.clone());
            let req = request.clone();
            // The customer stays in use while the lane works for it, even if this handler
            // is dropped (a client gone), so the table does not evict it meanwhile.
            let in_use = customer.clone();
            let rest = lane.handle().spawn(async move {
                let _slot = slot;
                let _customer = in_use;
                let out = build(&mut work, || cancelled.load(Relaxed))
                    .in_tenant(&req)
                    .await;
                release_on_lane(std::mem::take(&mut work.set), &main, budget).await;
                drop(in_flight);
                out
            });
            match rest.await {
                Ok(Ok(Built::Done(sum))) => (Ok(sum), "heavy"),
                Ok(Ok(Built::OutOfMemory)) => {
                    (Err((REFUSED, SERIALIZE_REFUSED.to_owned())), "heavy")
                }
                Ok(Err(killed)) => (Err((KILLED, killed.to_string())), "heavy"),
                // Ok(Ok(Stopped)): cancelled, which only this handler's drop does, so not seen
                // here; Err: the lane task panicked or the lane shut down (`HeavyLane::drop`).
                lost => {
                    let detail = match lost {
                        Err(e) => e.to_string(),
                        _ => "cancelled".to_owned(),
                    };
                    let err = serde_json::json!({
                        "error": "the heavy lane lost the request",
                        "tenant": name,
                        "lane": "heavy",
                        "detail": detail,
                    });
                    return json(StatusCode::INTERNAL_SERVER_ERROR, err);
                }
            }
        }
    };
    match outcome {
        Ok(sum) => json(
            StatusCode::OK,
            done(&name, q.kb, sum, lane, Some(request.peak())),
        ),
        Err((error, detail)) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({
                "error": error,
                "tenant": name,
                "limit": customer.max(),
                // The customers' shared limit (`--total-max`), which may be the one that
                // refused; null when unlimited.
                "total_limit": (svc.cfg.total_max != u64::MAX).then_some(svc.cfg.total_max),
                "lane": lane,
                "detail": detail,
            }),
        ),
    }
}

/// The 503's `error` for a request the OOM killer killed.
const KILLED: &str = "request killed: out of memory";
/// The 503's `error` and `detail` when the JSON's buffer could not grow
/// ([`Built::OutOfMemory`]): refused, whether or not the request was killed.
const REFUSED: &str = "request refused: out of memory";
const SERIALIZE_REFUSED: &str = "serializing the working set passed the tenant's limit";

/// The body of a `/work` that finished: with the request tenant's peak usage in bytes
/// (null without tenants), which is what its `high` is compared with.
fn done(tenant: &str, kb: u64, sum: u64, lane: &str, peak: Option<u64>) -> serde_json::Value {
    serde_json::json!({
        "tenant": tenant,
        "kb": kb,
        "checksum": format!("{sum:016x}"),
        "lane": lane,
        "peak": peak,
    })
}

#[derive(Deserialize)]
struct SpinQuery {
    ms: u64,
    lane: Option<String>,
}

/// `GET /spin?ms=N`: N ms of CPU-bound work that allocates nothing, in slices of about 50 us
/// with a yield between, as `build` yields: the load runs' control for a runaway request,
/// to tell the runaway's own CPU from what its kill costs.
/// With `lane=heavy`, the spin runs on the heavy lane (where there is one).
async fn spin(State(svc): State<Arc<Service>>, Query(q): Query<SpinQuery>) -> Response {
    let ms = q.ms.min(10_000);
    let x = match svc
        .heavy
        .as_ref()
        .filter(|_| q.lane.as_deref() == Some("heavy"))
    {
        Some(lane) => {
            let Some(slot) = lane.enter() else {
                return (StatusCode::SERVICE_UNAVAILABLE, "heavy lane full\n").into_response();
            };
            let spun = lane.handle().spawn(async move {
                let _slot = slot;
                spin_for(ms).await
            });
            match spun.await {
                Ok(x) => x,
                Err(e) => {
                    return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
                }
            }
        }
        None => spin_for(ms).await,
    };
    (StatusCode::OK, format!("{x}\n")).into_response()
}

async fn spin_for(ms: u64) -> u64 {
    let t0 = std::time::Instant::now();
    let mut x = 0u64;
    while t0.elapsed().as_millis() < u128::from(ms) {
        let s = std::time::Instant::now();
        while s.elapsed().as_micros() < 50 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        yield_now().await;
    }
    x
}

async fn metrics() -> Response {
    let body = slabcg::prometheus::render();
    (
        [(header::CONTENT_TYPE, slabcg::prometheus::CONTENT_TYPE)],
        body,
    )
        .into_response()
}

async fn stat(State(svc): State<Arc<Service>>, Path(name): Path<String>) -> Response {
    match svc.existing(&name) {
        Some(t) => (StatusCode::OK, t.stat().to_string()).into_response(),
        None => (StatusCode::NOT_FOUND, format!("no tenant '{name}'\n")).into_response(),
    }
}
