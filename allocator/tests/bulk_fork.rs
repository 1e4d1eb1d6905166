//! A program whose global allocator is not slabcg, using a dedicated cache only in bulk,
//! forks while another thread allocates from the cache: the child gets the cache usable
//! (the fork handlers, which building the cache registers, hold its lock across the fork).
//! Its own test binary: nothing else here may run slabcg's setup first.

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use slabcg_allocator::Cache;

#[test]
fn a_child_forked_during_bulk_calls_can_use_the_cache() {
    let cache =
        Arc::new(Cache::builder("bulk-fork", Layout::from_size_align(64, 8).unwrap()).build());
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (cache, stop) = (cache.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut v = vec![std::ptr::null_mut::<u8>(); 4096];
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(cache.alloc_bulk(&mut v), v.len());
                // SAFETY: the objects just allocated, freed once.
                unsafe { cache.free_bulk(&v) };
            }
        })
    };
    let mut hung = 0;
    for _ in 0..200 {
        // SAFETY: the child only calls the cache (which does not allocate through the
        // global allocator) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: in the child; SIGALRM's default action ends it if the call hangs.
            unsafe { libc::alarm(2) };
            let mut v = [std::ptr::null_mut::<u8>(); 2];
            let n = cache.alloc_bulk(&mut v);
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(if n == 2 { 0 } else { 3 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
            hung += 1;
            break;
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    assert_eq!(hung, 0, "a forked child deadlocked on the cache's lock");
}
