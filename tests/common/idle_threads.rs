//! Idle threads that charged a tenant: each enters it, keeps 8 boxes of 512 B (and the
//! 64-byte vector holding them) and waits until released. Shared by `tests/idle_decay.rs`
//! and `examples/idle_threads_probe.rs`.

use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;

use slabcg::Tenant;

/// Bytes each idle thread keeps charged: 8 x 512 B and their vector.
pub const KEPT_PER_THREAD: u64 = 8 * 512 + 64;

pub struct IdleThreads {
    done: Arc<Barrier>,
    threads: Vec<JoinHandle<()>>,
}

impl IdleThreads {
    /// Starts `n` threads that charge `t` and go idle; returns once all of them are idle.
    pub fn start(t: &Tenant, n: usize) -> IdleThreads {
        let ready = Arc::new(Barrier::new(n + 1));
        let done = Arc::new(Barrier::new(n + 1));
        let threads = (0..n)
            .map(|_| {
                let (t, ready, done) = (t.clone(), ready.clone(), done.clone());
                std::thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn(move || {
                        let kept: Vec<Box<[u8; 512]>> = {
                            let _in = t.enter();
                            (0..8).map(|_| Box::new([1; 512])).collect()
                        };
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
