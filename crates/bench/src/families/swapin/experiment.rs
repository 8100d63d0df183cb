//! `memvisor bench swapin` (MemFlex §4, Table 1 and Fig. 7): the sizes and modes it runs, the
//! limit memory is pushed out under, and the `toucher` schedule of one run. How a run goes is in
//! `run`.

use std::time::Duration;

/// The limit memory is pushed out under.
pub const LIMIT: u64 = 64 << 20;

/// Guest RAM beyond the size touched (the guest kit's image, metadata and page tables).
pub const HEADROOM: u64 = 256 << 20;

/// How often `GET /stats` is asked while memory comes back.
pub const POLL: Duration = Duration::from_millis(10);

/// Smallest and largest size: the limit's floor, and the toucher's 2 GiB of virtual memory.
pub const MIN_SIZE: u64 = 16 << 20;

pub const MAX_SIZE: u64 = 2 << 30;

/// Sizes run when `--sizes` is not given (MemFlex Fig. 7 goes from 1 to 8 GB).
pub const DEFAULT_SIZES: [u64; 4] = [256 << 20, 512 << 20, 1 << 30, 2 << 30];

/// Where swapped pages are, and how they come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mode {
    pub name: &'static str,
    /// The share of the swapped memory the pool holds, in per cent: 100, a pool as large as
    /// guest RAM (never spilling); 0, no pool; in between, a pool of that share of what is
    /// swapped (the size less the limit), the rest going past it to the swap file (MemFlex
    /// Fig. 7b's mix of shared memory and disk).
    pub pool_pct: u64,
    /// `--swap-in proactive` (otherwise `faults`).
    pub proactive: bool,
    pub about: &'static str,
}

/// The modes, in the order of the report.
pub const MODES: [Mode; 7] = [
    Mode {
        name: "pool-proactive",
        pool_pct: 100,
        proactive: true,
        about: "pool as large as guest RAM (`--pool-spill-at 1`: nothing spills), `--swap-in proactive`: the pager copies the pages back when the limit goes (MemFlex w/ opt)",
    },
    Mode {
        name: "disk25-proactive",
        pool_pct: 75,
        proactive: true,
        about: "a pool of 75 % of what is swapped, the rest past it in the swap file (25 % on disk), `--swap-in proactive` (MemFlex Fig. 7b)",
    },
    Mode {
        name: "disk50-proactive",
        pool_pct: 50,
        proactive: true,
        about: "the same with half of it on disk (Fig. 7b)",
    },
    Mode {
        name: "disk75-proactive",
        pool_pct: 25,
        proactive: true,
        about: "the same with three quarters on disk (Fig. 7b)",
    },
    Mode {
        name: "pool-faults",
        pool_pct: 100,
        proactive: false,
        about: "the same pool, `--swap-in faults`: the guest's touches fault the pages back (MemFlex w/o opt)",
    },
    Mode {
        name: "disk-proactive",
        pool_pct: 0,
        proactive: true,
        about: "no pool: pages in the swap file (`O_DIRECT`), `--swap-in proactive`",
    },
    Mode {
        name: "disk-faults",
        pool_pct: 0,
        proactive: false,
        about: "no pool, `--swap-in faults`: every page comes back on a fault, with the pager's prefetch (the baseline, MemFlex's HDD)",
    },
];

impl Mode {
    /// Its `--pool` size in bytes for a run of `size` on a guest of `mem` bytes (`None`: no
    /// pool): the share of what the limit pushes out, in whole MiB.
    pub fn pool_bytes(&self, size: u64, mem: u64) -> Option<u64> {
        match self.pool_pct {
            0 => None,
            100.. => Some(mem),
            pct => Some((size.saturating_sub(LIMIT) * pct / 100) >> 20 << 20),
        }
    }
}

/// The mode called `name`.
#[cfg(test)]
pub fn mode(name: &str) -> Option<&'static Mode> {
    MODES.iter().find(|m| m.name == name)
}

/// A size given with `--sizes`, checked: a whole number of MiB from [`MIN_SIZE`] to
/// [`MAX_SIZE`].
pub fn check_size(bytes: u64) -> Result<u64, String> {
    if bytes % (1 << 20) != 0 {
        return Err(format!("--sizes {bytes}: give whole MiB, e.g. 256M or 1G"));
    }
    if !(MIN_SIZE..=MAX_SIZE).contains(&bytes) {
        return Err(format!(
            "--sizes {}M: give sizes from {}M to {}M (the guest's toucher has 2 GiB of virtual memory)",
            bytes >> 20,
            MIN_SIZE >> 20,
            MAX_SIZE >> 20
        ));
    }
    Ok(bytes)
}

/// The toucher's schedule for `size`: step 1 long enough for a first sweep of fresh memory
/// (the guest zeroes every page; 2 s a GiB at 1 GiB here, and up to 6 s a GiB at 2 GiB, where
/// the fresh guest pages cost more to map), step 2 a second (the VM is paused through it), step
/// 3 as long as the slowest swap-in could take (the run is stopped after its first sweep).
pub fn schedule(size: u64) -> String {
    let mb = size >> 20;
    format!("{mb}:{},1:1,{mb}:3600", 3 + (mb * 10).div_ceil(1024))
}

/// What a run needs.
pub struct SwapinPlan {
    pub sizes: Vec<u64>,
    pub modes: Vec<&'static Mode>,
    pub reps: u32,
}
