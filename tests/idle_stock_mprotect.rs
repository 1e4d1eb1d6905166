//! The idle-stock test of `tests/idle_stock.rs` with `membarrier` switched off
//! (`SLABCG_MEMBARRIER=0`), so that drains use the `mprotect` fallback barrier: the other
//! threads' stocks must still be drained. x86-64 only, where that fallback exists (and not
//! on CPUs with broadcast TLB invalidation, where it is not used).
//!
//! The allocator reads the environment at its first allocation, before any test runs, so
//! the test runs itself again in a child process with the variable set.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::process::Command;

use slabcg::SlabAlloc;

#[path = "common/idle_stock.rs"]
mod idle_stock;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const TEST: &str = "no_spurious_failure_with_the_mprotect_barrier";

#[test]
fn no_spurious_failure_with_the_mprotect_barrier() {
    if std::env::var_os("SLABCG_MEMBARRIER").as_deref() != Some("0".as_ref()) {
        let out = Command::new(std::env::current_exe().unwrap())
            .env("SLABCG_MEMBARRIER", "0")
            .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child run failed:\n{text}");
        assert!(text.contains("1 passed"), "child ran no test:\n{text}");
        return;
    }
    let kind = slabcg_accounting::hooks::remote_barrier_kind();
    if kind == "none" {
        // A CPU with broadcast TLB invalidation (INVLPGB): no fallback barrier exists.
        eprintln!("skipped: no fallback barrier on this CPU");
        return;
    }
    assert_eq!(kind, "mprotect");
    idle_stock::no_spurious_failure(&GLOBAL);
}
