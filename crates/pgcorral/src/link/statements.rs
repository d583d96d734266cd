//! Statements prepared once on each shard's server: what a server is sent before a request
//! that binds them by name (Closes of the names it must drop, Parses of those it lacks).

use std::sync::Arc;

use bytes::BytesMut;
use pgwire::encode;

use crate::prepared::{ServerStatements, Statement};

/// One message of a [`Prelude`].
enum Step {
    /// A Close of a statement name the server drops.
    Close(String),
    /// A Parse of a statement the server lacked.
    Parse(Arc<Statement>),
}

/// What a server was sent before a request, in order (each answered by one CloseComplete or
/// ParseComplete): what its statements' record assumes it ran.
#[derive(Default)]
pub(in crate::link) struct Prelude(Vec<Step>);

impl Prelude {
    /// How many answers it gets, which the request's reader skips.
    pub fn answers(&self) -> usize {
        self.0.len()
    }

    /// The server answered an error after `answered` of its answers: the steps after them did
    /// not run (a server skips to the Sync after an error), so a statement parsed there is not
    /// counted as there, and a name closed there is closed before the next prepare. A step
    /// answered ran: its statement is there, to be bound (and fail) as PostgreSQL's own.
    pub fn failed_after(&self, server: &mut ServerStatements, answered: usize) {
        for step in self.0.iter().skip(answered) {
            match step {
                Step::Close(name) => server.close_later(name.clone()),
                Step::Parse(stmt) => server.forget(stmt.id),
            }
        }
    }
}

/// Writes to `out` what a server whose statements are `server` is sent before a request that
/// binds each of `needs` under its own name: a Parse of each it lacks (recorded as there), and
/// Closes of those it drops for them (the least recently used at `max`, 0: no limit) and of
/// names gone stale. `None` (nothing written) when `needs` are more than `max`. A Parse may
/// fail on the server (its catalog changed): [`Prelude::failed_after`] then undoes the record.
pub(in crate::link) fn ready(
    server: &mut ServerStatements,
    needs: &[Arc<Statement>],
    max: usize,
    out: &mut BytesMut,
) -> Option<Prelude> {
    if max > 0 && needs.len() > max {
        return None;
    }
    // Those here become the most recently used, so that making room evicts none of them.
    let missing: Vec<&Arc<Statement>> = needs.iter().filter(|s| !server.touch(s)).collect();
    let mut steps = Vec::new();
    for stmt in missing {
        let evicted = server.insert(stmt, max);
        for name in server
            .take_stale()
            .into_iter()
            .chain(evicted.map(|old| old.name.clone()))
        {
            encode::close(out, b'S', name.as_bytes());
            steps.push(Step::Close(name));
        }
        encode::parse(out, stmt.name.as_bytes(), stmt.text());
        steps.push(Step::Parse(stmt.clone()));
    }
    Some(Prelude(steps))
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

    fn answers(p: Option<Prelude>) -> Option<usize> {
        p.map(|p| p.answers())
    }

    #[test]
    fn a_statement_is_parsed_once_then_bound_as_it_is() {
        let r = Registry::default();
        let (a, b) = (statement(&r, "SELECT 1"), statement(&r, "SELECT 2"));
        let mut server = ServerStatements::default();
        let mut out = BytesMut::new();
        assert_eq!(
            answers(ready(&mut server, std::slice::from_ref(&a), 0, &mut out)),
            Some(1)
        );
        assert_eq!(messages(&out), vec![('P', a.name.clone())]);
        out.clear();
        assert_eq!(
            answers(ready(&mut server, std::slice::from_ref(&a), 0, &mut out)),
            Some(0)
        );
        assert!(out.is_empty());
        assert_eq!(
            answers(ready(&mut server, &[a.clone(), b.clone()], 0, &mut out)),
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
        assert!(ready(&mut server, &s[1..], 2, &mut out).is_none());
        assert!(out.is_empty());
    }

    #[test]
    fn after_an_error_what_did_not_run_is_undone_and_what_ran_is_kept() {
        let r = Registry::default();
        let s: Vec<_> = (0..3)
            .map(|i| statement(&r, &format!("SELECT {i}")))
            .collect();
        let mut server = ServerStatements::default();
        let mut out = BytesMut::new();
        ready(&mut server, &s[..1], 1, &mut out).unwrap();
        // s[0] closed for s[1], which fails to parse: s[0]'s name was closed, s[1] is not there.
        out.clear();
        let p = ready(&mut server, &s[1..2], 1, &mut out).unwrap();
        assert_eq!(
            messages(&out),
            vec![('C', s[0].name.clone()), ('P', s[1].name.clone())]
        );
        p.failed_after(&mut server, 1);
        assert!(!server.has(s[1].id));
        out.clear();
        ready(&mut server, &s[1..2], 1, &mut out).unwrap();
        assert_eq!(
            messages(&out),
            vec![('C', s[1].name.clone()), ('P', s[1].name.clone())]
        );
        // An error before the Close ran: the name is closed before the next prepare.
        out.clear();
        let p = ready(&mut server, &s[2..3], 1, &mut out).unwrap();
        p.failed_after(&mut server, 0);
        out.clear();
        ready(&mut server, &s[2..3], 1, &mut out).unwrap();
        let sent = messages(&out);
        assert!(sent.contains(&('C', s[1].name.clone())), "{sent:?}");
        assert_eq!(sent.last(), Some(&('P', s[2].name.clone())));
        // An error after the prelude: its statements are there.
        out.clear();
        let p = ready(&mut server, &s[2..3], 1, &mut out).unwrap();
        p.failed_after(&mut server, p.answers());
        assert!(server.has(s[2].id));
    }
}
