//! The workloads. Each module documents which published benchmark it follows and how.

pub mod alloc_test;
pub mod cache;
pub mod glibc_simple;
pub mod glibc_thread;
pub mod larson;
pub mod malloc_large;
pub mod mstress;
pub mod rptest;
pub mod server;
pub mod xmalloc;

use crate::rng::XorShift;

/// Sizes drawn once from a distribution, then picked uniformly: keeps `powf` and friends out
/// of the measured loop while keeping the distribution.
pub struct SizeTable(Vec<usize>);

impl SizeTable {
    /// 4096 sizes from `draw`.
    pub fn new(rng: &mut XorShift, mut draw: impl FnMut(&mut XorShift) -> usize) -> Self {
        SizeTable((0..4096).map(|_| draw(rng).max(1)).collect())
    }

    /// One size.
    #[inline]
    pub fn pick(&self, rng: &mut XorShift) -> usize {
        self.0[(rng.next_u64() & 4095) as usize]
    }

    /// Smallest and largest size in the table.
    pub fn bounds(&self) -> (usize, usize) {
        (*self.0.iter().min().unwrap(), *self.0.iter().max().unwrap())
    }
}

/// A fresh object tag (never zero, so a zeroed object never passes a check).
#[inline]
pub fn tag(rng: &mut XorShift) -> u64 {
    rng.next_u64() | 1
}
