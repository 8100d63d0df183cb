//! `memvisor bench reclaimdelay` (HyperDealer2 §6.2, Table 2, Figs. 11–12): how long the host
//! takes to get pages back from victim VMs, by the balloon (the guest gives them) and by
//! HyperDealer2's instant release (the host drops clean page-cache pages it knows mirror disk
//! blocks), with the victims idle, computing, or writing, from one or several victims of one
//! or several vCPUs. How a run goes is in `run`.

use crate::families::published::{PAPER_BALLOON_DIRTY_MS, PAPER_BALLOON_IDLE_MS, PAPER_HD2_MS};
use std::time::Duration;

use crate::args::Scale;

/// How often the balloon's progress is asked for (`GET /stats`, QMP `query-balloon`).
pub const POLL: Duration = Duration::from_millis(1);

/// Longest wait for one amount of pages.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Time in the state before the first amount is taken, and between two amounts.
pub const SETTLE: Duration = Duration::from_millis(1500);

pub const BETWEEN: Duration = Duration::from_millis(500);

/// How the host takes the pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Method {
    pub name: &'static str,
    pub qemu: bool,
    /// `VmClient::release` (HyperDealer2); otherwise the balloon.
    pub release: bool,
    /// The victims keep as many candidates ready as the largest amount (`--release-ready`).
    pub ready: bool,
    pub about: &'static str,
}

/// The methods, in the order of the report.
pub const METHODS: [Method; 4] = [
    Method {
        name: "hd2",
        qemu: false,
        release: true,
        ready: false,
        about: "memvisor with the Swap Mapper, `PUT /memory/release` of N pages: the pager drops clean page-cache pages that mirror disk blocks, without the guest (HyperDealer2's instant release), protecting and checking them first; on several victims, one after another, as the host does",
    },
    Method {
        name: "hd2-ready",
        qemu: false,
        release: true,
        ready: true,
        about: "as hd2, with `--release-ready` as large as the largest amount: each victim's pager protects and checks its first candidates in the background, so a release only copies and drops them",
    },
    Method {
        name: "balloon",
        qemu: false,
        release: false,
        ready: false,
        about: "memvisor with the Swap Mapper, its virtio-balloon: `PUT /balloon` to what it holds + N pages, timed until `GET /stats` shows the driver holding them; on several victims, all at once",
    },
    Method {
        name: "qemu-balloon",
        qemu: true,
        release: false,
        ready: false,
        about: "QEMU microvm's `virtio-balloon-device`: QMP `balloon` to guest RAM − (held + N pages), timed until `query-balloon` shows it; on several victims, all at once (QEMU has no instant release)",
    },
];

/// The method called `name`.
#[cfg(test)]
pub fn method(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

/// What the victims do while pages are taken (the guest kit's `seqread then=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub name: &'static str,
    /// `then=` of `seqread`.
    pub then: &'static str,
    pub about: &'static str,
}

pub const STATES: [State; 3] = [
    State {
        name: "idle",
        then: "idle",
        about: "the page cache warm and clean, the guest doing nothing but serve its balloon",
    },
    State {
        name: "busy-cpu",
        then: "spin",
        about: "a CPU-bound loop in the guest (the balloon driver runs between its steps, about every microsecond of work)",
    },
    State {
        name: "busy-dirty",
        then: "write",
        about: "the guest overwriting a file bigger than its memory, front to back, so its page cache is dirty and it writes pages back to make room",
    },
];

#[cfg(test)]
pub fn state(name: &str) -> Option<&'static State> {
    STATES.iter().find(|s| s.name == name)
}

/// The sizes of one experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Pages taken, in this order, from the same victims (HyperDealer2 Table 2: 100, 1,000,
    /// 10,000).
    pub pages: Vec<u64>,
    /// Numbers of victims of one vCPU the same total is taken from (Fig. 11).
    pub victims: Vec<u32>,
    /// vCPUs of one victim the same total is taken from (Fig. 12); in the busy states every
    /// vCPU computes (one of them writing in `busy-dirty`).
    pub vcpus: Vec<u32>,
    /// Guest RAM of a victim.
    pub mem: u64,
    /// The file read to warm the page cache, and the file `busy-dirty` overwrites (MiB): both
    /// bigger than guest RAM, so the cache fills it.
    pub read_mb: u64,
    pub write_mb: u64,
}

impl Sizes {
    pub fn of(scale: Scale) -> Sizes {
        match scale {
            Scale::Full => Sizes {
                pages: vec![100, 1_000, 10_000],
                victims: vec![1, 2, 4],
                vcpus: vec![1, 2, 4],
                mem: 96 << 20,
                read_mb: 128,
                write_mb: 128,
            },
            Scale::Quick => Sizes {
                pages: vec![100, 1_000],
                victims: vec![1, 2],
                vcpus: vec![1, 4],
                mem: 48 << 20,
                read_mb: 64,
                write_mb: 64,
            },
        }
    }

