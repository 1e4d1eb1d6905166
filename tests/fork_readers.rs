//! A fork while another thread is inside an objcg read section (the slow paths that use the
//! node an objcg points at): the child, where that thread does not exist, can still drop the
//! tenant, whose reparenting waits for the objcg's readers. Without the child handler's
//! reset, a reader count left over from the parent made that wait last for ever.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use slabcg::accounting::hooks::{self, StatIdx};
use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn a_child_drops_tenants_whose_objcgs_had_readers_at_the_fork() {
    let svc = Tenant::new("fork-readers");
    let c = svc.child("busy");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let id = c.objcg_id();
    // Charges and uncharges through the objcg, beyond what a stock keeps: every one takes the
    // slow paths, which read the objcg's node. This thread holds no handle, so in a child
    // dropping `c` kills the tenant and re-points its objcg.
    let busy = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            // SAFETY: the main thread's handle keeps the objcg alive until `stop`, and each
            // uncharge gives back the bytes just charged.
            unsafe {
                if hooks::charge(id, 512 << 10, StatIdx::LARGE) {
                    hooks::uncharge(id, 512 << 10, StatIdx::LARGE);
                }
            }
        }
    });
    for round in 0..200 {
        // SAFETY: the child only drops handles (allocation-free apart from the allocator,
        // which the fork handlers made safe) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: alarm is async-signal-safe; the child owns its copy of `c` (the
            // parent's is untouched) and drops it once, then leaves with _exit.
            unsafe {
                libc::alarm(10);
                drop(std::ptr::read(&c));
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: pid is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "round {round}: the child did not finish dropping the tenant (status {status:#x})"
        );
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    assert_eq!(c.current_exact(), 0);
}
