//! The spin lock of the allocator's shared structures: `slabcg-sys`'s one spin lock.

pub use slabcg_sys::{SpinGuard, SpinLock};
