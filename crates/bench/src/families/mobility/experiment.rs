//! `memvisor bench mobility`: its configurations (memvisor's start, restore and migrations,
//! QEMU's beside them), the grid of guest sizes and working sets, the guest's work and what a
//! run measures. How a run goes is in `run` (memvisor) and `qemu` (QEMU).

use crate::args::Scale;

/// Repetitions when `--reps` is not given: the fewest the project takes a speed claim from.
pub const DEFAULT_REPS: u32 = 7;

/// Guest sizes when `--sizes` is not given.
pub const DEFAULT_SIZES: [u64; 3] = [256 << 20, 1 << 30, 2 << 30];

/// Working sets when `--ws` is not given, in percent of guest RAM.
pub const DEFAULT_WS: [u32; 3] = [10, 50, 80];

/// The grid of `--scale quick` (the end-to-end test): one small guest.
pub const TINY_SIZES: [u64; 1] = [256 << 20];
pub const TINY_WS: [u32; 1] = [10];

/// Smallest and largest guest (the range; the guest kit's tasks have 2 GiB of virtual
/// memory).
pub const MIN_SIZE: u64 = 256 << 20;
pub const MAX_SIZE: u64 = 2 << 30;

/// What the guest kit needs of guest RAM besides the working set (its image, the memory
/// manager's metadata, page tables): the working set is capped at the size less this.
pub const KIT_RESERVE: u64 = 48 << 20;

/// What `alloc` touches after its first round, in MiB: the rounds after the first (the work
/// measured after the VM moved) are as many as make this much, so that the work outlasts a
/// migration's post-copy at every working set (a few seconds on this host).
pub const WORK_MB: u64 = 6 << 10;

/// The fewest and most rounds.
pub const ROUNDS: (u64, u64) = (4, 1000);

/// Pre-copy rounds of the `memvisor-precopy` configuration.
pub const PRECOPY_ROUNDS: u32 = 2;

/// Which VMM a configuration runs, and what it does to the VM once the guest's first round is
/// over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing: the VM runs to its end (the start time, and the work of a VM that never
    /// stopped).
    Start,
    /// Snapshot to a directory (memvisor: `ctl snapshot --stop`; QEMU: `stop`, then `migrate`
    /// to `exec:cat > FILE`), then a new VM from it (`run --restore`; QEMU `-incoming exec:cat
    /// FILE`, then `cont`).
    Restore,
    /// A live migration on localhost: memvisor post-copy after `PRECOPY_ROUNDS` rounds of
    /// pre-copy (0: post-copy only); QEMU pre-copy, or post-copy (`postcopy-ram`, switched to at
    /// once).
    Migrate { precopy_rounds: u32, postcopy: bool },
}

/// One configuration.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    pub name: &'static str,
    pub qemu: bool,
    pub action: Action,
    pub about: &'static str,
}

/// The configurations, in the order of the report.
pub const CONFIGS: [Config; 8] = [
    Config {
        name: "memvisor-start",
        qemu: false,
        action: Action::Start,
        about: "`memvisor run` of the guest, never stopped: the time to its first instruction (an empty VM's start) and its work",
    },
    Config {
        name: "memvisor-restore",
        qemu: false,
        action: Action::Restore,
        about: "`ctl snapshot DIR --stop` after the first round, then `memvisor run --restore DIR`: memory served lazily from the snapshot's file by the pager, with prefetch",
    },
    Config {
        name: "memvisor-postcopy",
        qemu: false,
        action: Action::Migrate {
            precopy_rounds: 0,
            postcopy: true,
        },
        about: "`ctl migrate` post-copy only: the devices and vCPUs move first, the guest runs on the destination at once, pages follow on demand and pushed in the background",
    },
    Config {
        name: "memvisor-precopy",
        qemu: false,
        action: Action::Migrate {
            precopy_rounds: PRECOPY_ROUNDS,
            postcopy: true,
        },
        about: "`ctl migrate --precopy-rounds 2`: two rounds while the guest runs, then the switch and post-copy of what was written since",
    },
    Config {
        name: "qemu-start",
        qemu: true,
        action: Action::Start,
        about: "the same guest on QEMU microvm (`memvisor run --hypervisor qemu`), never stopped: its work",
    },
    Config {
        name: "qemu-restore",
        qemu: true,
        action: Action::Restore,
        about: "QMP `stop`, `migrate exec:cat > FILE` after the first round, then a new QEMU with `-incoming exec:cat FILE` (`--qemu-incoming`) and `cont`: all memory read before the guest runs",
    },
    Config {
        name: "qemu-precopy",
        qemu: true,
        action: Action::Migrate {
            precopy_rounds: 0,
            postcopy: false,
        },
        about: "QEMU's pre-copy to a QEMU on localhost (`-incoming tcp:`), bandwidth unlimited, its default 300 ms downtime limit",
    },
    Config {
        name: "qemu-postcopy",
        qemu: true,
        action: Action::Migrate {
            precopy_rounds: 0,
            postcopy: true,
        },
        about: "QEMU's post-copy (`postcopy-ram` on both ends, `migrate-start-postcopy` at once): pages follow on demand through userfaultfd",
    },
];

