//! The one global allocator of this build, chosen by cargo feature.
//!
//! Priority when several features are on (e.g. `--all-features`): slabcg > jemalloc >
//! mimalloc > system. [`ALLOCATOR`] names the one in use; every program prints it and
//! `run.sh` refuses a result whose allocator is not the one it built for.

#[cfg(feature = "slabcg")]
#[global_allocator]
static GLOBAL: slabcg::SlabAlloc = slabcg::SlabAlloc::new();

#[cfg(all(feature = "jemalloc", not(feature = "slabcg")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(
    feature = "mimalloc",
    not(feature = "slabcg"),
    not(feature = "jemalloc")
))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Name of the global allocator this build uses.
#[cfg(feature = "slabcg-request")]
pub const ALLOCATOR: &str = "slabcg-request";
/// Name of the global allocator this build uses.
#[cfg(all(feature = "slabcg-tenant", not(feature = "slabcg-request")))]
pub const ALLOCATOR: &str = "slabcg-tenant";
/// Name of the global allocator this build uses.
#[cfg(all(
    feature = "slabcg",
    not(feature = "slabcg-tenant"),
    not(feature = "slabcg-request")
))]
pub const ALLOCATOR: &str = "slabcg";
/// Name of the global allocator this build uses.
#[cfg(all(feature = "jemalloc", not(feature = "slabcg")))]
pub const ALLOCATOR: &str = "jemalloc";
/// Name of the global allocator this build uses.
#[cfg(all(
    feature = "mimalloc",
    not(feature = "slabcg"),
    not(feature = "jemalloc")
))]
pub const ALLOCATOR: &str = "mimalloc";
/// Name of the global allocator this build uses.
#[cfg(not(any(feature = "slabcg", feature = "jemalloc", feature = "mimalloc")))]
pub const ALLOCATOR: &str = "system";
