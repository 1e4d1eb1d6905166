//! The atomics the slabcg crates use, from one place, so that a loom model can swap them:
//! core's normally, loom's under `cfg(loom)` (as crossbeam-epoch's `primitive` module does).
//!
//! Loom's atomics have no `const` constructor and live only inside `loom::model`, so a
//! `static` cannot hold one: statics keep core's atomics (the spin lock's flag is const
//! under loom too, see `lock.rs`), and code that a model runs takes its atomics from here.
//! `Ordering` is the same type in both.

#[cfg(not(loom))]
pub use core::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// The hint inside a spin loop: `core::hint::spin_loop`, or under loom a yield to the model
/// scheduler (a loom model must not spin without one).
#[inline(always)]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::hint::spin_loop();
}
