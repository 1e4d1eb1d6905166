//! The tenant tree and the allocator as Prometheus metrics (feature `prometheus`), named in
//! the cgroup / cAdvisor style. Read at scrape time: nothing is registered per tenant, so a
//! dropped tenant's series simply stop, and one scrape drains the stocks once
//! ([`Tenant::all_stats`]), however many tenants there are.
//!
//! Series (the `tenant` label is the tenant's path, `Tenant::path`: "/"-separated, a "/" or
//! "%" inside a name percent-encoded, `root` for the root, with `\`, `"` and newlines
//! escaped; a top-level tenant named "root" is `%72oot`, its first letter percent-encoded,
//! which no path is: a "%" in a name is `%25`). Tenants that share a path (siblings
//! of one name, such as a service's child per request) are one series, since two samples
//! with the same labels make a scrape invalid: the sum of theirs, with an unlimited `max`
//! or `high` making the sum unlimited. The counters of such a series go down when one of
//! its tenants dies (as a short-lived tenant's series starts again from 0 under the next
//! one of its name): count events on the parent, whose `events` include its children's.
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

/// Adds `s`, a tenant of the same label, to `into`: every number the collector writes
/// summed (saturating, so an unlimited `max` or `high`, `u64::MAX`, keeps the sum
/// unlimited), the peak too (at least the peak of the sum, and never below the summed
/// current). The fields the collector does not write are left as `into`'s.
fn add(into: &mut TenantStat, s: &TenantStat) {
    let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
    add(&mut into.current, s.current);
    add(&mut into.peak, s.peak);
    add(&mut into.max, s.max);
    add(&mut into.high, s.high);
    add(&mut into.slab, s.slab);
    add(&mut into.large, s.large);
    add(&mut into.sock, s.sock);
    add(&mut into.owner_meta, s.owner_meta);
    add(&mut into.events.high, s.events.high);
    add(&mut into.events.max, s.events.max);
    add(&mut into.events.oom, s.events.oom);
    add(&mut into.events.oom_kill, s.events.oom_kill);
}

/// The `tenant` label of a path: the text format's escapes (prometheus-client writes label
/// values as given), and `%72oot` for a tenant whose path is the root's label (`root`,
/// percent-encoded as no path is: `/root` is the path of a tenant "root" under a top-level
/// tenant named "").
fn label(path: &str, is_root: bool) -> String {
    let mut out = String::with_capacity(path.len() + 2);
    let path = if !is_root && path == "root" {
        "%72oot"
    } else {
        path
    };
    for c in path.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Every live tenant's numbers, one per label (its `path` now the label, [`add`] summing
/// the tenants that share one), in `all_stats`' order (the root first, then by path).
fn series() -> Vec<TenantStat> {
    let mut out: Vec<TenantStat> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, mut s) in Tenant::all_stats().into_iter().enumerate() {
        // `all_stats` puts the root first.
        s.path = label(&s.path, i == 0);
        match at.get(&s.path) {
            Some(&j) => add(&mut out[j], &s),
            None => {
                at.insert(s.path.clone(), out.len());
                out.push(s);
            }
        }
    }
    out
}

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
        let stats = series();
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use crate::{StatItem, Tenant};

    /// Siblings of one name are one series whose numbers add up; a tenant named "root" is
    /// neither the root's series nor that of a "root" under a tenant named ""; a name's
    /// quote and backslash are escaped; no two samples of a scrape carry the same name and
    /// labels.
    #[test]
    fn siblings_of_one_name_are_one_series() {
        let parent = Tenant::new("prom-siblings");
        let a = parent.child("request");
        let b = parent.child("request");
        let c = parent.child("request");
        a.set_max(1 << 20);
        b.set_max(2 << 20);
        a.set_high(1 << 19);
        a.charge(1000, StatItem::Sock).unwrap();
        b.charge(500, StatItem::Sock).unwrap();
        let named_root = Tenant::new("root");
        named_root.set_max(4096);
        // Its old label, `/root`, was the path of this one: one series for the two.
        let empty = Tenant::new("");
        let under_empty = empty.child("root");
        under_empty.set_max(8192);
        let odd = Tenant::new("we\"ird\\name");
        // A name with a "/" is not the child of the name before it: its own series.
        let slash = Tenant::new("prom-siblings/request");
        slash.charge(7, StatItem::Sock).unwrap();
        let text = super::render();
        let mut seen = HashSet::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (sample, _) = line.rsplit_once(' ').unwrap();
            assert!(seen.insert(sample.to_owned()), "two samples {sample}");
        }
        for want in [
            r#"slabcg_memory_current_bytes{tenant="prom-siblings/request"} 1500"#,
            r#"slabcg_memory_stat_bytes{tenant="prom-siblings/request",item="sock"} 1500"#,
            r#"slabcg_memory_current_bytes{tenant="prom-siblings"} 1500"#,
            r#"slabcg_memory_max_bytes{tenant="%72oot"} 4096"#,
            r#"slabcg_memory_max_bytes{tenant="/root"} 8192"#,
            r#"slabcg_memory_current_bytes{tenant="we\"ird\\name"} 0"#,
            r#"slabcg_memory_current_bytes{tenant="prom-siblings%2Frequest"} 7"#,
        ] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
        // c is unlimited, so the sum is: no max or high series.
        assert!(!text.contains(r#"slabcg_memory_max_bytes{tenant="prom-siblings/request"}"#));
        assert!(!text.contains(r#"slabcg_memory_high_bytes{tenant="prom-siblings/request"}"#));
        drop(c);
        let text = super::render();
        let want = r#"slabcg_memory_max_bytes{tenant="prom-siblings/request"} 3145728"#;
        assert!(text.contains(want), "{want} not in\n{text}");
        assert!(!text.contains(r#"slabcg_memory_max_bytes{tenant="root"}"#));
        a.uncharge(1000, StatItem::Sock);
        b.uncharge(500, StatItem::Sock);
        slash.uncharge(7, StatItem::Sock);
        drop((odd, named_root, slash));
    }
}
