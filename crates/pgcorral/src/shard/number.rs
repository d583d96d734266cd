//! An integer key written as another type of number (`7.0`, `9.5`, `7e0`, a numeric or float8
//! parameter, a cast), read and brought to the key as PostgreSQL does: stored by an assignment
//! cast (numeric rounds half away from zero, float half to even), matched by a comparison only
//! when the number is a whole one.

use super::key::{KeyType, Value};

/// 2^63 and 2^53 as float8: the ends of int8's range, and of the integers a float8 holds
/// exactly.
const TWO_63: f64 = (1u64 << 63) as f64;
const TWO_53: f64 = (1u64 << 53) as f64;

/// The type PostgreSQL gives a key's value before it meets the key column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Typed {
    /// A string literal or an untyped parameter: read by the column's own input function.
    Key,
    /// An integer of this width (an integer literal is `Int8` here: its range is checked
    /// against the key's).
    Int(KeyType),
    Numeric,
    /// A `numeric(p, s)` (or `numeric(p)`, of scale 0): rounded to its scale.
    NumericScaled(i32),
    Float8,
    Float4,
    /// Any other type: read as the key's own, as before this reading existed.
    Other,
}

impl Typed {
    /// The type a cast names (its last name: `pg_catalog.int4`, `float8`), with its modifiers.
    pub fn of_name(name: &str, typmods: &[i32]) -> Typed {
        match name {
            "int2" | "smallint" => Typed::Int(KeyType::Int2),
            "int4" | "integer" | "int" => Typed::Int(KeyType::Int4),
            "int8" | "bigint" => Typed::Int(KeyType::Int8),
            "numeric" | "decimal" => match typmods {
                [] => Typed::Numeric,
                [_] => Typed::NumericScaled(0),
                [_, s, ..] => Typed::NumericScaled(*s),
            },
            "float8" | "float" => Typed::Float8,
            "float4" | "real" => Typed::Float4,
            _ => Typed::Other,
        }
    }

    /// The type of a parameter PostgreSQL was told (Parse's type OIDs).
    pub fn of_oid(oid: u32) -> Typed {
        match oid {
            0 | 705 => Typed::Key,
            21 => Typed::Int(KeyType::Int2),
            23 => Typed::Int(KeyType::Int4),
            20 => Typed::Int(KeyType::Int8),
            1700 => Typed::Numeric,
            701 => Typed::Float8,
            700 => Typed::Float4,
            _ => Typed::Other,
        }
    }
}

/// A number on its way to the key.
#[derive(Debug, Clone, PartialEq)]
pub enum Number {
    Int(i64),
    Numeric(Decimal),
    Float(f64),
}

/// A numeric value as far as an integer key needs it: its sign, its whole part, its fraction's
/// first digit and whether any digit of the fraction is not zero.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decimal {
    neg: bool,
    /// `None`: beyond any integer key's range.
    whole: Option<u64>,
    first: u8,
    /// A digit after the fraction's first is not zero.
    beyond: bool,
    fraction: bool,
    /// NaN or an infinity.
    special: bool,
}

/// What a value is, met with an integer key.
#[derive(Debug, Clone, PartialEq)]
pub enum Meets {
    /// The one key it is stored as, or the only one it can equal.
    Key(Value),
    /// None: it equals no key, or PostgreSQL refuses it (on any shard alike).
    Nothing,
    /// Several keys, perhaps on several shards (an int8 compared as float8 beyond 2^53).
    Several,
}

impl Number {
    /// A value of type `typed` from its text form (a literal's contents, a text parameter).
    pub fn from_text(typed: Typed, text: &[u8]) -> Option<Number> {
        let s = std::str::from_utf8(text).ok()?;
        match typed {
            Typed::Int(ty) => match Value::from_text(ty, text).ok()? {
                Value::Int(v) => Some(Number::Int(v)),
                _ => None,
            },
            Typed::Numeric | Typed::NumericScaled(_) => decimal(s).map(Number::Numeric),
            Typed::Float8 => float(s).map(Number::Float),
            Typed::Float4 => float(s).map(|f| Number::Float(f64::from(f as f32))),
            Typed::Key | Typed::Other => None,
        }
    }

    /// A value of type `typed` from its binary form.
    pub fn from_binary(typed: Typed, b: &[u8]) -> Option<Number> {
        match typed {
            Typed::Int(_) => match Value::from_binary(KeyType::Int8, b).ok()? {
                Value::Int(v) => Some(Number::Int(v)),
                _ => None,
            },
            Typed::Float8 => Some(Number::Float(f64::from_be_bytes(b.try_into().ok()?))),
            Typed::Float4 => Some(Number::Float(f64::from(f32::from_be_bytes(
                b.try_into().ok()?,
            )))),
            Typed::Numeric | Typed::NumericScaled(_) => binary_numeric(b).map(Number::Numeric),
            Typed::Key | Typed::Other => None,
        }
    }

