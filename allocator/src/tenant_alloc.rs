//! The allocator-api2 `Allocator` trait (the stable-Rust version of `core::alloc::Allocator`
//! that hashbrown and allocator-api2's own `Vec` and `Box` take): [`TenantAlloc`], a handle
//! that charges one tenant whatever scope the calling thread is in, and `&Cache`, for
//! layouts that fit a dedicated cache's objects.
//!
//! Both allocate from slabcg itself ([`SlabAlloc`]'s paths, or the cache), never through
//! `std::alloc`: a program whose `#[global_allocator]` is another allocator (or the system's)
//! can still build collections owned by a tenant, and their blocks never reach that
//! allocator.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};

use allocator_api2::alloc::{AllocError, Allocator};
use slabcg_accounting::{hooks, Tenant};

use crate::dedicated::Cache;
use crate::global::SlabAlloc;

/// slabcg's allocation functions, whether or not `SlabAlloc` is the global allocator (all
/// its state is process-wide: every `SlabAlloc` is the same allocator).
static SLABCG: SlabAlloc = SlabAlloc::new();

/// An allocator-api2 [`Allocator`] that charges one tenant: every block it allocates (or
/// grows, or moves) is charged to that tenant as if allocated inside `tenant.enter()`,
/// whatever scope the calling thread is in (another tenant's, or none). Freeing a block
/// uncharges the tenant it was charged to, on any thread, like any slabcg block (its owner
/// metadata says who).
///
/// A collection built with it is owned by the tenant: `allocator_api2::vec::Vec::new_in`,
/// `allocator_api2::boxed::Box::new_in`, `hashbrown::HashMap::new_in` (hashbrown's
/// `allocator-api2` feature, on by default). When the tenant's limit refuses, `allocate`
/// returns `AllocError` (the collections' `try_reserve` reports it; their infallible methods
/// call `handle_alloc_error`, which aborts).
///
/// It allocates from slabcg directly, not through the global allocator, so it works
/// whatever `#[global_allocator]` the program has. Blocks are slabcg's size classes up to
/// 128 KiB, large allocations above. Entering the tenant costs a few thread-local stores
/// per call (no handle clone, no atomic). Cheap to clone (a tenant handle); `Send + Sync`.
///
/// ```
/// use allocator_api2::vec::Vec;
/// use slabcg_allocator::TenantAlloc;
/// use slabcg_accounting::Tenant;
///
/// let t = Tenant::new("index");
/// let before = t.current_exact();
/// let mut v: Vec<u64, _> = Vec::new_in(TenantAlloc::new(&t)); // no scope entered
/// v.extend(0..1000);
/// assert!(t.current_exact() >= before + 8000);
/// drop(v);
/// assert_eq!(t.current_exact(), before);
/// ```
#[derive(Clone, Debug)]
pub struct TenantAlloc {
    tenant: Tenant,
}

impl TenantAlloc {
    /// A handle that charges `tenant` (it keeps a handle on it).
    pub fn new(tenant: &Tenant) -> TenantAlloc {
        TenantAlloc {
            tenant: tenant.clone(),
        }
    }

    /// The tenant it charges.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Moves `ptr` (allocated with `old`) to a block of `new`, zeroing the bytes past
    /// `old.size()` when `zero`.
    ///
    /// # Safety
    /// As `Allocator::grow` / `shrink`: `ptr` is a block of this allocator allocated with
    /// `old`.
    unsafe fn resize(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zero: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() == 0 {
            return if zero {
                self.allocate_zeroed(new)
            } else {
                self.allocate(new)
            };
        }
        if new.size() == 0 {
            // SAFETY: caller's contract.
            unsafe { self.deallocate(ptr, old) };
            return dangling(new);
        }
        let q = if old.align() == new.align() {
            let _in = hooks::enter_borrowed(&self.tenant);
            // SAFETY: ptr was allocated by slabcg with `old` (caller's contract); the new
            // size is non-zero and, being a Layout's, does not overflow when rounded.
            let q = unsafe { SLABCG.realloc(ptr.as_ptr(), old, new.size()) };
            NonNull::new(q).ok_or(AllocError)?
        } else {
            // realloc keeps the alignment: another alignment takes a new block.
            let q = self.allocate(new)?.cast::<u8>();
            // SAFETY: both blocks are live and distinct; each holds the bytes copied; ptr
            // is freed with its layout (caller's contract).
            unsafe {
                ptr::copy_nonoverlapping(ptr.as_ptr(), q.as_ptr(), old.size().min(new.size()));
                self.deallocate(ptr, old);
            }
            q
        };
        if zero && new.size() > old.size() {
            // SAFETY: q has new.size() writable bytes.
            unsafe { ptr::write_bytes(q.as_ptr().add(old.size()), 0, new.size() - old.size()) };
        }
        Ok(NonNull::slice_from_raw_parts(q, new.size()))
    }
}

