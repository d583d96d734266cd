//! Unit tests of the relay's scans and its loop over socket pairs.

use super::scan::*;
use super::*;
use crate::prepared::expect::Msg;
use crate::server::ServerParams;
use pgwire::frontend;
use pgwire::Header;

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// [`scan_client`] without prepared-statement tracking, nothing custom collected.
fn scan_plain_client(
    buf: &[u8],
    pass: &mut usize,
    st: &mut LinkState,
    track: Track,
) -> Result<ClientScan, FrameError> {
    scan_client(
        buf,
        pass,
        st,
        track,
        &HookMap::quiet(),
        &mut Default::default(),
        1 << 20,
        None,
    )
}

/// [`scan_server`] in transaction mode without prepared-statement tracking.
fn scan_plain(buf: &[u8], pass: &mut usize, st: &mut LinkState) -> ServerScan {
    scan_server(
        buf,
        pass,
        st,
        &mut Default::default(),
        true,
        false,
        1 << 20,
        None,
    )
    .unwrap()
}

#[test]
fn server_scan_stops_after_idle_ready() {
    let mut buf = msg(b'T', b"rowdesc");
    buf.extend(msg(b'D', b"row"));
    buf.extend(msg(b'C', b"SELECT 1\0"));
    let z_end = buf.len() + 6;
    buf.extend(msg(b'Z', b"I"));
    buf.extend(msg(b'N', b"later"));
    let mut st = LinkState {
        pending: 1,
        ..Default::default()
    };
    let mut pass = 0;
    let s = scan_plain(&buf, &mut pass, &mut st);
    assert_eq!(s.ready, z_end);
    assert_eq!(s.stop, Some(Outcome::Idle));
    assert!(st.is_idle());
}

#[test]
fn server_scan_passes_partial_bodies() {
    let full = msg(b'D', &[7u8; 100]);
    let mut st = LinkState {
        pending: 1,
        ..Default::default()
    };
    let mut pass = 0;
    let s = scan_plain(&full[..40], &mut pass, &mut st);
    assert_eq!(s.ready, 40);
    assert_eq!(pass, 104 - 40 + 1);
    let s = scan_plain(&full[40..], &mut pass, &mut st);
    assert_eq!(s.ready, full.len() - 40);
    assert_eq!(pass, 0);
}

#[test]
fn server_scan_waits_for_whole_ready_and_keeps_transactions() {
    let z = msg(b'Z', b"T");
    let mut st = LinkState {
        pending: 1,
        ..Default::default()
    };
    let mut pass = 0;
    let s = scan_plain(&z[..3], &mut pass, &mut st);
    assert_eq!((s.ready, s.done), (0, Done::default()));
    let s = scan_plain(&z, &mut pass, &mut st);
    assert_eq!(s.ready, z.len());
    assert_eq!(s.stop, None);
    assert_eq!(st.tx, TxStatus::InTransaction);
    assert_eq!(
        s.done,
        Done {
            queries: 1,
            transactions: 0
        }
    );
    // Two answers in one read (pipelined queries): each ends a query, the idle one a
    // transaction.
    let mut two = msg(b'Z', b"I");
    two.extend(msg(b'Z', b"T"));
    st.pending = 2;
    let s = scan_plain(&two, &mut 0, &mut st);
    assert_eq!(
        s.done,
        Done {
            queries: 2,
            transactions: 1
        }
    );
}

#[test]
fn statement_mode_holds_back_transaction_ready() {
    let mut buf = msg(b'C', b"BEGIN\0");
    let before = buf.len();
    buf.extend(msg(b'Z', b"T"));
    let mut st = LinkState {
        pending: 1,
        ..Default::default()
    };
    let s = scan_server(
        &buf,
        &mut 0,
        &mut st,
        &mut Default::default(),
        true,
        true,
        1 << 20,
        None,
    )
    .unwrap();
    assert_eq!(s.ready, before);
    assert_eq!(s.stop, Some(Outcome::TransactionRefused));
}

#[test]
fn fatal_error_marks_broken() {
    let buf = msg(b'E', b"SFATAL\0VFATAL\0C57P01\0Mbye\0\0");
    let mut st = LinkState {
        pending: 1,
        ..Default::default()
    };
    let s = scan_plain(&buf, &mut 0, &mut st);
    assert!(s.fatal && st.broken);
}

#[test]
fn client_scan_counts_requests_and_syncs() {
    let mut buf = msg(b'P', b"\0select 1\0\0\0");
    buf.extend(msg(b'B', b"\0\0\0\0\0\0\0\0"));
    buf.extend(msg(b'E', b"\0\0\0\0\0"));
    let mut st = LinkState::default();
    let mut pass = 0;
    let s = scan_plain_client(&buf, &mut pass, &mut st, Track::Pin).unwrap();
    assert_eq!(s.ready, buf.len());
    assert!(st.unsynced && st.pending == 0);
    let mut more = msg(b'S', b"");
    more.extend(msg(b'Q', b"select 2\0"));
    let s = scan_plain_client(&more, &mut pass, &mut st, Track::Pin).unwrap();
    assert_eq!(s.ready, more.len());
    assert!(!st.unsynced);
    assert_eq!(st.pending, 2);
}