    /// This number cast to `to` (`None`: PostgreSQL refuses the cast, or this reading cannot
    /// follow it).
    pub fn cast(self, to: Typed) -> Option<Number> {
        Some(match to {
            Typed::Int(ty) => Number::Int(self.assigned(ty)?),
            Typed::Numeric => match self {
                Number::Int(v) => Number::Numeric(Decimal::of_int(v)),
                Number::Numeric(d) => Number::Numeric(d),
                // float8 → numeric goes by its 15 significant digits.
                Number::Float(f) => Number::Numeric(decimal(&format!("{f:.14e}"))?),
            },
            // Rounded to a whole number (scale 0); a larger scale keeps what matters here
            // only for a whole number (see `has_fraction`).
            Typed::NumericScaled(scale) => match self.cast(Typed::Numeric)? {
                Number::Numeric(d) if d.fraction && scale <= 0 => {
                    Number::Numeric(Decimal::of_int(Number::Numeric(d).assigned(KeyType::Int8)?))
                }
                n => n,
            },
            Typed::Float8 => Number::Float(self.float()?),
            Typed::Float4 => Number::Float(f64::from(self.float()? as f32)),
            Typed::Key | Typed::Other => return None,
        })
    }

    /// Not a whole number.
    pub fn has_fraction(&self) -> bool {
        match self {
            Number::Int(_) => false,
            Number::Numeric(d) => d.fraction,
            Number::Float(f) => f.fract() != 0.0,
        }
    }

    fn float(&self) -> Option<f64> {
        match self {
            Number::Int(v) => Some(*v as f64),
            Number::Float(f) => Some(*f),
            Number::Numeric(d) if d.special || d.whole.is_none() => None,
            // Only whole numbers and halves matter to an integer key after it.
            Number::Numeric(d) => {
                let f =
                    d.whole? as f64 + f64::from(d.first) / 10.0 + if d.beyond { 0.01 } else { 0.0 };
                Some(if d.neg { -f } else { f })
            }
        }
    }

    /// The integer of key type `ty` an assignment (or a cast) makes of this number: numeric
    /// rounds half away from zero, float half to even; `None` out of range (22003).
    pub fn assigned(&self, ty: KeyType) -> Option<i64> {
        let v = match self {
            Number::Int(v) => *v,
            Number::Numeric(d) if d.special => return None,
            Number::Numeric(d) => {
                let mag = i128::from(d.whole?) + i128::from(d.first >= 5);
                i64::try_from(if d.neg { -mag } else { mag }).ok()?
            }
            Number::Float(f) => {
                let r = f.round_ties_even();
                // PostgreSQL's FLOAT8_FITS_IN_INT64: [-2^63, 2^63).
                if !(-TWO_63..TWO_63).contains(&r) {
                    return None;
                }
                r as i64
            }
        };
        in_range(ty, v)
    }

    /// This number met with an integer key of type `ty`: stored in it (`assign`), or compared
    /// with it (`=`, where PostgreSQL casts the key to the number's type).
    pub fn meets(&self, ty: KeyType, assign: bool) -> Meets {
        let key = |v: Option<i64>| v.map_or(Meets::Nothing, |v| Meets::Key(Value::Int(v)));
        if assign {
            return key(self.assigned(ty));
        }
        match self {
            Number::Int(v) => key(in_range(ty, *v)),
            Number::Numeric(d) if d.special || d.fraction => Meets::Nothing,
            Number::Numeric(_) => key(self.assigned(ty)),
            Number::Float(f) if !f.is_finite() || f.fract() != 0.0 => Meets::Nothing,
            // Every int2 and int4 is a float8 exactly, and every int8 below 2^53.
            Number::Float(f) if f.abs() < TWO_53 => key(in_range(ty, *f as i64)),
            Number::Float(f) if ty == KeyType::Int8 && f.abs() <= TWO_63 => Meets::Several,
            Number::Float(_) => Meets::Nothing,
        }
    }
}

impl Decimal {
    fn of_int(v: i64) -> Decimal {
        Decimal {
            neg: v < 0,
            whole: Some(v.unsigned_abs()),
            first: 0,
            beyond: false,
            fraction: false,
            special: false,
        }
    }
}

fn in_range(ty: KeyType, v: i64) -> Option<i64> {
    match Value::from_int(ty, v) {
        Ok(Value::Int(v)) => Some(v),
        _ => None,
    }
}

/// PostgreSQL's float input (strtod): surrounding whitespace, NaN, Infinity and inf allowed.
fn float(s: &str) -> Option<f64> {
    let s = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let f: f64 = s.parse().ok()?;
    // Rust reads "1e400" as infinity; PostgreSQL refuses it (out of range).
    let named = s
        .trim_start_matches(['+', '-'])
        .starts_with(['i', 'I', 'n', 'N']);
    (f.is_finite() || named).then_some(f)
}

