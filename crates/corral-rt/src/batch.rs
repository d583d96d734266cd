//! A worker's writes of one executor turn, handed to the kernel together through io_uring just
//! before the worker looks for new events: one system call for all of them, and every peer it
//! wakes is woken before the worker can be preempted by the first (see docs/performance.md,
//! "Sends in one batch"). A write copies its bytes here and counts as done; what a socket has no
//! room for at the flush is held on the socket and sent before anything else
//! ([`Readiness::hold`]). Off on threads that are not workers, and where io_uring is not
//! allowed (then every write is a `send` of its own, as before).

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use io_uring::{opcode, types, IoUring};

use crate::direct::send;
use crate::reactor::Readiness;

/// Submission queue entries: a flush with more writes submits them in several calls.
const RING_ENTRIES: u32 = 256;
/// A write larger than this is sent straight away (it is not copied). A full TLS record (16 KiB
/// of data and its header and tag) fits.
pub const MAX_STAGED: usize = 17 * 1024;

struct Entry {
    /// The socket's readiness, which owns its descriptor: held here, the descriptor stays the
    /// socket's until the write is settled, whenever the socket is dropped.
    ready: Arc<Readiness>,
    /// The socket's state when the write was taken, for [`Readiness::hold`].
    seen: usize,
    at: usize,
    len: usize,
}

struct Batch {
    ring: IoUring,
    bytes: Vec<u8>,
    entries: Vec<Entry>,
}

thread_local! {
    static BATCH: RefCell<Option<Batch>> = const { RefCell::new(None) };
}

/// Turns batching on for this thread (a worker's, before it runs tasks). False when io_uring
/// cannot be set up here (a kernel without it, `kernel.io_uring_disabled`, a seccomp filter) or
/// a send into a full socket would wait there instead of coming back at once.
pub fn enable() -> bool {
    let ring = IoUring::new(RING_ENTRIES).and_then(|mut ring| {
        if full_socket_send_returns_at_once(&mut ring)? {
            Ok(ring)
        } else {
            Err(std::io::Error::other(
                "a send with MSG_DONTWAIT into a full socket waits",
            ))
        }
    });
    match ring {
        Ok(ring) => {
            BATCH.with(|b| {
                *b.borrow_mut() = Some(Batch {
                    ring,
                    bytes: Vec::with_capacity(MAX_STAGED),
                    entries: Vec::with_capacity(64),
                })
            });
            true
        }
        Err(e) => {
            tracing::info!(error = %e, "io_uring is not used: one send per write");
            false
        }
    }
}

/// Whether this kernel completes a `MSG_DONTWAIT` send into a full socket within the
/// submission (as [`flush`] needs: it must never wait for a slow peer), rather than arming a
/// poll for room.
fn full_socket_send_returns_at_once(ring: &mut IoUring) -> std::io::Result<bool> {
    use std::io::Write;
    /// The byte the probe sends; static, as the kernel may still hold the request when the
    /// ring is dropped.
    static ONE: [u8; 1] = [0];
    let (mut a, _b) = std::os::unix::net::UnixStream::pair()?;
    a.set_nonblocking(true)?;
    let chunk = [0u8; 16 * 1024];
    while a.write(&chunk).is_ok() {}
    let sqe = opcode::Send::new(types::Fd(a.as_raw_fd()), ONE.as_ptr(), 1)
        .flags(libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
        .build();
    // SAFETY: the buffer is static; a request still pending holds its own reference to the
    // socket's file, and is cancelled when the caller drops the ring.
    #[allow(unsafe_code)]
    let pushed = unsafe { ring.submission().push(&sqe) };
    if pushed.is_err() {
        return Ok(false);
    }
    ring.submit()?;
    Ok(ring.completion().next().is_some())
}

/// Turns batching off for this thread, sending what is staged first.
pub fn disable() {
    flush();
    BATCH.with(|b| b.borrow_mut().take());
}

/// Takes `data` for the socket of `ready` into this turn's batch; false when this thread does
/// not batch.
/// The caller has checked that the socket is writable, holds nothing and has no write in the
/// batch already (so the socket's bytes stay in order).
#[inline]
pub fn stage(ready: &Arc<Readiness>, data: &[u8]) -> bool {
    BATCH.with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else {
            return false;
        };
        let Some(b) = b.as_mut() else {
            return false;
        };
        let at = b.bytes.len();
        b.bytes.extend_from_slice(data);
        ready.staged.store(true, Relaxed);
        b.entries.push(Entry {
            ready: ready.clone(),
            seen: ready.now(),
            at,
            len: data.len(),
        });
        true
    })
}