#[test]
fn client_scan_stops_at_terminate_and_bad_tags() {
    let mut buf = msg(b'Q', b"x\0");
    let q = buf.len();
    buf.extend(msg(b'X', b""));
    let mut st = LinkState::default();
    let s = scan_plain_client(&buf, &mut 0, &mut st, Track::Pin).unwrap();
    assert_eq!((s.ready, s.terminate), (q, true));
    let bad = msg(b'?', b"");
    let s = scan_plain_client(&bad, &mut 0, &mut st, Track::Pin).unwrap();
    assert_eq!((s.ready, s.bad_tag), (0, Some(b'?')));
    assert!(scan_plain_client(b"Q\x7f\xff\xff\xff", &mut 0, &mut st, Track::Pin).is_err());
}

/// Scans one message per tag (empty bodies; ReadyForQuery says idle) from the client or server.
fn client_sends(st: &mut LinkState, tags: &str) {
    let mut buf = Vec::new();
    for t in tags.bytes() {
        buf.extend(msg(t, b""));
    }
    let s = scan_plain_client(&buf, &mut 0, st, Track::Pin).unwrap();
    assert_eq!(s.ready, buf.len());
}

fn server_sends(st: &mut LinkState, tags: &str) -> Option<Outcome> {
    let mut buf = Vec::new();
    for t in tags.bytes() {
        buf.extend(msg(t, if t == b'Z' { b"I" } else { b"" }));
    }
    scan_plain(&buf, &mut 0, st).stop
}

#[test]
fn extended_copy_in_syncs_after_execute_are_uncounted() {
    // tokio-postgres/libpq: Bind, Execute, Sync; CopyInResponse; data, CopyDone, Sync.
    let mut st = LinkState::default();
    client_sends(&mut st, "BES");
    assert_eq!(st.pending, 1);
    assert_eq!(server_sends(&mut st, "2G"), None);
    assert_eq!((st.pending, st.unsynced), (0, true));
    client_sends(&mut st, "ddcS");
    assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));
    assert!(st.is_idle());

    // The same after an error in the data: one ReadyForQuery, after the last Sync.
    client_sends(&mut st, "BES");
    server_sends(&mut st, "2GE");
    assert!(!st.is_idle());
    client_sends(&mut st, "dcS");
    assert_eq!(server_sends(&mut st, "Z"), Some(Outcome::Idle));
}

#[test]
fn extended_copy_in_pipelined_with_flush_and_extra_syncs() {
    let mut st = LinkState::default();
    client_sends(&mut st, "PBEHSSdcSQ");
    assert_eq!(st.pending, 4);
    assert_eq!(server_sends(&mut st, "12GCZ"), None);
    assert_eq!(st.pending, 1);
    assert_eq!(server_sends(&mut st, "TDCZ"), Some(Outcome::Idle));
}

#[test]
fn syncs_sent_in_copy_in_mode_are_ignored() {
    let mut st = LinkState::default();
    client_sends(&mut st, "BEH");
    server_sends(&mut st, "2G");
    client_sends(&mut st, "SH");
    assert_eq!(st.pending, 0);
    client_sends(&mut st, "dcS");
    assert_eq!(st.pending, 1);
    assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));
}

#[test]
fn simple_copy_in_and_copy_after_answered_batches_count_as_before() {
    let mut st = LinkState::default();
    client_sends(&mut st, "Q");
    server_sends(&mut st, "G");
    assert_eq!((st.pending, st.unsynced), (1, false));
    client_sends(&mut st, "dc");
    assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));

    client_sends(&mut st, "BES");
    assert_eq!(server_sends(&mut st, "2CZ"), Some(Outcome::Idle));
    client_sends(&mut st, "Q");
    server_sends(&mut st, "G");
    assert_eq!((st.pending, st.unsynced), (1, false));
    client_sends(&mut st, "c");
    assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));

    // A batch with Query pipelined behind it: its CopyInResponse is the Query's.
    client_sends(&mut st, "BESQ");
    assert_eq!(server_sends(&mut st, "2CZ"), None);
    server_sends(&mut st, "G");
    assert_eq!(st.pending, 1);
    client_sends(&mut st, "c");
    assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));
}

/// What a link to one server keeps for prepared statements, for scans with tracking on.
#[derive(Default)]
struct Tracked {
    registry: Registry,
    client: crate::prepared::ClientStatements,
    server: crate::prepared::ServerStatements,
    /// The server's parameters, as its ParameterStatus messages set them.
    params: ServerParams,
    expect: crate::prepared::expect::Expected,
    wout: bytes::BytesMut,
    fout: bytes::BytesMut,
    unnamed_here: bool,
    tally: crate::pool::stats::Totals,
    /// Client and server bytes not scanned yet, and what of a body passes still.
    cbuf: Vec<u8>,
    cpass: usize,
    sbuf: Vec<u8>,
    spass: usize,
}

impl Tracked {
    /// Scans client bytes with tracking on.
    fn client(&mut self, buf: &[u8], pass: &mut usize, st: &mut LinkState) -> ClientScan {
        let mut link = Link {
            registry: &self.registry,
            max: 0,
            client: &mut self.client,
            server: &mut self.server,
            expect: &mut self.expect,
            out: &mut self.wout,
            unnamed_here: &mut self.unnamed_here,
            tally: &mut self.tally,
            retry: true,
        };
        scan_client(
            buf,
            pass,
            st,
            Track::Pin,
            &HookMap::quiet(),
            &mut Default::default(),
            1 << 20,
            Some(&mut link),
        )
        .unwrap()
    }

