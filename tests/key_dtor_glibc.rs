//! Thread-exit work armed from a pthread key destructor leaves nothing behind. A
//! `thread_local!` with `Drop` first used there is armed after the C runtime ran those
//! destructors: it never runs, and glibc's entry for it (from glibc's own malloc, which
//! `#[global_allocator]` leaves to the C runtime) leaks once per such thread, with whatever
//! it should have given back. Measured with `mallinfo2`, in one test alone in its binary:
//! threads other tests start at the same time grow glibc's stack cache, and the thread
//! descriptors it keeps come from that malloc too.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::OnceLock;
use std::thread;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const L: Layout = match Layout::from_size_align(256, 8) {
    Ok(l) => l,
    Err(_) => panic!("valid layout"),
};

/// The bytes glibc's malloc has handed out and not had back.
fn glibc_in_use() -> usize {
    // SAFETY: mallinfo2 has no preconditions and returns a plain struct.
    unsafe { libc::mallinfo2() }.uordblks
}

/// A pthread key whose destructor is `dtor`, made once per `cell`.
fn key(
    cell: &'static OnceLock<libc::pthread_key_t>,
    dtor: unsafe extern "C" fn(*mut libc::c_void),
) -> libc::pthread_key_t {
    *cell.get_or_init(|| {
        let mut k = 0;
        // SAFETY: a valid out pointer and a C-ABI destructor.
        assert_eq!(unsafe { libc::pthread_key_create(&mut k, Some(dtor)) }, 0);
        k
    })
}

/// A thread that only sets `k` to `v`: the key's destructor runs as the thread exits.
fn exit_with_key(k: libc::pthread_key_t, v: usize) {
    thread::spawn(move || {
        // SAFETY: `k` is a created key; its destructor takes `v`.
        unsafe { libc::pthread_setspecific(k, v as *const libc::c_void) };
    })
    .join()
    .unwrap();
}

/// Frees an accounted object: the thread's first uncharge, which registers its stock.
unsafe extern "C" fn free_in_dtor(p: *mut libc::c_void) {
    // SAFETY: `p` was allocated with `L` and handed to the key once.
    unsafe { GLOBAL.dealloc(p as *mut u8, L) };
}

/// Makes and drops a tenant: the thread's first use of its batch of objcg ids.
unsafe extern "C" fn tenant_in_dtor(_: *mut libc::c_void) {
    drop(Tenant::new("made-in-key-dtor"));
}

/// glibc's growth over `threads` runs of `one`, after 20 to warm up (the key, std's thread
/// machinery and glibc's arenas settle).
fn growth(threads: usize, mut one: impl FnMut()) -> usize {
    (0..20).for_each(|_| one());
    slabcg::drain_all_stocks();
    let before = glibc_in_use();
    (0..threads).for_each(|_| one());
    slabcg::drain_all_stocks();
    glibc_in_use().saturating_sub(before)
}

#[test]
fn key_destructors_leave_nothing_of_glibc_behind() {
    const THREADS: usize = 200;
    // The first uncharge of a thread, from a key destructor: the stock's exit step.
    static FREE_KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
    let t = Tenant::new("key-dtor-glibc");
    let k = key(&FREE_KEY, free_in_dtor);
    let grown = growth(THREADS, || {
        let p = {
            let _g = t.enter();
            // SAFETY: `L` has a non-zero size.
            unsafe { GLOBAL.alloc(L) }
        };
        assert!(!p.is_null());
        exit_with_key(k, p as usize);
    });
    assert!(
        grown < THREADS * 16,
        "a first uncharge in a key destructor: glibc's malloc grew by {grown} bytes over \
         {THREADS} exited threads (the stock's exit hook leaked)"
    );
    assert_eq!(t.current_exact(), 0);
    // A tenant made in a key destructor: the id batch's exit step. Its ids come back too,
    // so the id table does not grow.
    static TENANT_KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
    let k = key(&TENANT_KEY, tenant_in_dtor);
    let table = slabcg::accounting::testing::objcg_table_bytes();
    let grown = growth(THREADS, || exit_with_key(k, 1));
    let table_grown = slabcg::accounting::testing::objcg_table_bytes().saturating_sub(table);
    assert!(
        grown < THREADS * 16,
        "a tenant made in a key destructor: glibc's malloc grew by {grown} bytes over \
         {THREADS} exited threads (the id batch's exit hook leaked)"
    );
    assert!(
        table_grown < 64 << 10,
        "the objcg id table grew by {table_grown} bytes: the dead threads' batches kept ids"
    );
}
