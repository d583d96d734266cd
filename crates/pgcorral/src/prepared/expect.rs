//! What a server owes for the messages sent to it, in the order it will answer: each client
//! message (and each one pgcorral slipped in) has an entry saying whether its answer reaches the
//! client, and the answers pgcorral gives itself (a ParseComplete for a statement already
//! prepared, a CloseComplete, ...) wait in the same queue for their turn. After an error in an
//! extended-protocol batch PostgreSQL skips everything up to Sync, and so does the queue.
//!
//! Most simple Queries need none of that: one that is no statement command pgcorral handles,
//! sent when nothing else is queued, is only counted (see [`Expected::queue_counted`]), and so
//! is a whole extended batch of the unnamed statement (see `Link::counted_batch`). Counted
//! entries come before every queued entry, and each one's answers, whatever they are, end at
//! its ReadyForQuery.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use pgwire::backend as be;

use super::replay::Replay;
use super::{ClientStatements, Registry, ServerStatements};

/// Whether an ErrorResponse body says a prepared statement's result type changed under it.
pub fn stale_plan(body: &[u8]) -> bool {
    be::ErrorFields::parse(body)
        .is_some_and(|f| f.code == "0A000" && f.message.starts_with("cached plan must not"))
}

/// An answer pgcorral gives the client itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fake {
    ParseComplete,
    CloseComplete,
    /// CommandComplete with this tag.
    Command(&'static str),
    /// An ErrorResponse (whole message).
    Error(Bytes),
}

impl Fake {
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Fake::ParseComplete => pgwire::encode::empty(out, be::PARSE_COMPLETE),
            Fake::CloseComplete => pgwire::encode::empty(out, be::CLOSE_COMPLETE),
            Fake::Command(tag) => pgwire::encode::command_complete(out, tag),
            Fake::Error(msg) => out.extend_from_slice(msg),
        }
    }
}

/// A message the server will answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    Parse,
    Bind,
    DescribeStatement,
    DescribePortal,
    Execute,
    Close,
    Sync,
    /// Query or FunctionCall: everything up to ReadyForQuery.
    Query,
    /// A client's SQL `PREPARE`, sent with a Describe and Sync of pgcorral's behind it (see
    /// [`Msg::Resolve`]): its answers but its ReadyForQuery reach the client, and that Sync's
    /// ReadyForQuery (the same transaction status) ends the client's Query, so that the
    /// exchange ends with an answer the client sees.
    QueryReadyLater,
    /// pgcorral's Describe of a statement it just prepared, whose description must match the
    /// one clients were given (see [`super::Statement::shape`]).
    Verify,
    /// pgcorral's Describe, in a batch of its own, of a statement a client's SQL `PREPARE`
    /// just made, to learn what it resolved (see [`super::Registry::settle`]). Hidden, its
    /// error too: it fails only when the `PREPARE` did, whose error the client has.
    Resolve,
}

/// What to undo when a Parse fails or is skipped: the statement is not on the server, and the
/// client's name for it (when the Parse was the client's own) does not exist either.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Undo {
    /// The statement the server does not have after all (none for a message that made none).
    pub stmt: Option<u64>,
    /// The client's protocol-level name for it.
    pub client_name: Option<Box<[u8]>>,
    /// The client's SQL-level name for it.
    pub client_sql: Option<String>,
    /// How the server's answers become PostgreSQL's answers to the client's own message.
    pub reword: Reword,
}

/// How the answers to a message pgcorral sent in place of the client's become what
/// PostgreSQL would have answered the client's own (see [`Expected::reworded`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reword {
    /// The server found pgcorral's name taken (42P05): the client's name is, in the error.
    pub taken: Option<(String, String)>,
    /// pgcorral's text has this many more characters than the client's before the part they
    /// share: an error's position (field `P`) is moved back by as many.
    pub shift: i64,
    /// The Sync stands for the client's `DEALLOCATE` (its name; `None`: `ALL`), which
    /// PostgreSQL refuses in an aborted transaction: the ReadyForQuery tells which answer is
    /// due, and only a statement deallocated is forgotten.
    pub deallocate: Option<Option<String>>,
    /// The first CommandComplete is pgcorral's, not the client's.
    pub hide_completion: bool,
    /// The client's `DISCARD ALL`: once it completes (PostgreSQL refuses it in a transaction
    /// block), the client's statements and the server's are gone.
    pub discard: bool,
    /// pgcorral's statement that fails in place of the client's: its error (but 25P02, which
    /// PostgreSQL would have given) is replaced by this one (a whole ErrorResponse).
    pub instead: Option<Bytes>,
}

impl Reword {
    fn is_empty(&self) -> bool {
        self.taken.is_none()
            && self.shift == 0
            && self.deallocate.is_none()
            && !self.hide_completion
            && !self.discard
            && self.instead.is_none()
    }
}

