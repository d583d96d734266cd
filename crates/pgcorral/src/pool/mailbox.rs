//! Where a client waiting in a pool's queue receives its grant: a small cell reused from wait to
//! wait (kept per worker thread), with a ticket per wait so that a stale queue entry, left by a
//! wait that was given up, can never deliver to a later one. Replaces a channel allocated per
//! wait.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use super::inner::Grant;

/// The cell shared by a waiting client and its entry in the queue.
#[derive(Default)]
struct Mailbox(Mutex<State>);

#[derive(Default)]
struct State {
    /// The wait the entry must belong to for a delivery to count; 0 while none is open (the
    /// wait was answered or given up).
    open: u64,
    /// The last ticket handed out.
    last: u64,
    grant: Option<Grant>,
    /// The queue entry was dropped without a grant (the pool went away).
    closed: bool,
    waker: Option<Waker>,
}

/// Mailboxes of finished waits, kept per worker thread for the next wait.
const KEEP: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<Arc<Mailbox>>> = const { RefCell::new(Vec::new()) };
}

/// Opens a wait for the task of `waker` (its current waker): the client's side and the queue's
/// side. The waker is registered here, so the wait's first poll costs nothing.
pub(super) fn open(waker: Waker) -> (Wait, Entry) {
    let mailbox = SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    let ticket = {
        let mut st = mailbox.0.lock();
        // Every wait takes its grant or drops it as it ends (never here, under the pool's
        // lock: a server dropped would go back to the pool).
        debug_assert!(st.grant.is_none());
        st.last += 1;
        st.open = st.last;
        st.closed = false;
        st.waker = Some(waker);
        st.open
    };
    let entry = Entry {
        mailbox: Some(mailbox.clone()),
        ticket,
    };
    let wait = Wait {
        mailbox: Some(mailbox),
        ticket,
        polled: false,
        done: false,
    };
    (wait, entry)
}

/// The queue's side of a wait.
pub(super) struct Entry {
    /// `None` once delivered.
    mailbox: Option<Arc<Mailbox>>,
    ticket: u64,
}

impl Entry {
    /// Delivers `grant` to the wait; gives it back when that wait was given up.
    pub fn send(mut self, grant: Grant) -> Result<(), Grant> {
        let mailbox = self.mailbox.take().expect("sent once");
        let waker = {
            let mut st = mailbox.0.lock();
            if st.open != self.ticket {
                return Err(grant);
            }
            st.open = 0;
            st.grant = Some(grant);
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// The wait was given up: sending to it would fail.
    #[cfg(test)]
    fn is_closed(&self) -> bool {
        self.mailbox
            .as_ref()
            .is_none_or(|m| m.0.lock().open != self.ticket)
    }
}

impl Drop for Entry {
    /// An entry dropped unsent (its pool went away) ends the wait with an error.
    fn drop(&mut self) {
        let Some(mailbox) = self.mailbox.take() else {
            return;
        };
        let waker = {
            let mut st = mailbox.0.lock();
            if st.open != self.ticket {
                return;
            }
            st.open = 0;
            st.closed = true;
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The client's side of a wait: resolves to the grant, or `None` when the pool went away.
pub(super) struct Wait {
    /// Always `Some` until dropped.
    mailbox: Option<Arc<Mailbox>>,
    ticket: u64,
    /// Polled before: the first poll, in the task whose waker [`open`] registered, has nothing
    /// to look at (a grant sent since then wakes the task, which polls again).
    polled: bool,
    /// The grant (or the end) was taken: nothing is left to close.
    done: bool,
}

impl Future for Wait {
    type Output = Option<Grant>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Grant>> {
        if !self.polled {
            self.polled = true;
            return Poll::Pending;
        }
        let this = &mut *self;
        let mut st = this.mailbox.as_deref().expect("until dropped").0.lock();
        if let Some(g) = st.grant.take() {
            this.done = true;
            return Poll::Ready(Some(g));
        }
        if st.closed {
            this.done = true;
            return Poll::Ready(None);
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Wait {
    /// Closes the wait (a later delivery to its entry fails), drops a grant delivered but not
    /// taken (a server goes back to its pool, a place is given back), and keeps the mailbox for
    /// this thread's next wait.
    fn drop(&mut self) {
        let Some(mailbox) = self.mailbox.take() else {
            return;
        };
        if !self.done {
            self.close(&mailbox);
        }
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < KEEP {
                s.push(mailbox);
            }
        });
    }
}

impl Wait {
    /// Ends a wait given up before its grant was taken.
    fn close(&self, mailbox: &Mailbox) {
        let left = {
            let mut st = mailbox.0.lock();
            if st.open == self.ticket {
                st.open = 0;
            }
            st.waker = None;
            st.grant.take()
        };
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Duration;

    fn timed_out(g: Option<Grant>) -> Option<Duration> {
        match g {
            Some(Grant::TimedOut(d)) => Some(d),
            _ => None,
        }
    }

    /// Opens a wait for the task that awaits this.
    async fn open_here() -> (Wait, Entry) {
        open(poll_fn(|cx| Poll::Ready(cx.waker().clone())).await)
    }

    #[tokio::test]
    async fn a_grant_sent_before_the_first_poll_is_taken() {
        let (wait, entry) = open_here().await;
        assert!(!entry.is_closed());
        assert!(entry
            .send(Grant::TimedOut(Duration::from_millis(3)))
            .is_ok());
        assert_eq!(timed_out(wait.await), Some(Duration::from_millis(3)));
    }

    #[tokio::test]
    async fn a_grant_from_another_task_wakes_the_wait() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn(async move {
            let (wait, entry) = open_here().await;
            tx.send(entry).ok().expect("sent");
            wait.await
        });
        let entry = rx.await.expect("entry");
        tokio::task::yield_now().await;
        assert!(entry
            .send(Grant::TimedOut(Duration::from_millis(5)))
            .is_ok());
        let got = waiter.await.expect("joined");
        assert_eq!(timed_out(got), Some(Duration::from_millis(5)));
    }

    #[tokio::test]
    async fn an_entry_dropped_unsent_ends_the_wait() {
        let (wait, entry) = open_here().await;
        drop(entry);
        assert!(wait.await.is_none());
    }

    #[test]
    fn a_stale_entry_cannot_deliver_to_a_later_wait() {
        // The first wait is given up; its mailbox is reused for the second (same thread).
        let (first, stale) = open(Waker::noop().clone());
        drop(first);
        assert!(stale.is_closed());
        let (mut second, fresh) = open(Waker::noop().clone());
        assert!(Arc::ptr_eq(
            second.mailbox.as_ref().unwrap(),
            fresh.mailbox.as_ref().unwrap()
        ));
        let back = stale.send(Grant::TimedOut(Duration::from_millis(1)));
        assert!(matches!(back, Err(Grant::TimedOut(_))));
        assert!(!fresh.is_closed());
        assert!(fresh
            .send(Grant::TimedOut(Duration::from_millis(2)))
            .is_ok());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            Pin::new(&mut second).poll(&mut cx).is_pending(),
            "first poll"
        );
        let Poll::Ready(got) = Pin::new(&mut second).poll(&mut cx) else {
            panic!("no grant");
        };
        assert_eq!(timed_out(got), Some(Duration::from_millis(2)));
    }
}
