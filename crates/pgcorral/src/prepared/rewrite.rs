//! Client messages that name prepared statements, changed on their way to the server: a Parse
//! with a name is sent under pgcorral's name (or answered by pgcorral when the server has the
//! statement already), Bind and Describe get pgcorral's name and a Parse before them when the
//! server lacks the statement, Close of a statement touches only the client's own names, and
//! SQL `PREPARE`/`EXECUTE`/`DEALLOCATE` are handled the same way. Unnamed statements parsed in
//! one batch and used in a later one are parsed again on the server the later one runs on.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use pgwire::frontend as fe;
use pgwire::header::HEADER_LEN;
use pgwire::Header;

use super::expect::{Expected, Fake, Msg, Undo};
use super::sql::{self, Command};
use super::{ClientStatements, Registry, ServerStatements, Source, Statement};
use crate::server::LinkState;

/// Everything the rewriting of one client message touches.
pub struct Link<'a> {
    pub registry: &'a Registry,
    /// max_prepared_statements per server (0: no limit).
    pub max: usize,
    pub client: &'a mut ClientStatements,
    pub server: &'a mut ServerStatements,
    pub expect: &'a mut Expected,
    /// Bytes for the server, sent before the client's next raw bytes.
    pub out: &'a mut BytesMut,
    /// The client's unnamed statement was parsed on this server during this relay.
    pub unnamed_here: &'a mut bool,
}

/// What a client message at the start of the buffer needs.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Forward it unchanged.
    Raw,
    /// More of it must be buffered first.
    NeedMore,
    /// It is rewritten: see [`Link::apply`].
    Rewrite,
}

/// The outcome of [`Link::apply`]: drop `consume` bytes of the client's message (what replaced
/// them is in `out`), then forward `pass` more unchanged. `consume` 0: the message waits (for
/// the server to describe a statement pgcorral just prepared) and is applied again later.
#[derive(Debug, PartialEq, Eq)]
pub struct Applied {
    pub consume: usize,
    pub pass: usize,
}

/// Whether a statement a Bind or Describe names can be used on the server now.
enum Use {
    /// Ready on the server: pgcorral's statement, none for the unnamed one.
    Ready(Option<Arc<Statement>>),
    /// Not before pgcorral has checked its description there.
    Wait,
    /// Its result type changed since the client was given its description.
    Changed,
}

/// The first words of the statements pgcorral rewrites or follows in a simple Query.
const COMMANDS: [&[u8]; 4] = [b"prepare", b"execute", b"deallocate", b"discard"];

/// Whether the simple Query at the start of `msg` (header `h`; possibly only partly buffered)
/// may be `PREPARE`, `EXECUTE`, `DEALLOCATE` or `DISCARD`, the statements [`Link`] rewrites or
/// follows, by the first word of its text: `Some(false)` when it surely is none of them, `None`
/// when too little of the text is buffered to tell. A text split across reads is not decided on
/// its first bytes: `PREP` could be the start of `PREPARE`, which must not reach the server
/// unrewritten. The one test of this for every path a Query takes: [`Link::plan`], and the
/// relay's counted Queries (see [`Link::counts`]).
#[inline]
pub fn maybe_command(h: Header, msg: &[u8]) -> Option<bool> {
    let whole = msg.len() >= h.total_len();
    let text = msg
        .get(HEADER_LEN..msg.len().min(h.total_len()))
        .unwrap_or_default();
    let Some(start) = text.iter().position(|b| !b.is_ascii_whitespace()) else {
        return whole.then_some(false);
    };
    let word = &text[start..];
    if !matches!(word[0].to_ascii_lowercase(), b'p' | b'e' | b'd') {
        return Some(false);
    }
    let mut undecided = false;
    for k in COMMANDS {
        let n = k.len().min(word.len());
        if word[..n].eq_ignore_ascii_case(&k[..n]) {
            if n == k.len() {
                return Some(true);
            }
            undecided = true; // the buffer ends inside what may be this word
        }
    }
    if undecided && !whole {
        None
    } else {
        Some(false)
    }
}

/// The NUL-terminated string at the start of `b`, and what follows it.
fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|&c| c == 0)?;
    Some((&b[..i], &b[i + 1..]))
}