/// PostgreSQL's answer to a statement other than COMMIT/ROLLBACK in an aborted transaction.
const ABORTED: &str =
    "current transaction is aborted, commands ignored until end of transaction block";

/// What [`Expected::reworded`] says of a server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reworded {
    /// Nothing: it goes on as usual.
    No,
    /// pgcorral's answers go to the client before it.
    Before,
    /// pgcorral's answer goes to the client instead of it.
    Instead,
}

impl Undo {
    fn apply(&self, server: &mut ServerStatements, client: &mut ClientStatements) {
        if let Some(id) = self.stmt {
            server.remove(id);
        }
        if let Some(name) = &self.client_name {
            client.remove_named(name);
        }
        if let Some(name) = &self.client_sql {
            client.remove_sql(name);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// `forward`: the answer reaches the client (false for messages pgcorral slipped in).
    Msg {
        msg: Msg,
        forward: bool,
        undo: Option<Box<Undo>>,
        /// The statement (id) a Bind, Describe, SQL EXECUTE or Verify is about.
        stmt: Option<u64>,
    },
    Fake(Fake),
}

/// The queue of one server link. Empty whenever the link is idle.
#[derive(Debug, Default)]
pub struct Expected {
    q: VecDeque<Expect>,
    /// Simple Queries of the client's counted instead of queued: they were sent before
    /// everything in `q`, so they are answered first, each up to its ReadyForQuery.
    counted: u32,
    /// The server reported an error in an extended batch whose Sync has not been sent yet:
    /// it ignores everything until that Sync.
    pub skipping: bool,
    /// pgcorral answered a message of the client's batch with an error of its own: the rest of
    /// the batch, up to Sync, is dropped (as PostgreSQL would skip it).
    pub dropping: bool,
    /// The batch kept for a retry after a stale plan.
    pub replay: Replay,
    /// A [`Msg::Verify`] is outstanding: the client's message that needs the statement waits.
    pub verifying: bool,
    /// The statement whose description did not match: the client's message that waited gets
    /// "cached plan must not change result type".
    pub verify_failed: Option<u64>,
    /// The outstanding (or failed) Verify was sent for a batch `retry_stale_statements` would
    /// send again: a changed description moves the batch to a fresh statement instead.
    pub verify_renews: bool,
}

/// What the server-side scan touches when answers are matched.
pub struct Answers<'a> {
    pub registry: &'a Registry,
    pub expect: &'a mut Expected,
    pub server: &'a mut ServerStatements,
    pub client: &'a mut ClientStatements,
    /// Answers pgcorral gives, to write to the client before the server's next bytes.
    pub out: &'a mut BytesMut,
}

/// What to do with one server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Forward,
    Suppress,
}

impl Expected {
    pub fn is_empty(&self) -> bool {
        self.q.is_empty() && self.counted == 0
    }

    pub fn clear(&mut self) {
        self.q.clear();
        self.counted = 0;
        self.skipping = false;
        self.dropping = false;
        self.replay.clear();
        self.verifying = false;
        self.verify_failed = None;
        self.verify_renews = false;
    }

    /// Whether the head entry is a client's own Bind or Query (its answer is the client's).
    pub fn head_is_clients_bind_or_query(&self) -> bool {
        self.counted > 0
            || matches!(
                self.q.front(),
                Some(Expect::Msg {
                    msg: Msg::Bind | Msg::Query,
                    forward: true,
                    ..
                })
            )
    }

    /// Whether a client's simple Query that is none of the commands pgcorral handles can be
    /// counted ([`Expected::queue_counted`]) rather than queued: nothing is queued (so it goes
    /// after any counted ones), the server is not skipping to a Sync, pgcorral is not dropping
    /// a batch, and no batch is kept or being retried (see [`Replay::is_idle`]).
    #[inline]
    pub fn counts_query(&self) -> bool {
        self.q.is_empty() && !self.skipping && !self.dropping && self.replay.is_idle()
    }

    /// Counts a client's simple Query, or the Sync of an extended batch that is only counted
    /// (after [`Expected::counts_query`]): its answers, whatever they are, reach the client,
    /// and its ReadyForQuery ends them.
    #[inline]
    pub fn queue_counted(&mut self) {
        debug_assert!(self.counts_query());
        self.counted += 1;
    }

    /// Whether the server owes answers to counted Queries only: its messages need nothing but
    /// forwarding, and each ReadyForQuery ends one ([`Expected::counted_ready`]).
    #[inline]
    pub fn only_counted(&self) -> bool {
        self.counted > 0 && self.q.is_empty() && self.replay.is_idle()
    }

    /// The ReadyForQuery of the first counted Query arrived (after [`Expected::only_counted`]).
    #[inline]
    pub fn counted_ready(&mut self) {
        self.counted -= 1;
    }

    /// A message sent to the server, answered to the client.
    #[inline]
    pub fn push(&mut self, msg: Msg) {
        self.push_entry(msg, true, None);
    }

