//! slabcg: a slab allocator for `#[global_allocator]` that accounts every allocation to an
//! in-process tenant, the way Linux's memory cgroup accounts slab objects to cgroups.
//!
//! A tokio service with a tenant per customer; one customer's request runs away and is
//! killed at its limit while the others are served (the README's example):
//!
//! ```
//! use slabcg::{InTenant, OomPolicy, SlabAlloc, Tenant};
//!
//! #[global_allocator]
//! static GLOBAL: SlabAlloc = SlabAlloc::new();
//!
//! #[tokio::main]
//! async fn main() {
//!     let customers = Tenant::new("customers");
//!     let mut requests = Vec::new();
//!     for name in ["alice", "bob", "mallory"] {
//!         let customer = customers.child(name);
//!         customer.set_max(16 << 20);               // hard limit: 16 MiB per customer
//!         customer.set_oom_policy(OomPolicy::Kill); // at the limit, kill its work, not the process
//!         let rows = if name == "mallory" { usize::MAX } else { 10_000 }; // mallory runs away
//!         let request = async move {
//!             let mut v = Vec::new();
//!             for i in 0..rows {
//!                 v.push(format!("{name} row {i}")); // plain infallible allocations
//!                 if i % 1024 == 0 {
//!                     tokio::task::yield_now().await; // a safe point: where a kill takes effect
//!                 }
//!             }
//!             v.len()
//!         };
//!         // Every poll of the task, on whichever worker, is charged to the customer.
//!         requests.push((customer.clone(), tokio::spawn(request.in_tenant(&customer))));
//!     }
//!     for (customer, task) in requests {
//!         match task.await.unwrap() {
//!             Ok(rows) => println!("{}: 200, {rows} rows", customer.name()),
//!             Err(killed) => println!("{}: 503, {killed}", customer.name()),
//!         }
//!         let s = customer.stat(); // memory.stat-like: current, peak, events, slab/large bytes
//!         println!("  peak {} B, now {} B, oom_kill {}", s.peak, s.current, s.events.oom_kill);
//!     }
//! }
//! ```
//!
//! This crate re-exports the allocator (`slabcg-allocator`) and the accounting
//! (`slabcg-accounting`); see their crate docs for the design.
//!
//! # Who is charged
//!
//! An allocation is charged to the calling thread's current tenant (the innermost
//! [`Tenant::enter`] scope, or the tenant of the [`Scoped`] future being polled) with its
//! usable size; outside any scope it belongs to the root, which is never limited. A free
//! uncharges the recorded owner, on whichever thread, also after the owner was dropped (its
//! parent then carries the charge). A `realloc` that stays in place keeps its owner (a large
//! block's owner pays the size difference); one that moves is an allocation in the caller's
//! tenant plus a free. A shrink of the caller's own block into a size class moves its charge
//! and is never refused; the shrink of another tenant's block into a size class allocates
//! first and can be refused at the caller's limit. Tenant creation and drop, `stat()`, a
//! reclaim callback, a refusal's error and a dedicated cache's bookkeeping allocate as the
//! root, so none is refused because the caller's tenant is full. Scope guards nest and must
//! be dropped in reverse order; one dropped too early keeps its tenant alive and the thread
//! returns to it when the later scopes end, with a warning, never charging another tenant.
//!
//! # At the limit
//!
//! A charge is refused only after every thread's stocks were drained and the reclaim
//! callback ran. Under [`OomPolicy::Kill`], one refused charge kills at most one victim
//! (the Kill-policy tenant of the refusing subtree with the most memory of its own), and
//! none while a tenant killed less than a second ago still has futures in flight
//! ([`Tenant::work_in_flight`]); the charge goes through the refusing tenant's overdraft
//! (default `min(max, 64 MiB)`). A victim that never reaches a safe point (a loop that
//! neither yields nor calls [`checkpoint`]) cannot be stopped: past `max + overdraft` its
//! charges fail as under [`OomPolicy::Fail`]. Lowering `max` below the usage takes back what
//! stocks hold pre-charged and evicts nothing else. An `uncharge` of more than was charged
//! (a caller bug) stops usage at 0 with a one-time warning and cannot break the ownership
//! of live objects.
//!
//! # Stocks and drains
//!
//! Each thread keeps bytes pre-charged for up to 7 tenants and keeps freed objects charged
//! for the tenant it allocates for; together, stocks hold at most 4 slots (refills of
//! 256 KiB, at most 1 MiB each) per CPU for one tenant. A drain (before a refusal, in
//! `current_exact()` and `stat()`) uses `membarrier` so the owner's fast path needs no
//! atomic read-modify-write, and uncharges an idle thread's object stock in place: the
//! slots go back to their slabs when that thread next leaves its fast path or exits.
//! Where `membarrier`'s private expedited mode is missing, drains use
//! `MEMBARRIER_CMD_GLOBAL` (milliseconds); without `membarrier` (or with
//! `SLABCG_MEMBARRIER=0`, read at the first allocation), x86-64 uses an `mprotect`
//! TLB-shootdown barrier (about 7 us) and other CPUs drain only the calling thread's stocks,
//! so a charge can then fail while other threads hold pre-charged bytes
//! (`accounting::hooks::remote_barrier_kind()` says which barrier is in use). With more
//! threads holding stocks than four per CPU, a background thread gives idle threads'
//! stocks back every 100 ms.
//!
//! # Invalid and double frees
//!
//! A free of a pointer that is not the start of a slot in use aborts with a
//! `slabcg: fatal:` message when the slot goes from a thread's bin back to its slab (and
//! before an accounted slot is uncharged). A slot freed twice in a row, or freed again after
//! its first free reached its slab, aborts with a message (a mark in the free slot's second
//! word, in every class of 16 bytes or more on x86-64 and AArch64). Not caught: a second
//! free while the first copy still sits deeper in a thread's bin or the transfer cache (the
//! chain is usually reported as corrupt when it is flushed), and a double free in the
//! 8-byte class that is not back to back. A second free of a large block is reported while
//! its mapping is cached or listed among the 256 most recently unmapped. A free with the
//! wrong layout is undefined behaviour for any `GlobalAlloc`; here it can go unnoticed. An
//! accounted dedicated cache's `free` and `free_bulk` read the segment header at the
//! pointer's 4 MiB-aligned base first (another cache's object is reported): outside
//! `hardened` builds a pointer slabcg never mapped gets SIGSEGV there rather than the
//! message.
//!
//! # Dedicated caches
//!
//! The first 64 [`Cache`]s alive at once get a per-thread front (a bin per thread, as the
//! size classes have); later ones take the cache's lock on every `alloc` / `free`. A
//! thread's first 8 allocations from a cache take the lock too, so a thread that touches a
//! cache a few times keeps no slots of it. The bulk calls take the front's slots first, then
//! the lock once per 512 objects. A dropped cache's slabs stay mapped for the next cache
//! built with the same name, layout and accounting, which takes its old front index back
//! when it is free; then the slots other threads' fronts kept at that index are its own
//! again. Otherwise they go back to those slabs on each such thread's next slow path at
//! that index (whichever cache holds it), at `trim()` on that thread, or at its exit.
//! The first 76 accounted dedicated caches get their own `slab_cache_<name>` line in
//! `stat()`; later ones count only in the `slab` total.

