//! A random word from the kernel, for secrets the allocator mixes into its free-list links
//! (the `hardened` feature of slabcg-allocator).

/// 64 random bits from `getrandom(2)` (without blocking), never 0. Where the kernel has no
/// entropy to give yet (early boot) or no such call, a mix of the clock, the process id and
/// an address of this stack: weaker, but still different in every process.
pub fn random_u64() -> u64 {
    let mut v = 0u64;
    #[cfg(target_os = "linux")]
    // SAFETY: getrandom writes at most 8 bytes into the live local `v`.
    let n = unsafe {
        libc::getrandom(
            (&mut v as *mut u64).cast(),
            core::mem::size_of::<u64>(),
            libc::GRND_NONBLOCK,
        )
    };
    #[cfg(not(target_os = "linux"))]
    let n = 0isize;
    if n != core::mem::size_of::<u64>() as isize {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the live local `ts`; getpid has no preconditions.
        let pid = unsafe {
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
            libc::getpid()
        };
        let stack = &ts as *const libc::timespec as u64;
        v = (ts.tv_nsec as u64 ^ (ts.tv_sec as u64).rotate_left(32) ^ stack)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ pid as u64;
    }
    v | 1
}

#[cfg(test)]
mod tests {
    /// Two draws differ (a constant would pass no secret on).
    #[test]
    fn draws_differ_and_are_not_zero() {
        let (a, b) = (super::random_u64(), super::random_u64());
        assert_ne!(a, b);
        assert_ne!(a, 0);
    }
}
