//! `-d` and `-u`: detaching from the terminal (fork, setsid, fork; stdin, stdout and stderr on
//! /dev/null) and taking another user's uid and groups, as PgBouncer's `go_daemon` and
//! `change_user`. Both run before any thread exists.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::AsRawFd;

/// Detaches: the caller's process exits 0 and this continues in a grandchild that leads no
/// terminal session. Must run before any thread starts (a fork copies only the calling
/// thread): in `main`, before the runtime.
pub fn daemonize() -> Result<(), String> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("cannot open /dev/null: {e}"))?;
    fork_and_leave_parent()?;
    // SAFETY: setsid has no memory effects; the process is single-threaded.
    if unsafe { libc::setsid() } < 0 {
        return Err(format!("setsid: {}", std::io::Error::last_os_error()));
    }
    fork_and_leave_parent()?;
    for fd in 0..=2 {
        // SAFETY: both descriptors are open; dup2 replaces 0, 1, 2 atomically.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(format!("dup2: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Forks; the parent exits at once (without running destructors or flushing buffers the child
/// also holds), the child returns.
fn fork_and_leave_parent() -> Result<(), String> {
    // SAFETY: called while the process has one thread (see `daemonize`), so the child is a
    // full copy of it with no lock held by a thread that does not exist there.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => Ok(()),
        // SAFETY: _exit ends the parent without touching state shared with the child.
        _ => unsafe { libc::_exit(0) },
    }
}

/// Becomes `user`: its groups, its gid, then its uid. Nothing to do when already that user.
pub fn switch_user(user: &str) -> Result<(), String> {
    let name = CString::new(user).map_err(|_| format!("invalid user name '{user}'"))?;
    let (uid, gid) = lookup(&name).ok_or_else(|| format!("could not find user '{user}'"))?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == uid {
        return Ok(());
    }
    let fail = |what: &str| format!("{what} failed: {}", std::io::Error::last_os_error());
    // SAFETY: `name` is a valid C string; these calls only change the process's credentials.
    unsafe {
        if libc::initgroups(name.as_ptr(), gid) != 0 {
            return Err(fail("initgroups"));
        }
        if libc::setgid(gid) != 0 {
            return Err(fail("setgid"));
        }
        if libc::setuid(uid) != 0 {
            return Err(fail("setuid"));
        }
    }
    Ok(())
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// The uid and primary gid of the user called `name` (getpwnam_r).
fn lookup(name: &CString) -> Option<(libc::uid_t, libc::gid_t)> {
    // SAFETY: `passwd` is plain data; all-zero is a valid (empty) value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and `buf`'s length is passed with it.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some((pwd.pw_uid, pwd.pw_gid))
}

#[cfg(test)]
mod tests {
    #[test]
    fn looks_up_root_and_refuses_unknown_users() {
        let root = std::ffi::CString::new("root").unwrap();
        assert_eq!(super::lookup(&root), Some((0, 0)));
        let err = super::switch_user("no-such-user-pgcorral").unwrap_err();
        assert!(err.contains("could not find user"), "{err}");
    }
}
