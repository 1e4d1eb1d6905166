//! No spurious failure: a tenant whose charges sit in other, idle threads' stocks can still
//! allocate up to its limit. Alone in its test binary, because any other test that drains
//! every stock (current_exact, stat) would empty the idle stocks this test sets up.

use slabcg::SlabAlloc;

#[path = "common/idle_stock.rs"]
mod idle_stock;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn no_spurious_failure_when_idle_threads_hold_stock() {
    idle_stock::no_spurious_failure(&GLOBAL);
}
