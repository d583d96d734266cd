//! Result values in text format compared and added as PostgreSQL does, to merge shards' answers.

pub mod binary;

use std::cmp::Ordering;

/// How a result column's values are compared (from its type OID in RowDescription).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Numeric,
    Float,
    Text,
    Bpchar,
    Bool,
    Date,
    Timestamp,
    TimestampTz,
    Uuid,
}

impl Kind {
    /// The kind of type `oid`, or None for a type pgcorral does not compare.
    pub fn of_oid(oid: u32) -> Option<Kind> {
        Some(match oid {
            20 | 21 | 23 | 26 => Kind::Int,
            1700 => Kind::Numeric,
            700 | 701 => Kind::Float,
            19 | 25 | 1043 => Kind::Text,
            1042 => Kind::Bpchar,
            16 => Kind::Bool,
            1082 => Kind::Date,
            1114 => Kind::Timestamp,
            1184 => Kind::TimestampTz,
            2950 => Kind::Uuid,
            _ => return None,
        })
    }
}

/// Compares two non-NULL values of kind `kind` in text format as PostgreSQL's default btree
/// operator class orders them (Text: byte order, which is collation "C"; the caller only uses it
/// when that is the collation in effect). None when either value cannot be read (the caller then
/// refuses the query rather than guess).
pub fn compare(kind: Kind, a: &[u8], b: &[u8]) -> Option<Ordering> {
    Some(match kind {
        Kind::Int => int(a)?.cmp(&int(b)?),
        Kind::Numeric => Numeric::read(a)?.compare(&Numeric::read(b)?),
        Kind::Float => float(a)?.total_cmp(&float(b)?),
        Kind::Text => a.cmp(b),
        Kind::Bpchar => trim_spaces(a).cmp(trim_spaces(b)),
        Kind::Bool => boolean(a)?.cmp(&boolean(b)?),
        Kind::Date => moment(a, false, false)?.cmp(&moment(b, false, false)?),
        Kind::Timestamp => moment(a, true, false)?.cmp(&moment(b, true, false)?),
        Kind::TimestampTz => moment(a, true, true)?.cmp(&moment(b, true, true)?),
        Kind::Uuid => uuid(a)?.cmp(&uuid(b)?),
    })
}

/// The sum of two non-NULL values, in the text format PostgreSQL would print for the sum: Int
/// exact (i128 internally; None on overflow of i128), Numeric exact decimal arithmetic keeping the
/// larger of the two display scales (the number of digits after the point), with PostgreSQL's
/// special values (NaN + anything = NaN; Infinity + -Infinity = NaN; Infinity + finite =
/// Infinity). None for kinds that are not Int or Numeric, or unreadable values.
pub fn add(kind: Kind, a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    match kind {
        Kind::Int => Some(int(a)?.checked_add(int(b)?)?.to_string().into_bytes()),
        Kind::Numeric => Some(Numeric::read(a)?.add(&Numeric::read(b)?)),
        _ => None,
    }
}

fn int(s: &[u8]) -> Option<i128> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// A float8 (or float4) for `f64::total_cmp`, which then orders as PostgreSQL does: NaN above
/// everything and equal to NaN (one positive NaN for all), -0 equal to 0 (adding 0 makes it 0).
fn float(s: &[u8]) -> Option<f64> {
    let f: f64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    Some(if f.is_nan() { f64::NAN } else { f + 0.0 })
}

/// A bpchar value without its padding: trailing spaces do not count in bpchar comparisons.
fn trim_spaces(s: &[u8]) -> &[u8] {
    let end = s.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
    &s[..end]
}

fn boolean(s: &[u8]) -> Option<bool> {
    match s {
        b"t" => Some(true),
        b"f" => Some(false),
        _ => None,
    }
}

/// A uuid in lower case, where its hex digits order as its 16 bytes do.
fn uuid(s: &[u8]) -> Option<Vec<u8>> {
    let dash = |i| matches!(i, 8 | 13 | 18 | 23);
    let mut chars = s.iter().enumerate();
    let read = chars.all(|(i, &c)| {
        if dash(i) {
            c == b'-'
        } else {
            c.is_ascii_hexdigit()
        }
    });
    (read && s.len() == 36).then(|| s.to_ascii_lowercase())
}

/// A numeric value as printed.
enum Numeric<'a> {
    NegInfinity,
    Finite(Decimal<'a>),
    Infinity,
    NaN,
}

