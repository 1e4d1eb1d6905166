//! A coarse monotonic clock for decisions that only need milliseconds (when to give idle
//! memory back): `CLOCK_MONOTONIC_COARSE`, which Linux serves from the vDSO without a
//! system call, a few nanoseconds a read.

/// Milliseconds since some fixed point (boot on Linux); never goes back. 0 when the clock
/// cannot be read, which callers treat as "no time passed".
pub fn now_ms() -> u64 {
    // Miri models the plain monotonic clock (virtual time under isolation).
    #[cfg(all(target_os = "linux", not(miri)))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC_COARSE;
    #[cfg(any(not(target_os = "linux"), miri))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; clock_gettime has no other precondition.
    if unsafe { libc::clock_gettime(CLOCK, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1000)
        .wrapping_add(ts.tv_nsec as u64 / 1_000_000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clock_runs_forward() {
        let a = super::now_ms();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = super::now_ms();
        assert!(a > 0 && b >= a + 20, "{a} -> {b}");
    }
}
