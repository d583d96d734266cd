// The same ping-pong with a hand-written edge-triggered epoll loop and two state machines.
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(100_000);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut b, _) = l.accept().unwrap();
    for s in [&a, &b] {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    // SAFETY: plain system calls on descriptors this program owns, with valid buffers.
    let ep = unsafe { libc::epoll_create1(0) };
    for (fd, tok) in [(a.as_raw_fd(), 0u64), (b.as_raw_fd(), 1u64)] {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: tok,
        };
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    }
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
    let mut buf = [0u8; 64];
    let mut done = 0usize;
    a.write_all(&[1u8; 64]).unwrap();
    let mut a_got = 0;
    while done < n {
        let k = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 16, -1) };
        for e in &evs[..k as usize] {
            let tok = e.u64;
            if tok == 1 {
                // echo side: drain and answer
                loop {
                    match b.read(&mut buf) {
                        Ok(0) => return,
                        Ok(k) => {
                            b.write_all(&buf[..k]).unwrap();
                            if k < 64 {
                                break;
                            }
                        }
                        Err(_) => break,
                    }
                }
            } else {
                while let Ok(k) = a.read(&mut buf[a_got..]) {
                    a_got += k;
                    if a_got == 64 {
                        a_got = 0;
                        done += 1;
                        if done < n {
                            a.write_all(&[1u8; 64]).unwrap();
                        }
                        break;
                    }
                }
            }
        }
    }
}
