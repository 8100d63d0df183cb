//! The active-memory estimate of one VM from sampled pages (ESX §5.3).
//!
//! Each sampling period the VMM picks some resident pages at random, makes their next access
//! fault, and counts how many the guest touched; the touched fraction is the period's sample.
//! ESX keeps a slow and a fast exponentially-weighted moving average of the samples, plus a
//! version of the fast one that already counts the touches of the period under way, and takes
//! the largest of the three: the estimate follows a growing working set at once and a
//! shrinking one slowly.
//!
//! The gains are not in the paper (its example uses 0.1); here the slow average has gain 0.1
//! and the fast one 0.5. A VM's estimate starts at 1 (all active): until it has been measured,
//! its memory is not taxed as idle. The first period measured sets both averages (the paper
//! does not say where they start): moving from 1 by the slow gain, a VM that touches 5 % of its
//! memory still counted as 60 % active five periods later, and a host could not tell it from a
//! busy one for half a minute (`bench balance`, docs/bench.md).

/// Gain of the slow average.
pub const SLOW_GAIN: f64 = 0.1;
/// Gain of the fast average.
pub const FAST_GAIN: f64 = 0.5;

/// The estimate of one VM; fractions of its sampled pages, 0 to 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActiveEstimate {
    pub slow: f64,
    pub fast: f64,
    /// The fast average with the period under way counted in (never below `fast`).
    pub current: f64,
    /// A period with samples has ended: the averages start from its sample.
    measured: bool,
}

impl Default for ActiveEstimate {
    fn default() -> Self {
        ActiveEstimate {
            slow: 1.0,
            fast: 1.0,
            current: 1.0,
            measured: false,
        }
    }
}

/// `touched` of `sampled` as a fraction; no samples count as all active.
fn fraction(touched: u64, sampled: u64) -> f64 {
    if sampled == 0 {
        return 1.0;
    }
    (touched.min(sampled) as f64) / (sampled as f64)
}

impl ActiveEstimate {
    /// A sampling period ended with `touched` of `sampled` pages touched.
    pub fn period_done(&mut self, touched: u64, sampled: u64) {
        let f = fraction(touched, sampled);
        if self.measured {
            self.slow += SLOW_GAIN * (f - self.slow);
            self.fast += FAST_GAIN * (f - self.fast);
        } else if sampled > 0 {
            // The first measurement replaces the assumption that everything is active.
            self.slow = f;
            self.fast = f;
            self.measured = true;
        }
        self.current = self.fast;
    }

    /// Whether a period with samples has ended.
    pub fn measured(&self) -> bool {
        self.measured
    }

    /// Within a period: `touched` of its `sampled` pages are touched so far (a lower bound on
    /// the period's sample, so it can only raise the estimate).
    pub fn period_so_far(&mut self, touched: u64, sampled: u64) {
        let f = fraction(touched, sampled);
        self.current = self.fast.max(self.fast + FAST_GAIN * (f - self.fast));
    }

    /// The estimate: the largest of the three.
    pub fn estimate(&self) -> f64 {
        self.slow.max(self.fast).max(self.current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// ESX Fig. 6: up quickly, down slowly.
    #[test]
    fn the_estimate_follows_growth_at_once_and_shrinking_slowly() {
        let mut e = ActiveEstimate::default();
        for _ in 0..80 {
            e.period_done(20, 100);
        }
        assert!((e.estimate() - 0.2).abs() < 0.01, "{e:?}");
        // The working set grows to 80 %: one period brings the estimate most of the way.
        e.period_done(80, 100);
        assert!(e.estimate() >= 0.5, "{e:?}");
        for _ in 0..40 {
            e.period_done(80, 100);
        }
        assert!(e.estimate() > 0.75, "{e:?}");
        // It shrinks back to 20 %: after three periods the estimate is still well above.
        for _ in 0..3 {
            e.period_done(20, 100);
        }
        assert!(e.estimate() > 0.5, "{e:?}");
    }

    #[test]
    fn the_first_period_measured_sets_the_estimate() {
        let mut e = ActiveEstimate::default();
        assert_eq!(e.estimate(), 1.0, "all active until measured");
        e.period_so_far(3, 100);
        assert_eq!(e.estimate(), 1.0);
        e.period_done(0, 0);
        assert!(
            !e.measured() && e.estimate() == 1.0,
            "a period with no samples measures nothing"
        );
        e.period_done(5, 100);
        assert!(e.measured());
        assert!((e.estimate() - 0.05).abs() < 1e-9, "{e:?}");
        // From then on, the averages move by their gains: up at once, down slowly.
        e.period_done(85, 100);
        assert!(
            (e.fast - 0.45).abs() < 1e-9 && (e.slow - 0.13).abs() < 1e-9,
            "{e:?}"
        );
        e.period_done(5, 100);
        assert!(e.estimate() > 0.2, "{e:?}");
    }

    #[test]
    fn touches_in_the_period_under_way_raise_the_estimate_at_once() {
        let mut e = ActiveEstimate::default();
        for _ in 0..40 {
            e.period_done(10, 100);
        }
        let before = e.estimate();
        e.period_so_far(60, 100);
        assert!(e.estimate() > before + 0.2, "{e:?}");
        e.period_so_far(0, 100);
        assert!(
            (e.estimate() - before).abs() < 1e-9,
            "never below the averages"
        );
    }

    proptest! {
        #[test]
        fn the_estimate_stays_a_fraction(samples in proptest::collection::vec((0u64..500, 0u64..500), 0..100)) {
            let mut e = ActiveEstimate::default();
            for (t, s) in samples {
                e.period_so_far(t / 2, s);
                e.period_done(t, s);
                let x = e.estimate();
                prop_assert!((0.0..=1.0).contains(&x), "{:?}", e);
            }
        }
    }
}
