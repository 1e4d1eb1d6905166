//! Futures carried into tenants on tokio's multi-thread runtime (work stealing): exact
//! charges whichever worker polls, nesting, drops inside the tenant, and kills that wake
//! sleeping futures.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slabcg::{current_tenant, InTenant, SlabAlloc, Tenant};

#[path = "common/yield_once.rs"]
mod yield_once;
use yield_once::yield_once;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// An object made inside a task: its buffer is charged to the tenant that made it.
struct Obj {
    buf: Vec<u8>,
    owner: usize,
    charged: i64,
}

/// What each tenant should be charged: the usable sizes of its live objects.
struct Ledger([AtomicI64; TENANTS]);

const TENANTS: usize = 3;
const TASKS: usize = 300;
const ROUNDS: usize = 12;
const KEEP: usize = 8;

impl Ledger {
    fn make(&self, owner: usize, size: usize) -> Obj {
        let buf = Vec::<u8>::with_capacity(size);
        // SAFETY: a live allocation of the global allocator.
        let charged = unsafe { SlabAlloc::usable_size(buf.as_ptr()) } as i64;
        self.0[owner].fetch_add(charged, Ordering::Relaxed);
        Obj {
            buf,
            owner,
            charged,
        }
    }
    fn free(&self, o: Obj) {
        self.0[o.owner].fetch_sub(o.charged, Ordering::Relaxed);
        assert!(o.buf.capacity() > 0);
        drop(o);
    }
}

/// Sizes from 8 B to 48 KiB, with a large block now and then.
fn size(seed: &mut u64) -> usize {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let r = (*seed >> 33) as usize;
    if r.is_multiple_of(97) {
        300 << 10
    } else {
        8 + r % (48 << 10)
    }
}

/// Waits without allocating until `flag` is set.
async fn wait_for(flag: &AtomicBool, notify: &tokio::sync::Notify) {
    loop {
        let n = notify.notified();
        tokio::pin!(n);
        n.as_mut().enable();
        if flag.load(Ordering::Acquire) {
            return;
        }
        n.await;
    }
}

struct Shared {
    ledger: Ledger,
    /// Objects passed between tasks; capacity reserved up front, so pushing allocates nothing.
    pool: Mutex<Vec<Obj>>,
    quiescent: AtomicUsize,
    release: AtomicBool,
    notify: tokio::sync::Notify,
}

async fn work(k: usize, owner: usize, sh: Arc<Shared>) {
    let mut seed = k as u64 + 1;
    let mut kept: [Option<Obj>; KEEP] = Default::default();
    for round in 0..ROUNDS {
        for j in 0..4 {
            let o = sh.ledger.make(owner, size(&mut seed));
            if j % 2 == 0 {
                sh.pool.lock().unwrap().push(o);
            } else {
                let slot = &mut kept[(round * 2 + j) % KEEP];
                if let Some(old) = slot.replace(o) {
                    sh.ledger.free(old);
                }
            }
        }
        yield_once().await;
        // Free objects other tasks (often other tenants') made.
        for _ in 0..2 {
            let o = sh.pool.lock().unwrap().pop();
            if let Some(o) = o {
                sh.ledger.free(o);
            }
        }
        yield_once().await;
    }
    sh.quiescent.fetch_add(1, Ordering::AcqRel);
    wait_for(&sh.release, &sh.notify).await;
    for o in kept.iter_mut().filter_map(Option::take) {
        sh.ledger.free(o);
    }
}