/// PostgreSQL's numeric input: whitespace, a sign, digits with a point and an exponent (`_`
/// between digits, as 16 and later take it), or NaN and the infinities.
fn decimal(s: &str) -> Option<Decimal> {
    let s = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if ["nan", "infinity", "inf"]
        .iter()
        .any(|w| body.eq_ignore_ascii_case(w))
    {
        return Some(Decimal {
            neg,
            whole: None,
            first: 0,
            beyond: false,
            fraction: false,
            special: true,
        });
    }
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i64>().ok()?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_ok = |p: &str| {
        !p.starts_with('_')
            && !p.ends_with('_')
            && !p.contains("__")
            && p.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    };
    if !digits_ok(int) || !digits_ok(frac) || (int.is_empty() && frac.is_empty()) {
        return None;
    }
    let digits: Vec<u8> = int
        .bytes()
        .chain(frac.bytes())
        .filter(|&b| b != b'_')
        .map(|b| b - b'0')
        .collect();
    let point = int.bytes().filter(|&b| b != b'_').count() as i64 + exp.clamp(-100_000, 100_000);
    Some(from_digits(neg, &digits, point))
}

/// A decimal from its digits and the number of them before the point (may be negative or
/// beyond the digits).
fn from_digits(neg: bool, digits: &[u8], point: i64) -> Decimal {
    let mut whole: Option<u64> = Some(0);
    let whole_len = point.clamp(0, i64::MAX);
    for i in 0..whole_len {
        let d = digits.get(i as usize).copied().unwrap_or(0);
        whole = whole
            .and_then(|w| w.checked_mul(10))
            .and_then(|w| w.checked_add(u64::from(d)));
        if whole.is_none() {
            break;
        }
    }
    let from = usize::try_from(point).unwrap_or(0).min(digits.len());
    let zeros = usize::try_from(-point).unwrap_or(0);
    let mut fraction = std::iter::repeat_n(0, zeros).chain(digits[from..].iter().copied());
    let first = fraction.next().unwrap_or(0);
    let beyond = fraction.any(|d| d != 0);
    Decimal {
        neg,
        whole,
        first,
        beyond,
        fraction: first != 0 || beyond,
        special: false,
    }
}

