//! The Unix-socket listener `<unix_socket_dir>/.s.PGSQL.<port>`, as PgBouncer's: a socket file
//! left by a pooler that is gone is replaced, one that answers is not; the file gets
//! `unix_socket_mode` and is removed when the listener is dropped.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use corral_rt::stream::Detached;
use tokio::net::UnixListener;

use crate::net::peer::Peer;

pub struct UnixListen {
    listener: UnixListener,
    path: PathBuf,
    port: u16,
    /// Removes the socket file when dropped (not once another process took the listener).
    owns_file: bool,
}

impl UnixListen {
    /// Binds `<dir>/.s.PGSQL.<port>` with file mode `mode`, on the caller's runtime (the main
    /// thread's).
    #[allow(clippy::disallowed_methods)]
    pub fn bind(dir: &str, port: u16, mode: u32) -> io::Result<UnixListen> {
        let path = Path::new(dir).join(format!(".s.PGSQL.{port}"));
        let at = format!("unix:{}", path.display());
        let named = |e| super::cannot_listen(&at, e);
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            let taken = |why: &str| Err(named(io::Error::new(io::ErrorKind::AddrInUse, why)));
            if !meta.file_type().is_socket() {
                return taken("exists and is not a socket");
            }
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                return taken("another server is listening there");
            }
            // Left by a pooler that did not remove it (killed): nothing answers there.
            std::fs::remove_file(&path).map_err(named)?;
        }
        let listener = UnixListener::bind(&path).map_err(named)?;
        let listen = UnixListen {
            listener,
            path,
            port,
            owns_file: true,
        };
        std::fs::set_permissions(&listen.path, std::fs::Permissions::from_mode(mode))
            .map_err(named)?;
        Ok(listen)
    }

    /// A listener another process bound and handed over (`-R`), at `<dir>/.s.PGSQL.<port>`.
    #[allow(clippy::disallowed_methods)]
    pub fn adopt(fd: std::os::fd::OwnedFd, dir: &str, port: u16) -> io::Result<UnixListen> {
        let std = std::os::unix::net::UnixListener::from(fd);
        std.set_nonblocking(true)?;
        Ok(UnixListen {
            listener: UnixListener::from_std(std)?,
            path: Path::new(dir).join(format!(".s.PGSQL.{port}")),
            port,
            owns_file: true,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The listening socket, to hand over (`-R`).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.listener)
    }

    /// Drops the listener and leaves its file: another process listens there now.
    pub fn leave_file(mut self) {
        self.owns_file = false;
    }

    /// The next client, off tokio's reactor, with its process and user ids when the kernel tells
    /// them.
    pub async fn accept(&self) -> io::Result<(Detached, Peer)> {
        let (stream, _) = self.listener.accept().await?;
        let cred = stream.peer_cred().ok();
        let peer = Peer::Unix {
            port: self.port,
            pid: cred.and_then(|c| c.pid()).unwrap_or(0),
            uid: cred.map(|c| c.uid()),
        };
        Ok((Detached::Unix(stream.into_std()?, Vec::new()), peer))
    }
}

impl Drop for UnixListen {
    fn drop(&mut self) {
        if self.owns_file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