/// Sends every staged write: one `send` for a single one, else one io_uring submission (per
/// [`RING_ENTRIES`]). Never waits for a socket: `MSG_DONTWAIT` makes a full one complete at
/// once with what it took.
pub fn flush() {
    BATCH.with(|b| {
        let Ok(mut guard) = b.try_borrow_mut() else {
            return;
        };
        let Some(b) = guard.as_mut() else {
            return;
        };
        if b.entries.is_empty() {
            return;
        }
        if b.entries.len() == 1 {
            let e = &b.entries[0];
            if e.ready.is_gone() {
                b.entries.clear();
                b.bytes.clear();
                return;
            }
            let r = send(e.ready.fd(), &b.bytes[e.at..e.at + e.len]);
            settle(e, &b.bytes, r.map_or_else(|e| neg(&e), |n| n as i32));
        } else if !b
            .entries
            .chunks(RING_ENTRIES as usize)
            .all(|chunk| submit(&mut b.ring, chunk, &b.bytes))
        {
            // Leaked, ring and bytes both: the kernel may still read them.
            if let Some(b) = guard.take() {
                for e in &b.entries {
                    e.ready.staged.store(false, Relaxed);
                }
                std::mem::forget(b);
            }
            return;
        }
        b.entries.clear();
        b.bytes.clear();
        if b.bytes.capacity() > 4 * MAX_STAGED {
            b.bytes = Vec::with_capacity(MAX_STAGED);
        }
    })
}

fn neg(e: &std::io::Error) -> i32 {
    -e.raw_os_error().unwrap_or(libc::EIO)
}

