//! LISTEN/NOTIFY for clients without a server of their own: one server connection per pool
//! listens on every channel its clients listen on and hands each notification to them.
//!
//! A [`Hub`] per pool (kept in [`Hubs`]) owns the listening connection (opened outside the
//! pool's places: the pool plus one) and which clients listen on which channel. Each client
//! that listens has a [`Listener`]: its channels and its [`Inbox`], where the hub puts each
//! notification of those channels in the order the server sent them; the client's request loop
//! writes them out between its transactions. A channel is answered to the client only once the
//! hub's server listens on it, so a notification committed after the client's LISTEN was
//! answered reaches it. When the listening connection is lost, every listening client's inbox
//! ends with the error that ended it: the client is told and closed, as its own connection would
//! have been, since notifications may have been missed.

mod task;

pub(crate) use task::channel_and_payload;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use atomic_waker::AtomicWaker;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use crate::error::{Error, Kind, Result};
use crate::pool::Pool;

/// The most bytes of notifications waiting for one client; beyond it the client is closed
/// rather than one be dropped or memory grow without bound.
pub const MAX_QUEUED: usize = 16 << 20;

/// The longest channel name PostgreSQL keeps (NAMEDATALEN - 1); a name this long may have been
/// cut by the parser, so such a LISTEN is left to the server.
pub const MAX_CHANNEL: usize = 63;

/// Every pool's hub, by the pool's identity ([`Pool::identity`]; the hub holds the pool, so
/// the identity is not another's while the hub is kept). One per pool rather than per
/// database name: tenants' databases may share a name and not a server, and no client may
/// hear another tenant's notifications.
#[derive(Default)]
pub struct Hubs(Mutex<HashMap<usize, Arc<Hub>>>);

impl Hubs {
    /// The hub of `pool` (made, not yet connected, at its first use).
    pub fn of(&self, pool: &Pool) -> Arc<Hub> {
        self.0
            .lock()
            .entry(pool.identity())
            .or_insert_with(|| {
                Arc::new(Hub {
                    pool: pool.clone(),
                    inner: Mutex::new(Inner::default()),
                    kick: Notify::new(),
                    marker: format!("pgcorral.marker.{:016x}", rand::random::<u64>()),
                    gates: AtomicU64::new(1),
                })
            })
            .clone()
    }
}

/// One database's listening connection and who listens on what.
pub struct Hub {
    /// Where the listening connection is opened.
    pool: Pool,
    inner: Mutex<Inner>,
    /// Wakes the connection's task: a channel to listen on or to leave.
    kick: Notify,
    /// The channel the hub's connection listens on first, for the markers of
    /// [`Listener::adopt`] (a name no client is likely to use).
    marker: String,
    /// The next marker's payload.
    gates: AtomicU64,
}

#[derive(Default)]
struct Inner {
    channels: HashMap<String, Channel>,
    /// The connection's task runs (started by the first LISTEN, ended when the connection is
    /// lost or no channel is left).
    running: bool,
    /// Catch-ups not yet sent to the server.
    catch_ups: Vec<CatchUp>,
}

struct Channel {
    inboxes: Vec<Member>,
    state: ChannelState,
}

/// A client listening on a channel.
struct Member {
    inbox: Arc<Inbox>,
    /// Taken over from the client's server ([`Listener::adopt`]): nothing is delivered until
    /// the hub hears this marker, before which the server delivered them.
    gate: Option<u64>,
}

enum ChannelState {
    /// Not yet asked of the server; these LISTENs wait for it.
    Wanted(Vec<oneshot::Sender<Result<()>>>),
    /// LISTEN sent; these wait for its answer.
    Asked(Vec<oneshot::Sender<Result<()>>>),
    /// The server listens on it.
    Listening,
}

/// Waits for the hub's server to answer a query sent after it was asked for: every
/// notification committed before then has reached the listeners by then (PostgreSQL sends a
/// backend's pending notifications before its ReadyForQuery).
struct CatchUp {
    done: oneshot::Sender<Result<()>>,
    /// A member joined under this gate hears what comes after the answer.
    gate: Option<u64>,
}

/// Resolves when what the hub waited for is done (`Err` when its connection failed first).
type Wait = oneshot::Receiver<Result<()>>;

