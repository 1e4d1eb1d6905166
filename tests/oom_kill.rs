//! `OomPolicy::Kill`: a runaway tenant using only infallible allocations is killed and its
//! work ends at a safe point while the process and its neighbours live; under a shared
//! parent limit the biggest child is the victim; `current` never passes max + overdraft.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use slabcg::{checkpoint, InTenant, OomPolicy, SlabAlloc, Tenant};

#[path = "common/yield_once.rs"]
mod yield_once;
use yield_once::yield_once;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// Reads `t.current()` in a loop until stopped; returns the highest value seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl Sampler {
    fn start(t: &Tenant) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, t) = (stop.clone(), t.clone());
        let handle = std::thread::spawn(move || {
            let mut top = 0;
            while !s.load(Ordering::Relaxed) {
                top = top.max(t.current());
                std::hint::spin_loop();
            }
            top.max(t.current())
        });
        Sampler { stop, handle }
    }
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// A neighbour's work: a map of owned strings, rebuilt with yields; the checksum depends
/// only on `n`.
async fn neighbour(n: u64) -> u64 {
    let mut sum = 0u64;
    for round in 0..20u64 {
        let m: BTreeMap<u64, String> = (0..n).map(|i| (i, format!("item-{i}-{round}"))).collect();
        sum = m
            .values()
            .fold(sum, |a, s| a.wrapping_mul(31).wrapping_add(s.len() as u64));
        yield_once().await;
    }
    sum
}

/// The runaway: pushes strings into a vector forever, yielding now and then; only
/// infallible allocations.
async fn runaway() -> usize {
    let mut v: Vec<String> = Vec::new();
    let mut i = 0u64;
    while i < u64::MAX {
        v.push(format!("row {i} of a request that never stops"));
        i += 1;
        if i.is_multiple_of(64) {
            yield_once().await;
        }
    }
    v.len()
}

#[test]
fn a_runaway_is_killed_and_its_neighbours_finish() {
    const MAX: u64 = 4 << 20;
    let rt = runtime();
    let bad = Tenant::new("runaway");
    bad.set_max(MAX);
    bad.set_oom_policy(OomPolicy::Kill);
    let limit = MAX + bad.overdraft();
    assert_eq!(
        bad.overdraft(),
        MAX,
        "the default overdraft is min(max, 64 MiB)"
    );
    let good: Vec<Tenant> = (0..3)
        .map(|i| {
            let t = Tenant::new(&format!("neighbour-{i}"));
            t.set_max(64 << 20);
            t.set_oom_policy(OomPolicy::Kill);
            t
        })
        .collect();
    let want = rt.block_on(neighbour(500));
    let sampler = Sampler::start(&bad);
    let (killed, results) = rt.block_on(async {
        let r = tokio::spawn(runaway().in_tenant(&bad));
        let ns: Vec<_> = good
            .iter()
            .flat_map(|t| (0..4).map(move |_| tokio::spawn(neighbour(500).in_tenant(t))))
            .collect();
        let mut results = Vec::new();
        for h in ns {
            results.push(h.await.unwrap());
        }
        (r.await.unwrap(), results)
    });
    let top = sampler.finish();
    let k = killed.unwrap_err();
    assert_eq!(k.tenant(), "runaway");
    assert!(k.by_oom());
    assert!(k.to_string().contains("runaway"), "{k}");
    for r in results {
        assert_eq!(r, Ok(want));
    }
    assert!(
        top <= limit,
        "current reached {top}, above max + overdraft {limit}"
    );
    assert!(bad.peak() <= limit, "peak {} above {limit}", bad.peak());
    assert!(bad.peak() > MAX, "the kill happened at the limit");
    assert_eq!(bad.events().oom_kill, 1);
    assert_eq!(bad.events_local().oom_kill, 1);
    assert_eq!(bad.events().oom, 0, "no allocation failed");
    assert!(bad.is_killed());
    assert_eq!(
        bad.current_exact(),
        0,
        "the killed tenant's work was dropped"
    );
    for t in &good {
        assert_eq!(t.events().oom_kill, 0);
        assert!(!t.is_killed());
        assert_eq!(t.current_exact(), 0);
    }
}

