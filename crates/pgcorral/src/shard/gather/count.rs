//! A LIMIT or OFFSET parameter's value as PostgreSQL reads it: coerced to bigint from the type
//! the client declared (numeric rounded half away from zero, float4 and float8 to the nearest
//! even, the integer types as they are), so that the merge keeps as many rows as one server.

use crate::shard::values::binary;

/// Types PostgreSQL has no implicit or assignment cast to bigint from (bool, bytea, "char",
/// name, text, json, bpchar, varchar, date, time, timestamp, timestamptz, uuid, jsonb): a
/// LIMIT or OFFSET parameter declared so fails on every shard as on one server.
const NOT_BIGINT: [u32; 14] = [
    16, 17, 18, 19, 25, 114, 1042, 1043, 1082, 1083, 1114, 1184, 2950, 3802,
];

/// The value a LIMIT or OFFSET parameter declared of type `oid` (0: not declared, so bigint
/// as PostgreSQL infers it) takes, sent as `v` (`None`: NULL) in `format` (0 text, 1 binary):
/// `Ok(None)` for NULL (no limit, no offset), else the bigint PostgreSQL makes of it (the
/// shards refuse a negative one as PostgreSQL does). `Err`: a type or value pgcorral does not
/// read as PostgreSQL would (the request is refused rather than answered with another number
/// of rows).
pub fn count_value(oid: u32, format: u16, v: Option<&[u8]>) -> Result<Option<i64>, String> {
    let Some(v) = v else {
        return Ok(None);
    };
    let unreadable = || {
        format!(
            "a LIMIT or OFFSET parameter's value of type oid {oid} could not be read as PostgreSQL reads it: send a bigint"
        )
    };
    let text = match (oid, format) {
        (0 | 20 | 21 | 23, 1) => {
            return match v.len() {
                2 => Ok(Some(i16::from_be_bytes([v[0], v[1]]).into())),
                4 => Ok(Some(i32::from_be_bytes([v[0], v[1], v[2], v[3]]).into())),
                8 => Ok(Some(i64::from_be_bytes(v.try_into().map_err(|_| unreadable())?))),
                _ => Err(unreadable()),
            };
        }
        (26 | 700 | 701 | 1700, 1) => binary::to_text(oid, v).ok_or_else(unreadable)?,
        (0 | 20 | 21 | 23 | 26 | 700 | 701 | 1700 | 705, 0) => v.to_vec(),
        // No cast to bigint: the shards fail the statement, as PostgreSQL does.
        (oid, _) if NOT_BIGINT.contains(&oid) => return Ok(None),
        (_, 0 | 1) => {
            return Err(format!(
                "a LIMIT or OFFSET parameter declared of type oid {oid} is not read across shards: declare it bigint (or leave its type to the server)"
            ))
        }
        _ => return Err(unreadable()),
    };
    let text = std::str::from_utf8(&text).map_err(|_| unreadable())?;
    let n = match oid {
        700 | 701 => float(text),
        _ => decimal(text),
    };
    n.map(Some).ok_or_else(unreadable)
}

/// A float's text rounded to the nearest integer, ties to even (PostgreSQL's float to bigint);
/// `None` for NaN, an infinity or a value out of range.
fn float(text: &str) -> Option<i64> {
    let t = text.trim();
    let f: f64 = match t.to_ascii_lowercase().as_str() {
        "nan" | "infinity" | "+infinity" | "-infinity" | "inf" | "+inf" | "-inf" => return None,
        _ => t.parse().ok()?,
    };
    let r = f.round_ties_even();
    // i64::MAX as f64 rounds up to 2^63, itself out of range.
    (r.is_finite() && r >= i64::MIN as f64 && r < i64::MAX as f64).then_some(r as i64)
}

