//! Messages to standard error that never allocate: a warning, and the fatal report of heap
//! corruption.

/// Writes a message to standard error and aborts the process. Used for detected heap
/// corruption (an invalid or double free), where continuing would corrupt memory silently.
/// Never allocates; never returns (it does not unwind either).
pub fn fatal(msg: &str) -> ! {
    const PREFIX: &[u8] = b"slabcg: fatal: ";
    // SAFETY: write(2) on fd 2 with valid buffers; abort has no preconditions.
    unsafe {
        libc::write(2, PREFIX.as_ptr().cast(), PREFIX.len());
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::write(2, b"\n".as_ptr().cast(), 1);
        libc::abort();
    }
}

/// Writes `msg` to standard error without allocating (it may run inside the allocator). A
/// failed write is ignored. Under Miri, `eprint!` (Miri's isolation has its own stderr).
pub fn warn(msg: &str) {
    #[cfg(all(unix, not(miri)))]
    // SAFETY: writes msg.len() bytes from a live &str to fd 2; a failed write is ignored.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
    #[cfg(miri)]
    eprint!("{msg}");
    #[cfg(not(any(unix, miri)))]
    let _ = msg;
}
