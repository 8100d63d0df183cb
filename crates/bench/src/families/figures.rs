//! What each experiment reproduces, as data ([`EXPERIMENTS`]): the one place where an
//! experiment names the papers' figures and tables it measures. `memvisor bench --help`, the
//! list an unknown name is answered with, the opening line of every report and the families
//! table of `docs/bench.md` (a test checks it is the one [`families_table`] makes) are made from
//! it, so a label cannot promise in one place what the experiment does not measure.

use super::published;
use crate::report::claims::Claim;

/// Which family's driver runs an experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Phases,
    Host,
    Consolidate,
    Balance,
    Allocate,
    Swapin,
    ReclaimDelay,
    Dwell,
    Sharing,
    Confinement,
    Mobility,
}

/// One experiment and what it reproduces.
#[derive(Clone, Copy, Debug)]
pub struct Reproduces {
    pub name: &'static str,
    pub family: Family,
    /// The paper and section (`VSwapper §3.1`), empty when no paper's experiment is its subject.
    pub paper: &'static str,
    /// The figures and tables it measures, each as the paper numbers it (`Fig. 9a`).
    pub figures: &'static [&'static str],
    /// How it stands to them: at which points, what it leaves out, or what it measures when no
    /// paper's figure is its subject.
    pub scope: &'static str,
    /// What its results are set beside.
    pub peer: &'static str,
    /// Its section in `docs/bench.md`, as a link target there.
    pub section: &'static str,
    /// The flags `memvisor bench reproduce` runs it with at `--scale quick` and at `--scale
    /// full`, beside those two (as a user types them).
    pub quick: &'static str,
    pub full: &'static str,
    /// The paper's published values, each beside the cell of its report that holds ours.
    pub claims: &'static [Claim],
}

impl Reproduces {
    /// `VSwapper §3.1, Fig. 9a, Fig. 9d (Fig. 3's set-up)`: the paper, its figures, the scope.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if !self.paper.is_empty() {
            parts.push(self.paper.to_owned());
        }
        parts.extend(self.figures.iter().map(|f| (*f).to_owned()));
        let mut text = parts.join(", ");
        match (text.is_empty(), self.scope.is_empty()) {
            (_, true) => {}
            (true, false) => text = self.scope.to_owned(),
            (false, false) => text = format!("{text} ({})", self.scope),
        }
        text
    }

    /// A report's opening: its title, what it reproduces, what its results are set beside,
    /// and where the docs explain it.
    fn heading(&self) -> String {
        format!(
            "# memvisor bench {}\n\nReproduces: {}. Beside it: {}. How it runs and how to read it: `docs/bench.md`, section `{}`.\n\n",
            self.name,
            self.label(),
            self.peer,
            self.section
        )
    }
}

/// `recovery` under another of MemFlex's YCSB workloads (`scope` names it): the same figures,
/// peer, section and flags for each.
const fn recovery_mix(name: &'static str, scope: &'static str) -> Reproduces {
    Reproduces {
        name,
        family: Family::Phases,
        paper: "MemFlex §4.1",
        figures: &["Fig. 5", "Fig. 6"],
        scope,
        peer: "QEMU with a balloon",
        section: "#recovery-insert-recovery-update-recovery-scan-memflex-41-figs-56-the-other-ycsb-workloads",
        quick: "--reps 1 --configs memvisor-pager,memvisor-pool-proactive",
        full: "",
        claims: &[],
    }
}

