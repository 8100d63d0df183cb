//! The scenarios of `consolidate`'s family ([`Scenario`]): which job each VM runs
//! ([`job`]), which disk it reads ([`disk`]), in which order the VMs start and which of their
//! jobs a run measures.

use std::path::Path;

/// What every ratio is taken to, but in `balance` ([`Scenario::reference`]).
pub const REFERENCE: &str = "qemu-nolimit";

/// Which jobs the VMs run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Every VM runs `mapreduce` (VSwapper Fig. 14).
    Mapreduce,
    /// VMs with different needs: `seqread`, `mapreduce`, `kv` in turn.
    Mixed,
    /// HyperDealer2 §6.5 (Table 4, in Table 3's load scenario): memory-intensive `gcchurn` VMs and CPU-bound `kv` VMs in
    /// turn, each guest's page cache warmed first (`warm_mb`, clean:dirty 1:1), each VM with a
    /// disk of its own for that.
    Balance,
    /// HyperDealer2 §6.3 (Fig. 13a): VM 1, the beneficiary, allocates 32 MiB at a time and keeps
    /// it ([`ALLOCATE`]) once the others, its victims, have filled their page caches from disks
    /// of their own and gone idle; the victims are stopped when it is done
    /// ([`Scenario::measured`]).
    AllocateIdle,
    /// The same with the victims overwriting a file after their read, so their page caches are
    /// dirty as they give memory (Fig. 13b–c, whose victims run Tiobench's reads and writes).
    AllocateBusy,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::Mapreduce,
        Scenario::Mixed,
        Scenario::Balance,
        Scenario::AllocateIdle,
        Scenario::AllocateBusy,
    ];

    /// What `memvisor bench allocate` runs when not told.
    pub const ALLOCATE: [Scenario; 2] = [Scenario::AllocateIdle, Scenario::AllocateBusy];

    /// What `memvisor bench consolidate` runs when not told.
    pub const CONSOLIDATE: [Scenario; 2] = [Scenario::Mapreduce, Scenario::Mixed];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Mapreduce => "mapreduce",
            Scenario::Mixed => "mixed",
            Scenario::Balance => "balance",
            Scenario::AllocateIdle => "allocate-idle",
            Scenario::AllocateBusy => "allocate-busy",
        }
    }

    pub fn parse(s: &str) -> Result<Scenario, String> {
        Scenario::ALL
            .into_iter()
            .find(|c| c.name() == s.trim())
            .ok_or_else(|| {
                let all: Vec<&str> = Scenario::ALL.iter().map(|c| c.name()).collect();
                format!("unknown scenario '{s}'; give one of {}", all.join(", "))
            })
    }

    /// Whether VM `vm`'s job is what the run measures. In the `allocate` scenarios only the
    /// beneficiary's is: its victims are stopped once it is done, so their time is none.
    pub fn measured(self, vm: u32) -> bool {
        !self.allocates() || vm == 1
    }

    /// Whether VM 1 is a beneficiary that starts once its victims are warm ([`Scenario::warm`]).
    pub fn allocates(self) -> bool {
        matches!(self, Scenario::AllocateIdle | Scenario::AllocateBusy)
    }

    /// The order `n` VMs start in: VM 1 last where it waits for the others.
    pub fn start_order(self, n: u32) -> Vec<u32> {
        match self.allocates() {
            true => (2..=n).chain(1..=1.min(n)).collect(),
            false => (1..=n).collect(),
        }
    }

    /// The console line each VM started before VM `vm` must have printed before it starts:
    /// in the `allocate` scenarios, the beneficiary waits for every victim's page cache.
    pub fn warm(self, vm: u32) -> Option<&'static str> {
        (self.allocates() && vm == 1).then_some(VICTIM_WARM)
    }

    /// The configuration its ratios are taken to: `qemu-nolimit` (the limit of overcommit), and
    /// for `balance` ballooning (`vswapper-balloon`), as HyperDealer2's Table 4 normalizes.
    pub fn reference(self) -> &'static str {
        match self {
            Scenario::Balance => "vswapper-balloon",
            _ => REFERENCE,
        }
    }

    /// Whether each VM has a writable disk of its own ([`BALANCE_FILES`]) rather than the shared
    /// read-only input.
    pub fn own_disks(self) -> bool {
        self == Scenario::Balance || self.allocates()
    }
}

/// A word count over the shared 128 MiB input (read through the page cache) into four hash
/// tables of a million words.
const MAPREDUCE: &str = "input=src input_mb=128 vocab=1000000 mappers=4";
/// The same 128 MiB file read whole 70 times: a page-cache stream that fits in the guest.
const SEQREAD: &str = "file=src passes=70";
/// A 117 MiB key-value table, YCSB A (50 % reads, 50 % updates) on zipfian keys: a hot set.
const KV: &str = "records=60000 ops=5000000 mix=a";
/// `balance`'s memory-intensive job: a generational collector over a 208 MiB heap (anonymous
/// memory), after 32 MiB of warmed page cache.
const GC_WARM: &str = "heap_mb=208 gen_mb=32 gens=1800 live_pct=10 warm_mb=32";
/// `balance`'s CPU-bound job: reads of a 10 MiB key-value table, after 192 MiB of warmed page
/// cache: the memory the memory-intensive VMs lack is there.
const KV_CPU_WARM: &str = "records=5000 ops=14000000 mix=c warm_mb=192";
/// HyperDealer2 §6.3's beneficiary (Fig. 13): eight allocations of 32 MiB, a host tick (250 ms)
/// apart, each filled with random words and kept, all read back and checked after the last; its
/// time is the allocations' and the read-back's.
const ALLOCATE: &str = "mb=32 rounds=8 keep=1 gap_ms=250";
/// Its victims: a file of their own disk read once into the page cache (clean pages that mirror
/// disk blocks), then idle, or overwriting another file again and again, until stopped.
const VICTIM_IDLE: &str = "file=warm passes=1 then=idle then_secs=3600";
const VICTIM_BUSY: &str =
    "file=warm passes=1 then=write write_file=warm_dirty write_mb=96 then_secs=3600";
