//! A fixed-size latency histogram for the guest kit's workloads: no allocation, constant time per
//! sample, percentiles within 1/8 (12.5 %) of the true value.
//!
//! Buckets are log-linear, as in HdrHistogram: values below 16 have one bucket each; above, every
//! power of two `[2^k, 2^(k+1))` is split into 8 equal buckets. Values of 2^40 and more (18
//! minutes in nanoseconds) share the last bucket. The largest value is kept exactly.

/// Values below this have a bucket each.
const LINEAR: u64 = 16;
/// Buckets per power of two above [`LINEAR`], as a power of two.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// The highest power of two with buckets of its own (values up to `2^(TOP + 1) - 1`).
const TOP: u32 = 39;
/// Number of buckets: the linear ones, 8 per power of two from 2^4 to 2^TOP, one for the rest.
pub const BUCKETS: usize = LINEAR as usize + (TOP as usize - 3) * SUB as usize + 1;

/// Counts of values (e.g. nanoseconds) in log-linear buckets.
#[derive(Clone)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    n: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket of `v`.
fn bucket(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let msb = (63 - v.leading_zeros()).min(TOP);
    if msb == TOP && v >> TOP > 1 {
        return BUCKETS - 1;
    }
    let shift = msb - SUB_BITS;
    let sub = (v >> shift) - SUB;
    LINEAR as usize + (msb - 4) as usize * SUB as usize + sub as usize
}

/// The largest value that falls in bucket `i` (`u64::MAX` for the last one).
fn bucket_top(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    if i == BUCKETS - 1 {
        return u64::MAX;
    }
    let k = (i - LINEAR as usize) as u64;
    let msb = 4 + k / SUB;
    let shift = msb - u64::from(SUB_BITS);
    ((SUB + k % SUB) << shift) + (1 << shift) - 1
}

impl Histogram {
    pub const fn new() -> Self {
        Self {
            counts: [0; BUCKETS],
            n: 0,
            max: 0,
        }
    }

    pub fn record(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.n += 1;
        self.max = self.max.max(v);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.n += other.n;
        self.max = self.max.max(other.max);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// The largest sample (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `per_mille`/1000 quantile (500 = median, 990 = 99th percentile): the smallest value
    /// with at least that share of the samples at or below it, given as the top of its bucket
    /// (so at most 1/8 above the true value) but never above the largest sample. 0 when empty.
    pub fn quantile(&self, per_mille: u64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let per_mille = per_mille.min(1000);
        // The rank (1-based) of the sample asked for: ceil(n × q), at least 1.
        let rank = (u128::from(self.n) * u128::from(per_mille))
            .div_ceil(1000)
            .max(1);
        let mut seen = 0u128;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u128::from(c);
            if seen >= rank {
                return bucket_top(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        // Every bucket starts right after the previous one ends.
        let mut next = 0u64;
        for i in 0..BUCKETS - 1 {
            assert_eq!(bucket(next), i, "value {next}");
            let top = bucket_top(i);
            assert_eq!(bucket(top), i, "top {top} of bucket {i}");
            next = top + 1;
        }
        assert_eq!(next, 1 << (TOP + 1));
        assert_eq!(bucket(next), BUCKETS - 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn small_values_are_exact_and_percentiles_follow_the_ranks() {
        let mut h = Histogram::new();
        assert_eq!((h.count(), h.max(), h.quantile(500)), (0, 0, 0));
        for v in 1..=10 {
            h.record(v);
        }
        assert_eq!(h.count(), 10);
        assert_eq!(h.quantile(500), 5);
        assert_eq!(h.quantile(990), 10);
        assert_eq!(h.quantile(0), 1);
        assert_eq!(h.quantile(1000), 10);
        assert_eq!(h.max(), 10);
    }

    #[test]
    fn a_tail_shows_in_p99_and_max_but_not_in_the_median() {
        // 990 fast faults of 3 µs and 10 stalls of 250 ms, in nanoseconds.
        let mut h = Histogram::new();
        for _ in 0..990 {
            h.record(3_000);
        }
        for _ in 0..10 {
            h.record(250_000_000);
        }
        // 3000 falls in the bucket [2816, 3071]: a quantile is the bucket's top.
        assert_eq!(h.quantile(500), 3_071);
        // Rank 990 is the last fast one; rank 991 a stall, capped at the largest sample.
        assert_eq!(h.quantile(990), 3_071);
        assert_eq!(h.quantile(991), 250_000_000);
        assert_eq!(h.max(), 250_000_000);
    }

    #[test]
    fn merge_adds_counts() {
        let (mut a, mut b) = (Histogram::new(), Histogram::new());
        a.record(100);
        b.record(1_000_000);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!((a.count(), a.max()), (3, 1_000_000));
        assert_eq!(a.quantile(500), 1_000_000);
        // 100 falls in the bucket [96, 103].
        assert_eq!(a.quantile(300), 103);
    }

    proptest! {
        /// Against the sorted samples: a quantile is never below the exact one and at most 1/8
        /// above it.
        #[test]
        fn quantiles_are_within_an_eighth(
            mut v in proptest::collection::vec(0u64..(1 << 42), 1..300),
            q in 0u64..=1000,
        ) {
            let mut h = Histogram::new();
            for &x in &v {
                h.record(x);
            }
            v.sort_unstable();
            let rank = (v.len() as u64 * q).div_ceil(1000).max(1);
            let exact = v[rank as usize - 1];
            let got = h.quantile(q);
            prop_assert!(got >= exact, "{got} < {exact}");
            if exact < 1 << (TOP + 1) {
                prop_assert!(got - exact <= exact / 8, "{got} vs {exact}");
            }
            prop_assert_eq!(h.max(), *v.last().unwrap());
        }
    }
}
