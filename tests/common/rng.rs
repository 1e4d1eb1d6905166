//! xorshift64: the small deterministic generator of the randomized tests, the stress workload
//! and the demo (no crate needed for reproducible sequences).

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
