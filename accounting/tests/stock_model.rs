//! A shadow model of the byte stock and its slow paths: random charges, frees (on this
//! thread and on a helper thread), growth of dead tenants' objects, shrinks, API charges,
//! births and deaths of tenants, drains from the helper thread. After each check point
//! (`current_exact`, which drains), every live tenant's usage and stats equal what the
//! model says.

mod common;

use common::{charge, give_back, Rng};
use slabcg_accounting::hooks::{self, ObjCgId, StatIdx};
use slabcg_accounting::{drain_all_stocks, StatItem, Tenant};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

struct Node {
    t: Option<Tenant>,
    parent: Option<usize>,
    id: ObjCgId,
    api: u64,
    depth: u32,
}

struct Obj {
    node: usize,
    id: ObjCgId,
    n: usize,
    idx: StatIdx,
}

enum Cmd {
    Free(ObjCgId, usize, StatIdx),
    Drain,
    Sync,
    Stop,
}

fn alive(nodes: &[Node], i: usize) -> bool {
    nodes[i].t.is_some()
        || nodes
            .iter()
            .enumerate()
            .any(|(j, n)| n.parent == Some(i) && j != i && alive(nodes, j))
}

fn effective(nodes: &[Node], mut i: usize) -> usize {
    while !alive(nodes, i) {
        i = nodes[i].parent.unwrap();
    }
    i
}