    pub fn push_entry(&mut self, msg: Msg, forward: bool, undo: Option<Box<Undo>>) {
        self.push_full(msg, forward, undo, None);
    }

    /// A client's message about statement `stmt` (if any), answered to the client as
    /// `reword` says.
    pub fn push_reworded(&mut self, msg: Msg, stmt: Option<u64>, reword: Reword) {
        let undo = Undo {
            reword,
            ..Undo::default()
        };
        self.push_full(msg, true, Some(Box::new(undo)), stmt);
    }

    /// A client's message about statement `stmt`, answered to the client.
    pub fn push_about(&mut self, msg: Msg, stmt: u64) {
        self.push_full(msg, true, None, Some(stmt));
    }

    /// pgcorral's Describe of statement `stmt` after a Parse of it, whose answer (hidden)
    /// tells what the Parse resolved (see `resolve`).
    pub fn push_hidden_describe(&mut self, stmt: u64) {
        self.push_full(Msg::DescribeStatement, false, None, Some(stmt));
    }

    /// pgcorral's Describe of statement `stmt` after a client's SQL `PREPARE` (hidden, its
    /// error too: see [`Msg::Resolve`]).
    pub fn push_resolve(&mut self, stmt: u64) {
        self.push_full(Msg::Resolve, false, None, Some(stmt));
    }

    /// pgcorral's Describe of statement `stmt`, to check its description (hidden).
    /// `renews`: see [`Expected::verify_renews`].
    pub fn push_verify(&mut self, stmt: u64, renews: bool) {
        self.push_full(Msg::Verify, false, None, Some(stmt));
        self.verifying = true;
        self.verify_renews = renews;
    }

    fn push_full(&mut self, msg: Msg, forward: bool, undo: Option<Box<Undo>>, stmt: Option<u64>) {
        if msg == Msg::Sync {
            self.skipping = false;
        } else if self.skipping {
            // The server ignores it: nothing will come back for it.
            return;
        }
        self.q.push_back(Expect::Msg {
            msg,
            forward,
            undo,
            stmt,
        });
    }

    pub fn push_fake(&mut self, f: Fake) {
        if !self.skipping {
            self.q.push_back(Expect::Fake(f));
        }
    }

