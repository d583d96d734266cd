//! PostgreSQL's `PARTITION BY HASH` hash, bit for bit: the extended hash functions of each
//! supported key type with the partitioning seed, combined over the key's columns, so that a
//! shard can hold real hash partitions and PostgreSQL agrees on where every row lives.
//!
//! All arithmetic is on unsigned 64-bit values, wrapping; the SQL functions show the same bits
//! as signed `int8`. Byte-hashed types (text, uuid) are hashed as a little-endian server does.

/// The seed PostgreSQL passes to every column's extended hash when it places a row in a hash
/// partition (`HASH_PARTITION_SEED`).
pub const PARTITION_SEED: u64 = 0x7A5B_2236_7996_DCFD;

/// The value of the golden ratio that lookup3 starts its state from, plus the constant
/// PostgreSQL adds.
const INIT: u32 = 0x9e37_79b9_u32.wrapping_add(3_923_095);

#[inline]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

#[inline]
fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// The starting state for a key of `len` bytes and `seed`.
#[inline]
fn start(len: u32, seed: u64) -> (u32, u32, u32) {
    let init = INIT.wrapping_add(len);
    let (mut a, mut b, mut c) = (init, init, init);
    if seed != 0 {
        a = a.wrapping_add((seed >> 32) as u32);
        b = b.wrapping_add(seed as u32);
        mix(&mut a, &mut b, &mut c);
    }
    (a, b, c)
}

/// `hash_uint32_extended`: the 64-bit hash of one 32-bit word.
pub fn hash_u32(k: u32, seed: u64) -> u64 {
    let (mut a, mut b, mut c) = start(4, seed);
    a = a.wrapping_add(k);
    finish(&mut a, &mut b, &mut c);
    (u64::from(b) << 32) | u64::from(c)
}

/// `hash_bytes_extended` (`hash_any_extended`): the 64-bit hash of a byte string, as on a
/// little-endian machine.
pub fn hash_bytes(key: &[u8], seed: u64) -> u64 {
    // PostgreSQL takes the length as a 32-bit value (keys are under 1 GB).
    let (mut a, mut b, mut c) = start(key.len() as u32, seed);
    let word = |w: &[u8]| u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
    let mut k = key;
    while k.len() >= 12 {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        mix(&mut a, &mut b, &mut c);
        k = &k[12..];
    }
    // The last 0 to 11 bytes: a and b take whole little-endian words, c the bytes above its
    // lowest (which lookup3 keeps for the length).
    let byte = |i: usize, shift: u32| k.get(i).map_or(0, |&x| u32::from(x) << shift);
    a = a.wrapping_add(byte(0, 0) | byte(1, 8) | byte(2, 16) | byte(3, 24));
    b = b.wrapping_add(byte(4, 0) | byte(5, 8) | byte(6, 16) | byte(7, 24));
    c = c.wrapping_add(byte(8, 8) | byte(9, 16) | byte(10, 24));
    finish(&mut a, &mut b, &mut c);
    (u64::from(b) << 32) | u64::from(c)
}

/// `hash_combine64`: folds one column's hash `b` into the row's hash `a`.
#[inline]
pub fn combine(a: u64, b: u64) -> u64 {
    a ^ b
        .wrapping_add(0x49A0_F4DD_15E5_A8E3)
        .wrapping_add(a << 54)
        .wrapping_add(a >> 7)
}

/// `hashint8extended` (and `hashint4extended`, `hashint2extended`: an int2 or int4 hashes as
/// the int8 of the same value): the high half is folded into the low one so that values that
/// fit in 32 bits hash alike whatever their type.
pub fn int(v: i64, seed: u64) -> u64 {
    let lo = v as u32;
    let hi = (v >> 32) as u32;
    hash_u32(lo ^ if v >= 0 { hi } else { !hi }, seed)
}

/// `hashtextextended` under a deterministic collation (text, varchar): the bytes, in the
/// server's encoding.
pub fn text(bytes: &[u8], seed: u64) -> u64 {
    hash_bytes(bytes, seed)
}

/// `hashbpcharextended` (char(n)): the bytes without trailing spaces.
pub fn bpchar(bytes: &[u8], seed: u64) -> u64 {
    let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    hash_bytes(&bytes[..end], seed)
}

/// `uuid_hash_extended`: the 16 bytes.
pub fn uuid(bytes: &[u8; 16], seed: u64) -> u64 {
    hash_bytes(bytes, seed)
}

/// The row hash of a key from its columns' hashes in key order (`None`: the column is NULL,
/// and is skipped), as `compute_partition_hash_value` computes it.
pub fn row(columns: impl IntoIterator<Item = Option<u64>>) -> u64 {
    columns.into_iter().flatten().fold(0, combine)
}

/// The partition (shard) of a row hash among `n` equal partitions: remainder `r` of modulus `n`.
#[inline]
pub fn partition(row_hash: u64, n: usize) -> usize {
    (row_hash % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values read from PostgreSQL 15 (`hashint8extended(5, seed)` and so on, printed as the
    /// signed int8 PostgreSQL shows).
    #[test]
    fn matches_postgresql_hash_functions() {
        let s = PARTITION_SEED;
        assert_eq!(int(5, s) as i64, -2840406021921404358);
        assert_eq!(int(-7, s) as i64, -7298374200968567817);
        assert_eq!(text(b"abc", s) as i64, 3628778498291917250);
        assert_eq!(text(b"", s) as i64, -5700645584453517373);
        assert_eq!(text(b"hello world!!", s) as i64, 7458898085804086944);
        let u = [
            0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
            0x0a, 0x11,
        ];
        assert_eq!(uuid(&u, s) as i64, 424513190990560493);
        assert_eq!(bpchar(b"ab   ", s) as i64, 596009030900183869);
        assert_eq!(bpchar(b"ab", s), bpchar(b"ab   ", s));
    }

    #[test]
    fn ints_of_every_width_hash_alike() {
        for v in [0i64, 1, -1, 32767, -32768, i32::MAX as i64, i32::MIN as i64] {
            let narrow = v as i32 as u32; // what hashint4extended hashes
            assert_eq!(
                int(v, PARTITION_SEED),
                hash_u32(narrow, PARTITION_SEED),
                "{v}"
            );
        }
    }

    #[test]
    fn nulls_are_skipped_and_an_all_null_key_is_partition_0() {
        let a = int(1, PARTITION_SEED);
        assert_eq!(row([None, Some(a)]), row([Some(a)]));
        assert_eq!(row([None, None]), 0);
        assert_eq!(partition(row([None]), 5), 0);
    }
}
