//! avg, variance and standard deviation of integers and numeric finished by pgcorral from the
//! shards' counts and sums, in exact decimal arithmetic, to the display scale and rounding of
//! PostgreSQL's numeric.c (`select_div_scale`, a division rounded half away from zero, a square
//! root rounded the same way).

use std::cmp::Ordering;

use super::nat::Nat;
use super::Spread;

/// Digits of a numeric value pgcorral takes into this arithmetic at most; beyond them the read is
/// refused rather than held up (PostgreSQL allows 147,455).
const MAX_DIGITS: usize = 4000;

/// PostgreSQL's NUMERIC_MIN_SIG_DIGITS: a quotient has at least this many significant digits.
const MIN_SIG_DIGITS: i64 = 16;

/// PostgreSQL's NUMERIC_MAX_DISPLAY_SCALE: a quotient's scale at most.
const MAX_DISPLAY_SCALE: i64 = 1000;

/// Decimal digits per digit of PostgreSQL's numeric (base 10,000): `select_div_scale` estimates
/// a quotient's weight in those digits.
const DEC_DIGITS: i64 = 4;

/// Why an aggregate could not be finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// A shard's value is not a number as PostgreSQL prints one.
    Unreadable,
    /// A value has more than [`MAX_DIGITS`] digits.
    TooLong,
}

/// `avg` of integers or numeric from the merged `sum` (NULL when no row counted) and `count` of
/// its argument: NULL for no rows, the sum itself when it is NaN or an infinity, else the sum
/// divided by the count as `numeric_div` does.
pub fn avg(sum: Option<&[u8]>, count: &[u8]) -> Result<Option<Vec<u8>>, Unfinished> {
    let n = natural(count)?;
    let Some(sum) = sum else { return Ok(None) };
    if n.is_zero() {
        return Ok(None);
    }
    let sum = match read(sum)? {
        Number::Special(s) => return Ok(Some(s.to_vec())),
        Number::Finite(d) => d,
    };
    let count = Dec {
        neg: false,
        mag: n,
        scale: 0,
    };
    let scale = div_scale(&sum, &count);
    Ok(Some(divide(&sum, &count, scale).text()))
}

/// A variance or standard deviation of integers or numeric from the merged `count`, `sum` and
/// sum of squares of its argument, as `numeric_stddev_internal` computes it: NULL for no rows (or
/// one, for the sample statistics), NaN when any value was NaN or infinite, 0 when
/// `N·Σx² − (Σx)²` is not positive, else that divided by `N·(N−1)` (or `N²`) and, for a
/// standard deviation, its square root, both to the quotient's scale.
pub fn spread(
    stat: Spread,
    count: &[u8],
    sum: Option<&[u8]>,
    squares: Option<&[u8]>,
) -> Result<Option<Vec<u8>>, Unfinished> {
    let n = natural(count)?;
    let sample = matches!(stat, Spread::VarSamp | Spread::StddevSamp);
    let one = Nat::from_u128(1);
    if n.is_zero() || (sample && n.compare(&one) != Ordering::Greater) {
        return Ok(None);
    }
    let x = match read(sum.ok_or(Unfinished::Unreadable)?)? {
        Number::Special(_) => return Ok(Some(b"NaN".to_vec())),
        Number::Finite(d) => d,
    };
    let Number::Finite(x2) = read(squares.ok_or(Unfinished::Unreadable)?)? else {
        return Err(Unfinished::Unreadable);
    };
    // Σx² has twice the scale of Σx (each square is exact); any other scale means the squares
    // were rounded, which PostgreSQL's own sum of squares is not.
    if x2.neg || x2.scale != 2 * x.scale {
        return Err(Unfinished::Unreadable);
    }
    let times_n = x2.mag.mul(&n);
    let squared = x.mag.mul(&x.mag);
    if times_n.compare(&squared) != Ordering::Greater {
        return Ok(Some(b"0".to_vec()));
    }
    let numerator = Dec {
        neg: false,
        mag: times_n.sub(&squared),
        scale: 2 * x.scale,
    };
    let other = match sample {
        true => n.sub(&one),
        false => n.clone(),
    };
    let denominator = Dec {
        neg: false,
        mag: n.mul(&other),
        scale: 0,
    };
    let scale = div_scale(&numerator, &denominator);
    let variance = divide(&numerator, &denominator, scale);
    Ok(Some(match stat {
        Spread::VarSamp | Spread::VarPop => variance.text(),
        Spread::StddevSamp | Spread::StddevPop => square_root(&variance, scale).text(),
    }))
}

