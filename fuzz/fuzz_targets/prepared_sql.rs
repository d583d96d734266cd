//! The SQL statement commands pgcorral rewrites in a simple Query: `rewrite::maybe_command` on
//! a Query message (whole and cut short, as a client's read may end anywhere) and
//! `prepared::sql::parse` / `prepared_query` on its text. Checks: no panic; a buffer that ends
//! early is either undecided or decided as the whole message is; and a text that `sql::parse`
//! takes for PREPARE/EXECUTE/DEALLOCATE/DISCARD is never one `maybe_command` lets pass unread.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::fuzzing::{prepared_query, prepared_sql, PreparedSql};
use pgcorral::prepared::rewrite::maybe_command;
use pgwire::{encode, Header};

fuzz_target!(|data: &[u8]| {
    // maybe_command on the raw bytes as a Query body (any bytes, the message may be cut short).
    let mut msg = vec![b'Q'];
    msg.extend_from_slice(&((data.len() + 5) as i32).to_be_bytes());
    msg.extend_from_slice(data);
    msg.push(0);
    let h = Header::parse(&msg, 1 << 20).unwrap().unwrap();
    let whole = maybe_command(h, &msg);
    assert!(whole.is_some(), "a whole message is always decided");
    for cut in 0..msg.len() {
        let part = maybe_command(h, &msg[..cut]);
        assert!(
            part.is_none() || part == whole,
            "cut at {cut}: {part:?} vs {whole:?}"
        );
    }

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = prepared_sql(text);
    if let Some(PreparedSql::Prepare { rest, .. }) = &parsed {
        if let Some(q) = prepared_query(rest) {
            assert!(rest.ends_with(q));
        }
    }
    let _ = prepared_query(text);
    // PostgreSQL's whitespace is ASCII space, tab, newline, carriage return and form feed; a
    // text starting with other whitespace is an error on the server, whatever sql::parse says.
    let pg_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c');
    let starts_plain = text
        .trim_start_matches(pg_space)
        .starts_with(|c: char| c.is_ascii_alphabetic());
    if parsed.is_some() && starts_plain && !text.contains('\0') {
        let mut buf = bytes::BytesMut::new();
        encode::query(&mut buf, text);
        let h = Header::parse(&buf, 1 << 20).unwrap().unwrap();
        assert_eq!(maybe_command(h, &buf), Some(true), "{parsed:?}");
    }
});
