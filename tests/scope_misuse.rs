//! Scope guards dropped out of order (a bug in the caller) stay sound: the thread never goes
//! back to the id of a tenant whose last handle is gone, which a later tenant could reuse.
//! Alone in its binary: the test leaves its thread in a tenant's scope on purpose.

use slabcg::{current_tenant, SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn out_of_order_guards_never_charge_a_reused_id() {
    let a = Tenant::new("misuse-a");
    let b = Tenant::new("misuse-b");
    let ga = a.enter();
    let gb = b.enter();
    // Out of order: `a`'s guard first. The thread stays in `b` (its guard is the innermost),
    // and `a` must stay alive, since `b`'s guard returns to it.
    drop(ga);
    assert_eq!(current_tenant(), b);
    drop(gb);
    assert_eq!(current_tenant(), a);
    let a_id = a.objcg_id();
    drop(a);
    slabcg::drain_all_stocks();
    // Before the fix `a` died here, its id was recycled for `c`, and the allocation below
    // (in `a`'s scope, by id) was charged to `c`, which was never entered.
    let c = Tenant::new("misuse-c");
    assert_ne!(
        c.objcg_id(),
        a_id,
        "the id of a tenant still in scope was reused"
    );
    let v = vec![0u8; 1000];
    std::hint::black_box(&v);
    assert_eq!(c.current_exact(), 0);
    assert!(current_tenant().current_exact() >= 1000);
    assert_eq!(current_tenant().name(), "misuse-a");
    drop(v);

    // A forgotten inner guard: the outer guard's drop cannot end the inner scope, so the
    // thread stays in the forgotten one (whose handle is leaked with it).
    let d = Tenant::new("misuse-d");
    let e = Tenant::new("misuse-e");
    let gd = d.enter();
    std::mem::forget(e.enter());
    drop(gd);
    drop(d);
    assert_eq!(current_tenant(), e);
    // Properly nested guards still work on top of that.
    let f = Tenant::new("misuse-f");
    {
        let _gf = f.enter();
        assert_eq!(current_tenant(), f);
    }
    assert_eq!(current_tenant(), e);
}
