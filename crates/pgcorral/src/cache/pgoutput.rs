//! The logical replication stream of PostgreSQL's pgoutput plugin, read without I/O: which tables a committed transaction changed, and the standby status update that answers keepalives.
//!
//! [`read`] takes the payload of one CopyData message of `START_REPLICATION ... LOGICAL` with
//! `proto_version '1'` and borrows from it; [`status_update`] builds the payload of the reply.
//! The input comes from the network: every read is bounds-checked, and anything cut short or
//! out of range is a [`Malformed`], never a panic. Bytes after a whole message are ignored.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A message of the replication stream (the payload of one CopyData message from the server).
#[derive(Debug, PartialEq, Eq)]
pub enum Stream<'a> {
    /// 'w' XLogData: the WAL start and end positions, and the pgoutput message it carries.
    Data {
        start: u64,
        end: u64,
        message: Output<'a>,
    },
    /// 'k' primary keepalive: the server's WAL end (for logical replication, how far it has
    /// sent) and whether it asks for a reply at once. Its clock (microseconds since
    /// 2000-01-01) is read past, not kept.
    Keepalive { end: u64, reply: bool },
}

/// A pgoutput message (protocol version 1).
#[derive(Debug, PartialEq, Eq)]
pub enum Output<'a> {
    /// 'B': a transaction begins; its commit's final LSN.
    Begin { final_lsn: u64 },
    /// 'C': it committed; the commit's end LSN.
    Commit { end_lsn: u64 },
    /// 'R': what a relation id stands for: its schema and name (as bytes, not necessarily
    /// UTF-8). An empty namespace means pg_catalog.
    Relation {
        id: u32,
        namespace: &'a [u8],
        name: &'a [u8],
    },
    /// 'I', 'U', 'D': a row of this relation was inserted, updated or deleted.
    Change { id: u32 },
    /// 'T': these relations were truncated.
    Truncate { ids: Vec<u32> },
    /// Anything else pgoutput may send ('Y' type, 'O' origin, 'M' logical message, ...):
    /// nothing a cache needs.
    Other(u8),
}

/// The input was not a message of the stream: what was wrong with it.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// Seconds from 1970-01-01 to 2000-01-01 00:00 UTC, PostgreSQL's epoch.
const PG_EPOCH_SECS: u64 = 946_684_800;

/// Length of the standby status update: its type, four Int64 and the reply byte.
const STATUS_UPDATE_LEN: usize = 1 + 4 * 8 + 1;

/// Reads one CopyData payload of the stream.
pub fn read(payload: &[u8]) -> Result<Stream<'_>, Malformed> {
    let mut r = Reader(payload);
    match r.u8("empty replication message")? {
        b'w' => {
            let short = "XLogData cut short";
            let start = r.u64(short)?;
            let end = r.u64(short)?;
            r.u64(short)?; // the server's clock
            let message = output(r.0)?;
            Ok(Stream::Data {
                start,
                end,
                message,
            })
        }
        b'k' => {
            let short = "primary keepalive cut short";
            let end = r.u64(short)?;
            r.u64(short)?; // the server's clock
            let reply = r.u8(short)? != 0;
            Ok(Stream::Keepalive { end, reply })
        }
        _ => Err(Malformed("neither XLogData nor a primary keepalive")),
    }
}

/// The standby status update ('r') a client sends: the positions it has written, flushed and
/// applied (all `lsn`), its clock now (microseconds since 2000-01-01 00:00 UTC, from
/// [`SystemTime`]), and whether the server should answer at once with a keepalive. Returned as
/// the CopyData *payload* (the caller wraps it in a 'd' message).
pub fn status_update(lsn: u64, reply: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(STATUS_UPDATE_LEN);
    out.push(b'r');
    for _ in 0..3 {
        out.extend_from_slice(&lsn.to_be_bytes());
    }
    out.extend_from_slice(&pg_clock(SystemTime::now()).to_be_bytes());
    out.push(u8::from(reply));
    out
}

