//! slabcg-allocator: the slab allocator under `slabcg`.
//!
//! # Design note
//!
//! Vocabulary (see DESIGN.md): an OS page is 4 KiB; a **slab** is 2^order OS pages cut into
//! equal **slots** `stride` bytes apart; a **cache** owns the slabs of one object layout; a
//! **size class** is a cache the global allocator uses for every request rounding up to it;
//! a **large allocation** has its own mapping. Slabs are cut from 4 MiB aligned **segments**
//! whose header holds the slab descriptors, so a pointer finds its slab by masking.
//!
//! Call tree of the fast paths (everything else is `#[cold]`):
//! ```text
//! GlobalAlloc::alloc   → global::alloc_impl → fast_class → ThreadCache bin.pop()
//! GlobalAlloc::dealloc → global::dealloc_impl → fast_class → ThreadCache bin.push()
//! ```
//! Who touches what:
//! - a thread's [`thread_cache`] bins: only that thread (bin counts are read racily by stats);
//! - a cache's lists and slab descriptors: any thread, under the cache's spin lock;
//! - segment headers: written once at creation, read by any thread;
//! - large headers: the owner of the allocation.

pub mod bulk;
pub mod cache;
pub mod charge;
pub mod classes;
pub mod dedicated;
pub mod global;
pub mod large;
pub mod lock;
pub mod object_stock;
pub mod segment;
pub mod size_class;
pub mod slab;
pub mod stats;
pub mod sys;
pub mod thread_cache;

pub use dedicated::{Cache, CacheBuilder, CacheError, CacheInfo};
pub use global::SlabAlloc;
pub use slab::{MetaPlacement, SlabLayout};
pub use stats::{stats, trim, AllocStats, ClassStats};
