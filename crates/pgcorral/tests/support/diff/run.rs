//! Runs a case over raw sockets against one address (PostgreSQL or pgcorral) and records every
//! message each client receives: the login's ParameterStatus set, each step's answer, and the
//! notifications, which arrive on their own time and are kept apart.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::script::{Case, Until};
use crate::support::wire::{Msg, Wire};

/// How a step's reading ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Reached its `Until`.
    Done,
    /// Nothing arrived within the step timeout.
    Timeout,
    /// The connection closed.
    Closed,
}

/// One step's messages (without NotificationResponse).
#[derive(Clone, Debug)]
pub struct StepAnswer {
    pub msgs: Vec<Msg>,
    pub end: End,
}

/// Everything the clients received.
#[derive(Clone, Debug)]
pub struct Transcript {
    /// ParameterStatus (name, value) of each client's login.
    pub login: Vec<BTreeSet<(String, String)>>,
    /// One entry per step that ran (a client whose step timed out or closed runs no more).
    pub steps: Vec<Option<StepAnswer>>,
    /// NotificationResponses per client, in arrival order.
    pub notifications: Vec<Vec<Msg>>,
}

/// Time bounds of one run.
#[derive(Clone, Copy)]
pub struct Timing {
    /// Longest wait for any message a step expects.
    pub step: Duration,
    /// After the last step, each client reads on until silent this long (late messages).
    pub quiet: Duration,
    /// ...but while fewer notifications than expected have arrived, up to this long.
    pub late_notifications: Duration,
}

/// Runs `case` against 127.0.0.1:`port`, database `db`, as `postgres`. `expect` gives the
/// notification counts of the reference run, to wait for late ones.
pub async fn run(
    case: &Case,
    port: u16,
    db: &str,
    timing: Timing,
    expect: Option<&[usize]>,
) -> Transcript {
    let mut clients = futures_util::future::join_all(
        (0..case.clients).map(|_| Wire::connect(port, "postgres", db)),
    )
    .await;
    let login = clients
        .iter()
        .map(|w| w.params.iter().cloned().collect())
        .collect();
    let mut notifications = vec![Vec::new(); case.clients];
    let mut dead = vec![false; case.clients];
    let mut steps = Vec::with_capacity(case.steps.len());
    for step in &case.steps {
        let c = step.client;
        if dead[c] {
            steps.push(None);
            continue;
        }
        let w = &mut clients[c];
        if send(w, &step.send).await.is_err() {
            dead[c] = true;
            steps.push(Some(StepAnswer {
                msgs: Vec::new(),
                end: End::Closed,
            }));
            continue;
        }
        let answer = read_step(w, step.until, timing.step, &mut notifications[c]).await;
        if answer.end != End::Done {
            dead[c] = true;
        }
        steps.push(Some(answer));
    }
    let tails = futures_util::future::join_all(clients.iter_mut().enumerate().map(|(c, w)| {
        let want = expect.map_or(0, |e| e[c]);
        let have = notifications[c].len();
        drain(w, dead[c], timing, want.saturating_sub(have))
    }))
    .await;
    for (c, tail) in tails.into_iter().enumerate() {
        notifications[c].extend(tail);
    }
    for w in &mut clients {
        let _ = send(w, &crate::support::wire::terminate()).await;
    }
    Transcript {
        login,
        steps,
        notifications,
    }
}

async fn send(w: &mut Wire, bytes: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    w.stream.write_all(bytes).await
}

async fn read_step(
    w: &mut Wire,
    until: Until,
    limit: Duration,
    notes: &mut Vec<Msg>,
) -> StepAnswer {
    let mut msgs = Vec::new();
    let mut readies = 0;
    loop {
        let m = match w.recv_within(limit).await {
            Ok(Some(m)) => m,
            Ok(None) => {
                return StepAnswer {
                    msgs,
                    end: End::Closed,
                }
            }
            Err(()) => {
                return StepAnswer {
                    msgs,
                    end: End::Timeout,
                }
            }
        };
        if m.tag == b'A' {
            notes.push(m);
            continue;
        }
        let tag = m.tag;
        msgs.push(m);
        let done = match until {
            Until::Ready(n) => {
                readies += usize::from(tag == b'Z');
                readies == n
            }
            Until::Tag(t) => tag == t,
        };
        if done {
            return StepAnswer {
                msgs,
                end: End::Done,
            };
        }
    }
}

/// Reads what arrives after the last step: notifications are returned; anything else is a
/// late message and returned too (it shows as a difference in the notification list).
async fn drain(w: &mut Wire, dead: bool, timing: Timing, mut missing: usize) -> Vec<Msg> {
    let mut out = Vec::new();
    if dead {
        return out;
    }
    let deadline = Instant::now() + timing.late_notifications;
    loop {
        let wait = if missing > 0 {
            deadline.saturating_duration_since(Instant::now())
        } else {
            timing.quiet
        };
        match w.recv_within(wait).await {
            Ok(Some(m)) => {
                if m.tag == b'A' {
                    missing = missing.saturating_sub(1);
                }
                out.push(m);
            }
            Ok(None) | Err(()) => return out,
        }
    }
}
