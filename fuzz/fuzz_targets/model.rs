//! The fuzz target: the input bytes are a stream of allocator and tenant actions, run against
//! the shadow model of `tests/common/fuzz_model.rs` (shared with `tests/fuzz_replay.rs`),
//! with slabcg as the global allocator. `scripts/fuzz.sh` runs it.
//!
//! It counts the actions it ran and prints the running total to stderr each time it passes
//! another million, and at exit (libFuzzer ends a `-max_total_time` run with `exit`), so a
//! run's log says how many actions were checked.

#![no_main]

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use libfuzzer_sys::fuzz_target;
use slabcg::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[path = "../../tests/common/fuzz_model.rs"]
mod fuzz_model;

static ACTIONS: AtomicU64 = AtomicU64::new(0);
static INPUTS: AtomicU64 = AtomicU64::new(0);

extern "C" fn report() {
    let (a, i) = (
        ACTIONS.load(Ordering::Relaxed),
        INPUTS.load(Ordering::Relaxed),
    );
    let _ = writeln!(
        std::io::stderr(),
        "fuzz_model: {a} actions in {i} inputs (at exit)"
    );
}

fuzz_target!(|data: &[u8]| {
    static AT_EXIT: Once = Once::new();
    // SAFETY: `report` is a plain extern "C" fn that only reads atomics and writes stderr.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(report);
    });
    let s = fuzz_model::run(data);
    let before = ACTIONS.fetch_add(s.actions, Ordering::Relaxed);
    let inputs = INPUTS.fetch_add(1, Ordering::Relaxed) + 1;
    let after = before + s.actions;
    if after / 1_000_000 != before / 1_000_000 {
        eprintln!("fuzz_model: {after} actions in {inputs} inputs");
    }
});
