//! `memvisor bench dwell` (HyperDealer2 §6.4, Fig. 14): how long pages the host released stay
//! out before the guest needs them again, per victim policy, under a guest streaming through
//! more files than its memory holds. How a run goes is in `run`.

use std::time::Duration;

use crate::args::Scale;

/// Victim policies run when `--configs` is not given (`memvisor run --victims`).
pub const POLICIES: [&str; 4] = ["clock", "random", "hd2", "hd2-whole"];

/// What `memvisor bench dwell` runs: the victim policies, the sizes and repetitions.
pub struct DwellPlan {
    pub policies: Vec<String>,
    pub sizes: Sizes,
    pub reps: u32,
}

/// The sizes of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Guest RAM, and the host's limit: as much (a release is the only way a page leaves).
    pub mem: u64,
    pub limit: u64,
    /// Files the guest streams through once, one after another, and the size of each (MiB):
    /// together more than its memory, so its page cache turns over.
    pub files: u32,
    pub file_mb: u64,
    /// Pages released every `every`, from `start_after` the guest began reading to its end.
    pub release_pages: u64,
    pub every: Duration,
    pub start_after: Duration,
}

impl Sizes {
    pub fn of(scale: Scale) -> Sizes {
        match scale {
            Scale::Full => Sizes {
                mem: 256 << 20,
                limit: 256 << 20,
                files: 32,
                file_mb: 32,
                release_pages: 256,
                every: Duration::from_millis(50),
                start_after: Duration::from_millis(1000),
            },
            Scale::Quick => Sizes {
                mem: 128 << 20,
                limit: 128 << 20,
                files: 24,
                file_mb: 16,
                release_pages: 128,
                every: Duration::from_millis(25),
                start_after: Duration::from_millis(100),
            },
        }
    }

    /// The files' names in the order the guest reads them: every other one, then the rest, so
    /// that no file begins on disk where the one read before it ended and each is a stream of
    /// its own (files lie on the disk in the order they were made).
    fn read_order(&self) -> Vec<String> {
        let (even, odd) = ((0..self.files).step_by(2), (1..self.files).step_by(2));
        even.chain(odd).map(|i| format!("f{i}")).collect()
    }

    /// The guest's command line: one pass over the files, then a few seconds up so the harness
    /// can read the VM's statistics.
    pub fn cmdline(&self) -> String {
        format!("file={} passes=1 hold_secs=20", self.read_order().join(","))
    }

    /// The data disk's files (mkdisk's `--files`).
    pub fn disk_files(&self) -> String {
        let files: Vec<String> = (0..self.files)
            .map(|i| format!("f{i}:{}M", self.file_mb))
            .collect();
        files.join(",")
    }

    /// The data disk's size (MiB).
    pub fn disk_mb(&self) -> u64 {
        u64::from(self.files) * self.file_mb + 8
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
    fn the_files_outgrow_the_guest_and_medians_come_from_buckets() {
        for scale in [Scale::Full, Scale::Quick] {
            let s = Sizes::of(scale);
            assert!((u64::from(s.files) * s.file_mb) << 20 > s.mem * 3 / 2);
            assert!(s.limit <= s.mem && s.cmdline().contains("hold_secs="));
            // Every file once, none right after its neighbour on disk.
            let order = s.read_order();
            assert_eq!(order.len(), s.files as usize);
            let idx: Vec<u32> = order.iter().map(|f| f[1..].parse().unwrap()).collect();
            assert!(idx.windows(2).all(|w| w[1] != w[0] + 1));
            let mut sorted = idx.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..s.files).collect::<Vec<_>>());
            assert_eq!(s.disk_files().split(',').count(), s.files as usize);
        }
        assert_eq!(median_ms(&[]), None);
        assert_eq!(median_ms(&[0, 0]), None);
        assert_eq!(median_ms(&[5]), Some(1.0));
        // 1 in [1, 2), 3 in [8, 16): the middle is in [8, 16).
        let m = median_ms(&[1, 0, 0, 3]).unwrap();
        assert!((m - 8.0 * std::f64::consts::SQRT_2).abs() < 1e-9);
    }
}
