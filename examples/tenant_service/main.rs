//! A multi-tenant HTTP service on slabcg (axum on tokio's multi-thread runtime): a tenant per
//! customer (`x-tenant` header), a child tenant per request, the OOM killer for a runaway
//! request (503, the service lives), Prometheus metrics. See `service.rs` for the routes.
//!
//! ```sh
//! cargo run --release --example tenant_service -- --addr 127.0.0.1:3000 --tenant-max 67108864
//! curl -H 'x-tenant: alice' '127.0.0.1:3000/work?kb=64'
//! curl -H 'x-tenant: mallory' '127.0.0.1:3000/work?kb=1000000'   # 503: killed at 64 MiB
//! curl 127.0.0.1:3000/metrics
//! curl 127.0.0.1:3000/tenants/alice/stat
//! ```
//! The load runs (`scripts/load-service.sh`) build it with `--features service-mimalloc` or
//! `service-jemalloc` for the peers, and start it with `--no-tenants` for slabcg alone.

mod service;

#[cfg(not(any(feature = "service-mimalloc", feature = "service-jemalloc")))]
#[global_allocator]
static GLOBAL: slabcg::SlabAlloc = slabcg::SlabAlloc::new();
#[cfg(feature = "service-mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(all(feature = "service-jemalloc", not(feature = "service-mimalloc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const USAGE: &str = "\
usage: tenant_service [--addr HOST:PORT] [--tenant-max BYTES] [--total-max BYTES] [--overdraft BYTES]
                      [--heavy-bytes BYTES|off] [--heavy-workers N] [--heavy-queue N]
                      [--heavy-sched nice|idle] [--workers N] [--no-tenants] [--decay-ms MS]
                      [--max-tenants N]
  --addr           where to listen (default 127.0.0.1:3000)
  --tenant-max     each customer's hard limit in bytes (default 67108864, 64 MiB)
  --total-max      the limit of all customers together (default: unlimited)
  --overdraft      how far a customer's requests may pass its limit while a killed request's
                   memory is freed (default: the limit, at most 64 MiB)
  --max-tenants    customers' tenants kept at once; a new name past it evicts idle ones, or
                   answers 503 when all are busy (default 1024)
  --heavy-bytes    each request's high: past it, the request finishes on the heavy lane,
                   threads at nice 19 (default 4194304, 4 MiB; off: no lane)
  --heavy-workers  the heavy lane's threads (default: the number of CPUs)
  --heavy-queue    requests on the heavy lane at once, at most; past it, 503 (default 64)
  --heavy-sched    the heavy lane's threads at nice 19 (nice, the default) or SCHED_IDLE
                   (idle: less CPU taken from the others below full load, starved at it)
  --workers        tokio worker threads (default: the number of CPUs)
  --no-tenants     serve without tenants (a baseline for load runs)
  --decay-ms       how long freed memory stays for reuse before it goes back to the OS
                   (default 5000: a runaway every second or so keeps its memory for the next
                   one instead of faulting it in again; slabcg's own default is 500)
  -h, --help       this text
SIGINT or SIGTERM stops it; the requests in flight get 10 s to finish.
";

fn allocator() -> &'static str {
    if cfg!(feature = "service-mimalloc") {
        "mimalloc"
    } else if cfg!(feature = "service-jemalloc") {
        "jemalloc"
    } else {
        "slabcg"
    }
}

