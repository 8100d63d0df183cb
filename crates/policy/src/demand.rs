//! Which VMs need memory, and how much (HyperDealer2 §4.6 with the ghost cache of §5.3).
//!
//! Each period (the paper's is 100 ms; here the host's tick, `[host] tick`, 250 ms by
//! default) the host reads every VM's ghost-cache histogram and the guest's swap counters, and
//! takes what changed since the last reading ([`DemandInput::between`]).
//! From those values alone, for all VMs at once, [`estimate`] says how many pages each
//! beneficiary should get:
//!
//! 1. **Page-cache demand.** The threshold `T` is the average ghost hits per bucket over every
//!    bucket of every VM in the period (the paper: "the average number of all ghost cache
//!    hits"). A VM's cache demand is `(i + 1) * bucket_pages` for the largest bucket `i` whose
//!    hits `ΔC_i` exceed `T` (and are at least [`DemandParams::min_bucket_hits`], so a period
//!    without hits asks for nothing); 0 if no bucket does. The paper states the rule twice,
//!    loosely: §5.3 "requires i + 1 more page frames when ΔC_{i+1} exceeds a … threshold", §4.6
//!    the index "of the maximum derivative … which exceeds the threshold". `ΔC_i` is the
//!    derivative of the cumulative hit curve; taking the *largest* index above the threshold
//!    (not the arg-max) gives every extra bucket that still saves more reads than the average
//!    one: for a loop just larger than memory the hits sit in one bucket and both readings
//!    agree; for hits spread over many buckets the arg-max would ask for the first bucket only.
//!    Ghost misses (blocks beyond the ghost's reach) are not counted: they say nothing about how
//!    many pages would help.
//! 2. **Dynamic demand.** The pages the guest swapped in and out during the period, minus the
//!    average of that over the VMs that report it (the paper: "the difference between the
//!    estimated need and the average need", after Geiger-style swap monitoring); it may be
//!    negative. A VM whose guest does not report swap counters (the balloon's statistics lack
//!    `VIRTIO_BALLOON_S_SWAP_IN`/`_OUT`, or there is no balloon) has 0 here and does not count
//!    in the average.
//! 3. **Total.** `max(0, cache + dynamic)`, rounded down to whole pages. A VM is a beneficiary
//!    iff its total is above the average total of all VMs (strictly: a lone VM, or VMs all
//!    alike, get nothing; the paper balances relative needs) and at least
//!    [`DemandParams::trigger_pages`] (the paper's 32). A beneficiary wants its total; every
//!    other VM 0.
//!
//! Pure: no syscalls, no clocks. The period is the host's tick: the estimate works on what
//! changed between two readings, whatever their distance.

/// The estimator's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DemandParams {
    /// The least demand that makes a beneficiary, in pages (paper: 32).
    pub trigger_pages: u64,
    /// The fewest hits a ghost bucket needs in a period to count, whatever the average (1: a
    /// bucket without hits never counts, even when no VM has any).
    pub min_bucket_hits: u64,
}

impl Default for DemandParams {
    fn default() -> Self {
        DemandParams {
            trigger_pages: 32,
            min_bucket_hits: 1,
        }
    }
}

/// One reading of a VM's cumulative counters: its ghost histogram (`PatternStats` of
/// `GET /stats`: `ghost_bucket_pages`, `ghost_hits`) and its guest's swap counters (the
/// balloon's guest statistics: `swap_in_bytes`, `swap_out_bytes`; `None` if not reported).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    pub bucket_pages: u64,
    pub hits: Vec<u64>,
    pub swap_in_bytes: Option<u64>,
    pub swap_out_bytes: Option<u64>,
}

/// What one VM did during one period.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DemandInput {
    /// Pages per ghost bucket.
    pub bucket_pages: u64,
    /// Ghost hits per bucket during the period.
    pub hits: Vec<u64>,
    /// Pages the guest swapped in plus pages it swapped out during the period; `None`: the
    /// guest does not report them.
    pub swap_pages: Option<u64>,
}

/// Guest pages are 4 KiB.
const PAGE_BYTES: u64 = 4096;

impl DemandInput {
    /// The period between two readings of the same VM. Counters that went down (the VM
    /// restarted) count as 0; a histogram whose shape changed (another bucket width or count)
    /// gives no hits for this period.
    pub fn between(before: &Observation, after: &Observation) -> DemandInput {
        let hits =
            if before.bucket_pages == after.bucket_pages && before.hits.len() == after.hits.len() {
                after
                    .hits
                    .iter()
                    .zip(&before.hits)
                    .map(|(a, b)| a.saturating_sub(*b))
                    .collect()
            } else {
                Vec::new()
            };
        let delta = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        let swap_in = delta(after.swap_in_bytes, before.swap_in_bytes);
        let swap_out = delta(after.swap_out_bytes, before.swap_out_bytes);
        let swap_pages = match (swap_in, swap_out) {
            (None, None) => None,
            (i, o) => Some((i.unwrap_or(0).saturating_add(o.unwrap_or(0))) / PAGE_BYTES),
        };
        DemandInput {
            bucket_pages: after.bucket_pages,
            hits,
            swap_pages,
        }
    }
}

