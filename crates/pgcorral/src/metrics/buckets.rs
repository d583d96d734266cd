//! Folds a pool's fine latency histogram (`pool::stats`, ~19% wide buckets in µs) into the
//! fixed `le` boundaries Prometheus histograms are exposed with.

use crate::pool::stats;

/// Upper bounds of the exposed buckets, in microseconds (100 µs to 10 s; `+Inf` follows).
pub const BOUNDS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A histogram ready to encode: per-bucket (not cumulative) counts keyed by upper bound in
/// seconds, the last one `+Inf`, with their total.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
}

/// Folds `fine` (counts per [`stats::bucket_upper`] bucket) into [`BOUNDS_US`] plus `+Inf`.
///
/// A fine bucket goes to the first boundary at or above its own upper bound, so `le` never
/// counts a value above the boundary; values in the one fine bucket that straddles a boundary
/// are counted at the next one. A boundary is therefore exact up to one fine bucket's width
/// (about 19% of the value; exact below 16 µs).
pub fn fold(fine: &[u64]) -> Folded {
    let mut buckets: Vec<(f64, u64)> = BOUNDS_US
        .iter()
        .map(|&b| (b as f64 / 1e6, 0))
        .chain(std::iter::once((f64::INFINITY, 0)))
        .collect();
    for (i, &n) in fine.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let upper = stats::bucket_upper(i);
        let at = BOUNDS_US.partition_point(|&b| b < upper);
        buckets[at].1 += n;
    }
    Folded {
        count: fine.iter().sum(),
        buckets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::stats::Histogram;

    fn le(f: &Folded, bound_us: u64) -> u64 {
        let at = BOUNDS_US.iter().position(|&b| b == bound_us).unwrap();
        f.buckets[..=at].iter().map(|b| b.1).sum()
    }

    #[test]
    fn folds_into_bounds_without_overcounting() {
        let h = Histogram::default();
        for us in [
            0, 5, 15, 99, 100, 101, 900, 1_000, 30_000, 7_000_000, 60_000_000,
        ] {
            h.record(0, us);
        }
        let f = fold(&h.counts());
        assert_eq!(f.count, 11);
        assert_eq!(f.buckets.len(), BOUNDS_US.len() + 1);
        assert_eq!(f.buckets.last().unwrap().0, f64::INFINITY);
        assert_eq!(f.buckets.iter().map(|b| b.1).sum::<u64>(), f.count);
        // 0..=15 µs are exact; 99 and 100 µs share a fine bucket (96..=111) with 101 µs,
        // which lies above 100 µs, so that bucket is counted at 250 µs.
        assert_eq!(le(&f, 100), 3);
        assert_eq!(le(&f, 250), 6);
        // 900 and 1000 µs share 896..=1023 µs.
        assert_eq!(le(&f, 1_000), 6);
        assert_eq!(le(&f, 2_500), 8);
        assert_eq!(le(&f, 50_000), 9);
        assert_eq!(le(&f, 10_000_000), 10);
    }

    #[test]
    fn every_boundary_is_within_one_fine_bucket() {
        // Fine buckets are under 20% of their upper bound wide: 80% of a boundary always counts.
        for &b in &BOUNDS_US {
            let h = Histogram::default();
            h.record(0, b * 8 / 10);
            h.record(0, b + 1);
            let f = fold(&h.counts());
            assert_eq!(le(&f, b), 1, "le {b} µs");
        }
    }
}