impl Hub {
    /// Adds `inbox` to `channel`'s listeners; the waits resolve once the server listens on it
    /// and once what was committed before the join has gone by. A member of a channel the
    /// server already listens on (or was asked to) hears nothing until the hub catches up, as a
    /// notification on its way may have been committed before the client's LISTEN; `gate`,
    /// when given, holds it instead until that marker.
    fn join(
        self: &Arc<Self>,
        channel: &str,
        (inbox, gate): (&Arc<Inbox>, Option<u64>),
        worker: usize,
    ) -> Vec<Wait> {
        let mut inner = self.inner.lock();
        let start = !inner.running;
        inner.running = true;
        let ch = inner
            .channels
            .entry(channel.to_string())
            .or_insert_with(|| Channel {
                inboxes: Vec::new(),
                state: ChannelState::Wanted(Vec::new()),
            });
        let mut waits = Vec::new();
        if let ChannelState::Wanted(w) | ChannelState::Asked(w) = &mut ch.state {
            let (tx, rx) = oneshot::channel();
            w.push(tx);
            waits.push(rx);
        }
        // The server listens already, or was asked to: what is on its way may have been
        // committed before this join.
        let caught_up = (gate.is_none() && !matches!(ch.state, ChannelState::Wanted(_)))
            .then(|| self.gates.fetch_add(1, Ordering::Relaxed));
        let gate = gate.or(caught_up);
        ch.inboxes.push(Member {
            inbox: inbox.clone(),
            gate,
        });
        if let Some(g) = caught_up {
            let (tx, rx) = oneshot::channel();
            inner.catch_ups.push(CatchUp {
                done: tx,
                gate: Some(g),
            });
            waits.push(rx);
        }
        drop(inner);
        if start {
            task::start(self.clone(), worker);
        } else {
            self.kick.notify_one();
        }
        waits
    }

    /// Resolves once every notification committed before this call has reached the listeners'
    /// inboxes (at once when the hub has no connection).
    fn catch_up(&self) -> Option<Wait> {
        let mut inner = self.inner.lock();
        if !inner.running {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        inner.catch_ups.push(CatchUp {
            done: tx,
            gate: None,
        });
        drop(inner);
        self.kick.notify_one();
        Some(rx)
    }

    /// The server answered a catch-up: its members hear from now on, its waiters are told.
    fn caught_up(&self, done: Vec<CatchUp>) {
        let mut inner = self.inner.lock();
        for g in done.iter().filter_map(|c| c.gate) {
            inner.ungate(g);
        }
        drop(inner);
        for c in done {
            let _ = c.done.send(Ok(()));
        }
    }

    /// Takes `inbox` off `channel`'s listeners; the server stops listening on a channel left
    /// without any.
    fn leave(&self, channel: &str, inbox: &Arc<Inbox>) {
        let mut inner = self.inner.lock();
        if let Some(ch) = inner.channels.get_mut(channel) {
            ch.inboxes.retain(|m| !Arc::ptr_eq(&m.inbox, inbox));
            if ch.inboxes.is_empty() {
                drop(inner);
                self.kick.notify_one();
            }
        }
    }

    /// Hands a notification (a whole NotificationResponse) to its channel's listeners.
    fn deliver(&self, channel: &[u8], payload: &[u8], msg: Bytes) {
        let mut inner = self.inner.lock();
        let Ok(name) = std::str::from_utf8(channel) else {
            return;
        };
        if name == self.marker {
            // What was taken over under this marker is the hub's to deliver from now on.
            let gate = std::str::from_utf8(payload)
                .ok()
                .and_then(|p| p.parse().ok());
            if let Some(g) = gate {
                inner.ungate(g);
            }
            return;
        }
        if let Some(ch) = inner.channels.get(name) {
            for m in ch.inboxes.iter().filter(|m| m.gate.is_none()) {
                m.inbox.push(msg.clone());
            }
        }
    }

    /// The listening connection is gone: every listener is told `why` and let go.
    fn lost(&self, why: &Error) {
        let mut inner = self.inner.lock();
        inner.running = false;
        let mut end = BytesMut::new();
        why.write_response(&mut end, "FATAL");
        let end = end.freeze();
        for c in inner.catch_ups.drain(..) {
            let _ = c.done.send(Err(why.replay()));
        }
        for (_, ch) in inner.channels.drain() {
            for m in &ch.inboxes {
                m.inbox.end(end.clone());
            }
            if let ChannelState::Wanted(w) | ChannelState::Asked(w) = ch.state {
                for tx in w {
                    let _ = tx.send(Err(why.replay()));
                }
            }
        }
    }
}

impl Inner {
    /// The members held by `gate` hear from now on.
    fn ungate(&mut self, gate: u64) {
        for ch in self.channels.values_mut() {
            for m in &mut ch.inboxes {
                if m.gate == Some(gate) {
                    m.gate = None;
                }
            }
        }
    }
}

/// Notifications waiting for one client.
#[derive(Default)]
pub struct Inbox {
    queue: Mutex<Queue>,
    waker: AtomicWaker,
}

#[derive(Default)]
struct Queue {
    msgs: VecDeque<Bytes>,
    bytes: usize,
    /// The client is to be closed with this ErrorResponse once what came before is written.
    end: Option<Bytes>,
}

/// What a client's inbox held.
pub struct Taken {
    /// Notifications, whole messages in order.
    pub out: BytesMut,
    /// The listening is over: this FATAL ErrorResponse (already in `out`, last) ends the client.
    pub ended: bool,
}

impl Inbox {
    fn push(&self, msg: Bytes) {
        let mut q = self.queue.lock();
        if q.end.is_some() {
            return;
        }
        if q.bytes + msg.len() > MAX_QUEUED {
            let mut end = BytesMut::new();
            pgwire::encode::error_response(
                &mut end,
                "FATAL",
                pgwire::sqlstate::PROGRAM_LIMIT_EXCEEDED,
                &format!("more than {MAX_QUEUED} bytes of notifications waited for this client"),
            );
            q.end = Some(end.freeze());
        } else {
            q.bytes += msg.len();
            q.msgs.push_back(msg);
        }
        drop(q);
        self.waker.wake();
    }

