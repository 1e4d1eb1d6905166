//! TEMPORARY placeholder while the allocator core is written (replaced in the next commits).
use core::alloc::{GlobalAlloc, Layout};

pub struct SlabAlloc;
impl SlabAlloc {
    pub const fn new() -> Self {
        SlabAlloc
    }
}
impl Default for SlabAlloc {
    fn default() -> Self {
        Self::new()
    }
}
unsafe impl GlobalAlloc for SlabAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
}
