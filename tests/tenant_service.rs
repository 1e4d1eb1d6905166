//! The multi-tenant HTTP service (`examples/tenant_service`) on an ephemeral port, driven by
//! hyper's client: three customers' concurrent requests answer 200 with the right checksum
//! while one customer's runaway request answers 503; the process lives; `/metrics` shows the
//! kill on the runaway's tenant only; every customer's usage returns to its idle value.

#[path = "../examples/tenant_service/service.rs"]
mod service;

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use slabcg::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

async fn get(client: &HttpClient, url: String, tenant: Option<&str>) -> (u16, String) {
    let mut req = hyper::Request::get(url);
    if let Some(t) = tenant {
        req = req.header("x-tenant", t);
    }
    let resp = client
        .request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The value of the one sample of `metrics` whose name and labels are `series`.
fn sample(metrics: &str, series: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

const CUSTOMERS: [&str; 3] = ["alice", "bob", "carol"];

/// A service with `cfg` on an ephemeral port, in a runtime of `workers` threads: the
/// runtime, the base URL, the server's task and a client.
fn serve(
    workers: usize,
    cfg: service::Config,
) -> (
    tokio::runtime::Runtime,
    String,
    tokio::task::JoinHandle<()>,
    HttpClient,
) {
    serve_svc(workers, service::Service::new(cfg))
}

/// [`serve`] for a service the caller keeps a handle on.
fn serve_svc(
    workers: usize,
    svc: std::sync::Arc<service::Service>,
) -> (
    tokio::runtime::Runtime,
    String,
    tokio::task::JoinHandle<()>,
    HttpClient,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = rt.spawn(async move {
        let _ = axum::serve(listener, service::router(svc.clone())).await;
    });
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    (rt, base, server, client)
}

/// The tests' service: customers limited to `tenant_max`, requests above 1 MiB on a lane of
/// `heavy_workers` threads that takes `heavy_queue` requests at once.
fn config(
    tenant_max: u64,
    heavy_workers: usize,
    heavy_queue: usize,
    heavy_release_budget: Duration,
) -> service::Config {
    service::Config {
        tenant_max,
        overdraft: None,
        total_max: u64::MAX,
        tenants: true,
        heavy_bytes: 1 << 20,
        heavy_workers,
        heavy_idle: false,
        heavy_queue,
        heavy_release_budget,
        max_tenants: 64,
    }
}

#[test]
fn customers_are_served_while_a_runaway_is_killed() {
    let (rt, base, server, client) = serve(4, config(16 << 20, 2, 64, Duration::from_millis(200)));
    let kbs = [16u64, 64, 200];
    let want: Vec<String> = kbs
        .iter()
        .map(|&kb| format!("{:016x}", service::checksum(kb)))
        .collect();

    rt.block_on(async {
        // Warm up: every customer's tenant exists, and the runtime's per-worker state has
        // grown (what grows inside a request's poll is charged to that request, and what
        // outlives it to the customer).
        for round in 0..8 {
            for c in CUSTOMERS {
                let (s, _) = get(
                    &client,
                    format!("{base}/work?kb={}", kbs[round % 3]),
                    Some(c),
                )
                .await;
                assert_eq!(s, 200);
            }
        }
    });
    let (status, metrics) = rt.block_on(get(&client, format!("{base}/metrics"), None));
    assert_eq!(status, 200);
    let idle: Vec<u64> = CUSTOMERS
        .iter()
        .map(|c| {
            sample(
                &metrics,
                &format!("slabcg_memory_current_bytes{{tenant=\"tenants/{c}\"}}"),
            )
            .unwrap()
        })
        .collect();

    rt.block_on(async {
        let mut normal = Vec::new();
        for i in 0..60usize {
            let (client, base) = (client.clone(), base.clone());
            let c = CUSTOMERS[i % 3];
            let kb = kbs[i % kbs.len()];
            normal.push(tokio::spawn(async move {
                (
                    kb,
                    get(&client, format!("{base}/work?kb={kb}"), Some(c)).await,
                )
            }));
        }
        // One legitimate request above its 1 MiB `high`: it finishes on the heavy lane.
        let (c1, b1) = (client.clone(), base.clone());
        let big =
            tokio::spawn(
                async move { get(&c1, format!("{b1}/work?kb=3072"), Some("carol")).await },
            );
        let (c2, b2) = (client.clone(), base.clone());
        let runaway = tokio::spawn(async move {
            get(&c2, format!("{b2}/work?kb=1000000"), Some("mallory")).await
        });
        // Mallory's ordinary requests run beside the runaway: the runaway is the only
        // victim (the kill waits while its working set is freed), and these are served.
        for i in 0..12usize {
            let (client, base) = (client.clone(), base.clone());
            let kb = kbs[i % kbs.len()];
            normal.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5 * i as u64)).await;
                (
                    kb,
                    get(&client, format!("{base}/work?kb={kb}"), Some("mallory")).await,
                )
            }));
        }
        for h in normal {
            let (kb, (status, body)) = h.await.unwrap();
            assert_eq!(status, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let i = kbs.iter().position(|&k| k == kb).unwrap();
            assert_eq!(v["checksum"], want[i].as_str(), "kb={kb}");
            assert_eq!(v["kb"], kb);
            assert_eq!(v["lane"], "main", "kb={kb} stays under its high: {body}");
        }
        let (status, body) = big.await.unwrap();
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["checksum"],
            format!("{:016x}", service::checksum(3072)).as_str()
        );
        assert_eq!(v["lane"], "heavy", "{body}");
        let (status, body) = tokio::time::timeout(Duration::from_secs(60), runaway)
            .await
            .expect("the runaway request did not end")
            .unwrap();
        assert_eq!(status, 503, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["tenant"], "mallory");
        assert_eq!(v["limit"], 16u64 << 20);
        assert_eq!(
            v["lane"], "heavy",
            "the runaway passed its high before its kill"
        );
    });

    // The service lives and answers; the kill is on mallory's tenant only.
    let (status, body) = rt.block_on(get(&client, format!("{base}/work?kb=16"), Some("alice")));
    assert_eq!(status, 200, "{body}");
    let (_, metrics) = rt.block_on(get(&client, format!("{base}/metrics"), None));
    let kills = |c: &str| {
        sample(
            &metrics,
            &format!("slabcg_memory_events_total{{tenant=\"tenants/{c}\",event=\"oom_kill\"}}"),
        )
    };
    assert_eq!(kills("mallory"), Some(1), "{metrics}");
    for c in CUSTOMERS {
        assert_eq!(kills(c), Some(0));
    }
    assert!(metrics.contains("slabcg_allocator_resident_bytes"));
    for (c, idle) in CUSTOMERS.iter().zip(&idle) {
        let now = sample(
            &metrics,
            &format!("slabcg_memory_current_bytes{{tenant=\"tenants/{c}\"}}"),
        )
        .unwrap();
        assert_eq!(now, *idle, "{c}: current back to its idle value");
    }
    let (status, stat) = rt.block_on(get(&client, format!("{base}/tenants/mallory/stat"), None));
    assert_eq!(status, 200);
    assert!(stat.contains("events.oom_kill 1"), "{stat}");
    let (status, _) = rt.block_on(get(&client, format!("{base}/tenants/nobody/stat"), None));
    assert_eq!(status, 404);
    let (status, _) = rt.block_on(get(&client, format!("{base}/work?kb=1"), Some("bad name!")));
    assert_eq!(status, 400);
    server.abort();
}