fn parse() -> Result<(String, service::Config, Option<usize>, u64), String> {
    let mut addr = "127.0.0.1:3000".to_owned();
    let mut cfg = service::Config {
        tenant_max: 64 << 20,
        overdraft: None,
        total_max: u64::MAX,
        tenants: true,
        heavy_bytes: 4 << 20,
        heavy_workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        heavy_idle: false,
        heavy_queue: 64,
        heavy_release_budget: std::time::Duration::from_millis(200),
        max_tenants: 1024,
    };
    let mut workers = None;
    let mut decay_ms = 5_000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        let bytes = |v: String, name: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number of bytes: {v}"))
        };
        match a.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--addr" => addr = value("--addr")?,
            "--tenant-max" => cfg.tenant_max = bytes(value("--tenant-max")?, "--tenant-max")?,
            "--total-max" => cfg.total_max = bytes(value("--total-max")?, "--total-max")?,
            "--overdraft" => cfg.overdraft = Some(bytes(value("--overdraft")?, "--overdraft")?),
            "--heavy-bytes" => {
                cfg.heavy_bytes = match value("--heavy-bytes")?.as_str() {
                    "off" => u64::MAX,
                    v => bytes(v.to_owned(), "--heavy-bytes")?,
                }
            }
            "--workers" => {
                let v = value("--workers")?;
                workers = Some(v.parse().map_err(|_| format!("--workers: {v}"))?);
            }
            "--heavy-workers" => {
                let v = value("--heavy-workers")?;
                cfg.heavy_workers = v.parse().map_err(|_| format!("--heavy-workers: {v}"))?;
            }
            "--heavy-queue" => {
                let v = value("--heavy-queue")?;
                cfg.heavy_queue = v.parse().map_err(|_| format!("--heavy-queue: {v}"))?;
            }
            "--heavy-sched" => {
                cfg.heavy_idle = match value("--heavy-sched")?.as_str() {
                    "nice" => false,
                    "idle" => true,
                    v => return Err(format!("--heavy-sched: nice or idle, not {v}")),
                }
            }
            "--max-tenants" => {
                let v = value("--max-tenants")?;
                cfg.max_tenants = match v.parse() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--max-tenants: a positive number, not {v}")),
                };
            }
            "--no-tenants" => cfg.tenants = false,
            "--decay-ms" => {
                let v = value("--decay-ms")?;
                decay_ms = v.parse().map_err(|_| format!("--decay-ms: {v}"))?;
            }
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok((addr, cfg, workers, decay_ms))
}

fn main() {
    let (addr, cfg, workers, decay_ms) = match parse() {
        Ok(v) => v,
        Err(e) if e.is_empty() => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprint!("tenant_service: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // A service's steady load may take no allocation slow path for hours; the background
    // decay thread gives back what a burst left idle (a runaway's memory) all the same.
    #[cfg(not(any(feature = "service-mimalloc", feature = "service-jemalloc")))]
    {
        slabcg::set_decay_interval_ms(decay_ms);
        if let Err(e) = slabcg::start_decay_thread() {
            eprintln!("tenant_service: no background decay thread: {e}");
        }
    }
    #[cfg(any(feature = "service-mimalloc", feature = "service-jemalloc"))]
    let _ = decay_ms;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        rt.worker_threads(n);
    }
    let rt = rt.enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tenant_service: cannot listen on {addr}: {e}");
                std::process::exit(1);
            }
        };
        eprintln!(
            "tenant_service: listening on {} (allocator {}, tenants {}, tenant max {} bytes, \
             heavy lane {})",
            listener.local_addr().unwrap(),
            allocator(),
            if cfg.tenants { "on" } else { "off" },
            cfg.tenant_max,
            match cfg.heavy_bytes {
                _ if !cfg.tenants => "off".to_owned(),
                u64::MAX => "off".to_owned(),
                b => format!(
                    "past {b} bytes, {}",
                    if cfg.heavy_idle {
                        "SCHED_IDLE"
                    } else {
                        "nice 19"
                    }
                ),
            }
        );
        let app = service::router(service::Service::new(cfg));
        let (stopping, stop) = tokio::sync::oneshot::channel();
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            shutdown_signal().await;
            let _ = stopping.send(());
        });
        // After the signal, the requests in flight get SHUTDOWN_GRACE to finish: a slow
        // client or a long /spin does not hold the process for ever.
        let deadline = async {
            if stop.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            r = server => {
                r.expect("server");
                eprintln!("tenant_service: stopped");
            }
            () = deadline => {
                eprintln!("tenant_service: stopped, requests still in flight after {SHUTDOWN_GRACE:?}");
            }
        }
    });
}

/// How long the requests in flight at a SIGINT or SIGTERM may take to finish.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// SIGINT or SIGTERM: stop accepting connections and let the requests in flight finish
/// (within [`SHUTDOWN_GRACE`]).
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                eprintln!("tenant_service: no SIGTERM handler: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