#![warn(missing_docs)]

pub use slabcg_accounting::{
    checkpoint, current_tenant, drain_all_stocks, ChargeError, Events, InFlight, InTenant, Killed,
    OomPolicy, ScopeGuard, Scoped, StatItem, Tenant, TenantError, TenantStat,
};
pub use slabcg_allocator::{
    alloc_bulk, allocator_api2, free_bulk, set_decay_interval_ms, start_decay_thread, stats, trim,
    AllocStats, Cache, CacheBox, CacheBuilder, CacheError, CacheInfo, ClassStats, MetaPlacement,
    SlabAlloc, TenantAlloc, TypedCache, DEFAULT_DECAY_INTERVAL_MS,
};

#[cfg(feature = "prometheus")]
pub mod prometheus;

/// The accounting crate (`slabcg-accounting`), whose public API is the items above plus
/// `hooks`: the allocator's façade, with the idle-decay switch and the drain barrier's name.
pub use slabcg_accounting as accounting;
/// The allocator crate (`slabcg-allocator`), whose public API is the items above plus
/// `SlabLayout` (a slab's geometry), the size-class table (`class_for`, `class_size`,
/// `NUM_CLASSES`, `MAX_SMALL`; a class is an index of [`AllocStats::classes`]) and `raw`
/// (the entry points of the C front-end).
pub use slabcg_allocator as allocator;
