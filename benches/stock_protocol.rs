//! Why the per-thread stocks are drained with asymmetric fences (`membarrier`): what each
//! candidate mechanism for "another thread may take this thread's stock" costs the owner on
//! every charge, and what a drain of every stock then costs the drainer.
//!
//! Owner side (group `stock_owner_op`): one charge from a thread-local stock guarded by
//! - `none`: no protection at all (the floor: a stock nobody else may touch);
//! - `asymmetric`: what the byte stocks do (`accounting/src/drain.rs`), and the object stock
//!   did before 8111015: plain stores of an `in_cs` flag around the operation and a compiler
//!   fence before the load of the drainer's request; the drainer pays a `membarrier` instead;
//! - `check_after`: what the object stock's allocation does (`allocator/src/object_stock.rs`):
//!   no flag; the operation, a compiler fence, then the load of the tag word (which carries
//!   the drainer's request), undoing the operation when it does not match. The drainer pays a
//!   `membarrier` and never waits for the owner; it uncharges in place what it counts;
//! - `seqcst_fence`: the same protocol with a full fence on the owner's side (no membarrier
//!   needed, the textbook Dekker);
//! - `rmw_claim`: an atomic slot steal: the owner claims its stock with an atomic swap and
//!   releases it with a store; the drainer claims it with a compare-exchange.
//!
//! The stock is modelled (a `thread_local!` with the same atomics as the real ones) because
//! the real one has only the chosen mechanism compiled in; the operation inside the critical
//! section (a compare and a subtraction from the cached bytes) is the real stock's.
//!
//! Drainer side (group `drain_all_stocks`): the real `slabcg::drain_all_stocks()` with 0, 4
//! and 16 idle threads that each held a charged stock (the first drain takes the bytes; the
//! iterations after it measure what every drain pays: the process-wide barrier and the scan
//! of every thread's stocks).
//!
//! `cargo bench --bench stock_protocol`

use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use slabcg::{SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const IDLE: u32 = 0;
const BUSY: u32 = 1;

/// One slot of a per-thread stock: the tenant it caches, the bytes pre-charged, and the flag
/// or claim word of the protection being measured.
struct Stock {
    tag: AtomicU64,
    in_cs: AtomicBool,
    claim: AtomicU32,
    bytes: Cell<u64>,
}

thread_local! {
    static STOCK: Stock = const {
        Stock {
            tag: AtomicU64::new(7),
            in_cs: AtomicBool::new(false),
            claim: AtomicU32::new(IDLE),
            bytes: Cell::new(u64::MAX),
        }
    };
}

/// The operation inside the critical section: take `n` bytes when the slot caches `id`.
#[inline(always)]
fn consume(s: &Stock, tag: u64, id: u64, n: u64) -> bool {
    if tag != id {
        return false;
    }
    let b = s.bytes.get();
    if b < n {
        return false;
    }
    s.bytes.set(b - n);
    true
}

#[inline(always)]
fn op_none(id: u64, n: u64) -> bool {
    STOCK.with(|s| consume(s, s.tag.load(Ordering::Relaxed), id, n))
}

/// The Dekker-style protocol the byte stocks use: `in_cs` set, `barrier`, load of the
/// drainer's request with the tag, the operation, `in_cs` cleared.
#[inline(always)]
fn op_in_cs(id: u64, n: u64, barrier: impl Fn()) -> bool {
    STOCK.with(|s| {
        s.in_cs.store(true, Ordering::Relaxed);
        barrier();
        let ok = consume(s, s.tag.load(Ordering::Acquire), id, n);
        s.in_cs.store(false, Ordering::Release);
        ok
    })
}

#[inline(always)]
fn op_asymmetric(id: u64, n: u64) -> bool {
    op_in_cs(id, n, || compiler_fence(Ordering::SeqCst))
}

#[inline(always)]
fn op_seqcst_fence(id: u64, n: u64) -> bool {
    op_in_cs(id, n, || fence(Ordering::SeqCst))
}

/// The object stock's allocation side: the operation first, then the check (module docs).
#[inline(always)]
fn op_check_after(id: u64, n: u64) -> bool {
    STOCK.with(|s| {
        let b = s.bytes.get();
        if b < n {
            return false;
        }
        s.bytes.set(b - n);
        compiler_fence(Ordering::SeqCst);
        if s.tag.load(Ordering::Relaxed) != id {
            s.bytes.set(b);
            return false;
        }
        true
    })
}

#[inline(always)]
fn op_rmw_claim(id: u64, n: u64) -> bool {
    STOCK.with(|s| {
        if s.claim.swap(BUSY, Ordering::Acquire) != IDLE {
            // A drainer holds the slot (the swap wrote BUSY over its BUSY: nothing changed);
            // it releases the slot when done.
            return false;
        }
        let ok = consume(s, s.tag.load(Ordering::Relaxed), id, n);
        s.claim.store(IDLE, Ordering::Release);
        ok
    })
}

fn owner(c: &mut Criterion) {
    let mut g = c.benchmark_group("stock_owner_op");
    // 4 charges per iteration, like the seed 003 batch; each scheme is inlined into its loop
    // as the real fast path is.
    g.throughput(Throughput::Elements(4));
    macro_rules! scheme {
        ($name:literal, $op:ident) => {
            g.bench_function($name, |b| {
                b.iter(|| {
                    for _ in 0..4 {
                        black_box($op(black_box(7), black_box(32)));
                    }
                })
            });
        };
    }
    scheme!("none", op_none);
    scheme!("asymmetric", op_asymmetric);
    scheme!("check_after", op_check_after);
    scheme!("seqcst_fence", op_seqcst_fence);
    scheme!("rmw_claim", op_rmw_claim);
    g.finish();
}

/// The real drain: `drain_all_stocks()` while `idle` other threads each hold bytes of a
/// tenant in their stock and sleep.
fn drainer(c: &mut Criterion) {
    let mut g = c.benchmark_group("drain_all_stocks");
    for idle in [0usize, 4, 16] {
        let t = Tenant::new("drain-bench");
        let start = Arc::new(Barrier::new(idle + 1));
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = Arc::new(std::sync::Mutex::new(stop_rx));
        let threads: Vec<_> = (0..idle)
            .map(|_| {
                let (t, start, stop_rx) = (t.clone(), start.clone(), stop_rx.clone());
                std::thread::spawn(move || {
                    t.charge(4096, StatItem::Sock).unwrap();
                    start.wait();
                    // Idle until the group is done; the charge stays in this thread's stock
                    // until a drain takes it.
                    let _ = stop_rx.lock().unwrap().recv();
                    t.uncharge(4096, StatItem::Sock);
                })
            })
            .collect();
        start.wait();
        g.bench_function(format!("idle_threads_{idle}"), |b| {
            b.iter(slabcg::drain_all_stocks)
        });
        drop(stop_tx);
        for th in threads {
            th.join().unwrap();
        }
    }
    g.finish();
}

criterion_group!(benches, owner, drainer);
criterion_main!(benches);
