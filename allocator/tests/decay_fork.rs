//! A program whose global allocator is not slabcg starts the decay thread at startup, then
//! forks before it touches a cache (a pre-fork server): the child, which has no such
//! thread, gets one when it asks. Its own binary: nothing else may run slabcg's setup first.

use std::alloc::Layout;

use slabcg_allocator::Cache;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn the_child_of_an_early_fork_can_start_the_decay_thread() {
    slabcg_allocator::start_decay_thread().expect("a decay thread");
    // SAFETY: the child uses the cache, reads /proc and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let cache = Cache::builder("decay-fork", Layout::from_size_align(64, 8).unwrap()).build();
        let p = cache.alloc().unwrap();
        // SAFETY: allocated just above, freed once.
        unsafe { cache.free(p) };
        let before = threads();
        let started = slabcg_allocator::start_decay_thread().is_ok();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let after = threads();
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { libc::_exit(if started && after == before + 1 { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's start_decay_thread started no thread (status {status})"
    );
}
