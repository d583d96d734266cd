//! The relay's state in named parts: each side's scanned bytes and stop, the timer that follows
//! the link's phase, and when writes to the client leave the worker's batch.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use bytes::BytesMut;
use corral_rt::timer::sleep_until;

use super::scan::ServerScan;
use super::{Outcome, Phase, Timeouts};
use crate::server::LinkState;

/// The client side: its scanned bytes that wait to go to the server, and what comes after them.
pub(super) struct ClientSide {
    /// Scanned bytes at the front of the client's buffer, written to the server after
    /// `server.wout` (the messages pgcorral rewrote).
    pub ready: usize,
    /// The client side ended; acted on once `ready` is written.
    pub stop: Option<Outcome>,
    /// Scan again once `ready` is written.
    pub again: bool,
    /// The client's next batch waits for the answer to its last (one batch at a time).
    pub held: bool,
    /// This turn of the relay reads the client (kept here rather than in a local: the poll
    /// reads the side through one pointer).
    pub reading: bool,
}

impl ClientSide {
    /// Scan the client's buffer again: asked for, everything scanned is out, and the side goes on.
    #[inline]
    pub fn wants_scan(&self) -> bool {
        self.again && self.ready == 0 && self.stop.is_none()
    }

    /// A held batch may go: everything sent before it is answered.
    #[inline]
    pub fn may_resume(&self, server: &ServerSide, st: &LinkState) -> bool {
        self.held && server.answered(st)
    }

    /// The held batch is scanned next.
    #[inline]
    pub fn resume(&mut self) {
        self.held = false;
        self.again = true;
    }

    /// `n` of the scanned bytes were written to the server.
    #[inline]
    pub fn sent(&mut self, n: usize) {
        self.ready -= n;
    }

    /// Everything scanned is out, pgcorral's own messages before it (`wout`) included.
    #[inline]
    pub fn all_sent(&self, wout: &BytesMut) -> bool {
        self.ready == 0 && wout.is_empty()
    }

    /// The stop, once it is due: at once, except that a refused Query waits until what came
    /// before it is `answered`.
    #[inline]
    pub fn take_stop(&mut self, answered: bool) -> Option<Outcome> {
        if !matches!(self.stop, Some(Outcome::Refused(_))) || answered {
            self.stop.take()
        } else {
            None
        }
    }

    /// Decides whether this turn reads the client: once what was scanned is out (`sent`),
    /// with nothing to scan or hold back, and the side going on. Once the server side has
    /// stopped, only to finish the message in flight (`pass` bytes of it to come); the client's
    /// next request waits for the next checkout.
    #[inline]
    pub fn plan_read(&mut self, sent: bool, server: &ServerSide, pass: usize) -> bool {
        self.reading = sent
            && !self.again
            && !self.held
            && self.stop.is_none()
            && (server.stop.is_none() || pass > 0);
        self.reading
    }

    /// Bytes came from the client: scan them.
    #[inline]
    pub fn received(&mut self) {
        self.again = true;
    }

    /// Bytes came while the server side has stopped: what is buffered of the message in flight
    /// (`pass` bytes to come) goes to the server unscanned, the rest waits.
    #[inline]
    pub fn drain(&mut self, pass: &mut usize, buffered: usize) {
        let take = (*pass).min(buffered);
        *pass -= take;
        self.ready = take;
    }

    /// A batch or a rewrite is waiting for bytes to be written before it is scanned.
    #[inline]
    pub fn rescans(&self) -> bool {
        self.held || self.again
    }
}

/// The server side: its scanned bytes that wait to go to the client, and what comes after them.
pub(super) struct ServerSide {
    /// Scanned bytes at the front of the server's buffer, written to the client after
    /// `server.fout` (answers pgcorral gives).
    pub ready: usize,
    /// The server side ended; acted on once `ready` is written.
    pub stop: Option<Outcome>,
    /// Scan again once `ready` is written.
    pub again: bool,
    /// The server sent a FATAL error: when it closes, the client has been told why.
    pub fatal: bool,
    /// A batch whose stale-plan error was hidden goes to the server again, ahead of anything
    /// the client sent since, once nothing of the client's is part-way out.
    pub replay: bool,
    /// This turn of the relay reads the server (kept here rather than in a local: the poll
    /// reads the side through one pointer).
    pub reading: bool,
}