#[test]
fn under_a_shared_limit_the_biggest_child_dies_even_asleep() {
    const MAX: u64 = 8 << 20;
    const CHUNK: usize = 64 << 10;
    let rt = runtime();
    let parent = Tenant::new("shared");
    parent.set_max(MAX);
    parent.set_oom_policy(OomPolicy::Kill);
    let big = parent.child("big");
    let small = parent.child("small");
    assert_eq!(
        small.oom_policy(),
        OomPolicy::Kill,
        "children inherit the policy"
    );
    let ready = Arc::new(AtomicBool::new(false));
    let r = ready.clone();
    let sampler = Sampler::start(&parent);
    let big_task = rt.spawn(
        async move {
            let held: Vec<Vec<u8>> = (0..96).map(|_| vec![1u8; CHUNK]).collect(); // 6 MiB
            r.store(true, Ordering::Release);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            held.len()
        }
        .in_tenant(&big),
    );
    while !ready.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let small_task = rt.spawn(
        async move {
            // 4 MiB: the parent's limit refuses part way, with this child the smaller one.
            let mut v = Vec::with_capacity(64);
            for i in 0..64u32 {
                v.push(vec![2u8; CHUNK]);
                if i.is_multiple_of(8) {
                    yield_once().await;
                }
            }
            v.iter().map(|c| c[0] as usize).sum::<usize>()
        }
        .in_tenant(&small),
    );
    let (b, s) = rt.block_on(async {
        let b = tokio::time::timeout(Duration::from_secs(20), big_task).await;
        (b, small_task.await)
    });
    let top = sampler.finish();
    let err = b
        // Its timer is an hour: ending inside the 20 s timeout means the kill woke it.
        .expect("the sleeping victim was not woken")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.tenant(), "shared/big");
    assert_eq!(s.unwrap(), Ok(2 * 64));
    assert_eq!(big.events_local().oom_kill, 1);
    assert_eq!(small.events().oom_kill, 0);
    assert_eq!(parent.events().oom_kill, 1, "counted up the tree");
    assert_eq!(parent.events_local().oom_kill, 0);
    assert!(big.is_killed() && !small.is_killed() && !parent.is_killed());
    let limit = MAX + parent.overdraft();
    assert!(top <= limit, "parent current reached {top} > {limit}");
    assert_eq!(parent.current_exact(), 0);
}

/// A synchronous loop in a Kill tenant stops at its checkpoint, with infallible allocations
/// only.
#[test]
fn a_sync_thread_is_stopped_at_its_checkpoint() {
    const MAX: u64 = 2 << 20;
    let t = Tenant::new("sync-job");
    t.set_max(MAX);
    t.set_oom_policy(OomPolicy::Kill);
    let top = Arc::new(AtomicU64::new(0));
    let (t2, top2) = (t.clone(), top.clone());
    let (pushed, err) = std::thread::spawn(move || {
        let _in = t2.enter();
        let mut v: Vec<Vec<u8>> = Vec::new();
        loop {
            v.push(vec![3u8; 16 << 10]);
            top2.fetch_max(t2.current(), Ordering::Relaxed);
            if let Err(k) = checkpoint() {
                return (v.len(), k);
            }
        }
    })
    .join()
    .unwrap();
    assert!(pushed as u64 * (16 << 10) >= MAX - (64 << 10));
    assert_eq!(err.tenant(), "sync-job");
    assert!(t.check().is_err());
    assert_eq!(t.events().oom_kill, 1);
    assert!(top.load(Ordering::Relaxed) <= MAX + t.overdraft());
    assert_eq!(t.current_exact(), 0);
}

/// Past max + overdraft a Kill tenant's charges fail as under Fail (null, no second kill);
/// with nothing of its own to kill, a Kill tenant fails at once.
#[test]
fn past_the_overdraft_charges_fail() {
    use std::alloc::{GlobalAlloc, Layout};
    const MAX: u64 = 1 << 20;
    let t = Tenant::new("bounded");
    t.set_max(MAX);
    t.set_oom_policy(OomPolicy::Kill);
    t.set_overdraft(256 << 10);
    assert_eq!(t.overdraft(), 256 << 10);
    let l = Layout::from_size_align(4096, 8).unwrap();
    let mut ps = Vec::with_capacity(1024);
    let _in = t.enter();
    loop {
        // SAFETY: a valid layout.
        let p = unsafe { GLOBAL.alloc(l) };
        if p.is_null() {
            break;
        }
        ps.push(p as usize);
        assert!(ps.len() < 1024, "never refused");
    }
    drop(_in);
    let got = ps.len() as u64 * 4096;
    assert!(got > MAX && got <= MAX + (256 << 10), "{got}");
    assert_eq!(t.events().oom_kill, 1);
    assert_eq!(t.events().oom, 1);
    assert!(t.current_exact() <= MAX + (256 << 10));
    for p in ps {
        // SAFETY: allocated above with l.
        unsafe { GLOBAL.dealloc(p as *mut u8, l) };
    }
    assert_eq!(t.current_exact(), 0);

    // A Kill tenant whose subtree holds nothing (the charge is all its own) of a parent
    // whose children are Fail: no victim, so the charge fails.
    let p = Tenant::new("no-victims");
    p.set_max(64 << 10);
    p.set_oom_policy(OomPolicy::Kill);
    let c = p.child("fail-child");
    c.set_oom_policy(OomPolicy::Fail);
    let _in = c.enter();
    let mut v: Vec<u8> = Vec::new();
    // black_box: an optimised build may otherwise elide the unused allocation and its free
    // (LLVM may remove an allocator call whose block nobody reads), and the reservation then
    // succeeds without reaching the allocator.
    assert!(std::hint::black_box(&mut v).try_reserve(128 << 10).is_err());
    std::hint::black_box(&v);
    drop(_in);
    assert_eq!(p.events().oom_kill, 0);
    assert!(!p.is_killed() && !c.is_killed());
}

