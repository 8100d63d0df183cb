//! A recovery run's throughput trace (the guest's `kv: t=Ns ops_s=N` lines, with the 99th
//! percentile latency of the mix's operations, and its hog's start) and what it measures.
//!
//! Measures, per run:
//! - **before the hog**: the mean of the seconds that ended before the hog started;
//! - **the dip**: the lowest second, and the mean of the seconds, from the hog's start to the
//!   release;
//! - **recovery time**: from the release to the end of the first second (one that ends after
//!   the release) at [`RECOVERED`] of the throughput before the hog. The guest's seconds are
//!   the resolution: a run whose throughput is back at once shows the part of the second that
//!   followed the release (up to 1 s).

use crate::harness::guest::{value, word};
use crate::report::numbers;

/// The fraction of the throughput before the hog that counts as recovered.
pub const RECOVERED: f64 = 0.9;

/// What the guest's console says about the run phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// `(N, ops)`: the operations finished in second N of the run phase (from N-1 to N s).
    pub seconds: Vec<(u32, u64)>,
    /// `(N, µs)`: the 99th percentile latency of the operations of the traced type that
    /// finished in second N (the guest's `OP_p99_us=`, MemFlex Fig. 6), for the seconds whose
    /// line gives it.
    pub p99_us: Vec<(u32, f64)>,
    /// When the hog started (ms on the run phase's clock).
    pub hog_start_ms: Option<u64>,
    /// How long its allocation took (the store waits meanwhile).
    pub hog_alloc_ms: Option<u64>,
}

/// Reads `kv`'s per-second lines (with the p99 latency of operation type `op`) and its hog
/// lines from a console; other lines, and lines that do not parse, are skipped.
pub fn parse_console(text: &str, op: &str) -> Trace {
    let mut t = Trace::default();
    let p99 = format!("{op}_p99_us");
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("kv: ") else {
            continue;
        };
        if rest.starts_with("hog_start ") {
            t.hog_start_ms = value(rest, "t_ms");
        } else if rest.starts_with("hog_allocated ") {
            t.hog_alloc_ms = value(rest, "ms");
        } else if let (Some(n), Some(ops)) = (
            word(rest, "t").and_then(|v| v.strip_suffix('s')?.parse().ok()),
            value(rest, "ops_s"),
        ) {
            t.seconds.push((n, ops));
            if let Some(p) = word(rest, &p99).and_then(|v| v.parse().ok()) {
                t.p99_us.push((n, p));
            }
        }
    }
    t
}

/// How long a run took to recover after the release.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Recovery {
    /// Back at [`RECOVERED`] after this many seconds.
    After(f64),
    /// Not within the run, which went on for this many seconds after the release.
    Not(f64),
}

impl Recovery {
    /// The time, or what it is at least.
    pub fn bound(self) -> f64 {
        match self {
            Recovery::After(s) | Recovery::Not(s) => s,
        }
    }

    pub fn show(self) -> String {
        match self {
            Recovery::After(s) => format!("{s:.1}"),
            Recovery::Not(s) => format!("> {s:.0}"),
        }
    }
}

/// One run's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Measures {
    /// Mean ops/s of the seconds that ended before the hog started.
    pub before: Option<f64>,
    /// The lowest second from the hog's start to the release.
    pub dip_min: Option<u64>,
    /// The mean of those seconds.
    pub dip_mean: Option<f64>,
    /// Ops/s in the second the release fell in.
    pub at_release: Option<u64>,
    /// `None`: no release, or nothing to compare with.
    pub recovery: Option<Recovery>,
    /// Mean ops/s of the last 10 seconds of the run.
    pub last10: Option<f64>,
    /// From the release to the first second at [`RECOVERED`] of `last10`: back at the level the
    /// run settles at, the hog still running (the level before the hog, without it, can be
    /// higher than any second after).
    pub settled: Option<Recovery>,
    /// The p99 latency (µs) of the seconds before the hog: their median (MemFlex Fig. 6).
    pub p99_before: Option<f64>,
    /// The worst second's p99 from the hog's start to the release.
    pub p99_worst: Option<f64>,
    /// The p99 of the first whole second after the release.
    pub p99_after: Option<f64>,
    /// The median p99 of the last 10 seconds of the run.
    pub p99_last10: Option<f64>,
}

