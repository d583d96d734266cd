//! Changes heard from the registry: a connection of its own that LISTENs, reconnecting with
//! backoff, and the payloads of the notifications every node sends.

use std::collections::VecDeque;
use std::future::{pending, poll_fn, Future};
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{error::TrySendError, Permit, Receiver, Sender};
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};
use tokio_postgres::{AsyncMessage, Config, NoTls};

use super::{describe, Change, Redact};

/// The notification channel of tenant changes.
pub(super) const CHANNEL: &str = "pgcorral_tenants";

/// Changes waiting for the receiver; past it they are coalesced (see [`Kept`]).
const CAPACITY: usize = 1024;

/// Terminations kept while the channel is full; past it one is dropped with a warning.
const KEPT_TERMINATES: usize = 1024;

/// The first wait before reconnecting, doubled after each failure up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How long the listening connection may take to answer the check made at each re-read.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// A notification's payload (JSON: the id may hold any character).
#[derive(Serialize, Deserialize)]
enum Payload {
    #[serde(rename = "tenant")]
    Tenant(String),
    #[serde(rename = "terminate")]
    Terminate(String),
}

/// The payload that tells `change`; one too long for NOTIFY (8000 bytes) says "re-read all".
pub(super) fn payload(change: &Change) -> String {
    let p = match change {
        Change::Tenant(id) => Payload::Tenant(id.clone()),
        Change::Terminate(id) => Payload::Terminate(id.clone()),
        Change::All => return "{}".into(),
    };
    match serde_json::to_string(&p) {
        Ok(s) if s.len() < 8000 => s,
        _ => "{}".into(),
    }
}

/// The change a payload tells; one not understood means [`Change::All`].
pub(super) fn change(payload: &str) -> Change {
    match serde_json::from_str(payload) {
        Ok(Payload::Tenant(id)) => Change::Tenant(id),
        Ok(Payload::Terminate(id)) => Change::Terminate(id),
        Err(_) => Change::All,
    }
}

/// Starts listening on a task of the caller's runtime; see [`super::Store::watch`].
#[allow(clippy::disallowed_methods)] // the registry's listener runs on the caller's runtime (the main thread's), not a worker
pub(super) fn spawn(config: Config, redact: Redact, reread: Duration) -> Receiver<Change> {
    let (tx, rx) = tokio::sync::mpsc::channel(CAPACITY);
    tokio::spawn(run(config, redact, reread, tx));
    rx
}

/// Changes that did not fit the channel: any number of tenant changes become one
/// [`Change::All`]; terminations are kept one by one (bounded), as All does not stand for them.
#[derive(Default)]
struct Kept {
    all: bool,
    terminates: VecDeque<String>,
}

impl Kept {
    /// Sends `change` now if nothing is kept before it and there is room, or keeps it.
    fn push(&mut self, tx: &Sender<Change>, change: Change) {
        let change = if self.is_empty() {
            match tx.try_send(change) {
                Ok(()) | Err(TrySendError::Closed(_)) => return,
                Err(TrySendError::Full(c)) => c,
            }
        } else {
            change
        };
        match change {
            Change::Tenant(_) | Change::All => self.all = true,
            Change::Terminate(id) if self.terminates.contains(&id) => {}
            Change::Terminate(id) if self.terminates.len() < KEPT_TERMINATES => {
                self.terminates.push_back(id)
            }
            Change::Terminate(id) => {
                tracing::warn!(tenant = %id, "tenant registry: too many changes unread; termination dropped")
            }
        }
    }

    /// Nothing kept.
    fn is_empty(&self) -> bool {
        !self.all && self.terminates.is_empty()
    }

    /// Sends the next kept change into a free slot: terminations first, then All.
    fn flush(&mut self, permit: Permit<'_, Change>) {
        if let Some(id) = self.terminates.pop_front() {
            permit.send(Change::Terminate(id));
        } else if self.all {
            self.all = false;
            permit.send(Change::All);
        }
    }
}

/// How a listening session ended.
enum Ended {
    /// The receiver was dropped: stop.
    Receiver,
    /// The connection failed or was lost; `listened`: it had been listening.
    Lost { listened: bool, why: String },
}

