//! slabcg: a slab allocator for `#[global_allocator]` that accounts every allocation to an
//! in-process tenant, the way Linux's memory cgroup accounts slab objects to cgroups.
//!
//! This crate re-exports the allocator (`slabcg-allocator`) and the accounting
//! (`slabcg-accounting`); see their crate docs for the design.

pub use slabcg_allocator::*;
