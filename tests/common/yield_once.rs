//! A yield that allocates nothing: the future wakes itself and returns `Pending` once.
//! (`tokio::task::yield_now` defers its waker into a per-worker list that grows inside the
//! poll, which would charge a test's tenant for the runtime's bookkeeping.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

#[derive(Default)]
pub struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

pub fn yield_once() -> YieldOnce {
    YieldOnce::default()
}