/// Every experiment `memvisor bench` runs, in the order its help and docs list them.
pub const EXPERIMENTS: &[Reproduces] = &[
    Reproduces {
        name: "seqread",
        family: Family::Phases,
        paper: "VSwapper §3.1",
        figures: &["Fig. 9a", "Fig. 9b", "Fig. 9c", "Fig. 9d"],
        scope: "Fig. 3's set-up",
        peer: "QEMU, in a cgroup with host swap and with a balloon",
        section: "#seqread-vswapper-31-fig-9a9d-a-file-read-again-under-a-limit",
        quick: "--reps 1",
        full: "",
        claims: published::SEQREAD,
    },
    Reproduces {
        name: "alloc",
        family: Family::Phases,
        paper: "VSwapper §3.1",
        figures: &["Fig. 10"],
        scope: "",
        peer: "the same",
        section: "#alloc-vswapper-31-fig-10-memory-allocated-over-swapped-pages",
        quick: "--reps 1",
        full: "",
        claims: published::ALLOC,
    },
    Reproduces {
        name: "compress",
        family: Family::Phases,
        paper: "VSwapper §5.1",
        figures: &["Fig. 5", "Fig. 11a", "Fig. 11b"],
        scope: "the guest kit's DEFLATE compressor where the paper has pbzip2, at 4 limits of 128–512 MiB",
        peer: "QEMU with a balloon",
        section: "#compress-vswapper-51-fig-5-a-compressor-against-the-memory-it-has",
        quick: "--reps 1",
        full: "",
        claims: published::COMPRESS,
    },
    Reproduces {
        name: "compile",
        family: Family::Phases,
        paper: "VSwapper §5.1",
        figures: &["Fig. 12a", "Fig. 12b"],
        scope: "the guest kit's build where the paper has Kernbench, at 4 limits of 128–512 MiB",
        peer: "QEMU with a balloon",
        section: "#compile-vswapper-51-fig-12-a-build-against-the-memory-it-has",
        quick: "--reps 1",
        full: "",
        claims: published::COMPILE,
    },
    Reproduces {
        name: "gcchurn",
        family: Family::Phases,
        paper: "VSwapper §5.1",
        figures: &["Fig. 13"],
        scope: "the guest kit's generational collector where the paper has Eclipse on a JVM, at 4 limits of 192–512 MiB",
        peer: "QEMU with a balloon",
        section: "#gcchurn-vswapper-51-fig-13-a-collector-against-the-memory-it-has",
        quick: "--reps 1",
        full: "",
        claims: published::GCCHURN,
    },
    Reproduces {
        name: "tracked",
        family: Family::Phases,
        paper: "VSwapper §5.3",
        figures: &["Fig. 15"],
        scope: "the guest kit's build where the paper has Eclipse",
        peer: "the guest's own page cache",
        section: "#tracked-vswapper-53-fig-15-what-the-swap-mapper-tracks",
        quick: "",
        full: "",
        claims: published::TRACKED,
    },
    Reproduces {
        name: "overhead",
        family: Family::Phases,
        paper: "",
        figures: &[],
        scope: "memory to spare: what running on memvisor, a balloon device and confinement cost",
        peer: "QEMU, no limit",
        section: "#overhead-memory-to-spare",
        quick: "",
        full: "",
        claims: &[],
    },
    Reproduces {
        name: "ballooned",
        family: Family::Phases,
        paper: "ESX §3.2",
        figures: &["Fig. 2"],
        scope: "the guest kit's build where the paper has dbench, at 5 sizes of 128–256 MiB",
        peer: "the same VMs on QEMU",
        section: "#ballooned-esx-32-fig-2-ballooned-to-a-size-against-made-at-it",
        quick: "--reps 1",
        full: "",
        claims: published::BALLOONED,
    },
    Reproduces {
        name: "workingset",
        family: Family::Phases,
        paper: "ESX §5.3",
        figures: &["Fig. 6"],
        scope: "",
        peer: "the paper's figure",
        section: "#workingset-esx-53-fig-6-the-working-set-estimate",
        quick: "",
        full: "",
        claims: &[],
    },
    Reproduces {
        name: "recovery",
        family: Family::Phases,
        paper: "MemFlex §4.1",
        figures: &["Fig. 5(c)", "Fig. 6"],
        scope: "under YCSB Read",
        peer: "QEMU with host swap and with a balloon",
        section: "#recovery-memflex-41-fig-5c-throughput-through-a-hog-and-back",
        quick: "--reps 1 --configs memvisor-pager,memvisor-pool-proactive,memvisor-balloon-ramdisk",
        full: "",
        claims: published::RECOVERY,
    },
    recovery_mix("recovery-insert", "under YCSB Insert"),
    recovery_mix("recovery-update", "under YCSB Update"),
    recovery_mix("recovery-scan", "under YCSB Scan"),
    Reproduces {
        name: "doublepaging",
        family: Family::Phases,
        paper: "Tesseract §6.1",
        figures: &["Figs. 10–16", "Tables 1–3", "Table 4"],
        scope: "§6.1's set-up at one point, 12.5 % host overcommitment and one hog size; Table 4 with a read's preparing and completing as one span",
        peer: "QEMU with host swap",
        section: "#doublepaging-tesseract-6-a-guest-swapping-pages-its-host-swapped",
        quick: "--reps 1 --configs memvisor-pager,memvisor-tesseract --reference memvisor-pager",
        full: "",
        claims: published::DOUBLEPAGING,
    },
    Reproduces {
        name: "overcommit",
        family: Family::Phases,
        paper: "Tesseract §6.2.2",
        figures: &["Fig. 12", "Fig. 14", "Fig. 16", "Tables 1–2"],
        scope: "doublepaging's run at host overcommitment 0–20 %, one hog size",
        peer: "QEMU with host swap",
        section: "#overcommit-tesseract-622-figs-12-14-16-the-same-across-host-overcommitment",
        quick: "--reps 1 --configs memvisor-pager,memvisor-tesseract",
        full: "",
        claims: &[],
    },
    Reproduces {
        name: "pressure",
        family: Family::Phases,
        paper: "Tesseract §6.2.1",
        figures: &["Fig. 10", "Fig. 11"],
        scope: "doublepaging's run at 10 % host overcommitment, the hog's size swept",
        peer: "the pager without Tesseract",
        section: "#pressure-tesseract-621-figs-10-11-against-guest-memory-pressure",
        quick: "--reps 1",
        full: "--reps 5",
        claims: &[],
    },
    Reproduces {
        name: "shares",
        family: Family::Host,
        paper: "ESX §5.1",
        figures: &[],
        scope: "two VMs with shares 2:1 on memvisor host",
        peer: "the paper (QEMU has no share-based allocator)",
        section: "#esxs-allocation-policy-on-memvisor-host-shares-and-idletax",
        quick: "",
        full: "",
        claims: &[],
    },
    Reproduces {
        name: "idletax",
        family: Family::Host,
        paper: "ESX §5.2",
        figures: &["Fig. 7"],
        scope: "",
        peer: "the paper (QEMU has no idle memory tax)",
        section: "#esxs-allocation-policy-on-memvisor-host-shares-and-idletax",
        quick: "",
        full: "",
        claims: published::IDLETAX,
    },
    Reproduces {
        name: "reallocation",
        family: Family::Host,
        paper: "ESX §6.3",
        figures: &["Fig. 8"],
        scope: "five guest kit VMs of 256 and 320 MiB with min = max / 2 where the paper has five Windows VMs",
        peer: "the paper (QEMU has no share-based allocator)",
        section: "#reallocation-esx-63-fig-8-five-vms-min-and-the-free-memory-states",
        quick: "",
        full: "",
        claims: published::REALLOCATION,
    },
    Reproduces {
        name: "consolidate",
        family: Family::Consolidate,
        paper: "VSwapper §5.2",
        figures: &["Fig. 14"],
        scope: "its workload, 6 VMs started 0.5 s apart (the paper's 10 s, in proportion to a job and to the host's period), in budgets of 1, 0.75 and 0.5 of their joint working set",
        peer: "QEMU in memory cgroups with static balloons, and unlimited",
        section: "#consolidate-vswapper-52-fig-14-many-vms-in-one-budget",
        quick: "--vms 2 --scenario mapreduce --configs balloon,vswapper-balloon --budget 0.75 --reps 1",
        full: "--scenario mapreduce --vms 2,6,8 --budget 1G --configs baseline,balloon,vswapper,vswapper-balloon,qemu-static,qemu-nolimit --reps 2",
        claims: published::CONSOLIDATE,
    },
    Reproduces {
        name: "balance",
        family: Family::Balance,
        paper: "HyperDealer2 §6.5",
        figures: &["Table 4"],
        scope: "its scenario at 6 VMs",
        peer: "ballooning, and QEMU unlimited",
        section: "#balance-hyperdealer2-65-tables-34-memory-intensive-vms-beside-cpu-bound-ones",
        quick: "--vms 2 --configs vswapper-balloon,hd2 --reps 1",
        full: "",
        claims: published::BALANCE,
    },
    Reproduces {
        name: "allocate",
        family: Family::Allocate,
        paper: "HyperDealer2 §6.3",
        figures: &["Fig. 13"],
        scope: "the beneficiary's eight 32 MiB allocations, 250 ms apart, and its read-back, beside 1, 2 and 4 victims of one vCPU, idle or writing, in a budget of the joint working set less 128 MiB",
        peer: "QEMU unlimited; the paper gives its values only in the figure",
        section: "#allocate-hyperdealer2-63-fig-13-a-beneficiary-allocating-beside-victims",
        quick: "--vms 2 --scenario allocate-idle --configs vswapper-balloon,hd2 --reps 1",
        full: "--reps 3",
        claims: &[],
    },
    Reproduces {
        name: "swapin",
        family: Family::Swapin,
        paper: "MemFlex §4.2",
        figures: &["Table 1", "Fig. 7a", "Fig. 7b"],
        scope: "Table 1's totals; Fig. 7b at 0, 25, 50, 75 and 100 % on disk",
        peer: "memvisor's fault modes, and the paper",
        section: "#swapin-memflex-table-1-fig-7a-bringing-memory-back",
        quick: "--sizes 128M --reps 1 --configs pool-proactive,disk-proactive,pool-faults,disk50-proactive",
        full: "",
        claims: published::SWAPIN,
    },
    Reproduces {
        name: "reclaimdelay",
        family: Family::ReclaimDelay,
        paper: "HyperDealer2 §6.2",
        figures: &["Table 2", "Fig. 11", "Fig. 12"],
        scope: "Fig. 11 at 1, 2 and 4 victims of one vCPU; Fig. 12 at one victim of 1, 2 and 4 vCPUs",
        peer: "QEMU's balloon",
        section: "#reclaimdelay-hyperdealer2-62-table-2-figs-1112-taking-pages-from-victim-vms",
        quick: "--reps 1 --scenario idle,busy-dirty --configs hd2-ready,balloon,qemu-balloon",
        full: "",
        claims: published::RECLAIMDELAY,
    },
    Reproduces {
        name: "patterns",
        family: Family::Phases,
        paper: "HyperDealer2 §6.4",
        figures: &["Fig. 10"],
        scope: "the guest kit's workloads that read a disk where the paper has SPEC CPU2006, Tiobench and Dbench",
        peer: "nothing: the paper gives its values only in the figure",
        section: "#patterns-hyperdealer2-64-fig-10-the-reference-patterns-of-each-workload",
        quick: "--reps 1",
        full: "",
        claims: &[],
    },
    Reproduces {
        name: "dwell",
        family: Family::Dwell,
        paper: "HyperDealer2 §6.4",
        figures: &["Fig. 14"],
        scope: "",
        peer: "memvisor's other victim policies",
        section: "#dwell-hyperdealer2-64-fig-14-how-long-released-pages-stay-out",
        quick: "--reps 1 --configs clock,random,hd2",
        full: "",
        claims: published::DWELL,
    },
    Reproduces {
        name: "sharing",
        family: Family::Sharing,
        paper: "ESX §4.3",
        figures: &["Fig. 4"],
        scope: "with the guest's timing probe",
        peer: "QEMU with KSM",
        section: "#sharing-esx-43-fig-4-and-zeroboot-esx-63-page-sharing-through-ksm",
        quick: "--vms 2 --configs memvisor-off,memvisor-host",
        full: "",
        claims: published::SHARING,
    },
    Reproduces {
        name: "zeroboot",
        family: Family::Sharing,
        paper: "ESX §6.3",
        figures: &[],
        scope: "VMs that zero their memory as they boot",
        peer: "QEMU with KSM",
        section: "#sharing-esx-43-fig-4-and-zeroboot-esx-63-page-sharing-through-ksm",
        quick: "--configs memvisor,memvisor-ksm",
        full: "",
        claims: &[],
    },
    Reproduces {
        name: "confinement",
        family: Family::Confinement,
        paper: "",
        figures: &[],
        scope: "what the seccomp filters cost, on guest exits, pager faults and each of their calls",
        peer: "memvisor with --seccomp off",
        section: "#confinement-what-the-filters-cost",
        quick: "",
        full: "",
        claims: &[],
    },
    Reproduces {
        name: "mobility",
        family: Family::Mobility,
        paper: "",
        figures: &[],
        scope: "snapshot, lazy restore, and post-copy and pre-copy live migration: time to the first instruction, downtime, bytes sent, the guest's slowdown",
        peer: "QEMU microvm's save to a file, `-incoming`, pre-copy and post-copy",
        section: "#mobility-restore-and-live-migration",
        quick: "",
        full: "",
        claims: &[],
    },
];