/// One submission for `chunk`, waiting for all of its completions (none waits for a socket).
/// False when the ring failed with requests maybe still in the kernel.
fn submit(ring: &mut IoUring, chunk: &[Entry], bytes: &[u8]) -> bool {
    {
        let mut sq = ring.submission();
        for (i, e) in chunk.iter().enumerate() {
            // A socket its owner has dropped since is skipped (its descriptor is still open:
            // the entry holds it).
            let sqe = if e.ready.is_gone() {
                opcode::Nop::new().build()
            } else {
                let fd = types::Fd(e.ready.fd().as_raw_fd());
                opcode::Send::new(fd, bytes[e.at..].as_ptr(), e.len as u32)
                    .flags(libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
                    .build()
            }
            .user_data(i as u64);
            // SAFETY: the buffer (`bytes`) stays valid until every completion is reaped below,
            // before this function returns (or, if the ring fails, the ring and the buffer are
            // leaked); the descriptor is owned by the readiness the entry holds (leaked with
            // the entries if the ring fails).
            #[allow(unsafe_code)]
            let pushed = unsafe { sq.push(&sqe) };
            // Every flush reaps all it submitted, so the queue is empty and holds a chunk.
            assert!(pushed.is_ok(), "io_uring submission queue full");
        }
    }
    let mut done = [false; RING_ENTRIES as usize];
    let mut left = chunk.len();
    let mut failures = 0;
    while left > 0 {
        if let Err(e) = ring.submit_and_wait(left) {
            let again = matches!(
                e.raw_os_error(),
                Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
            );
            failures += 1;
            if !again || failures > 1000 {
                // Requests may still be in the kernel: nothing they point at may be freed or
                // reused. Give up batching on this thread.
                tracing::error!(error = %e, "io_uring failed; sending each write on its own from now on");
                return false;
            }
        }
        for cqe in ring.completion() {
            let i = cqe.user_data() as usize;
            if let Some(e) = chunk.get(i).filter(|_| !done[i]) {
                done[i] = true;
                left -= 1;
                settle(e, bytes, cqe.result());
            }
        }
    }
    true
}

/// After the kernel took `result` bytes of `e` (negative: an error number): holds what it did
/// not take when the socket was full. Any other error is left for the socket's reader to find,
/// as a `send` into a failed socket is.
fn settle(e: &Entry, bytes: &[u8], result: i32) {
    e.ready.staged.store(false, Relaxed);
    if e.ready.is_gone() {
        return;
    }
    let took = match result {
        n if n >= 0 => n as usize,
        n if n == -libc::EAGAIN || n == -libc::EWOULDBLOCK => 0,
        _ => return,
    };
    if took < e.len {
        e.ready.hold(&bytes[e.at + took..e.at + e.len], e.seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sock::Socket;
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    /// Batching on this test's thread; false (and the test does nothing) where the kernel does
    /// not allow io_uring.
    fn on() -> bool {
        let on = enable();
        if !on {
            eprintln!("io_uring is not available here: nothing to test");
        }
        on
    }

    fn pending(peer: &mut UnixStream) -> Vec<u8> {
        peer.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = peer.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    #[tokio::test]
    async fn a_turn_s_writes_go_out_together_at_the_flush_in_order() {
        if !on() {
            return;
        }
        let (a, mut pa) = UnixStream::pair().unwrap();
        let (b, mut pb) = UnixStream::pair().unwrap();
        let (a, b) = (Socket::new(a).unwrap(), Socket::new(b).unwrap());
        assert_eq!(a.try_write(b"one ").unwrap().unwrap(), 4);
        assert_eq!(b.try_write(b"two").unwrap().unwrap(), 3);
        assert!(a.holds_unsent());
        assert!(
            pending(&mut pa).is_empty(),
            "nothing is sent before the flush"
        );
        // A second write to the same socket sends the batch first: its bytes stay in order.
        assert_eq!(a.try_write(b"three").unwrap().unwrap(), 5);
        assert_eq!(pending(&mut pa), b"one ");
        assert_eq!(pending(&mut pb), b"two");
        flush();
        assert_eq!(pending(&mut pa), b"three");
        assert!(!a.holds_unsent() && !b.holds_unsent());
        disable();
    }

    #[tokio::test]
    async fn a_dropped_socket_s_write_goes_out_before_it_closes() {
        if !on() {
            return;
        }
        let (a, mut pa) = UnixStream::pair().unwrap();
        let a = Socket::new(a).unwrap();
        assert_eq!(a.try_write(b"last words").unwrap().unwrap(), 10);
        drop(a);
        pa.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        pa.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words");
        disable();
    }

    /// The descriptor belongs to the readiness that a batch entry holds: while anything holds
    /// it, the socket stays open whoever dropped it, so its number cannot be given to another
    /// socket (which a late write would then reach); it closes when the last holder lets go.
    #[tokio::test]
    async fn a_held_readiness_keeps_the_descriptor_from_reuse() {
        use std::os::fd::AsRawFd;
        let (a, mut pa) = UnixStream::pair().unwrap();
        let a = Socket::new(a).unwrap();
        let held = a.readiness().clone();
        let fd = held.fd().as_raw_fd();
        drop(a);
        let newer: Vec<_> = (0..8).map(|_| UnixStream::pair().unwrap()).collect();
        assert!(
            newer
                .iter()
                .all(|(x, y)| x.as_raw_fd() != fd && y.as_raw_fd() != fd),
            "a held descriptor was given to a new socket"
        );
        assert_eq!(
            crate::direct::send(held.fd(), b"still the same socket").unwrap(),
            21
        );
        drop(held);
        pa.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        pa.read_to_end(&mut got).unwrap();
        assert_eq!(
            got, b"still the same socket",
            "closed when the last holder let go"
        );
    }

    /// Writes batched 1,000 bytes at a time until a flush finds no room; what was written.
    fn fill(a: &Socket<UnixStream>) -> Vec<u8> {
        let mut sent = Vec::new();
        for i in 0u32.. {
            assert!(i < 100_000, "the socket never filled");
            let chunk: Vec<u8> = (0..1000u32).map(|k| ((i * 7 + k) % 251) as u8).collect();
            let n = a.try_write(&chunk).expect("writable").unwrap();
            assert_eq!(n, chunk.len(), "a batched write takes everything");
            sent.extend_from_slice(&chunk);
            flush();
            if a.holds_unsent() {
                return sent;
            }
        }
        unreachable!()
    }

    /// Reads what `a` sent (all of `sent`, in order) though nobody writes again (the reactor
    /// sends what was held), waits until `a` holds nothing, and checks that writes go on.
    async fn read_it_all_then_write(a: &Socket<UnixStream>, peer: &mut UnixStream, sent: &[u8]) {
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = vec![0u8; sent.len()];
        peer.read_exact(&mut got).unwrap();
        assert!(got == sent, "every byte, in order");
        let deadline = Instant::now() + Duration::from_secs(5);
        while a.holds_unsent() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!a.holds_unsent());
        assert_eq!(a.try_write(b"more").unwrap().unwrap(), 4);
        flush();
        assert_eq!(pending(peer), b"more");
    }

    /// A socket that holds bytes makes writes wait; moved to another reactor, it takes them
    /// along, and they arrive first.
    #[tokio::test]
    async fn held_bytes_make_writes_wait_and_move_with_the_socket() {
        if !on() {
            return;
        }
        let (a, mut peer) = UnixStream::pair().unwrap();
        let a = Socket::new(a).unwrap();
        let sent = fill(&a);
        assert!(
            a.try_write(b"more").is_none(),
            "writes wait behind the held bytes"
        );
        let (io, held) = a.into_inner().unwrap();
        assert!(!held.is_empty());
        let a = Socket::new_holding(io, held).unwrap();
        assert!(a.holds_unsent());
        assert!(
            a.try_write(b"more").is_none(),
            "still behind the held bytes"
        );
        read_it_all_then_write(&a, &mut peer, &sent).await;
        disable();
    }

    /// Once the peer reads, what was held arrives whole and in order though nobody writes
    /// again (the reactor sends it), and writes go on.
    #[tokio::test]
    async fn held_bytes_go_out_when_the_peer_reads() {
        if !on() {
            return;
        }
        let (a, mut peer) = UnixStream::pair().unwrap();
        let a = Socket::new(a).unwrap();
        let sent = fill(&a);
        read_it_all_then_write(&a, &mut peer, &sent).await;
        disable();
    }
}
