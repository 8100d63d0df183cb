//! `memvisor bench dwell` (HyperDealer2 §6.4, Fig. 14): how long pages the host released stay
//! out before the guest needs them again, per victim policy. How a run goes is in `run::dwell`.

use std::time::Duration;

use super::Scale;

/// Victim policies run when `--configs` is not given (`memvisor run --victims`).
pub const POLICIES: [&str; 4] = ["clock", "random", "hd2", "hd2-whole"];

/// The sizes of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Guest RAM: the guest's page cache holds the whole file.
    pub mem: u64,
    /// The host's limit: the file does not fit under it.
    pub limit: u64,
    /// The file read again and again (MiB), and how often.
    pub file_mb: u64,
    pub passes: u64,
    /// Pages released every `every`, from the end of the first pass on.
    pub release_pages: u64,
    pub every: Duration,
}

impl Sizes {
    pub fn of(scale: Scale) -> Sizes {
        match scale {
            Scale::Full => Sizes {
                mem: 256 << 20,
                limit: 96 << 20,
                file_mb: 200,
                passes: 8,
                release_pages: 1_000,
                every: Duration::from_millis(500),
            },
            Scale::Tiny => Sizes {
                mem: 128 << 20,
                limit: 48 << 20,
                file_mb: 64,
                passes: 3,
                release_pages: 256,
                every: Duration::from_millis(200),
            },
        }
    }

    /// The guest's command line: the passes, then a few seconds up so the harness can read the
    /// VM's statistics.
    pub fn cmdline(&self) -> String {
        format!("file=seq passes={} hold_secs=20", self.passes)
    }

    pub fn files(&self) -> String {
        format!("seq:{}M", self.file_mb)
    }
}

/// The dwell times' median from a histogram of `[2^i, 2^(i+1))` ms buckets: the bucket holding
/// the middle one, as its geometric middle in ms (`None` without any).
pub fn median_ms(hist: &[u64]) -> Option<f64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let mut seen = 0;
    for (i, &c) in hist.iter().enumerate() {
        seen += c;
        if seen * 2 >= total {
            let lo = f64::from(1u32 << i.min(30));
            return Some(if i == 0 {
                1.0
            } else {
                lo * std::f64::consts::SQRT_2
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_fits_the_guest_not_the_limit_and_medians_come_from_buckets() {
        for scale in [Scale::Full, Scale::Tiny] {
            let s = Sizes::of(scale);
            assert!(s.file_mb << 20 < s.mem * 9 / 10 && s.file_mb << 20 > s.limit);
            assert!(s.passes >= 2 && s.cmdline().contains("hold_secs="));
        }
        assert_eq!(median_ms(&[]), None);
        assert_eq!(median_ms(&[0, 0]), None);
        assert_eq!(median_ms(&[5]), Some(1.0));
        // 1 in [1, 2), 3 in [8, 16): the middle is in [8, 16).
        let m = median_ms(&[1, 0, 0, 3]).unwrap();
        assert!((m - 8.0 * std::f64::consts::SQRT_2).abs() < 1e-9);
    }
}
