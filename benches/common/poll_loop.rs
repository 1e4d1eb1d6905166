//! The future whose polls the `scoped_poll` bench and `examples/poll_probe` count: it is
//! pending `n` times, then ready, and is polled by hand with a no-op waker, so only the
//! wrapper's own work is in the loop (no runtime, no allocation).

use std::future::Future;
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

/// Pending `0` more times, then ready with the number of polls.
pub struct PendingN(pub u64, pub u64);

impl Future for PendingN {
    type Output = u64;
    #[inline(never)]
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<u64> {
        self.1 += 1;
        if self.0 == 0 {
            return Poll::Ready(self.1);
        }
        self.0 -= 1;
        Poll::Pending
    }
}

/// Polls `fut` to completion; returns how many polls it took.
pub fn drive<F: Future>(fut: F) -> u64 {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    let mut polls = 0u64;
    loop {
        polls += 1;
        if let Poll::Ready(v) = black_box(fut.as_mut()).poll(&mut cx) {
            black_box(v);
            return polls;
        }
    }
}
