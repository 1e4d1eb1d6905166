//! The opt-in runners' loop (`examples/stress.rs`, `examples/churn.rs`): numeric arguments
//! with defaults, and runs with fresh seeds until the time is up.

use std::time::{Duration, Instant};

/// Command-line argument `i` (0 = the first after the program name) parsed, or `default`.
pub fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i + 1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Calls `run(seed)` with a fresh seed (derived from `salt`) until `seconds` have passed,
/// printing the line each run returns with its number, seed and time.
pub fn repeat_for(seconds: u64, salt: u64, mut run: impl FnMut(u64) -> String) {
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut n = 0u64;
    while Instant::now() < until {
        let t = Instant::now();
        let seed = salt ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let line = run(seed);
        let secs = t.elapsed().as_secs_f64();
        println!("run {n} (seed {seed:#x}): {line}, {secs:.1} s");
        n += 1;
    }
    println!("ok: {n} runs, every check passed");
}
