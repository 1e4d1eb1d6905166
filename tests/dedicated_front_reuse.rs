//! Front indexes reused after a dedicated cache is dropped while another thread's front
//! still holds its slots (issue 18): a cache rebuilt with the same name and layout (the same
//! core) takes its index and those slots back; a new cache of the same layout and one of
//! another layout that reuse the index never get the old cache's slots, which go back to
//! their own core. Alone in its binary: it takes all 64 front indexes.

use std::alloc::Layout;
use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::Arc;

use slabcg::{Cache, SlabAlloc};

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

const FRONTS: usize = 64;
const SEGMENT: usize = 4 << 20;

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread that keeps its fronts between jobs.
struct Worker {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn new() -> Worker {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (tx, done) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            for job in rx {
                job();
                tx.send(()).unwrap();
            }
        });
        Worker {
            jobs,
            done,
            thread: Some(thread),
        }
    }

    /// Runs `f` on the worker and waits for it (a panic there fails the test here).
    fn run(&self, f: impl FnOnce() + Send + 'static) {
        self.jobs.send(Box::new(f)).unwrap();
        self.done.recv().expect("the job panicked");
    }

    fn finish(mut self) {
        drop(self.jobs);
        self.thread.take().unwrap().join().unwrap();
    }
}

/// Allocates `n` objects from `c` (opening the front), frees the first `freed` of them into
/// the calling thread's front, and returns the addresses of the rest (live).
fn hold(c: &Cache, n: usize, freed: usize) -> Vec<usize> {
    let ps: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
    for p in &ps[..freed] {
        // SAFETY: allocated just above from c, freed once.
        unsafe { c.free(*p) };
    }
    assert!(c.slots_in_my_front() > 0, "the front did not open");
    ps[freed..].iter().map(|p| p.as_ptr() as usize).collect()
}

fn segments(addrs: &[usize]) -> HashSet<usize> {
    addrs.iter().map(|a| a & !(SEGMENT - 1)).collect()
}

/// Allocates `n` objects of `c` on the calling thread, checks none lies in `foreign`
/// segments, writes them whole and frees them.
fn use_cache(c: &Cache, n: usize, foreign: &HashSet<usize>) {
    let size = c.info().object_size;
    let ps: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
    for p in &ps {
        let a = p.as_ptr() as usize;
        assert!(
            !foreign.contains(&(a & !(SEGMENT - 1))),
            "a slot of the dropped cache was handed out by its index's new cache"
        );
        // SAFETY: `size` writable bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0x3C, size) };
    }
    for p in ps {
        // SAFETY: allocated just above from c, freed once.
        unsafe { c.free(p) };
    }
}

fn free_all(c: &Cache, addrs: &[usize]) {
    for &a in addrs {
        // SAFETY: live objects of c's core, each freed once.
        unsafe { c.free(std::ptr::NonNull::new(a as *mut u8).unwrap()) };
    }
}

#[test]
fn dropped_cache_with_slots_in_another_threads_front() {
    let x = Arc::new(Cache::builder("reuse-x", layout(96)).build());
    let f1 = Arc::new(Cache::builder("reuse-f1", layout(48)).build());
    // Every other index taken, so that a new cache can only get a dropped cache's.
    let mut fillers: Vec<Cache> = (0..FRONTS - 2)
        .map(|i| Cache::builder(&format!("reuse-fill-{i}"), layout(32)).build())
        .collect();
    let ix = x.front_index().unwrap();
    let i1 = f1.front_index().unwrap();
    assert!(Cache::builder("reuse-none", layout(32))
        .build()
        .front_index()
        .is_none());

    let b = Worker::new();
    // The worker holds slots of x and f1 in its fronts, and live objects of both.
    let (xc, fc) = (x.clone(), f1.clone());
    let (tx, rx) = mpsc::channel();
    b.run(move || tx.send((hold(&xc, 40, 20), hold(&fc, 40, 20))).unwrap());
    let (x_live, f1_live) = rx.recv().unwrap();
    let x_segs = segments(&x_live);
    let f1_segs = segments(&f1_live);
    assert!(x.slots_in_fronts() > 0 && f1.slots_in_fronts() > 0);

    // 1. Dropped and rebuilt with the same name and layout: the same core, its index back,
    // and the worker's front slots are its own again (its next allocation pops one).
    drop(x);
    let x = Arc::new(Cache::builder("reuse-x", layout(96)).build());
    assert_eq!(
        x.front_index(),
        Some(ix),
        "a revived core claims its old index"
    );
    assert_eq!(
        x.live_objects(),
        20,
        "the revived core lost the live objects"
    );
    let xc = x.clone();
    b.run(move || {
        let before = xc.slots_in_my_front();
        let p = xc.alloc().unwrap();
        assert_eq!(
            xc.slots_in_my_front(),
            before - 1,
            "the stale front was not reused"
        );
        // SAFETY: allocated just above, freed once.
        unsafe { xc.free(p) };
    });

    // 2. Dropped again, and its index taken by a new cache of the same layout: the worker's
    // x slots must never come out of it.
    drop(x);
    let z = Arc::new(Cache::builder("reuse-z", layout(96)).build());
    assert_eq!(z.front_index(), Some(ix), "the new cache reuses the index");
    // 3. f1 dropped, its index taken by a cache of another layout.
    drop(f1);
    let w = Arc::new(Cache::builder("reuse-w", layout(200)).build());
    assert_eq!(w.front_index(), Some(i1));
    let (zc, wc) = (z.clone(), w.clone());
    let (xs, fs) = (x_segs.clone(), f1_segs.clone());
    b.run(move || {
        use_cache(&zc, 300, &xs);
        use_cache(&wc, 300, &fs);
        assert!(zc.slots_in_my_front() > 0 && wc.slots_in_my_front() > 0);
    });
    assert_eq!(z.live_objects(), 0);
    assert_eq!(w.live_objects(), 0);

    // The old caches' slots went back to their cores: rebuilt (an index freed for each),
    // they count exactly the objects still live, and those free cleanly.
    fillers.pop();
    fillers.pop();
    let x = Arc::new(Cache::builder("reuse-x", layout(96)).build());
    let f1 = Arc::new(Cache::builder("reuse-f1", layout(48)).build());
    assert_eq!(
        x.slots_in_fronts(),
        0,
        "the worker's stale x slots are still in its front"
    );
    assert_eq!(f1.slots_in_fronts(), 0);
    assert_eq!(x.live_objects(), 20);
    assert_eq!(f1.live_objects(), 20);
    let (xc, fc) = (x.clone(), f1.clone());
    b.run(move || {
        free_all(&xc, &x_live);
        free_all(&fc, &f1_live);
        slabcg::allocator::testing::check_invariants();
    });
    b.finish();
    assert_eq!(x.live_objects(), 0);
    assert_eq!(f1.live_objects(), 0);
    assert_eq!(z.live_objects(), 0);
    assert_eq!(w.live_objects(), 0);
    for c in [&x, &f1, &z, &w] {
        assert_eq!(c.slots_in_fronts(), 0);
    }
    slabcg::allocator::testing::check_invariants();
}
