//! The accounted variants of the workloads (issue 20), chosen by cargo feature like the
//! allocator: with `slabcg-tenant` every worker thread runs in a tenant of its own; with
//! `slabcg-request` each request (or round, where the workload has rounds but no requests)
//! also runs in a new child tenant of its thread's, dropped when it ends, so that what it
//! leaves alive stays charged to the thread's tenant through reparenting. Without either
//! feature both calls return a guard that does nothing.
//!
//! The workloads call [`worker`] first thing on every thread they start, and [`request`]
//! around each unit of work that a service would run in a request's tenant.

/// Keeps a tenant scope entered until dropped (nothing, in the unaccounted builds).
#[must_use = "the scope ends when the guard drops"]
pub struct Scope {
    #[cfg(any(feature = "slabcg-tenant", feature = "slabcg-request"))]
    _guard: Option<slabcg::ScopeGuard>,
}

#[cfg(any(feature = "slabcg-tenant", feature = "slabcg-request"))]
fn service() -> &'static slabcg::Tenant {
    static SERVICE: std::sync::OnceLock<slabcg::Tenant> = std::sync::OnceLock::new();
    SERVICE.get_or_init(|| slabcg::Tenant::new("bench"))
}

/// Enters a new tenant for the calling worker thread (`slabcg-tenant`, `slabcg-request`).
pub fn worker() -> Scope {
    Scope {
        #[cfg(any(feature = "slabcg-tenant", feature = "slabcg-request"))]
        _guard: Some(service().child("worker").enter()),
    }
}

/// Enters a new child of the current tenant for one request (`slabcg-request` only; a
/// request of the other builds stays where it is).
pub fn request() -> Scope {
    Scope {
        // The guard holds the child's only handle: it dies when the request ends.
        #[cfg(feature = "slabcg-request")]
        _guard: Some(
            if slabcg::accounting::hooks::current_objcg() != 0 {
                slabcg::current_tenant()
            } else {
                service().clone()
            }
            .child("request")
            .enter(),
        ),
        #[cfg(all(feature = "slabcg-tenant", not(feature = "slabcg-request")))]
        _guard: None,
    }
}
