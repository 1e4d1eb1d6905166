//! mimalloc-bench style workloads, written from the published descriptions of the originals
//! (larson, xmalloc-test, cache-scratch, cache-thrash, mstress, rptest, alloc-test,
//! glibc bench-malloc-simple / -thread, malloc-large) and one of our own (server), for comparing
//! slabcg with its peers.
//!
//! Every workload is a library function `run(&Config) -> WorkResult` so that unit tests can run
//! it with tiny sizes; the programs in `src/bin/` are thin wrappers around them. Each workload
//! stamps every object it allocates and checks the stamp before freeing it ([`block`]), counts
//! allocations and frees, and fails when anything does not add up.
//!
//! The global allocator is chosen by cargo feature in [`alloc_select`] (none = system); the
//! accounted variants `slabcg-tenant` and `slabcg-request` add tenants ([`tenancy`]).

pub mod alloc_select;
pub mod block;
pub mod cli;
pub mod rng;
pub mod tenancy;
pub mod workloads;

pub use alloc_select::ALLOCATOR;