/// A paper whose experiments `memvisor bench reproduce` runs as one set.
#[derive(Clone, Copy, Debug)]
pub struct PaperSet {
    /// What `reproduce` is given (`esx`).
    pub key: &'static str,
    /// Its short name, as each experiment's `paper` begins (`ESX`).
    pub short: &'static str,
    pub citation: &'static str,
}

/// The five papers, as `docs/papers.md` cites them.
pub const PAPERS: &[PaperSet] = &[
    PaperSet {
        key: "esx",
        short: "ESX",
        citation: "Carl A. Waldspurger. *Memory Resource Management in VMware ESX Server.* OSDI '02",
    },
    PaperSet {
        key: "vswapper",
        short: "VSwapper",
        citation: "Nadav Amit, Dan Tsafrir, Assaf Schuster. *VSwapper: A Memory Swapper for Virtualized Environments.* ASPLOS '14",
    },
    PaperSet {
        key: "tesseract",
        short: "Tesseract",
        citation: "Kapil Arya, Yury Baskakov, Alex Garthwaite. *Tesseract: Reconciling Guest I/O and Hypervisor Swapping in a VM.* VEE '14",
    },
    PaperSet {
        key: "memflex",
        short: "MemFlex",
        citation: "Qi Zhang, Ling Liu, Gong Su, Arun Iyengar. *MemFlex: A Shared Memory Swapper for High Performance VM Execution.* IEEE Transactions on Computers 66(9), 2017",
    },
    PaperSet {
        key: "hyperdealer2",
        short: "HyperDealer2",
        citation: "Woomin Hwang, Ki-Woong Park, Kyu Ho Park. *Reference Pattern-Aware Instant Memory Balancing for Consolidated Virtual Machines on Manycores.* IEEE Transactions on Parallel and Distributed Systems 26, 2015",
    },
];

