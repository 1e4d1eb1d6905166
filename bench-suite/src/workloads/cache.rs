//! False sharing (after Hoard's cache-thrash and cache-scratch).
//!
//! Each of `threads` threads repeats `iterations` times: allocate one small object, write
//! every byte of it `repetitions` times, check it, free it. An allocator that hands two
//! threads slots in the same cache line makes the lines bounce between cores:
//! - *thrash* (active false sharing): the threads allocate concurrently from the start.
//! - *scratch* (passive false sharing): the main thread first allocates one object per thread
//!   back to back (likely sharing lines) and hands object `i` to thread `i`, which frees it
//!   before its loop; an allocator that reuses that slot for the thread's next object
//!   inherits the sharing.

use crate::cli::{verdict, Outcome, WorkResult};
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::sync::Barrier;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads.
    pub threads: usize,
    /// Objects per thread, one after another.
    pub iterations: usize,
    /// Object size in bytes.
    pub obj_size: usize,
    /// Writes to every byte of an object.
    pub repetitions: usize,
    /// Passive (scratch) rather than active (thrash) false sharing.
    pub scratch: bool,
}

impl Config {
    /// The benchmark's setting (`repetitions` is the knob).
    pub fn bench(threads: usize, repetitions: usize, scratch: bool) -> Self {
        Config {
            threads,
            iterations: 1000,
            obj_size: 8,
            repetitions,
            scratch,
        }
    }
}

struct Raw(*mut u8);
// SAFETY: the object is owned by exactly one thread at a time; we move it to its user.
unsafe impl Send for Raw {}

/// Write every byte `reps` times, then check that each ended at `seed + reps` (mod 256).
///
/// # Safety
/// `p` must be valid for `size` bytes and used by this thread only.
unsafe fn hammer(p: *mut u8, size: usize, reps: usize, seed: u8) -> bool {
    // SAFETY: all accesses are within `p..p+size` (caller).
    unsafe {
        for k in 0..size {
            p.add(k).write_volatile(seed.wrapping_add(k as u8));
        }
        for _ in 0..reps {
            for k in 0..size {
                let q = p.add(k);
                q.write_volatile(q.read_volatile().wrapping_add(1));
            }
        }
        (0..size).all(|k| {
            p.add(k).read_volatile() == seed.wrapping_add(k as u8).wrapping_add(reps as u8)
        })
    }
}

/// Run it.
pub fn run(cfg: &Config) -> WorkResult {
    assert!(cfg.threads > 0 && cfg.obj_size > 0);
    let layout = Layout::from_size_align(cfg.obj_size, 1).expect("layout");
    let mut total = Outcome::default();
    let mut corrupt = 0;
    // scratch: the main thread allocates one object per thread, back to back
    let mut handed: Vec<Option<Raw>> = (0..cfg.threads)
        .map(|_| {
            cfg.scratch.then(|| {
                // SAFETY: non-zero size.
                let p = unsafe { alloc(layout) };
                if p.is_null() {
                    handle_alloc_error(layout)
                }
                total.allocs += 1;
                Raw(p)
            })
        })
        .collect();
    let barrier = Barrier::new(cfg.threads);
    std::thread::scope(|s| {
        let mut hs = Vec::new();
        for (t, h) in handed.iter_mut().enumerate() {
            let first = h.take();
            let barrier = &barrier;
            hs.push(s.spawn(move || {
                let _tenant = crate::tenancy::worker();
                let mut o = Outcome::default();
                let mut bad = 0u64;
                barrier.wait();
                if let Some(Raw(p)) = first {
                    // SAFETY: handed to this thread only; then freed once with its layout.
                    unsafe {
                        if !hammer(p, cfg.obj_size, 1, t as u8) {
                            bad += 1;
                        }
                        dealloc(p, layout);
                    }
                    o.frees += 1;
                }
                for i in 0..cfg.iterations {
                    // SAFETY: non-zero size; the object is used by this thread and freed once.
                    unsafe {
                        let p = alloc(layout);
                        if p.is_null() {
                            handle_alloc_error(layout)
                        }
                        if !hammer(p, cfg.obj_size, cfg.repetitions, (t + i) as u8) {
                            bad += 1;
                        }
                        dealloc(p, layout);
                    }
                    o.allocs += 1;
                    o.frees += 1;
                }
                (o, bad)
            }));
        }
        crate::cli::join_workers("cache", hs, &mut total, &mut corrupt);
    });
    verdict(total, corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_runs() {
        for scratch in [false, true] {
            let cfg = Config {
                threads: 3,
                iterations: 20,
                obj_size: 8,
                repetitions: 300,
                scratch,
            };
            let o = run(&cfg).unwrap();
            assert_eq!(o.allocs, 60 + if scratch { 3 } else { 0 });
            assert_eq!(o.frees, o.allocs);
        }
    }

    #[test]
    fn hammer_detects_interference() {
        let mut buf = [0u8; 8];
        // SAFETY: local buffer.
        assert!(unsafe { hammer(buf.as_mut_ptr(), 8, 1000, 5) });
        assert_eq!(buf[0], 5u8.wrapping_add(1000u16 as u8));
    }
}