/// numeric's binary form: digit count, weight, sign, scale, then base-10000 digits.
fn binary_numeric(b: &[u8]) -> Option<Decimal> {
    let word = |i: usize| Some(i16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]));
    let (n, weight, sign) = (word(0)?, word(2)?, word(4)? as u16);
    if b.len() != 8 + 2 * usize::try_from(n).ok()? {
        return None;
    }
    if sign == 0xC000 || sign == 0xD000 || sign == 0xF000 {
        return Some(Decimal {
            neg: sign == 0xF000,
            whole: None,
            first: 0,
            beyond: false,
            fraction: false,
            special: true,
        });
    }
    let mut digits = Vec::with_capacity(4 * n as usize);
    for i in 0..n as usize {
        let d = word(8 + 2 * i)?;
        if !(0..10000).contains(&d) {
            return None;
        }
        digits.extend([d / 1000, d / 100 % 10, d / 10 % 10, d % 10].map(|x| x as u8));
    }
    Some(from_digits(
        sign == 0x4000,
        &digits,
        4 * (i64::from(weight) + 1),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meets(typed: Typed, text: &str, ty: KeyType, assign: bool) -> Meets {
        Number::from_text(typed, text.as_bytes()).map_or(Meets::Nothing, |n| n.meets(ty, assign))
    }

    fn key(v: i64) -> Meets {
        Meets::Key(Value::Int(v))
    }

    /// Checked with PostgreSQL 15: `INSERT INTO t (int4 col) VALUES (9.5), (-9.5),
    /// (2.5::float8), (3.5::float8), (7e0)` stores 10, -10, 2, 4, 7.
    #[test]
    fn an_assignment_stores_what_postgresql_stores() {
        let i4 = KeyType::Int4;
        for (typed, text, want) in [
            (Typed::Numeric, "9.0", key(9)),
            (Typed::Numeric, "9.5", key(10)),
            (Typed::Numeric, "-9.5", key(-10)),
            (Typed::Numeric, "9.49999", key(9)),
            (Typed::Numeric, "7e0", key(7)),
            (Typed::Numeric, "0.5e1", key(5)),
            (Typed::Numeric, "75e-1", key(8)),
            (Typed::Numeric, ".5", key(1)),
            (Typed::Numeric, "2147483647.4", key(2147483647)),
            (Typed::Numeric, "2147483647.5", Meets::Nothing),
            (Typed::Numeric, "NaN", Meets::Nothing),
            (Typed::Numeric, "1e30", Meets::Nothing),
            (Typed::Float8, "2.5", key(2)),
            (Typed::Float8, "3.5", key(4)),
            (Typed::Float8, "-2.5", key(-2)),
            (Typed::Float8, " 7e0 ", key(7)),
            (Typed::Float8, "Infinity", Meets::Nothing),
            (Typed::Float8, "1e400", Meets::Nothing),
            (Typed::Float4, "16777217", key(16777216)),
        ] {
            assert_eq!(meets(typed, text, i4, true), want, "{typed:?} {text}");
        }
    }

    /// `int_col = 7.0` is `int_col::numeric = 7.0`: only 7 equals it, and nothing equals 7.5.
    #[test]
    fn a_comparison_matches_only_a_whole_number() {
        for (typed, text, ty, want) in [
            (Typed::Numeric, "7.0", KeyType::Int4, key(7)),
            (Typed::Numeric, "7.5", KeyType::Int4, Meets::Nothing),
            (Typed::Numeric, "-7.000", KeyType::Int2, key(-7)),
            (Typed::Numeric, "70000", KeyType::Int2, Meets::Nothing),
            (Typed::Numeric, "0.7e1", KeyType::Int8, key(7)),
            (
                Typed::Numeric,
                "7.0000000000000000000001",
                KeyType::Int8,
                Meets::Nothing,
            ),
            (Typed::Float8, "7.0", KeyType::Int4, key(7)),
            (Typed::Float8, "7.5", KeyType::Int8, Meets::Nothing),
            (Typed::Float8, "NaN", KeyType::Int8, Meets::Nothing),
            (
                Typed::Float8,
                "9007199254740993",
                KeyType::Int8,
                Meets::Several,
            ),
            (
                Typed::Float8,
                "9007199254740993",
                KeyType::Int4,
                Meets::Nothing,
            ),
            (Typed::Float8, "1e30", KeyType::Int8, Meets::Nothing),
        ] {
            assert_eq!(
                meets(typed, text, ty, false),
                want,
                "{typed:?} {text} {ty:?}"
            );
        }
    }

    #[test]
    fn numeric_input_forms() {
        for bad in [
            "", ".", "e5", "1e", "1..2", "_1", "1__0", "0x1F", "1 2", "--1",
        ] {
            assert_eq!(decimal(bad), None, "{bad:?}");
        }
        let d = decimal(" +1_000.50 ").unwrap();
        assert_eq!((d.whole, d.first, d.fraction), (Some(1000), 5, true));
        let d = decimal("12.3e-5").unwrap();
        assert_eq!((d.whole, d.first, d.fraction), (Some(0), 0, true));
    }

    /// numeric's binary form, as a driver sends it: 7.5 is one digit of weight 0 (7) and one
    /// of weight -1 (5000); 123456789 is 1, 2345, 6789 of weight 2.
    #[test]
    fn binary_numeric() {
        let bin = |n: i16, w: i16, sign: u16, dscale: i16, digits: &[i16]| {
            let mut b = Vec::new();
            for x in [n, w, sign as i16, dscale].iter().chain(digits) {
                b.extend_from_slice(&x.to_be_bytes());
            }
            b
        };
        let n = |b: Vec<u8>| Number::from_binary(Typed::Numeric, &b).unwrap();
        assert_eq!(
            n(bin(2, 0, 0, 1, &[7, 5000])).meets(KeyType::Int4, true),
            key(8)
        );
        assert_eq!(
            n(bin(2, 0, 0x4000, 1, &[7, 5000])).meets(KeyType::Int4, false),
            Meets::Nothing
        );
        assert_eq!(
            n(bin(3, 2, 0x4000, 0, &[1, 2345, 6789])).meets(KeyType::Int8, false),
            key(-123456789)
        );
        assert_eq!(
            n(bin(1, 1, 0, 0, &[7])).meets(KeyType::Int8, false),
            key(70000)
        );
        assert_eq!(n(bin(0, 0, 0, 0, &[])).meets(KeyType::Int8, false), key(0));
        assert_eq!(
            Number::from_binary(Typed::Float8, &7.0f64.to_be_bytes())
                .unwrap()
                .meets(KeyType::Int4, false),
            key(7)
        );
    }

    #[test]
    fn casts() {
        let num = Number::from_text(Typed::Numeric, b"7.5").unwrap();
        assert_eq!(
            num.clone().cast(Typed::Int(KeyType::Int4)),
            Some(Number::Int(8))
        );
        assert_eq!(
            num.cast(Typed::Float8)
                .map(|f| f.meets(KeyType::Int4, true)),
            Some(key(8))
        );
        let f = Number::from_text(Typed::Float8, b"2.5").unwrap();
        assert_eq!(
            f.cast(Typed::Numeric).map(|n| n.meets(KeyType::Int4, true)),
            Some(key(3))
        );
    }
}
