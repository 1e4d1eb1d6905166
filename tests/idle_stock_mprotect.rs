//! The idle-stock test of `tests/idle_stock.rs` with `membarrier` switched off
//! (`SLABCG_MEMBARRIER=0`), so that drains use the `mprotect` fallback barrier: the other
//! threads' stocks must still be drained. x86-64 only, where that fallback exists (and not
//! on CPUs with broadcast TLB invalidation, where it is not used).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use slabcg::SlabAlloc;

#[path = "common/idle_stock.rs"]
mod idle_stock;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn no_spurious_failure_with_the_mprotect_barrier() {
    // Before anything drains, so before the barrier is chosen; this binary runs no other
    // test, and no other thread reads the environment yet.
    std::env::set_var("SLABCG_MEMBARRIER", "0");
    let kind = slabcg_accounting::hooks::remote_barrier_kind();
    if kind == "none" {
        // A CPU with broadcast TLB invalidation (INVLPGB): no fallback barrier exists.
        eprintln!("skipped: no fallback barrier on this CPU");
        return;
    }
    assert_eq!(kind, "mprotect");
    idle_stock::no_spurious_failure(&GLOBAL);
}
