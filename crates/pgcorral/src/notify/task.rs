//! A hub's listening connection: opened at the first LISTEN, told each channel to listen on
//! and to leave, read for notifications, and ended when lost or left without a channel.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pgwire::backend;

use super::{CatchUp, ChannelState, Hub};
use crate::error::{Error, Kind, Result};
use crate::logsafe;
use crate::net::framed::read_message;
use crate::server::ServerConn;
use crate::session;

/// How long the connection stays open without a channel, for the next LISTEN.
const LINGER: Duration = Duration::from_secs(30);

/// Starts the hub's connection on worker `worker` (the first listening client's).
pub(super) fn start(hub: Arc<Hub>, worker: usize) {
    let run = run(hub.clone(), worker);
    if corral_rt::exec::spawn_here(run).is_err() {
        hub.lost(&Error::new(
            Kind::ServerIo,
            "no runtime to listen for notifications on",
        ));
    }
}

async fn run(hub: Arc<Hub>, worker: usize) {
    let why = match listen(&hub, worker).await {
        Ok(()) => return,
        Err(e) => e,
    };
    tracing::info!(db = %logsafe::Esc(hub.pool.name().0), error = %logsafe::Esc(&why),
        "the connection listening for notifications ended");
    hub.lost(&why);
}

/// A query sent whose ReadyForQuery has not come.
enum Asked {
    /// LISTEN of this channel, not yet answered.
    Listen(String),
    /// An UNLISTEN, or a LISTEN answered.
    Done,
    /// An empty query, for these catch-ups.
    CatchUp(Vec<CatchUp>),
}

/// Queries sent whose ReadyForQuery has not come, in order.
type Sent = std::collections::VecDeque<Asked>;

