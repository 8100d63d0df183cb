//! `memvisor bench sharing` (ESX §4.3, Fig. 4) and `memvisor bench zeroboot` (ESX §6.3): page
//! sharing through KSM on memvisor and on QEMU, at one scan budget for both. How a run goes is
//! in `run`.
//!
//! - `sharing`: 1 to 6 identical VMs, each running the same read-only key-value store (`kv
//!   mix=c`, the same seed, so every VM holds the same table), on memvisor with `--sharing off`,
//!   memvisor with `--sharing host` and QEMU with `mem-merge=on`. Memory shared and reclaimed
//!   over time and at steady state, the store's throughput, and ksmd's CPU. Then the guest
//!   timing probe (`probe`) in two VMs per mode: what a VM learns from the time of its writes.
//! - `zeroboot`: five VMs that zero most of their RAM at boot and then hold a little data (`memhog
//!   zero_mb=`), each under a limit well below its RAM: memvisor's pager with and without KSM,
//!   QEMU in a memory cgroup with host swap with and without KSM. How many zero pages went to a
//!   store, against the data written.

use std::time::Duration;

use crate::args::Scale;

/// The one scan budget every mode gets: KSM's fastest rate under the host's own rules
/// (`memvisor_host::ksm::MAX_PAGES`) every 10 ms, zero pages merged with the zero page.
pub const SCAN_PAGES: u64 = memvisor_host::ksm::MAX_PAGES;
pub const SCAN_SLEEP_MS: u64 = 10;

/// One way of running the VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mode {
    pub name: &'static str,
    /// `memvisor run --hypervisor`.
    pub qemu: bool,
    /// `--sharing host` (QEMU: `mem-merge=on`); KSM scans only in modes that share.
    pub sharing: bool,
}

const fn mode(name: &'static str, qemu: bool, sharing: bool) -> Mode {
    Mode {
        name,
        qemu,
        sharing,
    }
}

/// `sharing`'s modes.
pub const SHARING_MODES: [Mode; 3] = [
    mode("memvisor-off", false, false),
    mode("memvisor-host", false, true),
    mode("qemu-merge", true, true),
];

/// `zeroboot`'s modes: each hypervisor without and with KSM.
pub const ZEROBOOT_MODES: [Mode; 4] = [
    mode("memvisor", false, false),
    mode("memvisor-ksm", false, true),
    mode("qemu", true, false),
    mode("qemu-ksm", true, true),
];

/// The modes of `experiment`.
pub fn modes(experiment: &str) -> &'static [Mode] {
    if experiment == "zeroboot" {
        &ZEROBOOT_MODES
    } else {
        &SHARING_MODES
    }
}

/// The sizes of one experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Guest RAM of every VM.
    pub mem: u64,
    /// Numbers of VMs (one run of each per mode and repetition).
    pub vms: Vec<u32>,
    pub workload: &'static str,
    pub cmdline: String,
    /// Each VM's limit (`--mem-limit`; QEMU: its memory cgroup).
    pub limit: Option<u64>,
    /// How often the harness reads the VMs' page maps and ksmd's CPU.
    pub every: Duration,
    /// The steady state: the mean over the run's last this long.
    pub steady: Duration,
    /// The timing probe's command line (two VMs per mode), for `sharing`.
    pub probe: Option<String>,
}

impl Sizes {
    pub fn of(experiment: &str, scale: Scale) -> Sizes {
        match (experiment, scale) {
            ("zeroboot", Scale::Full) => Sizes {
                mem: 256 << 20,
                vms: vec![5],
                workload: "memhog",
                // 5 x 200 MiB zeroed against 5 x 7 MiB of data: ESX §6.3's 325 MB of zero pages
                // and 35 MB of other data.
                cmdline: "zero_mb=200 mb=7 secs=30 rate_mb_s=1".into(),
                limit: Some(96 << 20),
                every: Duration::from_secs(2),
                steady: Duration::from_secs(10),
                probe: None,
            },
            ("zeroboot", Scale::Quick) => Sizes {
                mem: 96 << 20,
                vms: vec![2],
                workload: "memhog",
                cmdline: "zero_mb=80 mb=4 secs=6 rate_mb_s=1".into(),
                limit: Some(32 << 20),
                every: Duration::from_secs(1),
                steady: Duration::from_secs(3),
                probe: None,
            },
            (_, Scale::Full) => Sizes {
                mem: 256 << 20,
                vms: vec![1, 2, 4, 6],
                workload: "kv",
                // 60,000 records of 1 KiB over 120,000 slots: a 120 MiB table, read only.
                cmdline: "mix=c records=60000 secs=60".into(),
                limit: None,
                every: Duration::from_secs(3),
                steady: Duration::from_secs(15),
                probe: Some("pages=4096 wait_secs=20 rounds=2".into()),
            },
            (_, Scale::Quick) => Sizes {
                mem: 96 << 20,
                vms: vec![1, 2],
                workload: "kv",
                cmdline: "mix=c records=6000 secs=8".into(),
                limit: None,
                every: Duration::from_secs(1),
                steady: Duration::from_secs(3),
                probe: Some("pages=256 wait_secs=4 rounds=1".into()),
            },
        }
    }
}

