//! A small multi-tenant service: three tenants with limits run a mixed workload on several
//! threads (request handling with maps and strings, a batch job that runs into its hard
//! limit and degrades gracefully, socket buffers charged by hand), then each tenant's
//! memory.stat-like report is printed. Then the async part: customers' requests as tokio
//! tasks carried into their tenants, one of them a runaway that the OOM killer stops at
//! its limit (`OomPolicy::Kill`) while the others are served.
//!
//! Run: `cargo run --release --example demo`

use std::collections::HashMap;
use std::thread;

use std::alloc::Layout;

use slabcg::{Cache, InTenant, OomPolicy, SlabAlloc, StatItem, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const MIB: u64 = 1 << 20;

#[path = "../allocator/tests/common/mod.rs"]
mod rng;
use rng::Rng;

/// Request handling: parse, build a response, keep a bounded session cache.
/// Returns the session cache, which stays charged to the tenant while main holds it.
fn api_worker(tenant: Tenant, seed: u64) -> (usize, HashMap<u64, Vec<String>>) {
    let _scope = tenant.enter();
    let mut rng = Rng(seed);
    let mut sessions: HashMap<u64, Vec<String>> = HashMap::new();
    let mut served = 0;
    for _ in 0..40_000 {
        let id = rng.next() % 2_000;
        let body: String = (0..(rng.next() % 64) as usize)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let entry = sessions.entry(id).or_default();
        entry.push(format!("{{\"session\":{id},\"body\":\"{body}\"}}"));
        if entry.len() > 8 {
            entry.remove(0);
        }
        served += 1;
    }
    (served, sessions)
}

/// A batch job that wants more than its limit: it allocates 1 MiB chunks with fallible
/// reservations, and stops cleanly when the tenant's hard limit refuses.
fn batch_worker(tenant: Tenant) -> (usize, bool) {
    let _scope = tenant.enter();
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut v: Vec<u8> = Vec::new();
        if v.try_reserve_exact(MIB as usize).is_err() {
            return (chunks.len(), true);
        }
        v.resize(MIB as usize, 7);
        chunks.push(v);
        if chunks.len() > 10_000 {
            return (chunks.len(), false);
        }
    }
}

/// A connection handler that charges socket buffers (memory the allocator does not see):
/// receive buffers pile up faster than they drain, until net's limit refuses more.
fn sock_worker(tenant: Tenant) -> (u64, u64) {
    let mut charged = 0;
    let mut refused = 0;
    for i in 0..10_000u64 {
        let bytes = 1500 + (i % 7) * 1000;
        match tenant.charge(bytes, StatItem::Sock) {
            Ok(()) => charged += bytes,
            Err(_) => refused += 1,
        }
        if i % 3 == 0 && charged >= bytes {
            tenant.uncharge(bytes, StatItem::Sock);
            charged -= bytes;
        }
    }
    (charged, refused)
}

/// Customers of an async service, a tenant each (Kill policy, 16 MiB), with a request per
/// customer on tokio's multi-thread runtime; mallory's request never stops allocating.
fn async_customers() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let customers = Tenant::new("customers");
    let results = rt.block_on(async {
        let mut requests = Vec::new();
        for name in ["alice", "bob", "mallory"] {
            let customer = customers.child(name);
            customer.set_max(16 * MIB);
            customer.set_oom_policy(OomPolicy::Kill);
            let rows = if name == "mallory" {
                usize::MAX
            } else {
                50_000
            };
            let request = async move {
                let mut v = Vec::new();
                for i in 0..rows {
                    v.push(format!("{name} row {i}"));
                    if i % 1024 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                v.len()
            };
            requests.push((customer.clone(), tokio::spawn(request.in_tenant(&customer))));
        }
        let mut results = Vec::new();
        for (customer, task) in requests {
            results.push((customer, task.await.unwrap()));
        }
        results
    });
    println!("\n== async customers (OomPolicy::Kill, max 16 MiB each) ==");
    for (customer, result) in &results {
        match result {
            Ok(rows) => println!("{}: 200, {rows} rows", customer.name()),
            Err(killed) => println!("{}: 503, {killed}", customer.name()),
        }
    }
    for (customer, _) in &results {
        println!("\n== tenant {} ==", customer.path());
        print!("{}", customer.stat());
    }
}

fn main() {
    // api serves requests; its child net holds the connections' socket buffers. Both count
    // against api's limits (the tree is hierarchical, like cgroup v2).
    let api = Tenant::new("api");
    api.set_high(4 * MIB);
    api.set_max(64 * MIB);
    let net = api.child("net");
    net.set_max(8 * MIB);
    let batch = Tenant::new("batch");
    batch.set_max(48 * MIB);

    // Connection state lives in a dedicated, accounted cache (700-byte structs pack 11 per
    // 8 KiB slab instead of rounding up to 768), allocated in one bulk call inside net, before
    // the connections' socket buffers pile up.
    let conns = Cache::builder("conn", Layout::from_size_align(700, 8).unwrap())
        .account(true)
        .build();
    let mut conn_ptrs = vec![std::ptr::null_mut(); 500];
    {
        let _scope = net.enter();
        assert_eq!(conns.alloc_bulk(&mut conn_ptrs), 500);
    }
    println!("conn cache: {:?}", conns.info());

    let mut handles = Vec::new();
    for t in 0..2 {
        let api = api.clone();
        handles.push(thread::spawn(move || {
            let (n, sessions) = api_worker(api, 0x5eed + t);
            println!(
                "api worker {t}: served {n} requests, {} sessions cached",
                sessions.len()
            );
            sessions
        }));
    }
    let b = batch.clone();
    let batch_thread = thread::spawn(move || batch_worker(b));
    let n2 = net.clone();
    let sock_thread = thread::spawn(move || sock_worker(n2));
    // The session caches outlive their threads; they stay charged to api until dropped.
    let sessions: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let (chunks, refused) = batch_thread.join().unwrap();
    println!(
        "batch: held {chunks} MiB before the limit {}",
        if refused {
            "refused more"
        } else {
            "never refused"
        }
    );
    let (sock_held, sock_refused) = sock_thread.join().unwrap();

    println!("net: {sock_held} bytes of socket buffers charged, {sock_refused} charges refused");

    for t in [&api, &net, &batch] {
        println!("\n== tenant {} ==", t.name());
        println!("current_exact {}", t.current_exact());
        print!("{}", t.stat());
    }
    println!("\n== allocator ==\n{}", slabcg::stats());
    drop(sessions);
    // SAFETY: every pointer came from conns.alloc_bulk and is freed once.
    unsafe { conns.free_bulk(&conn_ptrs) };
    net.uncharge(sock_held, StatItem::Sock);
    println!(
        "after freeing the sessions and the socket buffers: api current_exact {}",
        api.current_exact()
    );
    async_customers();
}
