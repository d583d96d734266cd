//! Rare steps of the data path (restoring or capturing a session, routing, refusals, opening a
//! server) boxed and polled out of line, so that neither their state nor their code sits
//! inside the hot future that awaits them: the request loop and the relay stay compact. Also
//! [`then`]: a boxed first stage whose state is freed before the second, held inline, runs.

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

pin_project_lite::pin_project! {
    /// A boxed first stage, then (when it gives `Some`) the future `next` makes of its output,
    /// held inline (see [`then`]).
    #[project = ThenProj]
    pub enum Then<A, F, S> {
        First { first: Cold<A>, next: Option<F> },
        Second { #[pin] second: S },
        Done,
    }
}

/// Runs `first` out of line, then the future `next` makes of its output when it gives
/// `Some`. The first stage's box is freed before the second stage starts, so a task whose
/// first stage is large and short (a client's login) and whose second is long (its idle life)
/// holds only the second's state for most of its life.
pub fn then<A, T, F, S>(first: A, next: F) -> Then<A, F, S>
where
    A: Future<Output = Option<T>>,
    F: FnOnce(T) -> S,
    S: Future<Output = ()>,
{
    Then::First {
        first: cold(first),
        next: Some(next),
    }
}

impl<A, T, F, S> Future for Then<A, F, S>
where
    A: Future<Output = Option<T>>,
    F: FnOnce(T) -> S,
    S: Future<Output = ()>,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match self.as_mut().project() {
                ThenProj::First { first, next } => {
                    let Poll::Ready(out) = Pin::new(first).poll(cx) else {
                        return Poll::Pending;
                    };
                    let next = next.take().expect("the first stage ends once");
                    match out {
                        Some(t) => self.set(Then::Second { second: next(t) }),
                        None => {
                            self.set(Then::Done);
                            return Poll::Ready(());
                        }
                    }
                }
                ThenProj::Second { second } => {
                    if second.poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.set(Then::Done);
                    return Poll::Ready(());
                }
                ThenProj::Done => return Poll::Ready(()),
            }
        }
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

    #[tokio::test]
    async fn then_runs_the_second_stage_on_the_first_ones_output_only_when_there_is_one() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(super::then(
            async move { rx.await.ok() },
            move |n| async move {
                done_tx.send(n + 1).unwrap();
            },
        ));
        tokio::task::yield_now().await;
        assert!(!task.is_finished());
        tx.send(41).unwrap();
        task.await.unwrap();
        assert_eq!(done_rx.await.unwrap(), 42);

        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = ran.clone();
        super::then(async { None::<u32> }, move |_| async move {
            seen.store(true, std::sync::atomic::Ordering::Relaxed);
        })
        .await;
        assert!(!ran.load(std::sync::atomic::Ordering::Relaxed));
    }
}
