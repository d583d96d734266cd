//! SCRAM-SHA-256 and SCRAM-SHA-256-PLUS as PostgreSQL implements them (RFC 5802/7677, channel
//! binding `tls-server-end-point` only): the server side that verifies a client, and the client
//! side that answers a server, as small state machines over message bodies. Nonces are random
//! unless a test passes one.
//!
//! Channel binding: the binding data (see [`super::binding`]) comes from the TLS layer; the
//! server offers SCRAM-SHA-256-PLUS only when given it, and checks the gs2 flag against the
//! selected mechanism as PostgreSQL's backend does (`n` is fine without PLUS; `y` is a downgrade
//! when binding was offered; `p` needs PLUS).
//!
//! Every message from the peer is parsed without panicking: garbage gives `Err`. An exchange is
//! one-shot: once a step has failed (or the exchange has finished), later steps return
//! [`ScramError::OutOfOrder`].
//!
//! SASLprep: a plaintext password is prepared with SASLprep (RFC 4013, the `stringprep`
//! crate) before it is hashed, on both sides, as PostgreSQL's backend and libpq do; where
//! SASLprep refuses the password (a prohibited or unassigned character, bad bidirectional text,
//! nothing left after mapping) its bytes are used as they are, as PostgreSQL does too.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::binding::TLS_SERVER_END_POINT;

type HmacSha256 = Hmac<Sha256>;

/// Length of the random part of a nonce, in bytes before base64 (as PostgreSQL).
const RAW_NONCE_LEN: usize = 18;

/// Prefix of PostgreSQL's verifier text.
const VERIFIER_PREFIX: &str = "SCRAM-SHA-256$";

/// SASL mechanism name of SCRAM without channel binding.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// SASL mechanism name of SCRAM with channel binding (`tls-server-end-point`).
pub const SCRAM_SHA_256_PLUS: &str = "SCRAM-SHA-256-PLUS";

/// The SASL mechanisms to list in AuthenticationSASL, in PostgreSQL's order: with channel
/// binding offered (TLS, binding data known) `[PLUS, plain]`, else `[plain]`.
pub fn mechanisms(channel_binding: bool) -> &'static [&'static str] {
    if channel_binding {
        &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]
    } else {
        &[SCRAM_SHA_256]
    }
}

/// gs2 header of a client using channel binding (no authzid).
fn plus_gs2_header() -> String {
    format!("p={TLS_SERVER_END_POINT},,")
}

/// Expected `c=` value with channel binding: base64 of the gs2 header followed by the data.
fn plus_cbind(data: &[u8]) -> String {
    let mut input = plus_gs2_header().into_bytes();
    input.extend_from_slice(data);
    STANDARD.encode(input)
}

/// A SCRAM secret as stored by PostgreSQL: `SCRAM-SHA-256$<iter>:<salt b64>$<StoredKey b64>:<ServerKey b64>`.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramSecret {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl std::fmt::Debug for ScramSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScramSecret(..)")
    }
}

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramError {
    /// The peer sent a message that is not valid SCRAM.
    Malformed(&'static str),
    /// The client's proof did not verify (wrong password).
    BadProof,
    /// The server's signature did not verify, or its nonce did not extend ours.
    BadServer(&'static str),
    /// Messages arrived in the wrong order.
    OutOfOrder,
    /// The client selected a SASL mechanism that is not offered (unknown name, or
    /// SCRAM-SHA-256-PLUS without channel binding). PostgreSQL: "client selected an invalid SASL
    /// authentication mechanism" (SQLSTATE 08P01).
    InvalidMechanism,
    /// The client sent gs2 flag `y` ("I support channel binding but think you do not") to a
    /// server that offered SCRAM-SHA-256-PLUS: a possible downgrade. PostgreSQL: "SCRAM channel
    /// binding negotiation error" (SQLSTATE 28000).
    BindingNegotiation,
    /// The client's channel binding data (`c=`) differs from the server's: the client saw
    /// another certificate (a man in the middle, or a proxy). PostgreSQL: "SCRAM channel binding
    /// check failed" (SQLSTATE 28000).
    BindingMismatch,
}

impl std::fmt::Display for ScramError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScramError::Malformed(w) => write!(f, "malformed SCRAM message: {w}"),
            ScramError::BadProof => f.write_str("SCRAM proof did not verify"),
            ScramError::BadServer(w) => write!(f, "SCRAM server verification failed: {w}"),
            ScramError::OutOfOrder => f.write_str("SCRAM messages out of order"),
            ScramError::InvalidMechanism => {
                f.write_str("client selected an invalid SASL authentication mechanism")
            }
            ScramError::BindingNegotiation => {
                f.write_str("SCRAM channel binding negotiation error")
            }
            ScramError::BindingMismatch => f.write_str("SCRAM channel binding check failed"),
        }
    }
}

