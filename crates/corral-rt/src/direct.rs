//! The data path's system calls on plaintext sockets (reads into uninitialised room, writes
//! without SIGPIPE, no glibc cancellation points), and the relay's own budget of events
//! ([`Budget`]): the sockets ([`crate::sock`]) keep no task budget.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use bytes::BytesMut;

/// One `recv` into `buf`'s spare room, counted as filled. Into uninitialised memory: zeroing
/// the room first (the safe way) costs a memset of up to the whole buffer per read.
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code): see SAFETY
pub(super) fn recv_into(fd: impl AsFd, buf: &mut BytesMut) -> io::Result<usize> {
    let n = recv_uninit(fd, buf.spare_capacity_mut())?;
    // SAFETY: recv initialised the first `n` bytes of the spare room.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// One `recv` into `room`, which may be uninitialised; the first `n` bytes returned are
/// initialised by it.
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code): see SAFETY
pub(super) fn recv_uninit(fd: impl AsFd, room: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: `room` is valid for writes of `room.len()` bytes for the call's duration, and
    // recv only writes into it (nothing in it is de-initialised).
    unsafe {
        sys(
            libc::SYS_recvfrom,
            fd.as_fd(),
            room.as_mut_ptr().cast(),
            room.len(),
            0,
        )
    }
}

/// One `send` (MSG_NOSIGNAL: a closed peer is an error, not a signal).
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code): see SAFETY
pub(super) fn send(fd: impl AsFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is valid for reads of `data.len()` bytes for the call's duration; sendto
    // does not write through the pointer.
    unsafe {
        sys(
            libc::SYS_sendto,
            fd.as_fd(),
            data.as_ptr().cast_mut().cast(),
            data.len(),
            libc::MSG_NOSIGNAL,
        )
    }
}

/// recvfrom(2)/sendto(2) by system call number, without addresses, again when interrupted.
/// glibc's `recv` and `send` are thread-cancellation points and switch the thread's
/// cancellation state before and after the call (about 35 instructions a call); pgcorral never
/// cancels a thread, so the data path calls the kernel directly.
///
/// # Safety
/// `ptr` must be valid for `len` bytes: writable for recvfrom, readable for sendto.
#[allow(unsafe_code)]
unsafe fn sys(
    nr: libc::c_long,
    fd: BorrowedFd<'_>,
    ptr: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    let null = std::ptr::null_mut::<libc::c_void>();
    loop {
        // SAFETY: as the caller promises for `ptr`; the descriptor is open while borrowed, and
        // both calls take null address arguments.
        let n = unsafe { libc::syscall(nr, fd.as_raw_fd(), ptr, len, flags, null, null) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One `recv` of at most one byte, to see whether an idle socket has anything to say.
pub fn probe(fd: impl AsFd) -> io::Result<usize> {
    recv_uninit(fd, &mut [MaybeUninit::uninit(); 1])
}

/// The relay's share of the worker: tokio's own budget is not consulted on the direct path, so
/// a relay whose sockets never block (a long COPY from a fast client) yields after this many
/// events, letting the worker's other clients run.
pub struct Budget(u32);

impl Budget {
    const EVENTS: u32 = 128;

    pub fn new() -> Budget {
        Budget(Budget::EVENTS)
    }

    /// Counts one event; true when the relay should yield before the next.
    #[inline]
    pub fn spend(&mut self) -> bool {
        self.0 -= 1;
        if self.0 == 0 {
            self.0 = Budget::EVENTS;
            return true;
        }
        false
    }
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_runs_out_every_so_many_events() {
        let mut b = Budget::new();
        let spent: Vec<bool> = (0..Budget::EVENTS * 2).map(|_| b.spend()).collect();
        assert_eq!(spent.iter().filter(|&&y| y).count(), 2);
        assert!(spent[Budget::EVENTS as usize - 1]);
        assert!(!spent[0]);
    }
}