/// A number's text (an integer or a decimal, with an exponent or digit separators as any
/// PostgreSQL version takes them; hexadecimal, octal and binary integers too) rounded half
/// away from zero (PostgreSQL's numeric to bigint); `None` when it is not a number or out of
/// bigint's range.
pub(super) fn decimal(text: &str) -> Option<i64> {
    let t = text.trim();
    let (negative, t) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let t: String = t.chars().filter(|&c| c != '_').collect();
    let lower = t.to_ascii_lowercase();
    let radix = [("0x", 16), ("0o", 8), ("0b", 2)]
        .into_iter()
        .find(|(p, _)| lower.starts_with(p));
    let magnitude: i128 = if let Some((p, radix)) = radix {
        i128::from_str_radix(&lower[p.len()..], radix).ok()?
    } else {
        let (mantissa, exponent) = match lower.split_once('e') {
            Some((m, e)) => (m, e.parse::<i32>().ok()?),
            None => (lower.as_str(), 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if whole.is_empty() && fraction.is_empty()
            || !whole
                .bytes()
                .chain(fraction.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        // The digits, and where the point falls among them after the exponent.
        let digits: Vec<u8> = whole
            .bytes()
            .chain(fraction.bytes())
            .map(|b| b - b'0')
            .collect();
        let point = i64::try_from(whole.len()).ok()? + i64::from(exponent);
        let mut m: i128 = 0;
        for (i, &d) in digits.iter().enumerate() {
            let i = i64::try_from(i).ok()?;
            if i >= point {
                // The first digit after the point rounds (a point before the digits puts
                // zeros there).
                if i == point && d >= 5 {
                    m += 1;
                }
                break;
            }
            m = m.checked_mul(10)?.checked_add(d.into())?;
            if m > i128::from(u64::MAX) {
                return None;
            }
        }
        // Zeros the exponent puts after the digits.
        let short = point - i64::try_from(digits.len()).ok()?;
        // Not for a zero, whose exponent may be huge: it stays zero.
        for _ in 0..if m == 0 { 0 } else { short.max(0) } {
            m = m.checked_mul(10)?;
            if m > i128::from(u64::MAX) {
                return None;
            }
        }
        m
    };
    let n = if negative { -magnitude } else { magnitude };
    i64::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(oid: u32, v: &str) -> Result<Option<i64>, String> {
        count_value(oid, 0, Some(v.as_bytes()))
    }

    #[test]
    fn integers_are_read_as_they_are() {
        assert_eq!(text(0, " 42 "), Ok(Some(42)));
        assert_eq!(text(20, "-3"), Ok(Some(-3)));
        assert_eq!(text(23, "+7"), Ok(Some(7)));
        assert_eq!(text(20, "1_000"), Ok(Some(1000)));
        assert_eq!(text(20, "0x10"), Ok(Some(16)));
        assert_eq!(text(705, "5"), Ok(Some(5)));
        assert_eq!(count_value(21, 1, Some(&5i16.to_be_bytes())), Ok(Some(5)));
        assert_eq!(count_value(20, 1, Some(&9i64.to_be_bytes())), Ok(Some(9)));
        assert_eq!(count_value(26, 1, Some(&7u32.to_be_bytes())), Ok(Some(7)));
        assert_eq!(count_value(20, 0, None), Ok(None));
        assert!(text(20, "abc").is_err());
        assert!(text(20, "99999999999999999999").is_err());
    }

    #[test]
    fn numerics_round_half_away_from_zero_and_floats_to_even() {
        assert_eq!(text(1700, "2.5"), Ok(Some(3)));
        assert_eq!(text(1700, "2.49"), Ok(Some(2)));
        assert_eq!(text(1700, "-2.5"), Ok(Some(-3)));
        assert_eq!(text(1700, "-0.4"), Ok(Some(0)));
        assert_eq!(text(1700, "1.5e1"), Ok(Some(15)));
        assert_eq!(text(1700, "25e-1"), Ok(Some(3)));
        assert_eq!(text(1700, "3e2"), Ok(Some(300)));
        assert_eq!(text(1700, ".5"), Ok(Some(1)));
        assert_eq!(text(1700, "5e-3"), Ok(Some(0)));
        assert_eq!(text(1700, "0.05e1"), Ok(Some(1)));
        assert_eq!(text(1700, "0e2000000000"), Ok(Some(0)));
        assert!(text(1700, "1e2000000000").is_err());
        assert!(text(1700, "NaN").is_err());
        assert!(text(1700, ".").is_err());
        assert_eq!(text(701, "2.5"), Ok(Some(2)));
        assert_eq!(text(701, "3.5"), Ok(Some(4)));
        assert_eq!(text(700, "-2.5"), Ok(Some(-2)));
        assert!(text(701, "Infinity").is_err());
        assert_eq!(
            count_value(701, 1, Some(&2.5f64.to_be_bytes())),
            Ok(Some(2))
        );
        let numeric_2_5 = binary::to_binary(1700, b"2.5").unwrap();
        assert_eq!(count_value(1700, 1, Some(&numeric_2_5)), Ok(Some(3)));
    }

    #[test]
    fn types_without_a_cast_fail_on_the_shards_and_others_are_refused_by_name() {
        assert_eq!(text(25, "3"), Ok(None));
        let e = text(790, "3").unwrap_err();
        assert!(e.contains("oid 790"), "{e}");
    }

    proptest::proptest! {
        /// Whatever a client sends as a LIMIT or OFFSET value, of any type and format, it is
        /// read or refused, never a panic; and an integer's text reads as itself.
        #[test]
        fn any_value_is_read_or_refused(
            oid in proptest::sample::select(vec![0u32, 20, 21, 23, 26, 700, 701, 1700, 705, 25, 790]),
            format in 0u16..3,
            v in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
            text in "[-+ ]?[0-9_]{0,12}(\\.[0-9]{0,6})?(e-?[0-9]{1,3})?",
            n in proptest::prelude::any::<i64>(),
        ) {
            let _ = count_value(oid, format, Some(&v));
            let _ = count_value(oid, 0, Some(text.as_bytes()));
            proptest::prop_assert_eq!(count_value(20, 0, Some(n.to_string().as_bytes())), Ok(Some(n)));
        }
    }
}