impl ServerSide {
    /// `again`: scan before the first read (bytes the server sent while idle, or answers
    /// pgcorral owes).
    #[inline]
    pub fn new(again: bool) -> ServerSide {
        ServerSide {
            ready: 0,
            stop: None,
            again,
            fatal: false,
            replay: false,
            reading: false,
        }
    }

    /// True when the server's buffer is to be scanned now (asked for, everything scanned is
    /// out, and the side goes on); the request is then taken.
    #[inline]
    pub fn begin_scan(&mut self) -> bool {
        if self.again && self.ready == 0 && self.stop.is_none() {
            self.again = false;
            true
        } else {
            false
        }
    }

    /// What a scan found: bytes to forward, a stop, a FATAL error or a replay seen.
    #[inline]
    pub fn scanned(&mut self, s: ServerScan) {
        self.ready = s.ready;
        self.fatal |= s.fatal;
        self.stop = s.stop;
        self.again = s.again;
        self.replay |= s.replay;
    }

    /// `n` of the scanned bytes were written to the client.
    #[inline]
    pub fn sent(&mut self, n: usize) {
        self.ready -= n;
    }

    /// Everything sent to the server is answered, and the answers are out.
    #[inline]
    pub fn answered(&self, st: &LinkState) -> bool {
        st.pending == 0 && self.ready == 0 && self.stop.is_none()
    }

    /// Stopped, with everything before the stop written to the client (`fout` included).
    #[inline]
    pub fn finished(&self, fout: &BytesMut) -> bool {
        self.ready == 0 && fout.is_empty() && self.stop.is_some()
    }

    /// Stopped where the server may go back to the pool.
    #[inline]
    pub fn releasable(&self) -> bool {
        matches!(self.stop, Some(Outcome::Idle | Outcome::TransactionRefused))
    }

    /// True when the replay is due (nothing of the client's is part-way out: none of its
    /// scanned bytes, `pass` bytes of a message); it is then taken.
    #[inline]
    pub fn take_replay(&mut self, client: &ClientSide, pass: usize) -> bool {
        if self.replay && client.ready == 0 && pass == 0 {
            self.replay = false;
            true
        } else {
            false
        }
    }

    /// Decides whether this turn reads the server: nothing scanned waits, nothing to scan,
    /// and the side goes on.
    #[inline]
    pub fn plan_read(&mut self) -> bool {
        self.reading = self.ready == 0 && self.stop.is_none() && !self.again;
        self.reading
    }

    /// Bytes came from the server: scan them.
    #[inline]
    pub fn received(&mut self) {
        self.again = true;
    }

    /// A scan or a replay is waiting for bytes to be written.
    #[inline]
    pub fn rescans(&self) -> bool {
        self.again || self.replay
    }
}

/// The timer of query_timeout, idle_transaction_timeout and client_idle_timeout, set for the
/// link's phase and set again when the phase changes; and of transaction_timeout, which runs
/// from the phase that leaves Idle (a request goes out) until the link is Idle again, and
/// expires first when it is sooner than the phase's own.
pub(super) struct PhaseTimer {
    /// Some timeout is configured. Without one, no timer is made and phases are not followed.
    timed: bool,
    /// The phase the timer was last set for.
    phase: Option<Phase>,
    /// The timer runs: `phase` has a timeout, or a transaction is timed.
    armed: bool,
    /// What the running timer is for: `phase`, or [`Phase::Transaction`].
    reason: Phase,
    /// Made at the first phase that has a timeout, then reset in place. The transaction's
    /// deadline lives in it too, so that the relay (and every client's future) is no bigger
    /// for it.
    clock: Option<Pin<Box<Clock>>>,
}

pin_project_lite::pin_project! {
    /// The timer's allocation.
    struct Clock {
        #[pin]
        sleep: tokio::time::Sleep,
        // When the transaction under way reaches transaction_timeout.
        tx_deadline: Option<tokio::time::Instant>,
    }
}

impl PhaseTimer {
    #[inline]
    pub fn new(timeouts: &Timeouts) -> PhaseTimer {
        PhaseTimer {
            timed: timeouts.any(),
            phase: None,
            armed: false,
            reason: Phase::Idle,
            clock: None,
        }
    }