/// Listens, reconnecting with backoff, until the receiver is dropped.
async fn run(config: Config, redact: Redact, reread: Duration, tx: Sender<Change>) {
    let mut kept = Kept::default();
    let mut backoff = BACKOFF_MIN;
    loop {
        match session(&config, reread, &tx, &mut kept).await {
            Ended::Receiver => return,
            Ended::Lost { listened, why } => {
                if listened {
                    backoff = BACKOFF_MIN;
                }
                let why = redact.text(&why);
                tracing::warn!(
                    "tenant registry: listening connection: {why}; again in {backoff:?}"
                );
            }
        }
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                _ = tx.closed() => return,
                Ok(permit) = tx.reserve(), if !kept.is_empty() => kept.flush(permit),
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One connection: LISTEN, then [`Change::All`], then every notification, and All again at
/// each re-read, when the connection is checked too.
async fn session(config: &Config, reread: Duration, tx: &Sender<Change>, kept: &mut Kept) -> Ended {
    let lost = |listened, e: &tokio_postgres::Error| Ended::Lost {
        listened,
        why: describe(e),
    };
    let connected = tokio::select! {
        c = config.connect(NoTls) => c,
        _ = tx.closed() => return Ended::Receiver,
    };
    let (client, mut connection) = match connected {
        Ok(c) => c,
        Err(e) => return lost(false, &e),
    };
    let listen_sql = format!("LISTEN {CHANNEL}");
    let listen = client.batch_execute(&listen_sql);
    tokio::pin!(listen);
    let mut listening = false;
    let mut tick = (!reread.is_zero()).then(|| {
        let mut i = interval_at(Instant::now() + reread, reread);
        i.set_missed_tick_behavior(MissedTickBehavior::Delay);
        i
    });
    type Ping<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;
    let mut ping: Option<Ping<'_>> = None;
    loop {
        tokio::select! {
            _ = tx.closed() => return Ended::Receiver,
            r = &mut listen, if !listening => match r {
                Ok(()) => {
                    listening = true;
                    if let Some(t) = tick.as_mut() {
                        t.reset();
                    }
                    kept.push(tx, Change::All);
                }
                Err(e) => return lost(false, &e),
            },
            m = poll_fn(|cx| connection.poll_message(cx)) => match m {
                Some(Ok(AsyncMessage::Notification(n))) if n.channel() == CHANNEL => {
                    kept.push(tx, change(n.payload()));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return lost(listening, &e),
                None => {
                    return Ended::Lost { listened: listening, why: "connection closed".into() }
                }
            },
            _ = next_tick(&mut tick), if listening => {
                kept.push(tx, Change::All);
                if ping.is_none() {
                    let check = client.batch_execute("SELECT 1");
                    ping = Some(Box::pin(async move {
                        match tokio::time::timeout(PING_TIMEOUT, check).await {
                            Ok(r) => r.map_err(|e| describe(&e)),
                            Err(_) => Err(format!("no answer within {PING_TIMEOUT:?}")),
                        }
                    }));
                }
            }
            r = answer(&mut ping), if ping.is_some() => {
                ping = None;
                if let Err(why) = r {
                    return Ended::Lost { listened: true, why };
                }
            }
            Ok(permit) = tx.reserve(), if !kept.is_empty() => kept.flush(permit),
        }
    }
}

/// The next tick of the re-read timer; never, without one.
async fn next_tick(tick: &mut Option<Interval>) {
    match tick {
        Some(t) => {
            t.tick().await;
        }
        None => pending().await,
    }
}

/// The answer to the pending connection check; never, without one.
async fn answer<F: Future<Output = Result<(), String>> + ?Sized>(
    ping: &mut Option<Pin<Box<F>>>,
) -> Result<(), String> {
    match ping {
        Some(p) => p.as_mut().await,
        None => pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_any_id() {
        for c in [
            Change::Tenant("a\"b,\n{}".into()),
            Change::Terminate("tenant".into()),
            Change::All,
        ] {
            assert_eq!(change(&payload(&c)), c);
        }
        assert_eq!(change("acme"), Change::All);
        assert_eq!(payload(&Change::Tenant("x".repeat(9000))), "{}");
    }

    #[tokio::test]
    async fn a_full_channel_coalesces_into_all() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let mut kept = Kept::default();
        kept.push(&tx, Change::Tenant("a".into()));
        kept.push(&tx, Change::Tenant("b".into()));
        kept.push(&tx, Change::Terminate("t".into()));
        kept.push(&tx, Change::Tenant("c".into()));
        kept.push(&tx, Change::Terminate("t".into()));
        assert_eq!(rx.recv().await, Some(Change::Tenant("a".into())));
        let mut got = Vec::new();
        while !kept.is_empty() {
            kept.flush(tx.reserve().await.unwrap());
            got.push(rx.recv().await.unwrap());
        }
        assert_eq!(got, [Change::Terminate("t".into()), Change::All]);
    }
}
