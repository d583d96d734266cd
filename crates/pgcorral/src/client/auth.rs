//! Authenticating a client against its `[users]` entry: trust, md5 (salted challenge),
//! SCRAM-SHA-256 (with channel binding, SCRAM-SHA-256-PLUS, over TLS), or a TLS client
//! certificate. A failure is FATAL 28P01 (28000 for certificates) and costs no server connection.

use bytes::BytesMut;
use corral_rt::stream::Stream;
use pgwire::auth::scram::{ScramSecret, ScramServer};
use pgwire::{encode, frontend};

use crate::auth_query::Looked;
use crate::config::{AuthType, Config};
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::net::framed::{next_tag, read_message, ReadError};
use crate::secrets::SecretCache;
use crate::tls;

/// Largest password or SASL message accepted during login.
const MAX_AUTH_MESSAGE: u32 = 8192;

/// The outcome of a successful login.
pub struct Authenticated {
    /// ClientKey recovered from a SCRAM proof (lets pgcorral log in with a verifier).
    pub client_key: Option<[u8; 32]>,
}

fn failed(user: &str) -> Error {
    Error::new(
        Kind::AuthFailed,
        format!("password authentication failed for user \"{user}\""),
    )
}

/// Runs `auth_type` (the configured method, or the one an hba rule chose: see
/// [`super::access`]); on success AuthenticationOk has been queued in `out`.
/// `binding`: the tls-server-end-point data of pgcorral's certificate, on a TLS connection
/// (SCRAM-SHA-256-PLUS is then offered). `user_is_text` is false when the client's user name
/// was not UTF-8 (`user` holds it replaced lossily): it names no user then, and is refused as
/// an unknown one. `looked`: what auth_query found for a user with no password here.
#[allow(clippy::too_many_arguments)]
pub async fn authenticate(
    stream: &mut Stream,
    buf: &mut BytesMut,
    out: &mut BytesMut,
    config: &Config,
    auth_type: AuthType,
    cache: &SecretCache,
    user: &str,
    user_is_text: bool,
    binding: Option<&[u8]>,
    looked: &Looked,
) -> Result<Authenticated> {
    let entry = config
        .users
        .get(user)
        .filter(|u| user_is_text && !u.settings_only);
    let (known, password) = match looked {
        Looked::Found(p) => (true, p.as_deref()),
        Looked::NoRow => (false, None),
        Looked::NotAsked => (entry.is_some(), entry.and_then(|u| u.password.as_deref())),
    };
    if matches!(auth_type, AuthType::Trust | AuthType::Cert) {
        if auth_type == AuthType::Cert {
            certificate(stream, user, user_is_text)?;
        }
        if !known && *looked == Looked::NoRow {
            // auth_query found no such user: PgBouncer's words. Without a password to check,
            // anyone who exists gets in, so saying who does not reveals nothing more.
            return Err(Error::new(
                Kind::UnknownUser,
                format!("no such user: \"{user}\""),
            ));
        }
        if !known && config.users.values().any(|u| !u.settings_only) {
            // Not among the users pgcorral knows: PostgreSQL's words for a failed login by
            // this method (auth.c's auth_failed, 28000), which PgBouncer uses too.
            let method = match auth_type {
                AuthType::Cert => "certificate",
                _ => "\"trust\"",
            };
            return Err(Error::new(
                Kind::UnknownUser,
                format!("{method} authentication failed for user \"{user}\""),
            ));
        }
        encode::auth_ok(out);
        return Ok(Authenticated { client_key: None });
    }
    let scram_secret = password.and_then(ScramSecret::parse);
    let use_md5 = auth_type == AuthType::Md5 && scram_secret.is_none();
    if use_md5 {
        md5(stream, buf, out, user, password).await?;
        return Ok(Authenticated { client_key: None });
    }
    // An md5 hash cannot verify SCRAM: as PostgreSQL, the exchange runs against a throwaway
    // secret and the login fails as with a wrong password (the log says why).
    let md5_only =
        scram_secret.is_none() && password.is_some_and(pgwire::auth::md5::is_stored_hash);
    let secret = match (scram_secret, password) {
        (Some(s), _) => s,
        (None, Some(p)) if !md5_only => cache.get(user, p),
        // Unknown user: run the exchange against a throwaway secret so the failure looks the same.
        (None, _) => cache.mock(user),
    };
    let key = scram(stream, buf, out, user, secret, binding).await?;
    if md5_only {
        tracing::info!(user = %Esc(user), "user has an md5 password, which cannot verify a SCRAM login");
    }
    if !known || md5_only {
        return Err(failed(user));
    }
    Ok(Authenticated {
        client_key: Some(key),
    })
}

