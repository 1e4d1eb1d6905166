//! The tenant tree and the allocator as Prometheus metrics (feature `prometheus`), named in
//! the cgroup / cAdvisor style. Read at scrape time: nothing is registered per tenant, so a
//! dropped tenant's series simply stop, and one scrape drains the stocks once
//! ([`Tenant::all_stats`]), however many tenants there are.
//!
//! Series (the `tenant` label is the tenant's path, "/"-separated, `root` for the root):
//! - `slabcg_memory_current_bytes`, `_peak_bytes`, and `_max_bytes` / `_high_bytes` for the
//!   tenants that have such a limit (an unlimited one has no series);
//! - `slabcg_memory_events_total{event="high|max|oom|oom_kill"}`, hierarchical as
//!   memory.events;
//! - `slabcg_memory_stat_bytes{item="slab|large|sock|owner_meta"}`, as memory.stat;
//! - `slabcg_allocator_{allocated,active,resident,mapped,metadata}_bytes`.
//!
//! ```
//! use slabcg::Tenant;
//! let t = Tenant::new("customer-42");
//! t.set_max(64 << 20);
//! let text = slabcg::prometheus::render();
//! assert!(text.contains(r#"slabcg_memory_max_bytes{tenant="customer-42"} 67108864"#));
//! assert!(text.contains(r#"slabcg_memory_events_total{tenant="customer-42",event="oom_kill"} 0"#));
//! ```

use prometheus_client::collector::Collector as ClientCollector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::{Tenant, TenantStat};

/// A [`prometheus_client`] collector of every live tenant and of the allocator: register it
/// once (`registry.register_collector(Box::new(Collector))`) beside the service's own
/// metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct Collector;

/// The text exposition (OpenMetrics) of every live tenant and of the allocator.
pub fn render() -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Collector));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The content type of [`render`]'s text, for an HTTP response.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn gauges(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    stats: &[TenantStat],
    value: impl Fn(&TenantStat) -> Option<u64>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, Some(&Unit::Bytes), MetricType::Gauge)?;
    for s in stats {
        if let Some(v) = value(s) {
            let labels = [("tenant", s.path.as_str())];
            ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

fn limit(v: u64) -> Option<u64> {
    (v != u64::MAX).then_some(v)
}

impl ClientCollector for Collector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = Tenant::all_stats();
        let e = &mut enc;
        gauges(
            e,
            "slabcg_memory_current",
            "Bytes charged to the tenant and its descendants (memory.current).",
            &stats,
            |s| Some(s.current),
        )?;
        gauges(
            e,
            "slabcg_memory_peak",
            "Highest charged usage (memory.peak).",
            &stats,
            |s| Some(s.peak),
        )?;
        gauges(
            e,
            "slabcg_memory_max",
            "Hard limit (memory.max); no series when unlimited.",
            &stats,
            |s| limit(s.max),
        )?;
        gauges(
            e,
            "slabcg_memory_high",
            "Soft limit (memory.high); no series when unlimited.",
            &stats,
            |s| limit(s.high),
        )?;
        {
            let mut m = e.encode_descriptor(
                "slabcg_memory_events",
                "Events of the tenant and its descendants (memory.events).",
                None,
                MetricType::Counter,
            )?;
            for s in &stats {
                let ev = &s.events;
                for (event, v) in [
                    ("high", ev.high),
                    ("max", ev.max),
                    ("oom", ev.oom),
                    ("oom_kill", ev.oom_kill),
                ] {
                    let labels = [("tenant", s.path.as_str()), ("event", event)];
                    ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        {
            let mut m = e.encode_descriptor(
                "slabcg_memory_stat",
                "Charged bytes by kind (memory.stat).",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            for s in &stats {
                for (item, v) in [
                    ("slab", s.slab),
                    ("large", s.large),
                    ("sock", s.sock),
                    ("owner_meta", s.owner_meta),
                ] {
                    let labels = [("tenant", s.path.as_str()), ("item", item)];
                    ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        let a = crate::stats();
        for (name, help, v) in [
            (
                "slabcg_allocator_allocated",
                "Bytes in live allocations (usable sizes).",
                a.allocated,
            ),
            (
                "slabcg_allocator_active",
                "Bytes in slabs with a live object, and live large blocks.",
                a.active,
            ),
            (
                "slabcg_allocator_resident",
                "Bytes the allocator holds resident.",
                a.resident,
            ),
            (
                "slabcg_allocator_mapped",
                "Bytes the allocator has mapped.",
                a.mapped,
            ),
            (
                "slabcg_allocator_metadata",
                "Bytes of the allocator's own metadata.",
                a.metadata,
            ),
        ] {
            let m = e.encode_descriptor(name, help, Some(&Unit::Bytes), MetricType::Gauge)?;
            ConstGauge::new(v as u64).encode(m)?;
        }
        Ok(())
    }
}