    fn end(&self, why: Bytes) {
        self.queue.lock().end.get_or_insert(why);
        self.waker.wake();
    }

    /// True when something waits; otherwise the task is woken when something comes.
    pub fn poll_ready(&self, cx: &mut std::task::Context<'_>) -> bool {
        self.waker.register(cx.waker());
        self.has_some()
    }

    /// True when something waits.
    pub fn has_some(&self) -> bool {
        let q = self.queue.lock();
        !q.msgs.is_empty() || q.end.is_some()
    }

    /// Everything waiting, in order.
    pub fn take(&self) -> Taken {
        let mut q = self.queue.lock();
        let mut out = BytesMut::with_capacity(q.bytes);
        for m in q.msgs.drain(..) {
            out.extend_from_slice(&m);
        }
        q.bytes = 0;
        let ended = match &q.end {
            Some(e) => {
                out.extend_from_slice(e);
                true
            }
            None => false,
        };
        Taken { out, ended }
    }
}

/// Channels taken over from a client's server ([`Listener::adopt`]).
pub struct Adopted {
    /// The marker's channel and payload: the server is to send it once it listens on it.
    pub channel: String,
    pub payload: String,
    /// The channels the client did not listen on through the hub before: the server's
    /// notifications of these, before the marker, are the client's; any other it has are
    /// the hub's too.
    pub new: Vec<String>,
}

/// One client's listening: its channels on its database's hub. Dropping it leaves them all.
pub struct Listener {
    hub: Arc<Hub>,
    inbox: Arc<Inbox>,
    channels: Vec<String>,
}

impl Listener {
    pub fn new(hub: Arc<Hub>) -> Listener {
        Listener {
            hub,
            inbox: Arc::default(),
            channels: Vec::new(),
        }
    }

