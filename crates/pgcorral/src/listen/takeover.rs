//! Online restart (`-R`, PgBouncer's `--reboot`): a new process asks the running one, over the
//! Unix socket `<unix_socket_dir>/.s.TAKE.<port>` (mode 0600, same OS user only), for
//! its listening sockets. The running one hands them over and stops accepting; then, over the
//! same connection, it sends each client as it becomes idle (its state and its socket, see
//! `client::handover`), and exits once the clients it could not send have left. No connection
//! is refused in between: the sockets, and the connections waiting in their backlogs, are the
//! same.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::sockopt::socket_peercred;
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use rustix::process::geteuid;

/// What a new process asks for.
const REQUEST: &[u8] = b"pgcorral takeover 1\n";
/// What it answers once it has the listeners: clients may follow.
const READY: &[u8] = b"ok\n";
/// The answer's text before the descriptors: how many listeners, TCP first.
const ANSWER: &str = "pgcorral listeners";
/// How long either side waits for the other.
const PATIENCE: Duration = Duration::from_secs(10);

/// The takeover socket beside the client socket of `port` in `dir`: `.s.TAKE.<port>`, a name
/// shorter than the client socket's `.s.PGSQL.<port>`, so that it fits a socket address
/// wherever the client socket does.
pub fn path(dir: &str, port: u16) -> PathBuf {
    Path::new(dir).join(format!(".s.TAKE.{port}"))
}

/// Where pgcorral listened for a takeover before `.s.TAKE.<port>`, 9 bytes longer than the
/// client socket: asked when nothing answers at [`path`], so that `-R` replaces a process of
/// an older pgcorral too.
fn legacy_path(dir: &str, port: u16) -> PathBuf {
    Path::new(dir).join(format!(".s.PGSQL.{port}.takeover"))
}

/// [`take`] from the process listening in `dir` on `port` (at [`path`], or at an older
/// pgcorral's [`legacy_path`], whose file is removed once taken over: nothing listens there).
pub fn take_in(dir: &str, port: u16) -> io::Result<Inherited> {
    let path = path(dir, port);
    let e = match take(&path) {
        Ok(got) => return Ok(got),
        Err(e) => e,
    };
    let legacy = legacy_path(dir, port);
    let absent = matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    );
    // sun_path holds 108 bytes with its NUL.
    if !absent || legacy.as_os_str().len() >= 108 || !legacy.exists() {
        return Err(e);
    }
    let got = take(&legacy)?;
    let _ = std::fs::remove_file(&legacy);
    Ok(got)
}

/// The listening sockets a new process got from the one it replaces.
pub struct Inherited {
    pub tcp: OwnedFd,
    /// The Unix listener, when the old process had one.
    pub unix: Option<OwnedFd>,
    /// The connection to the old process, over which its clients come ([`receive_client`]).
    pub from_old: UnixStream,
}

/// The new process's side: asks the process listening at `path` for its listeners. The
/// connection stays open: the old process's clients come over it ([`receive_client`]).
pub fn take(path: &Path) -> io::Result<Inherited> {
    let stream = UnixStream::connect(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    stream.set_read_timeout(Some(PATIENCE))?;
    stream.set_write_timeout(Some(PATIENCE))?;
    (&stream).write_all(REQUEST)?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut text = [0u8; 64];
    let got = recvmsg(
        &stream,
        &mut [IoSliceMut::new(&mut text)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    let text = std::str::from_utf8(&text[..got.bytes]).unwrap_or("");
    let count: usize = match text.trim_end().strip_prefix(ANSWER) {
        Some(n) => n.trim().parse().unwrap_or(0),
        None => 0,
    };
    if count == 0 || count != fds.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a pgcorral takeover answer", path.display()),
        ));
    }
    let mut fds = fds.into_iter();
    let tcp = fds.next().expect("counted");
    (&stream).write_all(READY)?;
    stream.set_read_timeout(None)?;
    Ok(Inherited {
        tcp,
        unix: fds.next(),
        from_old: stream,
    })
}

/// The next client the old process sends: its encoded state and its socket; `None` once the
/// old process is gone.
fn receive_client(stream: &UnixStream) -> io::Result<Option<(Vec<u8>, OwnedFd)>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut len = [0u8; 4];
    let got = recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut len)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if got.bytes == 0 {
        return Ok(None);
    }
    let mut fd = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut rights) = message {
            fd = fd.or(rights.next());
        }
    }
    (&*stream).read_exact(&mut len[got.bytes..])?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_CLIENT_STATE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "client state too long",
        ));
    }
    let mut state = vec![0u8; n];
    (&*stream).read_exact(&mut state)?;
    match fd {
        Some(fd) => Ok(Some((state, fd))),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a client without its socket",
        )),
    }
}

/// Sends one client to the new process: `state`'s length and the socket, then `state`.
fn send_client(stream: &UnixStream, state: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let len = u32::try_from(state.len())
        .ok()
        .filter(|&n| n as usize <= MAX_CLIENT_STATE)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "client state too long"))?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptor"));
    }
    let len = len.to_be_bytes();
    let sent = sendmsg(
        stream.as_fd(),
        &[IoSlice::new(&len)],
        &mut control,
        SendFlags::empty(),
    )?;
    (&*stream).write_all(&len[sent..])?;
    (&*stream).write_all(state)
}

