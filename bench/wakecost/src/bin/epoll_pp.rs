// The same ping-pong with a hand-written edge-triggered epoll loop and no tasks: the floor.
use std::io::{Read, Write};

use wakecost::Epoll;

fn main() {
    let n = wakecost::rounds();
    let (mut a, mut b) = wakecost::pair();
    let ep = Epoll::new();
    ep.add(&a, 0);
    ep.add(&b, 1);
    let mut evs = wakecost::events();
    let mut buf = [0u8; 64];
    let mut done = 0usize;
    a.write_all(&[1u8; 64]).unwrap();
    let mut a_got = 0;
    while done < n {
        for token in ep.wait(&mut evs) {
            if token == 1 {
                // The echo side: answer what came.
                while let Ok(k) = b.read(&mut buf) {
                    if k == 0 {
                        return;
                    }
                    b.write_all(&buf[..k]).unwrap();
                    if k < 64 {
                        break;
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