    /// LISTEN `channel`: done once the hub's server listens on it and what was committed before
    /// has gone by; a first LISTEN opens the hub's connection on `worker`.
    pub async fn listen(&mut self, channel: &str, worker: usize) -> Result<()> {
        if self.channels.iter().any(|c| c == channel) {
            return Ok(());
        }
        let waits = self.hub.join(channel, (&self.inbox, None), worker);
        self.channels.push(channel.to_string());
        for wait in waits {
            if let Err(e) = settled(wait).await {
                self.leave(channel);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes over `channels`, which the client's server listens on, so that the server can stop
    /// listening: each one not listened on yet is joined with a gate, and the hub listens on
    /// all of them when this returns. The server must then listen on the marker channel and
    /// send the marker ([`Adopted`]), deliver to the client what it has before the marker,
    /// and stop listening; the hub delivers what comes after it. On an error nothing was
    /// taken over.
    pub async fn adopt(&mut self, channels: &[String], worker: usize) -> Result<Adopted> {
        let gate = self.hub.gates.fetch_add(1, Ordering::Relaxed);
        let mut new = Vec::new();
        let mut waits = Vec::new();
        for c in channels {
            if self.channels.contains(c) || new.contains(c) {
                continue;
            }
            waits.push(self.hub.join(c, (&self.inbox, Some(gate)), worker));
            self.channels.push(c.clone());
            new.push(c.clone());
        }
        for wait in waits.into_iter().flatten() {
            if let Err(e) = settled(wait).await {
                for c in &new {
                    self.leave(c);
                }
                return Err(e);
            }
        }
        Ok(Adopted {
            channel: self.hub.marker.clone(),
            payload: gate.to_string(),
            new,
        })
    }

    /// Waits until every notification committed before this call is in the inbox: what a
    /// client's own server would have sent before it read the client's next statement.
    pub async fn catch_up(&self) {
        if let Some(wait) = self.hub.catch_up() {
            // A failed connection ends the inbox with its error.
            let _ = wait.await;
        }
    }

    /// UNLISTEN `channel` (nothing when not listening on it, as PostgreSQL); see
    /// [`Listener::catch_up`] for what was committed before.
    pub fn leave(&mut self, channel: &str) {
        if let Some(at) = self.channels.iter().position(|c| c == channel) {
            self.channels.swap_remove(at);
            self.hub.leave(channel, &self.inbox);
        }
    }

    /// UNLISTEN *.
    pub fn leave_all(&mut self) {
        for c in std::mem::take(&mut self.channels) {
            self.hub.leave(&c, &self.inbox);
        }
    }

    /// Whether it listens on anything.
    pub fn is_listening(&self) -> bool {
        !self.channels.is_empty()
    }

    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.leave_all();
    }
}

/// What the hub's wait came to.
async fn settled(wait: Wait) -> Result<()> {
    wait.await.unwrap_or_else(|_| {
        Err(Error::new(
            Kind::ServerIo,
            "the connection listening for notifications ended",
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(channel: &str, payload: &str) -> Bytes {
        let mut b = BytesMut::new();
        pgwire::encode::message(&mut b, b'A', |b| {
            b.extend_from_slice(&7i32.to_be_bytes());
            b.extend_from_slice(channel.as_bytes());
            b.extend_from_slice(b"\0");
            b.extend_from_slice(payload.as_bytes());
            b.extend_from_slice(b"\0");
        });
        b.freeze()
    }

    #[test]
    fn an_inbox_keeps_order_and_ends_last() {
        let i = Inbox::default();
        i.push(note("a", "1"));
        i.push(note("a", "2"));
        i.end(Bytes::from_static(b"E-end"));
        i.push(note("a", "3"));
        let t = i.take();
        assert!(t.ended);
        let mut want = BytesMut::new();
        want.extend_from_slice(&note("a", "1"));
        want.extend_from_slice(&note("a", "2"));
        want.extend_from_slice(b"E-end");
        assert_eq!(&t.out[..], &want[..]);
    }

    #[test]
    fn an_inbox_over_its_cap_ends_rather_than_drops() {
        let i = Inbox::default();
        let big = Bytes::from(vec![b'x'; MAX_QUEUED / 2 + 1]);
        i.push(big.clone());
        i.push(big);
        let t = i.take();
        assert!(t.ended);
        // The first kept, the second refused: the client is closed with an error after it.
        assert_eq!(t.out[MAX_QUEUED / 2 + 1], b'E');
    }
}