const MIB: u64 = 1 << 20;

/// A Kill-policy parent limited to 4 MiB with a 1 MiB overdraft, for the kill-order tests.
fn limited_parent(name: &str) -> Tenant {
    let p = Tenant::new(name);
    p.set_max(4 * MIB);
    p.set_overdraft(MIB);
    p.set_oom_policy(OomPolicy::Kill);
    p
}

/// Pushes 64 KiB chunks with fallible reservations inside `t` until a reservation fails or
/// a checkpoint reports the kill; returns the chunks (still charged) and whether it was
/// killed.
fn fill(t: &Tenant, chunks: &mut Vec<Vec<u8>>, most: usize) -> bool {
    let _in = t.enter();
    for _ in 0..most {
        let mut v: Vec<u8> = Vec::new();
        if v.try_reserve_exact(64 << 10).is_err() {
            break;
        }
        v.resize(64 << 10, 9);
        chunks.push(v);
        if checkpoint().is_err() {
            return true;
        }
    }
    checkpoint().is_err()
}

/// A victim whose kill frees nothing (its memory is held outside its work) does not switch
/// the killer off: once the overdraft is spent, the next refusal kills the next victim.
#[test]
fn a_victim_that_frees_nothing_does_not_stop_the_next_kill() {
    let p = limited_parent("frees-nothing");
    let cache = p.child("cache");
    cache.charge(3 * MIB, slabcg::StatItem::Sock).unwrap();
    let runaway = p.child("runaway");
    let mut chunks = Vec::with_capacity(1000);
    let stopped = fill(&runaway, &mut chunks, 1000);
    assert!(cache.is_killed(), "the biggest was the first victim");
    assert!(
        stopped && runaway.is_killed(),
        "the runaway was killed next"
    );
    assert_eq!(p.events().oom_kill, 2);
    assert!(p.peak() <= 5 * MIB, "peak {}", p.peak());
    drop(chunks);
    cache.uncharge(3 * MIB, slabcg::StatItem::Sock);
    assert_eq!(p.current_exact(), 0);
}

/// The same, but the first victim's memory is being freed outside its futures under a
/// `work_in_flight` guard (a service freeing a killed request's working set in slices): the
/// next refusal waits for it instead of killing the next victim, and fails as under Fail.
#[test]
fn work_in_flight_holds_off_the_next_kill() {
    let p = limited_parent("in-flight");
    let cache = p.child("cache");
    cache.charge(3 * MIB, slabcg::StatItem::Sock).unwrap();
    let freeing = cache.work_in_flight();
    let runaway = p.child("runaway");
    let mut chunks = Vec::with_capacity(1000);
    let stopped = fill(&runaway, &mut chunks, 1000);
    assert!(cache.is_killed(), "the biggest was the first victim");
    assert!(
        !stopped && !runaway.is_killed(),
        "no second victim while the first one's work is in flight"
    );
    assert_eq!(p.events().oom_kill, 1);
    assert!(p.peak() <= 5 * MIB, "peak {}", p.peak());
    drop(chunks);
    cache.uncharge(3 * MIB, slabcg::StatItem::Sock);
    drop(freeing);
    assert_eq!(p.current_exact(), 0);
}

