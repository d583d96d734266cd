//! Online restart (`-R`), the clients' part: once a new process has the listeners, an idle pool
//! client here (between transactions, on a plaintext socket, without prepared statements, of a
//! database without routing) is sent to it with its socket and its session (login names, cancel
//! key, settings), and goes on there as if nothing happened. Other clients finish here.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use corral_rt::stream::Detached;

use super::{admit, go_on, LoggedIn, Moved};
use crate::cancel::CancelSlot;
use crate::client_conn::ClientConn;
use crate::link::Link;
use crate::logsafe::Esc;
use crate::net::peer::Peer;
use crate::pool::ClientWait;
use crate::prepared;
use crate::route;
use crate::services::{ClientCount, Services};

/// A client as sent to the new process: all of it but its socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    /// The database and user it logged in as.
    pub database: String,
    pub user: String,
    pub application_name: String,
    /// Its cancel key.
    pub pid: i32,
    pub secret: i32,
    pub peer: Peer,
    /// Its session's settings, and those of them its startup packet set.
    pub settings: Vec<(String, String)>,
    pub startup: Vec<(String, String)>,
    pub custom: Vec<String>,
    /// Bytes read from the client and not yet handled (the start of its next request).
    pub unread: Vec<u8>,
    /// The body of its last Parse of the unnamed statement (empty: none).
    pub unnamed: Vec<u8>,
    /// Bytes written to the client that its socket had no room for yet.
    pub unsent: Vec<u8>,
    pub max_len: u32,
    /// The SCRAM client key its pool logs in to servers with (SCRAM passed through).
    pub client_key: Option<[u8; 32]>,
}

/// Whether the client may go to the new process at this point (no server held, between
/// requests): nothing of its session lives only in this process.
pub(super) fn movable(client: &ClientConn, session: &LoggedIn) -> bool {
    session.link.is_free()
        && client.pass == 0
        && !client.stream.is_tls()
        && client.statements.only_unnamed()
        && session.pinned.is_empty()
        // Its listening is this process's hub's.
        && session.listening.is_none()
        && !session.cluster.routed()
        // A tenant's pools are the tenant's: a new process loads the tenant with the client's
        // next login.
        && session.tenant.is_none()
}

