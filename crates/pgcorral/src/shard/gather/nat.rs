//! Natural numbers of any size in base 10⁹: the exact arithmetic (products, long division,
//! square roots) behind the aggregates pgcorral finishes in [`super::numeric`].

use std::cmp::Ordering;
use std::fmt::Write;

/// Base of a [`Nat`]'s limbs.
const BASE: u64 = 1_000_000_000;

/// A natural number in base 10⁹, least significant limb first, no zero limbs at the top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Nat(Vec<u32>);

impl Nat {
    fn trimmed(mut limbs: Vec<u32>) -> Nat {
        while limbs.last() == Some(&0) {
            limbs.pop();
        }
        Nat(limbs)
    }

    pub(super) fn from_u128(mut v: u128) -> Nat {
        let mut limbs = Vec::new();
        while v > 0 {
            limbs.push((v % u128::from(BASE)) as u32);
            v /= u128::from(BASE);
        }
        Nat(limbs)
    }

    /// From ASCII decimal digits, most significant first.
    pub(super) fn from_digits(digits: &[u8]) -> Nat {
        let mut limbs = Vec::with_capacity(digits.len() / 9 + 1);
        let mut end = digits.len();
        while end > 0 {
            let start = end.saturating_sub(9);
            let limb = digits[start..end]
                .iter()
                .fold(0u32, |v, &c| v * 10 + u32::from(c - b'0'));
            limbs.push(limb);
            end = start;
        }
        Nat::trimmed(limbs)
    }

    /// Decimal digits, most significant first ("0" for zero).
    pub(super) fn digits(&self) -> String {
        let Some((top, rest)) = self.0.split_last() else {
            return "0".to_string();
        };
        let mut out = top.to_string();
        for limb in rest.iter().rev() {
            let _ = write!(out, "{limb:09}");
        }
        out
    }

    pub(super) fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn compare(&self, other: &Nat) -> Ordering {
        let (a, b) = (&self.0, &other.0);
        a.len()
            .cmp(&b.len())
            .then_with(|| a.iter().rev().cmp(b.iter().rev()))
    }

    pub(super) fn add(&self, other: &Nat) -> Nat {
        let len = self.0.len().max(other.0.len());
        let mut out = Vec::with_capacity(len + 1);
        let mut carry = 0;
        for i in 0..len {
            let limb = |n: &Nat| u64::from(n.0.get(i).copied().unwrap_or(0));
            let s = limb(self) + limb(other) + carry;
            out.push((s % BASE) as u32);
            carry = s / BASE;
        }
        out.push(carry as u32);
        Nat::trimmed(out)
    }

    /// `self − other`, for `self ≥ other`.
    pub(super) fn sub(&self, other: &Nat) -> Nat {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0;
        for (i, &a) in self.0.iter().enumerate() {
            let take = u64::from(other.0.get(i).copied().unwrap_or(0)) + borrow;
            let a = u64::from(a);
            let (limb, b) = match a >= take {
                true => (a - take, 0),
                false => (a + BASE - take, 1),
            };
            out.push(limb as u32);
            borrow = b;
        }
        Nat::trimmed(out)
    }

    pub(super) fn mul(&self, other: &Nat) -> Nat {
        if self.is_zero() || other.is_zero() {
            return Nat(Vec::new());
        }
        let mut out = vec![0u32; self.0.len() + other.0.len()];
        for (i, &a) in self.0.iter().enumerate() {
            let mut carry = 0u64;
            for (j, &b) in other.0.iter().enumerate() {
                let cur = u64::from(out[i + j]) + u64::from(a) * u64::from(b) + carry;
                out[i + j] = (cur % BASE) as u32;
                carry = cur / BASE;
            }
            let mut k = i + other.0.len();
            while carry > 0 {
                let cur = u64::from(out[k]) + carry;
                out[k] = (cur % BASE) as u32;
                carry = cur / BASE;
                k += 1;
            }
        }
        Nat::trimmed(out)
    }

    pub(super) fn mul_small(&self, m: u32) -> Nat {
        let mut out = Vec::with_capacity(self.0.len() + 1);
        let mut carry = 0u64;
        for &a in &self.0 {
            let cur = u64::from(a) * u64::from(m) + carry;
            out.push((cur % BASE) as u32);
            carry = cur / BASE;
        }
        out.push(carry as u32);
        Nat::trimmed(out)
    }

    /// `self · 10^k`.
    pub(super) fn times_ten_to(&self, k: usize) -> Nat {
        if self.is_zero() {
            return self.clone();
        }
        let shifted = self.mul_small(10u32.pow((k % 9) as u32));
        let mut limbs = vec![0; k / 9];
        limbs.extend_from_slice(&shifted.0);
        Nat(limbs)
    }

    /// Quotient and remainder of a division by `d` (not zero).
    pub(super) fn div_rem_small(&self, d: u32) -> (Nat, u32) {
        let d = u64::from(d.max(1));
        let mut out = vec![0u32; self.0.len()];
        let mut rem = 0u64;
        for (i, &a) in self.0.iter().enumerate().rev() {
            let cur = rem * BASE + u64::from(a);
            out[i] = (cur / d) as u32;
            rem = cur % d;
        }
        (Nat::trimmed(out), rem as u32)
    }

