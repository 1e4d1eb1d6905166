//! `json_groupby [RECORDS]`: an allocation-heavy Rust program of the shape of a JSON query
//! tool (issue 20): RECORDS (default 600,000) JSON lines are generated, parsed into
//! `serde_json::Value`s, grouped by city into a `HashMap` of `Vec`s grown by push, summed
//! into a `BTreeMap` of per-user counts keyed by short `String`s, regrouped by first tag,
//! and the summary serialized. Many short strings, maps and growing vectors, most of them
//! freed in bulk between the phases.
//!
//! Prints `RESULT workload=json_groupby allocator=.. records=.. elapsed_s=.. checksum=..`;
//! the checksum depends only on RECORDS, so every allocator must print the same one.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Instant;

use serde_json::Value;
use slabcg_bench_suite::rng::XorShift;
use slabcg_bench_suite::ALLOCATOR;

const CITIES: usize = 50;

/// The input: one JSON object per line.
fn generate(n: usize) -> String {
    let mut rng = XorShift::new(0x5eed);
    let mut s = String::new();
    for i in 0..n {
        let r = rng.next_u64();
        let ntags = 1 + (r % 4) as usize;
        let nitems = (r >> 8) as usize % 4;
        let _ = write!(
            s,
            r#"{{"id":{i},"user":"user-{:05}","city":"city-{:02}","amount":{}.{:02},"tags":["#,
            (r >> 16) % 20_000,
            (r >> 32) as usize % CITIES,
            (r >> 20) % 1000,
            (r >> 40) % 100
        );
        for t in 0..ntags {
            let _ = write!(
                s,
                r#"{}"t{}""#,
                if t > 0 { "," } else { "" },
                (r >> (t * 5)) % 24
            );
        }
        s.push_str(r#"],"items":["#);
        for k in 0..nitems {
            let _ = write!(
                s,
                r#"{}{{"sku":"sku-{:04}","qty":{}}}"#,
                if k > 0 { "," } else { "" },
                (r >> (k * 7)) % 5000,
                1 + (r >> (k * 3)) % 9
            );
        }
        s.push_str("]}\n");
    }
    s
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

fn run(n: usize) -> (u64, usize) {
    let text = generate(n);
    // Parse every line into a Value.
    let mut rows: Vec<Value> = Vec::new();
    for line in text.lines() {
        rows.push(serde_json::from_str(line).expect("valid JSON"));
    }
    drop(text);
    // Group by city (the rows move into the groups).
    let mut by_city: HashMap<String, Vec<Value>> = HashMap::new();
    for row in rows {
        let city = row["city"].as_str().unwrap_or("").to_owned();
        by_city.entry(city).or_default().push(row);
    }
    // Per city: amount, and per user counts keyed by short strings.
    let mut summary: BTreeMap<String, Value> = BTreeMap::new();
    let mut by_tag: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (city, rows) in by_city {
        let mut users: BTreeMap<String, u32> = BTreeMap::new();
        let mut amount = 0.0;
        let mut items = 0u64;
        for row in &rows {
            *users
                .entry(row["user"].as_str().unwrap_or("").to_owned())
                .or_default() += 1;
            amount += row["amount"].as_f64().unwrap_or(0.0);
            items += row["items"].as_array().map_or(0, |a| a.len() as u64);
        }
        let top: Vec<Value> = {
            let mut u: Vec<(&String, &u32)> = users.iter().collect();
            u.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            u.iter()
                .take(5)
                .map(|(k, v)| serde_json::json!([k, v]))
                .collect()
        };
        summary.insert(
            city,
            serde_json::json!({"rows": rows.len(), "users": users.len(),
                               "amount": (amount * 100.0).round() / 100.0, "items": items, "top": top}),
        );
        // Regroup the rows by their first tag (a second reshuffle).
        for row in rows {
            let tag = row["tags"][0].as_str().unwrap_or("").to_owned();
            by_tag.entry(tag).or_default().push(row);
        }
    }
    let mut per_tag: BTreeMap<String, Value> = BTreeMap::new();
    for (tag, rows) in by_tag {
        let qty: u64 = rows
            .iter()
            .flat_map(|r| r["items"].as_array().into_iter().flatten())
            .map(|it| it["qty"].as_u64().unwrap_or(0))
            .sum();
        per_tag.insert(tag, serde_json::json!({"rows": rows.len(), "qty": qty}));
    }
    let out = serde_json::to_string(&serde_json::json!({"cities": summary, "tags": per_tag}))
        .expect("serializable");
    (fnv(out.as_bytes()), out.len())
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(600_000);
    let t0 = Instant::now();
    let (sum, len) = run(n);
    println!(
        "RESULT workload=json_groupby allocator={ALLOCATOR} records={n} elapsed_s={:.3} checksum={sum:016x} output_bytes={len}",
        t0.elapsed().as_secs_f64()
    );
}
