//! A pooled client's LISTEN, UNLISTEN and UNLISTEN * answered by pgcorral through its
//! database's notification hub ([`crate::notify`]), and its notifications written out between
//! its transactions.

use bytes::BytesMut;
use pg_query::protobuf::DiscardMode;
use pg_query::NodeEnum;
use pgwire::backend::TxStatus;
use pgwire::Header;

use super::request::{next_request, read_more, IdleTimer, Next};
use super::{ClientConn, LoggedIn};
use crate::error::{Error, Result};
use crate::notify::{Listener, MAX_CHANNEL};
use crate::services::Services;

/// The longest Query read whole to see whether it is a LISTEN (one is short).
const MAX_LOOKED_AT: usize = 1024;

/// Why a client whose listening connection ended is closed (it was told the error first).
pub(super) const LISTENING_ENDED: &str = "the connection listening for notifications ended";

/// What a lone statement of a request asks of the client's listening.
#[derive(Debug, PartialEq)]
enum Asked {
    Listen(String),
    Unlisten(String),
    UnlistenAll,
    /// `DISCARD ALL`: it goes to the server, and ends the client's listening as it ends a
    /// session's.
    DiscardAll,
}

/// A quick look: the buffered request may be a Query of LISTEN, UNLISTEN or DISCARD (its
/// first word starts with `l`, `u` or `d`, or its text is not buffered yet).
#[inline]
pub(super) fn may_be_asked(client: &ClientConn) -> bool {
    if client.buf.first() != Some(&b'Q') {
        return false;
    }
    match client
        .buf
        .get(pgwire::header::HEADER_LEN..)
        .and_then(|b| b.iter().find(|c| !c.is_ascii_whitespace()))
    {
        Some(c) => matches!(c.to_ascii_lowercase(), b'l' | b'u' | b'd'),
        None => true,
    }
}

/// Answers the buffered request when it is a Query of one LISTEN, UNLISTEN or UNLISTEN *
/// (true: answered and taken from the buffer); a lone DISCARD ALL also ends the client's
/// listening, and goes on to the server (false). Anything else is left as it is (false).
pub(super) async fn answer(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
) -> Result<bool> {
    let Some((asked, len)) = look(client).await? else {
        return Ok(false);
    };
    let utf8 = session
        .settings
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("client_encoding"))
        .is_none_or(|(_, v)| v.eq_ignore_ascii_case("UTF8"));
    let tag = match asked {
        Asked::DiscardAll => {
            session.listening = None;
            return Ok(false);
        }
        // The hub passes names and payloads as UTF-8: a client in another encoding keeps its
        // LISTEN on its own server (pinned).
        _ if !utf8 => return Ok(false),
        Asked::Listen(channel) => {
            let hub = services.notify.of(&session.pool);
            let l = session
                .listening
                .get_or_insert_with(|| Box::new(Listener::new(hub)));
            let done = l.listen(&channel, client.worker).await;
            if let Err(e) = done {
                return refused(client, session, len, &e).await;
            }
            "LISTEN"
        }
        Asked::Unlisten(channel) => {
            if let Some(l) = &mut session.listening {
                l.unlisten(&channel);
            }
            "UNLISTEN"
        }
        Asked::UnlistenAll => {
            session.listening = None;
            "UNLISTEN"
        }
    };
    if session
        .listening
        .as_ref()
        .is_some_and(|l| !l.is_listening())
    {
        session.listening = None;
    }
    bytes::Buf::advance(&mut client.buf, len);
    let mut out = BytesMut::with_capacity(32);
    pgwire::encode::command_complete(&mut out, tag);
    pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await?;
    Ok(true)
}

/// A LISTEN the hub could not serve: the client gets the error, as its own server's.
async fn refused(
    client: &mut ClientConn,
    session: &mut LoggedIn,
    len: usize,
    e: &Error,
) -> Result<bool> {
    if session
        .listening
        .as_ref()
        .is_some_and(|l| !l.is_listening())
    {
        session.listening = None;
    }
    bytes::Buf::advance(&mut client.buf, len);
    let mut out = BytesMut::new();
    e.write_response(&mut out, "ERROR");
    pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await?;
    Ok(true)
}

/// The buffered Query, read whole, when it is one statement pgcorral answers or watches for,
/// with its length.
async fn look(client: &mut ClientConn) -> Result<Option<(Asked, usize)>> {
    let h = loop {
        match Header::parse(&client.buf, client.max_len) {
            Ok(Some(h)) => break h,
            // The relay reports a bad header as it does for any request.
            Err(_) => return Ok(None),
            Ok(None) => {
                if read_more(client).await?.is_none() {
                    return Ok(None);
                }
            }
        }
    };
    if h.body_len() > MAX_LOOKED_AT {
        return Ok(None);
    }
    while client.buf.len() < h.total_len() {
        if read_more(client).await?.is_none() {
            return Ok(None);
        }
    }
    let body = &client.buf[pgwire::header::HEADER_LEN..h.total_len()];
    let Some((&0, text)) = body.split_last() else {
        return Ok(None);
    };
    Ok(asked(text).map(|a| (a, h.total_len())))
}

