//! The atomics the slabcg crates use, from one place, so that a loom model can swap them:
//! core's normally, loom's under `cfg(loom)` (as crossbeam-epoch's `primitive` module does).
//!
//! Loom's atomics have no `const` constructor and live only inside one execution of
//! `loom::model`. So that the structures a model checks keep their `const` constructors
//! (they sit in `const`-initialised thread-locals and in structures built by `const fn`s),
//! the atomics here are, under loom, loom's atomic made on first use: `new` is `const`
//! and records the initial value, and the first access inside the model creates the loom
//! object (as the spin lock's flag is, `lock.rs`). What follows for a model:
//! - build the structure inside `loom::model` (each execution gets fresh atomics), and
//!   never use one that outlives an execution: a `static` or a thread-local must not be
//!   reached by a model (statics keep core's atomics anyway);
//! - loom treats an atomic's creation as a plain write, which every later access must
//!   happen after: touch (load) the atomics that threads race on before sharing the
//!   structure, as a constructor would have made them. One that only the current holder
//!   of some protocol touches (a stock's slots) may be made by its first holder; then
//!   loom's check of its creation is a check of the protocol.
//!
//! In the normal build these are core's own types, re-exported: nothing changes in the
//! generated code. `Ordering` is the same type in both.

#[cfg(not(loom))]
pub use core::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8,
    AtomicUsize, Ordering,
};

#[cfg(loom)]
pub use loom::sync::atomic::{fence, Ordering};
#[cfg(loom)]
pub use made_on_first_use::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

/// Runs `body` in every execution of a loom model, on a thread with a 1 MiB stack (under
/// loom the stock structures' atomics are larger, and a model thread's stack is 32 KiB), with
/// room for 10,000 branches per execution (loom's default is 1,000; an object-stock drain
/// reads every class's tagged count twice). The models of both crates' protocols use it.
#[cfg(loom)]
pub fn model(body: fn()) {
    let mut b = loom::model::Builder::new();
    b.max_branches = b.max_branches.max(10_000);
    b.check(move || {
        loom::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(body)
            .unwrap()
            .join()
            .unwrap();
    });
}

/// The hint inside a spin loop: `core::hint::spin_loop`, or under loom a yield to the model
/// scheduler (a loom model must not spin without one).
#[inline(always)]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::hint::spin_loop();
}

/// Loom's atomics behind a `const` constructor (module docs).
#[cfg(loom)]
mod made_on_first_use {
    use core::mem::ManuallyDrop;
    use std::sync::OnceLock;

    use super::Ordering;