/// Guest memory as the harness reads it from the VMs' page maps at one moment (pages, summed
/// over the VMs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Census {
    /// Pages of guest RAM present (resident or merged), zero-page merges included.
    pub present: u64,
    /// Pages mapping a KSM page or the zero page.
    pub shared: u64,
    /// What sharing frees: `shared` less the distinct KSM pages mapped (each kept once).
    pub reclaimed: u64,
}

impl Census {
    /// From the counts: pages present in the page maps, those mapping a KSM page, the distinct
    /// KSM pages among them, and the pages merged with the zero page (not present, and no
    /// memory).
    pub fn of(present: u64, ksm: u64, distinct: u64, zero: u64) -> Census {
        Census {
            present: present + zero,
            shared: ksm + zero,
            reclaimed: ksm.saturating_sub(distinct) + zero,
        }
    }
}

/// The mean of `values` over the samples at or after `from` (the steady state), or over the
/// last sample when none is that late.
pub fn steady(samples: &[(f64, f64)], from: f64) -> Option<f64> {
    let late = samples.iter().filter(|(t, _)| *t >= from);
    let late: Vec<f64> = late.map(|&(_, v)| v).collect();
    crate::report::numbers::mean(&late).or_else(|| samples.last().map(|&(_, v)| v))
}

/// When a series first reached half of `target` (its steady value), if ever.
pub fn half_time(samples: &[(f64, f64)], target: f64) -> Option<f64> {
    let half = samples.iter().find(|(_, v)| *v >= target / 2.0);
    half.filter(|_| target > 0.0).map(|&(t, _)| t)
}

/// What `memvisor bench sharing` or `zeroboot` runs.
pub struct SharingPlan {
    /// `sharing` or `zeroboot`.
    pub experiment: &'static str,
    pub modes: Vec<Mode>,
    pub sizes: Sizes,
    pub reps: u32,
    /// QEMU's own memory besides guest RAM, measured, for its cgroup limit
    /// (`MEMVISOR_QEMU_OVERHEAD`).
    pub qemu_overhead: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_leave_room_and_modes_differ() {
        for scale in [Scale::Full, Scale::Quick] {
            let s = Sizes::of("sharing", scale);
            assert_eq!(s.workload, "kv");
            assert!(s.cmdline.contains("mix=c") && s.probe.is_some() && s.limit.is_none());
            assert!(s.vms.contains(&1) && s.vms.len() >= 2);
            let z = Sizes::of("zeroboot", scale);
            assert!(z.cmdline.contains("zero_mb=") && z.probe.is_none());
            // The limit is below what the guest zeroes: the zeroed pages must leave.
            let zero_mb = z
                .cmdline
                .split(' ')
                .find_map(|w| w.strip_prefix("zero_mb="));
            let zero_mb: u64 = zero_mb.unwrap().parse().unwrap();
            assert!(z.limit.unwrap() < zero_mb << 20 && zero_mb << 20 < z.mem);
        }
        for m in modes("sharing").iter().chain(modes("zeroboot")) {
            assert_eq!(m.qemu, m.name.starts_with("qemu"));
        }
        assert!(modes("zeroboot").iter().any(|m| !m.sharing && !m.qemu));
    }

    #[test]
    fn census_steady_state_and_half_time() {
        // 3 VMs of 100 pages, 80 of each identical: 240 map 80 KSM pages, 160 reclaimed; 5
        // zero pages merged.
        let c = Census::of(300, 240, 80, 5);
        assert_eq!((c.present, c.shared, c.reclaimed), (305, 245, 165));
        let s = [
            (0.0, 0.0),
            (2.0, 10.0),
            (4.0, 50.0),
            (6.0, 100.0),
            (8.0, 100.0),
        ];
        assert_eq!(steady(&s, 6.0), Some(100.0));
        assert_eq!(steady(&s, 60.0), Some(100.0));
        assert_eq!(steady(&[], 1.0), None);
        assert_eq!(half_time(&s, 100.0), Some(4.0));
        assert_eq!(half_time(&s, 0.0), None);
    }
}