/// A count: a non-negative integer.
fn natural(text: &[u8]) -> Result<Nat, Unfinished> {
    match read(text)? {
        Number::Finite(d) if !d.neg && d.scale == 0 => Ok(d.mag),
        _ => Err(Unfinished::Unreadable),
    }
}

/// A number as PostgreSQL prints an integer or a numeric.
enum Number {
    /// NaN, Infinity or -Infinity, as printed.
    Special(&'static [u8]),
    Finite(Dec),
}

/// A finite decimal: `±mag / 10^scale`, `scale` being its display scale.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dec {
    neg: bool,
    mag: Nat,
    scale: usize,
}

fn read(text: &[u8]) -> Result<Number, Unfinished> {
    match text {
        b"NaN" => return Ok(Number::Special(b"NaN")),
        b"Infinity" => return Ok(Number::Special(b"Infinity")),
        b"-Infinity" => return Ok(Number::Special(b"-Infinity")),
        _ => {}
    }
    if text.len() > MAX_DIGITS {
        return Err(Unfinished::TooLong);
    }
    let (neg, unsigned) = match text.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = match unsigned.iter().position(|&c| c == b'.') {
        Some(dot) if dot + 1 < unsigned.len() => (&unsigned[..dot], &unsigned[dot + 1..]),
        Some(_) => return Err(Unfinished::Unreadable),
        None => (unsigned, &b""[..]),
    };
    let digits = |d: &[u8]| d.iter().all(u8::is_ascii_digit);
    if whole.is_empty() || !digits(whole) || !digits(fraction) {
        return Err(Unfinished::Unreadable);
    }
    let mag = Nat::from_digits(&[whole, fraction].concat());
    Ok(Number::Finite(Dec {
        neg: neg && !mag.is_zero(),
        mag,
        scale: fraction.len(),
    }))
}

impl Dec {
    /// As PostgreSQL prints it: `scale` digits after the point, no sign on zero.
    fn text(&self) -> Vec<u8> {
        let digits = self.mag.digits();
        let mut out = String::with_capacity(digits.len() + self.scale + 3);
        if self.neg && !self.mag.is_zero() {
            out.push('-');
        }
        match digits.len().checked_sub(self.scale) {
            Some(whole) if whole > 0 => {
                out.push_str(&digits[..whole]);
                if self.scale > 0 {
                    out.push('.');
                    out.push_str(&digits[whole..]);
                }
            }
            _ => {
                out.push('0');
                if self.scale > 0 {
                    out.push('.');
                    out.extend(std::iter::repeat_n('0', self.scale - digits.len()));
                    out.push_str(&digits);
                }
            }
        }
        out.into_bytes()
    }

    /// The weight and value of the first non-zero digit in base 10,000 (digits grouped by four
    /// from the point), `(0, 0)` for zero: what `select_div_scale` reads of a value.
    fn first_digit(&self) -> (i64, u32) {
        if self.mag.is_zero() {
            return (0, 0);
        }
        let digits = self.mag.digits();
        // The power of ten of the first digit.
        let top = digits.len() as i64 - 1 - self.scale as i64;
        let weight = top.div_euclid(DEC_DIGITS);
        let take = (top - DEC_DIGITS * weight + 1) as usize;
        let value = (0..take).fold(0, |v, i| {
            v * 10 + digits.as_bytes().get(i).map_or(0, |&c| u32::from(c - b'0'))
        });
        (weight, value)
    }
}

/// PostgreSQL's `select_div_scale`: at least 16 significant digits in the quotient, and no fewer
/// digits after the point than either operand has, up to 1,000.
fn div_scale(dividend: &Dec, divisor: &Dec) -> usize {
    let (w1, d1) = dividend.first_digit();
    let (w2, d2) = divisor.first_digit();
    // Equal first digits: taken as a dividend smaller than the divisor.
    let weight = w1 - w2 - i64::from(d1 <= d2);
    let scale = (MIN_SIG_DIGITS - weight * DEC_DIGITS)
        .max(dividend.scale as i64)
        .max(divisor.scale as i64)
        .clamp(0, MAX_DISPLAY_SCALE);
    scale as usize
}

