//! Multi-threaded behaviour: cross-thread frees with byte-pattern checks, thread churn with
//! bounded growth, allocation in thread-local destructors and before `main`, and a
//! consumer's bin giving back whole.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;
use std::thread;

use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

mod common;
use common::Rng;

/// A block whose every byte is derived from its tag, checked before it is freed.
struct Block {
    ptr: *mut u8,
    layout: Layout,
    tag: u64,
}
// SAFETY: the block is owned by exactly one thread at a time (moved through channels).
unsafe impl Send for Block {}

impl Block {
    fn new(rng: &mut Rng) -> Block {
        let r = rng.next();
        let size = match r % 16 {
            0 => (r >> 8) as usize % 300_000,
            1..=3 => (r >> 8) as usize % 8192,
            _ => (r >> 8) as usize % 512,
        };
        let align = 1usize << ((r >> 40) % 8);
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: valid layout.
        let ptr = unsafe { GLOBAL.alloc(layout) };
        assert!(!ptr.is_null());
        assert_eq!(ptr as usize % align, 0);
        let tag = rng.next();
        for i in 0..size {
            // SAFETY: size writable bytes.
            unsafe { *ptr.add(i) = (tag as usize ^ i) as u8 };
        }
        Block { ptr, layout, tag }
    }

    fn verify_and_free(self) {
        for i in 0..self.layout.size() {
            // SAFETY: live block of layout.size() bytes.
            let b = unsafe { *self.ptr.add(i) };
            assert_eq!(b, (self.tag as usize ^ i) as u8, "corrupted byte {i}");
        }
        // SAFETY: allocated with this layout, freed once.
        unsafe { GLOBAL.dealloc(self.ptr, self.layout) };
    }
}

#[test]
fn cross_thread_stress_with_patterns() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 20_000;
    // Each thread sends half of its blocks to the next thread, which verifies and frees them.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<Block>()).unzip();
    let handles: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(t, rx)| {
            let tx = txs[(t + 1) % THREADS].clone();
            thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t as u64 * 7919);
                let mut mine = Vec::new();
                for i in 0..ROUNDS {
                    let b = Block::new(&mut rng);
                    if i % 2 == 0 {
                        tx.send(b).unwrap();
                    } else {
                        mine.push(b);
                    }
                    if mine.len() > 200 {
                        let k = rng.next() as usize % mine.len();
                        mine.swap_remove(k).verify_and_free();
                    }
                    while let Ok(b) = rx.try_recv() {
                        b.verify_and_free();
                    }
                }
                drop(tx);
                for b in mine {
                    b.verify_and_free();
                }
                rx
            })
        })
        .collect();
    drop(txs);
    let rxs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for rx in rxs {
        for b in rx.try_iter() {
            b.verify_and_free();
        }
    }
}

#[test]
fn thread_churn_is_bounded() {
    // Warm up, then measure the allocator's own view of memory across 10,000 short threads,
    // each of which allocates, frees some, and leaves the rest to be freed by the main thread.
    let run = |n: usize| {
        let mut keep = Vec::new();
        for i in 0..n {
            let h = thread::spawn(move || {
                let v: Vec<Vec<u8>> = (0..20)
                    .map(|j| vec![j as u8; 16 + (i + j) % 2000])
                    .collect();
                let s: String = (0..50).map(|k| char::from(b'a' + (k % 26) as u8)).collect();
                (v, s)
            });
            keep.push(h.join().unwrap());
            if keep.len() > 64 {
                keep.clear();
            }
        }
    };
    run(500);
    slabcg_allocator::trim();
    let before = slabcg_allocator::stats();
    run(10_000);
    slabcg_allocator::trim();
    let after = slabcg_allocator::stats();
    let grew = after.resident.saturating_sub(before.resident);
    assert!(
        grew < 16 << 20,
        "resident grew by {grew} bytes over 10,000 threads:\nbefore {before}\nafter {after}"
    );
    assert!(after.allocated < before.allocated + (4 << 20));
}

thread_local! {
    static ON_EXIT: AllocOnDrop = const { AllocOnDrop };
}
struct AllocOnDrop;
impl Drop for AllocOnDrop {
    fn drop(&mut self) {
        // A thread-local destructor that allocates and frees during thread teardown.
        let v: Vec<String> = (0..100).map(|i| format!("teardown {i}")).collect();
        assert_eq!(v.len(), 100);
        std::mem::forget(vec![1u8; 100]);
    }
}

