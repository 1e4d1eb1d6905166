//! Typed caches: a dedicated cache for one type `T` ([`TypedCache`]) whose allocations are
//! owned boxes ([`CacheBox`]), so safe code keeps a `T` in a cache without raw pointers.

use core::alloc::Layout;
use core::fmt;
use core::marker::PhantomData;
use core::mem::{self, ManuallyDrop};
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use crate::dedicated::{Cache, CacheError};

/// A dedicated cache for values of type `T`: a [`Cache`] built for `Layout::new::<T>()`,
/// whose [`alloc`](Self::alloc) moves a value into a slot and returns a [`CacheBox`] that
/// drops it and frees the slot.
///
/// - Accounted (`account = true`), a value allocated inside a tenant scope is charged to
///   that tenant (the cache's object size), and [`alloc`](Self::alloc) gives the value back
///   as `Err(value)` when the tenant's limit refuses it (after the usual drain and reclaim;
///   under `OomPolicy::Kill` the kill makes room instead).
/// - Over-aligned types are served with their alignment, up to 4 KiB (a page);
///   [`new`](Self::new) panics above that, [`try_new`](Self::try_new) returns the error.
/// - Zero-sized types take no slot, as with `Box`: their boxes hold a dangling, aligned
///   pointer, are never refused and never charged; dropping one still runs `T`'s
///   destructor.
///
/// `TypedCache<T>` is `Send + Sync` for every `T: Send` (threads share it through `&` and
/// each allocate their own boxes); a `CacheBox<T>` is `Send` when `T: Send` and `Sync` when
/// `T: Sync`, like `Box<T>`.
///
/// ```
/// use slabcg_allocator::TypedCache;
/// use slabcg_accounting::Tenant;
///
/// struct Request { id: u64, body: [u8; 120] }
///
/// let requests: TypedCache<Request> = TypedCache::new("requests", true);
/// let tenant = Tenant::new("customer");
/// tenant.set_max(1 << 20);
/// let _in = tenant.enter();
/// let mut r = requests.alloc(Request { id: 1, body: [0; 120] }).ok().expect("under the limit");
/// r.id += 1;
/// assert_eq!(r.id, 2);
/// assert_eq!(requests.cache().live_objects(), 1);
/// drop(r); // drops the Request and frees its slot
/// assert_eq!(requests.cache().live_objects(), 0);
/// ```
pub struct TypedCache<T> {
    cache: Cache,
    // The cache holds no `T` itself (its boxes do, and borrow it): it is Send and Sync
    // whatever `T` is, which covers the contract's `T: Send`.
    _type: PhantomData<fn(T) -> T>,
}

impl<T> TypedCache<T> {
    /// A cache for `T` named `name`, charging tenants when `account` is true. Panics (in
    /// user context) when `T` is aligned above 4 KiB or does not fit a 1 MiB slab.
    pub fn new(name: &str, account: bool) -> TypedCache<T> {
        match Self::try_new(name, account) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// A cache for `T`, or why `T`'s layout cannot be served.
    pub fn try_new(name: &str, account: bool) -> Result<TypedCache<T>, CacheError> {
        let cache = Cache::builder(name, Layout::new::<T>())
            .account(account)
            .try_build()?;
        Ok(TypedCache {
            cache,
            _type: PhantomData,
        })
    }

    /// Moves `value` into a fresh slot, charged to the current tenant when the cache is
    /// accounted. `Err(value)`, the value untouched, when the tenant's limit refuses the
    /// charge or memory is exhausted.
    #[inline(always)]
    pub fn alloc(&self, value: T) -> Result<CacheBox<'_, T>, T> {
        let ptr = if mem::size_of::<T>() == 0 {
            NonNull::dangling()
        } else {
            let Some(p) = self.cache.alloc() else {
                return Err(value);
            };
            p.cast::<T>()
        };
        // SAFETY: a fresh slot of at least size_of::<T>() bytes aligned to align_of::<T>()
        // (the cache was built for Layout::new::<T>()), owned by nobody else; for a
        // zero-sized T, a dangling aligned pointer, valid for a write of zero bytes. The box
        // now owns the value (it is dropped once, by the box).
        unsafe { ptr.as_ptr().write(value) };
        Ok(CacheBox {
            ptr,
            cache: &self.cache,
            _owns: PhantomData,
        })
    }

    /// The underlying cache (its geometry, `live_objects`, name).
    pub fn cache(&self) -> &Cache {
        &self.cache
    }
}

impl<T> fmt::Debug for TypedCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedCache")
            .field("type", &core::any::type_name::<T>())
            .field("cache", &self.cache)
            .finish()
    }
}

/// A `T` in a slot of a [`TypedCache`]: derefs to the `T`; dropping it drops the `T` and
/// frees the slot (uncharging the tenant it was charged to, whichever thread drops it).
pub struct CacheBox<'c, T> {
    ptr: NonNull<T>,
    cache: &'c Cache,
    _owns: PhantomData<T>,
}

// SAFETY: a CacheBox owns its T like a Box; the cache it frees to is Sync (any thread may
// free a slot).
unsafe impl<T: Send> Send for CacheBox<'_, T> {}
// SAFETY: shared access to a CacheBox is shared access to its T.
unsafe impl<T: Sync> Sync for CacheBox<'_, T> {}

impl<'c, T> CacheBox<'c, T> {
    /// Moves the value out and frees the slot.
    pub fn into_inner(b: CacheBox<'c, T>) -> T {
        let b = ManuallyDrop::new(b);
        // SAFETY: the box holds an initialised T, read once; the ManuallyDrop keeps the
        // box's Drop from dropping it again.
        let value = unsafe { ptr::read(b.ptr.as_ptr()) };
        // SAFETY: the slot is ours and no longer holds a value.
        unsafe { free_slot(b.cache, b.ptr) };
        value
    }
}

/// Frees the slot of a box (nothing for a zero-sized `T`, which has none).
///
/// # Safety
/// `ptr` came from `cache.alloc()` for a box of `T`, is freed once, and holds no live value.
#[inline(always)]
unsafe fn free_slot<T>(cache: &Cache, ptr: NonNull<T>) {
    if mem::size_of::<T>() != 0 {
        // SAFETY: caller's contract; a box's slot is this cache's, freed once (`free_owned`).
        unsafe { cache.free_owned(ptr.cast()) };
    }
}

impl<T> Drop for CacheBox<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        /// Frees the slot even when `T`'s destructor panics.
        struct Free<'a, T>(&'a Cache, NonNull<T>);
        impl<T> Drop for Free<'_, T> {
            fn drop(&mut self) {
                // SAFETY: the box's slot, freed once, its value dropped before this runs.
                unsafe { free_slot(self.0, self.1) };
            }
        }
        let _free = Free(self.cache, self.ptr);
        // SAFETY: the box holds an initialised T, dropped once, here.
        unsafe { ptr::drop_in_place(self.ptr.as_ptr()) };
    }
}

impl<T> Deref for CacheBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box holds an initialised T for its whole life.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for CacheBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref; &mut self gives exclusive access.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: fmt::Debug> fmt::Debug for CacheBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Display> fmt::Display for CacheBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
