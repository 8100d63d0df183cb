//! The configurations a benchmark compares, as data: each is a hypervisor plus how the
//! experiment's memory limit is enforced on it. A mechanism a later issue adds plugs in as one
//! more entry of [`CONFIGS`].

use std::path::{Path, PathBuf};

/// The uid and gid a jailed run takes: not 0, below `memvisor host`'s default range
/// (900000–900999), so no VMM a host starts has it.
pub const JAIL_ID: u32 = 899_000;

/// Which hypervisor runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hv {
    Memvisor,
    Qemu,
}

/// How the experiment's limit (guest RAM the host keeps resident) is enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// No limit: the whole guest RAM may be resident.
    None,
    /// The host kernel: a cgroup v1 memory cgroup (guest limit + the hypervisor's overhead) with
    /// the harness's host swap file.
    HostSwap,
    /// memvisor's pager with its default mechanisms (`--pager full`).
    Pager,
    /// memvisor's pager writing every victim, nothing else (`--pager baseline`).
    PagerBaseline,
    /// No limit, and guest RAM configured at the experiment's limit: a VM made at that size,
    /// against which one ballooned down to it is compared (ESX Fig. 2).
    Sized,
}

/// One configuration of `memvisor bench`.
#[derive(Debug)]
pub struct Config {
    pub name: &'static str,
    /// One line for the report and `docs/bench.md`.
    pub about: &'static str,
    pub hv: Hv,
    pub limit: Limit,
    /// Inflate the balloon to guest RAM minus the limit as soon as the VM answers on its socket.
    pub balloon: bool,
    /// Further `memvisor run` flags: the mechanisms this configuration adds to the pager.
    pub mechanisms: &'static [&'static str],
    /// Jailed (`--jail DIR --uid U --gid G`, a directory of its own per run) and filtered, as
    /// `memvisor host` runs a VMM.
    pub jail: bool,
    /// Where the guest's own swap disk lives, for experiments whose guest swaps.
    pub guest_swap: GuestSwap,
}

/// Where a guest swap disk's image lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestSwap {
    /// On the disk the run's work directory is on.
    OnDisk,
    /// In host memory, a file on the `/dev/shm` tmpfs: a ramdisk the guest swaps to through
    /// its virtio disk (MemFlex §4.1's Ramdisk case).
    InMemory,
}

impl Config {
    /// Whether VSwapper's False Reads Preventer runs (`--preventer`, in any mode).
    pub fn prevents(&self) -> bool {
        self.mechanisms.iter().any(|m| m.starts_with("--preventer"))
    }

    /// memvisor's pager at the limit (`--pager full`) with `mechanisms` on top, no balloon
    /// inflated: what most configurations are.
    const fn pager(
        name: &'static str,
        about: &'static str,
        mechanisms: &'static [&'static str],
    ) -> Config {
        Config {
            name,
            about,
            hv: Hv::Memvisor,
            limit: Limit::Pager,
            balloon: false,
            jail: false,
            guest_swap: GuestSwap::OnDisk,
            mechanisms,
        }
    }
}