/// A finite numeric: the ASCII digits before the point (at least one) and after it (as many as
/// its display scale).
struct Decimal<'a> {
    negative: bool,
    whole: &'a [u8],
    fraction: &'a [u8],
}

impl<'a> Numeric<'a> {
    fn read(s: &'a [u8]) -> Option<Numeric<'a>> {
        match s {
            b"NaN" => return Some(Numeric::NaN),
            b"Infinity" => return Some(Numeric::Infinity),
            b"-Infinity" => return Some(Numeric::NegInfinity),
            _ => {}
        }
        let (negative, unsigned) = match s.strip_prefix(b"-") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (whole, fraction) = match unsigned.iter().position(|&c| c == b'.') {
            Some(dot) if dot + 1 < unsigned.len() => (&unsigned[..dot], &unsigned[dot + 1..]),
            Some(_) => return None,
            None => (unsigned, &b""[..]),
        };
        let digits = |d: &[u8]| d.iter().all(u8::is_ascii_digit);
        (!whole.is_empty() && digits(whole) && digits(fraction)).then_some(Numeric::Finite(
            Decimal {
                negative,
                whole,
                fraction,
            },
        ))
    }

    /// PostgreSQL's order: -Infinity, the finite values, Infinity, NaN.
    fn rank(&self) -> u8 {
        match self {
            Numeric::NegInfinity => 0,
            Numeric::Finite(_) => 1,
            Numeric::Infinity => 2,
            Numeric::NaN => 3,
        }
    }

    fn compare(&self, other: &Numeric) -> Ordering {
        let (Numeric::Finite(a), Numeric::Finite(b)) = (self, other) else {
            return self.rank().cmp(&other.rank());
        };
        // Without leading zeros of the whole part and trailing zeros of the fraction, a longer
        // whole part is a larger magnitude and the fractions compare as strings.
        let (aw, af) = (trim_start_zeros(a.whole), trim_end_zeros(a.fraction));
        let (bw, bf) = (trim_start_zeros(b.whole), trim_end_zeros(b.fraction));
        // Zero has no sign: -0.000 equals 0.
        let a_negative = a.negative && !(aw.is_empty() && af.is_empty());
        let b_negative = b.negative && !(bw.is_empty() && bf.is_empty());
        let magnitude = aw.len().cmp(&bw.len()).then(aw.cmp(bw)).then(af.cmp(bf));
        match (a_negative, b_negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => magnitude,
            (true, true) => magnitude.reverse(),
        }
    }

    fn add(&self, other: &Numeric) -> Vec<u8> {
        use Numeric::{Finite, Infinity, NaN, NegInfinity};
        let (Finite(a), Finite(b)) = (self, other) else {
            let sum: &[u8] = match (self, other) {
                (NaN, _) | (_, NaN) | (Infinity, NegInfinity) | (NegInfinity, Infinity) => b"NaN",
                (Infinity, _) | (_, Infinity) => b"Infinity",
                _ => b"-Infinity",
            };
            return sum.to_vec();
        };
        // Both as whole numbers of units of the larger scale's last digit.
        let scale = a.fraction.len().max(b.fraction.len());
        let units = |d: &Decimal| {
            let mut units = [d.whole, d.fraction].concat();
            units.resize(d.whole.len() + scale, b'0');
            units
        };
        let (au, bu) = (units(a), units(b));
        let (negative, sum) = if a.negative == b.negative {
            (a.negative, add_digits(&au, &bu))
        } else if compare_digits(&au, &bu) == Ordering::Less {
            (b.negative, subtract_digits(&bu, &au))
        } else {
            (a.negative, subtract_digits(&au, &bu))
        };
        let (whole, fraction) = sum.split_at(sum.len() - scale);
        let whole = trim_start_zeros(whole);
        let mut out = Vec::with_capacity(sum.len() + 2);
        if negative && sum.iter().any(|&d| d != b'0') {
            out.push(b'-');
        }
        out.extend_from_slice(if whole.is_empty() { b"0" } else { whole });
        if scale > 0 {
            out.push(b'.');
            out.extend_from_slice(fraction);
        }
        out
    }
}

fn trim_start_zeros(d: &[u8]) -> &[u8] {
    &d[d.iter().position(|&c| c != b'0').unwrap_or(d.len())..]
}

fn trim_end_zeros(d: &[u8]) -> &[u8] {
    &d[..d.iter().rposition(|&c| c != b'0').map_or(0, |i| i + 1)]
}

/// Compares two ASCII digit strings as whole numbers.
fn compare_digits(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (trim_start_zeros(a), trim_start_zeros(b));
    a.len().cmp(&b.len()).then(a.cmp(b))
}

/// The value of the `i`th digit from the right (0 past the left end).
fn digit(d: &[u8], i: usize) -> u8 {
    d.len().checked_sub(i + 1).map_or(0, |at| d[at] - b'0')
}

/// The sum of two ASCII digit strings, one digit longer than the longer of them.
fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let len = a.len().max(b.len()) + 1;
    let mut out = vec![b'0'; len];
    let mut carry = 0;
    for i in 0..len {
        let s = digit(a, i) + digit(b, i) + carry;
        out[len - 1 - i] = b'0' + s % 10;
        carry = s / 10;
    }
    out
}