#[test]
fn thread_local_destructors_can_allocate() {
    for _ in 0..50 {
        thread::spawn(|| {
            ON_EXIT.with(|_| {});
            let _x = vec![0u64; 1000];
        })
        .join()
        .unwrap();
    }
}

// Code that runs before main allocates through the global allocator.
static mut BEFORE_MAIN: usize = 0;
extern "C" fn before_main() {
    let v: Vec<u64> = (0..1000).collect();
    let s = format!("{}", v.iter().sum::<u64>());
    // SAFETY: runs single-threaded before main.
    unsafe { BEFORE_MAIN = s.len() };
}
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = before_main;

#[test]
fn allocation_before_main_worked() {
    // SAFETY: written once before main; read-only afterwards.
    assert_eq!(unsafe { BEFORE_MAIN }, "499500".len());
}

/// The 8-byte size class has no second word in its slots (where larger classes keep the
/// double-free mark): a million boxed words, spread over several segments, go back in
/// batches through the transfer cache and to their slabs, on this thread and on others.
#[test]
fn eight_byte_objects_go_back_in_batches() {
    let v: Vec<Box<u64>> = (0..1_200_000u64).map(Box::new).collect();
    let sum: u64 = v.iter().map(|b| **b).sum();
    assert_eq!(sum, 1_200_000 * 1_199_999 / 2);
    let mut halves = v.into_iter();
    let first: Vec<Box<u64>> = halves.by_ref().take(600_000).collect();
    let second: Vec<Box<u64>> = halves.collect();
    std::thread::spawn(move || drop(first)).join().unwrap();
    drop(second);
    slabcg_allocator::trim();
    let again: Vec<Box<u64>> = (0..100_000u64).map(Box::new).collect();
    assert!(again.iter().enumerate().all(|(i, b)| **b == i as u64));
}

/// This thread's count of free slots in the plain bin of the 256-byte class.
fn plain_bin_256() -> u32 {
    use slabcg_allocator::testing::{class_of, thread_cache, Kind};
    thread_cache::with(|tc| tc.bin(class_of(256), Kind::Plain).count())
}

/// Frees `objs` one by one on this thread and returns, for each time the bin gave slots
/// back (its count fell), the count left: half the bin plus the freed slot, or 1 when it
/// gave back everything.
// Each object is its own 256-byte allocation: boxed in the vector on purpose.
#[allow(clippy::vec_box)]
fn drops_while_freeing(objs: Vec<Box<[u8; 256]>>) -> Vec<u32> {
    let mut drops = Vec::new();
    let mut before = plain_bin_256();
    for o in objs {
        drop(o);
        let after = plain_bin_256();
        if after < before {
            drops.push(after);
        }
        before = after;
    }
    drops
}

/// A consumer (a thread that frees what another allocates and allocates none itself) gives
/// back half its full bin a few times, then the whole bin each time (no walk to its
/// middle); a thread that allocates from the class between give-backs keeps half each time.
#[test]
fn a_consumer_gives_back_whole_bins() {
    let objs: Vec<Box<[u8; 256]>> = (0..20_000).map(|i| Box::new([i as u8; 256])).collect();
    let drops = thread::spawn(move || drops_while_freeing(objs))
        .join()
        .unwrap();
    assert!(drops.len() >= 8, "too few give-backs to tell: {drops:?}");
    assert!(drops[0] > 1, "the first give-back keeps half: {drops:?}");
    assert!(
        drops[drops.len() - 5..].iter().all(|&n| n == 1),
        "a consumer's later give-backs are whole: {drops:?}"
    );

    // Allocating from the class between give-backs: always half. The bin holds at most 512
    // slots of 256 bytes (`bin_max`), so 700 allocations empty it and refill at least once,
    // which resets its count of give-backs; 700 frees then overflow it at most three times
    // (at the second free at the earliest, then every 256), one fewer than a whole give-back
    // takes (`DRY_GIVE_BACKS` = 3), whatever batches the refills took.
    let drops = thread::spawn(|| {
        let mut drops = Vec::new();
        for round in 0..12u8 {
            let objs: Vec<Box<[u8; 256]>> = (0..700).map(|_| Box::new([round; 256])).collect();
            drops.extend(drops_while_freeing(objs));
        }
        drops
    })
    .join()
    .unwrap();
    assert!(drops.len() >= 8, "too few give-backs to tell: {drops:?}");
    assert!(
        drops.iter().all(|&n| n > 1),
        "a thread that refills between give-backs keeps half: {drops:?}"
    );
}
