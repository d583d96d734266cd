//! Statements prepared once on each shard's server: what a server is sent before a request
//! that binds them by name (Closes of the names it must drop, Parses of those it lacks).

use std::sync::Arc;

use bytes::BytesMut;
use pgwire::encode;

use crate::prepared::{ServerStatements, Statement};

/// Writes to `out` what a server whose statements are `server` is sent before a request that
/// binds each of `needs` under its own name: a Parse of each it lacks (recorded as there), and
/// Closes of those it drops for them (the least recently used at `max`, 0: no limit) and of
/// names gone stale. Returns how many answers they get (CloseComplete, ParseComplete), which
/// the request's reader skips; `None` (nothing written) when `needs` are more than `max`.
///
/// A Parse written here may fail on the server (its catalog changed): after an error from the
/// server the caller [`forget`]s `needs` there.
pub(in crate::link) fn ready(
    server: &mut ServerStatements,
    needs: &[Arc<Statement>],
    max: usize,
    out: &mut BytesMut,
) -> Option<usize> {
    if max > 0 && needs.len() > max {
        return None;
    }
    // Those here become the most recently used, so that making room evicts none of them.
    let missing: Vec<&Arc<Statement>> = needs.iter().filter(|s| !server.touch(s)).collect();
    let mut answers = 0;
    for stmt in missing {
        let evicted = server.insert(stmt, max);
        for name in server
            .take_stale()
            .iter()
            .chain(evicted.as_ref().map(|old| &old.name))
        {
            encode::close(out, b'S', name.as_bytes());
            answers += 1;
        }
        encode::parse(out, stmt.name.as_bytes(), stmt.text());
        answers += 1;
    }
    Some(answers)
}

/// The server answered an error after `needs` were made ready there: each may or may not be
/// prepared, so none is counted as there and each name is closed before the next prepare.
pub(in crate::link) fn forget(server: &mut ServerStatements, needs: &[Arc<Statement>]) {
    for stmt in needs {
        server.forget(stmt.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepared::{Registry, Source};
    use bytes::Bytes;
    use pgwire::Header;

    fn statement(r: &Registry, text: &str) -> Arc<Statement> {
        r.fresh(Source::Parse(Bytes::from(format!("{text}\0\0\0"))), None)
    }

    /// The tags and names of the messages in `out` (a Parse's or Close's name).
    fn messages(out: &[u8]) -> Vec<(char, String)> {
        let mut pos = 0;
        let mut all = Vec::new();
        while let Some(h) = Header::parse(&out[pos..], u32::MAX).ok().flatten() {
            let body = &out[pos + 5..pos + h.total_len()];
            let body = if h.tag == b'C' { &body[1..] } else { body };
            let end = body.iter().position(|&c| c == 0).unwrap();
            all.push((h.tag as char, String::from_utf8_lossy(&body[..end]).into()));
            pos += h.total_len();
        }
        all
    }

    #[test]
    fn a_statement_is_parsed_once_then_bound_as_it_is() {
        let r = Registry::default();
        let (a, b) = (statement(&r, "SELECT 1"), statement(&r, "SELECT 2"));
        let mut server = ServerStatements::default();
        let mut out = BytesMut::new();
        assert_eq!(
            ready(&mut server, std::slice::from_ref(&a), 0, &mut out),
            Some(1)
        );
        assert_eq!(messages(&out), vec![('P', a.name.clone())]);
        out.clear();
        assert_eq!(
            ready(&mut server, std::slice::from_ref(&a), 0, &mut out),
            Some(0)
        );
        assert!(out.is_empty());
        assert_eq!(
            ready(&mut server, &[a.clone(), b.clone()], 0, &mut out),
            Some(1)
        );
        assert_eq!(messages(&out), vec![('P', b.name.clone())]);
    }

    #[test]
    fn room_is_made_from_the_least_recently_used_and_never_from_what_the_request_needs() {
        let r = Registry::default();
        let s: Vec<_> = (0..4)
            .map(|i| statement(&r, &format!("SELECT {i}")))
            .collect();
        let mut server = ServerStatements::default();
        let mut out = BytesMut::new();
        ready(&mut server, &s[..2], 2, &mut out).unwrap();
        out.clear();
        // s[0] is used again, then s[2] needs room: s[1] goes.
        ready(&mut server, &[s[0].clone(), s[2].clone()], 2, &mut out).unwrap();
        assert_eq!(
            messages(&out),
            vec![('C', s[1].name.clone()), ('P', s[2].name.clone())]
        );
        assert!(server.has(s[0].id) && server.has(s[2].id) && !server.has(s[1].id));
        // More than the server keeps: nothing is written.
        out.clear();
        assert_eq!(ready(&mut server, &s[1..], 2, &mut out), None);
        assert!(out.is_empty());
    }

    #[test]
    fn after_an_error_a_statement_is_closed_and_parsed_again() {
        let r = Registry::default();
        let a = statement(&r, "SELECT 1");
        let mut server = ServerStatements::default();
        let mut out = BytesMut::new();
        ready(&mut server, std::slice::from_ref(&a), 0, &mut out).unwrap();
        forget(&mut server, std::slice::from_ref(&a));
        out.clear();
        assert_eq!(
            ready(&mut server, std::slice::from_ref(&a), 0, &mut out),
            Some(2)
        );
        assert_eq!(
            messages(&out),
            vec![('C', a.name.clone()), ('P', a.name.clone())]
        );
    }
}