fn check(nodes: &[Node], objs: &[Obj], step: usize) {
    let mut slab = vec![0u64; nodes.len()];
    let mut large = vec![0u64; nodes.len()];
    let mut sock = vec![0u64; nodes.len()];
    for o in objs {
        let mut e = Some(effective(nodes, o.node));
        while let Some(i) = e {
            if o.idx == StatIdx::LARGE {
                large[i] += o.n as u64;
            } else {
                slab[i] += o.n as u64;
            }
            e = nodes[i].parent;
        }
    }
    for (k, n) in nodes.iter().enumerate() {
        let mut e = Some(k);
        while let Some(i) = e {
            sock[i] += n.api;
            e = nodes[i].parent;
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let Some(t) = &n.t else { continue };
        let want = slab[i] + large[i] + sock[i];
        assert_eq!(t.current_exact(), want, "step {step}: node {i} current");
        let st = t.stat();
        assert_eq!(
            (st.slab, st.large, st.sock),
            (slab[i], large[i], sock[i]),
            "step {step}: node {i} stats"
        );
    }
}

fn run(seed: u64, steps: usize) {
    let mut r = Rng::new(seed);
    let (tx, rx) = mpsc::channel::<Cmd>();
    let (ack_tx, ack_rx) = mpsc::channel::<()>();
    let helper = std::thread::spawn(move || {
        for c in rx {
            match c {
                Cmd::Free(id, n, idx) => {
                    give_back(id, n, idx);
                    continue;
                }
                Cmd::Drain => drain_all_stocks(),
                Cmd::Sync => {}
                Cmd::Stop => break,
            }
            ack_tx.send(()).unwrap();
        }
    });
    // A drainer that steals this thread's stock at random points, paused at check points.
    let stop = Arc::new(AtomicBool::new(false));
    let parked = Arc::new(AtomicBool::new(false));
    let quit = Arc::new(AtomicBool::new(false));
    let drainer = {
        let (stop, parked, quit) = (stop.clone(), parked.clone(), quit.clone());
        std::thread::spawn(move || {
            while !quit.load(Ordering::SeqCst) {
                if stop.load(Ordering::SeqCst) {
                    parked.store(true, Ordering::SeqCst);
                    while stop.load(Ordering::SeqCst) && !quit.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    continue;
                }
                drain_all_stocks();
                std::thread::sleep(std::time::Duration::from_micros(50 + seed % 7 * 30));
            }
        })
    };
    let call = |c: Cmd| {
        tx.send(c).unwrap();
        ack_rx.recv().unwrap();
    };
    let root = Tenant::new(&format!("model-{seed}"));
    let mut nodes = vec![Node {
        id: root.objcg_id(),
        t: Some(root),
        parent: None,
        api: 0,
        depth: 0,
    }];
    let mut objs: Vec<Obj> = Vec::new();
    let sizes = [8usize, 16, 24, 48, 64, 128, 256, 1000, 4096, 8192, 32768];
    for step in 0..steps {
        let op = r.below(101);
        let handled: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].t.is_some()).collect();
        match op {
            0..=34 => {
                let i = handled[r.below(handled.len() as u64) as usize];
                let (n, idx) = if r.below(40) == 0 {
                    (100_000 + r.below(500_000) as usize, StatIdx::LARGE)
                } else {
                    (
                        sizes[r.below(sizes.len() as u64) as usize],
                        StatIdx::slab(r.below(6) as usize),
                    )
                };
                let id = nodes[i].id;
                if charge(id, n, idx) {
                    objs.push(Obj {
                        node: i,
                        id,
                        n,
                        idx,
                    });
                }
            }
            35..=69 if !objs.is_empty() => {
                let o = objs.swap_remove(r.below(objs.len() as u64) as usize);
                if r.below(3) == 0 {
                    tx.send(Cmd::Free(o.id, o.n, o.idx)).unwrap();
                } else {
                    give_back(o.id, o.n, o.idx);
                }
            }
            70..=73 if !objs.is_empty() => {
                // A realloc growing a block (its owner may be dead): charged to its objcg.
                let k = r.below(objs.len() as u64) as usize;
                let extra = sizes[r.below(sizes.len() as u64) as usize];
                let o = &mut objs[k];
                if charge(o.id, extra, o.idx) {
                    o.n += extra;
                }
            }
            74..=76 if !objs.is_empty() => {
                let k = r.below(objs.len() as u64) as usize;
                let o = &mut objs[k];
                let new = o.n / 2;
                // SAFETY: the object holds o.n bytes of o.id.
                unsafe { hooks::shrink_charge(o.id, o.n, o.idx, new, o.idx) };
                o.n = new;
                if new == 0 {
                    objs.swap_remove(k);
                }
            }
            77..=82 => {
                let i = handled[r.below(handled.len() as u64) as usize];
                if i != 0 {
                    let cap = if r.below(10) == 0 { 600_000 } else { 3000 };
                    let b = 1 + r.below(cap);
                    if nodes[i]
                        .t
                        .as_ref()
                        .unwrap()
                        .charge(b, StatItem::Sock)
                        .is_ok()
                    {
                        nodes[i].api += b;
                    }
                }
            }
            83..=87 => {
                let i = handled[r.below(handled.len() as u64) as usize];
                if nodes[i].api > 0 {
                    let b = 1 + r.below(nodes[i].api);
                    nodes[i].t.as_ref().unwrap().uncharge(b, StatItem::Sock);
                    nodes[i].api -= b;
                }
            }
            88..=92 => {
                let i = handled[r.below(handled.len() as u64) as usize];
                if nodes[i].depth < 3 && handled.len() < 40 {
                    let c = nodes[i].t.as_ref().unwrap().child("m");
                    match r.below(6) {
                        0 => c.set_high(1 << (16 + r.below(6))),
                        1 => c.set_max(1 << (18 + r.below(6))),
                        _ => {}
                    }
                    nodes.push(Node {
                        id: c.objcg_id(),
                        t: Some(c),
                        parent: Some(i),
                        api: 0,
                        depth: nodes[i].depth + 1,
                    });
                }
            }
            93..=97 => {
                let i = handled[r.below(handled.len() as u64) as usize];
                if i != 0 {
                    let t = nodes[i].t.as_ref().unwrap();
                    if nodes[i].api > 0 {
                        t.uncharge(nodes[i].api, StatItem::Sock);
                        nodes[i].api = 0;
                    }
                    nodes[i].t = None;
                }
            }
            98 => call(Cmd::Drain),
            99 => {
                // A short-lived thread frees some objects and charges some for a live tenant,
                // then exits (its stock, slots and forwarding entries given back at exit).
                let mut frees = Vec::new();
                for _ in 0..r.below(40) {
                    if objs.is_empty() {
                        break;
                    }
                    let o = objs.swap_remove(r.below(objs.len() as u64) as usize);
                    frees.push((o.id, o.n, o.idx));
                }
                let i = handled[r.below(handled.len() as u64) as usize];
                let (t, id) = (nodes[i].t.clone().unwrap(), nodes[i].id);
                let k = r.below(20) as usize;
                let made = std::thread::spawn(move || {
                    let mut made = Vec::new();
                    for (j, (id, n, idx)) in frees.into_iter().enumerate() {
                        give_back(id, n, idx);
                        if j < k && charge(t.objcg_id(), 64 * (j + 1), StatIdx::slab(2)) {
                            made.push(64 * (j + 1));
                        }
                    }
                    drop(t);
                    made
                })
                .join()
                .unwrap();
                for n in made {
                    objs.push(Obj {
                        node: i,
                        id,
                        n,
                        idx: StatIdx::slab(2),
                    });
                }
            }
            _ => {}
        }
        if step % 3000 == 2999 {
            call(Cmd::Sync);
            stop.store(true, Ordering::SeqCst);
            while !parked.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            check(&nodes, &objs, step);
            parked.store(false, Ordering::SeqCst);
            stop.store(false, Ordering::SeqCst);
        }
    }
    call(Cmd::Sync);
    quit.store(true, Ordering::SeqCst);
    drainer.join().unwrap();
    check(&nodes, &objs, steps);
    for o in objs.drain(..) {
        give_back(o.id, o.n, o.idx);
    }
    for n in nodes.iter_mut().skip(1) {
        if let Some(t) = n.t.take() {
            t.uncharge(n.api, StatItem::Sock);
        }
    }
    let root = nodes[0].t.as_ref().unwrap();
    assert_eq!(root.current_exact(), 0);
    assert_eq!(root.stat().slab + root.stat().large + root.stat().sock, 0);
    drain_all_stocks();
    drain_all_stocks();
    let root_id = nodes[0].id;
    for n in &nodes[1..] {
        assert!(
            n.id == root_id || !slabcg_accounting::testing::objcg_live(n.id),
            "seed {seed}: objcg {} of a dead tenant outlives its objects",
            n.id
        );
    }
    tx.send(Cmd::Stop).unwrap();
    drop(tx);
    helper.join().unwrap();
}

#[test]
fn stock_model_random() {
    let seeds: u64 = std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    for seed in 1..=seeds {
        run(seed, 100_000);
    }
}
