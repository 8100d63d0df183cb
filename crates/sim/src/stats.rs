//! What a run is summarised by: per VM its work, slowdown, pauses and allocation; over all
//! VMs a histogram of per-tick slowdowns (for the p99 at any scale in constant memory).

use crate::vm::{SimVm, TickOutcome};

/// Per VM, over the run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VmRunSummary {
    /// Wall seconds it ran or was paused before finishing.
    pub wall: f64,
    /// Seconds of work done.
    pub useful: f64,
    pub paused_s: f64,
    /// Times the host paused it.
    pub pauses: u32,
    pub faults: f64,
    /// Sum of resident bytes over ticks (mean allocation = sum / ticks).
    pub resident_sum: f64,
    pub ticks: u64,
    /// Since when its resident memory has been above its target by more than the tolerance.
    pub gap_since: Option<f64>,
}

impl VmRunSummary {
    pub fn record(&mut self, v: &SimVm, out: &TickOutcome, was_paused: bool, dt: f64) {
        let finished_before = v.completed_at.is_some() && out.useful == 0.0;
        if !finished_before {
            self.wall += dt;
        }
        self.useful += out.useful;
        self.faults += out.faults;
        if v.paused {
            self.paused_s += dt;
            if !was_paused {
                self.pauses += 1;
            }
        }
        self.resident_sum += v.resident;
        self.ticks += 1;
    }

    /// Wall time per second of work.
    pub fn slowdown(&self) -> f64 {
        if self.useful > 0.0 {
            self.wall / self.useful
        } else {
            f64::INFINITY
        }
    }

    pub fn mean_resident(&self) -> f64 {
        self.resident_sum / (self.ticks.max(1) as f64)
    }
}

/// Slowdowns from 1 to 10^4 in buckets of 1 % (log scale); larger ones in the last bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

const BUCKETS: usize = 927; // ln(10^4) / ln(1.01)

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; BUCKETS + 1],
            count: 0,
            sum: 0.0,
        }
    }
}

impl Histogram {
    pub fn add(&mut self, x: f64) {
        let x = x.max(1.0);
        // In 0..=BUCKETS after the clamp.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let i = ((x.ln() / 1.01f64.ln()) as usize).min(BUCKETS);
        self.buckets[i] += 1;
        self.count += 1;
        self.sum += x;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds every value `other` holds.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The `q` quantile (the bucket's upper edge), 1 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        let want = (q * self.count as f64).ceil().max(1.0);
        let mut seen = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen as f64 >= want {
                return 1.01f64.powf((i + 1) as f64);
            }
        }
        1.0
    }
}

/// A quantile of a list (nearest rank), 0 when empty.
pub fn quantile(xs: &mut [f32], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_unstable_by(f32::total_cmp);
    // q in 0..=1: an index in range.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let i = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1;
    f64::from(xs[i])
}

/// Jain's fairness index of `xs` (1: all equal; 1/n: one has everything).
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    if s2 == 0.0 {
        1.0
    } else {
        s * s / (xs.len() as f64 * s2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn histogram_quantiles_are_within_a_bucket_of_the_exact_ones(
            xs in proptest::collection::vec(1.0f64..5000.0, 1..300),
            q in 0.01f64..1.0,
        ) {
            let mut h = Histogram::default();
            for &x in &xs { h.add(x); }
            #[allow(clippy::cast_possible_truncation)]
            let mut v: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
            let exact = quantile(&mut v, q);
            let got = h.quantile(q);
            prop_assert!(got >= exact / 1.011 && got <= exact * 1.011 * 1.011, "{} {}", got, exact);
        }

        #[test]
        fn jain_is_between_one_over_n_and_one(xs in proptest::collection::vec(0.0f64..1e9, 1..50)) {
            let j = jain(&xs);
            prop_assert!(j <= 1.0 + 1e-9 && j >= 1.0 / xs.len() as f64 - 1e-9);
        }
    }
}