/// With no overdraft a charge kills at most one victim (and, the victim's memory being held
/// elsewhere, fails); `events.max` counts the refused charge once.
#[test]
fn one_charge_kills_at_most_one_victim() {
    let p = Tenant::new("no-overdraft");
    p.set_max(1 << 20);
    p.set_overdraft(0);
    p.set_oom_policy(OomPolicy::Kill);
    let held: Vec<(Tenant, Vec<u8>)> = (0..4)
        .map(|i| {
            let c = p.child(&format!("holder-{i}"));
            let v = {
                let _in = c.enter();
                vec![1u8; 200 << 10]
            };
            (c, v)
        })
        .collect();
    let late = p.child("late");
    let mut v: Vec<u8> = Vec::new();
    let refused = {
        let _in = late.enter();
        std::hint::black_box(&mut v)
            .try_reserve_exact(300 << 10)
            .is_err()
    };
    assert!(refused, "no overdraft: the charge still does not fit");
    assert_eq!(p.events().oom_kill, 1);
    assert_eq!(held.iter().filter(|(c, _)| c.is_killed()).count(), 1);
    assert_eq!(p.events().max, 1, "one refused charge, one max event");
    assert_eq!(p.events().oom, 1);
    drop(held);
    assert_eq!(p.current_exact(), 0);
}

/// A killed tenant whose work never reaches a safe point holds further kills off for a
/// grace period only: its sibling's charges go through the overdraft, then fail, and after
/// the grace the sibling is the next victim.
#[test]
fn a_stuck_victim_holds_off_kills_for_a_grace_period_only() {
    let p = limited_parent("stuck");
    let a = p.child("a");
    let held = {
        let _in = a.enter();
        vec![1u8; 3 << 20]
    };
    let stuck = a.scope(async {}); // never polled: work in flight forever
    a.kill();
    let b = p.child("b");
    let mut chunks = Vec::with_capacity(1000);
    assert!(
        !fill(&b, &mut chunks, 1000),
        "b is not killed while a is dying"
    );
    let got = chunks.len() as u64 * (64 << 10);
    assert!(got > MIB, "b went through the overdraft: {got}");
    assert_eq!(p.events().oom_kill, 0);
    assert!(p.peak() <= 5 * MIB);
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        fill(&b, &mut chunks, 1),
        "after the grace, b is the next victim"
    );
    assert_eq!(p.events().oom_kill, 1);
    assert!(b.is_killed());
    let ev = p.events_local();
    assert_eq!(
        ev.max,
        ev.oom + 1,
        "every refused charge counts once: {ev:?}"
    );
    drop((stuck, held, chunks));
    assert_eq!(p.current_exact(), 0);
}

/// `Tenant::kill` on a killed tenant changes nothing: a watchdog that kills a stuck tenant
/// again every 100 ms does not extend the grace its first kill started, and after it the
/// sibling is the next victim.
#[test]
fn killing_a_killed_tenant_again_does_not_extend_its_grace() {
    let p = limited_parent("killed-again");
    let a = p.child("a");
    a.charge(3 * MIB, slabcg::StatItem::Sock).unwrap();
    let stuck = a.work_in_flight();
    a.kill();
    let b = p.child("b");
    let mut chunks = Vec::with_capacity(1000);
    assert!(
        !fill(&b, &mut chunks, 1000),
        "b is not killed while a is dying"
    );
    for _ in 0..13 {
        std::thread::sleep(Duration::from_millis(100));
        a.kill();
    }
    assert!(
        fill(&b, &mut chunks, 1),
        "1.3 s after a's only kill, b is the next victim: {:?}",
        p.events()
    );
    assert!(b.is_killed());
    drop((stuck, chunks));
    a.uncharge(3 * MIB, slabcg::StatItem::Sock);
    assert_eq!(p.current_exact(), 0);
}

/// A charge refused by its parent's limit, then, after the kill that limit's overdraft
/// allowed, by an ancestor's: the ancestor's limit was hit too, so its `max` event counts
/// with its `oom` (memory.events pairs them on the group whose limit failed the charge).
#[test]
fn the_limit_that_refuses_after_a_kill_counts_a_max_with_its_oom() {
    let a = Tenant::new("outer-limit");
    a.set_max(10 * MIB);
    a.set_overdraft(0);
    a.set_oom_policy(OomPolicy::Kill);
    let s = a.child("s");
    s.charge(6 * MIB, slabcg::StatItem::Sock).unwrap();
    let r = a.child("r");
    r.set_max(4 * MIB);
    r.set_overdraft(4 * MIB);
    let x = r.child("x");
    x.charge(4 * MIB, slabcg::StatItem::Sock).unwrap();
    assert!(x.charge(64 << 10, slabcg::StatItem::Sock).is_err());
    let (ev_a, ev_r) = (a.events_local(), r.events_local());
    assert_eq!(ev_r.max, 1, "r's limit refused first: {ev_r:?}");
    assert_eq!(
        (ev_a.max, ev_a.oom),
        (1, 1),
        "a's limit failed the charge: {ev_a:?}"
    );
    s.uncharge(6 * MIB, slabcg::StatItem::Sock);
    x.uncharge(4 * MIB, slabcg::StatItem::Sock);
    assert_eq!(a.current_exact(), 0);
}
