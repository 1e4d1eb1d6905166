//! Idle threads that charged a tenant: each enters it, keeps 8 boxes of 512 B (and the
//! 64-byte vector holding them) and waits until released, or runs other work
//! (`start_with`). Shared by `tests/idle_decay.rs`, `tests/many_idle_threads.rs` and
//! `examples/idle_threads_probe.rs`.

use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;

use slabcg::Tenant;

/// Bytes each idle thread keeps charged: 8 x 512 B and their vector.
#[allow(dead_code)] // not every user of this file calls every helper
pub const KEPT_PER_THREAD: u64 = 8 * 512 + 64;

pub struct IdleThreads {
    done: Arc<Barrier>,
    threads: Vec<JoinHandle<()>>,
}

impl IdleThreads {
    /// Starts `n` threads that charge `t` and go idle; returns once all of them are idle.
    #[allow(dead_code)] // not every user of this file calls every helper
    pub fn start(t: &Tenant, n: usize) -> IdleThreads {
        let t = t.clone();
        IdleThreads::start_with(n, 256 << 10, move || {
            let _in = t.enter();
            (0..8).map(|_| Box::new([1u8; 512])).collect::<Vec<_>>()
        })
    }

    /// Starts `n` threads (stacks of `stack` bytes) that each run `work` and go idle,
    /// keeping what it returns until [`finish`](Self::finish), which drops it on the thread.
    /// Returns once all of them are idle.
    pub fn start_with<K: 'static>(
        n: usize,
        stack: usize,
        work: impl Fn() -> K + Clone + Send + 'static,
    ) -> IdleThreads {
        let ready = Arc::new(Barrier::new(n + 1));
        let done = Arc::new(Barrier::new(n + 1));
        let threads = (0..n)
            .map(|_| {
                let (work, ready, done) = (work.clone(), ready.clone(), done.clone());
                std::thread::Builder::new()
                    .stack_size(stack)
                    .spawn(move || {
                        let kept = work();
                        ready.wait();
                        done.wait();
                        drop(kept);
                    })
                    .unwrap()
            })
            .collect();
        ready.wait();
        IdleThreads { done, threads }
    }

    /// Lets the threads free what they kept and exit.
    pub fn finish(self) {
        self.done.wait();
        for h in self.threads {
            h.join().unwrap();
        }
    }
}