    /// Follows the link's phase: a new phase stops the timer, and starts it anew when that
    /// phase has a timeout or a transaction is timed (whichever expires first).
    #[inline]
    pub fn follow(&mut self, st: &LinkState, timeouts: &Timeouts) {
        if !self.timed {
            return;
        }
        let p = Phase::of(st);
        if self.phase == Some(p) {
            return;
        }
        self.phase = Some(p);
        self.armed = false;
        let own = timeouts.of(p);
        let running = self.clock.as_ref().and_then(|c| c.tx_deadline);
        let (tx, starts) = match p {
            Phase::Idle => (None, false),
            _ => (running, running.is_none() && timeouts.transaction.is_some()),
        };
        // The clock is read only when a deadline is to be computed from now.
        let now = (own.is_some() || starts).then(tokio::time::Instant::now);
        let tx = match (starts, now, timeouts.transaction) {
            (true, Some(now), Some(d)) => Some(now + d),
            _ => tx,
        };
        let own = own.zip(now).map(|(d, now)| (now + d, p));
        let first = match (own, tx.map(|at| (at, Phase::Transaction))) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        };
        let Some((at, reason)) = first else {
            if let Some(c) = &mut self.clock {
                *c.as_mut().project().tx_deadline = None;
            }
            return;
        };
        match &mut self.clock {
            Some(c) => {
                let c = c.as_mut().project();
                c.sleep.reset(at);
                *c.tx_deadline = tx;
            }
            None => {
                self.clock = Some(Box::pin(Clock {
                    sleep: sleep_until(at),
                    tx_deadline: tx,
                }))
            }
        }
        self.armed = true;
        self.reason = reason;
    }

    /// Polls the timer: true when it runs and has expired.
    #[inline]
    pub fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.armed {
            if let Some(c) = self.clock.as_mut() {
                return c.as_mut().project().sleep.poll(cx).is_ready();
            }
        }
        false
    }

    /// The phase the timer last followed.
    #[cfg(test)]
    pub fn phase(&self) -> Phase {
        self.phase.expect("followed a phase")
    }

    /// The timeout that expired: the phase's own, or [`Phase::Transaction`].
    #[inline]
    pub fn reason(&self) -> Phase {
        self.reason
    }

    /// When the running timer expires.
    #[cfg(test)]
    fn deadline(&self) -> Option<tokio::time::Instant> {
        self.clock.as_ref().map(|c| c.sleep.deadline())
    }
}

/// When writes to the client leave the worker's batch.
///
/// A write to the client goes into the worker's batch (`corral_rt::batch`), which the worker
/// sends when its tasks stop running: once this relay waits. While the client streams (a long
/// pipeline: its socket stays readable) the relay does not wait, and the server's bytes (an
/// error in the middle of the pipeline) would wait in the batch for as long as the client keeps
/// sending. So when the client's last read filled the buffer, the write goes out at once
/// (`streaming`); else it is sent at the relay's next event if the relay got that event without
/// waiting (`held`: a flush that finds it sent costs nothing).
#[derive(Default)]
pub(super) struct ClientFlush {
    streaming: bool,
    held: bool,
}

impl ClientFlush {
    /// After a write to the client: true when the batch is to go out now (the client streams);
    /// else the write is held until the relay's next event.
    #[inline]
    pub fn wrote(&mut self) -> bool {
        if self.streaming {
            true
        } else {
            self.held = true;
            false
        }
    }

    /// After the relay's event: true when a held write is to go out now.
    #[inline]
    pub fn take_held(&mut self) -> bool {
        if self.held {
            self.held = false;
            true
        } else {
            false
        }
    }

    /// After a read from the client into `buf`: it streams when the read filled the buffer.
    #[inline]
    pub fn client_read(&mut self, buf: &BytesMut) {
        self.streaming = buf.len() == buf.capacity();
    }

