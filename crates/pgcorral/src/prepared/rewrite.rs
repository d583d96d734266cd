//! Client messages that name prepared statements, changed on their way to the server: a Parse
//! with a name is sent under pgcorral's name, always (with a hidden Describe that tells what it
//! resolved), Bind and Describe get pgcorral's name and a Parse before them when the server
//! lacks the statement, Close of a statement touches only the client's own names, and SQL
//! `PREPARE`/`EXECUTE`/`DEALLOCATE` are handled the same way, as is a Parse whose text is
//! `EXECUTE` of one of the client's statements. Unnamed statements parsed in one batch and used
//! in a later one are parsed again on the server the later one runs on.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use pgwire::backend::TxStatus;
use pgwire::frontend as fe;
use pgwire::frontend::cstr;
use pgwire::header::HEADER_LEN;
use pgwire::Header;

use super::expect::{Expected, Fake, Msg, Reword, Undo};
use super::sql::{self, Command};
use super::{ClientStatements, Registry, ServerStatements, Source, Statement};
use crate::link_state::LinkState;
use crate::logsafe::Esc;
use crate::meter::Totals;

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
    /// The relay's statistics: clients' named Parses and Binds, and Parses sent to servers.
    pub tally: &'a mut Totals,
    /// `retry_stale_statements`: a batch whose statement a schema change made stale is
    /// prepared again and retried (see [`super::replay`]); off, the client gets PostgreSQL's
    /// error.
    pub retry: bool,
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
    /// Ready on the server: pgcorral's statement (its id, and the statement whose name it has
    /// there), none for the unnamed one.
    Ready(Option<(u64, Arc<Statement>)>),
    /// Not before pgcorral has checked its description there.
    Wait,
    /// Its result type changed since the client was given its description.
    Changed,
}

/// The first words of the statements pgcorral rewrites or follows in a simple Query.
/// The statement name pgcorral makes taken on a server to have it answer a client's Parse or
/// `PREPARE` of a name the client has taken (see [`Link::duplicate_parse`]).
const DUP: &str = "pgcorral_taken";

/// A statement that fails on any server when analysed, without touching anything: what
/// pgcorral sends in place of a client's message it answers with an error of its own (see
/// [`Link::fail_as`]). The server's log says why.
const FAILS: &str =
    "SELECT 'pgcorral answers this statement with an error of its own'::pg_catalog.int4";

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