/// `a - b` for ASCII digit strings with `a >= b`, as long as `a`.
fn subtract_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = vec![b'0'; a.len()];
    let mut borrow = 0;
    for i in 0..a.len() {
        let take = digit(b, i) + borrow;
        let have = digit(a, i);
        borrow = u8::from(have < take);
        out[a.len() - 1 - i] = b'0' + have + 10 * borrow - take;
    }
    out
}

/// Reads ASCII digits off the front of a value.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    /// Whether the next byte is `c` (then taken).
    fn eat(&mut self, c: u8) -> bool {
        let found = self.0.first() == Some(&c);
        if found {
            self.0 = &self.0[1..];
        }
        found
    }

    /// Between `min` and `max` digits (as many as there are): their value and count.
    fn digits(&mut self, min: usize, max: usize) -> Option<(i64, usize)> {
        let run = self.0.iter().take_while(|c| c.is_ascii_digit());
        let n = run.count().min(max);
        if n < min {
            return None;
        }
        let digits = &self.0[..n];
        let value = digits.iter().fold(0, |v, &c| v * 10 + i64::from(c - b'0'));
        self.0 = &self.0[n..];
        Some((value, n))
    }

    /// The field of exactly two digits after `separator`, at most `max`.
    fn field(&mut self, separator: u8, max: i64) -> Option<i64> {
        if !self.eat(separator) {
            return None;
        }
        self.digits(2, 2).map(|(v, _)| v).filter(|&v| v <= max)
    }
}