/// `at` in microseconds since PostgreSQL's epoch (negative before it, saturating).
fn pg_clock(at: SystemTime) -> i64 {
    let epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_SECS);
    let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    match at.duration_since(epoch) {
        Ok(after) => micros(after),
        Err(before) => micros(before.duration()).saturating_neg(),
    }
}

/// Reads the pgoutput message an XLogData carries.
fn output(message: &[u8]) -> Result<Output<'_>, Malformed> {
    let mut r = Reader(message);
    let out = match r.u8("empty pgoutput message")? {
        b'B' => {
            let short = "Begin cut short";
            let final_lsn = r.u64(short)?;
            r.u64(short)?; // commit timestamp
            r.u32(short)?; // xid
            Output::Begin { final_lsn }
        }
        b'C' => {
            let short = "Commit cut short";
            r.u8(short)?; // flags
            r.u64(short)?; // the commit's LSN
            let end_lsn = r.u64(short)?;
            r.u64(short)?; // commit timestamp
            Output::Commit { end_lsn }
        }
        b'R' => relation(&mut r)?,
        // The tuple data that follows the id is not needed.
        b'I' => Output::Change {
            id: r.u32("Insert cut short")?,
        },
        b'U' => Output::Change {
            id: r.u32("Update cut short")?,
        },
        b'D' => Output::Change {
            id: r.u32("Delete cut short")?,
        },
        b'T' => truncate(&mut r)?,
        other => Output::Other(other),
    };
    Ok(out)
}

/// A Relation message after its type byte: the id and names, with its columns checked to be
/// all there.
fn relation<'a>(r: &mut Reader<'a>) -> Result<Output<'a>, Malformed> {
    let short = "Relation cut short";
    let id = r.u32(short)?;
    let namespace = r.string("Relation: namespace without its NUL")?;
    let name = r.string("Relation: name without its NUL")?;
    r.u8(short)?; // replica identity
    let columns = i16::from_be_bytes(r.array(short)?);
    let columns =
        u16::try_from(columns).map_err(|_| Malformed("Relation: negative number of columns"))?;
    for _ in 0..columns {
        r.u8(short)?; // flags
        r.string("Relation: column name without its NUL")?;
        r.u32(short)?; // type oid
        r.u32(short)?; // type modifier
    }
    Ok(Output::Relation {
        id,
        namespace,
        name,
    })
}

/// A Truncate message after its type byte. The count is trusted only as far as the bytes
/// present can hold that many ids.
fn truncate<'a>(r: &mut Reader<'a>) -> Result<Output<'a>, Malformed> {
    let short = "Truncate cut short";
    let count = r.u32(short)?;
    r.u8(short)?; // options
    let count = usize::try_from(count)
        .ok()
        .filter(|&n| n <= r.0.len() / 4)
        .ok_or(Malformed("Truncate: fewer relation ids than its count"))?;
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(r.u32(short)?);
    }
    Ok(Output::Truncate { ids })
}

