//! Retrying a batch whose statement went stale: when a schema change makes PostgreSQL answer
//! "cached plan must not change result type", and nothing of the batch had run yet outside a
//! transaction, pgcorral hides that error, prepares the statement afresh and sends the client's
//! batch again, so the client sees only the retried answer.
//!
//! The client's bytes are kept from the batch's first Bind (or a single SQL `EXECUTE`) through
//! its Sync, when the batch began with nothing outstanding and no transaction open. The retry
//! happens only if that batch is the last one sent when its error arrives (anything else the
//! client sent in the meantime would otherwise run before it) and if the batch describes its
//! portal: the statement parsed again returns rows of the table's new shape, which a client
//! decoding by a row description it got earlier would misread. Otherwise the error is shown as
//! it was (drivers such as asyncpg then prepare again themselves).

use bytes::{Bytes, BytesMut};
use pgwire::backend::TxStatus;
use pgwire::frontend as fe;
use pgwire::Header;

use crate::link_state::LinkState;

/// Batches larger than this are not kept (no retry for them).
const MAX_KEPT: usize = 16 * 1024;

#[derive(Debug, Default)]
enum State {
    /// Nothing kept.
    #[default]
    Off,
    /// The batch began outside a transaction and has run nothing yet: its first Bind starts the
    /// copy.
    Armed,
    /// Copying the batch, up to its Sync.
    Copying,
    /// The whole batch is kept.
    Kept,
    /// Its stale-plan error was hidden (kept here in case the retry cannot happen).
    Hidden(Bytes),
    /// The batch is due to be sent again.
    Due,
}

/// One server link's kept batch.
#[derive(Debug, Default)]
pub struct Replay {
    state: State,
    batch: BytesMut,
    /// The next batch is a retry.
    retried: bool,
    /// The current batch is a retry: it is not retried again.
    in_retry: bool,
    /// The kept batch tells the client the result's shape again (a Describe of a portal, or it
    /// is an SQL `EXECUTE`, whose answer has a RowDescription): only then is a retry safe, as
    /// the retried statement's rows have the table's new shape.
    describes: bool,
}

/// What to do with a ReadyForQuery.
#[derive(Debug, PartialEq, Eq)]
pub enum AtReady {
    Forward,
    /// Hide it; the kept batch goes to the server again (see [`Replay::take_due`]).
    Retry,
    /// Forward it after this error, which was hidden for a retry that cannot happen.
    ShowError(Bytes),
}

impl Replay {
    pub fn clear(&mut self) {
        self.state = State::Off;
        self.batch.clear();
        self.retried = false;
        self.in_retry = false;
        self.describes = false;
    }