/// auth_type = "cert": the client's certificate (verified in the TLS handshake against
/// client_tls_ca_file) must name the user in its subject's CN, as PostgreSQL's `cert` method.
fn certificate(stream: &Stream, user: &str, user_is_text: bool) -> Result<()> {
    let Some(cert) = stream.peer_certificates().and_then(|c| c.first()) else {
        return Err(Error::new(
            Kind::Refused,
            "connection requires a valid client certificate",
        ));
    };
    let cn = tls::common_name(cert);
    if cn.as_deref() != Some(user) || !user_is_text {
        tracing::info!(
            user,
            cn = cn.as_deref().unwrap_or(""),
            "client certificate names another user"
        );
        return Err(Error::new(
            Kind::Refused,
            format!("certificate authentication failed for user \"{user}\""),
        ));
    }
    Ok(())
}

async fn send(stream: &mut Stream, out: &mut BytesMut) -> Result<()> {
    stream
        .send(out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
    out.clear();
    Ok(())
}

/// Reads the client's answer to an authentication request: a PasswordMessage (or SASL
/// response), `what` naming it in PostgreSQL's error for another message type, which is
/// refused as soon as its first byte is read.
async fn read_password(stream: &mut Stream, buf: &mut BytesMut, what: &str) -> Result<BytesMut> {
    let tag = match next_tag(stream, buf).await {
        Ok(tag) => tag,
        Err(e) => return Err(Error::with_source(Kind::ClientIo, "reading password", e)),
    };
    if tag != frontend::PASSWORD {
        return Err(Error::new(
            Kind::ClientProtocol,
            format!("expected {what} response, got message type {tag}"),
        ));
    }
    match read_message(stream, buf, MAX_AUTH_MESSAGE).await {
        Ok((_, body)) => Ok(body),
        // A bad length or an oversized message is the client breaking the protocol (08P01),
        // not a failed connection.
        Err(e @ (ReadError::Frame(_) | ReadError::Startup(_))) => Err(Error::new(
            Kind::ClientProtocol,
            format!("invalid password response: {e}"),
        )),
        Err(e) => Err(Error::with_source(Kind::ClientIo, "reading password", e)),
    }
}

async fn md5(
    stream: &mut Stream,
    buf: &mut BytesMut,
    out: &mut BytesMut,
    user: &str,
    password: Option<&str>,
) -> Result<()> {
    let salt: [u8; 4] = rand::random();
    encode::auth_md5(out, salt);
    send(stream, out).await?;
    let body = read_password(stream, buf, "password").await?;
    let response = pgwire::frontend::query_text(&body).unwrap_or("");
    let stored = match password {
        Some(p) if pgwire::auth::md5::is_stored_hash(p) => p.to_string(),
        Some(p) => pgwire::auth::md5::stored_hash(user, p),
        None => return Err(failed(user)),
    };
    if !pgwire::auth::md5::verify(&stored, salt, response) {
        return Err(failed(user));
    }
    encode::auth_ok(out);
    Ok(())
}

async fn scram(
    stream: &mut Stream,
    buf: &mut BytesMut,
    out: &mut BytesMut,
    user: &str,
    secret: ScramSecret,
    binding: Option<&[u8]>,
) -> Result<[u8; 32]> {
    let mut server = ScramServer::new(secret);
    if let Some(b) = binding {
        server = server.channel_binding(b);
    }
    encode::auth_sasl(out, server.mechanisms());
    send(stream, out).await?;

    // SASLInitialResponse: mechanism name, Int32 length, data.
    let body = read_password(stream, buf, "SASL").await?;
    let malformed = || Error::new(Kind::ClientProtocol, "malformed SASLInitialResponse");
    let nul = body.iter().position(|&b| b == 0).ok_or_else(malformed)?;
    server.select_mechanism(&body[..nul]).map_err(|_| {
        Error::new(
            Kind::ClientProtocol,
            "client selected an invalid SASL authentication mechanism",
        )
    })?;
    let data = body.get(nul + 5..).ok_or_else(malformed)?;
    let first = server
        .client_first(data)
        .map_err(|e| scram_error(e, "SCRAM client-first-message", user))?;
    encode::auth_sasl_continue(out, &first);
    send(stream, out).await?;

    let body = read_password(stream, buf, "SASL").await?;
    let outcome = server
        .client_final(&body)
        .map_err(|e| scram_error(e, "SCRAM client-final-message", user))?;
    encode::auth_sasl_final(out, &outcome.server_final);
    encode::auth_ok(out);
    Ok(outcome.client_key)
}

/// A failed SCRAM step as the client sees it: a wrong password is 28P01, a channel binding
/// failure 28000 (as PostgreSQL), anything else a protocol violation.
fn scram_error(e: pgwire::auth::scram::ScramError, step: &str, user: &str) -> Error {
    use pgwire::auth::scram::ScramError;
    match e {
        ScramError::BadProof => failed(user),
        ScramError::BindingNegotiation | ScramError::BindingMismatch => {
            Error::new(Kind::Refused, e.to_string())
        }
        e => Error::with_source(Kind::ClientProtocol, step.to_string(), e),
    }
}
