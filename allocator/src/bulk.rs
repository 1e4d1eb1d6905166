//! `alloc_bulk` / `free_bulk` (kmem_cache_alloc_bulk, seed 000): a whole run of objects moves
//! with one lock round trip and is charged with one call, with overflow-safe byte math and
//! nothing left charged or allocated when the run cannot be completed.

use crate::dedicated::Cache;
use crate::slab::FreeObj;

impl Cache {
    /// Fills every entry of `out` with a fresh object and returns `out.len()`, or returns 0
    /// and allocates (and charges) nothing, like `kmem_cache_alloc_bulk`.
    pub fn alloc_bulk(&self, out: &mut [*mut u8]) -> usize {
        let n = out.len();
        if n == 0 {
            return 0;
        }
        let Some(bytes) = n.checked_mul(self.core.layout.object_size) else {
            return 0;
        };
        let Some(cg) = self.charge_current(bytes) else {
            return 0;
        };
        let chain = self.core.refill(n, n);
        if chain.count < n {
            // Out of memory part way: give back what we got, and the charge.
            if chain.count > 0 {
                // SAFETY: the chain came from refill with chain.count objects.
                unsafe { self.core.flush(chain.head, chain.count) };
            }
            // SAFETY: the `bytes` charge_current just charged to cg, given back unused.
            unsafe { self.uncharge(cg, bytes) };
            return 0;
        }
        let mut obj = chain.head;
        for slot in out.iter_mut() {
            // SAFETY: the chain holds n objects linked through their first word.
            let next = unsafe { (*obj).next };
            *slot = obj as *mut u8;
            self.set_owner(obj as *mut u8, cg);
            obj = next;
        }
        n
    }

    /// Frees every object in `ptrs` with one lock round trip.
    ///
    /// # Safety
    /// Every pointer must come from this cache, be live, and appear once.
    pub unsafe fn free_bulk(&self, ptrs: &[*mut u8]) {
        let mut head: *mut FreeObj = core::ptr::null_mut();
        let mut count = 0;
        for &p in ptrs {
            if p.is_null() {
                continue;
            }
            self.release_owner(p);
            let o = p as *mut FreeObj;
            // SAFETY: the caller gives up p; its first word becomes the chain link.
            unsafe { (*o).next = head };
            head = o;
            count += 1;
        }
        if count > 0 {
            // SAFETY: a well-formed chain of `count` objects; flush validates each.
            unsafe { self.core.flush(head, count) };
        }
    }
}