/// `dividend / divisor` (not zero) rounded half away from zero to `scale` digits after the point.
fn divide(dividend: &Dec, divisor: &Dec, scale: usize) -> Dec {
    // |a/b|·10^scale = A·10^(sb + scale) / (B·10^sa), and rounding half up is the floor of
    // (floor(2q) + 1) / 2.
    let numerator = dividend
        .mag
        .times_ten_to(divisor.scale + scale)
        .mul_small(2);
    let denominator = divisor.mag.times_ten_to(dividend.scale);
    let twice = numerator.div_rem(&denominator).0;
    let mag = twice.add(&Nat::from_u128(1)).div_rem_small(2).0;
    Dec {
        neg: dividend.neg != divisor.neg && !mag.is_zero(),
        mag,
        scale,
    }
}

/// The square root of `v` (not negative) rounded half up to `scale` digits: the exact root's
/// floor with one more digit, rounded (which is what PostgreSQL's `sqrt_var` rounds).
fn square_root(v: &Dec, scale: usize) -> Dec {
    let shift = 2 * scale + 2;
    let radicand = match shift.checked_sub(v.scale) {
        Some(more) => v.mag.times_ten_to(more),
        None => {
            v.mag
                .div_rem(&Nat::from_u128(1).times_ten_to(v.scale - shift))
                .0
        }
    };
    let (tenths, last) = radicand.isqrt().div_rem_small(10);
    let mag = match last >= 5 {
        true => tenths.add(&Nat::from_u128(1)),
        false => tenths,
    };
    Dec {
        neg: false,
        mag,
        scale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: Result<Option<Vec<u8>>, Unfinished>) -> Option<String> {
        r.unwrap().map(|v| String::from_utf8(v).unwrap())
    }

    /// Confirmed on PostgreSQL 15: `SELECT avg(x)` over the values.
    #[test]
    fn averages_print_as_postgresql_prints_them() {
        let cases: &[(&str, &str, &str)] = &[
            ("7", "3", "2.3333333333333333"),
            ("3.625", "2", "1.8125000000000000"),
            ("10", "4", "2.5000000000000000"),
            ("-7", "3", "-2.3333333333333333"),
            ("0", "5", "0.00000000000000000000"),
            ("0.00", "2", "0.00000000000000000000"),
            ("123456789", "1", "123456789.000000000000"),
            ("100000", "3", "33333.333333333333"),
            ("-0.000001", "3", "-0.000000333333333333333333"),
            ("9999", "9999", "1.00000000000000000000"),
            ("10000", "10000", "1.00000000000000000000"),
            ("5", "10000", "0.00050000000000000000"),
            ("NaN", "3", "NaN"),
            ("-Infinity", "2", "-Infinity"),
            ("-0.5", "3", "-0.16666666666666666667"),
            ("1", "3", "0.33333333333333333333"),
        ];
        for &(sum, count, want) in cases {
            let got = text(avg(Some(sum.as_bytes()), count.as_bytes()));
            assert_eq!(got.as_deref(), Some(want), "avg of sum {sum} count {count}");
        }
        assert_eq!(text(avg(None, b"0")), None);
        assert_eq!(avg(Some(b"1."), b"1"), Err(Unfinished::Unreadable));
        assert_eq!(avg(Some(b"1"), b"-1"), Err(Unfinished::Unreadable));
        let long = "9".repeat(MAX_DIGITS + 1);
        assert_eq!(avg(Some(long.as_bytes()), b"1"), Err(Unfinished::TooLong));
    }

    /// Confirmed on PostgreSQL 15: the four statistics of the values 1, 2, 4 (count 3, sum 7,
    /// squares 21), of 1.5 and 2.25 (2, 3.75, 7.3125), of one value 5 and of 1, 1.
    #[test]
    fn spreads_print_as_postgresql_prints_them() {
        let all = [
            Spread::VarSamp,
            Spread::StddevSamp,
            Spread::VarPop,
            Spread::StddevPop,
        ];
        let cases: &[(&str, &str, &str, [Option<&str>; 4])] = &[
            (
                "3",
                "7",
                "21",
                [
                    Some("2.3333333333333333"),
                    Some("1.5275252316519467"),
                    Some("1.5555555555555556"),
                    Some("1.2472191289246471"),
                ],
            ),
            (
                "2",
                "3.75",
                "7.3125",
                [
                    Some("0.28125000000000000000"),
                    Some("0.53033008588991064330"),
                    Some("0.14062500000000000000"),
                    Some("0.37500000000000000000"),
                ],
            ),
            ("1", "5", "25", [None, None, Some("0"), Some("0")]),
            ("2", "2", "2", [Some("0"), Some("0"), Some("0"), Some("0")]),
            ("0", "", "", [None, None, None, None]),
            (
                "3",
                "NaN",
                "NaN",
                [Some("NaN"), Some("NaN"), Some("NaN"), Some("NaN")],
            ),
        ];
        for (count, sum, squares, want) in cases {
            let present = |s: &'static str| (!s.is_empty()).then_some(s.as_bytes());
            for (stat, want) in all.iter().zip(want) {
                let got = text(spread(
                    *stat,
                    count.as_bytes(),
                    present(sum),
                    present(squares),
                ));
                assert_eq!(got.as_deref(), *want, "{stat:?} of {count} {sum} {squares}");
            }
        }
        // Confirmed on PostgreSQL 15: seven values of 44 digits before the point and up to 30
        // after it (one of 6,500 random sets checked alike, integers of each width among them).
        let (count, sum, squares) = (
            "7",
            "76625872285152883847725798326640630210598628.75387594416212893592633",
            "2935367215759671303134664373478805060114772051718638968273675817369301940220052399693020.2280717671572901899879202589902241363291872689",
        );
        let want = [
            "349429671591836625817549390960168492583208220332668175468920099835883720503460483001312.0360853184382980945356266889203791651364077051",
            "18693038051420015921797498982301865368477980.5924436433846104142635239545571873377463048754",
            "299511147078717107843613763680144422214178474570858436116217228430757474717251842572553.1737874158042555096019657333603249986883494615",
            "17306390353817780099044117504130117767585356.1334198267779722434952549618441289327919916740",
        ];
        for (stat, want) in all.iter().zip(want) {
            let got = text(spread(
                *stat,
                count.as_bytes(),
                Some(sum.as_bytes()),
                Some(squares.as_bytes()),
            ));
            assert_eq!(got.as_deref(), Some(want), "{stat:?}");
        }
        let got = text(avg(Some(sum.as_bytes()), count.as_bytes()));
        assert_eq!(
            got.as_deref(),
            Some("10946553183593269121103685475234375744371232.67912513488030413370376")
        );
        // Squares rounded to another scale than twice the sum's are refused.
        let e = spread(Spread::VarPop, b"2", Some(b"1.5"), Some(b"2.250"));
        assert_eq!(e, Err(Unfinished::Unreadable));
    }

    #[test]
    fn division_scales_follow_select_div_scale() {
        let dec = |s: &str| match read(s.as_bytes()) {
            Ok(Number::Finite(d)) => d,
            _ => panic!("{s}"),
        };
        // The first base-10000 digits: 12345.678 is 1|2345.6780, 0.005 is 0.0050.
        assert_eq!(dec("12345.678").first_digit(), (1, 1));
        assert_eq!(dec("0.005").first_digit(), (-1, 50));
        assert_eq!(dec("0.00005").first_digit(), (-2, 5000));
        assert_eq!(dec("9999").first_digit(), (0, 9999));
        assert_eq!(dec("0.000").first_digit(), (0, 0));
        assert_eq!(div_scale(&dec("1"), &dec("3")), 20);
        assert_eq!(div_scale(&dec("7"), &dec("3")), 16);
        assert_eq!(div_scale(&dec("1.123456789012345678901"), &dec("3")), 21);
        let tiny = format!("0.{}1", "0".repeat(1200));
        assert_eq!(div_scale(&dec(&tiny), &dec("3")), 1000);
    }
}