/// The mean of whole numbers (`None` when there are none).
fn mean_of(v: impl Iterator<Item = u64>) -> Option<f64> {
    numbers::mean(&v.map(|x| x as f64).collect::<Vec<_>>())
}

/// The measures of `trace`, the hog starting at `hog_s` and the release at `release_s`
/// (seconds on the run phase's clock).
pub fn measure(trace: &Trace, hog_s: f64, release_s: Option<f64>) -> Measures {
    let secs = &trace.seconds;
    let end = |n: u32| f64::from(n);
    let before = mean_of(secs.iter().filter(|&&(n, _)| end(n) <= hog_s).map(|x| x.1));
    let until = release_s.unwrap_or(f64::INFINITY);
    let dip = || {
        secs.iter()
            .filter(move |&&(n, _)| end(n) > hog_s && end(n) - 1.0 < until)
            .map(|x| x.1)
    };
    let at_release = release_s.and_then(|r| {
        secs.iter()
            .find(|&&(n, _)| end(n) - 1.0 <= r && r < end(n))
            .map(|x| x.1)
    });
    // From the release to the first second at RECOVERED of `level`.
    let back_to = |level: Option<f64>| match (release_s, level) {
        (Some(r), Some(b)) if b > 0.0 => {
            let hit = secs
                .iter()
                .find(|&&(n, ops)| end(n) > r && ops as f64 >= RECOVERED * b);
            Some(match hit {
                Some(&(n, _)) => Recovery::After(end(n) - r),
                None => Recovery::Not(secs.last().map_or(0.0, |&(n, _)| (end(n) - r).max(0.0))),
            })
        }
        _ => None,
    };
    let skip = secs.len().saturating_sub(10);
    let last10 = mean_of(secs[skip..].iter().map(|x| x.1));
    let lat = &trace.p99_us;
    let lat_in = |f: &dyn Fn(f64) -> bool| -> Vec<f64> {
        lat.iter()
            .filter(|&&(n, _)| f(end(n)))
            .map(|x| x.1)
            .collect()
    };
    let worst = lat_in(&|e| e > hog_s && e - 1.0 < until);
    let lat_skip = lat.len().saturating_sub(10);
    Measures {
        before,
        dip_min: dip().min(),
        dip_mean: mean_of(dip()),
        at_release,
        recovery: back_to(before),
        last10,
        settled: back_to(last10),
        p99_before: numbers::median(lat_in(&|e| e <= hog_s)),
        p99_worst: worst.into_iter().reduce(f64::max),
        p99_after: release_s
            .and_then(|r| lat.iter().find(|&&(n, _)| end(n) - 1.0 >= r).map(|x| x.1)),
        p99_last10: numbers::median(lat[lat_skip..].iter().map(|x| x.1).collect()),
    }
}

