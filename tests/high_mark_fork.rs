//! A fork while another thread is between marking a node (`high_draining`, its crossing of
//! `high`) and deciding (`raise_high`): in the child, where that thread does not exist,
//! nothing clears the mark, so no charge ever raises the tenant's pressure or counts a
//! `high` event again (`over_high` answers None while the mark is up).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use slabcg::{SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const HIGH: u64 = 1 << 20;

#[test]
fn a_child_forked_during_a_crossing_still_raises_pressure() {
    let t = Tenant::new("fork-high-mark");
    t.set_high(HIGH);
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, t2) = (stop.clone(), t.clone());
    // Crosses `high` again and again: each charge marks the node and decides.
    let busy = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            t2.charge(HIGH + (64 << 10), StatItem::Sock).unwrap();
            t2.uncharge(HIGH + (64 << 10), StatItem::Sock);
        }
    });
    let mut stuck = Vec::new();
    let rounds = 300;
    for round in 0..rounds {
        // SAFETY: the child charges and reads through the tenant API (the allocator's fork
        // handlers make allocation safe there) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: alarm has no preconditions: a hung child dies instead of the test.
            unsafe { libc::alarm(10) };
            // Well above `high` whatever the busy thread left charged.
            let before = t.events().high;
            t.charge(4 * HIGH, StatItem::Sock).unwrap();
            let ok = t.current() > HIGH && t.under_pressure() && t.events().high > before;
            // Give it back and cross again: still nothing if the mark is stuck.
            t.uncharge(4 * HIGH, StatItem::Sock);
            slabcg::drain_all_stocks();
            t.charge(4 * HIGH, StatItem::Sock).unwrap();
            let ok2 = t.under_pressure();
            // SAFETY: _exit ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok && ok2 { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: pid is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status),
            "round {round}: child died ({status:#x})"
        );
        if libc::WEXITSTATUS(status) != 0 {
            stuck.push(round);
        }
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    assert!(
        stuck.is_empty(),
        "{} of {rounds} children: usage 4 MiB above a 1 MiB high, yet no pressure and no high \
         event (the mark of a crossing in flight at the fork stayed set): rounds {:?}",
        stuck.len(),
        &stuck[..stuck.len().min(20)]
    );
}
