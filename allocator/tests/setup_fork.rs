//! A fork that lands while another thread runs the process-wide setup (`init::init_once`)
//! leaves a child whose first slow path must not wait for that thread, which does not exist
//! there. The global allocator is the system's, and every trial runs in a fresh child
//! process, where slabcg was never set up (this binary runs nothing else).

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use slabcg_allocator::Cache;

fn build_and_use() {
    let c = Cache::builder("setup-fork", Layout::from_size_align(64, 8).unwrap()).build();
    let p = c.alloc().unwrap();
    // SAFETY: allocated just above, freed once.
    unsafe { c.free(p) };
}

/// In a fresh process: a thread sets slabcg up while this one forks 16 grandchildren, each
/// of which builds and uses a cache. How many of them hung.
fn trial() -> i32 {
    let go = Arc::new(AtomicBool::new(false));
    let setter = {
        let go = go.clone();
        std::thread::spawn(move || {
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            build_and_use();
        })
    };
    let mut pids = Vec::with_capacity(16);
    go.store(true, Ordering::Release);
    for _ in 0..16 {
        // SAFETY: the grandchild only uses slabcg's cache and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: SIGALRM's default action ends the grandchild if it hangs.
            unsafe { libc::alarm(2) };
            build_and_use();
            // SAFETY: leaves without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        pids.push(pid);
    }
    setter.join().unwrap();
    let mut hung = 0;
    for pid in pids {
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
            hung += 1;
        }
    }
    hung
}

#[test]
fn a_child_forked_during_the_setup_is_not_stuck() {
    let mut hung_trials = 0;
    for _ in 0..200 {
        // SAFETY: the child runs one trial and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let hung = trial();
            // SAFETY: leaves without running the parent's destructors.
            unsafe { libc::_exit(hung.min(100)) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "trial status {status}");
        if libc::WEXITSTATUS(status) > 0 {
            hung_trials += 1;
        }
    }
    assert_eq!(
        hung_trials, 0,
        "trials in which a grandchild forked during the setup hung"
    );
}
