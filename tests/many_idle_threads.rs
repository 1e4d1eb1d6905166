//! Thousands of idle threads that charged a tenant (issue 22): what their stocks pre-charge
//! is bounded by the CPUs (the stock budget), not by the threads; a refused charge walks
//! only the stocks that hold something, yet no charge fails while idle threads hold the
//! tenant's bytes or charged objects; a refusal is still a refusal; the tenant is exact
//! after a drain. The decay is off, so the idle threads keep what they hold until a drain
//! takes it. Alone in its binary: other tests' drains would empty the stocks it sets up.

use std::alloc::{GlobalAlloc, Layout};

use slabcg::accounting::testing::{charge_batch, drain_visits, stock_budget_slots};
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[path = "common/idle_threads.rs"]
mod idle_threads;
use idle_threads::IdleThreads;

const MAX: u64 = 64 << 20;
const BLOCK: Layout = match Layout::from_size_align(4096, 8) {
    Ok(l) => l,
    Err(_) => panic!(),
};
const SMALL: Layout = match Layout::from_size_align(512, 8) {
    Ok(l) => l,
    Err(_) => panic!(),
};
/// What each idle thread keeps allocated, and frees into its object stock before idling.
const KEPT: usize = 8;
const FREED: usize = 8;

fn alloc_in(t: &Tenant, l: Layout) -> *mut u8 {
    let _in = t.enter();
    // SAFETY: a valid layout.
    unsafe { GLOBAL.alloc(l) }
}

fn free(p: usize, l: Layout) {
    // SAFETY: allocated with `l`, freed once.
    unsafe { GLOBAL.dealloc(p as *mut u8, l) };
}

/// What an idle thread keeps allocated until it is released (freed on its thread).
struct Kept([usize; KEPT]);

impl Drop for Kept {
    fn drop(&mut self) {
        for &p in &self.0 {
            free(p, SMALL);
        }
    }
}

/// `n` threads that each allocate `KEPT + FREED` small objects in `t`, free `FREED` of them
/// (they stay charged in the thread's object stock) and wait. Returns once all are idle.
fn start_idle(t: &Tenant, n: usize) -> IdleThreads {
    let t = t.clone();
    IdleThreads::start_with(n, 128 << 10, move || {
        let mut all = [0usize; KEPT + FREED];
        for p in all.iter_mut() {
            *p = alloc_in(&t, SMALL) as usize;
            assert!(*p != 0);
        }
        for &p in &all[KEPT..] {
            free(p, SMALL);
        }
        let mut kept = [0usize; KEPT];
        kept.copy_from_slice(&all[..KEPT]);
        Kept(kept)
    })
}

fn idle_threads_hold_little_and_refusals_stay_exact(threads: usize) {
    slabcg::accounting::hooks::set_idle_decay(false);
    let t = Tenant::new("many-idle");
    t.set_max(MAX);
    let idle = start_idle(&t, threads);
    let kept = (threads * KEPT * SMALL.size()) as u64;
    let budget = u64::from(stock_budget_slots());
    // The byte stocks hold at most `budget` slots of the tenant, one refill each, and only
    // threads with such a slot keep the objects they freed charged in their object stocks:
    // what the idle threads pre-charge follows the CPUs, not the threads.
    let current = t.current();
    let refill = charge_batch();
    let bound = kept + budget * (refill + (FREED * SMALL.size()) as u64);
    assert!(
        current <= bound,
        "{threads} idle threads pre-charge {} over the {kept} they keep (bound {})",
        current - kept,
        bound - kept
    );
    let (_, holding) = drain_visits();
    assert!(
        holding as u64 <= budget + 2,
        "{holding} stocks hold something with {threads} idle threads (budget {budget})"
    );
    // Fill the tenant to its limit from this thread: no allocation fails while the usage
    // without the idle threads' stocks leaves room for it.
    let mut ps = Vec::new();
    loop {
        let p = alloc_in(&t, BLOCK);
        if p.is_null() {
            break;
        }
        ps.push(p as usize);
    }
    let exact = t.current_exact();
    assert!(
        exact + BLOCK.size() as u64 > MAX,
        "refused at {exact} of {MAX} with {threads} idle threads: spurious"
    );
    assert_eq!(exact, kept + (ps.len() * BLOCK.size()) as u64);
    // Refused again, and nothing leaks through; these refusals walk only the stocks that
    // hold something (this thread's), not the idle threads.
    let (v0, _) = drain_visits();
    for _ in 0..10 {
        assert!(
            alloc_in(&t, BLOCK).is_null(),
            "a refusal let a charge through"
        );
        assert!(t.current() <= MAX);
    }
    let (v1, _) = drain_visits();
    assert!(
        v1 - v0 <= 10 * (budget + 2),
        "10 refusals walked {} stocks with {threads} idle threads",
        v1 - v0
    );
    // One freed block is charged again by the next charge, exactly.
    free(ps.pop().unwrap(), BLOCK);
    let p = alloc_in(&t, BLOCK);
    assert!(!p.is_null(), "a freed block was refused");
    ps.push(p as usize);
    assert!(t.current() <= MAX);
    for p in ps {
        free(p, BLOCK);
    }
    assert_eq!(t.current_exact(), kept);
    idle.finish();
    assert_eq!(t.current_exact(), 0);
}

/// One test, so that the two runs do not drain each other's stocks.
#[test]
fn a_thousand_then_four_thousand_idle_threads() {
    idle_threads_hold_little_and_refusals_stay_exact(1000);
    idle_threads_hold_little_and_refusals_stay_exact(4000);
}
