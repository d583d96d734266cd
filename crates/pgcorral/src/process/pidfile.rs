//! The pidfile (PgBouncer's `pidfile`): a start is refused while the process named in it is
//! alive, a stale one is removed; it is written `<pid>\n` (created exclusively, mode 0644) once
//! the pooler listens, and removed when the process ends.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What [`check`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// No pidfile.
    None,
    /// One naming a process that is gone: removed.
    Stale,
}

/// Before start (and before `-d` detaches, so that a refusal reaches the terminal): refuses
/// while the pid in `path` is alive, removes a stale file.
pub fn check(path: &Path) -> Result<Found, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::None),
        Err(e) => return Err(format!("could not open pidfile '{}': {e}", path.display())),
    };
    if let Some(pid) = text.trim().parse::<u32>().ok().filter(|&p| p > 0) {
        if alive(pid) {
            return Err(format!(
                "pidfile '{}' exists, another instance running?",
                path.display()
            ));
        }
    }
    std::fs::remove_file(path)
        .map_err(|e| format!("could not remove stale pidfile '{}': {e}", path.display()))?;
    Ok(Found::Stale)
}

/// Whether a process with this id exists (signal 0 reaches it, or it exists but is not ours).
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // /proc is Linux's; elsewhere, a kill -0 through the shell.
    if Path::new("/proc/self").exists() {
        return Path::new(&format!("/proc/{pid}")).exists();
    }
    std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The pidfile this process wrote; removed on drop.
#[derive(Debug)]
pub struct Pidfile {
    path: PathBuf,
}

impl Pidfile {
    /// Writes this process's id to `path`, which must not exist.
    pub fn write(path: &Path) -> Result<Pidfile, String> {
        let fail = |e: std::io::Error| format!("could not write pidfile '{}': {e}", path.display());
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .map_err(fail)?;
        let pidfile = Pidfile {
            path: path.to_path_buf(),
        };
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(fail)?;
        Ok(pidfile)
    }

    /// Writes this process's id to `path` over what is there (the process it takes over from,
    /// `-R`, wrote it).
    pub fn replace(path: &Path) -> Result<Pidfile, String> {
        let fail = |e: std::io::Error| format!("could not write pidfile '{}': {e}", path.display());
        let temp = path.with_extension("pid.new");
        std::fs::write(&temp, format!("{}\n", std::process::id())).map_err(fail)?;
        std::fs::rename(&temp, path).map_err(fail)?;
        Ok(Pidfile {
            path: path.to_path_buf(),
        })
    }

    /// Leaves the file in place: a new process took over (`-R`) and wrote its own pid there,
    /// possibly between a check of the content and a removal, so this one must not touch it.
    pub fn leave(self) {
        std::mem::forget(self);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Pidfile {
    /// Removes the file while it names this process (after `-R`, it names the new one).
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|t| t.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_pid_refuses_stale_is_removed_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pid");
        assert_eq!(check(&path), Ok(Found::None));
        let p = Pidfile::write(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777 & !0o022, 0o644 & !0o022);
        let err = check(&path).unwrap_err();
        assert!(err.contains("exists, another instance running?"), "{err}");
        assert!(Pidfile::write(&path).is_err());
        drop(p);
        assert!(!path.exists());
        // A pid that no process has (beyond Linux's pid_max), and garbage.
        std::fs::write(&path, "2147483647\n").unwrap();
        assert_eq!(check(&path), Ok(Found::Stale));
        assert!(!path.exists());
        std::fs::write(&path, "not a pid").unwrap();
        assert_eq!(check(&path), Ok(Found::Stale));
    }

    /// After a takeover (`-R`) the old process leaves the file whatever it names: a check of
    /// the content and a removal could straddle the new process's write.
    #[test]
    fn a_handed_over_pidfile_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pid");
        Pidfile::write(&path).unwrap().leave();
        assert!(path.exists());
        // The new process's replace (same pid here: the test is one process) is kept too.
        let p = Pidfile::replace(&path).unwrap();
        p.leave();
        assert!(path.exists());
    }
}
