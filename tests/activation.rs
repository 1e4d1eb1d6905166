//! The first tenant scope of a process turns on the accounted-free check of threads that are
//! already running with open bins. Its own test binary, so that no other test has entered a
//! scope first.

use std::sync::mpsc;

use slabcg::{SlabAlloc, Tenant};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn running_threads_free_accounted_objects_after_the_first_scope() {
    // This thread opens its 64-byte bin before any scope exists.
    let warm: Vec<Box<[u8; 64]>> = (0..100).map(|i| Box::new([i as u8; 64])).collect();
    drop(warm);
    let (tx, rx) = mpsc::channel::<Vec<Box<[u8; 64]>>>();
    let t = Tenant::new("first");
    let producer = {
        let t = t.clone();
        std::thread::spawn(move || {
            // The process's first scope: objects allocated here are accounted.
            let _g = t.enter();
            let v: Vec<Box<[u8; 64]>> = (0..1000).map(|i| Box::new([i as u8; 64])).collect();
            tx.send(v).unwrap();
        })
    };
    let v = rx.recv().unwrap();
    producer.join().unwrap();
    // The channel's blocks were allocated in the scope too.
    drop(rx);
    assert!(t.current_exact() >= 1000 * 64);
    // Freed here, on a thread that was running before the scope: each free must find the
    // owner (a free into this thread's plain bin would leave the tenant charged and later
    // hand an accounted slot to the plain cache).
    assert!(v.iter().enumerate().all(|(i, b)| b[0] == i as u8));
    drop(v);
    assert_eq!(t.current_exact(), 0);
    // And the plain bin still works for plain objects.
    let again: Vec<Box<[u8; 64]>> = (0..1000).map(|i| Box::new([i as u8; 64])).collect();
    assert!(again.iter().enumerate().all(|(i, b)| b[0] == i as u8));
    assert_eq!(t.current_exact(), 0);
}