impl std::error::Error for ScramError {}

// ---------------------------------------------------------------------------------------------
// Primitives
// ---------------------------------------------------------------------------------------------

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes keys of any length (long keys are hashed, short ones padded): this cannot fail.
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn xor(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
        *o = x ^ y;
    }
    out
}

/// Constant-time equality of two equal-length keys (the length is public).
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The password as SCRAM hashes it: SASLprep'd, or as it is where SASLprep refuses it
/// (PostgreSQL's `pg_saslprep` also refuses a password that mapping leaves empty).
pub fn saslprep(password: &str) -> std::borrow::Cow<'_, str> {
    match stringprep::saslprep(password) {
        Ok(p) if !p.is_empty() || password.is_empty() => p,
        _ => std::borrow::Cow::Borrowed(password),
    }
}

/// ClientKey and ServerKey from a password (SASLprep'd, see [`saslprep`]).
fn keys_from_password(password: &str, salt: &[u8], iterations: u32) -> ([u8; 32], [u8; 32]) {
    let mut salted = [0u8; 32];
    let password = saslprep(password);
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut salted);
    let client_key = hmac(&salted, &[b"Client Key"]);
    let server_key = hmac(&salted, &[b"Server Key"]);
    (client_key, server_key)
}

fn random_nonce() -> String {
    let mut raw = [0u8; RAW_NONCE_LEN];
    rand::thread_rng().fill_bytes(&mut raw);
    STANDARD.encode(raw)
}

fn decode_key(b64: &str) -> Option<[u8; 32]> {
    STANDARD.decode(b64).ok()?.try_into().ok()
}

// ---------------------------------------------------------------------------------------------
// Message parsing
// ---------------------------------------------------------------------------------------------

fn utf8<'a>(msg: &'a [u8], what: &'static str) -> Result<&'a str, ScramError> {
    std::str::from_utf8(msg).map_err(|_| ScramError::Malformed(what))
}

/// `printable = %x21-2B / %x2D-7E` (RFC 5802): what a nonce is made of.
fn is_printable(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Value of attribute `name` (`<name>=<value>`) in `part`, or `err`.
fn attr(part: Option<&str>, name: u8, err: ScramError) -> Result<&str, ScramError> {
    match part {
        Some(p) if p.len() >= 2 && p.as_bytes()[0] == name && p.as_bytes()[1] == b'=' => {
            Ok(&p[2..])
        }
        _ => Err(err),
    }
}

/// Checks that the remaining attributes are well-formed extensions (`<letter>=<value>`), which
/// are ignored.
fn extensions<'a>(
    rest: impl Iterator<Item = &'a str>,
    what: &'static str,
) -> Result<(), ScramError> {
    for part in rest {
        let b = part.as_bytes();
        if b.len() < 2 || !b[0].is_ascii_alphabetic() || b[1] != b'=' {
            return Err(ScramError::Malformed(what));
        }
    }
    Ok(())
}