/// The bytes of a message not yet read.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The next `N` bytes, or `short` if there are fewer.
    fn array<const N: usize>(&mut self, short: &'static str) -> Result<[u8; N], Malformed> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or(Malformed(short))?;
        self.0 = rest;
        Ok(*head)
    }

    fn u8(&mut self, short: &'static str) -> Result<u8, Malformed> {
        self.array::<1>(short).map(|[b]| b)
    }

    fn u32(&mut self, short: &'static str) -> Result<u32, Malformed> {
        self.array(short).map(u32::from_be_bytes)
    }

    fn u64(&mut self, short: &'static str) -> Result<u64, Malformed> {
        self.array(short).map(u64::from_be_bytes)
    }

    /// A NUL-terminated string, without its NUL, or `unended` if there is no NUL.
    fn string(&mut self, unended: &'static str) -> Result<&'a [u8], Malformed> {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .ok_or(Malformed(unended))?;
        let (text, rest) = self.0.split_at(end);
        self.0 = rest.get(1..).ok_or(Malformed(unended))?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// A message under construction, written field by field, big-endian.
    #[derive(Default)]
    struct W(Vec<u8>);

    impl W {
        fn new(kind: u8) -> Self {
            W(vec![kind])
        }
        fn u8(mut self, v: u8) -> Self {
            self.0.push(v);
            self
        }
        fn u16(mut self, v: u16) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn u32(mut self, v: u32) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn u64(mut self, v: u64) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn string(mut self, s: &[u8]) -> Self {
            self.0.extend_from_slice(s);
            self.0.push(0);
            self
        }
        fn bytes(mut self, b: &[u8]) -> Self {
            self.0.extend_from_slice(b);
            self
        }
    }

    fn xlog(start: u64, end: u64, message: &[u8]) -> Vec<u8> {
        W::new(b'w')
            .u64(start)
            .u64(end)
            .u64(0x1234_5678)
            .bytes(message)
            .0
    }

    fn keepalive(end: u64, reply: u8) -> Vec<u8> {
        W::new(b'k').u64(end).u64(0x1234_5678).u8(reply).0
    }

    fn begin(final_lsn: u64) -> Vec<u8> {
        W::new(b'B').u64(final_lsn).u64(777).u32(42).0
    }

    fn commit(commit_lsn: u64, end_lsn: u64) -> Vec<u8> {
        W::new(b'C').u8(0).u64(commit_lsn).u64(end_lsn).u64(777).0
    }

    /// A Relation with columns `id int4` (part of the key) and `body text`.
    fn relation(id: u32, namespace: &[u8], name: &[u8]) -> Vec<u8> {
        let head = W::new(b'R').u32(id).string(namespace).string(name);
        let head = head.u8(b'd').u16(2);
        let id_col = head.u8(1).string(b"id").u32(23).u32(u32::MAX);
        id_col.u8(0).string(b"body").u32(25).u32(u32::MAX).0
    }

    /// A text column of tuple data.
    fn tuple(text: &[u8]) -> W {
        let len = u32::try_from(text.len()).unwrap();
        W::default().u16(1).u8(b't').u32(len).bytes(text)
    }

    fn insert(id: u32) -> Vec<u8> {
        W::new(b'I').u32(id).u8(b'N').bytes(&tuple(b"new").0).0
    }

    fn update(id: u32) -> Vec<u8> {
        let old = W::new(b'U').u32(id).u8(b'O').bytes(&tuple(b"old").0);
        old.u8(b'N').bytes(&tuple(b"new").0).0
    }

    fn delete(id: u32) -> Vec<u8> {
        W::new(b'D').u32(id).u8(b'K').bytes(&tuple(b"1").0).0
    }

    fn truncate(ids: &[u32]) -> Vec<u8> {
        let count = u32::try_from(ids.len()).unwrap();
        ids.iter()
            .fold(W::new(b'T').u32(count).u8(1), |w, &id| w.u32(id))
            .0
    }

    /// Reads `message` inside an XLogData and checks that it is `want`.
    fn check(message: &[u8], want: Result<Output<'_>, Malformed>) {
        let payload = xlog(1, 2, message);
        let got = read(&payload).map(|stream| match stream {
            Stream::Data { message, .. } => message,
            Stream::Keepalive { .. } => panic!("XLogData read as a keepalive"),
        });
        assert_eq!(got, want, "{message:?}");
    }

    #[test]
    fn xlogdata_positions() {
        let payload = xlog(0x16_B374_D848, 0x16_B374_FFFF, &begin(5));
        assert_eq!(
            read(&payload),
            Ok(Stream::Data {
                start: 0x16_B374_D848,
                end: 0x16_B374_FFFF,
                message: Output::Begin { final_lsn: 5 },
            })
        );
    }

    #[test]
    fn begin_and_commit() {
        let final_lsn = 0x0123_4567_89AB_CDEF;
        check(&begin(final_lsn), Ok(Output::Begin { final_lsn }));
        check(&commit(10, 20), Ok(Output::Commit { end_lsn: 20 }));
    }

    #[test]
    fn relation_names() {
        let m = relation(16_384, b"public", b"accounts");
        let want = Output::Relation {
            id: 16_384,
            namespace: b"public",
            name: b"accounts",
        };
        check(&m, Ok(want));
    }

    #[test]
    fn relation_in_pg_catalog_and_not_utf8() {
        let payload = xlog(1, 2, &relation(7, b"", b"t\xff\xfe"));
        let Ok(Stream::Data { message, .. }) = read(&payload) else {
            panic!("not read");
        };
        let want = Output::Relation {
            id: 7,
            namespace: b"",
            name: b"t\xff\xfe",
        };
        assert_eq!(message, want);
    }

    #[test]
    fn relation_without_columns() {
        let m = W::new(b'R')
            .u32(3)
            .string(b"s")
            .string(b"t")
            .u8(b'n')
            .u16(0)
            .0;
        let want = Output::Relation {
            id: 3,
            namespace: b"s",
            name: b"t",
        };
        check(&m, Ok(want));
    }

    #[test]
    fn relation_with_negative_column_count() {
        let m = W::new(b'R')
            .u32(3)
            .string(b"s")
            .string(b"t")
            .u8(b'n')
            .u16(0xFFFF)
            .0;
        let err = Malformed("Relation: negative number of columns");
        check(&m, Err(err));
    }

    #[test]
    fn relation_with_more_columns_than_bytes() {
        let m = W::new(b'R')
            .u32(3)
            .string(b"s")
            .string(b"t")
            .u8(b'n')
            .u16(3)
            .0;
        check(&m, Err(Malformed("Relation cut short")));
    }

    #[test]
    fn changes() {
        check(&insert(11), Ok(Output::Change { id: 11 }));
        check(&update(12), Ok(Output::Change { id: 12 }));
        check(&delete(u32::MAX), Ok(Output::Change { id: u32::MAX }));
        // Only the id is read: an update without its old tuple is one too.
        let plain = W::new(b'U').u32(13).u8(b'N').bytes(&tuple(b"x").0).0;
        check(&plain, Ok(Output::Change { id: 13 }));
    }

    #[test]
    fn truncates() {
        let ids = vec![16_384, 16_390, 1];
        check(&truncate(&ids), Ok(Output::Truncate { ids }));
        check(&truncate(&[]), Ok(Output::Truncate { ids: vec![] }));
    }

    #[test]
    fn truncate_count_beyond_the_bytes() {
        let err = || Err(Malformed("Truncate: fewer relation ids than its count"));
        // A count no payload could hold must not be allocated for.
        let huge = W::new(b'T').u32(u32::MAX).u8(0).u32(1).0;
        check(&huge, err());
        let negative = W::new(b'T').u32(0x8000_0000).u8(0).0;
        check(&negative, err());
        let one_short = W::new(b'T').u32(2).u8(0).u32(1).0;
        check(&one_short, err());
    }

    #[test]
    fn others() {
        let kinds = [b'Y', b'O', b'M', b'S', b'E', b'c', b'A', b'p', 0, 0xFF];
        for kind in kinds {
            check(&[kind], Ok(Output::Other(kind)));
            check(&[kind, 1, 2, 3], Ok(Output::Other(kind)));
        }
    }

    #[test]
    fn keepalives() {
        let end = 0x0000_0016_B374_D848;
        assert_eq!(
            read(&keepalive(end, 1)),
            Ok(Stream::Keepalive { end, reply: true })
        );
        assert_eq!(
            read(&keepalive(end, 0)),
            Ok(Stream::Keepalive { end, reply: false })
        );
    }

    #[test]
    fn empty_and_unknown() {
        assert_eq!(read(&[]), Err(Malformed("empty replication message")));
        let empty = Err(Malformed("empty pgoutput message"));
        assert_eq!(read(&xlog(1, 2, &[])), empty);
        let unknown = Err(Malformed("neither XLogData nor a primary keepalive"));
        assert_eq!(read(b"r"), unknown);
        assert_eq!(read(&status_update(5, true)), unknown);
    }

    #[test]
    fn trailing_bytes_are_ignored() {
        let mut ka = keepalive(9, 0);
        ka.push(0xAA);
        assert_eq!(
            read(&ka),
            Ok(Stream::Keepalive {
                end: 9,
                reply: false
            })
        );
        let mut c = commit(1, 2);
        c.extend_from_slice(b"later");
        check(&c, Ok(Output::Commit { end_lsn: 2 }));
    }

    /// Every strict prefix of `whole` is an error, and reading them does not panic.
    fn every_prefix_fails(whole: &[u8]) {
        assert!(read(whole).is_ok(), "{whole:?} is not a message");
        for len in 0..whole.len() {
            assert!(read(&whole[..len]).is_err(), "{:?} was read", &whole[..len]);
        }
    }

    #[test]
    fn strict_prefixes_fail() {
        every_prefix_fails(&keepalive(3, 1));
        every_prefix_fails(&xlog(1, 2, &begin(3)));
        every_prefix_fails(&xlog(1, 2, &commit(3, 4)));
        every_prefix_fails(&xlog(1, 2, &relation(5, b"public", b"t")));
        every_prefix_fails(&xlog(1, 2, &relation(5, b"", b"")));
        every_prefix_fails(&xlog(1, 2, &truncate(&[1, 2, 3])));
        every_prefix_fails(&xlog(1, 2, &truncate(&[])));
        every_prefix_fails(&xlog(1, 2, b"Y"));
    }

    #[test]
    fn change_prefixes_fail_until_the_id() {
        for whole in [insert(9), update(9), delete(9)] {
            let payload = xlog(1, 2, &whole);
            let id_end = 1 + 3 * 8 + 1 + 4;
            for len in 0..payload.len() {
                let got = read(&payload[..len]);
                if len < id_end {
                    assert!(got.is_err(), "{:?} was read", &payload[..len]);
                } else {
                    let want = Stream::Data {
                        start: 1,
                        end: 2,
                        message: Output::Change { id: 9 },
                    };
                    assert_eq!(got, Ok(want));
                }
            }
        }
    }

    #[test]
    fn status_update_layout() {
        let lsn = 0x0000_0016_B374_D848;
        let before = pg_clock(SystemTime::now());
        let msg = status_update(lsn, true);
        let after = pg_clock(SystemTime::now());
        assert_eq!(msg.len(), 34);
        assert_eq!(msg[0], b'r');
        for at in [1, 9, 17] {
            assert_eq!(msg[at..at + 8], lsn.to_be_bytes());
        }
        let clock = i64::from_be_bytes(msg[25..33].try_into().unwrap());
        assert!(
            before <= clock && clock <= after,
            "{before} {clock} {after}"
        );
        assert_eq!(msg[33], 1);
        assert_eq!(status_update(lsn, false)[33], 0);
    }

    #[test]
    fn pg_clock_epoch() {
        let epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_SECS);
        assert_eq!(pg_clock(epoch), 0);
        assert_eq!(pg_clock(epoch + Duration::from_micros(1_500)), 1_500);
        assert_eq!(pg_clock(epoch - Duration::from_secs(1)), -1_000_000);
        // 2024-01-01 00:00 UTC is 757 382 400 s after 2000-01-01.
        let y2024 = UNIX_EPOCH + Duration::from_secs(1_704_067_200);
        assert_eq!(pg_clock(y2024), 757_382_400_000_000);
    }

    /// Payloads that get past the first type byte: XLogData headers before pgoutput-shaped
    /// bodies of few distinct bytes (so NULs and small counts are common), or keepalives.
    fn shaped() -> impl Strategy<Value = Vec<u8>> {
        let kind = prop::sample::select(&b"BCRIUDTYkw"[..]);
        let body = vec(
            prop_oneof![Just(0u8), Just(1u8), Just(0xFF), any::<u8>()],
            0..64,
        );
        (kind, body, any::<bool>()).prop_map(|(kind, body, keep)| {
            if keep && kind != b'k' {
                xlog(1, 2, &[&[kind][..], &body].concat())
            } else {
                [&[kind][..], &body].concat()
            }
        })
    }

    proptest! {
        #[test]
        fn read_never_panics(payload in vec(any::<u8>(), 0..=256)) {
            let _ = read(&payload);
        }

        #[test]
        fn read_never_panics_on_shaped_input(payload in shaped()) {
            let _ = read(&payload);
        }
    }
}