    /// The client's last read filled its buffer.
    #[inline]
    pub fn streaming(&self) -> bool {
        self.streaming
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;
    use std::time::Duration;

    use pgwire::backend::TxStatus;

    use super::*;

    fn client(ready: usize, again: bool, held: bool) -> ClientSide {
        ClientSide {
            ready,
            stop: None,
            again,
            held,
            reading: false,
        }
    }

    fn link(pending: u32, tx: TxStatus) -> LinkState {
        LinkState {
            pending,
            tx,
            ..Default::default()
        }
    }

    #[test]
    fn the_client_is_scanned_again_once_its_bytes_are_out() {
        let mut c = client(5, true, false);
        assert!(!c.wants_scan());
        c.sent(3);
        assert!(!c.wants_scan());
        c.sent(2);
        assert!(c.wants_scan());
        c.stop = Some(Outcome::ClientGone { eof: false });
        assert!(!c.wants_scan());
        let mut c = client(0, false, false);
        assert!(!c.wants_scan());
        c.received();
        assert!(c.wants_scan());
    }

    #[test]
    fn a_held_batch_resumes_once_everything_before_it_is_answered() {
        let mut c = client(0, false, true);
        let mut s = ServerSide::new(false);
        assert!(!c.may_resume(&s, &link(1, TxStatus::InTransaction)));
        let answered = link(0, TxStatus::InTransaction);
        s.ready = 3;
        assert!(!c.may_resume(&s, &answered), "the answer is not out yet");
        s.ready = 0;
        s.stop = Some(Outcome::Idle);
        assert!(!c.may_resume(&s, &answered), "the server side has stopped");
        s.stop = None;
        assert!(c.may_resume(&s, &answered));
        assert!(!c.wants_scan());
        c.resume();
        assert!(!c.held && c.wants_scan());
        assert!(!c.may_resume(&s, &answered), "resumed once");
        assert!(
            !client(0, false, false).may_resume(&s, &answered),
            "nothing held"
        );
    }

    #[test]
    fn all_sent_counts_the_rewritten_messages_too() {
        let mut wout = BytesMut::new();
        assert!(client(0, false, false).all_sent(&wout));
        assert!(!client(1, false, false).all_sent(&wout));
        wout.extend_from_slice(b"P");
        assert!(!client(0, false, false).all_sent(&wout));
    }

    #[test]
    fn a_refused_query_stops_the_client_only_once_answered() {
        let mut c = client(0, false, false);
        assert_eq!(c.take_stop(true), None);
        c.stop = Some(Outcome::Refused("LISTEN"));
        assert_eq!(c.take_stop(false), None);
        assert!(c.stop.is_some(), "kept until answered");
        assert_eq!(c.take_stop(true), Some(Outcome::Refused("LISTEN")));
        assert_eq!(c.stop, None);
        c.stop = Some(Outcome::ClientGone { eof: false });
        assert_eq!(c.take_stop(false), Some(Outcome::ClientGone { eof: false }));
        c.stop = Some(Outcome::ClientProtocol("bad".into()));
        assert_eq!(
            c.take_stop(false),
            Some(Outcome::ClientProtocol("bad".into()))
        );
    }

    #[test]
    fn the_client_is_read_only_when_nothing_of_its_own_waits() {
        let going = ServerSide::new(false);
        let mut stopped = ServerSide::new(false);
        stopped.stop = Some(Outcome::Idle);
        let mut c = client(0, false, false);
        assert!(c.plan_read(true, &going, 0) && c.reading);
        assert!(
            !c.plan_read(false, &going, 0) && !c.reading,
            "bytes not out"
        );
        for mut c in [client(0, true, false), client(0, false, true)] {
            assert!(
                !c.plan_read(true, &going, 0),
                "a scan or a held batch first"
            );
        }
        c.stop = Some(Outcome::ClientGone { eof: false });
        assert!(!c.plan_read(true, &going, 0), "the client side stopped");
        let mut c = client(0, false, false);
        assert!(!c.plan_read(true, &stopped, 0), "the next request waits");
        assert!(
            c.plan_read(true, &stopped, 4),
            "the message in flight is finished"
        );
    }

    #[test]
    fn draining_takes_only_the_rest_of_the_message_in_flight() {
        let mut c = client(0, false, false);
        let mut pass = 10;
        c.drain(&mut pass, 4);
        assert_eq!((c.ready, pass), (4, 6));
        c.sent(4);
        c.drain(&mut pass, 20);
        assert_eq!((c.ready, pass), (6, 0));
        c.sent(6);
        c.drain(&mut pass, 20);
        assert_eq!((c.ready, pass), (0, 0));
    }

    #[test]
    fn a_side_rescans_after_a_write_when_something_waits() {
        assert!(!client(0, false, false).rescans());
        assert!(client(0, true, false).rescans());
        assert!(client(0, false, true).rescans());
        let mut s = ServerSide::new(false);
        assert!(!s.rescans());
        s.replay = true;
        assert!(s.rescans());
        assert!(ServerSide::new(true).rescans());
    }

    #[test]
    fn a_server_scan_is_taken_once_and_only_when_its_bytes_are_out() {
        let mut s = ServerSide::new(true);
        s.ready = 3;
        assert!(!s.begin_scan());
        assert!(s.again, "still asked for");
        s.sent(3);
        assert!(s.begin_scan());
        assert!(!s.again && !s.begin_scan());
        s.received();
        s.stop = Some(Outcome::Idle);
        assert!(!s.begin_scan(), "stopped");
        assert!(!ServerSide::new(false).begin_scan());
    }

    #[test]
    fn a_scan_sets_the_server_side_and_keeps_what_it_saw() {
        let mut s = ServerSide::new(false);
        s.scanned(ServerScan {
            ready: 10,
            again: true,
            fatal: true,
            replay: true,
            ..Default::default()
        });
        assert_eq!(
            (s.ready, s.again, s.fatal, s.replay),
            (10, true, true, true)
        );
        assert_eq!(s.stop, None);
        s.sent(10);
        s.scanned(ServerScan {
            ready: 5,
            stop: Some(Outcome::Idle),
            ..Default::default()
        });
        assert_eq!((s.ready, s.again), (5, false));
        assert!(s.fatal && s.replay, "seen once, kept");
        assert_eq!(s.stop, Some(Outcome::Idle));
    }

    #[test]
    fn the_server_side_finishes_once_its_bytes_are_out() {
        let mut fout = BytesMut::new();
        let mut s = ServerSide::new(false);
        assert!(!s.finished(&fout), "not stopped");
        s.stop = Some(Outcome::Idle);
        assert!(s.finished(&fout) && s.releasable());
        s.ready = 1;
        assert!(!s.finished(&fout));
        s.ready = 0;
        fout.extend_from_slice(b"1");
        assert!(!s.finished(&fout), "an answer of pgcorral's waits");
        s.stop = Some(Outcome::TransactionRefused);
        assert!(s.releasable());
        for o in [
            Outcome::ServerGone { notified: true },
            Outcome::ClientGone { eof: false },
            Outcome::TimedOut(Phase::Query),
        ] {
            s.stop = Some(o);
            assert!(!s.releasable());
        }
    }

    #[test]
    fn the_answered_check_needs_nothing_pending_nothing_waiting_and_no_stop() {
        let mut s = ServerSide::new(false);
        assert!(s.answered(&link(0, TxStatus::Idle)));
        assert!(!s.answered(&link(2, TxStatus::Idle)));
        s.ready = 1;
        assert!(!s.answered(&link(0, TxStatus::Idle)));
        s.ready = 0;
        s.stop = Some(Outcome::Idle);
        assert!(!s.answered(&link(0, TxStatus::Idle)));
    }

    #[test]
    fn a_replay_waits_until_nothing_of_the_clients_is_part_way_out() {
        let mut s = ServerSide::new(false);
        assert!(!s.take_replay(&client(0, false, false), 0), "none due");
        s.replay = true;
        assert!(!s.take_replay(&client(2, false, false), 0));
        assert!(!s.take_replay(&client(0, false, false), 7));
        assert!(s.replay, "still due");
        assert!(s.take_replay(&client(0, false, false), 0));
        assert!(!s.replay && !s.take_replay(&client(0, false, false), 0));
    }

    #[test]
    fn the_server_is_read_only_when_nothing_of_its_own_waits() {
        let mut s = ServerSide::new(false);
        assert!(s.plan_read() && s.reading);
        s.received();
        assert!(!s.plan_read() && !s.reading, "a scan first");
        s.again = false;
        s.ready = 1;
        assert!(!s.plan_read(), "its bytes first");
        s.ready = 0;
        s.stop = Some(Outcome::Idle);
        assert!(!s.plan_read(), "stopped");
    }

    #[test]
    fn without_timeouts_no_timer_is_made() {
        let off = Timeouts::default();
        let mut t = PhaseTimer::new(&off);
        for st in [
            link(1, TxStatus::Idle),
            link(0, TxStatus::InTransaction),
            link(0, TxStatus::Idle),
        ] {
            t.follow(&st, &off);
            assert!(t.clock.is_none() && t.phase.is_none() && !t.armed);
        }
        let mut cx = Context::from_waker(Waker::noop());
        assert!(!t.expired(&mut cx));
    }

    #[tokio::test]
    async fn the_timer_is_set_for_each_phase_and_reset_in_place() {
        let timeouts = Timeouts {
            query: Some(Duration::ZERO),
            idle_in_transaction: None,
            client_idle: Some(Duration::from_secs(3600)),
            transaction: None,
        };
        let mut cx = Context::from_waker(Waker::noop());
        let mut t = PhaseTimer::new(&timeouts);
        let query = link(1, TxStatus::Idle);
        t.follow(&query, &timeouts);
        assert_eq!((t.phase(), t.armed), (Phase::Query, true));
        let made: *const Clock = &**t.clock.as_ref().expect("made");
        let deadline = t.deadline().expect("made");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(t.expired(&mut cx), "query_timeout of zero");

        // The same phase leaves the timer as it is.
        t.follow(&query, &timeouts);
        assert_eq!(t.deadline().expect("kept"), deadline);

        // A phase without a timeout stops it, though it has expired.
        t.follow(&link(0, TxStatus::InTransaction), &timeouts);
        assert_eq!((t.phase(), t.armed), (Phase::IdleInTransaction, false));
        assert!(!t.expired(&mut cx));

        // The next phase with one sets the same timer again.
        t.follow(&link(0, TxStatus::Idle), &timeouts);
        assert_eq!((t.phase(), t.armed), (Phase::Idle, true));
        let again = t.clock.as_ref().expect("kept");
        assert!(
            std::ptr::eq(made, &**again),
            "reset in place, not made anew"
        );
        assert!(t.deadline().expect("kept") > deadline + Duration::from_secs(3000));
        assert!(!t.expired(&mut cx));
    }

    #[tokio::test]
    async fn transaction_timeout_runs_from_the_first_request_to_idle() {
        let timeouts = Timeouts {
            query: Some(Duration::from_secs(3600)),
            idle_in_transaction: Some(Duration::from_secs(3600)),
            client_idle: None,
            transaction: Some(Duration::from_millis(50)),
        };
        let mut cx = Context::from_waker(Waker::noop());
        let mut t = PhaseTimer::new(&timeouts);
        t.follow(&link(1, TxStatus::Idle), &timeouts);
        let deadline = t.deadline().expect("made");
        assert_eq!(
            (t.reason(), t.armed),
            (Phase::Transaction, true),
            "sooner than the query's"
        );
        // Idle in the transaction: the transaction's deadline stays the same.
        t.follow(&link(0, TxStatus::InTransaction), &timeouts);
        assert_eq!(t.deadline().expect("kept"), deadline);
        assert_eq!(t.reason(), Phase::Transaction);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(t.expired(&mut cx));

        // Idle outside a transaction: no transaction is timed (client_idle is off).
        t.follow(&link(0, TxStatus::Idle), &timeouts);
        assert!(!t.armed && !t.expired(&mut cx));
        // The next request starts a new transaction's clock.
        t.follow(&link(1, TxStatus::Idle), &timeouts);
        assert!(t.armed && t.deadline().expect("kept") > deadline);
        assert!(!t.expired(&mut cx));

        // A phase's own timeout sooner than the transaction's is the one that runs.
        let short = Timeouts {
            query: Some(Duration::from_millis(1)),
            ..timeouts
        };
        let mut t = PhaseTimer::new(&short);
        t.follow(&link(1, TxStatus::Idle), &short);
        assert_eq!(t.reason(), Phase::Query);
    }

    #[test]
    fn writes_to_the_client_wait_for_the_next_event_unless_it_streams() {
        let mut f = ClientFlush::default();
        assert!(!f.take_held());
        assert!(!f.wrote(), "held");
        assert!(f.take_held());
        assert!(!f.take_held(), "sent once");

        let mut buf = BytesMut::with_capacity(64);
        buf.resize(buf.capacity(), 0);
        f.client_read(&buf);
        assert!(f.streaming());
        assert!(f.wrote(), "out at once");
        assert!(!f.take_held());

        buf.truncate(10);
        f.client_read(&buf);
        assert!(!f.streaming());
        assert!(!f.wrote());
        assert!(f.take_held());
    }
}
