//! slabcg: a slab allocator for `#[global_allocator]` that accounts every allocation to an
//! in-process tenant, the way Linux's memory cgroup accounts slab objects to cgroups.
//!
//! This crate re-exports the allocator (`slabcg-allocator`) and the accounting
//! (`slabcg-accounting`); see their crate docs for the design.

pub use slabcg_accounting::{
    checkpoint, current_tenant, drain_all_stocks, ChargeError, Events, InTenant, Killed, OomPolicy,
    ScopeGuard, Scoped, StatItem, Tenant, TenantStat,
};
pub use slabcg_allocator::{
    stats, trim, AllocStats, Cache, CacheBuilder, CacheError, CacheInfo, ClassStats, MetaPlacement,
    SlabAlloc,
};

/// The accounting crate, for its lower-level parts (`hooks`).
pub use slabcg_accounting as accounting;
/// The allocator crate, for its lower-level parts (layouts, size classes).
pub use slabcg_allocator as allocator;