impl Link<'_> {
    /// Whether a simple Query for which [`maybe_command`] says no can just be counted now (see
    /// [`Expected::queue_counted`]) instead of planned, recorded by [`Link::raw`] and followed
    /// answer by answer: it changes no statement, and nothing queued comes before its answers.
    #[inline]
    pub fn counts(&self) -> bool {
        self.expect.counts_query()
    }

    /// The length of the extended batch at the start of `buf` (through its Sync) when it can
    /// be counted like a simple Query (see [`Expected::queue_counted`]) instead of planned,
    /// recorded and followed message by message: nothing else is owed or skipped
    /// ([`Link::counts`]), the whole batch is buffered, it parses the unnamed statement, and
    /// every message would go to the server unchanged with an answer that is the client's
    /// and needs no matching: that Parse, Bind and Describe of the unnamed statement after
    /// it, Describe and Close of portals, Close of the unnamed statement, Execute and Flush.
    /// Its answers, whatever they are (an error included: the server skips to the batch's
    /// own Sync), end at its ReadyForQuery.
    ///
    /// Nothing of it is kept for a retry ([`super::replay`]): a Bind of a statement parsed in
    /// the same batch cannot find it stale, as the Parse's locks on what it reads hold until
    /// the Sync (the implicit transaction's end), and no other session can change the
    /// statement's tables in between.
    #[inline]
    pub fn counted_batch(&self, buf: &[u8], max: u32) -> Option<usize> {
        if !self.counts() {
            return None;
        }
        let mut pos = 0;
        let mut parsed = false;
        loop {
            let h = Header::parse(buf.get(pos..)?, max).ok()??;
            let end = pos + h.total_len();
            let body = buf.get(pos + HEADER_LEN..end)?;
            let unnamed_stmt = || parsed && body.get(1) == Some(&0);
            let plain = match h.tag {
                fe::PARSE => {
                    parsed = body.first() == Some(&0);
                    parsed
                }
                // The portal's name (usually empty: found at once), then the statement's.
                fe::BIND => {
                    parsed
                        && body
                            .iter()
                            .position(|&b| b == 0)
                            .is_some_and(|i| body.get(i + 1) == Some(&0))
                }
                fe::DESCRIBE | fe::CLOSE => match body.first() {
                    Some(b'P') => true,
                    Some(b'S') => unnamed_stmt(),
                    _ => false,
                },
                fe::EXECUTE | fe::FLUSH => true,
                fe::SYNC => return parsed.then_some(end),
                _ => false,
            };
            if !plain {
                return None;
            }
            pos = end;
        }
    }

    /// Records a message of a counted batch ([`Link::counted_batch`]) or a counted simple
    /// Query (after [`maybe_command`] said no and [`Link::counts`] yes): its Parse of the
    /// unnamed statement is remembered for a later Bind on another server, and its Sync (or
    /// the Query) is counted.
    #[inline]
    pub fn counted(&mut self, h: Header, msg: &[u8]) {
        match h.tag {
            fe::QUERY | fe::SYNC => self.expect.queue_counted(),
            fe::PARSE => {
                self.client.set_unnamed(&msg[HEADER_LEN + 1..h.total_len()]);
                *self.unnamed_here = true;
            }
            _ => {}
        }
    }

    /// Decides what the message at the start of `buf` (header `h`) needs, without changing
    /// anything.
    pub fn plan(&self, h: Header, buf: &[u8]) -> Plan {
        if self.expect.dropping {
            return if h.tag == fe::SYNC {
                Plan::Raw
            } else if buf.len() < h.total_len() {
                Plan::NeedMore
            } else {
                Plan::Rewrite
            };
        }
        if self.expect.skipping && h.tag != fe::SYNC {
            // The server ignores everything until Sync: pass it on as it is.
            return Plan::Raw;
        }
        let whole = buf.len() >= h.total_len();
        match h.tag {
            fe::PARSE | fe::DESCRIBE | fe::CLOSE if !whole => Plan::NeedMore,
            fe::PARSE => {
                if buf.get(HEADER_LEN) == Some(&0) {
                    Plan::Raw // unnamed: only remembered
                } else {
                    Plan::Rewrite
                }
            }
            fe::BIND => {
                let body = &buf[HEADER_LEN..buf.len().min(h.total_len())];
                match cstr(body).and_then(|(_, r)| cstr(r)) {
                    None if whole => Plan::Raw, // malformed: the server says so
                    None => Plan::NeedMore,
                    Some((stmt, _)) => match self.statement_plan(stmt) {
                        // It may have to be answered by pgcorral (dropped whole).
                        Plan::Rewrite if !whole && !self.present(stmt) => Plan::NeedMore,
                        plan => plan,
                    },
                }
            }
            fe::DESCRIBE => match buf.get(HEADER_LEN) {
                Some(b'S') => match cstr(&buf[HEADER_LEN + 1..h.total_len()]) {
                    Some((stmt, _)) => self.statement_plan(stmt),
                    None => Plan::Raw,
                },
                _ => Plan::Raw,
            },
            fe::CLOSE => match (buf.get(HEADER_LEN), buf.get(HEADER_LEN + 1)) {
                (Some(b'S'), Some(&c)) if c != 0 => Plan::Rewrite,
                _ => Plan::Raw,
            },
            fe::QUERY => match maybe_command(h, buf) {
                Some(false) => Plan::Raw,
                Some(true) if whole => match query_command(&buf[HEADER_LEN..h.total_len()]) {
                    Some(Command::DiscardAll) | None => Plan::Raw,
                    Some(Command::Execute { name, .. }) if self.lookup(&name).is_none() => {
                        Plan::Raw // not the client's: the server answers
                    }
                    Some(Command::Deallocate { name: Some(name) })
                        if self.lookup(&name).is_none() =>
                    {
                        Plan::Raw
                    }
                    Some(_) => Plan::Rewrite,
                },
                // Too little of it to tell, or one of those: it is looked at whole.
                _ => Plan::NeedMore,
            },
            _ => Plan::Raw,
        }
    }

    fn statement_plan(&self, stmt: &[u8]) -> Plan {
        if stmt.is_empty() {
            if !*self.unnamed_here && self.client.unnamed().is_some() {
                Plan::Rewrite
            } else {
                Plan::Raw
            }
        } else if self.client.named(stmt).is_some() {
            Plan::Rewrite
        } else {
            Plan::Raw // unknown to pgcorral: the server reports it does not exist
        }
    }

    /// Whether the client's named statement `stmt` is prepared on this server.
    fn present(&self, stmt: &[u8]) -> bool {
        self.client
            .named(stmt)
            .is_some_and(|s| self.server.has(s.id))
    }

    fn lookup(&self, name: &str) -> Option<&Arc<Statement>> {
        self.client
            .sql(name)
            .or_else(|| self.client.named(name.as_bytes()))
    }

    /// Records a message forwarded unchanged (after [`Plan::Raw`]); `counted` is false for a
    /// Sync that PostgreSQL will ignore (COPY IN).
    pub fn raw(&mut self, h: Header, buf: &[u8], counted: bool) {
        let msg = match h.tag {
            fe::PARSE => {
                if let Some((_, rest)) = buf.get(HEADER_LEN..h.total_len()).and_then(cstr) {
                    if !self.expect.skipping {
                        self.client.set_unnamed(rest);
                        *self.unnamed_here = true;
                    }
                }
                Msg::Parse
            }
            fe::BIND => Msg::Bind,
            fe::DESCRIBE if buf.get(HEADER_LEN) == Some(&b'S') => Msg::DescribeStatement,
            fe::DESCRIBE => Msg::DescribePortal,
            fe::EXECUTE => Msg::Execute,
            fe::CLOSE => Msg::Close,
            fe::SYNC if counted => {
                self.expect.dropping = false;
                Msg::Sync
            }
            fe::QUERY | fe::FUNCTION_CALL => Msg::Query,
            _ => return, // Flush, COPY messages, an ignored Sync: no answer of their own
        };
        // While the server skips to Sync it ignores a DISCARD ALL too.
        if h.tag == fe::QUERY && !self.expect.skipping && maybe_command(h, buf) == Some(true) {
            if let Some(Command::DiscardAll) =
                buf.get(HEADER_LEN..h.total_len()).and_then(query_command)
            {
                // The server drops every statement; the client forgets its own.
                self.client.clear();
                self.server.clear();
            }
        }
        self.expect.push(msg);
    }

    /// Rewrites the message at the start of `buf` (after [`Plan::Rewrite`]).
    pub fn apply(&mut self, h: Header, buf: &[u8], st: &mut LinkState) -> Applied {
        let whole = || Applied {
            consume: h.total_len(),
            pass: 0,
        };
        if self.expect.dropping {
            return whole(); // after pgcorral's own error, until Sync
        }
        let body = &buf[HEADER_LEN..buf.len().min(h.total_len())];
        match h.tag {
            fe::PARSE => {
                st.unsynced = true;
                let Some((name, rest)) = cstr(body) else {
                    return whole();
                };
                let stmt = self
                    .registry
                    .intern(Source::Parse(Bytes::copy_from_slice(rest)));
                if !self.client.add_named(name, stmt.clone()) {
                    self.own_error(
                        "42P05",
                        &format!(
                            "prepared statement \"{}\" already exists",
                            String::from_utf8_lossy(name)
                        ),
                    );
                    return whole();
                }
                if self.server.touch(&stmt) {
                    self.expect.push_fake(Fake::ParseComplete);
                } else {
                    self.prepare_on_server(&stmt, st, true, Some(name));
                    if stmt.shape.get().is_some() {
                        // Prepared here now, its description may differ from the one other
                        // clients were given: pgcorral describes it (hidden) to check.
                        pgwire::encode::describe(self.out, b'S', stmt.name.as_bytes());
                        self.expect.push_hidden_describe(stmt.id);
                    }
                }
                whole()
            }
            fe::BIND => {
                let (portal, rest) = cstr(body).expect("planned");
                let (name, _) = cstr(rest).expect("planned");
                let prefix = HEADER_LEN + portal.len() + 1 + name.len() + 1;
                let stmt = match self.ensure(name, st) {
                    Use::Ready(stmt) => stmt,
                    Use::Wait => return WAIT,
                    Use::Changed => return self.changed(h),
                };
                let new_name = stmt.as_deref().map_or("", |s| s.name.as_str());
                st.unsynced = true;
                let new_len = h.total_len() - 1 - name.len() + new_name.len();
                self.out.put_u8(fe::BIND);
                self.out.put_i32(new_len as i32);
                self.out.put_slice(portal);
                self.out.put_u8(0);
                self.out.put_slice(new_name.as_bytes());
                self.out.put_u8(0);
                match stmt {
                    Some(s) => self.expect.push_about(Msg::Bind, s.id),
                    None => self.expect.push(Msg::Bind),
                }
                Applied {
                    consume: prefix,
                    pass: h.total_len() - prefix,
                }
            }
            fe::DESCRIBE => {
                let (name, _) = cstr(&body[1..]).expect("planned");
                let stmt = match self.ensure(name, st) {
                    Use::Ready(stmt) => stmt,
                    Use::Wait => return WAIT,
                    Use::Changed => return self.changed(h),
                };
                st.unsynced = true;
                let new_name = stmt.as_deref().map_or("", |s| s.name.as_str());
                pgwire::encode::describe(self.out, b'S', new_name.as_bytes());
                match stmt {
                    Some(s) => self.expect.push_about(Msg::DescribeStatement, s.id),
                    None => self.expect.push(Msg::DescribeStatement),
                }
                whole()
            }
            fe::CLOSE => {
                // Only the client's name goes; the server keeps the statement for others.
                st.unsynced = true;
                if let Some((name, _)) = cstr(&body[1..]) {
                    self.client.remove_named(name);
                }
                self.expect.push_fake(Fake::CloseComplete);
                whole()
            }
            fe::QUERY => {
                match query_command(body) {
                    Some(Command::Prepare { name, rest }) => self.sql_prepare(name, rest, st),
                    Some(Command::Execute { name, rest }) => {
                        let stmt = self.lookup(&name).cloned().expect("planned");
                        self.make_present(&stmt, st);
                        let q = format!(
                            "EXECUTE {}{}{}",
                            stmt.name,
                            if rest.is_empty() { "" } else { " " },
                            rest
                        );
                        pgwire::encode::query(self.out, &q);
                        st.on_request();
                        self.expect.push_about(Msg::Query, stmt.id);
                    }
                    Some(Command::Deallocate { name }) => {
                        let tag = match name {
                            Some(n) => {
                                self.client.remove_sql(&n);
                                "DEALLOCATE"
                            }
                            None => {
                                self.client.clear();
                                "DEALLOCATE ALL"
                            }
                        };
                        self.answer_locally(Fake::Command(tag), st);
                    }
                    Some(Command::DiscardAll) | None => unreachable!("planned as raw"),
                }
                whole()
            }
            _ => unreachable!("planned as raw"),
        }
    }

    /// `PREPARE name ...`: sent under pgcorral's name unless this server has it already.
    fn sql_prepare(&mut self, name: String, rest: &str, st: &mut LinkState) {
        let stmt = self.registry.intern(Source::Sql(rest.to_string()));
        if !self.client.add_sql(name.clone(), stmt.clone()) {
            let msg = format!("prepared statement \"{name}\" already exists");
            let mut e = BytesMut::new();
            pgwire::encode::error_response(&mut e, "ERROR", "42P05", &msg);
            self.answer_locally(Fake::Error(e.freeze()), st);
            return;
        }
        if self.server.touch(&stmt) {
            self.answer_locally(Fake::Command("PREPARE"), st);
            return;
        }
        self.evict_for(&stmt, st);
        pgwire::encode::query(self.out, &format!("PREPARE {} {rest}", stmt.name));
        st.on_request();
        self.expect.push_entry(
            Msg::Query,
            true,
            Some(Box::new(Undo {
                stmt: stmt.id,
                client_name: None,
                client_sql: Some(name),
            })),
        );
    }

    /// Answers a simple Query with `fake`, then a Sync so the server supplies ReadyForQuery
    /// with the real transaction status.
    fn answer_locally(&mut self, fake: Fake, st: &mut LinkState) {
        self.expect.push_fake(fake);
        pgwire::encode::sync(self.out);
        st.on_sync();
        self.expect.push(Msg::Sync);
    }

    /// An error of pgcorral's own in an extended batch: like PostgreSQL, the rest of the batch
    /// up to Sync is dropped.
    fn own_error(&mut self, code: &str, msg: &str) {
        let mut e = BytesMut::new();
        pgwire::encode::error_response(&mut e, "ERROR", code, msg);
        self.expect.push_fake(Fake::Error(e.freeze()));
        self.expect.dropping = true;
    }

    /// The server-side name for the client's statement `name` (empty: unnamed), prepared there
    /// first if needed.
    ///
    /// A statement whose description a client was given is not silently prepared with another
    /// one: PostgreSQL would answer "cached plan must not change result type" in the client's
    /// own session, and so does pgcorral. Where it prepares such a statement, it describes it
    /// there first ([`Use::Wait`]) and compares; a retired statement (see
    /// [`Statement::retire`]) is not prepared again for such a client, except in a batch
    /// pgcorral retries (whose client is given the new description), where the client's names
    /// move to the statement's new version.
    fn ensure(&mut self, name: &[u8], st: &mut LinkState) -> Use {
        if name.is_empty() {
            if !*self.unnamed_here {
                if let Some(body) = self.client.unnamed() {
                    pgwire::encode::parse(self.out, b"", body);
                    self.expect.push_entry(Msg::Parse, false, None);
                    *self.unnamed_here = true;
                }
            }
            return Use::Ready(None);
        }
        if self.expect.verifying {
            return Use::Wait;
        }
        let mut stmt = self.client.named(name).cloned().expect("planned");
        if self
            .expect
            .verify_failed
            .take_if(|id| *id == stmt.id)
            .is_some()
        {
            return Use::Changed;
        }
        if !self.server.touch(&stmt) {
            if stmt.is_retired() {
                if self.expect.replay.in_retry() {
                    let fresh = self.registry.renew(&stmt);
                    self.client.replace(stmt.id, &fresh);
                    stmt = fresh;
                } else if stmt.shape.get().is_some() {
                    return Use::Changed;
                }
            }
            if !self.server.touch(&stmt) {
                self.prepare_on_server(&stmt, st, false, None);
                if stmt.shape.get().is_some() {
                    pgwire::encode::describe(self.out, b'S', stmt.name.as_bytes());
                    pgwire::encode::flush(self.out);
                    self.expect.push_verify(stmt.id);
                    return Use::Wait;
                }
            }
        }
        Use::Ready(Some(stmt))
    }

    /// The client's Bind or Describe (header `h`, wholly buffered) of a statement whose result
    /// type changed: answered with PostgreSQL's error, the rest of the batch dropped.
    fn changed(&mut self, h: Header) -> Applied {
        // As PostgreSQL words it: drivers (asyncpg, pgjdbc) recognise it by its routine, and
        // prepare the statement again.
        let mut e = BytesMut::new();
        pgwire::encode::error_response_with(
            &mut e,
            "ERROR",
            "0A000",
            "cached plan must not change result type",
            &[(b'F', "plancache.c"), (b'R', "RevalidateCachedQuery")],
        );
        self.expect.push_fake(Fake::Error(e.freeze()));
        self.expect.dropping = true;
        Applied {
            consume: h.total_len(),
            pass: 0,
        }
    }

    /// Makes `stmt` exist on the server before an SQL EXECUTE of it.
    fn make_present(&mut self, stmt: &Arc<Statement>, st: &mut LinkState) {
        if self.server.touch(stmt) {
            return;
        }
        match &stmt.source {
            Source::Parse(_) => {
                self.prepare_on_server(stmt, st, false, None);
                // A Sync, so an error in that Parse does not make the server skip the query.
                pgwire::encode::sync(self.out);
                st.on_sync();
                self.expect.push_entry(Msg::Sync, false, None);
            }
            Source::Sql(rest) => {
                self.evict_for(stmt, st);
                pgwire::encode::query(self.out, &format!("PREPARE {} {rest}", stmt.name));
                st.on_request();
                self.expect
                    .push_entry(Msg::Query, false, Some(undo(stmt, None)));
            }
        }
    }

    /// Sends a Parse of `stmt` under its server name; its answer reaches the client when the
    /// Parse is the client's own (`client_name`).
    fn prepare_on_server(
        &mut self,
        stmt: &Arc<Statement>,
        st: &mut LinkState,
        forward: bool,
        client_name: Option<&[u8]>,
    ) {
        let Source::Parse(body) = &stmt.source else {
            // An SQL-level statement used by Bind: prepare it the SQL way first.
            return self.make_present(stmt, st);
        };
        self.evict_for(stmt, st);
        pgwire::encode::parse(self.out, stmt.name.as_bytes(), body);
        st.unsynced = true;
        self.expect
            .push_entry(Msg::Parse, forward, Some(undo(stmt, client_name)));
    }

    /// Records `stmt` as prepared on the server, closing the least recently used statement
    /// there first when the server is at max_prepared_statements.
    fn evict_for(&mut self, stmt: &Arc<Statement>, st: &mut LinkState) {
        for name in self.server.take_stale() {
            pgwire::encode::close(self.out, b'S', name.as_bytes());
            st.unsynced = true;
            self.expect.push_entry(Msg::Close, false, None);
        }
        if let Some(old) = self.server.insert(stmt, self.max) {
            pgwire::encode::close(self.out, b'S', old.name.as_bytes());
            st.unsynced = true;
            self.expect.push_entry(Msg::Close, false, None);
        }
    }
}

