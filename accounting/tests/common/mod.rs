#![allow(dead_code)]
//! Helpers shared by the accounting crate's integration tests.

use slabcg_accounting::hooks::{self, StatIdx};

/// `hooks::charge` for these tests, which charge only objcgs of tenants they hold a handle
/// on or are in a scope of.
pub fn charge(id: hooks::ObjCgId, n: usize, idx: StatIdx) -> bool {
    // SAFETY: the callers' discipline above keeps the objcg alive.
    unsafe { hooks::charge(id, n, idx) }
}

/// `hooks::uncharge` for these tests, each of which gives back only bytes it charged with
/// `hooks::charge` and still holds.
pub fn give_back(id: hooks::ObjCgId, n: usize, idx: StatIdx) {
    // SAFETY: the callers' discipline above: n bytes charged to id for idx, outstanding.
    unsafe { hooks::uncharge(id, n, idx) }
}

/// A small deterministic PRNG (xorshift64*).
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
