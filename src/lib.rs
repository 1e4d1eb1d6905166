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

pub use slabcg_accounting::{
    checkpoint, current_tenant, drain_all_stocks, ChargeError, Events, InFlight, InTenant, Killed,
    OomPolicy, ScopeGuard, Scoped, StatItem, Tenant, TenantError, TenantStat,
};
pub use slabcg_allocator::{
    stats, trim, AllocStats, Cache, CacheBuilder, CacheError, CacheInfo, ClassStats, MetaPlacement,
    SlabAlloc,
};

#[cfg(feature = "prometheus")]
pub mod prometheus;

/// The accounting crate, for its lower-level parts (`hooks`).
pub use slabcg_accounting as accounting;
/// The allocator crate, for its lower-level parts (layouts, size classes).
pub use slabcg_allocator as allocator;