/// Hundreds of tasks in three tenants yield (so tokio moves them between workers) and pass
/// objects to each other; at a quiescent point every tenant's exact usage equals the ledger
/// of its live objects, and 0 once everything is freed.
#[test]
fn tasks_in_tenants_charge_exactly_whichever_worker_polls() {
    let rt = runtime(4);
    let tenants: Vec<Tenant> = (0..TENANTS)
        .map(|i| Tenant::new(&format!("async-{i}")))
        .collect();
    let sh = Arc::new(Shared {
        ledger: Ledger([const { AtomicI64::new(0) }; TENANTS]),
        pool: Mutex::new(Vec::with_capacity(TASKS * ROUNDS * 2)),
        quiescent: AtomicUsize::new(0),
        release: AtomicBool::new(false),
        notify: tokio::sync::Notify::new(),
    });
    // Warm the workers up outside every tenant, so their own lazily made state is not
    // charged to the first tenant that runs on them.
    rt.block_on(async {
        let hs: Vec<_> = (0..64)
            .map(|_| tokio::spawn(async { yield_once().await }))
            .collect();
        for h in hs {
            h.await.unwrap();
        }
    });
    let handles: Vec<_> = (0..TASKS)
        .map(|k| {
            let owner = k % TENANTS;
            rt.spawn(work(k, owner, sh.clone()).in_tenant(&tenants[owner]))
        })
        .collect();
    // At most 30,000 naps of 2 ms (a minute): a bound against a hang, not a speed check.
    for _ in 0..30_000 {
        if sh.quiescent.load(Ordering::Acquire) == TASKS {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        sh.quiescent.load(Ordering::Acquire),
        TASKS,
        "tasks did not settle"
    );
    for (i, t) in tenants.iter().enumerate() {
        let want = sh.ledger.0[i].load(Ordering::Relaxed);
        assert!(want > 0);
        assert_eq!(
            t.current_exact() as i64,
            want,
            "tenant {i} at the quiescent point"
        );
    }
    sh.release.store(true, Ordering::Release);
    sh.notify.notify_waiters();
    rt.block_on(async {
        for h in handles {
            assert_eq!(h.await.unwrap(), Ok(()));
        }
    });
    for o in sh.pool.lock().unwrap().drain(..) {
        sh.ledger.free(o);
    }
    for (i, t) in tenants.iter().enumerate() {
        assert_eq!(sh.ledger.0[i].load(Ordering::Relaxed), 0);
        assert_eq!(
            t.current_exact(),
            0,
            "tenant {i} after everything was freed"
        );
    }
}

/// A `Scoped` inside a `Scoped` runs in the inner tenant and returns to the outer one;
/// `in_current_tenant` carries the spawner's tenant into `tokio::spawn`; `wrap` carries one
/// into `spawn_blocking`.
#[test]
fn nested_scopes_and_spawned_children() {
    let rt = runtime(2);
    let outer = Tenant::new("outer");
    let inner = outer.child("inner");
    let (o, i) = (outer.clone(), inner.clone());
    let names = rt.block_on(async move {
        let task = async move {
            let a = current_tenant().name().to_owned();
            let b = async {
                yield_once().await;
                current_tenant().name().to_owned()
            }
            .in_tenant(&i)
            .await
            .unwrap();
            yield_once().await;
            let c = current_tenant().name().to_owned();
            let d = tokio::spawn(async { current_tenant().name().to_owned() }.in_current_tenant())
                .await
                .unwrap()
                .unwrap();
            let e = tokio::task::spawn_blocking(i.wrap(|| current_tenant().name().to_owned()))
                .await
                .unwrap();
            [a, b, c, d, e]
        };
        tokio::spawn(task.in_tenant(&o)).await.unwrap().unwrap()
    });
    assert_eq!(names, ["outer", "inner", "outer", "outer", "inner"]);
    assert_eq!(current_tenant(), Tenant::root());
    drop((outer, inner));
}

/// Records, when dropped, the tenant the dropping thread is in (a handle: a name's String
/// would be charged to that tenant and outlive the test's checks).
struct DropProbe(Arc<Mutex<Option<Tenant>>>);
impl Drop for DropProbe {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(current_tenant());
    }
}

/// `kill()` wakes a future asleep on an hour-long timer; it resolves to `Err(Killed)` at
/// once, after its inner future was dropped inside the tenant; the tenant's memory is back.
#[test]
fn kill_wakes_a_sleeping_future_and_drops_it_inside_the_tenant() {
    let rt = runtime(2);
    let t = Tenant::new("sleeper");
    let seen = Arc::new(Mutex::new(None));
    let probe = DropProbe(seen.clone());
    let started = Arc::new(AtomicBool::new(false));
    let st = started.clone();
    let h = rt.spawn(
        async move {
            let _probe = probe;
            let held = vec![7u8; 256 << 10];
            st.store(true, Ordering::Release);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            held.len()
        }
        .in_tenant(&t),
    );
    while !started.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(t.current_exact() >= 256 << 10);
    t.kill();
    let out = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), h).await });
    let err = out
        // Its timer is an hour: ending inside the 10 s timeout means the kill woke it.
        .expect("the killed future was not woken")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.tenant(), "sleeper");
    assert!(!err.by_oom());
    assert_eq!(seen.lock().unwrap().as_ref(), Some(&t));
    assert!(t.is_killed());
    assert_eq!(t.current_exact(), 0);
    assert_eq!(t.events().oom_kill, 0, "kill() is not an OOM kill");
    // A killed tenant stays killed: a new future in it resolves without running.
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let again = rt.block_on(t.scope(async move { r.store(true, Ordering::Relaxed) }));
    assert!(again.is_err());
    assert!(!ran.load(Ordering::Relaxed));
    // Its children die with it.
    assert!(t.child("late").check().is_err());
}

/// An aborted task's future is dropped outside any poll: still inside its tenant.
#[test]
fn aborted_task_is_dropped_inside_its_tenant() {
    let rt = runtime(2);
    let t = Tenant::new("aborted");
    let seen = Arc::new(Mutex::new(None));
    let probe = DropProbe(seen.clone());
    let h = rt.spawn(
        async move {
            let _probe = probe;
            let _held = vec![1u8; 64 << 10];
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        .in_tenant(&t),
    );
    std::thread::sleep(Duration::from_millis(50));
    h.abort();
    let r = rt.block_on(h);
    assert!(r.unwrap_err().is_cancelled());
    assert_eq!(seen.lock().unwrap().as_ref(), Some(&t));
    assert_eq!(t.current_exact(), 0);
    assert!(!t.is_killed());
}

/// `Scoped` is Send for Send futures (tokio::spawn takes it) and Unpin for Unpin ones.
#[test]
fn scoped_is_send_and_unpin_when_the_future_is() {
    fn send<T: Send>(_: &T) {}
    fn unpin<T: Unpin>(_: &T) {}
    let t = Tenant::new("traits");
    let f = t.scope(std::future::ready(1));
    send(&f);
    unpin(&f);
}