/// What `text` asks, when it is one LISTEN, UNLISTEN, UNLISTEN * or DISCARD ALL statement.
fn asked(text: &[u8]) -> Option<Asked> {
    let first = text.iter().find(|c| !c.is_ascii_whitespace())?;
    if !matches!(first.to_ascii_lowercase(), b'l' | b'u' | b'd') {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    // No string literal can be part of these statements, so standard_conforming_strings cannot
    // change how they read.
    let parsed = pg_query::parse(text, pg_query::ParserOptions::DEFAULT).ok()?;
    let [stmt] = &parsed.protobuf.stmts[..] else {
        return None;
    };
    // A name of NAMEDATALEN - 1 bytes may have been cut by the parser, which PostgreSQL
    // tells in a notice: such a statement goes to the server.
    let name = |n: &str| (!n.is_empty() && n.len() < MAX_CHANNEL).then(|| n.to_string());
    match stmt.stmt.as_ref()?.node.as_ref()? {
        NodeEnum::ListenStmt(l) => name(&l.conditionname).map(Asked::Listen),
        NodeEnum::UnlistenStmt(u) if u.conditionname.is_empty() => Some(Asked::UnlistenAll),
        NodeEnum::UnlistenStmt(u) => name(&u.conditionname).map(Asked::Unlisten),
        NodeEnum::DiscardStmt(d) if d.target() == DiscardMode::DiscardAll => {
            Some(Asked::DiscardAll)
        }
        _ => None,
    }
}

/// Writes the notifications waiting for the client. True when its listening ended: the error
/// that ended it was written last, and the client is to be closed.
pub(super) async fn deliver(client: &mut ClientConn, session: &LoggedIn) -> Result<bool> {
    let Some(l) = &session.listening else {
        return Ok(false);
    };
    let taken = l.inbox().take();
    if !taken.out.is_empty() {
        client.reply(&taken.out).await?;
    }
    Ok(taken.ended)
}

/// Waits for the next request of a client pinned to its server between transactions, writing
/// its notifications meanwhile. `Some(why)` when the client is to leave.
pub(super) async fn wait_pinned(
    client: &mut ClientConn,
    services: &Services,
    session: &LoggedIn,
    idle_timeout: Option<std::time::Duration>,
) -> Result<Option<&'static str>> {
    let mut timer = IdleTimer::default();
    loop {
        let inbox = session.listening.as_deref().map(Listener::inbox);
        match next_request(
            client,
            services,
            idle_timeout,
            &mut timer,
            false,
            None,
            inbox,
        )
        .await?
        {
            Next::Notified => {
                if deliver(client, session).await? {
                    return Ok(Some(LISTENING_ENDED));
                }
            }
            Next::Gone(why) => return Ok(Some(why)),
            // What came before the request is written before it is served.
            Next::Request | Next::HandOver | Next::Slim(_) => {
                return match deliver(client, session).await? {
                    true => Ok(Some(LISTENING_ENDED)),
                    false => Ok(None),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lone_statements_are_asked() {
        assert_eq!(asked(b"LISTEN a"), Some(Asked::Listen("a".into())));
        assert_eq!(
            asked(b"  listen \"B c\";"),
            Some(Asked::Listen("B c".into()))
        );
        assert_eq!(asked(b"UNLISTEN a"), Some(Asked::Unlisten("a".into())));
        assert_eq!(asked(b"unlisten *"), Some(Asked::UnlistenAll));
        assert_eq!(asked(b"DISCARD ALL"), Some(Asked::DiscardAll));
        assert_eq!(asked(b"DISCARD PLANS"), None);
        assert_eq!(asked(b"LISTEN a; LISTEN b"), None);
        assert_eq!(asked(b"LISTEN a; SELECT 1"), None);
        assert_eq!(asked(b"listen"), None);
        assert_eq!(asked(b"SELECT 1"), None);
        assert_eq!(asked(b"/* c */ LISTEN a"), None);
        let long = format!("LISTEN {}", "x".repeat(63));
        assert_eq!(asked(long.as_bytes()), None);
        let short = format!("LISTEN {}", "x".repeat(62));
        assert_eq!(asked(short.as_bytes()), Some(Asked::Listen("x".repeat(62))));
    }
}
