//! Helpers shared by the allocator's test binaries (and, by path, the workspace's stress
//! workload, tests and demo).

/// A deterministic xorshift generator: tests replay the same sequence on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform enough in `0..n` (n > 0) for tests.
    #[allow(dead_code)] // not every includer draws indices
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