/// What a victim prints once its page cache is warm.
pub const VICTIM_WARM: &str = "RESULT workload=seqread phase=pass1 ";
/// The files of each `balance` VM's own disk: what `warm_mb=192` reads and overwrites (a
/// smaller `warm_mb` uses the start of each).
pub const BALANCE_FILES: &str = "warm:96M,warm_dirty:96M";
/// That disk's size.
pub const BALANCE_DISK_MB: u64 = 200;

/// The workload and command line of VM `i` (1-based) in `scenario`.
pub fn job(scenario: Scenario, i: u32) -> (&'static str, &'static str) {
    match (scenario, turn(scenario, i)) {
        (Scenario::Mapreduce, _) | (Scenario::Mixed, 2) => ("mapreduce", MAPREDUCE),
        (Scenario::Mixed, 1) => ("seqread", SEQREAD),
        (Scenario::Mixed, _) => ("kv", KV),
        (Scenario::Balance, 1) => ("gcchurn", GC_WARM),
        (Scenario::Balance, _) => ("kv", KV_CPU_WARM),
        (Scenario::AllocateIdle | Scenario::AllocateBusy, 1) => ("alloc", ALLOCATE),
        (Scenario::AllocateIdle, _) => ("seqread", VICTIM_IDLE),
        (Scenario::AllocateBusy, _) => ("seqread", VICTIM_BUSY),
    }
}

/// The modulus of [`job`]'s turn: `balance` alternates two jobs, `mixed` three; the
/// `allocate` scenarios tell VM 1 from the rest.
fn turn(scenario: Scenario, i: u32) -> u32 {
    match scenario {
        Scenario::Balance => i % 2,
        Scenario::AllocateIdle | Scenario::AllocateBusy => u32::from(i == 1),
        _ => i % 3,
    }
}

/// Where VM `i`'s own disk is in `work`, in a scenario whose VMs have one.
pub fn own_disk(work: &Path, i: u32) -> std::path::PathBuf {
    work.join(format!("balance-vm{i}.img"))
}

/// VM `i`'s disk (a `--disk` value): the shared read-only input in `work`, or in `balance` its
/// own writable disk there ([`own_disk`]), copied from the template before each run.
pub fn disk(scenario: Scenario, i: u32, work: &Path) -> String {
    if scenario.own_disks() {
        format!("{},id=data", own_disk(work, i).display())
    } else {
        format!("{},ro,id=data", work.join("src.img").display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mixed_scenario_runs_each_workload_in_turn() {
        let w: Vec<&str> = (1..=6).map(|i| job(Scenario::Mixed, i).0).collect();
        assert_eq!(w, ["seqread", "mapreduce", "kv"].repeat(2));
        assert!((1..=6).all(|i| job(Scenario::Mapreduce, i).0 == "mapreduce"));
        assert_eq!(Scenario::parse(" mixed").unwrap(), Scenario::Mixed);
        assert!(Scenario::parse("kv")
            .unwrap_err()
            .contains("mapreduce, mixed, balance"));
        let w: Vec<&str> = (1..=4).map(|i| job(Scenario::Balance, i).0).collect();
        assert_eq!(w, ["gcchurn", "kv", "gcchurn", "kv"]);
        assert!((1..=4).all(|i| job(Scenario::Balance, i).1.contains("warm_mb=")));
        assert_eq!(Scenario::Balance.reference(), "vswapper-balloon");
        assert_eq!(Scenario::Mixed.reference(), "qemu-nolimit");
    }

    /// HyperDealer2 §6.3's scenarios: VM 1 the beneficiary, started last once its victims are
    /// warm, the only job measured; the working set measured on memvisor's VMs.
    #[test]
    fn the_allocate_scenarios_start_their_beneficiary_last_and_measure_it_alone() {
        for sc in Scenario::ALLOCATE {
            assert!(sc.allocates() && sc.own_disks());
            assert_eq!(Scenario::parse(sc.name()), Ok(sc));
            assert_eq!(job(sc, 1).0, "alloc");
            assert!(job(sc, 1).1.contains("keep=1"));
            assert!((2..=5).all(|i| job(sc, i).0 == "seqread"));
            assert_eq!(sc.start_order(5), [2, 3, 4, 5, 1]);
            assert_eq!(sc.start_order(1), [1]);
            assert!(sc.measured(1) && !sc.measured(2));
            assert_eq!(sc.warm(1), Some(VICTIM_WARM));
            assert_eq!(sc.warm(3), None);
        }
        assert!(job(Scenario::AllocateBusy, 2).1.contains("then=write"));
        assert!(job(Scenario::AllocateIdle, 2).1.contains("then=idle"));
        for sc in [Scenario::Mixed, Scenario::Balance] {
            assert!(!sc.allocates() && sc.measured(2) && sc.warm(1).is_none());
            assert_eq!(sc.start_order(3), [1, 2, 3]);
        }
        let e = Scenario::parse("allocate").unwrap_err();
        assert!(e.contains("allocate-idle, allocate-busy"), "{e}");
    }
}