/// Every configuration, in report order: the peer first.
pub const CONFIGS: &[Config] = &[
    Config {
        name: "qemu",
        about: "QEMU microvm, no limit",
        hv: Hv::Qemu,
        limit: Limit::None,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "qemu-fpr",
        about: "QEMU microvm, no limit, with its virtio-balloon (statistics, deflate-on-OOM, free page reporting) never inflated: the guest reports its free pages",
        hv: Hv::Qemu,
        limit: Limit::None,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &["--balloon"],
    },
    Config {
        name: "qemu-hostswap",
        about: "QEMU in a cgroup v1 memory cgroup (limit + QEMU's measured overhead), host swap file",
        hv: Hv::Qemu,
        limit: Limit::HostSwap,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "qemu-balloon",
        about: "as qemu-hostswap, and QEMU's virtio-balloon inflated through QMP to RAM minus limit",
        hv: Hv::Qemu,
        limit: Limit::HostSwap,
        balloon: true,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "qemu-sized",
        about: "QEMU microvm, no limit, its guest RAM configured at the limit: a VM made at that size",
        hv: Hv::Qemu,
        limit: Limit::Sized,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "qemu-ballooned",
        about: "QEMU microvm, no limit, its virtio-balloon inflated through QMP to RAM minus limit: the guest has what its balloon leaves it and nothing else holds it",
        hv: Hv::Qemu,
        limit: Limit::None,
        balloon: true,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "memvisor",
        about: "memvisor, no limit",
        hv: Hv::Memvisor,
        limit: Limit::None,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "memvisor-sized",
        about: "memvisor, no limit, its guest RAM configured at the limit: a VM made at that size",
        hv: Hv::Memvisor,
        limit: Limit::Sized,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "memvisor-ballooned",
        about: "memvisor, no limit, its virtio-balloon inflated through the API to RAM minus limit: the guest has what its balloon leaves it and nothing else holds it",
        hv: Hv::Memvisor,
        limit: Limit::None,
        balloon: true,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "memvisor-nolimit-fpr",
        about: "memvisor, no limit (plain huge-page memory), with its virtio-balloon never inflated: the guest reports its free pages (--balloon)",
        hv: Hv::Memvisor,
        limit: Limit::None,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &["--balloon"],
    },
    Config {
        name: "memvisor-hostswap",
        about: "memvisor with --pager off in a cgroup v1 memory cgroup, host swap file",
        hv: Hv::Memvisor,
        limit: Limit::HostSwap,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "memvisor-baseline",
        about: "memvisor's pager at the limit, baseline mechanisms (every victim written)",
        hv: Hv::Memvisor,
        limit: Limit::PagerBaseline,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config::pager(
        "memvisor-pager",
        "memvisor's pager at the limit, default mechanisms (--pager full)",
        &[],
    ),
    Config {
        name: "memvisor-balloon",
        about: "memvisor-pager, and memvisor's virtio-balloon inflated through the API to RAM minus limit",
        hv: Hv::Memvisor,
        limit: Limit::Pager,
        balloon: true,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config {
        name: "memvisor-balloon-ramdisk",
        about: "memvisor-balloon with the guest's swap disk in host memory (its image on the /dev/shm tmpfs): a guest swapping to a ramdisk, as MemFlex §4.1's Ramdisk case",
        hv: Hv::Memvisor,
        limit: Limit::Pager,
        balloon: true,
        jail: false,
        guest_swap: GuestSwap::InMemory,
        mechanisms: &[],
    },
    // The pool (MemFlex §3.2–§3.4): 1 GiB, at least the guest RAM of the experiments that use
    // it, so every swapped page fits and none spills. A variant of the pool (compression, a
    // spill mark) is one more entry here with its flags in `mechanisms`.
    // Confinement (security.md): the jail and the filters against neither, on the pager as
    // `memvisor host` runs a VM.
    Config {
        name: "memvisor-jailed",
        about: "memvisor-pager jailed (--jail, a uid and gid of its own) and filtered (--seccomp on, the default): how memvisor host runs every VMM",
        hv: Hv::Memvisor,
        limit: Limit::Pager,
        balloon: false,
        jail: true,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &[],
    },
    Config::pager(
        "memvisor-unconfined",
        "memvisor-pager with neither jail nor filters (--seccomp off)",
        &["--seccomp", "off"],
    ),
    Config::pager(
        "memvisor-pool",
        "memvisor-pager with a 1 GiB host-memory pool in front of its swap file; swapped pages come back only on faults (--pool 1G --swap-in faults)",
        &["--pool", "1G", "--swap-in", "faults"],
    ),
    Config::pager(
        "memvisor-pool-proactive",
        "memvisor-pool, and when the limit rises the pager brings swapped pages back in batches without waiting for faults (--pool 1G --swap-in proactive)",
        &["--pool", "1G", "--swap-in", "proactive"],
    ),
    Config::pager(
        "memvisor-pool-lz4",
        "memvisor-pool-proactive with every pooled page compressed by lz4 (--pool-compress lz4)",
        &["--pool", "1G", "--swap-in", "proactive", "--pool-compress", "lz4"],
    ),
    Config::pager(
        "memvisor-mapper",
        "memvisor-pager with VSwapper's Swap Mapper (--mapper)",
        &["--mapper"],
    ),
    Config::pager(
        "memvisor-vswapper",
        "memvisor-pager with VSwapper: Swap Mapper and False Reads Preventer, the Preventer stopping a vCPU while a prevention costs less per page than a read, as measured (--mapper --preventer)",
        &["--mapper", "--preventer"],
    ),
    Config::pager(
        "memvisor-vswapper-always",
        "memvisor-vswapper with the Preventer stopping the vCPU on every write to a swapped or on-disk page, as VSwapper does (--mapper --preventer=always)",
        &["--mapper", "--preventer=always"],
    ),
    Config::pager(
        "memvisor-fpr",
        "memvisor-pager with memvisor's virtio-balloon at target 0: nothing inflated, the guest reports its free pages (free page reporting, --balloon)",
        &["--balloon"],
    ),
    Config::pager(
        "memvisor-vswapper-fpr",
        "memvisor-vswapper with free page reporting as memvisor-fpr (--mapper --preventer --balloon)",
        &["--mapper", "--preventer", "--balloon"],
    ),
    Config {
        name: "memvisor-vswapper-balloon",
        about: "memvisor-vswapper, and memvisor's virtio-balloon inflated through the API to RAM minus limit",
        hv: Hv::Memvisor,
        limit: Limit::Pager,
        balloon: true,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &["--mapper", "--preventer"],
    },
    // HyperDealer2 (§4.4–§4.5): reference patterns detected from the guest's disk reads.
    Config::pager(
        "memvisor-hd2",
        "memvisor-pager with the Swap Mapper and HyperDealer2's reference-pattern detection choosing victims (--mapper --victims hd2)",
        &["--mapper", "--victims", "hd2"],
    ),
    Config {
        name: "memvisor-nolimit-hd2",
        about: "memvisor, no limit (plain huge-page memory), with the Swap Mapper and HyperDealer2's reference-pattern detection recording every disk read (--mapper --victims hd2): what a VM under memvisor host runs until the host first needs its memory",
        hv: Hv::Memvisor,
        limit: Limit::None,
        balloon: false,
        jail: false,
        guest_swap: GuestSwap::OnDisk,
        mechanisms: &["--mapper", "--victims", "hd2"],
    },
    // Tesseract (§3–§4): the guest's writes of pages the pager swapped become indirections.
    Config::pager(
        "memvisor-tesseract",
        "memvisor-pager with Tesseract's indirections, each write's log synced before it is acknowledged (--tesseract)",
        &["--tesseract"],
    ),
    Config::pager(
        "memvisor-tesseract-flush",
        "memvisor-tesseract with the log synced when the guest flushes the disk (--tesseract --tesseract-sync flush)",
        &["--tesseract", "--tesseract-sync", "flush"],
    ),
    Config::pager(
        "memvisor-tesseract-defrag",
        "memvisor-tesseract-flush with guest-disk defragmentation: indirected blocks copied back into the image in the background (--tesseract-defrag)",
        &["--tesseract", "--tesseract-sync", "flush", "--tesseract-defrag"],
    ),
    Config::pager(
        "memvisor-tesseract-bsst",
        "memvisor-tesseract-flush with swap-file (BSST) defragmentation: each guest write's indirected blocks moved next to each other in the swap file (--tesseract-defrag store)",
        &["--tesseract", "--tesseract-sync", "flush", "--tesseract-defrag", "store"],
    ),
    Config::pager(
        "memvisor-tesseract-victim",
        "memvisor-tesseract-flush with a victim cache of 10 % of the limit (Tesseract §4.3: --victim-cache 10)",
        &["--tesseract", "--tesseract-sync", "flush", "--victim-cache", "10"],
    ),
];

/// What a configuration adds to its twin, the same VM without it ([`Config::twin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adds {
    /// A balloon device never inflated: statistics, deflate-on-OOM, free page reporting.
    BalloonDevice,
    /// The jail and the seccomp filters.
    Confinement,
}

/// The configuration called `name`.
#[cfg(test)]
pub fn find(name: &str) -> Option<&'static Config> {
    CONFIGS.iter().find(|c| c.name == name)
}