    /// The answer pgcorral owes now, if it comes before anything more from the server.
    pub fn next_fake(&mut self) -> Option<Fake> {
        if self.counted > 0 {
            return None;
        }
        match self.q.front() {
            Some(Expect::Fake(_)) => match self.q.pop_front() {
                Some(Expect::Fake(f)) => Some(f),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether the answer to the head message is hidden from the client (checked before
    /// [`Expected::answer`], which changes the queue).
    pub fn hides(&self, tag: u8) -> bool {
        if tag == be::READY_FOR_QUERY
            && self.counted == 0
            && matches!(
                self.q.front(),
                Some(Expect::Msg {
                    msg: Msg::QueryReadyLater,
                    ..
                })
            )
        {
            return true;
        }
        if tag == be::ERROR_RESPONSE {
            return self.counted == 0
                && matches!(
                    self.q.front(),
                    Some(Expect::Msg {
                        msg: Msg::Resolve,
                        ..
                    })
                );
        }
        !matches!(
            tag,
            be::NOTICE_RESPONSE
                | be::NOTIFICATION_RESPONSE
                | be::PARAMETER_STATUS
                | be::ERROR_RESPONSE
        ) && self.counted == 0
            && matches!(self.q.front(), Some(Expect::Msg { forward: false, .. }))
    }

    /// The head entry's [`Reword`], when it has one.
    fn reword_of_head(&self) -> Option<(Msg, &Reword)> {
        if self.counted > 0 {
            return None;
        }
        match self.q.front() {
            Some(Expect::Msg {
                msg, undo: Some(u), ..
            }) if !u.reword.is_empty() => Some((*msg, &u.reword)),
            _ => None,
        }
    }

    /// Whether the server message (`tag`, its whole `body`) gets answers of pgcorral's before
    /// it or instead of it (see [`Reword`]); changes nothing: [`Expected::reword`] does.
    pub fn reworded(&self, tag: u8, body: &[u8]) -> Reworded {
        let Some((msg, r)) = self.reword_of_head() else {
            return Reworded::No;
        };
        match tag {
            be::READY_FOR_QUERY if msg == Msg::Sync && r.deallocate.is_some() => Reworded::Before,
            be::COMMAND_COMPLETE if r.discard => Reworded::Before,
            be::COMMAND_COMPLETE if r.hide_completion => Reworded::Instead,
            be::ERROR_RESPONSE => {
                let code = be::ErrorFields::parse(body)
                    .map(|f| f.code)
                    .unwrap_or_default();
                let taken = r.taken.is_some() && code == "42P05";
                let instead = r.instead.is_some() && code != "25P02";
                if taken || instead || (r.shift != 0 && be::error_field(body, b'P').is_some()) {
                    Reworded::Instead
                } else {
                    Reworded::No
                }
            }
            _ => Reworded::No,
        }
    }

    /// pgcorral's answer for the server message of which [`Expected::reworded`] said `Before`
    /// or `Instead`, to go to the client at once (then the message is answered as usual).
    pub fn reword(
        &mut self,
        tag: u8,
        body: &[u8],
        client: &mut ClientStatements,
        server: &mut ServerStatements,
    ) -> Option<Fake> {
        let Some(Expect::Msg { undo: Some(u), .. }) = self.q.front_mut() else {
            return None;
        };
        let r = &mut u.reword;
        if tag == be::COMMAND_COMPLETE && r.discard {
            r.discard = false;
            client.clear();
            server.clear();
            return None;
        }
        if tag == be::COMMAND_COMPLETE {
            r.hide_completion = false;
            return None;
        }
        let fake = if tag == be::READY_FOR_QUERY {
            let target = r.deallocate.take()?;
            if body.first() == Some(&b'E') {
                let mut e = BytesMut::new();
                pgwire::encode::error_response(&mut e, "ERROR", "25P02", ABORTED);
                Fake::Error(e.freeze())
            } else {
                match target {
                    Some(name) => {
                        client.remove_sql(&name);
                        Fake::Command("DEALLOCATE")
                    }
                    None => {
                        client.clear();
                        Fake::Command("DEALLOCATE ALL")
                    }
                }
            }
        } else if let Some(e) = r.instead.take() {
            Fake::Error(e)
        } else {
            let (taken, shift) = (r.taken.clone(), r.shift);
            let is_taken = be::ErrorFields::parse(body).is_some_and(|f| f.code == "42P05");
            let mut e = BytesMut::new();
            pgwire::encode::error_with_fields(&mut e, body, |kind, value| match kind {
                b'M' if is_taken => taken.as_ref().map(|(ours, theirs)| {
                    String::from_utf8_lossy(value)
                        .replacen(ours.as_str(), theirs, 1)
                        .into_bytes()
                }),
                b'P' => std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<i64>().ok())
                    .map(|p| (p - shift).max(1).to_string().into_bytes()),
                _ => None,
            });
            Fake::Error(e.freeze())
        };
        Some(fake)
    }

    /// Whether an answer pgcorral owes is next.
    pub fn fake_next(&self) -> bool {
        self.counted == 0 && matches!(self.q.front(), Some(Expect::Fake(_)))
    }

    /// Drops `n` Sync entries right after the head (an Execute whose COPY IN makes PostgreSQL
    /// ignore them).
    ///
    /// With counted entries owed, the Execute is in the counted head, an extended batch (see
    /// `Link::counted_batch`): the server answers the COPY only when nothing sent before that
    /// Execute is outstanding, and a counted Query holds no Execute. The batch's own Sync is
    /// the first ignored: its answers run on to the next ReadyForQuery, that of a Sync sent
    /// after the COPY, so it is uncounted, and the next ignored Syncs are the first queued
    /// entries (a batch after it would have ended the run of Syncs that PostgreSQL ignores).
    pub fn drop_syncs_after_head(&mut self, mut n: u32) {
        let after = if self.counted == 0 {
            1
        } else if n == 0 {
            return;
        } else {
            self.counted -= 1;
            n -= 1;
            if self.counted > 0 {
                return;
            }
            0
        };
        for _ in 0..n {
            if matches!(self.q.get(after), Some(Expect::Msg { msg: Msg::Sync, .. })) {
                self.q.remove(after);
            }
        }
    }

    /// Matches one server message (by tag; `body` is its body, empty for rows and COPY data)
    /// to the queue; called with the answers pgcorral owes already taken (see
    /// [`Expected::next_fake`]).
    pub fn answer(
        &mut self,
        tag: u8,
        body: &[u8],
        server: &mut ServerStatements,
        client: &mut ClientStatements,
        registry: &Registry,
    ) -> Verdict {
        let verdict = self.answer_inner(tag, body, server, client, registry);
        if self.verifying && tag == be::ERROR_RESPONSE {
            // The server skipped the Describe: nothing left to wait for.
            self.verifying = self.q.iter().any(|e| {
                matches!(
                    e,
                    Expect::Msg {
                        msg: Msg::Verify,
                        ..
                    }
                )
            });
        }
        verdict
    }

    fn answer_inner(
        &mut self,
        tag: u8,
        body: &[u8],
        server: &mut ServerStatements,
        client: &mut ClientStatements,
        registry: &Registry,
    ) -> Verdict {
        // Asynchronous messages belong to no request.
        if matches!(tag, be::NOTICE_RESPONSE | be::NOTIFICATION_RESPONSE)
            || tag == be::PARAMETER_STATUS
        {
            return Verdict::Forward;
        }
        if self.counted > 0 {
            // A counted Query's answers are the client's, up to its ReadyForQuery.
            if tag == be::READY_FOR_QUERY {
                self.counted -= 1;
            }
            return Verdict::Forward;
        }
        let Some(Expect::Msg {
            msg,
            forward,
            undo,
            stmt,
        }) = self.q.front_mut()
        else {
            return Verdict::Forward;
        };
        let (msg, forward, stmt) = (*msg, *forward, *stmt);
        if tag == be::ERROR_RESPONSE && stale_plan(body) {
            // A table changed under the statement: it is not used again where a client was
            // given its old description.
            if let Some(id) = stmt {
                server.retire(id);
            }
        }
        if tag == be::ERROR_RESPONSE && matches!(msg, Msg::Query | Msg::QueryReadyLater | Msg::Sync)
        {
            // Part of the answer, which ReadyForQuery ends. Shown even for a query pgcorral
            // slipped in: the client must see why its own request will fail.
            if let Some(u) = undo.take() {
                u.apply(server, client);
            }
            return Verdict::Forward;
        }
        let verdict = if forward {
            Verdict::Forward
        } else {
            Verdict::Suppress
        };
        if tag == be::ERROR_RESPONSE {
            // The message failed; the server skips the rest of the batch up to Sync.
            self.pop_failed(server, client);
            while let Some(e) = self.q.front() {
                if matches!(e, Expect::Msg { msg: Msg::Sync, .. }) {
                    break;
                }
                self.pop_failed(server, client);
            }
            if self.q.is_empty() {
                self.skipping = true;
            }
            return Verdict::Forward;
        }
        if tag == be::PARAMETER_DESCRIPTION {
            if let (Some(id), Some(types)) = (stmt, super::param_types(body)) {
                if let Some(s) = server.get(id) {
                    let _ = s.params.set(types);
                }
            }
        }
        let ends = match (msg, tag) {
            (Msg::Parse, be::PARSE_COMPLETE) => true,
            (Msg::Bind, be::BIND_COMPLETE) => true,
            (Msg::Close, be::CLOSE_COMPLETE) => true,
            (Msg::DescribeStatement | Msg::Resolve, be::ROW_DESCRIPTION | be::NO_DATA) => {
                if let Some(id) = stmt {
                    resolve(id, tag, body, server, client, registry);
                }
                true
            }
            (Msg::Verify, be::ROW_DESCRIPTION | be::NO_DATA) => {
                self.verifying = false;
                let id = stmt.expect("a Verify names its statement");
                let differs = server
                    .get(id)
                    .and_then(|s| s.shape.get())
                    .is_some_and(|known| !super::same_result_type(known, tag, body));
                if differs {
                    server.retire(id);
                    self.verify_failed = Some(id);
                }
                true
            }
            (Msg::DescribePortal, be::ROW_DESCRIPTION | be::NO_DATA) => true,
            (
                Msg::Execute,
                be::COMMAND_COMPLETE | be::EMPTY_QUERY_RESPONSE | be::PORTAL_SUSPENDED,
            ) => true,
            (Msg::Sync | Msg::Query | Msg::QueryReadyLater, be::READY_FOR_QUERY) => true,
            (_, be::READY_FOR_QUERY) => {
                // Out of step (should not happen): resynchronise on the next Sync or Query.
                while let Some(Expect::Msg { msg, .. }) = self.q.front() {
                    if matches!(msg, Msg::Sync | Msg::Query | Msg::QueryReadyLater) {
                        break;
                    }
                    self.q.pop_front();
                }
                return self.answer_inner(tag, body, server, client, registry);
            }
            _ => false,
        };
        if ends {
            self.q.pop_front();
        }
        verdict
    }

    /// Removes the head entry, whose message failed or was skipped by the server.
    fn pop_failed(&mut self, server: &mut ServerStatements, client: &mut ClientStatements) {
        if let Some(Expect::Msg {
            undo: Some(undo), ..
        }) = self.q.pop_front()
        {
            undo.apply(server, client);
        }
    }
}

/// Statement `id` is described on this server (a Describe right after its Parse there, or
/// the client's own): the first time, that is what its Parse resolved, with the parameter
/// types of the ParameterDescription before it. When another client's Parse resolved the same
/// way (see [`Registry::settle`]), this client's names move to that statement, and the
/// server's copy stands for it (or is closed, the server having it already).
fn resolve(
    id: u64,
    tag: u8,
    body: &[u8],
    server: &mut ServerStatements,
    client: &mut ClientStatements,
    registry: &Registry,
) {
    let Some(s) = server.get(id).cloned() else {
        return;
    };
    if s.shape.get().is_some() || s.shape.set(super::shape_of(tag, body)).is_err() {
        return;
    }
    if let Some(same) = registry.settle(&s) {
        server.settle(&s, &same);
        client.replace(s.id, &same);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(e: &mut Expected, tags: &[u8]) -> Vec<String> {
        let mut s = ServerStatements::default();
        let mut c = ClientStatements::default();
        let mut out = Vec::new();
        for &t in tags {
            while let Some(f) = e.next_fake() {
                out.push(format!("fake {f:?}"));
            }
            let v = e.answer(t, b"", &mut s, &mut c, &Registry::default());
            out.push(format!("{} {:?}", t as char, v));
        }
        while let Some(f) = e.next_fake() {
            out.push(format!("fake {f:?}"));
        }
        out
    }

    #[test]
    fn fake_parse_complete_comes_before_the_bind_answer() {
        let mut e = Expected::default();
        e.push_fake(Fake::ParseComplete);
        e.push(Msg::Bind);
        e.push(Msg::Execute);
        e.push(Msg::Sync);
        let got = run(&mut e, b"2DDCZ");
        assert_eq!(
            got,
            [
                "fake ParseComplete",
                "2 Forward",
                "D Forward",
                "D Forward",
                "C Forward",
                "Z Forward"
            ]
        );
        assert!(e.is_empty());
    }

    #[test]
    fn injected_parse_is_hidden() {
        let mut e = Expected::default();
        e.push_entry(Msg::Parse, false, None);
        e.push(Msg::Bind);
        e.push(Msg::Sync);
        assert_eq!(
            run(&mut e, b"12Z"),
            ["1 Suppress", "2 Forward", "Z Forward"]
        );
    }

    #[test]
    fn error_skips_to_sync_with_its_fakes_and_undoes_parses() {
        let mut s = ServerStatements::default();
        let mut c = ClientStatements::default();
        let reg = super::super::Registry::default();
        let st = reg.fresh(
            super::super::Source::Parse(Bytes::from_static(b"x\0\0\0")),
            None,
        );
        s.insert(&st, 10);
        assert!(c.add_named(b"a", st.clone()));
        let mut e = Expected::default();
        e.push(Msg::Bind); // fails
        e.push_entry(
            Msg::Parse,
            true,
            Some(Box::new(Undo {
                stmt: Some(st.id),
                client_name: Some(b"a".to_vec().into()),
                ..Undo::default()
            })),
        );
        e.push_fake(Fake::CloseComplete);
        e.push(Msg::Sync);
        assert_eq!(
            e.answer(b'E', b"", &mut s, &mut c, &Registry::default()),
            Verdict::Forward
        );
        assert_eq!(e.next_fake(), None, "the fake after the error is dropped");
        assert!(!s.touch(&st), "the skipped Parse did not prepare it");
        assert!(c.named(b"a").is_none());
        assert_eq!(
            e.answer(b'Z', b"", &mut s, &mut c, &Registry::default()),
            Verdict::Forward
        );
        assert!(e.is_empty());
    }

    #[test]
    fn error_before_the_sync_is_sent_skips_what_follows() {
        let mut e = Expected::default();
        e.push(Msg::Parse);
        let mut s = ServerStatements::default();
        let mut c = ClientStatements::default();
        assert_eq!(
            e.answer(b'E', b"", &mut s, &mut c, &Registry::default()),
            Verdict::Forward
        );
        assert!(e.skipping);
        e.push(Msg::Bind);
        e.push_fake(Fake::ParseComplete);
        e.push(Msg::Sync);
        assert!(!e.skipping);
        assert_eq!(run(&mut e, b"Z"), ["Z Forward"]);
    }

    #[test]
    fn simple_query_answers_end_at_ready_for_query() {
        let mut e = Expected::default();
        e.push_entry(Msg::Query, false, None);
        e.push(Msg::Query);
        assert_eq!(
            run(&mut e, b"CZTDCZ"),
            [
                "C Suppress",
                "Z Suppress",
                "T Forward",
                "D Forward",
                "C Forward",
                "Z Forward"
            ]
        );
    }

    #[test]
    fn counted_queries_are_answered_before_what_is_queued_behind_them() {
        let mut e = Expected::default();
        assert!(e.counts_query());
        e.queue_counted();
        e.queue_counted();
        assert!(e.only_counted() && !e.is_empty());
        assert!(e.head_is_clients_bind_or_query());
        // Queued behind them: the answer pgcorral owes waits for their ReadyForQuery.
        e.push_fake(Fake::ParseComplete);
        e.push(Msg::Bind);
        e.push(Msg::Sync);
        assert!(!e.counts_query() && !e.only_counted());
        assert!(!e.fake_next() && !e.hides(b'C'));
        assert_eq!(
            run(&mut e, b"TDCZEZ2CZ"),
            [
                "T Forward",
                "D Forward",
                "C Forward",
                "Z Forward",
                "E Forward",
                "Z Forward",
                "fake ParseComplete",
                "2 Forward",
                "C Forward",
                "Z Forward"
            ]
        );
        assert!(e.is_empty() && e.counts_query());
    }

    #[test]
    fn queries_are_not_counted_while_anything_else_is_owed_or_skipped() {
        let mut e = Expected::default();
        e.push(Msg::Parse);
        assert!(!e.counts_query(), "something is queued");
        let mut e = Expected {
            skipping: true,
            ..Default::default()
        };
        assert!(!e.counts_query(), "the server skips to Sync");
        e.skipping = false;
        e.dropping = true;
        assert!(!e.counts_query(), "pgcorral drops to Sync");
        e.clear();
        e.queue_counted();
        e.clear();
        assert!(e.is_empty() && !e.only_counted());
    }

    #[test]
    fn syncs_ignored_in_copy_in_from_a_counted_batch() {
        // A counted batch whose Execute starts COPY IN, and a Sync right after it (queued):
        // PostgreSQL ignores both; the batch's answers run on to the ReadyForQuery of the Sync
        // sent after the COPY.
        let mut e = Expected::default();
        e.queue_counted();
        e.push(Msg::Sync);
        e.drop_syncs_after_head(2);
        assert!(e.is_empty());
        e.push(Msg::Sync);
        assert_eq!(run(&mut e, b"CZ"), ["C Forward", "Z Forward"]);
        assert!(e.is_empty());
        // Only its own Sync ignored, another counted batch behind it: that one's ReadyForQuery
        // ends both.
        let mut e = Expected::default();
        e.queue_counted();
        e.queue_counted();
        e.drop_syncs_after_head(1);
        assert!(e.only_counted());
        assert_eq!(run(&mut e, b"CZ"), ["C Forward", "Z Forward"]);
        assert!(e.is_empty());
        // No Sync ignored: nothing changes.
        let mut e = Expected::default();
        e.queue_counted();
        e.drop_syncs_after_head(0);
        assert_eq!(run(&mut e, b"Z"), ["Z Forward"]);
        assert!(e.is_empty());
    }

    /// Two clients' Parses of one text, each followed by pgcorral's hidden Describe: the
    /// second resolves as the first did, so its name moves to the first's statement, and the
    /// server's copy is closed before the next prepare; a Parse that resolved other parameter
    /// types (the table was made again) keeps a statement of its own.
    #[test]
    fn parses_that_resolved_alike_are_settled_onto_one_statement() {
        let reg = Registry::default();
        let src = || super::super::Source::Parse(Bytes::from_static(b"x\0\0\0"));
        let mut s = ServerStatements::default();
        let parse = |s: &mut ServerStatements, c: &mut ClientStatements, name: &[u8], oid: u8| {
            let st = reg.fresh(src(), None);
            assert!(c.add_named(name, st.clone()));
            s.insert(&st, 10);
            let mut e = Expected::default();
            e.push_entry(Msg::Parse, true, None);
            e.push_hidden_describe(st.id);
            e.push(Msg::Sync);
            let mut got = String::new();
            for (tag, body) in [
                (b'1', &b""[..]),
                (b't', &[0, 1, 0, 0, 0, oid][..]),
                (b'n', b""),
                (b'Z', b"I"),
            ] {
                let hidden = e.hides(tag);
                e.answer(tag, body, s, c, &reg);
                got.push(if hidden { '-' } else { tag as char });
            }
            assert_eq!(got, "1--Z");
            assert!(e.is_empty());
            st
        };
        let (mut a, mut b) = (ClientStatements::default(), ClientStatements::default());
        let first = parse(&mut s, &mut a, b"a", 23);
        assert_eq!(&**first.params.get().unwrap(), [23]);
        let second = parse(&mut s, &mut b, b"b", 23);
        assert_eq!(b.named(b"b").map(|s| s.id), Some(first.id), "settled");
        assert!(s.has(first.id) && !s.has(second.id));
        assert_eq!(s.take_stale(), std::slice::from_ref(&second.name));
        let other = parse(&mut s, &mut b, b"c", 21);
        assert_eq!(b.named(b"c").map(|s| s.id), Some(other.id), "its own");
        assert!(s.has(other.id));
    }

    /// The hidden Describe after a client's SQL PREPARE fails when the PREPARE did: its error
    /// and ReadyForQuery are hidden, the client has the PREPARE's.
    #[test]
    fn a_failed_resolve_is_hidden() {
        let mut e = Expected::default();
        e.push(Msg::Query);
        e.push_resolve(7);
        e.push_entry(Msg::Sync, false, None);
        let mut got = String::new();
        for tag in *b"EZEZ" {
            got.push(if e.hides(tag) { '-' } else { tag as char });
            e.answer(
                tag,
                b"",
                &mut ServerStatements::default(),
                &mut ClientStatements::default(),
                &Registry::default(),
            );
        }
        assert_eq!(got, "EZ--");
        assert!(e.is_empty());
        // As sent after a client's PREPARE: the last ReadyForQuery is the client's.
        e.push_entry(Msg::QueryReadyLater, true, None);
        e.push_resolve(7);
        e.push(Msg::Sync);
        let mut got = String::new();
        for tag in *b"CZtnZ" {
            got.push(if e.hides(tag) { '-' } else { tag as char });
            e.answer(
                tag,
                b"\0\0",
                &mut ServerStatements::default(),
                &mut ClientStatements::default(),
                &Registry::default(),
            );
        }
        assert_eq!(got, "C---Z");
        assert!(e.is_empty());
    }

    /// An ErrorResponse body of these fields.
    fn error(fields: &[(u8, &str)]) -> Vec<u8> {
        let mut b = Vec::new();
        for (k, v) in fields {
            b.push(*k);
            b.extend_from_slice(v.as_bytes());
            b.push(0);
        }
        b.push(0);
        b
    }

    fn fields_of(f: Fake) -> be::ErrorFields {
        let Fake::Error(m) = f else {
            panic!("not an error: {f:?}")
        };
        be::ErrorFields::parse(&m[5..]).unwrap()
    }

    #[test]
    fn a_deallocate_is_answered_by_the_transaction_status() {
        let registry = Registry::default();
        let stmt = registry.fresh(super::super::Source::Sql("AS SELECT 1".into()), None);
        for (status, forgotten) in [(b'E', false), (b'T', true), (b'I', true)] {
            let mut c = ClientStatements::default();
            assert!(c.add_sql("q".into(), stmt.clone()));
            let mut e = Expected::default();
            e.push_reworded(
                Msg::Sync,
                None,
                Reword {
                    deallocate: Some(Some("q".into())),
                    ..Reword::default()
                },
            );
            assert_eq!(e.reworded(be::READY_FOR_QUERY, &[status]), Reworded::Before);
            let f = e
                .reword(
                    be::READY_FOR_QUERY,
                    &[status],
                    &mut c,
                    &mut ServerStatements::default(),
                )
                .unwrap();
            if forgotten {
                assert_eq!(f, Fake::Command("DEALLOCATE"));
            } else {
                assert_eq!(fields_of(f).code, "25P02");
            }
            assert_eq!(c.sql("q").is_none(), forgotten, "{}", status as char);
        }
    }

    #[test]
    fn errors_are_given_back_in_the_clients_words() {
        let mut c = ClientStatements::default();
        let taken = Reword {
            taken: Some(("pgcorral_taken".into(), "mine".into())),
            shift: 7,
            ..Reword::default()
        };
        let mut e = Expected::default();
        e.push_reworded(Msg::Query, None, taken.clone());
        let dup = error(&[
            (b'S', "ERROR"),
            (b'C', "42P05"),
            (b'M', "prepared statement \"pgcorral_taken\" already exists"),
            (b'F', "prepare.c"),
        ]);
        assert_eq!(e.reworded(be::ERROR_RESPONSE, &dup), Reworded::Instead);
        let f = fields_of(
            e.reword(
                be::ERROR_RESPONSE,
                &dup,
                &mut c,
                &mut ServerStatements::default(),
            )
            .unwrap(),
        );
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            ("42P05", "prepared statement \"mine\" already exists")
        );
        // A syntax error: its position moves back into the client's text.
        let syntax = error(&[
            (b'S', "ERROR"),
            (b'C', "42601"),
            (b'M', "syntax error"),
            (b'P', "21"),
        ]);
        assert_eq!(e.reworded(be::ERROR_RESPONSE, &syntax), Reworded::Instead);
        let Fake::Error(m) = e
            .reword(
                be::ERROR_RESPONSE,
                &syntax,
                &mut c,
                &mut ServerStatements::default(),
            )
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(be::error_field(&m[5..], b'P'), Some(&b"14"[..]));
        // Without a position, another error passes as it is.
        let other = error(&[(b'S', "ERROR"), (b'C', "25P02"), (b'M', "aborted")]);
        assert_eq!(e.reworded(be::ERROR_RESPONSE, &other), Reworded::No);

        // pgcorral's failing statement: its error is replaced, but 25P02.
        let mut e = Expected::default();
        let mine = Bytes::from_static(b"E\0\0\0\x05\0");
        e.push_reworded(
            Msg::Parse,
            None,
            Reword {
                instead: Some(mine.clone()),
                ..Reword::default()
            },
        );
        let aborted = error(&[(b'S', "ERROR"), (b'C', "25P02"), (b'M', "aborted")]);
        assert_eq!(e.reworded(be::ERROR_RESPONSE, &aborted), Reworded::No);
        let bad = error(&[(b'S', "ERROR"), (b'C', "22P02"), (b'M', "invalid input")]);
        assert_eq!(e.reworded(be::ERROR_RESPONSE, &bad), Reworded::Instead);
        assert_eq!(
            e.reword(
                be::ERROR_RESPONSE,
                &bad,
                &mut c,
                &mut ServerStatements::default()
            ),
            Some(Fake::Error(mine))
        );
        // Nothing to reword for an entry without a Reword.
        let mut e = Expected::default();
        e.push(Msg::Parse);
        assert_eq!(e.reworded(be::ERROR_RESPONSE, &bad), Reworded::No);
    }
}