/// Reads the old process's clients on a thread of its own and passes each to `to`, until
/// the old process is gone (or `to` is).
pub fn receive_clients(
    from_old: UnixStream,
    to: tokio::sync::mpsc::UnboundedSender<(Vec<u8>, OwnedFd)>,
) {
    std::thread::spawn(move || loop {
        match receive_client(&from_old) {
            Ok(Some(c)) => {
                if to.send(c).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "takeover: reading the old process's clients failed");
                return;
            }
        }
    });
}

/// Sends the clients that come on `sent` to the new process, on a thread of its own; `done`
/// runs after each (sent, or closed when it could not be).
pub fn send_clients(
    to_new: UnixStream,
    sent: std::sync::mpsc::Receiver<(Vec<u8>, OwnedFd)>,
    done: impl Fn() + Send + 'static,
) {
    std::thread::spawn(move || {
        for (state, fd) in sent {
            if let Err(e) = send_client(&to_new, &state, fd.as_fd()) {
                tracing::warn!(error = %e, "takeover: a client could not be sent; closed");
            }
            drop(fd);
            done();
        }
    });
}

/// Largest client state accepted (its unread and unsent bytes are bounded by its buffers).
const MAX_CLIENT_STATE: usize = 64 << 20;

/// The running process's side, on a connection accepted on its takeover socket: checks that
/// the peer runs as this process's user and asked for a takeover, then sends `tcp` and `unix`.
/// Returns the connection once the new process has them, for [`send_client`]. Blocking, with
/// [`PATIENCE`]; run off the runtime's threads.
pub fn give(
    stream: UnixStream,
    tcp: BorrowedFd<'_>,
    unix: Option<BorrowedFd<'_>>,
) -> io::Result<UnixStream> {
    let peer = socket_peercred(&stream)?;
    if peer.uid != geteuid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "takeover asked by another OS user",
        ));
    }
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(PATIENCE))?;
    stream.set_write_timeout(Some(PATIENCE))?;
    let mut asked = [0u8; REQUEST.len()];
    (&stream).read_exact(&mut asked)?;
    if asked != REQUEST {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a pgcorral takeover request",
        ));
    }
    let fds: Vec<BorrowedFd<'_>> = std::iter::once(tcp).chain(unix).collect();
    let text = format!("{ANSWER} {}\n", fds.len());
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    sendmsg(
        stream.as_fd(),
        &[IoSlice::new(text.as_bytes())],
        &mut control,
        SendFlags::empty(),
    )?;
    // The new process has them once it answers.
    let mut ready = [0u8; READY.len()];
    (&stream).read_exact(&mut ready)?;
    if ready != READY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no takeover answer",
        ));
    }
    stream.set_write_timeout(None)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sides over a real socket: the listeners arrive as working sockets, a wrong request
    /// gets nothing.
    #[test]
    fn listeners_go_across_and_keep_their_queue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.takeover");
        let server = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        // A connection waiting in the backlog before the takeover is accepted after it.
        let waiting = std::net::TcpStream::connect(addr).unwrap();
        let giver = std::thread::spawn(move || {
            let (s, _) = server.accept().unwrap();
            let s = give(s, tcp.as_fd(), None).unwrap();
            // And a client after the listeners: its state and its socket.
            let (a, mut b) = UnixStream::pair().unwrap();
            send_client(&s, b"state", a.as_fd()).unwrap();
            drop(a);
            b.write_all(b"y").unwrap();
        });
        let got = take(&path).unwrap();
        drop(got.unix);
        let stream = got.from_old;
        let (state, fd) = receive_client(&stream).unwrap().unwrap();
        assert_eq!(state, b"state");
        let mut moved = UnixStream::from(fd);
        let mut y = [0u8; 1];
        moved.read_exact(&mut y).unwrap();
        assert_eq!(&y, b"y");
        giver.join().unwrap();
        assert!(
            receive_client(&stream).unwrap().is_none(),
            "the old side closed"
        );
        let taken = std::net::TcpListener::from(got.tcp);
        assert_eq!(taken.local_addr().unwrap(), addr);
        let (mut accepted, _) = taken.accept().unwrap();
        (&waiting).write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        accepted.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"x");

        let server = std::os::unix::net::UnixListener::bind(dir.path().join("u")).unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut wrong = UnixStream::connect(dir.path().join("u")).unwrap();
        wrong.write_all(b"GET / HTTP/1.0\nHost: x\n\n").unwrap();
        let (s, _) = server.accept().unwrap();
        assert!(give(s, tcp.as_fd(), None).is_err());
    }

    /// A process of an older pgcorral listens at the longer legacy name: asked there when
    /// nothing answers at the new one, and its file removed afterwards.
    #[test]
    fn an_older_process_is_asked_at_its_own_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap().to_string();
        assert!(take_in(&d, 5999).is_err(), "nothing listens");
        let legacy = legacy_path(&d, 5999);
        let server = std::os::unix::net::UnixListener::bind(&legacy).unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let giver = std::thread::spawn(move || {
            let (s, _) = server.accept().unwrap();
            drop(give(s, tcp.as_fd(), None).unwrap());
        });
        let got = take_in(&d, 5999).unwrap();
        giver.join().unwrap();
        let taken = std::net::TcpListener::from(got.tcp);
        assert_eq!(taken.local_addr().unwrap(), addr);
        assert!(!legacy.exists());
        // The name now is shorter than the client socket's: it fits wherever that one does.
        let client = format!("{d}/.s.PGSQL.5999");
        assert!(path(&d, 5999).as_os_str().len() < client.len());
    }
}