impl PaperSet {
    /// The paper called `key`.
    pub fn find(key: &str) -> Option<&'static PaperSet> {
        PAPERS.iter().find(|p| p.key == key)
    }

    /// Its experiments, in the order of [`EXPERIMENTS`].
    pub fn experiments(&self) -> impl Iterator<Item = &'static Reproduces> + '_ {
        EXPERIMENTS
            .iter()
            .filter(move |e| e.paper.split(' ').next() == Some(self.short))
    }
}

/// The experiment called `name`.
pub fn find(name: &str) -> Option<&'static Reproduces> {
    EXPERIMENTS.iter().find(|e| e.name == name)
}

/// The names of `family`'s experiments.
#[cfg(test)]
pub fn of(family: Family) -> Vec<&'static str> {
    let mine = EXPERIMENTS.iter().filter(|e| e.family == family);
    mine.map(|e| e.name).collect()
}

/// The opening of the report of the experiment `name` ([`Reproduces::heading`]).
pub fn heading(name: &str) -> String {
    find(name).map_or_else(
        || format!("# memvisor bench {name}\n\n"),
        Reproduces::heading,
    )
}

/// Every experiment's name, comma-separated.
pub fn names() -> String {
    let names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
    names.join(", ")
}

/// `memvisor bench --help`'s text for the experiment argument.
pub fn help() -> String {
    let each: Vec<String> = EXPERIMENTS
        .iter()
        .map(|e| format!("  {}: {}", e.name, e.label()))
        .collect();
    let papers: Vec<&str> = PAPERS.iter().map(|p| p.key).collect();
    format!(
        "The experiment, and what it reproduces:\n{}\n  reproduce PAPER: every experiment of one paper's set ({}), each published value beside ours",
        each.join("\n"),
        papers.join(", ")
    )
}