    /// Scans server bytes with tracking on; what reaches the client (pgcorral's answers
    /// first, then the server's bytes it forwards).
    fn server(
        &mut self,
        buf: &[u8],
        pass: &mut usize,
        st: &mut LinkState,
    ) -> (ServerScan, Vec<u8>) {
        let mut answers = Answers {
            registry: &self.registry,
            expect: &mut self.expect,
            server: &mut self.server,
            client: &mut self.client,
            out: &mut self.fout,
        };
        let s = scan_server(
            buf,
            pass,
            st,
            &mut self.params,
            true,
            false,
            1 << 20,
            Some(&mut answers),
        )
        .unwrap();
        let mut shown = self.fout.split().to_vec();
        shown.extend_from_slice(&buf[s.front..s.ready]);
        (s, shown)
    }
}

impl Tracked {
    /// What the server gets for client bytes `bytes` (scanned again after each message
    /// pgcorral rewrites, as the relay does).
    fn send(&mut self, bytes: &[u8], st: &mut LinkState) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.cbuf);
        let mut pass = self.cpass;
        buf.extend_from_slice(bytes);
        let mut to_server = Vec::new();
        loop {
            let s = self.client(&buf, &mut pass, st);
            to_server.extend_from_slice(&self.wout.split());
            to_server.extend_from_slice(&buf[s.front..s.ready]);
            buf.drain(..s.ready);
            if !s.again {
                (self.cbuf, self.cpass) = (buf, pass);
                return to_server;
            }
        }
    }

    /// What the client gets for server bytes `bytes`, as tags of whole messages (scanned
    /// again where pgcorral
    /// answers or hides something, as the relay does); what ends part-way through a
    /// message pgcorral must see whole waits for the next bytes.
    fn receive(&mut self, bytes: &[u8], st: &mut LinkState) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.sbuf);
        let mut pass = self.spass;
        buf.extend_from_slice(bytes);
        let mut shown = Vec::new();
        loop {
            let (s, part) = self.server(&buf, &mut pass, st);
            shown.extend_from_slice(&part);
            buf.drain(..s.ready);
            if !s.again {
                (self.sbuf, self.spass) = (buf, pass);
                return shown;
            }
        }
    }
}

fn msgs(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    msg(b'P', format!("{name}\0{sql}\0\0\0").as_bytes())
}

fn bind(stmt: &str) -> Vec<u8> {
    msg(b'B', format!("\0{stmt}\0\0\0\0\0\0\0").as_bytes())
}

/// A SELECT's whole answer, ReadyForQuery included.
fn rows() -> Vec<u8> {
    msgs(&[
        msg(b'T', b"\0\0"),
        msg(b'D', b"\0\0"),
        msg(b'C', b"SELECT 1\0"),
        msg(b'Z', b"I"),
    ])
}

/// The answers to pgcorral's hidden Describe after a client's Parse (no parameters, no rows).
fn described() -> Vec<u8> {
    msgs(&[msg(b't', b"\0\0"), msg(b'n', b"")])
}

/// Plain Queries are counted, not queued; pipelined with extended-protocol messages that
/// pgcorral rewrites and answers itself, every answer still comes out in order.
#[test]
fn counted_queries_mix_with_tracked_messages_in_one_pipeline() {
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    // Counted; then a named Parse (prepared under pgcorral's name, with a hidden Describe)
    // and its Sync; then a Query behind them, which is queued (something tracked is owed
    // before it).
    let sent = t.send(
        &msgs(&[
            msg(b'Q', b"select 1\0"),
            parse("s1", "select 2"),
            msg(b'S', b""),
            msg(b'Q', b"select 3\0"),
        ]),
        &mut st,
    );
    assert_eq!(tags_of(&sent), "QPDSQ");
    assert!(String::from_utf8_lossy(&sent).contains("pgcorral_1\0select 2"));
    assert_eq!(st.pending, 3);
    let answer = msgs(&[rows(), msg(b'1', b""), described(), msg(b'Z', b"I"), rows()]);
    assert_eq!(tags_of(&t.receive(&answer, &mut st)), "TDCZ1ZTDCZ");
    assert!(t.expect.is_empty() && st.is_idle());

    // The same text under another name: parsed on the server all the same (then found to
    // be the same statement), after the counted Query before it; an error in a counted Query
    // is just forwarded.
    let sent = t.send(
        &msgs(&[
            msg(b'Q', b"select 1/0\0"),
            parse("s2", "select 2"),
            bind("s2"),
            msg(b'E', b"\0\0\0\0\0"),
            msg(b'S', b""),
        ]),
        &mut st,
    );
    assert_eq!(tags_of(&sent), "QPDBES");
    let answer = msgs(&[
        msg(b'E', b"SERROR\0C22012\0Mdivision by zero\0\0"),
        msg(b'Z', b"I"),
        msg(b'1', b""),
        described(),
        msg(b'2', b""),
        msg(b'D', b"\0\0"),
        msg(b'C', b"SELECT 1\0"),
        msg(b'Z', b"I"),
    ]);
    assert_eq!(tags_of(&t.receive(&answer, &mut st)), "EZ12DCZ");
    assert!(t.expect.is_empty() && st.is_idle());
    assert_eq!(t.client.count(), 2);
    assert_eq!(
        t.client.named(b"s1").map(|s| s.id),
        t.client.named(b"s2").map(|s| s.id),
        "one statement"
    );
    // s2's copy on the server is closed before the next prepare there.
    assert_eq!(t.server.take_stale().len(), 1);

    // Answers split anywhere between reads come out the same.
    let answer = msgs(&[rows(), msg(b'1', b""), described(), msg(b'Z', b"I"), rows()]);
    for cut in 0..answer.len() {
        let mut st = LinkState::default();
        t.send(
            &msgs(&[
                msg(b'Q', b"select 1\0"),
                parse("s3", "select 3"),
                msg(b'S', b""),
                msg(b'Q', b"select 3\0"),
            ]),
            &mut st,
        );
        let mut shown = t.receive(&answer[..cut], &mut st);
        shown.extend(t.receive(&answer[cut..], &mut st));
        assert_eq!(tags_of(&shown), "TDCZ1ZTDCZ", "cut at {cut}");
        assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
        // s3 is closed by the client, so the next round prepares it again.
        t.client.remove_named(b"s3");
        t.server.clear();
    }
}