/// Opens the connection and serves the hub until no channel is left (`Ok`) or the connection
/// fails (the error listeners are told).
async fn listen(hub: &Hub, worker: usize) -> Result<()> {
    let mut server = hub.pool.open_listener(worker).await?;
    // Names and payloads pass as UTF-8, the encoding of the clients whose LISTENs are answered.
    session::exec::query(&mut server, "SET client_encoding = 'UTF8'").await?;
    // The markers first: any channel listened on after this has them (see `Listener::adopt`).
    session::exec::query(&mut server, &format!("LISTEN {}", quoted(&hub.marker))).await?;
    let mut sent = Sent::new();
    let mut idle_since = None::<tokio::time::Instant>;
    loop {
        let mut out = BytesMut::new();
        ask(hub, &mut out, &mut sent);
        if !out.is_empty() {
            server
                .stream
                .send(&out)
                .await
                .map_err(|e| Error::with_source(Kind::ServerIo, "write to server", e))?;
        }
        let empty = sent.is_empty() && hub.inner.lock().channels.is_empty();
        let deadline = match (empty, idle_since) {
            (false, _) => {
                idle_since = None;
                None
            }
            (true, Some(t)) => Some(t + LINGER),
            (true, None) => {
                let now = tokio::time::Instant::now();
                idle_since = Some(now);
                Some(now + LINGER)
            }
        };
        let linger = async {
            match deadline {
                Some(t) => corral_rt::timer::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = hub.kick.notified() => {}
            () = linger => {
                let mut inner = hub.inner.lock();
                if inner.channels.is_empty() {
                    inner.running = false;
                    // Nobody listens: a catch-up asked meanwhile has nothing to wait for.
                    inner.catch_ups.clear();
                    return Ok(());
                }
            }
            msg = read_message(&mut server.stream, &mut server.rbuf, 1 << 30) => {
                let (tag, body) = msg.map_err(|e| {
                    Error::with_source(Kind::ServerIo, "server closed the connection", e)
                })?;
                answer(hub, &mut server, &mut sent, tag, body)?;
            }
        }
    }
}

/// Writes the LISTENs and UNLISTENs the hub's channels need, and a query for the catch-ups
/// asked for, into `out`, each noted in `sent`.
fn ask(hub: &Hub, out: &mut BytesMut, sent: &mut Sent) {
    let mut inner = hub.inner.lock();
    let mut gone = Vec::new();
    for (name, ch) in inner.channels.iter_mut() {
        match &mut ch.state {
            ChannelState::Wanted(w) if !ch.inboxes.is_empty() => {
                let waiting = std::mem::take(w);
                ch.state = ChannelState::Asked(waiting);
                pgwire::encode::query(out, &format!("LISTEN {}", quoted(name)));
                sent.push_back(Asked::Listen(name.clone()));
            }
            ChannelState::Wanted(_) => gone.push((name.clone(), false)),
            ChannelState::Listening if ch.inboxes.is_empty() => gone.push((name.clone(), true)),
            _ => {}
        }
    }
    for (name, listened) in gone {
        inner.channels.remove(&name);
        if listened {
            pgwire::encode::query(out, &format!("UNLISTEN {}", quoted(&name)));
            sent.push_back(Asked::Done);
        }
    }
    // After the LISTENs: a member joined by them is held until the catch-up's answer.
    if !inner.catch_ups.is_empty() {
        pgwire::encode::query(out, "");
        sent.push_back(Asked::CatchUp(std::mem::take(&mut inner.catch_ups)));
    }
}

/// A message from the listening connection.
fn answer(
    hub: &Hub,
    server: &mut ServerConn,
    sent: &mut Sent,
    tag: u8,
    body: BytesMut,
) -> Result<()> {
    match tag {
        backend::NOTIFICATION_RESPONSE => {
            let (channel, payload) = channel_and_payload(&body);
            let mut msg = BytesMut::with_capacity(body.len() + 5);
            pgwire::encode::message(&mut msg, tag, |b| b.extend_from_slice(&body));
            hub.deliver(channel, payload, msg.freeze());
        }
        backend::ERROR_RESPONSE => {
            let fields = backend::ErrorFields::parse(&body).unwrap_or_default();
            let mut raw = BytesMut::new();
            pgwire::encode::message(&mut raw, tag, |b| b.extend_from_slice(&body));
            let e = Error::server(
                format!("{} ({})", fields.message, fields.code),
                raw.freeze(),
                fields.code.clone(),
            );
            if fields.is_fatal() || sent.is_empty() {
                return Err(e);
            }
            if let Some(name) = answered(sent) {
                settle(hub, &name, Err(e));
            }
        }
        backend::COMMAND_COMPLETE => {
            if let Some(name) = answered(sent) {
                settle(hub, &name, Ok(()));
            }
        }
        backend::READY_FOR_QUERY => {
            if let Some(Asked::CatchUp(done)) = sent.pop_front() {
                hub.caught_up(done);
            }
        }
        backend::PARAMETER_STATUS => {
            if let Some((k, v)) = backend::parameter_status(&body) {
                session::exec::set_param(&mut server.params, k, v);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The channel of the LISTEN the server answers, if that is what it answers (once).
fn answered(sent: &mut Sent) -> Option<String> {
    match sent.front_mut() {
        Some(a @ Asked::Listen(_)) => match std::mem::replace(a, Asked::Done) {
            Asked::Listen(name) => Some(name),
            _ => None,
        },
        _ => None,
    }
}

/// A NotificationResponse body's channel and payload (empty when it is cut short).
pub(crate) fn channel_and_payload(body: &[u8]) -> (&[u8], &[u8]) {
    let rest = body.get(4..).unwrap_or_default();
    let Some(end) = rest.iter().position(|&c| c == 0) else {
        return (rest, &[]);
    };
    let payload = &rest[end + 1..];
    let payload = payload.split(|&c| c == 0).next().unwrap_or_default();
    (&rest[..end], payload)
}

/// The server's answer to LISTEN `name`: its waiting clients are told.
fn settle(hub: &Hub, name: &str, r: Result<()>) {
    let mut inner = hub.inner.lock();
    let Some(ch) = inner.channels.get_mut(name) else {
        return;
    };
    let ChannelState::Asked(waiting) = std::mem::replace(&mut ch.state, ChannelState::Listening)
    else {
        return;
    };
    match &r {
        Ok(()) => {
            for tx in waiting {
                let _ = tx.send(Ok(()));
            }
        }
        Err(e) => {
            for tx in waiting {
                let _ = tx.send(Err(e.replay()));
            }
            // Not listened on: its clients were told, and take themselves off.
            ch.state = ChannelState::Wanted(Vec::new());
            ch.inboxes.clear();
        }
    }
}

/// `name` as a quoted identifier.
fn quoted(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    session::ident(&mut s, name);
    s
}