    // Without drop glue (`ManuallyDrop`: a loom atomic owns no memory, its state lives in
    // the model's execution), so that `const fn`s that overwrite structures holding these
    // (`bins[c] = ..`) still compile under loom.
    macro_rules! int {
        ($($name:ident: $t:ty),* $(,)?) => {$(
            #[doc = concat!("Loom's `", stringify!($name), "`, made on first use.")]
            pub struct $name {
                init: $t,
                cell: ManuallyDrop<OnceLock<loom::sync::atomic::$name>>,
            }

            impl $name {
                #[doc = concat!("A `", stringify!($name), "` holding `v` (no loom object yet).")]
                pub const fn new(v: $t) -> Self {
                    $name { init: v, cell: ManuallyDrop::new(OnceLock::new()) }
                }
                #[track_caller]
                fn get(&self) -> &loom::sync::atomic::$name {
                    self.cell.get_or_init(|| loom::sync::atomic::$name::new(self.init))
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn load(&self, o: Ordering) -> $t {
                    self.get().load(o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn store(&self, v: $t, o: Ordering) {
                    self.get().store(v, o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn swap(&self, v: $t, o: Ordering) -> $t {
                    self.get().swap(v, o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn compare_exchange(
                    &self,
                    a: $t,
                    b: $t,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$t, $t> {
                    self.get().compare_exchange(a, b, s, f)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn compare_exchange_weak(
                    &self,
                    a: $t,
                    b: $t,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$t, $t> {
                    self.get().compare_exchange_weak(a, b, s, f)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                    self.get().fetch_add(v, o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn fetch_sub(&self, v: $t, o: Ordering) -> $t {
                    self.get().fetch_sub(v, o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn fetch_or(&self, v: $t, o: Ordering) -> $t {
                    self.get().fetch_or(v, o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn fetch_and(&self, v: $t, o: Ordering) -> $t {
                    self.get().fetch_and(v, o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn fetch_max(&self, v: $t, o: Ordering) -> $t {
                    self.get().fetch_max(v, o)
                }
                #[doc = "As core's."]
                #[track_caller]
                pub fn fetch_min(&self, v: $t, o: Ordering) -> $t {
                    self.get().fetch_min(v, o)
                }
            }
        )*};
    }

    int!(AtomicU8: u8, AtomicU32: u32, AtomicU64: u64, AtomicUsize: usize, AtomicI32: i32, AtomicI64: i64);

    /// Loom's `AtomicBool`, made on first use.
    pub struct AtomicBool {
        init: bool,
        cell: ManuallyDrop<OnceLock<loom::sync::atomic::AtomicBool>>,
    }

    impl AtomicBool {
        /// An `AtomicBool` holding `v` (no loom object yet).
        pub const fn new(v: bool) -> Self {
            AtomicBool {
                init: v,
                cell: ManuallyDrop::new(OnceLock::new()),
            }
        }
        #[track_caller]
        fn get(&self) -> &loom::sync::atomic::AtomicBool {
            self.cell
                .get_or_init(|| loom::sync::atomic::AtomicBool::new(self.init))
        }
        /// As core's.
        #[track_caller]
        pub fn load(&self, o: Ordering) -> bool {
            self.get().load(o)
        }
        /// As core's.
        #[track_caller]
        pub fn store(&self, v: bool, o: Ordering) {
            self.get().store(v, o)
        }
        /// As core's.
        #[track_caller]
        pub fn swap(&self, v: bool, o: Ordering) -> bool {
            self.get().swap(v, o)
        }
        /// As core's.
        #[track_caller]
        pub fn compare_exchange(
            &self,
            a: bool,
            b: bool,
            s: Ordering,
            f: Ordering,
        ) -> Result<bool, bool> {
            self.get().compare_exchange(a, b, s, f)
        }
        /// As core's.
        #[track_caller]
        pub fn compare_exchange_weak(
            &self,
            a: bool,
            b: bool,
            s: Ordering,
            f: Ordering,
        ) -> Result<bool, bool> {
            self.get().compare_exchange_weak(a, b, s, f)
        }
    }

    /// Loom's `AtomicPtr`, made on first use.
    pub struct AtomicPtr<T> {
        init: *mut T,
        cell: ManuallyDrop<OnceLock<loom::sync::atomic::AtomicPtr<T>>>,
    }

    // SAFETY: as core's `AtomicPtr`: the pointer is only a value here; `init` is read (to
    // make the loom object) and never written after `new`.
    unsafe impl<T> Send for AtomicPtr<T> {}
    // SAFETY: as above; every shared access goes through the loom atomic.
    unsafe impl<T> Sync for AtomicPtr<T> {}

    impl<T> AtomicPtr<T> {
        /// An `AtomicPtr` holding `p` (no loom object yet).
        pub const fn new(p: *mut T) -> Self {
            AtomicPtr {
                init: p,
                cell: ManuallyDrop::new(OnceLock::new()),
            }
        }
        #[track_caller]
        fn get(&self) -> &loom::sync::atomic::AtomicPtr<T> {
            self.cell
                .get_or_init(|| loom::sync::atomic::AtomicPtr::new(self.init))
        }
        /// As core's.
        #[track_caller]
        pub fn load(&self, o: Ordering) -> *mut T {
            self.get().load(o)
        }
        /// As core's.
        #[track_caller]
        pub fn store(&self, p: *mut T, o: Ordering) {
            self.get().store(p, o)
        }
        /// As core's.
        #[track_caller]
        pub fn swap(&self, p: *mut T, o: Ordering) -> *mut T {
            self.get().swap(p, o)
        }
        /// As core's.
        #[track_caller]
        pub fn compare_exchange(
            &self,
            a: *mut T,
            b: *mut T,
            s: Ordering,
            f: Ordering,
        ) -> Result<*mut T, *mut T> {
            self.get().compare_exchange(a, b, s, f)
        }
    }
}
