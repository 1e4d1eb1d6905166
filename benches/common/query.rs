//! One query of a service, with a tenant of its own from birth to death: the unit of
//! `cargo bench --bench accounting -- tenant_lifecycle` and `examples/lifecycle_probe.rs`.

use std::hint::black_box;

use slabcg::Tenant;

/// A child of `service` with a 1 MiB limit, a scope with a 300-byte scratch buffer and a
/// 64-byte result, then the drop: the result, returned, outlives its tenant, whose charge
/// moves to the service.
pub fn query(service: &Tenant) -> Box<[u8; 64]> {
    let q = service.child("query");
    q.set_max(1 << 20);
    let result = {
        let _scope = q.enter();
        let scratch = vec![0u8; 300];
        black_box(&scratch);
        Box::new([1u8; 64])
    };
    drop(q);
    result
}
