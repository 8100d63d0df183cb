//! `memvisor bench consolidate` (VSwapper §5.2, Fig. 14): N = 1, 2, ... VMs each run `mapreduce`
//! (a Metis-like word count: large in-memory tables and a file read through the page cache),
//! started one after the other `INTERVAL` apart, in one fixed memory budget; the result is the
//! mean completion time against N, for each way of handling the overcommitment:
//!
//! | configuration | what |
//! |---|---|
//! | `balloon` | `memvisor host`, balloons moved by the host's policy, the pager in baseline mode |
//! | `pager` | `memvisor host`, no balloon: the pager's limits alone |
//! | `vswapper` | `memvisor host`, no balloon, the pager with VSwapper's Mapper and Preventer |
//! | `vswapper-balloon` | both (the paper's reference) |
//! | `qemu-balloon` | QEMU VMs with static balloons: each guest gets its share of the budget |
//!
//! The paper's guests have 2 GB and use about 1 GB, in an 8 GB host, ten seconds apart; here
//! each guest has [`MEM`], uses about 260 MiB (four 32 MiB tables and a 128 MiB input through
//! its page cache), in a [`BUDGET`] budget, [`INTERVAL`] apart, so pressure starts at three
//! VMs. The input is one read-only image shared by every VM (the host reads it with `O_DIRECT`,
//! so no VM gains from another's reads).

use std::path::Path;
use std::time::Duration;

use memvisor_api::VmSpec;

/// Guest RAM of each VM.
pub const MEM: u64 = 320 << 20;

/// The host's budget for every VM together.
pub const BUDGET: u64 = 1024 << 20;

/// Between two VMs' starts.
pub const INTERVAL: Duration = Duration::from_secs(3);

pub const INPUT_MB: u64 = 128;

pub const CMDLINE: &str = "input=src input_mb=128 vocab=1000000 mappers=4";

/// Longest one run (all its VMs) may take.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(900);

/// How one configuration runs its VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Host {
        balloon: bool,
        vswapper: bool,
        baseline: bool,
    },
    QemuStaticBalloon,
}

pub const CONFIGS: [(&str, Kind); 5] = [
    (
        "balloon",
        Kind::Host {
            balloon: true,
            vswapper: false,
            baseline: true,
        },
    ),
    (
        "pager",
        Kind::Host {
            balloon: false,
            vswapper: false,
            baseline: false,
        },
    ),
    (
        "vswapper",
        Kind::Host {
            balloon: false,
            vswapper: true,
            baseline: false,
        },
    ),
    (
        "vswapper-balloon",
        Kind::Host {
            balloon: true,
            vswapper: true,
            baseline: false,
        },
    ),
    ("qemu-balloon", Kind::QemuStaticBalloon),
];

/// The paper's reference: the combination.
pub const REFERENCE: &str = "vswapper-balloon";

pub fn spec(i: u32, kind: Kind, image: &Path) -> VmSpec {
    let Kind::Host {
        balloon,
        vswapper,
        baseline,
    } = kind
    else {
        unreachable!("a host configuration");
    };
    VmSpec {
        name: format!("vm{i}"),
        mem: MEM,
        min: 0,
        shares: 1000,
        vcpus: 1,
        workload: Some("mapreduce".into()),
        kernel: None,
        cmdline: CMDLINE.into(),
        disks: vec![format!("{},ro,id=data", image.display())],
        balloon,
        mapper: vswapper,
        preventer: vswapper,
        tesseract: false,
        tesseract_max: None,
        tesseract_sync: None,
        tesseract_defrag: None,
        victim_cache: 0,
        victims: None,
        pager: baseline.then(|| "baseline".into()),
        sharing: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_configurations_spell_their_mechanisms() {
        let image = Path::new("/x/src.img");
        let find = |name: &str| CONFIGS.iter().find(|(c, _)| *c == name).unwrap().1;
        let s = spec(3, find("vswapper-balloon"), image);
        assert!(s.balloon && s.mapper && s.preventer && s.pager.is_none());
        assert_eq!(s.name, "vm3");
        assert!(s.check().is_ok());
        let s = spec(1, find("balloon"), image);
        assert!(s.balloon && !s.mapper && s.pager.as_deref() == Some("baseline"));
        assert!(s.check().is_ok());
    }
}