/// Serves one small request for `customer` (making its tenant) and returns the series of its
/// current memory in `/metrics` and the value there now, its idle value.
async fn idle_after_one_request(client: &HttpClient, base: &str, customer: &str) -> (String, u64) {
    let (s, body) = get(client, format!("{base}/work?kb=16"), Some(customer)).await;
    assert_eq!(s, 200, "{body}");
    let (_, metrics) = get(client, format!("{base}/metrics"), None).await;
    let series = format!("slabcg_memory_current_bytes{{tenant=\"tenants/{customer}\"}}");
    let idle = sample(&metrics, &series).unwrap();
    (series, idle)
}

/// With no room on the heavy lane, a request that passes its high answers 503 with
/// `Retry-After` (load shed, the process lives), its memory is given back, and requests under
/// their high are served as before.
#[test]
fn a_full_heavy_lane_sheds_the_heavy_request() {
    let (rt, base, server, client) = serve(2, config(16 << 20, 1, 0, Duration::from_millis(200)));
    rt.block_on(async {
        let (series, idle) = idle_after_one_request(&client, &base, "dave").await;
        let series = series.as_str();
        let (s, body) = get(&client, format!("{base}/work?kb=3072"), Some("dave")).await;
        assert_eq!(s, 503, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"], "heavy lane full: retry later");
        assert_eq!(v["high"], 1u64 << 20);
        let (s, body) = get(&client, format!("{base}/work?kb=200"), Some("dave")).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["lane"],
            "main"
        );
        let (_, metrics) = get(&client, format!("{base}/metrics"), None).await;
        assert_eq!(
            sample(&metrics, series),
            Some(idle),
            "dave's memory given back"
        );
    });
    server.abort();
}