/// [`Applied`] for a message that waits.
const WAIT: Applied = Applied {
    consume: 0,
    pass: 0,
};

fn undo(stmt: &Statement, client_name: Option<&[u8]>) -> Box<Undo> {
    Box::new(Undo {
        stmt: stmt.id,
        client_name: client_name.map(Into::into),
        client_sql: None,
    })
}

/// The command of a Query body, when it is one pgcorral handles.
fn query_command(body: &[u8]) -> Option<Command<'_>> {
    let text = fe::query_text(body)?;
    sql::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Vec<u8> {
        let mut b = BytesMut::new();
        pgwire::encode::query(&mut b, sql);
        b.to_vec()
    }

    /// `maybe_command` over the whole message and over every cut of it.
    fn decided(sql: &str) -> (Option<bool>, Vec<Option<bool>>) {
        let m = query(sql);
        let h = Header::parse(&m, 1 << 20).unwrap().unwrap();
        let cuts = (HEADER_LEN..m.len())
            .map(|i| maybe_command(h, &m[..i]))
            .collect();
        (maybe_command(h, &m), cuts)
    }

    #[test]
    fn maybe_command_by_the_first_word() {
        for sql in [
            " PREPARE x as select 1",
            "execute x",
            "Deallocate all",
            "discard all",
            "\n\tprepared",
        ] {
            assert_eq!(decided(sql).0, Some(true), "{sql}");
        }
        for sql in [
            "select 1",
            "delete from t",
            "",
            "   ",
            "dis",
            "explain execute x",
        ] {
            assert_eq!(decided(sql).0, Some(false), "{sql}");
        }
    }

    /// Part of a text is decided only when no more of it could change the answer.
    #[test]
    fn maybe_command_waits_for_the_first_word() {
        let (_, cuts) = decided("  DEALLOCATE p");
        // Header only, the blanks, then D, DE, ... DEALLOCAT: undecided; DEALLOCATE: yes.
        assert!(cuts[..12].iter().all(Option::is_none), "{cuts:?}");
        assert!(cuts[12..].iter().all(|c| *c == Some(true)), "{cuts:?}");
        let (_, cuts) = decided("DISCO");
        assert_eq!(cuts, [None, None, None, None, None, Some(false)]);
        let (_, cuts) = decided("SELECT 1");
        assert!(cuts[1..].iter().all(|c| *c == Some(false)), "{cuts:?}");
        assert_eq!(cuts[0], None, "nothing of the text yet");
    }
}