/// The median of recovery times: a run that did not recover counts as the time it watched,
/// and makes the median a lower bound when it falls on one.
pub fn median_recovery(v: &[Recovery]) -> Option<Recovery> {
    let mut v = v.to_vec();
    if v.is_empty() {
        return None;
    }
    // Not recovered sorts after every recovered time (it is longer than what it watched, and
    // the runs watch the same length).
    v.sort_by(|a, b| {
        let key = |r: &Recovery| (matches!(r, Recovery::Not(_)), r.bound());
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        match (v[n / 2 - 1], v[n / 2]) {
            (Recovery::After(a), Recovery::After(b)) => Recovery::After((a + b) / 2.0),
            (a, b) => Recovery::Not((a.bound() + b.bound()) / 2.0),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "memvisor guest kit: booting\n\
        RESULT workload=kv phase=load records=10 ms=1.0 ops_s=1 table_mb=1\n\
        kv: t=1s ops_s=1000 read_p50_us=1.2 read_p99_us=3.5 read_max_us=20.1\n\
        kv: t=2s ops_s=1100\n\
        kv: hog_start t_ms=2000 mb=40 rate_mb_s=40\n\
        kv: hog_allocated t_ms=2400 ms=400\n\
        kv: t=3s ops_s=100\n\
        kv: t=4s ops_s=50\n\
        kv: t=5s ops_s=600\n\
        kv: t=6s ops_s=960\n\
        kv: t=7s ops_s=1050\n\
        kv: t=xs ops_s=5\n\
        kv: t=8s ops_s=\n\
        RESULT workload=kv phase=run ok=1\n";

    #[test]
    fn the_console_gives_seconds_and_the_hog() {
        let t = parse_console(CONSOLE, "read");
        let ops: Vec<u64> = t.seconds.iter().map(|s| s.1).collect();
        let seconds: Vec<u32> = t.seconds.iter().map(|s| s.0).collect();
        assert_eq!(seconds, (1..=7).collect::<Vec<_>>());
        assert_eq!(ops, [1000, 1100, 100, 50, 600, 960, 1050]);
        assert_eq!(t.p99_us, vec![(1, 3.5)]);
        assert_eq!((t.hog_start_ms, t.hog_alloc_ms), (Some(2000), Some(400)));
        assert_eq!(parse_console("", "read"), Trace::default());
        assert_eq!(
            parse_console("kv: hog_start t_ms=abc", "read").hog_start_ms,
            None
        );
    }

    #[test]
    fn recovery_is_the_first_second_back_at_ninety_percent() {
        let t = parse_console(CONSOLE, "read");
        // GivenBack 4.2 s in: before = 1050, 90 % = 945; second 6 (5–6 s) has 960.
        let m = measure(&t, 2.0, Some(4.2));
        assert_eq!(m.before, Some(1050.0));
        assert_eq!(m.dip_min, Some(50));
        // Seconds 3, 4 and 5 overlap the hog's time (2 s to 4.2 s).
        assert_eq!(m.dip_mean, Some(250.0));
        assert_eq!(m.at_release, Some(600));
        let Some(Recovery::After(r)) = m.recovery else {
            panic!("{m:?}")
        };
        assert!((r - 1.8).abs() < 1e-9, "{r}");
        // The last 10 seconds (all 7 here) average 694.3: 90 % of it first in second 6 too.
        assert_eq!(m.settled, m.recovery);
        // Without a release there is no recovery; the dip runs to the end.
        let m = measure(&t, 2.0, None);
        let (recovery, at_release, dip_min) = (m.recovery, m.at_release, m.dip_min);
        assert_eq!((recovery, at_release, dip_min), (None, None, Some(50)));
        // Never back: the time watched after the release is a lower bound.
        let slow = Trace {
            seconds: vec![(1, 100), (2, 100), (3, 10), (4, 20), (5, 80)],
            ..Trace::default()
        };
        let m = measure(&slow, 2.0, Some(3.5));
        assert_eq!(m.recovery, Some(Recovery::Not(1.5)));
        // Back at the level it settles at (62 on average, 90 %: 55.8) in second 5, though.
        assert_eq!(m.settled, Some(Recovery::After(1.5)));
        // Back in the second the release fell in: what is left of that second.
        let fast = Trace {
            seconds: vec![(1, 100), (2, 100), (3, 10), (4, 95)],
            ..Trace::default()
        };
        let m = measure(&fast, 2.0, Some(3.25));
        assert_eq!(m.recovery, Some(Recovery::After(0.75)));
        // No second before the hog: nothing to compare with.
        assert_eq!(measure(&fast, 0.0, Some(3.0)).recovery, None);
        assert_eq!(measure(&Trace::default(), 2.0, Some(3.0)).last10, None);
    }

    #[test]
    fn medians_of_recoveries_keep_their_bounds() {
        use Recovery::{After, Not};
        assert_eq!(median_recovery(&[]), None);
        let three = median_recovery(&[After(3.0), Not(40.0), After(1.0)]);
        assert_eq!(three, Some(After(3.0)));
        assert_eq!(median_recovery(&[After(2.0), After(4.0)]), Some(After(3.0)));
        assert_eq!(median_recovery(&[After(2.0), Not(40.0)]), Some(Not(21.0)));
        let bound = median_recovery(&[Not(38.0), Not(40.0), After(5.0)]);
        assert_eq!(bound, Some(Not(38.0)));
        assert_eq!(Not(40.4).show(), "> 40");
        assert_eq!(After(2.25).show(), "2.2");
    }
}