/// With no time on the heavy lane for frees (a budget of 0: the watchdog on the main workers
/// starts at once), the watchdog frees what a killed runaway left, racing the lane's own
/// slices: each record is freed once, the runaway answers 503, and its customer's memory
/// returns to its idle value.
#[test]
fn the_main_workers_free_what_a_starved_lane_left() {
    let (rt, base, server, client) = serve(2, config(8 << 20, 1, 4, Duration::ZERO));
    rt.block_on(async {
        let (series, idle) = idle_after_one_request(&client, &base, "erin").await;
        let series = series.as_str();
        for _ in 0..3 {
            let (s, body) = get(&client, format!("{base}/work?kb=1000000"), Some("erin")).await;
            assert_eq!(s, 503, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["lane"], "heavy", "{body}");
            let (_, metrics) = get(&client, format!("{base}/metrics"), None).await;
            assert_eq!(
                sample(&metrics, series),
                Some(idle),
                "erin's memory given back"
            );
        }
        let (s, body) = get(&client, format!("{base}/work?kb=3072"), Some("erin")).await;
        assert_eq!(s, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["checksum"],
            format!("{:016x}", service::checksum(3072)).as_str()
        );
    });
    server.abort();
}

/// Unknown `x-tenant` names cost a bounded table: past `max_tenants`, a new name evicts the
/// least recently used idle customer (its tenant and metrics series go), and when every
/// customer has a request in flight it answers 503, while the customers in the table are
/// still served.
#[test]
fn the_customer_table_is_bounded() {
    let mut cfg = config(16 << 20, 1, 4, Duration::from_millis(200));
    cfg.max_tenants = 4;
    let svc = service::Service::new(cfg);
    let (rt, base, server, client) = serve_svc(2, svc.clone());
    // The live customers' tenants, each once (metrics would show two tenants of one name as
    // one series), sorted; the other tests' services, in this process too, have other
    // customers. And that the metrics show the same customers.
    let series = |metrics: &str| -> Vec<String> {
        let ours = |name: &str| {
            name.strip_prefix('t')
                .is_some_and(|n| n.parse::<u32>().is_ok())
        };
        let mut live: Vec<String> = slabcg::Tenant::all_stats()
            .into_iter()
            .filter_map(|s| s.path.strip_prefix("tenants/").map(str::to_owned))
            .filter(|name| ours(name))
            .collect();
        live.sort();
        let mut shown: Vec<String> = metrics
            .lines()
            .filter_map(|l| l.strip_prefix("slabcg_memory_current_bytes{tenant=\"tenants/"))
            .map(|l| l.split('"').next().unwrap().to_owned())
            .filter(|name| ours(name))
            .collect();
        shown.sort();
        assert_eq!(live, shown, "the metrics show the live customers");
        live
    };
    rt.block_on(async {
        for i in 0..10 {
            let (s, body) = get(&client, format!("{base}/work?kb=4"), Some(&format!("t{i}"))).await;
            assert_eq!(s, 200, "{body}");
        }
        let (_, metrics) = get(&client, format!("{base}/metrics"), None).await;
        let mut names = series(&metrics);
        names.sort();
        assert_eq!(names, ["t6", "t7", "t8", "t9"], "{metrics}");
        let (s, _) = get(&client, format!("{base}/tenants/t0/stat"), None).await;
        assert_eq!(s, 404, "t0 was evicted");
    });
    // Every customer in the table busy (a request holds its customer until it is done).
    let busy: Vec<_> = (6..10)
        .map(|i| svc.customer(&format!("t{i}")).unwrap())
        .collect();
    rt.block_on(async {
        let (s, body) = get(&client, format!("{base}/work?kb=4"), Some("t10")).await;
        assert_eq!(s, 503, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["tenant"], "t10");
        assert_eq!(v["tenants"], 4);
        assert!(
            v["error"].as_str().unwrap().contains("too many tenants"),
            "{body}"
        );
        let (s, body) = get(&client, format!("{base}/work?kb=4"), Some("t7")).await;
        assert_eq!(s, 200, "a customer in the table is served: {body}");
    });
    drop(busy);
    rt.block_on(async {
        // Least recently used first: t8 (t7 and now t6 were served since the busy lookups).
        let (s, body) = get(&client, format!("{base}/work?kb=4"), Some("t6")).await;
        assert_eq!(s, 200, "{body}");
        let (s, body) = get(&client, format!("{base}/work?kb=4"), Some("t10")).await;
        assert_eq!(s, 200, "{body}");
        let (_, metrics) = get(&client, format!("{base}/metrics"), None).await;
        let mut names = series(&metrics);
        names.sort();
        assert_eq!(names, ["t10", "t6", "t7", "t9"], "{metrics}");
        // A stat reader holds the customer too: t9, now the least recently used, is not
        // evicted under it.
        let held = svc.existing("t9").unwrap();
        for name in ["t11", "t12", "t13"] {
            let (s, body) = get(&client, format!("{base}/work?kb=4"), Some(name)).await;
            assert_eq!(s, 200, "{body}");
        }
        assert!(svc.existing("t9").is_some(), "held by a reader");
        assert!(
            svc.existing("t7").is_none(),
            "idle, the least recently used"
        );
        drop(held);
    });
    server.abort();
    // A full table of 16 evicts two (an eighth) for a new name: the two least recently used.
    let mut cfg = config(16 << 20, 1, 4, Duration::from_millis(200));
    cfg.max_tenants = 16;
    let svc = service::Service::new(cfg);
    for i in 0..16 {
        drop(svc.customer(&format!("b{i}")).unwrap());
    }
    drop(svc.customer("b0").unwrap()); // b0 used again: b1 and b2 are the oldest now
    drop(svc.customer("b16").unwrap());
    let kept: Vec<bool> = (0..17)
        .map(|i| svc.existing(&format!("b{i}")).is_some())
        .collect();
    let gone: Vec<usize> = (0..17).filter(|&i| !kept[i]).collect();
    assert_eq!(gone, [1, 2]);
}