/// Only counted Queries owed: their answers pass without a look, wherever reads split
/// them, each ending at its ReadyForQuery; a batch sent while they are answered is tracked
/// behind them.
#[test]
fn counted_queries_alone_and_then_with_a_batch_behind_them() {
    let answer = msgs(&[rows(), rows(), rows()]);
    for cut in 0..answer.len() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        let q = msg(b'Q', b"select 1\0");
        let sent = t.send(&msgs(&[q.clone(), q.clone(), q.clone()]), &mut st);
        assert_eq!(sent, msgs(&[q.clone(), q.clone(), q]));
        assert!(t.expect.only_counted());
        let mut shown = t.receive(&answer[..cut], &mut st);
        shown.extend(t.receive(&answer[cut..], &mut st));
        assert_eq!(tags_of(&shown), "TDCZTDCZTDCZ", "cut at {cut}");
        assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
    }

    let first = rows();
    for cut in 0..first.len() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        let q = msg(b'Q', b"select 1\0");
        t.send(&msgs(&[q.clone(), q]), &mut st);
        let mut shown = t.receive(&first[..cut], &mut st);
        // A Close of a statement of the client's: pgcorral answers it, after the two counted
        // Queries' answers.
        t.client.add_named(
            b"s1",
            t.registry.fresh(
                crate::prepared::Source::Parse(bytes::Bytes::from_static(b"select 2\0\0\0")),
                None,
            ),
        );
        let sent = t.send(&msgs(&[msg(b'C', b"Ss1\0"), msg(b'S', b"")]), &mut st);
        assert_eq!(tags_of(&sent), "S");
        assert!(!t.expect.only_counted());
        shown.extend(t.receive(&first[cut..], &mut st));
        shown.extend(t.receive(&msgs(&[rows(), msg(b'Z', b"I")]), &mut st));
        assert_eq!(tags_of(&shown), "TDCZTDCZ3Z", "cut at {cut}");
        assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
    }
}

/// After an error in an extended batch whose Sync is not sent yet, PostgreSQL ignores
/// everything up to that Sync: a Query then is neither counted nor owed anything.
#[test]
fn a_query_while_the_server_skips_to_sync_is_not_counted() {
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    t.send(&parse("s1", "select bad"), &mut st);
    let e = msg(b'E', b"SERROR\0C42703\0Mno\0\0");
    assert_eq!(tags_of(&t.receive(&e, &mut st)), "E");
    assert!(t.expect.skipping);
    t.send(&msgs(&[msg(b'Q', b"select 1\0"), msg(b'S', b"")]), &mut st);
    assert_eq!(tags_of(&t.receive(&msg(b'Z', b"I"), &mut st)), "Z");
    assert!(t.expect.is_empty());
    assert!(
        t.client.named(b"s1").is_none(),
        "the failed Parse is undone"
    );
}

/// What pgbench -M extended sends for one statement: the unnamed one parsed, bound,
/// described, executed, synced.
fn unnamed_batch(sql: &str) -> Vec<u8> {
    msgs(&[
        parse("", sql),
        bind(""),
        msg(b'D', b"P\0"),
        msg(b'E', b"\0\0\0\0\0"),
        msg(b'S', b""),
    ])
}

/// Its answer: ParseComplete, BindComplete, the rows and ReadyForQuery.
fn unnamed_answer() -> Vec<u8> {
    msgs(&[msg(b'1', b""), msg(b'2', b""), rows()])
}

/// A batch of the unnamed statement, wholly buffered, is counted: sent as it is, nothing
/// queued or kept for a retry, its Parse remembered; its answers pass wherever reads split
/// them. Split across the client's reads it is tracked as before, to the same effect.
#[test]
fn an_unnamed_batch_is_counted_and_split_ones_are_tracked() {
    let batch = unnamed_batch("select 1");
    let answer = unnamed_answer();
    for cut in 0..answer.len() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        assert_eq!(t.send(&batch, &mut st), batch);
        assert!(t.expect.only_counted() && t.expect.replay.is_idle());
        assert_eq!(t.client.unnamed(), Some(&b"select 1\0\0\0"[..]));
        assert!(t.unnamed_here);
        let mut shown = t.receive(&answer[..cut], &mut st);
        shown.extend(t.receive(&answer[cut..], &mut st));
        assert_eq!(tags_of(&shown), "12TDCZ", "cut at {cut}");
        assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
    }
    for cut in 0..batch.len() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        let mut sent = t.send(&batch[..cut], &mut st);
        assert!(!t.expect.only_counted() || cut == 0, "cut at {cut}");
        sent.extend(t.send(&batch[cut..], &mut st));
        assert_eq!(sent, batch, "cut at {cut}");
        assert_eq!(t.client.unnamed(), Some(&b"select 1\0\0\0"[..]));
        assert_eq!(tags_of(&t.receive(&answer, &mut st)), "12TDCZ");
        assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
    }
}

