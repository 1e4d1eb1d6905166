//! A tenant per request hands the previous request's freed objects to the next one in place
//! (the object stock's transfer, `object_stock::transfer_bins`): the charge moves from the
//! dead request (reparented to its customer) to the new one, below their common ancestor
//! (the customer, or the parent of two customers). Whatever the transfers do, the counts
//! stay exact: each request's tenant counts exactly its live objects after a drain, each
//! customer exactly what its requests left alive, and a limit on the receiving side still
//! refuses.

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

/// Sizes that are size classes, so that the charged bytes equal the requested ones.
const SIZES: [usize; 6] = [16, 64, 256, 1024, 4096, 48];

/// One request's working set: `k` objects of each size, each filled with `tag`.
fn working_set(k: usize, tag: u8) -> Vec<Vec<u8>> {
    let mut v = Vec::with_capacity(SIZES.len() * k);
    for _ in 0..k {
        for &s in &SIZES {
            v.push(vec![tag; s]);
        }
    }
    v
}

fn bytes(k: usize) -> u64 {
    (k * SIZES.iter().sum::<usize>()) as u64
}

#[test]
fn requests_in_turn_stay_exact() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-customer");
    let mut left: Vec<Vec<u8>> = Vec::new();
    let mut left_bytes = 0u64;
    for i in 0..2_000usize {
        let req = customer.child("request");
        let k = 1 + i % 7;
        let kept = {
            let _in = req.enter();
            // The vector holding the set is charged too: build it first, measure after.
            let set = working_set(k, i as u8);
            let holder = set.capacity() * std::mem::size_of::<Vec<u8>>();
            if i % 100 == 0 {
                // Mid-request: the tenant counts its live objects exactly, whatever it
                // received from the request before.
                let exact = req.current_exact();
                let want = bytes(k) + holder.next_multiple_of(16) as u64;
                assert!(
                    exact >= bytes(k) && exact <= want + 4096,
                    "request {i}: exact {exact}, live about {want}"
                );
                assert!(req.current() >= exact, "current() covers the exact usage");
            }
            for o in &set {
                assert!(
                    o.iter().all(|&b| b == i as u8),
                    "an object handed over intact"
                );
            }
            // Every tenth request leaves one object alive.
            let kept = (i % 10 == 0).then(|| vec![i as u8; 256]);
            drop(set);
            kept
        };
        if let Some(o) = kept {
            left_bytes += 256;
            left.push(o);
        }
        drop(req);
        if i % 250 == 0 {
            assert_eq!(
                customer.current_exact(),
                left_bytes,
                "after request {i}, the customer carries exactly the objects requests left"
            );
        }
    }
    assert_eq!(customer.current_exact(), left_bytes);
    // Freed on another thread: uncharged from whichever request owns them now.
    std::thread::spawn(move || drop(left)).join().unwrap();
    assert_eq!(customer.current_exact(), 0);
    let s = customer.stat();
    assert_eq!(s.slab, 0, "no slab bytes left in the stats");
}

#[test]
fn a_requests_limit_still_refuses() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-limited");
    // A big request fills this thread's object stock with the customer's subtree's objects.
    {
        let big = customer.child("big");
        let _in = big.enter();
        drop(working_set(16, 1));
    }
    for i in 0..200 {
        let req = customer.child("small");
        // Less than what the previous request freed: a transfer of all of it must be
        // refused, and the objects charged one by one up to the limit.
        req.set_max(8 << 10);
        let _in = req.enter();
        let mut v: Vec<u8> = Vec::new();
        assert!(
            v.try_reserve_exact(64 << 10).is_err(),
            "request {i}: 64 KiB refused under an 8 KiB limit"
        );
        let small = vec![7u8; 1024];
        assert!(req.current_exact() <= 8 << 10);
        assert!(req.current_exact() >= 1024);
        drop(small);
    }
    assert_eq!(customer.current_exact(), 0);
}

#[test]
fn transfer_between_siblings_on_many_threads() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let customer = Tenant::new("transfer-threads");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let customer = customer.clone();
            std::thread::spawn(move || {
                let mut kept = Vec::with_capacity(10);
                for i in 0..500usize {
                    let req = customer.child("request");
                    let _in = req.enter();
                    let set = working_set(1 + (i + t) % 5, t as u8);
                    if i % 50 == 0 {
                        kept.push(vec![0u8; 1024]);
                    }
                    drop(set);
                }
                kept
            })
        })
        .collect();
    let kept: Vec<Vec<Vec<u8>>> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(customer.current_exact(), 4 * 10 * 1024);
    drop(kept);
    assert_eq!(customer.current_exact(), 0);
}

#[test]
fn customers_in_turn_on_one_thread() {
    slabcg::accounting::hooks::set_idle_decay(false);
    let tenants = Tenant::new("transfer-tenants");
    let customers: Vec<Tenant> = (0..3).map(|i| tenants.child(&format!("c{i}"))).collect();
    customers[2].set_max(4 << 10);
    let mut left: Vec<Vec<Vec<u8>>> = (0..3).map(|_| Vec::with_capacity(100)).collect();
    for i in 0..1_500usize {
        let c = i % 3;
        let req = customers[c].child("request");
        let _in = req.enter();
        if c == 2 {
            // The small customer cannot take over what the others freed: refused, charged
            // one by one instead, and its own limit still holds.
            let mut v: Vec<u8> = Vec::new();
            assert!(v.try_reserve_exact(16 << 10).is_err(), "request {i}");
            let o = vec![2u8; 1024];
            assert!(customers[2].current_exact() <= 4 << 10);
            drop(o);
            continue;
        }
        let set = working_set(1 + i % 4, c as u8);
        if i % 30 == c {
            left[c].push(vec![c as u8; 64]);
        }
        drop(set);
    }
    for (c, l) in left.iter().enumerate() {
        assert_eq!(
            customers[c].current_exact(),
            64 * l.len() as u64,
            "customer {c}"
        );
    }
    drop(left);
    for c in &customers {
        assert_eq!(c.current_exact(), 0);
    }
    assert_eq!(tenants.current_exact(), 0);
}
