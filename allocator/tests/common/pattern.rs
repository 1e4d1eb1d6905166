//! A byte pattern to write into blocks and check later (overlaps and lost contents show as
//! wrong bytes). Kept apart from `mod.rs` so that test binaries that do not fill blocks do
//! not include it.

fn byte(tag: u8, i: usize) -> u8 {
    tag.wrapping_add((i % 251) as u8)
}

/// Writes the pattern of `tag` into `p[..n]` (p must have n writable bytes).
pub fn fill(p: *mut u8, n: usize, tag: u8) {
    for i in 0..n {
        // SAFETY: the caller hands a block with n writable bytes.
        unsafe { *p.add(i) = byte(tag, i) };
    }
}

/// Asserts that `p[..n]` holds the pattern of `tag` (p must have n readable bytes).
pub fn check(p: *const u8, n: usize, tag: u8) {
    for i in 0..n {
        // SAFETY: the caller hands a block with n readable bytes.
        assert_eq!(unsafe { *p.add(i) }, byte(tag, i), "byte {i} of {n}");
    }
}