/// Escapes a username for `n=` (`=` → `=3D`, `,` → `=2C`).
fn escape_username(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

// ---------------------------------------------------------------------------------------------
// Secret
// ---------------------------------------------------------------------------------------------

impl ScramSecret {
    /// Parses PostgreSQL's verifier text; `None` if it is not one.
    pub fn parse(verifier: &str) -> Option<ScramSecret> {
        let rest = verifier.strip_prefix(VERIFIER_PREFIX)?;
        let (iter_salt, keys) = rest.split_once('$')?;
        let (iter, salt) = iter_salt.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        if iter.is_empty() || !iter.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let iterations: u32 = iter.parse().ok()?;
        if iterations == 0 {
            return None;
        }
        Some(ScramSecret {
            iterations,
            salt: STANDARD.decode(salt).ok()?,
            stored_key: decode_key(stored)?,
            server_key: decode_key(server)?,
        })
    }

    /// Derives a secret from a plaintext password, SASLprep'd as PostgreSQL does (if the
    /// password is not valid for SASLprep it is used as is; see [`saslprep`]). `iterations` of
    /// 0 is taken as 1 (PBKDF2 needs at least one round, and a verifier with 0 would not parse).
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> ScramSecret {
        let iterations = iterations.max(1);
        let (client_key, server_key) = keys_from_password(password, salt, iterations);
        ScramSecret {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key,
        }
    }

    /// Renders PostgreSQL's verifier text.
    pub fn to_verifier(&self) -> String {
        format!(
            "{VERIFIER_PREFIX}{}:{}${}:{}",
            self.iterations,
            STANDARD.encode(&self.salt),
            STANDARD.encode(self.stored_key),
            STANDARD.encode(self.server_key),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

enum ServerState {
    /// Waiting for client-first-message.
    Initial,
    /// server-first-message sent; waiting for client-final-message.
    SentFirst {
        /// Expected `c=` value: base64 of the client's gs2 header (and binding data with PLUS).
        cbind: String,
        client_first_bare: String,
        server_first: String,
        /// Client nonce + server nonce.
        nonce: String,
    },
    /// Finished, successfully or not.
    Done,
}

/// Verifying a client: pgcorral in the server's role.
pub struct ScramServer {
    secret: ScramSecret,
    server_nonce: String,
    /// `tls-server-end-point` data when SCRAM-SHA-256-PLUS is offered.
    binding: Option<Vec<u8>>,
    /// The client selected SCRAM-SHA-256-PLUS.
    plus: bool,
    state: ServerState,
}

impl std::fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            ServerState::Initial => "Initial",
            ServerState::SentFirst { .. } => "SentFirst",
            ServerState::Done => "Done",
        };
        f.debug_struct("ScramServer")
            .field("state", &state)
            .field("binding_offered", &self.binding.is_some())
            .field("plus", &self.plus)
            .finish_non_exhaustive()
    }
}

/// What a successful verification yields.
pub struct ServerOutcome {
    /// server-final-message (`v=...`) to send in AuthenticationSASLFinal.
    pub server_final: Vec<u8>,
    /// The client's ClientKey recovered from its proof: lets pgcorral log in to a server that
    /// holds the same secret without knowing the password.
    pub client_key: [u8; 32],
}

impl std::fmt::Debug for ServerOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOutcome")
            .field("server_final", &String::from_utf8_lossy(&self.server_final))
            .finish_non_exhaustive()
    }
}

impl ScramServer {
    /// Starts an exchange against `secret` with a random server nonce.
    pub fn new(secret: ScramSecret) -> ScramServer {
        ScramServer::with_nonce(secret, &random_nonce())
    }

    /// Same with a fixed server nonce (tests).
    pub fn with_nonce(secret: ScramSecret, nonce: &str) -> ScramServer {
        ScramServer {
            secret,
            server_nonce: nonce.to_owned(),
            binding: None,
            plus: false,
            state: ServerState::Initial,
        }
    }

    /// Offers SCRAM-SHA-256-PLUS with `data`, the `tls-server-end-point` value of the certificate
    /// this server presented on the client's TLS connection (see [`super::binding`]).
    ///
    /// Without it (the default) only SCRAM-SHA-256 is offered, and gs2 flag `y` is accepted.
    /// With it, `y` is refused as a downgrade ([`ScramError::BindingNegotiation`]), as
    /// PostgreSQL does on TLS connections.
    pub fn channel_binding(mut self, data: impl Into<Vec<u8>>) -> ScramServer {
        self.binding = Some(data.into());
        self
    }