/// The configuration called `name`.
pub fn config(name: &str) -> &'static Config {
    CONFIGS
        .iter()
        .find(|c| c.name == name)
        .expect("runs are of known configurations")
}

/// One point of the grid: a guest size and its working set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub size: u64,
    /// Percent of guest RAM.
    pub ws_pct: u32,
}

impl Cell {
    /// The working set `alloc` touches each round, in MiB: the percentage of guest RAM, at
    /// most the size less [`KIT_RESERVE`].
    pub fn ws_mb(&self) -> u64 {
        let want = self.size / 100 * u64::from(self.ws_pct);
        (want.min(self.size - KIT_RESERVE) >> 20).max(1)
    }

    /// `alloc`'s rounds: the first, then as many as touch [`WORK_MB`], within [`ROUNDS`].
    pub fn rounds(&self) -> u64 {
        (1 + WORK_MB.div_ceil(self.ws_mb())).clamp(ROUNDS.0, ROUNDS.1)
    }

    /// The guest's command line: `alloc` with the working set and its rounds.
    pub fn cmdline(&self) -> String {
        format!("mb={} rounds={}", self.ws_mb(), self.rounds())
    }

    pub fn name(&self) -> String {
        format!("{} MiB, ws {} %", self.size >> 20, self.ws_pct)
    }
}

/// A size given with `--sizes`, checked: whole MiB from [`MIN_SIZE`] to [`MAX_SIZE`] (a tiny
/// run goes lower).
pub fn check_size(bytes: u64, scale: Scale) -> Result<u64, String> {
    let min = match scale {
        Scale::Full => MIN_SIZE,
        Scale::Quick => 128 << 20,
    };
    if bytes % (1 << 20) != 0 || !(min..=MAX_SIZE).contains(&bytes) {
        let given = if bytes % (1 << 20) == 0 {
            format!("{}M", bytes >> 20)
        } else {
            bytes.to_string()
        };
        return Err(format!(
            "--sizes {given}: give whole MiB from {}M to {}M, e.g. 256M,1G,2G",
            min >> 20,
            MAX_SIZE >> 20
        ));
    }
    Ok(bytes)
}

/// A working set given with `--ws`, checked: 1 to 90 percent.
pub fn check_ws(pct: u32) -> Result<u32, String> {
    if !(1..=90).contains(&pct) {
        return Err(format!(
            "--ws {pct}: give percentages of guest RAM from 1 to 90, e.g. 10,50,80"
        ));
    }
    Ok(pct)
}

/// What a run needs.
pub struct MobilityPlan {
    pub configs: Vec<&'static Config>,
    pub cells: Vec<Cell>,
    pub reps: u32,
}

/// The host's load average over 1, 5 and 15 minutes, as `/proc/loadavg` says it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_sets_fit_the_guest() {
        let c = Cell {
            size: 256 << 20,
            ws_pct: 80,
        };
        assert_eq!(c.ws_mb(), 204);
        assert_eq!(c.cmdline(), "mb=204 rounds=32");
        let small = Cell {
            size: 256 << 20,
            ws_pct: 1,
        };
        assert_eq!(small.rounds(), 1000, "capped");
        let c = Cell {
            size: 128 << 20,
            ws_pct: 90,
        };
        assert_eq!(c.ws_mb(), 80, "capped at the size less the kit's reserve");
        assert!(check_size(100 << 20, Scale::Full).is_err());
        assert!(check_size(4 << 30, Scale::Full).is_err());
        assert_eq!(check_size(1 << 30, Scale::Full), Ok(1 << 30));
        assert!(check_ws(0).is_err() && check_ws(95).is_err());
        for c in &CONFIGS {
            assert_eq!(config(c.name), c);
        }
    }
}