/// The estimate for one VM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Demand {
    /// Page-cache demand from the ghost cache, in pages.
    pub cache_pages: u64,
    /// Dynamic demand from swap activity, relative to the average, in pages (may be negative).
    pub dynamic_pages: f64,
    /// `max(0, cache + dynamic)`, in whole pages.
    pub total_pages: u64,
    pub beneficiary: bool,
}

impl Demand {
    /// The pages this VM should get: its total if a beneficiary, else 0.
    pub fn wanted(&self) -> u64 {
        if self.beneficiary {
            self.total_pages
        } else {
            0
        }
    }
}

/// The pages each VM should get this period (0 for every VM that is not a beneficiary), in
/// the order of `vms`.
pub fn estimate(vms: &[DemandInput], params: &DemandParams) -> Vec<u64> {
    assess(vms, params).iter().map(Demand::wanted).collect()
}

/// [`estimate`] with its parts, for each VM.
pub fn assess(vms: &[DemandInput], params: &DemandParams) -> Vec<Demand> {
    let threshold = ghost_threshold(vms);
    let reporting: Vec<u64> = vms.iter().filter_map(|v| v.swap_pages).collect();
    let swap_avg = mean(reporting.iter().map(|&s| s as f64), reporting.len());
    let mut out: Vec<Demand> = vms
        .iter()
        .map(|v| {
            let cache_pages = cache_demand(v, threshold, params.min_bucket_hits);
            let dynamic_pages = v.swap_pages.map_or(0.0, |s| s as f64 - swap_avg);
            let total = (cache_pages as f64 + dynamic_pages).max(0.0);
            Demand {
                cache_pages,
                dynamic_pages,
                total_pages: whole_pages(total),
                beneficiary: false,
            }
        })
        .collect();
    let avg = mean(out.iter().map(|d| d.total_pages as f64), out.len());
    for d in &mut out {
        d.beneficiary = d.total_pages as f64 > avg && d.total_pages >= params.trigger_pages;
    }
    out
}

/// The average hits per bucket over every bucket of every VM.
pub fn ghost_threshold(vms: &[DemandInput]) -> f64 {
    let buckets: usize = vms.iter().map(|v| v.hits.len()).sum();
    mean(
        vms.iter().flat_map(|v| v.hits.iter()).map(|&h| h as f64),
        buckets,
    )
}

/// `(i + 1) * bucket_pages` for the largest bucket `i` with more hits than `threshold` and at
/// least `min_hits`; 0 if none has.
pub fn cache_demand(v: &DemandInput, threshold: f64, min_hits: u64) -> u64 {
    v.hits
        .iter()
        .rposition(|&h| h >= min_hits && h as f64 > threshold)
        .map_or(0, |i| (i as u64 + 1).saturating_mul(v.bucket_pages))
}

/// `x` (not negative) in whole pages, rounded down; saturating.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn whole_pages(x: f64) -> u64 {
    // `as` saturates: NaN is 0, past u64 is u64::MAX.
    x.max(0.0).floor() as u64
}

