//! Rare steps of the data path (restoring or capturing a session, routing, refusals, opening a
//! server) boxed and polled out of line, so that neither their state nor their code sits
//! inside the hot future that awaits them: the request loop and the relay stay compact.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A future moved into a box and polled by a function of its own that is never inlined and
/// is marked cold: the compiler lays the caller's branch to it out of the hot path.
pub struct Cold<F>(Pin<Box<F>>);

/// Wraps `f` to be awaited out of line (see [`Cold`]).
#[cold]
#[inline(never)]
pub fn cold<F: Future>(f: F) -> Cold<F> {
    Cold(Box::pin(f))
}

impl<F: Future> Future for Cold<F> {
    type Output = F::Output;

    #[cold]
    #[inline(never)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.0.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::cold;

    #[tokio::test]
    async fn a_cold_future_gives_its_output_and_waits_as_it_would() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiting = tokio::spawn(cold(async move { rx.await.unwrap() + 1 }));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        tx.send(41).unwrap();
        assert_eq!(waiting.await.unwrap(), 42);
    }
}