    /// Quotient and remainder of a division by `divisor` (zero divides as one): long division
    /// in base 10⁹ with each quotient digit estimated from the top two limbs and corrected
    /// (Knuth's algorithm D).
    pub(super) fn div_rem(&self, divisor: &Nat) -> (Nat, Nat) {
        let v = &divisor.0;
        match v.len() {
            0 => return (self.clone(), Nat(Vec::new())),
            1 => {
                let (q, r) = self.div_rem_small(v[0]);
                return (q, Nat::from_u128(u128::from(r)));
            }
            _ => {}
        }
        if self.compare(divisor) == Ordering::Less {
            return (Nat(Vec::new()), self.clone());
        }
        let n = v.len();
        let m = self.0.len() - n;
        // Scaled so that the divisor's top limb is at least BASE / 2, which bounds the estimate.
        let scale = (BASE / (u64::from(v[n - 1]) + 1)) as u32;
        let vn = divisor.mul_small(scale).0;
        let mut un = self.mul_small(scale).0;
        un.resize(self.0.len() + 1, 0);
        let (top, next) = (u64::from(vn[n - 1]), u64::from(vn[n - 2]));
        let mut q = vec![0u32; m + 1];
        for j in (0..=m).rev() {
            let num = u64::from(un[j + n]) * BASE + u64::from(un[j + n - 1]);
            let (mut qhat, mut rhat) = (num / top, num % top);
            while qhat >= BASE || qhat * next > rhat * BASE + u64::from(un[j + n - 2]) {
                qhat -= 1;
                rhat += top;
                if rhat >= BASE {
                    break;
                }
            }
            // un[j..=j+n] -= qhat · vn
            let mut carry = 0u64;
            let mut borrow = 0u64;
            for i in 0..=n {
                let p = match i < n {
                    true => qhat * u64::from(vn[i]) + carry,
                    false => carry,
                };
                carry = p / BASE;
                let take = p % BASE + borrow;
                let have = u64::from(un[i + j]);
                let (limb, b) = match have >= take {
                    true => (have - take, 0),
                    false => (have + BASE - take, 1),
                };
                un[i + j] = limb as u32;
                borrow = b;
            }
            if borrow > 0 {
                // One too many: add the divisor back (the carry out cancels the borrow).
                qhat -= 1;
                let mut carry = 0u64;
                for i in 0..=n {
                    let s =
                        u64::from(un[i + j]) + u64::from(vn.get(i).copied().unwrap_or(0)) + carry;
                    un[i + j] = (s % BASE) as u32;
                    carry = s / BASE;
                }
            }
            q[j] = qhat as u32;
        }
        un.truncate(n);
        let rem = Nat::trimmed(un).div_rem_small(scale).0;
        (Nat::trimmed(q), rem)
    }

    pub(super) fn digit_count(&self) -> usize {
        match self.0.split_last() {
            None => 0,
            Some((top, rest)) => rest.len() * 9 + top.to_string().len(),
        }
    }

    /// The floor of the square root, by Newton's iteration from above.
    pub(super) fn isqrt(&self) -> Nat {
        if self.is_zero() {
            return self.clone();
        }
        // 10^ceil(digits / 2) is at least the root.
        let mut x = Nat::from_u128(1).times_ten_to(self.digit_count().div_ceil(2));
        loop {
            let y = x.add(&self.div_rem(&x).0).div_rem_small(2).0;
            if y.compare(&x) != Ordering::Less {
                return x;
            }
            x = y;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nat(s: &str) -> Nat {
        Nat::from_digits(s.as_bytes())
    }

    /// A fixed pseudo-random sequence (xorshift).
    fn rng(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn naturals_divide_exactly() {
        let mut next = rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..3000 {
            // Numbers of 1 to 60 digits, many with runs of nines and zeros (where an estimate
            // of a quotient digit is most often wrong).
            let mut number = |len: usize| {
                let fill = match next() % 4 {
                    0 => b'9',
                    1 => b'0',
                    _ => b'x',
                };
                let digits: Vec<u8> = (0..len)
                    .map(|i| match fill {
                        b'x' => b'0' + (next() % 10) as u8,
                        _ if i == 0 => b'1' + (next() % 9) as u8,
                        f => f,
                    })
                    .collect();
                Nat::from_digits(&digits)
            };
            let a = number(1 + (round % 60));
            let b = number(1 + (round * 7 % 40));
            if b.is_zero() {
                continue;
            }
            let (q, r) = a.div_rem(&b);
            assert_eq!(r.compare(&b), Ordering::Less, "{a:?} / {b:?}");
            assert_eq!(q.mul(&b).add(&r), a, "{a:?} / {b:?}");
            let s = a.isqrt();
            let above = s.add(&Nat::from_u128(1));
            assert_ne!(s.mul(&s).compare(&a), Ordering::Greater, "{a:?}");
            assert_eq!(above.mul(&above).compare(&a), Ordering::Greater, "{a:?}");
        }
        // Against u128, on numbers small enough for it.
        for _ in 0..3000 {
            let (a, b) = (
                u128::from(next()) << 40 | u128::from(next()),
                u128::from(next() >> (next() % 64)).max(1),
            );
            let (q, r) = Nat::from_u128(a).div_rem(&Nat::from_u128(b));
            assert_eq!((q, r), (Nat::from_u128(a / b), Nat::from_u128(a % b)));
        }
        assert_eq!(nat("12345678901234567890").digits(), "12345678901234567890");
        assert_eq!(nat("000").digits(), "0");
        assert_eq!(nat("1000000000").sub(&nat("1")).digits(), "999999999");
    }
}