/// While only counted Queries are owed, the messages the server scan looks at are still
/// seen among those it passes whole: a ParameterStatus updates the server's parameters, an
/// error is counted and a FATAL one marks the link broken.
#[test]
fn counted_answers_still_show_parameters_and_errors() {
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    let q = msg(b'Q', b"select 1\0");
    assert_eq!(t.send(&q, &mut st), q);
    assert!(t.expect.only_counted());
    let answer = msgs(&[
        rows_without_ready(),
        msg(b'S', b"TimeZone\0UTC\0"),
        msg(b'N', b"SNOTICE\0C00000\0Mhello\0\0"),
        msg(b'E', b"SFATAL\0C57P01\0Mbye\0\0"),
        msg(b'Z', b"I"),
    ]);
    let (s, shown) = t.server(&answer, &mut 0, &mut st);
    assert_eq!(shown, answer);
    assert!(t.params.iter().any(|(k, v)| k == "TimeZone" && v == "UTC"));
    assert_eq!((s.n_errors, s.errors[0]), (1, *b"57"));
    assert!(s.fatal && st.broken);
    assert_eq!(s.done.queries, 1);
}

/// [`rows`] but its ReadyForQuery.
fn rows_without_ready() -> Vec<u8> {
    let r = rows();
    r[..r.len() - 6].to_vec()
}

/// A counted batch that parses the unnamed statement twice, with a Flush inside: one
/// request owed, the second text remembered, its answers end idle; and two such batches in
/// one read are owed two.
#[test]
fn a_counted_batch_with_two_parses_and_a_flush() {
    let batch = msgs(&[
        parse("", "select 1"),
        bind(""),
        msg(b'E', b"\0\0\0\0\0"),
        msg(b'H', b""),
        parse("", "select 2"),
        bind(""),
        msg(b'D', b"P\0"),
        msg(b'E', b"\0\0\0\0\0"),
        msg(b'S', b""),
    ]);
    let answer = msgs(&[
        msg(b'1', b""),
        msg(b'2', b""),
        msg(b'D', b"\0\x01\0\0\0\x011"),
        msg(b'C', b"SELECT 1\0"),
        msg(b'1', b""),
        msg(b'2', b""),
        rows(),
    ]);
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    assert_eq!(t.send(&batch, &mut st), batch);
    assert_eq!((st.pending, st.unsynced), (1, false));
    assert!(t.expect.only_counted());
    assert_eq!(t.client.unnamed(), Some(&b"select 2\0\0\0"[..]));
    assert_eq!(tags_of(&t.receive(&answer, &mut st)), "12DC12TDCZ");
    assert!(t.expect.is_empty() && st.is_idle());

    let two = msgs(&[batch.clone(), batch]);
    assert_eq!(t.send(&two, &mut st), two);
    assert_eq!((st.pending, st.unsynced), (2, false));
    let answers = msgs(&[answer.clone(), answer]);
    assert_eq!(
        tags_of(&t.receive(&answers, &mut st)),
        "12DC12TDCZ12DC12TDCZ"
    );
    assert!(t.expect.is_empty() && st.is_idle());
}

/// What a counted batch cannot be: one that uses a named statement, or the unnamed one
/// without parsing it first, or holds a Query.
#[test]
fn batches_that_need_tracking_are_not_counted() {
    for batch in [
        msgs(&[parse("s1", "select 1"), bind("s1"), msg(b'S', b"")]),
        msgs(&[parse("", "select 1"), bind("s1"), msg(b'S', b"")]),
        msgs(&[parse("", "select 1"), msg(b'D', b"Ss1\0"), msg(b'S', b"")]),
        msgs(&[parse("", "select 1"), msg(b'C', b"Ss1\0"), msg(b'S', b"")]),
        msgs(&[bind(""), msg(b'E', b"\0\0\0\0\0"), msg(b'S', b"")]),
        msgs(&[
            parse("", "select 1"),
            msg(b'Q', b"select 1\0"),
            msg(b'S', b""),
        ]),
        msgs(&[
            parse("", "select 1"),
            parse("s2", "select 2"),
            msg(b'S', b""),
        ]),
    ] {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        t.client.add_named(
            b"s1",
            t.registry.fresh(
                crate::prepared::Source::Parse(bytes::Bytes::from_static(b"select 1\0\0\0")),
                None,
            ),
        );
        t.send(&batch, &mut st);
        assert!(!t.expect.only_counted(), "{:?}", tags_of(&batch));
    }
    // Behind anything owed, a batch is tracked too.
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    t.send(&parse("s1", "select 1"), &mut st);
    t.send(&unnamed_batch("select 2"), &mut st);
    assert!(!t.expect.only_counted());
    let answer = msgs(&[msg(b'1', b""), described(), unnamed_answer()]);
    assert_eq!(tags_of(&t.receive(&answer, &mut st)), "112TDCZ");
    assert!(t.expect.is_empty() && st.is_idle());
}

/// Errors inside a counted batch (its Parse, its Execute) reach the client, and its
/// ReadyForQuery still ends it; the failed text is remembered as PostgreSQL's unnamed
/// statement is gone.
#[test]
fn errors_inside_a_counted_batch_end_at_its_ready_for_query() {
    let e = msg(b'E', b"SERROR\0C42601\0Msyntax error\0\0");
    for answer in [
        msgs(&[e.clone(), msg(b'Z', b"I")]),
        msgs(&[msg(b'1', b""), msg(b'2', b""), e, msg(b'Z', b"I")]),
    ] {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        t.send(&unnamed_batch("select bad"), &mut st);
        assert!(t.expect.only_counted());
        assert_eq!(tags_of(&t.receive(&answer, &mut st)), tags_of(&answer));
        assert!(t.expect.is_empty() && st.is_idle() && !t.expect.skipping);
        // The next batch is counted again.
        t.send(&unnamed_batch("select 1"), &mut st);
        assert!(t.expect.only_counted());
        assert_eq!(tags_of(&t.receive(&unnamed_answer(), &mut st)), "12TDCZ");
        assert!(t.expect.is_empty() && st.is_idle());
    }
}