    /// The mechanisms to list in AuthenticationSASL (see [`mechanisms`]).
    pub fn mechanisms(&self) -> &'static [&'static str] {
        mechanisms(self.binding.is_some())
    }

    /// Takes the mechanism name from SASLInitialResponse (the bytes before its NUL). Call it
    /// before [`ScramServer::client_first`]; without the call, SCRAM-SHA-256 is assumed.
    ///
    /// `SCRAM-SHA-256` is always accepted; `SCRAM-SHA-256-PLUS` only when channel binding is
    /// offered; anything else is [`ScramError::InvalidMechanism`], which ends the exchange.
    pub fn select_mechanism(&mut self, mechanism: &[u8]) -> Result<(), ScramError> {
        if !matches!(self.state, ServerState::Initial) {
            self.state = ServerState::Done;
            return Err(ScramError::OutOfOrder);
        }
        if mechanism == SCRAM_SHA_256.as_bytes() {
            self.plus = false;
        } else if mechanism == SCRAM_SHA_256_PLUS.as_bytes() && self.binding.is_some() {
            self.plus = true;
        } else {
            self.state = ServerState::Done;
            return Err(ScramError::InvalidMechanism);
        }
        Ok(())
    }

    /// Takes client-first-message (the data of SASLInitialResponse), returns server-first-message.
    pub fn client_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        match std::mem::replace(&mut self.state, ServerState::Done) {
            ServerState::Initial => {}
            _ => return Err(ScramError::OutOfOrder),
        }
        let text = utf8(msg, "client-first-message is not UTF-8")?;

        // gs2-header = gs2-cbind-flag "," [ authzid ] ","
        // The checks and their order are PostgreSQL's (read_client_first_message).
        let (flag, rest) = text
            .split_once(',')
            .ok_or(ScramError::Malformed("missing gs2 header"))?;
        let cbind = match flag {
            "n" | "y" if self.plus => {
                return Err(ScramError::Malformed(
                    "client selected SCRAM-SHA-256-PLUS, but the message does not include \
                     channel binding data",
                ))
            }
            "n" => "biws".to_owned(), // base64("n,,")
            "y" if self.binding.is_some() => return Err(ScramError::BindingNegotiation),
            "y" => "eSws".to_owned(), // base64("y,,")
            f if f.starts_with("p=") => {
                let Some(data) = self.binding.as_deref().filter(|_| self.plus) else {
                    return Err(ScramError::Malformed(
                        "client selected SCRAM-SHA-256 without channel binding, but the \
                         message includes channel binding data",
                    ));
                };
                if &f[2..] != TLS_SERVER_END_POINT {
                    return Err(ScramError::Malformed("unsupported channel binding type"));
                }
                plus_cbind(data)
            }
            _ => return Err(ScramError::Malformed("invalid gs2 channel binding flag")),
        };
        let (authzid, bare) = rest
            .split_once(',')
            .ok_or(ScramError::Malformed("missing gs2 header"))?;
        if !authzid.is_empty() {
            return Err(ScramError::Malformed(
                "authorization identity is not supported",
            ));
        }

        // client-first-message-bare = [reserved-mext ","] username "," nonce ["," extensions]
        let mut parts = bare.split(',');
        let first = parts.next();
        if first.is_some_and(|p| p.starts_with("m=")) {
            return Err(ScramError::Malformed(
                "unsupported mandatory SCRAM extension",
            ));
        }
        // The username is ignored, as PostgreSQL does: the startup packet names the user.
        attr(
            first,
            b'n',
            ScramError::Malformed("missing username attribute"),
        )?;
        let client_nonce = attr(parts.next(), b'r', ScramError::Malformed("missing nonce"))?;
        if client_nonce.is_empty() || !is_printable(client_nonce) {
            return Err(ScramError::Malformed("invalid client nonce"));
        }
        extensions(parts, "invalid attribute in client-first-message")?;

        let nonce = format!("{client_nonce}{}", self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&self.secret.salt),
            self.secret.iterations
        );
        let reply = server_first.clone().into_bytes();
        self.state = ServerState::SentFirst {
            cbind,
            client_first_bare: bare.to_owned(),
            server_first,
            nonce,
        };
        Ok(reply)
    }

    /// Takes client-final-message, verifies the proof.
    pub fn client_final(&mut self, msg: &[u8]) -> Result<ServerOutcome, ScramError> {
        let (cbind, client_first_bare, server_first, nonce) =
            match std::mem::replace(&mut self.state, ServerState::Done) {
                ServerState::SentFirst {
                    cbind,
                    client_first_bare,
                    server_first,
                    nonce,
                } => (cbind, client_first_bare, server_first, nonce),
                _ => return Err(ScramError::OutOfOrder),
            };
        let text = utf8(msg, "client-final-message is not UTF-8")?;

        // client-final-message = channel-binding "," nonce ["," extensions] "," proof
        let (without_proof, proof_b64) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("missing proof"))?;
        let mut parts = without_proof.split(',');
        let c = attr(
            parts.next(),
            b'c',
            ScramError::Malformed("missing channel binding"),
        )?;
        if c != cbind {
            return Err(if self.plus {
                ScramError::BindingMismatch
            } else {
                ScramError::Malformed("channel binding does not match the gs2 header")
            });
        }
        let r = attr(parts.next(), b'r', ScramError::Malformed("missing nonce"))?;
        if r != nonce {
            return Err(ScramError::Malformed("nonce mismatch"));
        }
        extensions(parts, "invalid attribute in client-final-message")?;
        let proof = decode_key(proof_b64).ok_or(ScramError::Malformed("invalid proof"))?;

        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = hmac(&self.secret.stored_key, &[auth_message.as_bytes()]);
        let client_key = xor(&proof, &client_signature);
        if !ct_eq(&sha256(&client_key), &self.secret.stored_key) {
            return Err(ScramError::BadProof);
        }
        let server_signature = hmac(&self.secret.server_key, &[auth_message.as_bytes()]);
        let server_final = format!("v={}", STANDARD.encode(server_signature)).into_bytes();
        Ok(ServerOutcome {
            server_final,
            client_key,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

/// What the client knows.
enum Credentials {
    Password(String),
    Keys {
        client_key: [u8; 32],
        server_key: [u8; 32],
    },
}

/// The client's channel binding choice: the gs2 flag it sends.
enum ClientBinding {
    /// `n`: no channel binding (no TLS, or binding not wanted).
    None,
    /// `y`: the client could bind but the server did not offer SCRAM-SHA-256-PLUS.
    Supported,
    /// `p=tls-server-end-point` with this binding data; mechanism SCRAM-SHA-256-PLUS.
    EndPoint(Vec<u8>),
}

enum ClientState {
    /// client-first-message not produced yet.
    Initial,
    /// client-first-message sent; waiting for server-first-message.
    SentFirst { client_first_bare: String },
    /// client-final-message sent; waiting for server-final-message.
    SentFinal { server_signature: [u8; 32] },
    /// Finished, successfully or not.
    Done,
}

/// Answering a server: pgcorral in the client's role.
pub struct ScramClient {
    credentials: Credentials,
    nonce: String,
    /// Sent in `n=`; PostgreSQL ignores it, so it is empty except in tests.
    username: String,
    binding: ClientBinding,
    state: ClientState,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            ClientState::Initial => "Initial",
            ClientState::SentFirst { .. } => "SentFirst",
            ClientState::SentFinal { .. } => "SentFinal",
            ClientState::Done => "Done",
        };
        f.debug_struct("ScramClient")
            .field("state", &state)
            .field("mechanism", &self.mechanism())
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    fn build(credentials: Credentials, nonce: String) -> ScramClient {
        ScramClient {
            credentials,
            nonce,
            username: String::new(),
            binding: ClientBinding::None,
            state: ClientState::Initial,
        }
    }

    /// Client that knows the plaintext password; random nonce.
    pub fn new(password: &str) -> ScramClient {
        ScramClient::with_nonce(password, &random_nonce())
    }

    /// Client that knows only ClientKey and ServerKey (from a verifier plus a client's proof);
    /// works when the server's secret has the same salt and iterations.
    pub fn with_keys(client_key: [u8; 32], server_key: [u8; 32]) -> ScramClient {
        ScramClient::build(
            Credentials::Keys {
                client_key,
                server_key,
            },
            random_nonce(),
        )
    }

    /// Same as `new` with a fixed client nonce (tests).
    pub fn with_nonce(password: &str, nonce: &str) -> ScramClient {
        ScramClient::build(Credentials::Password(password.to_owned()), nonce.to_owned())
    }

    /// Uses channel binding: `data` is the `tls-server-end-point` value of the certificate the
    /// server presented on this TLS connection (see [`super::binding`]). The mechanism becomes
    /// SCRAM-SHA-256-PLUS and the gs2 header `p=tls-server-end-point,,`. Only for a server that
    /// listed SCRAM-SHA-256-PLUS.
    pub fn channel_binding(mut self, data: impl Into<Vec<u8>>) -> ScramClient {
        self.binding = ClientBinding::EndPoint(data.into());
        self
    }

    /// For a TLS connection whose server did not list SCRAM-SHA-256-PLUS: sends gs2 flag `y`
    /// ("I could bind, I think you cannot") with mechanism SCRAM-SHA-256, so that a server that
    /// does support binding detects the downgrade. Replaces [`ScramClient::channel_binding`].
    pub fn binding_not_offered(mut self) -> ScramClient {
        self.binding = ClientBinding::Supported;
        self
    }

    /// Chooses as libpq with `channel_binding=prefer`, from the mechanisms the server listed
    /// (AuthenticationSASL) and the binding data of the TLS connection (`None` without TLS, or
    /// when the certificate defines no binding hash):
    /// data and PLUS listed → PLUS with binding; data but no PLUS → SCRAM-SHA-256 with flag `y`;
    /// no data → SCRAM-SHA-256 with flag `n`. `None` when the list has nothing usable.
    pub fn negotiate(self, offered: &[&str], binding: Option<Vec<u8>>) -> Option<ScramClient> {
        let plain = offered.contains(&SCRAM_SHA_256);
        match binding {
            Some(data) if offered.contains(&SCRAM_SHA_256_PLUS) => Some(self.channel_binding(data)),
            Some(_) if plain => Some(self.binding_not_offered()),
            None if plain => Some(ScramClient {
                binding: ClientBinding::None,
                ..self
            }),
            _ => None,
        }
    }

    /// The mechanism name to send in SASLInitialResponse.
    pub fn mechanism(&self) -> &'static str {
        match self.binding {
            ClientBinding::EndPoint(_) => SCRAM_SHA_256_PLUS,
            ClientBinding::None | ClientBinding::Supported => SCRAM_SHA_256,
        }
    }

    fn gs2_header(&self) -> String {
        match self.binding {
            ClientBinding::None => "n,,".to_owned(),
            ClientBinding::Supported => "y,,".to_owned(),
            ClientBinding::EndPoint(_) => plus_gs2_header(),
        }
    }

    /// The `c=` value: base64 of the gs2 header, followed by the binding data with PLUS.
    fn cbind(&self) -> String {
        match &self.binding {
            ClientBinding::None => "biws".to_owned(),
            ClientBinding::Supported => "eSws".to_owned(),
            ClientBinding::EndPoint(data) => plus_cbind(data),
        }
    }

    /// client-first-message for SASLInitialResponse (`n,,n=,r=<nonce>`; the gs2 header is
    /// `y,,` or `p=tls-server-end-point,,` when set so).
    ///
    /// Calling it again restarts the exchange.
    pub fn client_first(&mut self) -> Vec<u8> {
        let client_first_bare = format!("n={},r={}", escape_username(&self.username), self.nonce);
        let msg = format!("{}{client_first_bare}", self.gs2_header()).into_bytes();
        self.state = ClientState::SentFirst { client_first_bare };
        msg
    }

    /// Takes server-first-message, returns client-final-message.
    pub fn server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let client_first_bare = match std::mem::replace(&mut self.state, ClientState::Done) {
            ClientState::SentFirst { client_first_bare } => client_first_bare,
            _ => return Err(ScramError::OutOfOrder),
        };
        let text = utf8(msg, "server-first-message is not UTF-8")?;

        // server-first-message = [reserved-mext ","] nonce "," salt "," iteration-count
        //                        ["," extensions]
        let mut parts = text.split(',');
        let first = parts.next();
        if first.is_some_and(|p| p.starts_with("m=")) {
            return Err(ScramError::Malformed(
                "unsupported mandatory SCRAM extension",
            ));
        }
        let nonce = attr(first, b'r', ScramError::Malformed("missing nonce"))?;
        if !is_printable(nonce) {
            return Err(ScramError::Malformed("invalid server nonce"));
        }
        if nonce.len() <= self.nonce.len() || !nonce.starts_with(self.nonce.as_str()) {
            return Err(ScramError::BadServer("server nonce does not extend ours"));
        }
        let salt_b64 = attr(parts.next(), b's', ScramError::Malformed("missing salt"))?;
        let salt = STANDARD
            .decode(salt_b64)
            .map_err(|_| ScramError::Malformed("invalid salt"))?;
        let iter = attr(
            parts.next(),
            b'i',
            ScramError::Malformed("missing iteration count"),
        )?;
        let iterations = Some(iter)
            .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|i| i.parse::<u32>().ok())
            .filter(|&i| i > 0)
            .ok_or(ScramError::Malformed("invalid iteration count"))?;
        extensions(parts, "invalid attribute in server-first-message")?;

        let (client_key, server_key) = match &self.credentials {
            Credentials::Password(password) => keys_from_password(password, &salt, iterations),
            Credentials::Keys {
                client_key,
                server_key,
            } => (*client_key, *server_key),
        };
        let stored_key = sha256(&client_key);
        let without_proof = format!("c={},r={nonce}", self.cbind());
        let auth_message = format!("{client_first_bare},{text},{without_proof}");
        let client_signature = hmac(&stored_key, &[auth_message.as_bytes()]);
        let proof = xor(&client_key, &client_signature);
        let server_signature = hmac(&server_key, &[auth_message.as_bytes()]);
        self.state = ClientState::SentFinal { server_signature };
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes())
    }

    /// Takes server-final-message and checks the server's signature.
    pub fn server_final(&mut self, msg: &[u8]) -> Result<(), ScramError> {
        let expected = match std::mem::replace(&mut self.state, ClientState::Done) {
            ClientState::SentFinal { server_signature } => server_signature,
            _ => return Err(ScramError::OutOfOrder),
        };
        let text = utf8(msg, "server-final-message is not UTF-8")?;

        // server-final-message = (server-error / verifier) ["," extensions]
        let mut parts = text.split(',');
        let first = parts.next();
        if let Some(error) = first.and_then(|p| p.strip_prefix("e=")) {
            return Err(ScramError::BadServer(server_error(error)));
        }
        let v = attr(first, b'v', ScramError::Malformed("missing verifier"))?;
        extensions(parts, "invalid attribute in server-final-message")?;
        let signature = decode_key(v).ok_or(ScramError::Malformed("invalid server signature"))?;
        if !ct_eq(&signature, &expected) {
            return Err(ScramError::BadServer("server signature does not verify"));
        }
        Ok(())
    }
}

/// The `e=` values of RFC 5802 as static text; anything else is "server reported an error".
fn server_error(value: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "invalid-encoding",
        "extensions-not-supported",
        "invalid-proof",
        "channel-bindings-dont-match",
        "server-does-support-channel-binding",
        "channel-binding-not-supported",
        "unsupported-channel-binding-type",
        "unknown-user",
        "invalid-username-encoding",
        "no-resources",
        "other-error",
    ];
    KNOWN
        .iter()
        .find(|k| **k == value)
        .copied()
        .unwrap_or("server reported an error")
}

#[cfg(test)]
#[path = "scram_tests.rs"]
mod tests;