/// A date or timestamp (at UTC when `zone`) in DateStyle ISO as one number of microseconds, in
/// PostgreSQL's order (proleptic Gregorian calendar; infinities at the ends).
fn moment(s: &[u8], time: bool, zone: bool) -> Option<i128> {
    match s {
        b"infinity" => return Some(i128::MAX),
        b"-infinity" => return Some(i128::MIN),
        _ => {}
    }
    let mut c = Cursor(s);
    let (year, _) = c.digits(1, 9)?;
    let month = c.field(b'-', 12)?;
    let day = c.field(b'-', 31)?;
    let mut micros = 0;
    if time {
        let hour = c.field(b' ', 23)?;
        let minute = c.field(b':', 59)?;
        let second = c.field(b':', 59)?;
        micros = ((hour * 60 + minute) * 60 + second) * 1_000_000;
        if c.eat(b'.') {
            let (fraction, n) = c.digits(1, 6)?;
            micros += fraction * 10i64.pow(6 - n as u32);
        }
    }
    if zone {
        let west = c.eat(b'-');
        if !west && !c.eat(b'+') {
            return None;
        }
        // Hours, then minutes and seconds when not zero.
        let mut offset = c.digits(2, 2)?.0 * 3600;
        for unit in [60, 1] {
            if c.0.starts_with(b":") {
                offset += c.field(b':', 59)? * unit;
            }
        }
        micros += if west { offset } else { -offset } * 1_000_000;
    }
    // Year 1 BC is year 0, 2 BC is -1; PostgreSQL prints no year 0.
    let year = match c.0 {
        _ if year == 0 => return None,
        b"" => year,
        b" BC" => 1 - year,
        _ => return None,
    };
    const MONTH_DAYS: [i64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let last = MONTH_DAYS.get((month as usize).checked_sub(1)?)? + i64::from(month == 2 && leap);
    if day == 0 || day > last {
        return None;
    }
    // Days counted in years that start on March 1st, which puts each leap day last.
    let (y, m) = if month > 2 {
        (year, month - 3)
    } else {
        (year - 1, month + 9)
    };
    let days =
        365 * y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400) + (153 * m + 2) / 5 + day;
    Some(i128::from(days) * 86_400_000_000 + i128::from(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of a kind in strictly increasing order, separated by `|`.
    #[rustfmt::skip]
    const ASCENDING: &[(Kind, &str)] = &[
        (Kind::Int, "-9223372036854775808|-10|-2|0|2|10|4294967295"),
        // Confirmed on PostgreSQL 15 (rows in the order `ORDER BY` gave them), like all the
        // orders below but those noted otherwise.
        (Kind::Numeric, "-Infinity|-100|-2|-1.5|-1.25|-0.001|0|0.001|0.01|0.0101|Infinity|NaN"),
        (Kind::Float, "-Infinity|-1e+308|-1.5|0|1e-07|1.4999999|1.5|1e+30|Infinity|NaN"),
        (Kind::Text, "|B|a|a |é"),
        // bpchar ignores its padding: 'a  ' is before 'a' || chr(1), where text puts 'a ' after.
        (Kind::Bpchar, "|A|a  |a\u{1}|b"),
        (Kind::Text, "a\u{1}|a "),
        (Kind::Bool, "f|t"),
        (Kind::Uuid, "0000000a-0000-0000-0000-000000000000|a0000000-0000-0000-0000-000000000001"),
        (Kind::Date, "-infinity|4713-11-24 BC|0002-01-01 BC|0001-12-31 BC|0001-01-01"),
        (Kind::Date, "0001-01-01|10000-01-01|5874897-12-31|infinity"),
        (Kind::Date, "0005-02-29 BC|0005-03-01 BC|0004-02-28 BC|2000-02-29|2000-03-01"),
        (Kind::Timestamp, "-infinity|0044-03-15 12:00:00 BC|2020-01-01 00:00:00"),
        (Kind::Timestamp, "2020-01-01 00:00:00|2020-01-01 00:00:00.000001|2020-01-01 00:00:00.25"),
        (Kind::Timestamp, "2020-01-01 00:00:00.5|294276-12-31 23:59:59.999999|infinity"),
        (Kind::Timestamp, "1999-12-31 23:59:59.9|2000-01-01 00:00:00"),
        // TimeZone America/New_York: a local mean time offset in seconds before 1883, and local
        // times out of order at the end of daylight saving time.
        (Kind::TimestampTz, "-infinity|0044-03-15 07:03:58-04:56:02 BC|2021-03-14 01:30:00-05"),
        (Kind::TimestampTz, "0044-03-15 07:03:58-04:56:02 BC|1799-12-31 19:03:58-04:56:02"),
        (Kind::TimestampTz, "1799-12-31 19:03:58-04:56:02|2021-03-14 01:30:00-05"),
        (Kind::TimestampTz, "2021-03-14 01:30:00-05|2021-03-14 03:30:00-04|2021-11-07 01:30:00-04"),
        (Kind::TimestampTz, "2021-11-07 01:30:00-04|2021-11-07 01:10:00-05|infinity"),
        // The hour before is later when the offset is 26 hours smaller.
        (Kind::TimestampTz, "2000-01-01 00:00:00+14|1999-12-31 23:00:00-12"),
    ];

    /// Equal values of a kind.
    #[rustfmt::skip]
    const EQUAL: &[(Kind, &str, &str)] = &[
        (Kind::Int, "0", "-0"),
        (Kind::Numeric, "007.50", "7.5"),
        (Kind::Bpchar, "   ", ""),
        (Kind::Uuid, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (Kind::Timestamp, "2020-01-01 00:00:00.5", "2020-01-01 00:00:00.500000"),
        // Confirmed on PostgreSQL 15.
        (Kind::Numeric, "NaN", "NaN"),
        (Kind::Numeric, "1.0", "1.00"),
        (Kind::Numeric, "0", "-0.000"),
        (Kind::Float, "-0", "0"),
        (Kind::Float, "NaN", "NaN"),
        (Kind::Bpchar, "a", "a    "),
        // The same instants printed in Asia/Kolkata and America/St_Johns, in Europe/Amsterdam
        // (whose offset in 44 BC is +00:19:32) and UTC, and in Europe/Amsterdam in 2020 and UTC.
        (Kind::TimestampTz, "2020-06-01 17:30:00+05:30", "2020-06-01 09:30:00-02:30"),
        (Kind::TimestampTz, "0044-03-15 12:19:32+00:19:32 BC", "0044-03-15 12:00:00+00 BC"),
        (Kind::TimestampTz, "2020-06-01 14:00:00.123+02", "2020-06-01 12:00:00.123+00"),
    ];

    /// Values of a kind that cannot be read, separated by `|`.
    #[rustfmt::skip]
    const UNREADABLE: &[(Kind, &str)] = &[
        (Kind::Int, "|-|1.0|1e3| 1|١"),
        (Kind::Numeric, "|-|.5|1.|1e5|nan|+Infinity|1.2.3|--1|1 "),
        (Kind::Float, "|-|1,5|0x10|\u{ff}| 1"),
        (Kind::Bool, "true|T|1|"),
        (Kind::Uuid, "|a0eebc999c0b4ef8bb6d6bb9bd380a11|g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (Kind::Uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a110|a0eebc99-9c0b-4ef8-bb6d-6bb9bd380aé"),
        // 4 BC is no leap year (PostgreSQL 15 refuses its 29 February); 5 BC is one.
        (Kind::Date, "|2001-02-29|2000-13-01|2000-00-01|0000-01-01|2000-1-01|0004-02-29 BC"),
        (Kind::Date, "2000-01-01 AD|Infinity|2000-01-01 00:00:00"),
        (Kind::Timestamp, "2020-01-01|2020-01-01 24:00:00|2020-01-01 00:00:60"),
        (Kind::Timestamp, "2020-01-01 00:00:00.|2020-01-01 00:00:00.1234567"),
        (Kind::Timestamp, "2020-01-01 00:00:00+00|2020-01-01 00:00:00BC"),
        (Kind::TimestampTz, "2020-01-01 00:00:00|2020-01-01 00:00:00+0|2020-01-01 00:00:00+05:"),
        (Kind::TimestampTz, "2020-01-01 00:00:00+05:60|2020-01-01 00:00:00 BC+00"),
        (Kind::TimestampTz, "2020-01-01 00:00:00+01:00:00:00"),
    ];

    fn ascending(kind: Kind, list: &str) {
        let values: Vec<&str> = list.split('|').collect();
        for (i, a) in values.iter().enumerate() {
            for b in &values[i + 1..] {
                let (a, b) = (a.as_bytes(), b.as_bytes());
                let both = (compare(kind, a, b), compare(kind, b, a));
                let want = (Some(Ordering::Less), Some(Ordering::Greater));
                assert_eq!(both, want, "{kind:?} {a:?} {b:?}");
            }
        }
    }

    fn sum(kind: Kind, a: &str, b: &str) -> Option<String> {
        add(kind, a.as_bytes(), b.as_bytes()).map(|s| String::from_utf8(s).unwrap())
    }

    #[test]
    fn kinds_of_oids() {
        let kinds = [20, 26, 1700, 700, 19, 1042, 1184, 2950, 114].map(Kind::of_oid);
        let some = [Kind::Int, Kind::Int, Kind::Numeric, Kind::Float].map(Some);
        assert_eq!(kinds[..4], some);
        let some = [Kind::Text, Kind::Bpchar, Kind::TimestampTz, Kind::Uuid].map(Some);
        assert_eq!((&kinds[4..8], kinds[8]), (&some[..], None));
    }

    #[test]
    fn orders() {
        for &(kind, list) in ASCENDING {
            ascending(kind, list);
        }
        // Confirmed on PostgreSQL 15: 1e1000 prints as 1 and a thousand zeros.
        ascending(Kind::Numeric, &format!("0|1{}|Infinity", "0".repeat(1000)));
        let long = "123456789012345678901234567890123456789012345678901234567890";
        let longs = format!("-{long}.1|-{long}|-1|{long}|{long}.000001");
        ascending(Kind::Numeric, &longs);
    }

    #[test]
    fn equalities() {
        for &(kind, a, b) in EQUAL {
            let found = compare(kind, a.as_bytes(), b.as_bytes());
            assert_eq!(found, Some(Ordering::Equal), "{kind:?} {a:?} {b:?}");
        }
    }

    #[test]
    fn unreadable_values() {
        for &(kind, list) in UNREADABLE {
            for v in list.split('|') {
                let found = compare(kind, v.as_bytes(), v.as_bytes());
                assert_eq!(found, None, "{kind:?} {v:?}");
            }
        }
    }

    #[test]
    fn int_sums() {
        // Confirmed on PostgreSQL 15: int8's sum (a numeric) beyond int8.
        let max = "9223372036854775807";
        assert_eq!(sum(Kind::Int, max, max).unwrap(), "18446744073709551614");
        assert_eq!(sum(Kind::Int, "-5", "3").unwrap(), "-2");
        assert_eq!(sum(Kind::Int, &i128::MAX.to_string(), "1"), None);
        assert_eq!(sum(Kind::Int, "1", "1.0"), None);
        assert_eq!(sum(Kind::Text, "1", "1"), None);
        assert_eq!(sum(Kind::Float, "1", "1"), None);
    }

    #[test]
    fn numeric_sums() {
        let cases = [
            // Confirmed on PostgreSQL 15.
            "-1.5 + 1.5 = 0.0|1.50 + 2 = 3.50|1.5 + 2.25 = 3.75|NaN + Infinity = NaN",
            "NaN + -Infinity = NaN|Infinity + -Infinity = NaN|Infinity + 5 = Infinity",
            "-Infinity + -Infinity = -Infinity|1000 + -0.001 = 999.999|-5 + 3 = -2",
            "999.99 + 0.01 = 1000.00|-1.5 + -2.5 = -4.0|0.001 + -0.0005 = 0.0005",
            "3 + -5 = -2|-0.001 + 0.0005 = -0.0005|-0 + 0 = 0|5 + -Infinity = -Infinity",
            "0.5 + -0.50 = 0.00",
        ];
        for case in cases.iter().flat_map(|c| c.split('|')) {
            let (a, rest) = case.split_once(" + ").unwrap();
            let (b, total) = rest.split_once(" = ").unwrap();
            assert_eq!(sum(Kind::Numeric, a, b).as_deref(), Some(total), "{case}");
            assert_eq!(sum(Kind::Numeric, b, a).as_deref(), Some(total), "{case}");
        }
        // Confirmed on PostgreSQL 15, with 41 digits: beyond i128.
        let (nines, zeros) = ("9".repeat(41), "0".repeat(41));
        let s = |a: &str, b: &str| sum(Kind::Numeric, a, b).unwrap();
        assert_eq!(s(&format!("{nines}.5"), "0.5"), format!("1{zeros}.0"));
        assert_eq!(s(&format!("1{zeros}"), "-0.1"), format!("{nines}.9"));
        assert_eq!(sum(Kind::Numeric, "1", "x"), None);
        assert_eq!(sum(Kind::Numeric, "NaN", "1."), None);
    }

    /// Random-ish bytes, mostly values with a few bytes changed, never panic; every comparison
    /// that reads both values is antisymmetric; every sum commutes, and a finite sum compares
    /// with its first term as its second term compares with zero.
    #[test]
    fn no_panics_on_any_bytes() {
        let oids = [20, 1700, 701, 25, 1042, 16, 1082, 1114, 1184, 2950];
        let kinds = oids.map(|oid| Kind::of_oid(oid).unwrap());
        let alphabet = b"01234567890123456789-.:+ BCaefinNtyI\xff\xc3";
        let seeds = "2020-01-01 00:00:00.5+05:30 BC|2020-02-29 23:59:59|0044-03-15 BC|-12.340|\
            Infinity|1e+100|-0.5|123|t|a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11|NaN|  x ";
        let seeds: Vec<&[u8]> = seeds.split('|').map(str::as_bytes).collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut value = |seed: usize| {
            let mut v = seeds[seed % seeds.len()].to_vec();
            for _ in 0..next() % 4 {
                let r = next();
                let i = (r >> 8) as usize;
                // A byte of the alphabet, or now and then any byte.
                let byte = alphabet.get(i % 64).copied().unwrap_or(r as u8);
                let at = i % v.len().max(1);
                match (r >> 32) % 4 {
                    _ if v.is_empty() => v.push(byte),
                    0 => v.truncate(at),
                    1 => v.insert(at, byte),
                    _ => v[at] = byte,
                }
            }
            v
        };
        let finite = |v: &[u8]| v.iter().all(|c| b"-.0123456789".contains(c));
        for n in 0..50_000 {
            // Mostly two changes of the same value, which both read more often.
            let (a, b) = (value(n), value(n + n % 5 / 4));
            for kind in kinds {
                let forward = compare(kind, &a, &b);
                assert_eq!(forward.map(Ordering::reverse), compare(kind, &b, &a));
                let sum = add(kind, &a, &b);
                assert_eq!(sum, add(kind, &b, &a));
                if let Some(sum) = sum.filter(|_| finite(&a) && finite(&b)) {
                    let (grew, sign) = (compare(kind, &sum, &a), compare(kind, &b, b"0"));
                    assert_eq!(grew, sign, "{kind:?} {a:?} {b:?} {sum:?}");
                }
            }
        }
    }
}