/// Counted batches pipelined with named statements: the named Parse and its hidden Describe
/// are answered after the counted batch's answers, wherever reads split them; a later Bind of
/// the unnamed statement in another relay (another server) parses it again, hidden.
#[test]
fn counted_batches_mix_with_named_statements() {
    let answer = msgs(&[
        unnamed_answer(),
        msg(b'1', b""),
        described(),
        msg(b'2', b""),
        msg(b'C', b"SELECT 1\0"),
        msg(b'Z', b"I"),
    ]);
    for cut in 0..answer.len() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        t.server.insert(
            &t.registry.fresh(
                crate::prepared::Source::Parse(bytes::Bytes::from_static(b"select 2\0\0\0")),
                None,
            ),
            0,
        );
        let sent = t.send(
            &msgs(&[
                unnamed_batch("select 1"),
                parse("s1", "select 2"),
                bind("s1"),
                msg(b'E', b"\0\0\0\0\0"),
                msg(b'S', b""),
            ]),
            &mut st,
        );
        assert_eq!(tags_of(&sent), "PBDESPDBES");
        assert!(String::from_utf8_lossy(&sent).contains("pgcorral_2\0"));
        let mut shown = t.receive(&answer[..cut], &mut st);
        shown.extend(t.receive(&answer[cut..], &mut st));
        assert_eq!(tags_of(&shown), "12TDCZ12CZ", "cut at {cut}");
        assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");

        // Another relay: the unnamed statement is not known to be on this server.
        t.unnamed_here = false;
        let sent = t.send(
            &msgs(&[
                bind(""),
                msg(b'D', b"P\0"),
                msg(b'E', b"\0\0\0\0\0"),
                msg(b'S', b""),
            ]),
            &mut st,
        );
        assert_eq!(tags_of(&sent), "PBDES");
        assert!(sent.windows(9).any(|w| w == b"select 1\0"));
        assert_eq!(tags_of(&t.receive(&unnamed_answer(), &mut st)), "2TDCZ");
        assert!(t.expect.is_empty() && st.is_idle());
    }
}

/// A counted batch keeps nothing for a retry, and the batch of a named statement after it
/// is still retried when the statement went stale.
#[test]
fn a_stale_named_statement_after_counted_batches_is_retried() {
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    t.send(
        &msgs(&[parse("s1", "select * from t"), msg(b'S', b"")]),
        &mut st,
    );
    t.receive(&msgs(&[msg(b'1', b""), msg(b'Z', b"I")]), &mut st);
    t.send(&unnamed_batch("select 1"), &mut st);
    assert!(t.expect.only_counted() && t.expect.replay.is_idle());
    t.receive(&unnamed_answer(), &mut st);
    let named = msgs(&[
        bind("s1"),
        msg(b'D', b"P\0"),
        msg(b'E', b"\0\0\0\0\0"),
        msg(b'S', b""),
    ]);
    assert_eq!(tags_of(&t.send(&named, &mut st)), "BDES");
    let stale = msg(
        b'E',
        b"SERROR\0C0A000\0Mcached plan must not change result type\0\0",
    );
    let mut buf = msgs(&[stale, msg(b'Z', b"I")]);
    let (mut shown, mut replay) = (Vec::new(), false);
    loop {
        let (s, part) = t.server(&buf, &mut 0, &mut st);
        shown.extend(part);
        replay |= s.replay;
        buf.drain(..s.ready);
        if !s.again {
            break;
        }
    }
    assert!(buf.is_empty() && shown.is_empty() && replay);
    assert_eq!(t.expect.replay.take_due().as_deref(), Some(&named[..]));
}

/// COPY FROM STDIN run by a counted batch: PostgreSQL ignores the batch's Sync, so its
/// answers end at the ReadyForQuery of the Sync sent after the COPY.
#[test]
fn copy_in_from_a_counted_batch() {
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    t.send(&unnamed_batch("copy t from stdin"), &mut st);
    assert!(t.expect.only_counted());
    let start = msgs(&[msg(b'1', b""), msg(b'2', b""), msg(b'G', b"\0\0\0")]);
    assert_eq!(tags_of(&t.receive(&start, &mut st)), "12G");
    assert_eq!((st.pending, st.unsynced), (0, true));
    t.send(
        &msgs(&[msg(b'd', b"1\n"), msg(b'c', b""), msg(b'S', b"")]),
        &mut st,
    );
    let (s, shown) = t.server(
        &msgs(&[msg(b'C', b"COPY 1\0"), msg(b'Z', b"I")]),
        &mut 0,
        &mut st,
    );
    assert_eq!(
        (tags_of(&shown), s.stop),
        ("CZ".into(), Some(Outcome::Idle))
    );
    assert!(t.expect.is_empty() && st.is_idle());
}

fn tags_of(mut b: &[u8]) -> String {
    let mut t = String::new();
    while let Ok(Some(h)) = Header::parse(b, 1 << 20) {
        t.push(h.tag as char);
        b = &b[h.total_len().min(b.len())..];
    }
    t
}