/// Whether a Parse body is as PostgreSQL reads it: name and text each ended by a NUL, a count
/// of parameter types and exactly that many. A malformed one goes to the server as it is,
/// which refuses it (08P01) before anything is created, and skips to Sync.
fn well_formed_parse(body: &[u8]) -> bool {
    let Some((_, rest)) = cstr(body).and_then(|(_, r)| cstr(r)) else {
        return false;
    };
    match rest {
        [a, b, types @ ..] => types.len() == 4 * u16::from_be_bytes([*a, *b]) as usize,
        _ => false,
    }
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
                    parsed = body.first() == Some(&0) && self.runs(&body[1..]).is_none();
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
            fe::QUERY => {
                self.expect.queue_counted();
                self.simple_query();
            }
            fe::SYNC => self.expect.queue_counted(),
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
                let body = &buf[HEADER_LEN..h.total_len()];
                if !well_formed_parse(body) {
                    Plan::Raw // the server refuses it as PostgreSQL does
                } else if body[0] != 0 || self.runs(&body[1..]).is_some() {
                    // Named, or the unnamed one running one of the client's statements.
                    Plan::Rewrite
                } else {
                    Plan::Raw // unnamed: only remembered
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
            // Malformed (no NUL, bytes after it): the server refuses it as PostgreSQL does.
            fe::DESCRIBE => match buf.get(HEADER_LEN) {
                Some(b'S') => match cstr(&buf[HEADER_LEN + 1..h.total_len()]) {
                    Some((stmt, [])) => self.statement_plan(stmt),
                    _ => Plan::Raw,
                },
                _ => Plan::Raw,
            },
            fe::CLOSE => match (
                buf.get(HEADER_LEN),
                cstr(buf.get(HEADER_LEN + 1..h.total_len()).unwrap_or_default()),
            ) {
                (Some(b'S'), Some((name, []))) if !name.is_empty() => Plan::Rewrite,
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

    /// A simple Query reaches the server, which drops its unnamed statement for it (PostgreSQL
    /// runs a simple Query as the unnamed statement): the client has none any more, nor has
    /// the server.
    #[inline]
    fn simple_query(&mut self) {
        self.client.drop_unnamed();
        *self.unnamed_here = true;
    }

    fn statement_plan(&self, stmt: &[u8]) -> Plan {
        if stmt.is_empty() {
            // The server's unnamed statement may be another client's.
            if !*self.unnamed_here {
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

    /// The client's statement a Parse runs, when its text (`rest`: the body after the
    /// statement name) is SQL `EXECUTE` of one (as asyncpg sends for a statement made by SQL
    /// `PREPARE`): on the server it has pgcorral's name. One level only: a statement whose text
    /// is itself an `EXECUTE` is left to the server.
    fn runs(&self, rest: &[u8]) -> Option<&Arc<Statement>> {
        // The usual text starts with another letter: one look at its first byte.
        let first = rest.iter().find(|b| !b.is_ascii_whitespace())?;
        if !first.eq_ignore_ascii_case(&b'e') {
            return None;
        }
        let (text, _) = cstr(rest)?;
        let Command::Execute { name, .. } = sql::parse(std::str::from_utf8(text).ok()?)? else {
            return None;
        };
        self.lookup(&name).filter(|s| s.runs.is_none())
    }

    /// Records a message forwarded unchanged (after [`Plan::Raw`]); `counted` is false for a
    /// Sync that PostgreSQL will ignore (COPY IN).
    pub fn raw(&mut self, h: Header, buf: &[u8], counted: bool, st: &LinkState) {
        let msg = match h.tag {
            fe::PARSE => {
                let unnamed = buf.get(HEADER_LEN) == Some(&0);
                if let Some((_, rest)) = buf.get(HEADER_LEN..h.total_len()).and_then(cstr) {
                    if unnamed && !self.expect.skipping {
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
            fe::QUERY => {
                if !self.expect.skipping {
                    self.simple_query();
                }
                Msg::Query
            }
            fe::FUNCTION_CALL => Msg::Query,
            _ => return, // Flush, COPY messages, an ignored Sync: no answer of their own
        };
        // While the server skips to Sync it ignores a DISCARD ALL too.
        if h.tag == fe::QUERY && !self.expect.skipping && maybe_command(h, buf) == Some(true) {
            if let Some(Command::DiscardAll) =
                buf.get(HEADER_LEN..h.total_len()).and_then(query_command)
            {
                // It is the one request outstanding: the transaction status says whether the
                // server runs it (PostgreSQL refuses it inside a transaction block). Behind
                // others, its CommandComplete will say.
                if st.pending == 1 && !st.unsynced {
                    if st.tx == TxStatus::Idle {
                        self.client.clear();
                        self.server.clear();
                    }
                } else {
                    let reword = Reword {
                        discard: true,
                        ..Reword::default()
                    };
                    self.expect.push_reworded(Msg::Query, None, reword);
                    return;
                }
            }
        }
        self.expect.push(msg);
    }

    /// Rewrites the message at the start of `buf` (after [`Plan::Rewrite`]).
    pub fn apply(&mut self, h: Header, buf: &[u8], st: &mut LinkState) -> Applied {
        if self.expect.dropping {
            return consumed(h); // after pgcorral's own error, until Sync
        }
        let body = &buf[HEADER_LEN..buf.len().min(h.total_len())];
        match h.tag {
            fe::PARSE => self.parse(h, body, st),
            fe::BIND => self.bind(h, buf, body, st),
            fe::DESCRIBE => {
                let (name, _) = cstr(&body[1..]).expect("planned");
                let stmt = match self.ensure(name, st, None) {
                    Use::Ready(stmt) => stmt,
                    Use::Wait => return WAIT,
                    Use::Changed => return self.changed(h, st),
                };
                st.unsynced = true;
                let new_name = stmt.as_ref().map_or("", |(_, s)| s.name.as_str());
                pgwire::encode::describe(self.out, b'S', new_name.as_bytes());
                match stmt {
                    Some((id, _)) => self.expect.push_about(Msg::DescribeStatement, id),
                    None => self.expect.push(Msg::DescribeStatement),
                }
                consumed(h)
            }
            fe::CLOSE => {
                // Only the client's name goes; the server keeps the statement for others.
                st.unsynced = true;
                if let Some((name, _)) = cstr(&body[1..]) {
                    self.client.remove_named(name);
                }
                self.expect.push_fake(Fake::CloseComplete);
                consumed(h)
            }
            fe::QUERY => self.query(h, body, st),
            _ => unreachable!("planned as raw"),
        }
    }

    /// A Parse: the client's named statement prepared under pgcorral's name, or the unnamed
    /// statement that runs one of the client's (renamed in its text).
    fn parse(&mut self, h: Header, body: &[u8], st: &mut LinkState) -> Applied {
        st.unsynced = true;
        let (name, rest) = cstr(body).expect("planned");
        let runs = self.runs(rest).cloned();
        if name.is_empty() {
            // The unnamed statement runs one of the client's: its text gets the name
            // that one has on this server.
            let runs = runs.expect("planned");
            let here = self.make_present(&runs, st);
            let text = cstr(rest).map_or(&[][..], |(t, _)| t);
            let mut renamed = super::execute_text(text, &here.name).unwrap_or_default();
            renamed.push(0);
            renamed.extend_from_slice(cstr(rest).map_or(&[][..], |(_, types)| types));
            pgwire::encode::parse(self.out, b"", &renamed);
            self.expect.push(Msg::Parse);
            self.client.set_unnamed_runs(rest, runs);
            *self.unnamed_here = true;
            return consumed(h);
        }
        let stmt = self
            .registry
            .fresh(Source::Parse(Bytes::copy_from_slice(rest)), runs);
        if !self.client.add_named(name, stmt.clone()) {
            self.duplicate_parse(name, rest, st);
            return consumed(h);
        }
        self.tally.client_parses += 1;
        // Always a Parse on the server, never an answer of pgcorral's: what it resolves
        // now is the client's statement. Other clients' statements of the same text
        // are shared only once this one resolved as they did (see `expect::resolve`).
        self.prepare_on_server(&stmt, st, true, Some(name));
        consumed(h)
    }

    /// A Bind: the statement made present on this server first, then bound under its name
    /// there (the rest of the message passes unchanged).
    fn bind(&mut self, h: Header, buf: &[u8], body: &[u8], st: &mut LinkState) -> Applied {
        let (portal, rest) = cstr(body).expect("planned");
        let (name, _) = cstr(rest).expect("planned");
        let prefix = HEADER_LEN + portal.len() + 1 + name.len() + 1;
        let stmt = match self.ensure(name, st, Some(buf)) {
            Use::Ready(stmt) => stmt,
            Use::Wait => return WAIT,
            Use::Changed => return self.changed(h, st),
        };
        let new_name = stmt.as_ref().map_or("", |(_, s)| s.name.as_str());
        st.unsynced = true;
        let new_len = h.total_len() - 1 - name.len() + new_name.len();
        self.out.put_u8(fe::BIND);
        self.out.put_i32(new_len as i32);
        self.out.put_slice(portal);
        self.out.put_u8(0);
        self.out.put_slice(new_name.as_bytes());
        self.out.put_u8(0);
        match stmt {
            Some((id, _)) => {
                self.tally.binds += 1;
                self.expect.push_about(Msg::Bind, id)
            }
            None => self.expect.push(Msg::Bind),
        }
        Applied {
            consume: prefix,
            pass: h.total_len() - prefix,
        }
    }

    /// A simple Query that is SQL `PREPARE`, `EXECUTE` or `DEALLOCATE` of a client's statement.
    fn query(&mut self, h: Header, body: &[u8], st: &mut LinkState) -> Applied {
        // Each way it goes, the server's unnamed statement is dropped, as PostgreSQL
        // drops it for the client's Query.
        self.simple_query();
        let text = fe::query_text(body).unwrap_or_default();
        // The client's characters before `rest`, its part that pgcorral's text keeps.
        let before = |rest: &str| {
            let at = (rest.as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
            text.get(..at).map_or(0, |t| t.chars().count()) as i64
        };
        match query_command(body) {
            Some(Command::Prepare { name, rest }) => {
                let shift = before(rest);
                self.sql_prepare(name, rest, shift, st)
            }
            Some(Command::Execute { name, rest }) => {
                let stmt = self.lookup(&name).cloned().expect("planned");
                let here = match self.ensure_sql(stmt.clone(), st) {
                    Use::Ready(Some((_, here))) => here,
                    Use::Ready(None) => unreachable!("a named statement"),
                    Use::Wait => return WAIT,
                    Use::Changed => return self.changed(h, st),
                };
                let q = format!(
                    "EXECUTE {}{}{}",
                    here.name,
                    if rest.is_empty() { "" } else { " " },
                    rest
                );
                let shift = ("EXECUTE ".len() + here.name.len() + 1) as i64 - before(rest);
                pgwire::encode::query(self.out, &q);
                st.on_request();
                self.expect.push_reworded(
                    Msg::Query,
                    Some(stmt.id),
                    Reword {
                        shift,
                        ..Reword::default()
                    },
                );
            }
            Some(Command::Deallocate { name }) => {
                // Forgotten when the server's ReadyForQuery shows the transaction
                // was not aborted (PostgreSQL refuses DEALLOCATE there).
                pgwire::encode::close(self.out, b'S', b"");
                self.expect.push_entry(Msg::Close, false, None);
                pgwire::encode::sync(self.out);
                st.on_sync();
                self.expect.push_reworded(
                    Msg::Sync,
                    None,
                    Reword {
                        deallocate: Some(name),
                        ..Reword::default()
                    },
                );
            }
            Some(Command::DiscardAll) | None => unreachable!("planned as raw"),
        }
        consumed(h)
    }

    /// `PREPARE name ...`: sent under pgcorral's name, always, and described (hidden, in a
    /// batch of its own) to learn what it resolved, as a Parse is.
    /// `before`: the characters of the client's text before `rest`.
    fn sql_prepare(&mut self, name: String, rest: &str, before: i64, st: &mut LinkState) {
        let stmt = self.registry.fresh(Source::Sql(rest.to_string()), None);
        if !self.client.add_sql(name.clone(), stmt.clone()) {
            self.duplicate_sql(name, rest, before, st);
            return;
        }
        self.evict_for(&stmt, st);
        self.tally.server_parses += 1;
        let q = format!("PREPARE {} {rest}", stmt.name);
        pgwire::encode::query(self.out, &q);
        st.on_request();
        let shift = ("PREPARE ".len() + stmt.name.len() + 1) as i64 - before;
        self.expect.push_entry(
            Msg::QueryReadyLater,
            true,
            Some(Box::new(Undo {
                stmt: Some(stmt.id),
                client_sql: Some(name),
                reword: Reword {
                    shift,
                    ..Reword::default()
                },
                ..Undo::default()
            })),
        );
        self.resolve_sql(&stmt, st, true);
    }

    /// A Parse of a statement name the client has taken already. PostgreSQL reads and analyses
    /// the text first (its errors, or 25P02 in an aborted transaction, come before "already
    /// exists") and fails the batch, its implicit transaction included. So does the server,
    /// given the client's text twice under a name of pgcorral's: the first Parse (hidden but
    /// for its error) fails as PostgreSQL would fail the client's, or else the second finds
    /// the name taken, and its "already exists" is given the client's name.
    fn duplicate_parse(&mut self, name: &[u8], rest: &[u8], st: &mut LinkState) {
        // PgBouncer's words, for log readers (the client gets PostgreSQL's 42P05).
        tracing::info!(
            "prepared statement '{}' was already prepared",
            Esc(&String::from_utf8_lossy(name))
        );
        self.free_dup_name();
        pgwire::encode::parse(self.out, DUP.as_bytes(), rest);
        self.expect.push_entry(Msg::Parse, false, None);
        pgwire::encode::parse(self.out, DUP.as_bytes(), rest);
        pgwire::encode::flush(self.out);
        st.unsynced = true;
        self.expect.push_reworded(
            Msg::Parse,
            None,
            Reword {
                taken: Some((DUP.into(), String::from_utf8_lossy(name).into_owned())),
                ..Reword::default()
            },
        );
        self.expect.dropping = true;
    }

    /// SQL `PREPARE` of a name the client has taken: as [`Link::duplicate_parse`], with both
    /// `PREPARE`s in one Query, whose first completion is hidden (`before`: the client's
    /// characters before `rest`, for the position of an error in it).
    fn duplicate_sql(&mut self, name: String, rest: &str, before: i64, st: &mut LinkState) {
        self.free_dup_name();
        pgwire::encode::sync(self.out);
        st.on_sync();
        self.expect.push_entry(Msg::Sync, false, None);
        pgwire::encode::query(
            self.out,
            &format!("PREPARE {DUP} {rest}; PREPARE {DUP} {rest}"),
        );
        st.on_request();
        self.expect.push_reworded(
            Msg::Query,
            None,
            Reword {
                taken: Some((DUP.into(), name)),
                shift: ("PREPARE ".len() + DUP.len() + 1) as i64 - before,
                hide_completion: true,
                ..Reword::default()
            },
        );
    }

    /// Describe and Sync after an SQL `PREPARE` of `stmt` (hidden: see
    /// [`super::expect::Msg::Resolve`]); `ready`: the Sync's ReadyForQuery is the client's.
    fn resolve_sql(&mut self, stmt: &Statement, st: &mut LinkState, ready: bool) {
        pgwire::encode::describe(self.out, b'S', stmt.name.as_bytes());
        st.unsynced = true;
        self.expect.push_resolve(stmt.id);
        pgwire::encode::sync(self.out);
        st.on_sync();
        self.expect.push_entry(Msg::Sync, ready, None);
    }

    /// A client's Flush after a Parse and Describe with no Bind, on a sharded database: sent as
    /// a Sync of pgcorral's whose ReadyForQuery is hidden, so that the batch ends and the
    /// server can go back to the pool before the client's Bind is routed by its parameters.
    pub fn flush_as_sync(&mut self, st: &mut LinkState) {
        pgwire::encode::sync(self.out);
        st.on_sync();
        self.expect.push_entry(Msg::Sync, false, None);
    }

    /// Closes [`DUP`] on the server (it may be there from last time).
    fn free_dup_name(&mut self) {
        pgwire::encode::close(self.out, b'S', DUP.as_bytes());
        self.expect.push_entry(Msg::Close, false, None);
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
    /// move to the statement's new version. So do those of a batch that would be retried (see
    /// [`renewable_batch`]; `batch`: the buffer from a Bind): were the statement not shared, the server would have answered it
    /// the error that makes the retry.
    fn ensure(&mut self, name: &[u8], st: &mut LinkState, batch: Option<&[u8]>) -> Use {
        if name.is_empty() {
            if !*self.unnamed_here {
                if let Some(body) = self.client.unnamed() {
                    let mut body = body.to_vec();
                    if let Some(runs) = self.client.unnamed_runs().cloned() {
                        let here = self.make_present(&runs, st);
                        let (text, types) = cstr(&body).unwrap_or_default();
                        let mut renamed = super::execute_text(text, &here.name).unwrap_or_default();
                        renamed.push(0);
                        renamed.extend_from_slice(types);
                        body = renamed;
                    }
                    pgwire::encode::parse(self.out, b"", &body);
                    self.expect.push_entry(Msg::Parse, false, None);
                } else {
                    // The client has none: neither may the server, which then says so.
                    pgwire::encode::close(self.out, b'S', b"");
                    self.expect.push_entry(Msg::Close, false, None);
                }
                st.unsynced = true;
                *self.unnamed_here = true;
            }
            return Use::Ready(None);
        }
        if self.expect.verifying {
            return Use::Wait;
        }
        let known = self.client.named(name).expect("planned");
        if self.expect.verify_renews && self.expect.verify_failed == Some(known.id) {
            // The description checked on this server differs, and the batch is one a retry
            // would send again: it moves to a fresh statement now, parsed in the implicit
            // transaction the check's own Parse began, whose locks keep the tables as the
            // fresh statement sees them until the batch's Sync.
            self.expect.verify_failed = None;
            self.expect.verify_renews = false;
            let known = known.clone();
            return self.ensure_elsewhere(known, st, batch, false, true);
        }
        // The usual case, one reference taken (the statement is shared by clients on every
        // worker: its count is touched once per Bind, as before).
        if let Some(u) = settled(self.expect, self.server, known) {
            return u;
        }
        let known = known.clone();
        self.ensure_elsewhere(known, st, batch, false, false)
    }

    /// [`Link::ensure`] for a statement an SQL `EXECUTE` runs: a Sync follows what pgcorral
    /// sends before it (a simple Query comes next, which the server would skip after an error).
    fn ensure_sql(&mut self, known: Arc<Statement>, st: &mut LinkState) -> Use {
        if self.expect.verifying {
            return Use::Wait;
        }
        if let Some(u) = settled(self.expect, self.server, &known) {
            return u;
        }
        self.ensure_elsewhere(known, st, None, true, false)
    }

    /// [`Link::ensure`] for a statement not prepared on this server (`sync`: see
    /// [`Link::ensure_sql`]; `renew`: the statement is retired and the batch may move to a
    /// fresh one, as a retry would).
    fn ensure_elsewhere(
        &mut self,
        mut stmt: Arc<Statement>,
        st: &mut LinkState,
        batch: Option<&[u8]>,
        sync: bool,
        renew: bool,
    ) -> Use {
        // Judged before anything of pgcorral's own is sent for it.
        let renewable = self.retry && batch.is_some_and(|b| renewable_batch(b, st));
        if stmt.is_retired() {
            if renew || self.expect.replay.in_retry() || renewable {
                let fresh = self.registry.renew(&stmt);
                self.client.replace(stmt.id, &fresh);
                stmt = fresh;
            } else if stmt.shape.get().is_some() {
                return Use::Changed;
            }
        }
        if let Some(here) = self.server.name_of(&stmt) {
            return Use::Ready(Some((stmt.id, here)));
        }
        let parsed = self.prepare_on_server(&stmt, st, false, None);
        let verify = parsed && stmt.shape.get().is_some();
        if verify {
            pgwire::encode::describe(self.out, b'S', stmt.name.as_bytes());
            self.expect.push_verify(stmt.id, renewable);
        }
        if parsed && sync {
            pgwire::encode::sync(self.out);
            st.on_sync();
            self.expect.push_entry(Msg::Sync, false, None);
        } else if verify {
            pgwire::encode::flush(self.out);
        }
        if verify {
            return Use::Wait;
        }
        Use::Ready(Some((stmt.id, stmt)))
    }

    /// The client's Bind, Describe or SQL `EXECUTE` (header `h`, wholly buffered) of a
    /// statement whose result type changed: answered with PostgreSQL's error, which fails the
    /// transaction on the server too (see [`Link::fail_as`]); the rest of a batch is dropped.
    fn changed(&mut self, h: Header, st: &mut LinkState) -> Applied {
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
        self.fail_as(e.freeze(), h.tag == fe::QUERY, st);
        Applied {
            consume: h.total_len(),
            pass: 0,
        }
    }

    /// Answers the client's message with `error` (a whole ErrorResponse), as PostgreSQL would
    /// have: the server is sent a statement that fails (a Query when `query`, else a Parse in
    /// the client's batch, whose rest is dropped), so that its transaction fails as the
    /// client's would, and its error is replaced by `error`; but in a transaction aborted
    /// before, where PostgreSQL answers 25P02 first, the server's 25P02 is the answer.
    fn fail_as(&mut self, error: Bytes, query: bool, st: &mut LinkState) {
        let reword = Reword {
            instead: Some(error),
            ..Reword::default()
        };
        if query {
            pgwire::encode::query(self.out, FAILS);
            st.on_request();
            self.expect.push_reworded(Msg::Query, None, reword);
        } else {
            pgwire::encode::parse(
                self.out,
                DUP.as_bytes(),
                format!("{FAILS}\0\0\0").as_bytes(),
            );
            pgwire::encode::flush(self.out);
            st.unsynced = true;
            self.expect.push_reworded(Msg::Parse, None, reword);
            self.expect.dropping = true;
        }
    }

    /// Makes `stmt` exist on the server before a Parse whose text is an `EXECUTE` of it (or
    /// before another statement that runs it); returns the statement whose name it has there.
    /// (An SQL `EXECUTE` in a Query takes [`Link::ensure_sql`].)
    fn make_present(&mut self, stmt: &Arc<Statement>, st: &mut LinkState) -> Arc<Statement> {
        if let Some(here) = self.server.name_of(stmt) {
            return here;
        }
        self.prepare_on_server(stmt, st, false, None);
        stmt.clone()
    }

    /// Sends a Parse of `stmt` under its server name, with the parameter types its first
    /// Parse resolved (see [`Statement::parse_body`]), and a Describe (hidden) when what it
    /// resolves is not known yet; its answer reaches the client when the Parse is the
    /// client's own (`client_name`). An SQL-level statement not resolved yet is prepared with
    /// its own `PREPARE` instead (then false is returned).
    fn prepare_on_server(
        &mut self,
        stmt: &Arc<Statement>,
        st: &mut LinkState,
        forward: bool,
        client_name: Option<&[u8]>,
    ) -> bool {
        self.tally.server_parses += 1;
        let runs_as = stmt.runs.as_ref().map(|r| self.make_present(r, st));
        let Some(body) = stmt.parse_body(runs_as.as_ref().map(|r| r.name.as_str())) else {
            let Source::Sql(rest) = &stmt.source else {
                unreachable!("a Parse has a body")
            };
            self.evict_for(stmt, st);
            pgwire::encode::query(self.out, &format!("PREPARE {} {rest}", stmt.name));
            st.on_request();
            self.expect
                .push_entry(Msg::Query, false, Some(undo(stmt, None)));
            self.resolve_sql(stmt, st, false);
            return false;
        };
        self.evict_for(stmt, st);
        pgwire::encode::parse(self.out, stmt.name.as_bytes(), &body);
        st.unsynced = true;
        self.expect
            .push_entry(Msg::Parse, forward, Some(undo(stmt, client_name)));
        if stmt.shape.get().is_none() {
            pgwire::encode::describe(self.out, b'S', stmt.name.as_bytes());
            self.expect.push_hidden_describe(stmt.id);
        }
        true
    }

    /// Records `stmt` as prepared on the server, closing the least recently used statements
    /// there first while the server is at max_prepared_statements (several when it was
    /// lowered), and any gone stale.
    fn evict_for(&mut self, stmt: &Arc<Statement>, st: &mut LinkState) {
        let evicted = self.server.insert(stmt, self.max);
        let stale = self.server.take_stale();
        for name in stale.iter().chain(evicted.as_ref().map(|old| &old.name)) {
            pgwire::encode::close(self.out, b'S', name.as_bytes());
            st.unsynced = true;
            self.expect.push_entry(Msg::Close, false, None);
        }
    }
}

/// What the client's statement `known` needs when it is settled without preparing anything:
/// its description was found changed while the message waited, or it is prepared here.
fn settled(expect: &mut Expected, server: &mut ServerStatements, known: &Statement) -> Option<Use> {
    if expect.verify_failed.take_if(|id| *id == known.id).is_some() {
        return Some(Use::Changed);
    }
    server
        .name_of(known)
        .map(|here| Use::Ready(Some((known.id, here))))
}

/// Whether the batch starting with the Bind at the start of `buf` is one [`super::replay`]
/// would send again after a stale-plan error: it begins with that Bind (nothing outstanding,
/// no transaction open) and is buffered through its Sync, with only Describe of the portal,
/// Execute and Flush between, a Describe among them (the client learns the new row shape).
fn renewable_batch(buf: &[u8], st: &LinkState) -> bool {
    if st.pending != 0 || st.unsynced || st.tx != pgwire::backend::TxStatus::Idle {
        return false;
    }
    let (mut pos, mut describes) = (0, false);
    let mut first = true;
    while let Some(&[tag, a, b, c, d]) = buf.get(pos..pos + HEADER_LEN) {
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        if len < 4 || buf.len() < pos + 1 + len {
            return false;
        }
        match tag {
            fe::BIND if first => {}
            fe::DESCRIBE if buf.get(pos + HEADER_LEN) == Some(&b'P') => describes = true,
            fe::EXECUTE | fe::FLUSH => {}
            fe::SYNC => return describes,
            _ => return false,
        }
        first = false;
        pos += 1 + len;
    }
    false
}

/// [`Applied`] for a message that waits.
const WAIT: Applied = Applied {
    consume: 0,
    pass: 0,
};

fn undo(stmt: &Statement, client_name: Option<&[u8]>) -> Box<Undo> {
    Box::new(Undo {
        stmt: Some(stmt.id),
        client_name: client_name.map(Into::into),
        ..Undo::default()
    })
}

/// The command of a Query body, when it is one pgcorral handles.
fn query_command(body: &[u8]) -> Option<Command<'_>> {
    let text = fe::query_text(body)?;
    sql::parse(text)
}

/// A message consumed whole (rewritten or answered by pgcorral).
fn consumed(h: Header) -> Applied {
    Applied {
        consume: h.total_len(),
        pass: 0,
    }
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

    #[test]
    fn malformed_parses_are_left_to_the_server() {
        assert!(well_formed_parse(b"s\0select 1\0\0\0"));
        assert!(well_formed_parse(b"\0select $1\0\0\x01\0\0\0\x17"));
        for bad in [
            &b""[..],
            b"s2",
            b"s\0select 1",
            b"s\0select 1\0",
            b"s\0select 1\0\0",
            b"s\0select 1\0\0\x01\0\0",
            b"s\0select 1\0\0\0extra",
        ] {
            assert!(!well_formed_parse(bad), "{bad:?}");
        }
    }

    /// A Bind of a statement a schema change retired moves to a new statement at once only
    /// where pgcorral would have retried the batch: it begins the batch outside a transaction
    /// and the batch describes its portal.
    #[test]
    fn renewable_batches_begin_with_the_bind_and_describe_the_portal() {
        let mut b = BytesMut::new();
        pgwire::encode::message(&mut b, fe::BIND, |m| {
            m.extend_from_slice(b"\0s\0\0\0\0\0\0\0")
        });
        let bind = b.split().freeze();
        pgwire::encode::describe(&mut b, b'P', b"");
        let describe = b.split().freeze();
        pgwire::encode::message(&mut b, fe::EXECUTE, |m| m.extend_from_slice(b"\0\0\0\0\0"));
        let execute = b.split().freeze();
        pgwire::encode::sync(&mut b);
        let sync = b.split().freeze();
        let idle = LinkState::default();
        let batch = |parts: &[&[u8]]| parts.concat();
        assert!(renewable_batch(
            &batch(&[&bind, &describe, &execute, &sync]),
            &idle
        ));
        assert!(
            !renewable_batch(&batch(&[&bind, &execute, &sync]), &idle),
            "no Describe"
        );
        assert!(
            !renewable_batch(&batch(&[&bind, &describe, &execute]), &idle),
            "no Sync yet"
        );
        let in_tx = LinkState {
            tx: pgwire::backend::TxStatus::InTransaction,
            ..idle
        };
        assert!(!renewable_batch(
            &batch(&[&bind, &describe, &execute, &sync]),
            &in_tx
        ));
        let unsynced = LinkState {
            unsynced: true,
            ..idle
        };
        assert!(!renewable_batch(
            &batch(&[&bind, &describe, &sync]),
            &unsynced
        ));
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