    /// The groups of victims, as (victims, vCPUs each): every number of victims with one vCPU
    /// (Fig. 11's axis), then one victim with each number of vCPUs (Fig. 12's).
    pub fn groups(&self) -> Vec<(u32, u32)> {
        let by_victims = self.victims.iter().map(|&n| (n, 1));
        let by_vcpus = self.vcpus.iter().filter(|&&c| c > 1).map(|&c| (1, c));
        by_victims.chain(by_vcpus).collect()
    }

    /// The data disk of one victim: the two files and room for the file table.
    pub fn disk_mb(&self) -> u64 {
        self.read_mb + self.write_mb + 8
    }

    /// `mkdisk --files`.
    pub fn files(&self) -> String {
        format!("seq:{}M,dirty:{}M", self.read_mb, self.write_mb)
    }

    /// The guest's command line in `state`: one pass over the file, then the state until the
    /// harness stops the VM. The balloon driver reads its target on every tick (every 5 ms), as
    /// close as the guest kit comes to Linux's configuration interrupt.
    pub fn cmdline(&self, state: &State) -> String {
        format!(
            "file=seq passes=1 then={} then_secs=86400 write_file=dirty write_mb={} balloon_poll_ms=5",
            state.then, self.write_mb
        )
    }

    /// Pages each of `n` victims gives for a total of `pages` (the first ones one more when it
    /// does not divide).
    pub fn share(pages: u64, n: u32, i: u32) -> u64 {
        let n = u64::from(n.max(1));
        pages / n + u64::from(u64::from(i) < pages % n)
    }
}

/// The paper's figure for `pages` under `method` and `state`, if Table 2 has one.
pub fn paper_ms(method: &Method, state: &State, pages: u64) -> Option<f64> {
    let table: &[(u64, f64)] = match (method.release, state.name) {
        (true, _) => &PAPER_HD2_MS,
        (false, "idle") => &PAPER_BALLOON_IDLE_MS,
        (false, "busy-dirty") => &PAPER_BALLOON_DIRTY_MS,
        _ => return None,
    };
    table.iter().find(|t| t.0 == pages).map(|t| t.1)
}

/// What the runs need.
pub struct ReclaimPlan {
    pub methods: Vec<&'static Method>,
    pub states: Vec<&'static State>,
    pub sizes: Sizes,
    pub reps: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_shares_and_the_papers_figures() {
        for scale in [Scale::Full, Scale::Quick] {
            let s = Sizes::of(scale);
            // The cache can fill guest RAM, and holds every page taken with room to spare.
            assert!(s.read_mb << 20 > s.mem && s.write_mb << 20 > s.mem);
            let taken: u64 = s.pages.iter().sum();
            assert!(taken * 4096 < s.mem * 3 / 4, "{scale:?}");
            assert!(s.victims.contains(&1));
            let c = s.cmdline(state("busy-dirty").unwrap());
            assert!(c.contains("then=write") && c.contains(&format!("write_mb={}", s.write_mb)));
        }
        assert_eq!(Sizes::of(Scale::Full).files(), "seq:128M,dirty:128M");
        let g = Sizes::of(Scale::Full).groups();
        assert_eq!(g, [(1, 1), (2, 1), (4, 1), (1, 2), (1, 4)]);
        let only_cpus = Sizes {
            victims: vec![2],
            vcpus: vec![1, 3],
            ..Sizes::of(Scale::Quick)
        };
        assert_eq!(only_cpus.groups(), [(2, 1), (1, 3)]);
        assert_eq!(Sizes::share(10_000, 4, 0), 2_500);
        let shares: Vec<u64> = (0..3).map(|i| Sizes::share(100, 3, i)).collect();
        assert_eq!(shares, [34, 33, 33]);
        let (hd2, bal) = (method("hd2").unwrap(), method("balloon").unwrap());
        let (idle, cpu, dirty) = (
            state("idle").unwrap(),
            state("busy-cpu").unwrap(),
            state("busy-dirty").unwrap(),
        );
        assert_eq!(paper_ms(hd2, cpu, 10_000), Some(6.4));
        assert_eq!(paper_ms(bal, idle, 100), Some(9.4));
        assert_eq!(paper_ms(bal, dirty, 1_000), Some(674.9));
        assert_eq!(paper_ms(bal, cpu, 1_000), None);
        assert_eq!(paper_ms(bal, idle, 50), None);
        assert!(method("nope").is_none() && state("spin").is_none());
    }
}
