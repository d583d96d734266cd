//! Online restart (`-R`, PgBouncer's `--reboot`): a new process asks the running one, over the
//! Unix socket `<unix_socket_dir>/.s.PGSQL.<port>.takeover` (mode 0600, same OS user only), for
//! its listening sockets. The running one hands them over and stops accepting; its clients go on
//! there until each leaves, and it exits then (as SHUTDOWN WAIT_FOR_CLIENTS). No connection is
//! refused in between: the sockets, and the connections waiting in their backlogs, are the
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
/// The answer's text before the descriptors: how many listeners, TCP first.
const ANSWER: &str = "pgcorral listeners";
/// How long either side waits for the other.
const PATIENCE: Duration = Duration::from_secs(10);

/// The takeover socket beside the client socket of `port` in `dir`.
pub fn path(dir: &str, port: u16) -> PathBuf {
    Path::new(dir).join(format!(".s.PGSQL.{port}.takeover"))
}

/// The listening sockets a new process got from the one it replaces.
pub struct Inherited {
    pub tcp: OwnedFd,
    /// The Unix listener, when the old process had one.
    pub unix: Option<OwnedFd>,
}

/// The new process's side: asks the process listening at `path` for its listeners.
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
    Ok(Inherited {
        tcp,
        unix: fds.next(),
    })
}

/// The running process's side, on a connection accepted on its takeover socket: checks that
/// the peer runs as this process's user and asked for a takeover, then sends `tcp` and `unix`.
/// Blocking, with [`PATIENCE`]; run off the runtime's threads.
pub fn give(
    stream: UnixStream,
    tcp: BorrowedFd<'_>,
    unix: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
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
    // The new process has them once it answers (or closes: it got them, or failed).
    let mut done = [0u8; 1];
    let _ = (&stream).read(&mut done);
    Ok(())
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
            give(s, tcp.as_fd(), None).unwrap();
        });
        let got = take(&path).unwrap();
        drop(got.unix);
        giver.join().unwrap();
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
}