/// Concurrent runaways of one customer: one of them goes on the heavy lane and is killed at
/// the customer's limit; the others answer 503 when they pass their high, as the lane holds
/// one request of a customer at a time. Before that, the survivors of the first kill used up
/// its overdraft while the victim died, and the next refused allocation aborted the process.
#[test]
fn concurrent_runaways_of_one_customer_do_not_abort() {
    let (rt, base, server, client) = serve(2, config(16 << 20, 2, 64, Duration::from_millis(200)));
    rt.block_on(async {
        let mut runaways = Vec::new();
        for _ in 0..8 {
            let (client, base) = (client.clone(), base.clone());
            runaways.push(tokio::spawn(async move {
                get(&client, format!("{base}/work?kb=100000"), Some("oscar")).await
            }));
        }
        for r in runaways {
            let (status, body) = r.await.unwrap();
            assert_eq!(status, 503, "{body}");
            assert!(body.contains("oscar"), "{body}");
        }
        let (status, _) = get(&client, format!("{base}/work?kb=1"), Some("peggy")).await;
        assert_eq!(status, 200);
        let (status, _) = get(&client, format!("{base}/work?kb=16"), Some("oscar")).await;
        assert_eq!(status, 200, "oscar is served again");
    });
    server.abort();
}

/// An `x-tenant` header that is not text is a bad tenant name (400), not a missing one.
#[test]
fn a_tenant_header_that_is_not_text_is_refused() {
    let (rt, base, server, client) = serve(2, config(16 << 20, 1, 64, Duration::from_millis(200)));
    rt.block_on(async {
        let req = hyper::Request::get(format!("{base}/work?kb=1"))
            .header(
                "x-tenant",
                hyper::header::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
            )
            .body(Empty::new())
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status().as_u16(), 400);
    });
    server.abort();
}