fn mean(xs: impl Iterator<Item = f64>, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        xs.sum::<f64>() / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vm(bucket_pages: u64, hits: &[u64], swap_pages: Option<u64>) -> DemandInput {
        DemandInput {
            bucket_pages,
            hits: hits.to_vec(),
            swap_pages,
        }
    }

    #[test]
    fn a_loop_larger_than_memory_asks_for_the_pages_up_to_its_bucket() {
        // VM 0 rereads a loop whose blocks come back 5 buckets deep; VM 1 hits a little near the
        // top; VM 2 does no I/O.
        let mut loop_hits = [0u64; 8];
        loop_hits[5] = 400;
        let vms = [
            vm(64, &loop_hits, None),
            vm(64, &[3, 1, 0, 0, 0, 0, 0, 0], None),
            vm(64, &[0; 8], None),
        ];
        // The threshold is 404 / 24 hits per bucket: only VM 0's bucket 5 is above it.
        let d = assess(&vms, &DemandParams::default());
        assert_eq!(d[0].cache_pages, 6 * 64);
        assert_eq!(d[1].cache_pages, 0);
        assert_eq!(estimate(&vms, &DemandParams::default()), vec![384, 0, 0]);
    }

    #[test]
    fn hits_spread_over_buckets_ask_for_the_last_bucket_above_the_threshold() {
        let vms = [
            vm(16, &[50, 40, 30, 0, 9], None),
            vm(16, &[0, 0, 0, 0, 0], None),
        ];
        // Threshold 129 / 10 = 12.9: buckets 0..=2 are above it, bucket 4 is not.
        assert_eq!(estimate(&vms, &DemandParams::default()), vec![48, 0]);
    }

    #[test]
    fn swap_activity_adds_the_difference_from_the_average() {
        let vms = [
            vm(16, &[0; 4], Some(300)),
            vm(16, &[0; 4], Some(100)),
            vm(16, &[0; 4], None),
        ];
        let d = assess(&vms, &DemandParams::default());
        assert_eq!(d[0].dynamic_pages, 100.0);
        assert_eq!(d[1].dynamic_pages, -100.0);
        assert_eq!(d[2].dynamic_pages, 0.0, "no swap counters: no dynamic term");
        assert_eq!(estimate(&vms, &DemandParams::default()), vec![100, 0, 0]);
    }

    #[test]
    fn below_the_trigger_or_alone_gets_nothing() {
        let small = [vm(4, &[9, 0], None), vm(4, &[0, 0], None)];
        // VM 0 wants 4 pages: above the average, below 32.
        assert_eq!(estimate(&small, &DemandParams::default()), vec![0, 0]);
        let lone = [vm(64, &[0, 100], None)];
        assert_eq!(estimate(&lone, &DemandParams::default()), vec![0]);
        assert_eq!(estimate(&[], &DemandParams::default()), Vec::<u64>::new());
    }

    #[test]
    fn between_takes_what_changed_and_survives_a_restart() {
        let before = Observation {
            bucket_pages: 8,
            hits: vec![5, 7],
            swap_in_bytes: Some(4096),
            swap_out_bytes: Some(8192),
        };
        let after = Observation {
            bucket_pages: 8,
            hits: vec![9, 7],
            swap_in_bytes: Some(3 * 4096),
            swap_out_bytes: Some(8192),
        };
        assert_eq!(
            DemandInput::between(&before, &after),
            vm(8, &[4, 0], Some(2))
        );
        // Counters that went back (a restart) and a histogram of another shape.
        assert_eq!(
            DemandInput::between(&after, &before),
            vm(8, &[0, 0], Some(0))
        );
        let reshaped = Observation {
            bucket_pages: 16,
            ..after.clone()
        };
        assert!(DemandInput::between(&before, &reshaped).hits.is_empty());
        let silent = Observation {
            swap_in_bytes: None,
            swap_out_bytes: None,
            ..after
        };
        assert_eq!(DemandInput::between(&before, &silent).swap_pages, None);
    }

    fn input() -> impl Strategy<Value = DemandInput> {
        (
            1u64..5000,
            proptest::collection::vec(0u64..1000, 0..33),
            proptest::option::of(0u64..100_000),
        )
            .prop_map(|(bucket_pages, hits, swap_pages)| DemandInput {
                bucket_pages,
                hits,
                swap_pages,
            })
    }

    proptest! {
        #[test]
        fn beneficiaries_are_above_the_average_and_the_trigger(
            vms in proptest::collection::vec(input(), 0..12),
            trigger in 0u64..200,
        ) {
            let params = DemandParams { trigger_pages: trigger, ..DemandParams::default() };
            let d = assess(&vms, &params);
            let w = estimate(&vms, &params);
            prop_assert_eq!(d.len(), vms.len());
            prop_assert_eq!(w.len(), vms.len());
            let avg = d.iter().map(|x| x.total_pages as f64).sum::<f64>() / vms.len().max(1) as f64;
            for (x, &want) in d.iter().zip(&w) {
                if want > 0 {
                    prop_assert!(want as f64 > avg && want >= trigger && want == x.total_pages);
                } else {
                    prop_assert!(!x.beneficiary || x.total_pages == 0);
                }
            }
            // Strictly above the average: never every VM.
            prop_assert!(vms.is_empty() || d.iter().any(|x| !x.beneficiary));
        }

        #[test]
        fn cache_demand_is_whole_buckets_within_the_histogram(
            vms in proptest::collection::vec(input(), 1..12),
        ) {
            let t = ghost_threshold(&vms);
            for v in &vms {
                let c = cache_demand(v, t, 1);
                prop_assert_eq!(c % v.bucket_pages, 0);
                prop_assert!(c <= v.hits.len() as u64 * v.bucket_pages);
                // Every bucket past the demand is at or below the threshold.
                let k = usize::try_from(c / v.bucket_pages).unwrap();
                prop_assert!(v.hits[k..].iter().all(|&h| h as f64 <= t || h == 0));
            }
        }

        #[test]
        fn the_order_of_the_vms_does_not_matter(
            vms in proptest::collection::vec(input(), 1..10),
            rot in 0usize..10,
        ) {
            let params = DemandParams::default();
            let w = estimate(&vms, &params);
            let mut r = vms.clone();
            let k = rot % r.len();
            r.rotate_left(k);
            let mut wr = w.clone();
            wr.rotate_left(k);
            prop_assert_eq!(estimate(&r, &params), wr);
        }
    }
}
