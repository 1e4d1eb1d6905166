//! A pthread key destructor (as a C library's thread cleanup runs) frees an accounted object
//! on a thread that never charged or uncharged before. That first uncharge registers the
//! thread's stock after the thread's `thread_local!` destructors ran, so only the pthread key
//! armed at registration gives the stock back at exit (`accounting/src/drain.rs`,
//! `register`). Without it the uncharge stayed in the dead thread's stock, and a later thread
//! reusing the dead one's TLS block linked the stock registry into a cycle, which hung the
//! next drain (found by a bug hunt).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const L: Layout = match Layout::from_size_align(256, 8) {
    Ok(l) => l,
    Err(_) => panic!("valid layout"),
};

unsafe extern "C" fn free_in_dtor(p: *mut libc::c_void) {
    // SAFETY: `p` was allocated with `L` by `alloc_in` and handed to the key once.
    unsafe { GLOBAL.dealloc(p as *mut u8, L) };
}

fn key() -> libc::pthread_key_t {
    static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
    *KEY.get_or_init(|| {
        let mut k = 0;
        // SAFETY: a valid out pointer and a C-ABI destructor.
        assert_eq!(
            unsafe { libc::pthread_key_create(&mut k, Some(free_in_dtor)) },
            0
        );
        k
    })
}

fn alloc_in(t: &Tenant) -> usize {
    let _g = t.enter();
    // SAFETY: `L` has a non-zero size.
    let p = unsafe { GLOBAL.alloc(L) };
    assert!(!p.is_null());
    p as usize
}

/// A thread that only parks the object in its thread-specific data: the key destructor
/// frees it as the thread exits.
fn exit_freeing_in_key_dtor(p: usize) {
    let k = key();
    thread::spawn(move || {
        // SAFETY: `k` is a created key; `p` is a live object handed over.
        unsafe { libc::pthread_setspecific(k, p as *const libc::c_void) };
    })
    .join()
    .unwrap();
}

/// Aborts the process with a message if `f` has not returned within `secs`: the failure this
/// file guards against is a hang.
fn within(secs: u64, what: &'static str, f: impl FnOnce()) {
    let done = Arc::new(AtomicBool::new(false));
    let watched = done.clone();
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(secs));
        if !watched.load(Ordering::SeqCst) {
            eprintln!(
                "{what}: still running after {secs} s (a drain looping over the stock registry?)"
            );
            std::process::abort();
        }
    });
    f();
    done.store(true, Ordering::SeqCst);
}

/// Thread exit gives the stock back (README), so once the thread is joined the tenant reads
/// 0 without a drain.
#[test]
fn key_dtor_free_is_given_back_at_thread_exit() {
    let t = Tenant::new("key-dtor");
    let p = alloc_in(&t);
    assert!(t.current_exact() > 0);
    exit_freeing_in_key_dtor(p);
    assert_eq!(
        t.current(),
        0,
        "the exited thread's stock still holds the uncharge"
    );
}

/// The same, round after round, with a thread between rounds that charges in the tenant and
/// likely reuses the dead thread's stack and TLS block; each round drains.
#[test]
fn key_dtor_frees_then_threads_reuse_the_tls() {
    within(120, "key_dtor_frees_then_threads_reuse_the_tls", || {
        let t = Tenant::new("key-dtor-reuse");
        for round in 0..200 {
            let p = alloc_in(&t);
            exit_freeing_in_key_dtor(p);
            let t2 = t.clone();
            thread::spawn(move || {
                let q = alloc_in(&t2);
                // SAFETY: allocated with `L` just above.
                unsafe { GLOBAL.dealloc(q as *mut u8, L) };
            })
            .join()
            .unwrap();
            assert_eq!(t.current_exact(), 0, "round {round}");
        }
    });
}