/// The families table of `docs/bench.md`: each experiment, what it reproduces, its peer, its
/// section. A test checks the docs hold it.
#[cfg(test)]
fn families_table() -> String {
    let mut t = String::from("| experiment | reproduces | peer | section |\n|---|---|---|---|\n");
    for e in EXPERIMENTS {
        t.push_str(&format!(
            "| `{}` | {} | {} | [{}]({}) |\n",
            e.name,
            e.label(),
            e.peer,
            e.name,
            e.section
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in `docs/bench.md` is the one made from the data, so the docs name exactly
    /// the figures each experiment declares; every section it links to is there.
    #[test]
    fn the_docs_families_table_is_made_from_the_data() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bench.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let table = families_table();
        assert!(
            doc.contains(&table),
            "docs/bench.md's families table is not the one the data makes; it should read:\n{table}"
        );
        for e in EXPERIMENTS {
            let title = e.section.trim_start_matches('#');
            let headings: Vec<String> = doc
                .lines()
                .filter(|l| l.starts_with("## ") || l.starts_with("### "))
                .map(anchor)
                .collect();
            assert!(
                headings.iter().any(|h| h == title),
                "{}: no section {title}",
                e.name
            );
        }
    }

    /// GitHub's anchor of a Markdown heading: lower case, spaces to dashes, punctuation gone.
    fn anchor(heading: &str) -> String {
        let text = heading.trim_start_matches('#').trim().to_lowercase();
        let kept = text.chars().filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        });
        kept.collect()
    }

    /// The README lists every experiment, and the help names each with its label.
    #[test]
    fn the_readme_and_the_help_name_every_experiment() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let help = help();
        for e in EXPERIMENTS {
            let line = format!("memvisor bench {}", e.name);
            assert!(readme.contains(&line), "README does not list {}", e.name);
            let line = format!("  {}: {}", e.name, e.label());
            assert!(help.lines().any(|l| l == line), "{line}");
        }
    }
}