/// The block of a zero-sized allocation: no memory, a dangling pointer aligned for `layout`.
fn dangling(layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
    let p = NonNull::new(ptr::without_provenance_mut::<u8>(layout.align())).ok_or(AllocError)?;
    Ok(NonNull::slice_from_raw_parts(p, 0))
}

// SAFETY: blocks come from slabcg (size classes, large mappings), which never hands out
// overlapping live blocks and keeps them valid until freed; the handle's clones share that
// allocator, so a block may be freed through any clone. Zero-sized requests get a dangling
// aligned pointer and are never passed to slabcg.
unsafe impl Allocator for TenantAlloc {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return dangling(layout);
        }
        let _in = hooks::enter_borrowed(&self.tenant);
        // SAFETY: a non-zero size.
        let p = unsafe { SLABCG.alloc(layout) };
        let p = NonNull::new(p).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, layout.size()))
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return dangling(layout);
        }
        let _in = hooks::enter_borrowed(&self.tenant);
        // SAFETY: a non-zero size.
        let p = unsafe { SLABCG.alloc_zeroed(layout) };
        let p = NonNull::new(p).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, layout.size()))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: Allocator contract: ptr was allocated by this allocator (slabcg) with
            // layout, and is freed once. The owner metadata says whom to uncharge.
            unsafe { SLABCG.dealloc(ptr.as_ptr(), layout) };
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded Allocator contract.
        unsafe { self.resize(ptr, old, new, false) }
    }

    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded Allocator contract.
        unsafe { self.resize(ptr, old, new, true) }
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded Allocator contract.
        unsafe { self.resize(ptr, old, new, false) }
    }
}

impl Cache {
    /// Whether a block of `layout` fits this cache's objects (size and alignment).
    fn fits(&self, layout: Layout) -> bool {
        let l = &self.core.layout;
        layout.size() <= l.object_size && layout.align() <= l.align
    }

    /// One object as an allocator-api2 block: the object's whole size.
    fn block(&self, p: NonNull<u8>) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(p, self.core.layout.object_size)
    }
}

/// A dedicated cache as an allocator-api2 [`Allocator`], for layouts that fit its objects
/// (size up to the object size, alignment up to the cache's): each block is one object
/// (charged to the current tenant when the cache is accounted, as [`Cache::alloc`] does),
/// and grows or shrinks in place while it fits; any other layout gets `AllocError`. A
/// zero-sized block is a dangling pointer that never reaches the cache. For a
/// `Box` in a cache, or a small collection with a known bound (a `Vec` that stays within
/// one object).
///
/// ```
/// use std::alloc::Layout;
/// use allocator_api2::boxed::Box;
/// use slabcg_allocator::Cache;
///
/// let cache = Cache::builder("points", Layout::new::<[f64; 3]>()).build();
/// let p = Box::new_in([1.0, 2.0, 3.0], &cache);
/// assert_eq!(cache.live_objects(), 1);
/// drop(p);
/// assert_eq!(cache.live_objects(), 0);
/// ```
// SAFETY: every block is a live object of the cache, valid until freed (a dropped cache's
// objects stay valid), never handed out twice; copies of the reference share the cache.
unsafe impl Allocator for &Cache {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !self.fits(layout) {
            return Err(AllocError);
        }
        // Zero-sized blocks are dangling, as TenantAlloc's: allocator-api2's Box deallocates
        // a zero-sized value's dangling pointer without ever allocating it.
        if layout.size() == 0 {
            return dangling(layout);
        }
        self.alloc().map(|p| self.block(p)).ok_or(AllocError)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: Allocator contract: ptr is a block of this cache (an object), freed once.
            unsafe { self.free(ptr) };
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if !self.fits(new) {
            return Err(AllocError);
        }
        if old.size() == 0 {
            return self.allocate(new);
        }
        Ok(self.block(ptr))
    }

    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if !self.fits(new) {
            return Err(AllocError);
        }
        if old.size() == 0 {
            return self.allocate_zeroed(new);
        }
        let size = self.core.layout.object_size;
        // SAFETY: the object has `size` writable bytes and old.size() <= size (it fit).
        unsafe { ptr::write_bytes(ptr.as_ptr().add(old.size()), 0, size - old.size()) };
        Ok(self.block(ptr))
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if !self.fits(new) {
            return Err(AllocError);
        }
        if new.size() == 0 {
            // SAFETY: Allocator contract: ptr is a live block of this cache with `old`.
            unsafe { self.deallocate(ptr, old) };
            return dangling(new);
        }
        Ok(self.block(ptr))
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let b = self.allocate(layout)?;
        if b.is_empty() {
            return Ok(b);
        }
        // SAFETY: the block is a fresh object of b.len() writable bytes.
        unsafe { ptr::write_bytes(b.cast::<u8>().as_ptr(), 0, b.len()) };
        Ok(b)
    }
}