/// A Query that may be PREPARE, EXECUTE or DEALLOCATE, whose start arrives in one read and
/// the rest in another, is rewritten all the same: nothing of it is forwarded until its
/// first word shows what it is, nor then if it is one of those, until it is whole.
#[test]
fn a_query_split_across_reads_is_still_rewritten() {
    for sql in [
        "PREPARE p AS SELECT 1",
        "  execute p",
        "DEALLOCATE p",
        "discard all",
    ] {
        let m = msg(b'Q', format!("{sql}\0").as_bytes());
        // Counted or planned: alone, or behind an answer still owed for something else.
        for (cut, queued) in (0..m.len()).flat_map(|c| [(c, false), (c, true)]) {
            let mut t = Tracked::default();
            if !sql.starts_with("PREPARE") {
                // The client has statement p.
                let mut st = LinkState::default();
                let prep = msg(b'Q', b"PREPARE p AS SELECT 1\0");
                t.client(&prep, &mut 0, &mut st);
                t.wout.clear();
                // Its answer, then that of pgcorral's Describe and Sync after it (hidden).
                let answer = msgs(&[
                    msg(b'C', b"PREPARE\0"),
                    msg(b'Z', b"I"),
                    described(),
                    msg(b'Z', b"I"),
                ]);
                t.receive(&answer, &mut st);
                assert!(t.expect.is_empty());
            }
            if queued {
                t.expect.push(Msg::Sync);
            }
            let mut st = LinkState::default();
            let mut pass = 0;
            let first = t.client(&m[..cut], &mut pass, &mut st);
            assert_eq!(
                (first.front, first.ready, pass),
                (0, 0, 0),
                "{sql:?} cut at {cut}: nothing forwarded yet"
            );
            let s = t.client(&m, &mut pass, &mut st);
            let out = String::from_utf8_lossy(&t.wout).into_owned();
            if sql == "discard all" {
                // Forwarded as it is; the client's statements are forgotten.
                assert_eq!((s.front, s.ready), (0, m.len()), "{sql:?} cut at {cut}");
                assert_eq!(t.client.count(), 0, "{sql:?} cut at {cut}");
                continue;
            }
            assert_eq!(
                (s.front, s.ready),
                (m.len(), m.len()),
                "{sql:?} cut at {cut}"
            );
            if sql.starts_with("DEALLOCATE") {
                // Answered by pgcorral once the server's ReadyForQuery shows the transaction
                // is not aborted (the server's unnamed statement closed, as a Query would).
                assert_eq!(tags_of(&t.wout), "CS", "answered by pgcorral");
                assert_eq!(t.client.count(), 1, "{sql:?} cut at {cut}");
                if !queued {
                    t.receive(&msgs(&[msg(b'3', b""), msg(b'Z', b"I")]), &mut st);
                    assert_eq!(t.client.count(), 0, "{sql:?} cut at {cut}");
                }
            } else {
                assert!(out.contains("pgcorral_"), "{sql:?} cut at {cut}: {out:?}");
            }
        }
    }
}

/// A plain Query cut after its first byte is forwarded at once: it cannot be one of those.
#[test]
fn a_plain_query_split_across_reads_is_forwarded_as_it_comes() {
    let m = msg(b'Q', b"SELECT 1\0");
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    let mut pass = 0;
    let s = t.client(&m[..7], &mut pass, &mut st);
    assert_eq!((s.front, s.ready, pass), (0, 7, m.len() - 7));
    assert_eq!(st.pending, 1);
    let s = t.client(&m[7..], &mut pass, &mut st);
    assert_eq!((s.ready, pass), (m.len() - 7, 0));
    let answer = msgs(&[msg(b'C', b"SELECT 1\0"), msg(b'Z', b"I")]);
    let (s, shown) = t.server(&answer, &mut 0, &mut st);
    assert_eq!(
        (tags_of(&shown), s.stop),
        ("CZ".into(), Some(Outcome::Idle))
    );
    assert!(t.expect.is_empty() && t.wout.is_empty());
}

/// `session_pinning = "refuse"`: a Query whose start arrives in one read and the rest in
/// others is refused as it is when it arrives whole (the fuzzer's find: `LISTEN x` in reads
/// of 3 and 1 bytes was forwarded and marked dirty); a Query that is not refused waits to be
/// whole, then goes on as usual.
#[test]
fn refuse_mode_waits_for_a_split_query() {
    /// Feeds `m` in reads of `sizes` bytes (cycled), forwarding what each scan makes ready.
    fn feed(m: &[u8], sizes: &[usize]) -> (LinkState, Option<&'static str>, usize) {
        let (mut st, mut buf, mut pass, mut sent) = (LinkState::default(), Vec::new(), 0, 0);
        let mut at = 0;
        for &n in sizes.iter().cycle() {
            if at == m.len() {
                break;
            }
            let n = n.min(m.len() - at);
            buf.extend_from_slice(&m[at..at + n]);
            at += n;
            let s = scan_plain_client(&buf, &mut pass, &mut st, Track::Refuse).unwrap();
            if s.refuse.is_some() {
                return (st, s.refuse, sent);
            }
            sent += s.ready;
            buf.drain(..s.ready);
        }
        (st, None, sent)
    }
    let listen = msg(b'Q', b"LISTEN x\0");
    assert_eq!(
        listen,
        [0x51, 0, 0, 0, 0x0d, b'L', b'I', b'S', b'T', b'E', b'N', b' ', b'x', 0]
    );
    let (whole, why, _) = feed(&listen, &[listen.len()]);
    assert!(why.is_some() && !whole.dirty && whole.pending == 0);
    for sizes in [&[3, 1][..], &[1], &[7], &[6, 2], &[13]] {
        let (st, refused, sent) = feed(&listen, sizes);
        assert_eq!(refused, why, "reads of {sizes:?}");
        assert_eq!(sent, 0, "reads of {sizes:?}: nothing forwarded");
        assert!(!st.dirty && st.pending == 0, "reads of {sizes:?}: {st:?}");
    }
    let select = msg(b'Q', b"SELECT 1\0");
    for sizes in [&[3, 1][..], &[1], &[7]] {
        let (st, refused, sent) = feed(&select, sizes);
        assert_eq!((refused, sent), (None, select.len()), "reads of {sizes:?}");
        assert!(!st.dirty && st.pending == 1, "reads of {sizes:?}: {st:?}");
    }
}