impl Config {
    /// Whether the VM has a balloon device: inflated ([`Config::balloon`]), or at target 0 for
    /// free page reporting only (`--balloon` among the mechanisms). The guest kit reports free
    /// pages whenever the device offers it (its `report=1` default).
    pub fn balloon_device(&self) -> bool {
        self.balloon || self.mechanisms.contains(&"--balloon")
    }

    /// The same VM without the balloon device, for a configuration that only adds one (never
    /// inflated: what the device costs by its presence and free page reporting).
    pub fn without_balloon(&self) -> Option<&'static Config> {
        if self.balloon || !self.balloon_device() {
            return None;
        }
        CONFIGS.iter().find(|c| {
            c.hv == self.hv
                && c.limit == self.limit
                && !c.balloon_device()
                && !c.jail
                && c.mechanisms.len() + 1 == self.mechanisms.len()
                && c.mechanisms.iter().all(|m| self.mechanisms.contains(m))
        })
    }

    /// The same VM without what this configuration adds, and what that is: the balloon device
    /// ([`Config::without_balloon`]), or for a jailed configuration the jail and the filters
    /// (its twin runs with neither).
    pub fn twin(&self) -> Option<(&'static Config, Adds)> {
        if !self.jail {
            return self.without_balloon().map(|c| (c, Adds::BalloonDevice));
        }
        let unconfined = |c: &&Config| {
            c.hv == self.hv && c.limit == self.limit && c.mechanisms == ["--seccomp", "off"]
        };
        CONFIGS
            .iter()
            .find(unconfined)
            .map(|c| (c, Adds::Confinement))
    }

    /// The empty directory a jailed run is jailed in, beside its API socket `sock` (the run
    /// makes it before it starts and removes it after).
    pub fn jail_dir(&self, sock: &Path) -> Option<PathBuf> {
        self.jail.then(|| sock.with_extension("jail"))
    }

    /// Whether memvisor's pager holds guest RAM under this configuration once the experiment has
    /// a limit: what working-set sampling needs (without it nothing can fault).
    pub fn pager_holds_ram(&self) -> bool {
        self.hv == Hv::Memvisor && matches!(self.limit, Limit::Pager | Limit::PagerBaseline)
    }

    /// The guest RAM a run gets: the experiment's `mem`, or for a VM made at the size of the
    /// experiment's limit ([`Limit::Sized`]) that limit.
    pub fn guest_ram(&self, mem: u64, limit: Option<u64>) -> u64 {
        match (self.limit, limit) {
            (Limit::Sized, Some(l)) => l,
            _ => mem,
        }
    }

    /// Whether the host holds the guest to less than its RAM once the experiment has a limit.
    pub fn limits_ram(&self) -> bool {
        !matches!(self.limit, Limit::None | Limit::Sized)
    }

    /// Whether this configuration needs the host swap file.
    pub fn needs_host_swap(&self) -> bool {
        self.limit == Limit::HostSwap
    }

    /// The `memvisor run` flags that select this configuration (the experiment adds memory size,
    /// disks and workload). `limit` is the experiment's limit, if it has one; `sock` is
    /// memvisor's API socket or QEMU's QMP socket.
    pub fn run_flags(&self, limit: Option<u64>, sock: &Path) -> Vec<String> {
        let jail = self.jail_dir(sock).map(|d| d.display().to_string());
        let id = JAIL_ID.to_string();
        let sock = sock.display().to_string();
        let mut a: Vec<&str> = match (self.hv, self.balloon) {
            (Hv::Qemu, false) => vec!["--hypervisor", "qemu"],
            (Hv::Qemu, true) => vec!["--hypervisor", "qemu", "--qmp-sock", &sock],
            (Hv::Memvisor, _) => vec!["--api-sock", &sock],
        };
        if let Some(dir) = &jail {
            a.extend(["--jail", dir, "--uid", &id, "--gid", &id]);
        }
        if self.balloon {
            a.push("--balloon");
        }
        let limit = match (self.limit, limit) {
            (Limit::None | Limit::Sized, _) | (_, None) => {
                if self.hv == Hv::Memvisor {
                    a.extend(["--pager", "full"]);
                }
                // A configuration made for no limit keeps its devices; one made for a limit
                // is plain memvisor without one.
                if !self.limits_ram() {
                    a.extend(self.mechanisms);
                }
                return a.into_iter().map(str::to_owned).collect();
            }
            (_, Some(l)) => l.to_string(),
        };
        a.extend(["--mem-limit", &limit]);
        match self.limit {
            Limit::HostSwap if self.hv == Hv::Memvisor => a.extend(["--pager", "off"]),
            // The pager's swap file is its default: unnamed in $TMPDIR (the run's work
            // directory), so nothing is left behind even when the run is killed.
            Limit::Pager => a.extend(["--pager", "full"].iter().chain(self.mechanisms)),
            Limit::PagerBaseline => a.extend(["--pager", "baseline"].iter().chain(self.mechanisms)),
            _ => {}
        }
        a.into_iter().map(str::to_owned).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_flags_follow_the_limit() {
        for (i, c) in CONFIGS.iter().enumerate() {
            assert!(CONFIGS[..i].iter().all(|o| o.name != c.name), "{}", c.name);
        }
        let flags = |n, limit| find(n).unwrap().run_flags(limit, Path::new("/s")).join(" ");
        let f = |n| flags(n, Some(100 << 20));
        let limited = "--api-sock /s --mem-limit 104857600";
        for (name, want) in [
            ("qemu", "--hypervisor qemu"),
            ("qemu-hostswap", "--hypervisor qemu --mem-limit 104857600"),
            (
                "qemu-balloon",
                "--hypervisor qemu --qmp-sock /s --balloon --mem-limit 104857600",
            ),
            ("memvisor", "--api-sock /s --pager full"),
            (
                "memvisor-vswapper",
                &format!("{limited} --pager full --mapper --preventer"),
            ),
            ("memvisor-hostswap", &format!("{limited} --pager off")),
            ("memvisor-baseline", &format!("{limited} --pager baseline")),
            // Free page reporting: the balloon device without inflating it.
            ("memvisor-fpr", &format!("{limited} --pager full --balloon")),
            (
                "memvisor-vswapper-fpr",
                &format!("{limited} --pager full --mapper --preventer --balloon"),
            ),
            (
                "memvisor-pool-proactive",
                &format!("{limited} --pager full --pool 1G --swap-in proactive"),
            ),
            (
                "memvisor-pool",
                &format!("{limited} --pager full --pool 1G --swap-in faults"),
            ),
            (
                "memvisor-nolimit-fpr",
                "--api-sock /s --pager full --balloon",
            ),
            // ESX Fig. 2: a VM made at the size, and one only its balloon holds to it.
            ("memvisor-sized", "--api-sock /s --pager full"),
            ("qemu-sized", "--hypervisor qemu"),
            ("memvisor-ballooned", "--api-sock /s --balloon --pager full"),
            (
                "qemu-ballooned",
                "--hypervisor qemu --qmp-sock /s --balloon",
            ),
            (
                "memvisor-nolimit-hd2",
                "--api-sock /s --pager full --mapper --victims hd2",
            ),
        ] {
            assert_eq!(f(name), want, "{name}");
        }
        let sized = find("memvisor-sized").unwrap();
        assert_eq!(sized.guest_ram(512 << 20, Some(100 << 20)), 100 << 20);
        assert_eq!(sized.guest_ram(512 << 20, None), 512 << 20);
        let ballooned = find("memvisor-ballooned").unwrap();
        assert_eq!(ballooned.guest_ram(512 << 20, Some(100 << 20)), 512 << 20);
        assert!(ballooned.balloon && !ballooned.limits_ram() && !sized.limits_ram());
        assert!(find("memvisor-balloon").unwrap().limits_ram());
        assert!(find("memvisor-balloon").unwrap().balloon);
        for n in ["memvisor-fpr", "memvisor-vswapper-fpr"] {
            let c = find(n).unwrap();
            assert!(!c.balloon && c.balloon_device(), "{n}");
        }
        assert!(find("memvisor-balloon").unwrap().balloon_device());
        assert!(!find("memvisor-vswapper").unwrap().balloon_device());
        // Without a limit the mechanisms are not added: the configuration is plain memvisor.
        assert_eq!(flags("memvisor-fpr", None), "--api-sock /s --pager full");
        assert!(find("nope").is_none());
        // The balloon rows of `overhead`: each against the same VM without the device.
        assert_eq!(flags("qemu-fpr", None), "--hypervisor qemu --balloon");
        let twin = |n| find(n).unwrap().without_balloon().map(|c| c.name);
        assert_eq!(twin("qemu-fpr"), Some("qemu"));
        assert_eq!(twin("memvisor-nolimit-fpr"), Some("memvisor"));
        assert_eq!(twin("memvisor-fpr"), Some("memvisor-pager"));
        assert_eq!(twin("memvisor-vswapper-fpr"), Some("memvisor-vswapper"));
        for n in ["memvisor-balloon", "memvisor-pager", "qemu", "qemu-balloon"] {
            assert_eq!(twin(n), None, "{n}");
        }
        // Confinement: jailed against neither jail nor filters, on the pager.
        let jailed = find("memvisor-jailed").unwrap();
        let (t, adds) = jailed.twin().unwrap();
        assert_eq!((t.name, adds), ("memvisor-unconfined", Adds::Confinement));
        assert_eq!(
            find("memvisor-fpr").unwrap().twin().unwrap().1,
            Adds::BalloonDevice
        );
        assert!(find("memvisor-unconfined").unwrap().twin().is_none());
        assert_eq!(
            f("memvisor-jailed"),
            format!("--api-sock /s --jail /s.jail --uid 899000 --gid 899000 --mem-limit 104857600 --pager full")
        );
        assert_eq!(
            f("memvisor-unconfined"),
            format!("{limited} --pager full --seccomp off")
        );
        let holding: Vec<&str> = CONFIGS
            .iter()
            .filter(|c| c.pager_holds_ram())
            .map(|c| c.name)
            .collect();
        assert!(holding.contains(&"memvisor-pager") && holding.contains(&"memvisor-baseline"));
        for n in ["qemu", "qemu-hostswap", "memvisor", "memvisor-hostswap"] {
            assert!(!holding.contains(&n), "{n}");
        }
    }
}