/// Sends the client to the new process. It leaves this one as a client that went away (its
/// cancel key, its place in the pool's and SHOW CLIENTS' counts), without a word to it.
pub(super) fn send(client: ClientConn, session: LoggedIn, services: &Services) {
    let Some(to) = services.handover.get() else {
        return;
    };
    let ClientConn {
        stream,
        peer,
        buf,
        max_len,
        custom,
        statements,
        ..
    } = client;
    services.cancel.unregister(session.pid, session.secret);
    let (fd, unsent): (OwnedFd, Vec<u8>) = match stream.detach() {
        Ok(Detached::Plain(s, held)) => (s.into(), held),
        Ok(Detached::Unix(s, held)) => (s.into(), held),
        Ok(Detached::Tls(..)) | Err(_) => {
            tracing::warn!(%peer, "could not hand a client to the new process; closing it");
            return;
        }
    };
    let handed = Handed {
        database: session.listed.database().to_string(),
        user: session.listed.user().to_string(),
        application_name: session.listed.application_name().to_string(),
        pid: session.pid,
        secret: session.secret,
        peer,
        settings: session.settings.to_vec(),
        startup: session.startup.to_vec(),
        custom: custom.into(),
        unread: buf.to_vec(),
        unnamed: statements.unnamed().unwrap_or_default().to_vec(),
        unsent,
        max_len,
        client_key: session.pool.client_key(),
    };
    tracing::info!(peer = %handed.peer, "client handed over to the new process");
    services.handover_pending.fetch_add(1, Ordering::AcqRel);
    if to.send((handed.encode(), fd)).is_err() {
        services.handover_pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sends a client the old process sent on to the process that has since taken this one over,
/// as it came (it never ran here).
pub fn pass_on(services: &Services, encoded: Vec<u8>, fd: OwnedFd) {
    let Some(to) = services.handover.get() else {
        return;
    };
    tracing::info!("client from the old process passed on to the new process");
    services.handover_pending.fetch_add(1, Ordering::AcqRel);
    if to.send((encoded, fd)).is_err() {
        services.handover_pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes over a client the old process sent: logged in again from its state (no exchange with
/// the client), and served on `worker` from its next request on. Refused (closed) when its
/// database or user is gone from the configuration, or max_client_conn is reached.
pub fn resume(services: &Services, encoded: &[u8], fd: OwnedFd, worker: usize) {
    let Some(h) = Handed::decode(encoded) else {
        tracing::warn!("a handed-over client's state could not be read; closing it");
        return;
    };
    // The address it connected to, for SHOW CLIENTS (a Unix socket shows its port only).
    let (socket, local) = match h.peer {
        Peer::Tcp(_) => {
            let tcp = std::net::TcpStream::from(fd);
            let local = tcp.local_addr().ok();
            (Detached::Plain(tcp, h.unsent.clone()), local)
        }
        Peer::Unix { .. } => (Detached::Unix(fd.into(), h.unsent.clone()), None),
    };
    let Some(moved) = session_of(services, &h, worker, local) else {
        tracing::warn!(peer = %h.peer, database = %Esc(&h.database), "a handed-over client has no place here; closing it");
        return;
    };
    if let Some(handle) = services.balance.handle(worker) {
        go_on(handle, socket, h.peer, services.clone(), worker, moved);
    }
}

/// The client's session in this process, as its login would have made it.
fn session_of(
    services: &Services,
    h: &Handed,
    worker: usize,
    local: Option<SocketAddr>,
) -> Option<Box<Moved>> {
    let config = services.config.load_full();
    let cluster = services.pools.get(&config, &h.database, &h.user).ok()?;
    let mut count: ClientCount = services.admit_client(false)?;
    let caps = (
        config.db_client_cap(&h.database),
        config.user_client_cap(&h.user),
    );
    count.name(&h.database, &h.user, caps, false).ok()?;
    let pool = cluster.home().clone();
    if let Some(key) = h.client_key {
        cluster.learn_client_key(key);
    }
    let slot = Arc::new(CancelSlot::default());
    if !services.cancel.adopt(h.pid, h.secret, slot.clone()) {
        return None;
    }
    let names = admit::listed_names(&pool, &h.user);
    let id = services.pools.lists.reserve();
    let app = h.application_name.clone();
    let listed = admit::list_at(services, id, h.peer, local, names, app, String::new());
    pool.client_joined();
    pool.stats().logged_in(worker);
    let wait = ClientWait::of_user(&config, &h.user);
    let session = LoggedIn {
        tenant: None,
        pool,
        cluster,
        // Allocated where routing needs it; at once when strings take backslash escapes.
        route: {
            let escapes = route::escapes(&h.settings);
            escapes.then(|| {
                Box::new(route::ClientRoute {
                    escapes,
                    ..Default::default()
                })
            })
        },
        listed,
        link: Link::Free,
        slot,
        pid: h.pid,
        secret: h.secret,
        settings: Arc::new(h.settings.clone()),
        startup: Arc::new(h.startup.clone()),
        pinned: thin_vec::ThinVec::new(),
        wait,
        listening: None,
    };
    let mut statements = prepared::ClientStatements::default();
    if !h.unnamed.is_empty() {
        statements.set_unnamed(&h.unnamed);
    }
    Some(Box::new(Moved {
        buf: BytesMut::from(&h.unread[..]),
        pass: 0,
        max_len: h.max_len,
        custom: h.custom.as_slice().into(),
        statements,
        session: Box::new(session),
        count,
    }))
}

impl Handed {
    /// Its bytes on the takeover socket.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(256));
        w.str(&self.database);
        w.str(&self.user);
        w.str(&self.application_name);
        w.u32(self.pid as u32);
        w.u32(self.secret as u32);
        match self.peer {
            Peer::Tcp(addr) => {
                w.u8(0);
                w.str(&addr.to_string());
            }
            Peer::Unix { port, pid, uid } => {
                w.u8(1);
                w.u32(u32::from(port));
                w.u32(pid as u32);
                w.u8(u8::from(uid.is_some()));
                w.u32(uid.unwrap_or(0));
            }
        }
        for list in [&self.settings, &self.startup] {
            w.u32(list.len() as u32);
            for (k, v) in list {
                w.str(k);
                w.str(v);
            }
        }
        w.u32(self.custom.len() as u32);
        for c in &self.custom {
            w.str(c);
        }
        w.bytes(&self.unread);
        w.bytes(&self.unnamed);
        w.bytes(&self.unsent);
        w.u32(self.max_len);
        match &self.client_key {
            Some(k) => {
                w.u8(1);
                w.0.extend_from_slice(k);
            }
            None => w.u8(0),
        }
        w.0
    }

    /// Reads [`Handed::encode`]'s bytes; `None` for anything else.
    pub fn decode(b: &[u8]) -> Option<Handed> {
        let mut r = Reader(b);
        let database = r.str()?;
        let user = r.str()?;
        let application_name = r.str()?;
        let pid = r.u32()? as i32;
        let secret = r.u32()? as i32;
        let peer = match r.u8()? {
            0 => Peer::Tcp(r.str()?.parse::<SocketAddr>().ok()?.into()),
            1 => {
                let port = u16::try_from(r.u32()?).ok()?;
                let pid = r.u32()? as i32;
                let has_uid = r.u8()? == 1;
                let uid = r.u32()?;
                Peer::Unix {
                    port,
                    pid,
                    uid: has_uid.then_some(uid),
                }
            }
            _ => return None,
        };
        let mut pairs = || -> Option<Vec<(String, String)>> {
            let n = r.u32()?;
            (0..n).map(|_| Some((r.str()?, r.str()?))).collect()
        };
        let settings = pairs()?;
        let startup = pairs()?;
        let n = r.u32()?;
        let custom = (0..n).map(|_| r.str()).collect::<Option<Vec<_>>>()?;
        let unread = r.bytes()?.to_vec();
        let unnamed = r.bytes()?.to_vec();
        let unsent = r.bytes()?.to_vec();
        let max_len = r.u32()?;
        let client_key = match r.u8()? {
            0 => None,
            1 => Some(r.take(32)?.try_into().ok()?),
            _ => return None,
        };
        r.0.is_empty().then_some(Handed {
            database,
            user,
            application_name,
            pid,
            secret,
            peer,
            settings,
            startup,
            custom,
            unread,
            unnamed,
            unsent,
            max_len,
            client_key,
        })
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_state_reads_back_as_written_and_garbage_does_not() {
        let h = Handed {
            database: "db".into(),
            user: "ü".into(),
            application_name: "app".into(),
            pid: -5,
            secret: i32::MIN,
            peer: Peer::Unix {
                port: 6432,
                pid: 77,
                uid: Some(1000),
            },
            settings: vec![("search_path".into(), "a, b".into())],
            startup: vec![],
            custom: vec!["my.x".into()],
            unread: b"Q\0\0".to_vec(),
            unnamed: b"\0SELECT 1\0\0\0".to_vec(),
            unsent: vec![],
            max_len: 1 << 30,
            client_key: Some([7; 32]),
        };
        let bytes = h.encode();
        assert_eq!(Handed::decode(&bytes), Some(h.clone()));
        let tcp = Handed {
            peer: Peer::Tcp("[::1]:5000".parse::<SocketAddr>().unwrap().into()),
            client_key: None,
            ..h
        };
        assert_eq!(Handed::decode(&tcp.encode()), Some(tcp));
        for cut in 0..bytes.len() {
            assert_eq!(Handed::decode(&bytes[..cut]), None);
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Handed::decode(&longer), None);
    }
}