/// A request refused by the customers' shared limit (`--total-max`) answers 503 naming that
/// limit too, not only the customer's own.
#[test]
fn a_503_names_the_shared_limit_when_there_is_one() {
    let mut cfg = config(64 << 20, 1, 64, Duration::from_millis(200));
    cfg.total_max = 8 << 20;
    let (rt, base, server, client) = serve(2, cfg);
    rt.block_on(async {
        let (status, body) = get(&client, format!("{base}/work?kb=100000"), Some("victor")).await;
        assert_eq!(status, 503, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["limit"], 64u64 << 20, "{body}");
        assert_eq!(v["total_limit"], 8u64 << 20, "{body}");
    });
    server.abort();
}

/// A request whose working set fits its customer's limit but whose JSON does not (the
/// buffer doubles in one poll, past the limit and the overdraft) answers 503: `Vec`'s own
/// growth would have aborted the process. The customer is served again afterwards, and its
/// usage returns to its idle value.
#[test]
fn a_request_whose_json_passes_the_limit_answers_503() {
    let mut cfg = config(2 << 20, 1, 64, Duration::from_millis(200));
    cfg.overdraft = Some(256 << 10);
    let (rt, base, server, client) = serve(2, cfg);
    rt.block_on(async {
        let (series, idle) = idle_after_one_request(&client, &base, "wendy").await;
        let mut refused_serializing = 0;
        for kb in [900u64, 1000, 1100, 1200] {
            let (status, body) = get(&client, format!("{base}/work?kb={kb}"), Some("wendy")).await;
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            match status {
                200 => assert_eq!(
                    v["checksum"],
                    format!("{:016x}", service::checksum(kb)).as_str()
                ),
                503 => {
                    assert_eq!(v["tenant"], "wendy", "{body}");
                    assert_eq!(v["limit"], 2u64 << 20, "{body}");
                    if v["detail"].as_str().unwrap().starts_with("serializing") {
                        refused_serializing += 1;
                    }
                }
                _ => panic!("kb={kb}: {status} {body}"),
            }
        }
        assert!(
            refused_serializing > 0,
            "no request was refused while serializing: the test no longer covers it"
        );
        let (status, body) = get(&client, format!("{base}/work?kb=16"), Some("wendy")).await;
        assert_eq!(status, 200, "{body}");
        let (_, metrics) = get(&client, format!("{base}/metrics"), None).await;
        assert_eq!(sample(&metrics, &series), Some(idle), "{metrics}");
    });
    server.abort();
}
