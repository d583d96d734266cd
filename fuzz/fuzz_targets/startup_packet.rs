//! Startup-phase packets (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest) as a client
//! sends them: `packet_len` on what is buffered, then `parse` on the packet it announces.
//! Checks: no panic, the announced length within bounds, and re-encoding what was decoded gives
//! the same packet (byte for byte when the input was canonical).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgwire::encode;
use pgwire::startup::{self, StartupPacket, MAX_STARTUP_LEN};

fn check(packet: &[u8]) {
    let Ok(parsed) = startup::parse(packet) else {
        return;
    };
    let mut buf = BytesMut::new();
    match &parsed {
        StartupPacket::Startup { minor, params } => {
            encode::startup(&mut buf, params);
            assert_eq!(
                startup::parse(&buf).unwrap(),
                StartupPacket::Startup {
                    minor: 0,
                    params: params.clone()
                }
            );
            // Canonical input: minor 0, its length field right, a terminator and nothing after.
            let used: usize = 8
                + params
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum::<usize>()
                + 1;
            // (PostgreSQL's walk takes any last byte where the terminator belongs.)
            if *minor == 0
                && used == packet.len()
                && packet.last() == Some(&0)
                && startup::packet_len(packet) == Ok(Some(packet.len()))
            {
                assert_eq!(&buf[..], packet);
            }
            for (k, v) in params {
                assert!(!k.is_empty() && !k.contains(&0) && !v.contains(&0));
            }
        }
        StartupPacket::Cancel { pid, secret } => {
            // PostgreSQL takes the key from the first 16 bytes; more may follow.
            encode::cancel_request(&mut buf, *pid, *secret);
            assert!(packet.len() >= 16);
            assert_eq!(&buf[4..16], &packet[4..16]);
        }
        StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
            // PostgreSQL accepts a request longer than its 8 bytes.
            assert!(packet.len() >= 8);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match startup::packet_len(data) {
        Ok(None) => assert!(data.len() < 4),
        Ok(Some(n)) => {
            assert!((8..=MAX_STARTUP_LEN).contains(&n));
            if n <= data.len() {
                check(&data[..n]);
            }
        }
        Err(_) => {}
    }
    check(data);
});