    /// Whether nothing is kept, hidden, due or being retried: a client message that is no part
    /// of a batch to keep (a simple Query pgcorral does not rewrite) would change nothing here,
    /// so [`Replay::client_message`] may be skipped for it, and server messages need no look.
    #[inline]
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Off) && !self.retried && !self.in_retry
    }

    /// Whether the batch being sent is a retry (or its first message is about to be).
    pub fn in_retry(&self) -> bool {
        self.in_retry || self.retried
    }

    /// A client message (`msg` starts at its header `h`, possibly not wholly buffered) is about
    /// to go to the server; `st` is the link before it. `rewritten`: pgcorral handles it (for
    /// a Query: SQL PREPARE, EXECUTE or DEALLOCATE).
    pub fn client_message(&mut self, h: Header, msg: &[u8], st: &LinkState, rewritten: bool) {
        if st.pending == 0 && !st.unsynced && !matches!(self.state, State::Hidden(_) | State::Due) {
            // A batch begins.
            self.batch.clear();
            self.describes = false;
            self.in_retry = std::mem::take(&mut self.retried);
            self.state = if st.tx == TxStatus::Idle && !self.in_retry {
                State::Armed
            } else {
                State::Off
            };
        }
        let whole = msg.len() >= h.total_len();
        match self.state {
            State::Armed => match h.tag {
                fe::BIND if whole => self.keep(&msg[..h.total_len()], false),
                fe::QUERY if whole && rewritten => self.keep(&msg[..h.total_len()], true),
                fe::PARSE | fe::DESCRIBE | fe::CLOSE | fe::FLUSH => {}
                _ => self.state = State::Off,
            },
            State::Copying => {
                if !whole || self.batch.len() + h.total_len() > MAX_KEPT {
                    self.state = State::Off;
                } else {
                    self.keep(&msg[..h.total_len()], h.tag == fe::SYNC);
                }
            }
            State::Kept if h.tag == fe::FLUSH => {}
            State::Kept => self.state = State::Off,
            _ => {}
        }
    }

    fn keep(&mut self, msg: &[u8], last: bool) {
        self.describes |= match msg[0] {
            fe::QUERY => true,
            fe::DESCRIBE => msg.get(pgwire::header::HEADER_LEN) == Some(&b'P'),
            _ => false,
        };
        self.batch.extend_from_slice(msg);
        self.state = if last { State::Kept } else { State::Copying };
    }

    /// The server reported progress on the batch (a Bind completed, rows or a command tag):
    /// part of it may have run, so it is not retried.
    pub fn progress(&mut self) {
        if matches!(self.state, State::Armed | State::Copying | State::Kept) {
            self.state = State::Off;
        }
    }

    /// Whether an ErrorResponse saying "cached plan must not change result type", answering a
    /// client's Bind or Query (`client_request`), is to be hidden and the batch retried; `st`
    /// is the link as it stands. Changes nothing: see [`Replay::hide_error`].
    pub fn retries(&self, st: &LinkState, client_request: bool) -> bool {
        matches!(self.state, State::Kept)
            && self.describes
            && client_request
            && st.pending == 1
            && !st.unsynced
            && !st.broken
    }

    /// Hides that error (`msg`, the whole ErrorResponse) until its ReadyForQuery.
    pub fn hide_error(&mut self, msg: &[u8]) {
        self.state = State::Hidden(Bytes::copy_from_slice(msg));
    }

    #[cfg(test)]
    fn stale_plan(&mut self, msg: &[u8], st: &LinkState, client_request: bool) -> bool {
        let retry = self.retries(st, client_request);
        if retry {
            self.hide_error(msg);
        }
        retry
    }

    /// Whether a ReadyForQuery would be hidden (without changing anything).
    pub fn hides_ready(&self, st_after: &LinkState) -> bool {
        matches!(self.state, State::Hidden(_)) && st_after.pending == 0 && !st_after.unsynced
    }

    /// Whether the answer to a ReadyForQuery needs more than forwarding.
    pub fn at_ready_pending(&self) -> bool {
        matches!(self.state, State::Hidden(_))
    }

    /// A ReadyForQuery arrived; `st_after` is the link once it is counted.
    pub fn at_ready(&mut self, st_after: &LinkState) -> AtReady {
        let retry = self.hides_ready(st_after);
        match std::mem::take(&mut self.state) {
            State::Hidden(_) if retry => {
                self.state = State::Due;
                AtReady::Retry
            }
            State::Hidden(e) => AtReady::ShowError(e),
            _ => AtReady::Forward,
        }
    }

    /// The batch to send again, once it is due; the retry itself is not retried.
    pub fn take_due(&mut self) -> Option<BytesMut> {
        if !matches!(self.state, State::Due) {
            return None;
        }
        self.state = State::Off;
        self.retried = true;
        Some(std::mem::take(&mut self.batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn feed(r: &mut Replay, st: &mut LinkState, m: &[u8]) {
        let h = Header::parse(m, 1 << 20).unwrap().unwrap();
        r.client_message(h, m, st, false);
        match m[0] {
            fe::SYNC => {
                st.pending += 1;
                st.unsynced = false;
            }
            fe::FLUSH => {}
            _ => st.unsynced = true,
        }
    }

    fn batch() -> Vec<Vec<u8>> {
        vec![
            msg(fe::BIND, b"\0s1\0\0\0\0\0\0\0"),
            msg(fe::DESCRIBE, b"P\0"),
            msg(fe::EXECUTE, b"\0\0\0\0\0"),
            msg(fe::SYNC, b""),
        ]
    }

    #[test]
    fn keeps_a_batch_from_its_bind_and_retries_it_once() {
        let mut r = Replay::default();
        let mut st = LinkState::default();
        feed(&mut r, &mut st, &msg(fe::PARSE, b"s1\0select 1\0\0\0"));
        for m in batch() {
            feed(&mut r, &mut st, &m);
        }
        feed(&mut r, &mut st, &msg(fe::FLUSH, b""));
        assert!(r.stale_plan(b"E...", &st, true));
        st.pending = 0;
        assert_eq!(r.at_ready(&st), AtReady::Retry);
        let again = r.take_due().expect("due");
        assert_eq!(&again[..], batch().concat().as_slice());
        // The retry is sent like a new batch, and is not retried.
        for m in batch() {
            feed(&mut r, &mut st, &m);
        }
        assert!(!r.stale_plan(b"E...", &st, true));
    }

    #[test]
    fn no_retry_inside_a_transaction_or_after_progress_or_when_more_was_sent() {
        let mut r = Replay::default();
        let mut st = LinkState {
            tx: TxStatus::InTransaction,
            ..Default::default()
        };
        for m in batch() {
            feed(&mut r, &mut st, &m);
        }
        assert!(!r.stale_plan(b"E", &st, true), "in a transaction");

        let mut st = LinkState::default();
        for m in batch() {
            feed(&mut r, &mut st, &m);
        }
        r.progress();
        assert!(!r.stale_plan(b"E", &st, true), "a Bind completed");

        let mut st = LinkState::default();
        for m in batch().iter().chain(&batch()) {
            feed(&mut r, &mut st, m);
        }
        assert!(!r.stale_plan(b"E", &st, true), "pipelined");

        // Hidden, then the client sent more before ReadyForQuery: the error is shown.
        let mut st = LinkState::default();
        for m in batch() {
            feed(&mut r, &mut st, &m);
        }
        assert!(r.stale_plan(b"E!", &st, true));
        feed(&mut r, &mut st, &msg(fe::BIND, b"\0s1\0\0\0\0\0\0\0"));
        st.pending = 0;
        assert_eq!(
            r.at_ready(&st),
            AtReady::ShowError(Bytes::from_static(b"E!"))
        );
        assert!(r.take_due().is_none());
    }

    #[test]
    fn a_batch_that_does_not_describe_its_portal_is_not_retried() {
        let mut r = Replay::default();
        let mut st = LinkState::default();
        for m in batch().iter().filter(|m| m[0] != fe::DESCRIBE) {
            feed(&mut r, &mut st, m);
        }
        assert!(!r.stale_plan(b"E", &st, true));
    }

    #[test]
    fn an_execute_before_the_bind_or_a_big_batch_disarms() {
        let mut r = Replay::default();
        let mut st = LinkState::default();
        feed(&mut r, &mut st, &msg(fe::EXECUTE, b"\0\0\0\0\0"));
        for m in batch() {
            feed(&mut r, &mut st, &m);
        }
        assert!(!r.stale_plan(b"E", &st, true));

        let mut st = LinkState::default();
        let big = msg(fe::BIND, &vec![0u8; MAX_KEPT]);
        feed(&mut r, &mut st, &msg(fe::BIND, b"\0s1\0\0\0\0\0\0\0"));
        feed(&mut r, &mut st, &big);
        feed(&mut r, &mut st, &msg(fe::SYNC, b""));
        assert!(!r.stale_plan(b"E", &st, true));
    }
}