/// [`sql_text`] as it was written before memchr: byte loops.
fn sql_text_naive(msg: &[u8], h: Header) -> Option<&[u8]> {
    let body = msg.get(pgwire::header::HEADER_LEN..h.total_len())?;
    let sql = if h.tag == frontend::PARSE {
        match body.iter().position(|&b| b == 0) {
            Some(i) => &body[i + 1..],
            None => body,
        }
    } else {
        body
    };
    let end = sql.iter().position(|&b| b == 0).unwrap_or(sql.len());
    Some(&sql[..end])
}

proptest::proptest! {
    /// Over bodies with and without NULs (few distinct bytes, so NULs are common), whole or
    /// cut short, of a Query or a Parse: the same text as the naive loop, but for a whole
    /// Query ending in a NUL, whose text is all of it.
    #[test]
    fn sql_text_agrees_with_the_naive_loop(
        parse in proptest::prelude::any::<bool>(),
        body in proptest::collection::vec(0u8..4, 0..200),
        cut in 0usize..210,
    ) {
        let m = msg(if parse { b'P' } else { b'Q' }, &body);
        let m = &m[..m.len().min(cut + pgwire::header::HEADER_LEN)];
        let h = Header::parse(&msg(m[0], &body), 1 << 20).unwrap().unwrap();
        let (got, naive) = (sql_text(m, h), sql_text_naive(m, h));
        match (got, naive) {
            // A Query that ends in its NUL: the whole body but that NUL, which starts
            // with the text up to the first NUL.
            (Some(g), Some(n)) if !parse && m.len() == h.total_len() && body.last() == Some(&0) => {
                proptest::prop_assert_eq!(g, &body[..body.len() - 1]);
                proptest::prop_assert!(g.starts_with(n));
            }
            _ => proptest::prop_assert_eq!(got, naive),
        }
    }

    #[test]
    fn scans_never_overrun(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let mut st = LinkState::default();
        let mut pass = 0;
        if let Ok(s) = scan_client(&bytes, &mut pass, &mut st, Track::Pin, &HookMap::quiet(), &mut Default::default(), 1 << 16, None) {
            proptest::prop_assert!(s.ready <= bytes.len());
        }
        let mut pass = 0;
        if let Ok(s) = scan_server(&bytes, &mut pass, &mut st, &mut Default::default(), true, true, 1 << 16, None) {
            proptest::prop_assert!(s.ready <= bytes.len());
        }
    }
}

/// A statement prepared on one server and bound on another whose table changed in between:
/// the check of its description there differs, and with `retry_stale_statements` a batch
/// that describes its portal moves to a fresh statement in the same implicit transaction
/// (no Sync between the check's Parse and the fresh one), so the client gets rows, not
/// "cached plan must not change result type".
#[test]
fn a_changed_description_on_another_server_renews_a_described_batch() {
    let mut t = Tracked::default();
    let mut st = LinkState::default();
    let sent = t.send(
        &msgs(&[parse("s1", "select * from t"), msg(b'S', b"")]),
        &mut st,
    );
    assert_eq!(tags_of(&sent), "PDS");
    let answer = msgs(&[msg(b'1', b""), described(), msg(b'Z', b"I")]);
    assert_eq!(tags_of(&t.receive(&answer, &mut st)), "1Z");

    // The client's next transaction gets another server.
    t.server = Default::default();
    t.unnamed_here = false;
    let batch = msgs(&[
        bind("s1"),
        msg(b'D', b"P\0"),
        msg(b'E', b"\0\0\0\0\0"),
        msg(b'S', b""),
    ]);
    // The Bind waits for the check (one scan: the relay scans again once answers came).
    let s = t.client(&batch, &mut 0, &mut st);
    assert!(s.again && s.ready == 0 && t.expect.verifying);
    assert_eq!(tags_of(&t.wout.split()), "PDH", "the check");
    let one_column = msg(
        b'T',
        b"\0\x01a\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
    );
    let checked = msgs(&[msg(b'1', b""), msg(b't', b"\0\0"), one_column.clone()]);
    assert!(
        t.receive(&checked, &mut st).is_empty(),
        "the check's answers are hidden"
    );
    assert!(!t.expect.verifying);
    let sent = t.send(&batch, &mut st);
    assert_eq!(
        tags_of(&sent),
        "CPDBDES",
        "the old name closed, a fresh statement parsed"
    );
    let fresh = String::from_utf8_lossy(&sent);
    assert!(fresh.contains("pgcorral_2\0select * from t"), "{fresh:?}");

    let answer = msgs(&[
        msg(b'3', b""),
        msg(b'1', b""),
        msg(b't', b"\0\0"),
        one_column.clone(),
        msg(b'2', b""),
        one_column,
        msg(b'D', b"\0\x01\0\0\0\x011"),
        msg(b'C', b"SELECT 1\0"),
        msg(b'Z', b"I"),
    ]);
    assert_eq!(tags_of(&t.receive(&answer, &mut st)), "2TDCZ");
    assert!(t.expect.is_empty() && st.is_idle());
}
