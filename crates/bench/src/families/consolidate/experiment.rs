//! `memvisor bench consolidate` (VSwapper §5.2, Fig. 14's workload): N VMs started
//! [`INTERVAL`] (or `--interval`) apart in one memory budget ([`Budget`]: a fraction of the scenario's joint
//! working set, swept), all working at once for most of the run; the result is each
//! configuration's mean job time as a ratio to `qemu-nolimit` (the same VMs with all the memory
//! they want), the fraction of the run during which all N jobs ran, and each VMM process's PSS
//! and their sum against the budget.
//!
//! Three scenarios ([`Scenario`]): every VM runs `mapreduce` (VSwapper Fig. 14); VMs with
//! different needs side by side (page-cache streams, hash tables, a hot set), VM i running `seqread`, `mapreduce` and `kv` in turn ([`job`]); and `balance`
//! (HyperDealer2 §6.5, Table 4's scenario, run by `memvisor bench balance`): memory-intensive VMs beside
//! CPU-bound ones, each guest's page cache warmed first with clean and dirty pages 1:1, so the
//! memory the memory-intensive VMs need is in the others' page cache.
//!
//! | configuration | what |
//! |---|---|
//! | `balloon` | `memvisor host`, balloons moved by the host's policy, the pager in baseline mode |
//! | `baseline` | `memvisor host`, no balloon, the pager in baseline mode: the host swapping on its own (VSwapper's "baseline") |
//! | `pager` | `memvisor host`, no balloon: the pager's limits alone |
//! | `vswapper` | `memvisor host`, no balloon, the pager with VSwapper's Mapper and Preventer |
//! | `vswapper-balloon` | both (the paper's combination) |
//! | `hd2` | `vswapper-balloon` with HyperDealer2: `hd2` victims and the host's `balancing = "hd2"` (instant release of clean page-cache pages handed to the VMs that need memory in the same tick) |
//! | `hd2-lru` | `hd2` with the pager's clock victims instead (the paper's "HD2 w/ LRU policy") |
//! | `hd2-whole` | `hd2` with `hd2-whole` victims (whole sequences, the paper's `WHOLE_SEQ`) |
//! | `sharing` | `vswapper-balloon` with page sharing: every VM `sharing = "host"`, KSM's scan rate set by the host from its free memory (docs/sharing.md) |
//! | `hd2-nolimit` | `hd2` with a budget that holds every VM whole: what memvisor and its mechanisms cost when nothing is overcommitted, beside `qemu-nolimit` |
//! | `qemu-static` | QEMU, a static balloon at the VM's share of the budget less QEMU's measured overhead, a memory cgroup at that plus the overhead, host swap on |
//! | `qemu-nolimit` | QEMU, no balloon, no limit: the reference every ratio is taken to |
//!
//! The paper's guests have 2 GB and use about 1 GB, in an 8 GB host; here each guest has
//! [`MEM`], and the budget is given against what the VMs use: their joint working set, measured
//! on QEMU with no limit before the runs, or a fraction of it. The input is one read-only image shared by every VM (the host reads
//! it with `O_DIRECT`, so no VM gains from another's reads).

use std::time::Duration;

use memvisor_api::VmSpec;

use super::scenario::{job, Scenario, REFERENCE};
use crate::harness::setup::host_vm;

/// Guest RAM of each VM.
pub const MEM: u64 = 320 << 20;

/// `balance`'s budget for every VM together, and its default.
pub const BUDGET: u64 = 1024 << 20;

/// Between two VMs' starts when not told (`--interval`). VSwapper's Fig. 14 starts its guests
/// 10 s apart, the period of its balloon manager (MOM's default), with jobs long enough that a
/// seventh guest starts while the first six still run (memory pressure "from seven guests on",
/// §5.2): a job lasts more than six intervals. Here the host plans every 250 ms, so 500 ms gives
/// each arrival two of its decisions. A `mapreduce` job takes about 2 s alone and 5–25 s when
/// 6–8 VMs share 2 cores, so the jobs overlap in part: the report gives the fraction of a run
/// during which all of them ran (up to a third at 8 VMs), where the paper's seventh guest
/// starts while six run.
pub const INTERVAL: Duration = Duration::from_millis(500);

pub const INPUT_MB: u64 = 128;

/// Longest one run (all its VMs) may take.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// How one configuration runs its VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// memvisor's VMs under `memvisor host`.
    Host(HostLaunch),
    /// QEMU with a static balloon at the share and a memory cgroup, host swap on.
    QemuStatic,
    /// QEMU with all the memory it wants.
    QemuNoLimit,
}

/// What memvisor's VMs under `memvisor host` have on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLaunch {
    pub balloon: bool,
    pub vswapper: bool,
    pub baseline: bool,
    /// HyperDealer2: the host balancing by instant release, with this victim order.
    pub hd2: Option<&'static str>,
    /// Page sharing through KSM (`sharing = "host"`), the scanner driven by the host.
    pub sharing: bool,
    /// The host's budget holds every VM whole ([`host_budget`]): nothing is overcommitted.
    pub nolimit: bool,
}

impl HostLaunch {
    /// memvisor's pager alone: every other mechanism off.
    pub const PAGER: HostLaunch = HostLaunch {
        balloon: false,
        vswapper: false,
        baseline: false,
        hd2: None,
        sharing: false,
        nolimit: false,
    };

    /// With these on (each `self` with one more).
    const fn balloon(self) -> HostLaunch {
        HostLaunch {
            balloon: true,
            ..self
        }
    }

    const fn baseline(self) -> HostLaunch {
        HostLaunch {
            baseline: true,
            ..self
        }
    }

    const fn vswapper(self) -> HostLaunch {
        HostLaunch {
            vswapper: true,
            ..self
        }
    }

    /// HyperDealer2's balancing with the victim order `victims`.
    const fn hd2(self, victims: &'static str) -> HostLaunch {
        HostLaunch {
            hd2: Some(victims),
            ..self
        }
    }

    const fn sharing(self) -> HostLaunch {
        HostLaunch {
            sharing: true,
            ..self
        }
    }

    const fn nolimit(self) -> HostLaunch {
        HostLaunch {
            nolimit: true,
            ..self
        }
    }
}

/// A configuration of memvisor's VMs under `memvisor host`.
const fn host(name: &'static str, launch: HostLaunch) -> (&'static str, Launch) {
    (name, Launch::Host(launch))
}

/// The pager with VSwapper and the balloon: what HyperDealer2's configurations add to.
const VSWAPPER_BALLOON: HostLaunch = HostLaunch::PAGER.vswapper().balloon();

/// `hd2-nolimit`: HyperDealer2's configuration in a budget that holds every VM whole.
const NOLIMIT_HOST_LAUNCH: HostLaunch = VSWAPPER_BALLOON.hd2("hd2").nolimit();
const NOLIMIT_HOST: Launch = Launch::Host(NOLIMIT_HOST_LAUNCH);

pub const CONFIGS: [(&str, Launch); 12] = [
    host("balloon", HostLaunch::PAGER.balloon().baseline()),
    host("baseline", HostLaunch::PAGER.baseline()),
    host("pager", HostLaunch::PAGER),
    host("vswapper", HostLaunch::PAGER.vswapper()),
    host("vswapper-balloon", VSWAPPER_BALLOON),
    host("hd2", VSWAPPER_BALLOON.hd2("hd2")),
    host("hd2-lru", VSWAPPER_BALLOON.hd2("clock")),
    host("hd2-whole", VSWAPPER_BALLOON.hd2("hd2-whole")),
    host("sharing", VSWAPPER_BALLOON.sharing()),
    host("hd2-nolimit", NOLIMIT_HOST_LAUNCH),
    ("qemu-static", Launch::QemuStatic),
    ("qemu-nolimit", Launch::QemuNoLimit),
];

/// Where `scenario`'s joint working set is measured: on QEMU with no limit, as every
/// configuration compared to it is bounded by the same budget; in the `allocate` scenarios,
/// where QEMU runs only unlimited, on memvisor's VMs with the whole of it (`hd2-nolimit`), so
/// that a budget of the working set less an amount leaves memvisor's VMs short of that amount
/// and no more (QEMU's own memory beside each guest is larger than memvisor's).
pub fn sized_on(scenario: Scenario) -> Launch {
    match scenario.allocates() {
        true => NOLIMIT_HOST,
        false => Launch::QemuNoLimit,
    }
}

/// A configuration as a run is made with it: one of [`CONFIGS`] and, for `memvisor host`'s,
/// the lines it adds to the host's `[host]` table, checked ([`host_setting`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// As the report names it: the base's name, then each setting of its own after a `+`
    /// (`hd2+balloon_max=0.3`).
    pub name: String,
    pub launch: Launch,
    /// `KEY = VALUE` lines of `[host]`: `--host-set`'s, then its own.
    pub host_set: Vec<String>,
}

impl Config {
    /// One of [`CONFIGS`] as it is.
    fn base(&(name, launch): &(&'static str, Launch)) -> Config {
        Config {
            name: name.to_owned(),
            launch,
            host_set: Vec::new(),
        }
    }

    /// `NAME[+KEY=VALUE]...`: one of [`CONFIGS`], with settings of `memvisor host`'s `[host]`
    /// table of its own, so that one invocation compares host settings on one measured working
    /// set (`hd2,hd2+balloon_max=0.3`).
    pub fn parse(spec: &str) -> Result<Config, String> {
        let parts: Vec<&str> = spec.split('+').map(str::trim).collect();
        let spec = parts.join("+");
        let base = parts[0];
        let Some(found) = CONFIGS.iter().find(|(c, _)| *c == base) else {
            let all: Vec<&str> = CONFIGS.iter().map(|c| c.0).collect();
            return Err(format!(
                "unknown configuration '{base}'; it runs: {}",
                all.join(", ")
            ));
        };
        let mut config = Config::base(found);
        for kv in &parts[1..] {
            if !matches!(config.launch, Launch::Host(_)) {
                return Err(format!(
                    "{spec}: only memvisor host's configurations take settings"
                ));
            }
            let line = host_setting(kv).map_err(|e| format!("{spec}: {e}"))?;
            config.set(line);
        }
        config.name = spec;
        Ok(config)
    }

    /// Adds a `[host]` line, in place of one with the same key.
    fn set(&mut self, line: String) {
        let key = |l: &str| l.split(" = ").next().unwrap_or_default().to_owned();
        let k = key(&line);
        self.host_set.retain(|l| key(l) != k);
        self.host_set.push(line);
    }

    /// `--host-set`'s lines under this configuration's own, which win on the same key; none
    /// for QEMU's configurations.
    #[must_use]
    pub fn under(mut self, everywhere: &[String]) -> Config {
        if matches!(self.launch, Launch::Host(_)) {
            let own = std::mem::take(&mut self.host_set);
            for line in everywhere.iter().cloned().chain(own) {
                self.set(line);
            }
        }
        self
    }
}

/// What `consolidate` runs when not told: every configuration but HyperDealer2's victim-order
/// variants, which `balance` compares, and `baseline`, which VSwapper's set asks for.
pub fn consolidate_configs() -> Vec<Config> {
    bases(|c| !["hd2-lru", "hd2-whole", "baseline"].contains(&c))
}

/// What `balance` runs when not told ([`BALANCE_CONFIGS`]).
pub fn balance_configs() -> Vec<Config> {
    bases(|c| BALANCE_CONFIGS.contains(&c))
}

/// The configurations of [`CONFIGS`] whose names `keep` holds for, as they are.
fn bases(keep: impl Fn(&str) -> bool) -> Vec<Config> {
    let kept = CONFIGS.iter().filter(|(c, _)| keep(c));
    kept.map(Config::base).collect()
}

/// What `memvisor bench balance` runs when not told: ballooning (its reference), HyperDealer2
/// with LRU, with its own order and whole sequences, and the limit (`qemu-nolimit`).
pub const BALANCE_CONFIGS: [&str; 5] =
    ["vswapper-balloon", "hd2-lru", "hd2", "hd2-whole", REFERENCE];

/// `allocate`'s numbers of VMs when not told: the beneficiary beside 1, 2 and 4 victims.
pub const ALLOCATE_VMS: [u32; 3] = [2, 3, 5];

/// `allocate`'s budget when not told: the joint working set less this, so that at least this
/// much of what the beneficiary allocates (256 MiB) must come from its victims.
pub const ALLOCATE_SHORT: u64 = 128 << 20;

/// `balance`'s number of VMs when not told: three memory-intensive and three CPU-bound.
pub const BALANCE_VMS: u32 = 6;

/// The budget of a host configuration's `memvisor host` for `n` VMs: `budget`, or with
/// `nolimit` twice every VM's RAM, so that every VM fits whole with its VMM's overhead and the
/// host stays in its high state.
pub fn host_budget(kind: Launch, n: u32, budget: u64) -> u64 {
    match kind {
        Launch::Host(HostLaunch { nolimit: true, .. }) => 2 * u64::from(n) * MEM,
        _ => budget,
    }
}

/// Whether a configuration's VMs are held to the run's budget: `memvisor host` with a budget
/// and `qemu-static`; not `hd2-nolimit` and `qemu-nolimit`, which run once per scenario and N
/// whatever the budgets swept.
pub fn bounded(kind: Launch) -> bool {
    !matches!(
        kind,
        Launch::QemuNoLimit | Launch::Host(HostLaunch { nolimit: true, .. })
    )
}

/// The keys of `[host]` the bench writes itself, which `--host-set` may not change.
pub const HOST_KEYS_SET: [&str; 6] = [
    "memory",
    "swap",
    "sample_period",
    "state_dir",
    "web_addr",
    "balancing",
];

/// `KEY=VALUE` (of `--host-set`, or after a configuration's `+`), checked: a line of `[host]`
/// (`KEY = VALUE`) that `memvisor host` takes, for a key the bench does not set itself.
pub fn host_setting(kv: &str) -> Result<String, String> {
    let Some((key, value)) = kv.split_once('=') else {
        return Err(format!("{kv}: give KEY=VALUE, e.g. balloon_max=0.3"));
    };
    let (key, value) = (key.trim(), value.trim());
    if HOST_KEYS_SET.contains(&key) {
        return Err(format!(
            "{key}: the bench sets it for every run (it sets {})",
            HOST_KEYS_SET.join(", ")
        ));
    }
    let line = format!("{key} = {value}");
    let text = format!("[host]\nmemory = \"1G\"\n{line}\n");
    memvisor_host::HostConfig::parse(std::path::Path::new("host.toml"), &text)
        .map_err(|e| format!("{kv}: {e}"))?;
    Ok(line)
}

/// The budgets `consolidate` sweeps when not told: the scenario's joint working set, and three
/// quarters and half of it.
pub const FRACTIONS: [f64; 3] = [1.0, 0.75, 0.5];

/// The memory every VM of a run shares: a fraction of the scenario's joint working set
/// ([`ConsolidatePlan::working_sets`]), or an amount.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    Fraction(f64),
    Bytes(u64),
    /// The joint working set less an amount (`ws-96M`): what the VMs need, but that much.
    Less(u64),
}

impl Budget {
    /// `0.75` (a fraction, above 0 and at most 4), `1G` (an amount with its unit) or `ws-96M`
    /// (the joint working set less an amount).
    pub fn parse(s: &str) -> Result<Budget, String> {
        let s = s.trim();
        if let Some(less) = s.strip_prefix("ws-") {
            return memvisor_api::parse_size(less)
                .map(Budget::Less)
                .map_err(|e| format!("{s}: {e}"));
        }
        if s.ends_with(|c: char| c.is_ascii_alphabetic()) {
            let bytes = memvisor_api::parse_size(s)?;
            if bytes < 64 << 20 {
                return Err(format!("{s}: a budget below 64 MiB holds no VM"));
            }
            return Ok(Budget::Bytes(bytes));
        }
        match s.parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 4.0 => Ok(Budget::Fraction(f)),
            _ => Err(format!(
                "'{s}': give a fraction of the joint working set (e.g. 0.75, above 0 and at most 4), an amount (e.g. 1G) or the working set less an amount (e.g. ws-96M)"
            )),
        }
    }

    /// How the report names it: `0.75`, `1024 MiB` or `ws-96 MiB`.
    pub fn label(self) -> String {
        match self {
            Budget::Fraction(f) => format!("{f}"),
            Budget::Bytes(b) => format!("{} MiB", b >> 20),
            Budget::Less(b) => format!("ws-{} MiB", b >> 20),
        }
    }
}

/// The guest memory a `qemu-static` VM gets of `budget` when `n` VMs share it: an equal share
/// less QEMU's own `overhead`, never more than its RAM `mem`. Its balloon leaves the guest this
/// much, and its cgroup's limit is this plus the overhead, so that QEMU is charged its overhead
/// in the budget as memvisor's VMMs are (the summed RSS shows how close it keeps to it).
pub fn qemu_share(budget: u64, n: u32, mem: u64, overhead: u64) -> u64 {
    (budget / u64::from(n.max(1)))
        .saturating_sub(overhead)
        .min(mem)
}

/// The fraction of a run during which all its jobs ran at once: the time from the last job's
/// start to the first job's end, over the time from the first start to the last end. `None`
/// without a job or with a job whose interval is not known.
pub fn overlap_fraction(jobs: &[Option<(f64, f64)>]) -> Option<f64> {
    let jobs: Vec<(f64, f64)> = jobs.iter().copied().collect::<Option<_>>()?;
    let first_start = jobs.iter().map(|j| j.0).reduce(f64::min)?;
    let last_start = jobs.iter().map(|j| j.0).reduce(f64::max)?;
    let first_end = jobs.iter().map(|j| j.1).reduce(f64::min)?;
    let last_end = jobs.iter().map(|j| j.1).reduce(f64::max)?;
    let span = last_end - first_start;
    if span <= 0.0 {
        return None;
    }
    Some(((first_end - last_start).max(0.0) / span).clamp(0.0, 1.0))
}

/// One look at the VMM processes of a run: seconds from its start, and each VMM's proportional
/// set size (its resident pages, a page it shares with another process divided among them) in
/// the order the VMMs started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub t: f64,
    pub each: Vec<u64>,
}

impl Sample {
    /// Every VMM's together: what the VMs hold of the host's memory.
    pub fn sum(&self) -> u64 {
        self.each.iter().sum()
    }
}

/// The VMMs' memory over a run against its budget.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemorySummary {
    /// The highest sum seen.
    pub peak: u64,
    /// The highest any one VMM held.
    pub peak_each: u64,
    /// Seconds during which the sum was above the budget (each sample stands for the time to
    /// the next one).
    pub over_secs: f64,
    /// Samples above the budget.
    pub over_samples: usize,
}

/// [`MemorySummary`] of `samples`, in time order, against `budget` (none: nothing is over).
pub fn memory_summary(samples: &[Sample], budget: Option<u64>) -> MemorySummary {
    let mut s = MemorySummary::default();
    for (i, sample) in samples.iter().enumerate() {
        let sum = sample.sum();
        s.peak = s.peak.max(sum);
        s.peak_each = sample.each.iter().copied().fold(s.peak_each, u64::max);
        if budget.is_some_and(|b| sum > b) {
            s.over_samples += 1;
            if let Some(next) = samples.get(i + 1) {
                s.over_secs += (next.t - sample.t).max(0.0);
            }
        }
    }
    s
}

/// The guest's own seconds for its job, from its console: `phase=done ok=1 ... ms=` where the
/// workload prints it; for `kv`, whose done line has no time, its load and run phases added.
/// `None` if the job did not finish with success.
pub fn job_secs(console: &str, workload: &str) -> Option<f64> {
    let prefix = format!("RESULT workload={workload} ");
    let lines: Vec<&str> = console.lines().filter(|l| l.starts_with(&prefix)).collect();
    let ms = |l: &str| crate::harness::guest::value::<f64>(l, "ms");
    let line = |start: String| lines.iter().find(|l| l.starts_with(&start));
    if let Some(m) = ms(line(format!("{prefix}phase=done ok=1"))?) {
        return Some(m / 1e3);
    }
    let phase = |p: &str| line(format!("{prefix}phase={p} ")).and_then(|l| ms(l));
    Some((phase("load")? + phase("run")?) / 1e3)
}

pub fn spec(i: u32, kind: Launch, scenario: Scenario, disk: &str) -> VmSpec {
    let Launch::Host(HostLaunch {
        balloon,
        vswapper,
        baseline,
        hd2,
        sharing,
        ..
    }) = kind
    else {
        unreachable!("a host configuration");
    };
    let (workload, cmdline) = job(scenario, i);
    VmSpec {
        disks: vec![disk.to_owned()],
        balloon,
        mapper: vswapper,
        preventer: vswapper,
        victims: hd2.map(Into::into),
        pager: baseline.then(|| "baseline".into()),
        sharing: sharing.then(|| "host".into()),
        ..host_vm(&format!("vm{i}"), MEM >> 20, 1000, workload, cmdline.into())
    }
}

/// What `memvisor bench consolidate` or `balance` runs.
pub struct ConsolidatePlan {
    pub ns: Vec<u32>,
    pub scenarios: Vec<Scenario>,
    pub configs: Vec<Config>,
    pub reps: u32,
    /// CPUs of the host: runs of at most this many VMs pin each VMM to its own.
    pub cores: usize,
    /// The budgets swept, each run at every scenario and N.
    pub budgets: Vec<Budget>,
    /// Between two VMs' starts ([`INTERVAL`] unless told).
    pub interval: Duration,
    /// Each scenario's joint working set with N VMs, measured before the runs where a budget is
    /// a fraction of it: the VMs' and their VMMs' memory at its peak with nothing limiting them
    /// (the summed PSS of `qemu-nolimit`'s processes).
    pub working_sets: Vec<(Scenario, u32, u64)>,
    /// QEMU's own memory besides guest RAM, measured, for `qemu-static`'s cgroups.
    pub qemu_overhead: u64,
    /// How the runs were set up, one line each, for the report.
    pub notes: Vec<String>,
}

impl ConsolidatePlan {
    /// The joint working set measured for `scenario` with `n` VMs.
    pub fn working_set(&self, scenario: Scenario, n: u32) -> Option<u64> {
        let mine = |&&(sc, m, _): &&(Scenario, u32, u64)| sc == scenario && m == n;
        self.working_sets.iter().find(mine).map(|w| w.2)
    }

    /// `budget` in bytes for `scenario` with `n` VMs; `None` for a fraction of a working set
    /// not measured.
    pub fn budget_bytes(&self, scenario: Scenario, n: u32, budget: Budget) -> Option<u64> {
        match budget {
            Budget::Bytes(b) => Some(b),
            Budget::Less(b) => Some(
                self.working_set(scenario, n)?
                    .saturating_sub(b)
                    .max(64 << 20),
            ),
            Budget::Fraction(f) => {
                let ws = self.working_set(scenario, n)? as f64;
                // A fraction is above 0 and at most 4 ([`Budget::parse`]): the product is a
                // positive number of bytes well inside u64.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Some((ws * f) as u64)
            }
        }
    }

    /// Whether any budget is relative to a working set, which the runs must measure first.
    pub fn sizes_working_sets(&self) -> bool {
        let fraction = |b: &Budget| matches!(b, Budget::Fraction(_) | Budget::Less(_));
        self.budgets.iter().any(fraction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::consolidate::scenario::disk;
    use std::path::Path;

    #[test]
    fn host_configurations_spell_their_mechanisms() {
        let work = Path::new("/x");
        let image = &disk(Scenario::Mapreduce, 3, work);
        assert_eq!(image, "/x/src.img,ro,id=data");
        let find = |name: &str| CONFIGS.iter().find(|(c, _)| *c == name).unwrap().1;
        let s = spec(3, find("vswapper-balloon"), Scenario::Mapreduce, image);
        assert!(s.balloon && s.mapper && s.preventer && s.pager.is_none());
        assert_eq!(s.name, "vm3");
        assert!(s.check().is_ok());
        let s = spec(1, find("balloon"), Scenario::Mixed, image);
        assert!(s.balloon && !s.mapper && s.pager.as_deref() == Some("baseline"));
        assert_eq!(s.workload.as_deref(), Some("seqread"));
        assert!(s.check().is_ok());
        for (name, victims) in [
            ("hd2", "hd2"),
            ("hd2-lru", "clock"),
            ("hd2-whole", "hd2-whole"),
        ] {
            let own = disk(Scenario::Balance, 2, work);
            let s = spec(2, find(name), Scenario::Balance, &own);
            assert_eq!(s.victims.as_deref(), Some(victims), "{name}");
            assert_eq!(s.disks, ["/x/balance-vm2.img,id=data"]);
            assert!(s.check().is_ok(), "{name}");
        }
    }

    #[test]
    fn only_the_nolimit_host_gets_a_budget_that_holds_every_vm_whole() {
        let find = |name: &str| CONFIGS.iter().find(|(c, _)| *c == name).unwrap().1;
        let (hd2, nolimit) = (find("hd2"), find("hd2-nolimit"));
        let work = Path::new("/x");
        let image = &disk(Scenario::Mapreduce, 1, work);
        let vm = |kind| spec(1, kind, Scenario::Mapreduce, image);
        assert_eq!(vm(hd2), vm(nolimit), "the same VMs");
        for n in [1, 6, 12] {
            assert_eq!(host_budget(hd2, n, BUDGET), BUDGET);
            // Each VM whole, with its VMM's overhead, and the high state's 6 % free to spare.
            let whole = u64::from(n) * (MEM + (64 << 20));
            let budget = host_budget(nolimit, n, BUDGET) as f64;
            assert!(budget * 0.94 >= whole as f64, "{n} VMs");
        }
        assert!(bounded(hd2) && !bounded(nolimit));
        assert!(bounded(Launch::QemuStatic) && !bounded(Launch::QemuNoLimit));
    }

    #[test]
    fn host_settings_are_checked_as_the_host_takes_them() {
        assert_eq!(
            host_setting("balloon_max=0.3"),
            Ok("balloon_max = 0.3".into())
        );
        assert_eq!(
            host_setting("pool_compress = \"lz4\""),
            Ok("pool_compress = \"lz4\"".into())
        );
        for (bad, says) in [
            ("balloon_max", "give KEY=VALUE"),
            ("memory=2G", "the bench sets it"),
            ("balancing=\"hd2\"", "the bench sets it"),
            ("balloon_max=2", "balloon_max"),
            ("no_such_key=1", "no_such_key"),
            ("pool_compress=lz4", "pool_compress"),
        ] {
            let e = host_setting(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            let e = Config::parse(&format!("hd2+{bad}")).unwrap_err();
            assert!(e.starts_with(&format!("hd2+{bad}: ")), "{e}");
        }
    }

    /// A configuration with settings of its own runs beside its base in one invocation; its
    /// settings win over `--host-set`'s on the same key, and QEMU's take none.
    #[test]
    fn a_configuration_may_carry_host_settings_of_its_own() {
        let plain = Config::parse("hd2").unwrap();
        assert_eq!(plain.name, "hd2");
        assert!(plain.host_set.is_empty());
        let capped = Config::parse(" hd2+balloon_max=0.3+pool_compress=\"lz4\" ").unwrap();
        assert_eq!(capped.name, "hd2+balloon_max=0.3+pool_compress=\"lz4\"");
        assert_eq!(capped.launch, plain.launch);
        let everywhere = [
            "balloon_max = 0.5".to_owned(),
            "tick = \"100ms\"".to_owned(),
        ];
        assert_eq!(
            capped.under(&everywhere).host_set,
            [
                "tick = \"100ms\"",
                "balloon_max = 0.3",
                "pool_compress = \"lz4\""
            ]
        );
        assert_eq!(
            plain.under(&everywhere).host_set,
            ["balloon_max = 0.5", "tick = \"100ms\""]
        );
        assert!(Config::parse("qemu-static")
            .unwrap()
            .under(&everywhere)
            .host_set
            .is_empty());
        for (bad, says) in [
            ("qemu-static+balloon_max=0.3", "only memvisor host's"),
            ("hd3", "unknown configuration 'hd3'"),
            ("hd2+", "give KEY=VALUE"),
        ] {
            let e = Config::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_budget_is_a_fraction_of_the_working_set_or_an_amount() {
        assert_eq!(Budget::parse("0.75"), Ok(Budget::Fraction(0.75)));
        assert_eq!(Budget::parse(" 1 "), Ok(Budget::Fraction(1.0)));
        assert_eq!(Budget::parse("1G"), Ok(Budget::Bytes(1 << 30)));
        assert_eq!(Budget::parse("ws-96M"), Ok(Budget::Less(96 << 20)));
        for bad in ["0", "-1", "5", "x", "", "1Q", "16M", "ws-", "ws-x", "ws-1Q"] {
            assert!(Budget::parse(bad).is_err(), "{bad}");
        }
        let plan = ConsolidatePlan {
            ns: vec![6],
            scenarios: vec![Scenario::Mixed],
            configs: Vec::new(),
            reps: 1,
            cores: 2,
            budgets: vec![Budget::Fraction(0.5), Budget::Bytes(1 << 30)],
            interval: INTERVAL,
            working_sets: vec![(Scenario::Mixed, 6, 1500 << 20)],
            qemu_overhead: 0,
            notes: Vec::new(),
        };
        let at = |sc, n, b| plan.budget_bytes(sc, n, b);
        assert_eq!(
            at(Scenario::Mixed, 6, Budget::Fraction(0.5)),
            Some(750 << 20)
        );
        assert_eq!(at(Scenario::Mixed, 4, Budget::Fraction(0.5)), None);
        assert_eq!(
            at(Scenario::Mapreduce, 4, Budget::Bytes(1 << 30)),
            Some(1 << 30)
        );
        assert!(plan.sizes_working_sets());
        let less = |b| at(Scenario::Mixed, 6, Budget::Less(b));
        assert_eq!(less(500 << 20), Some(1000 << 20));
        // Never below what holds a VM.
        assert_eq!(less(1500 << 20), Some(64 << 20));
        assert_eq!(at(Scenario::Mixed, 4, Budget::Less(1)), None);
        assert_eq!(Budget::Less(96 << 20).label(), "ws-96 MiB");
        assert_eq!(
            (
                Budget::Fraction(0.75).label(),
                Budget::Bytes(1 << 30).label()
            ),
            ("0.75".into(), "1024 MiB".into())
        );
    }

    #[test]
    fn the_working_set_of_an_allocate_scenario_is_measured_on_memvisor() {
        for sc in Scenario::ALLOCATE {
            assert_eq!(sized_on(sc), NOLIMIT_HOST);
        }
        for sc in [Scenario::Mixed, Scenario::Balance, Scenario::Mapreduce] {
            assert_eq!(sized_on(sc), Launch::QemuNoLimit);
        }
    }

    #[test]
    fn a_qemu_share_is_an_equal_part_of_the_budget_less_qemus_overhead_capped_at_its_ram() {
        assert_eq!(qemu_share(1024 << 20, 2, 320 << 20, 0), 320 << 20);
        assert_eq!(qemu_share(1024 << 20, 4, 320 << 20, 0), 256 << 20);
        assert_eq!(qemu_share(1024 << 20, 6, 320 << 20, 0), (1024 << 20) / 6);
        assert_eq!(qemu_share(1024 << 20, 0, 320 << 20, 0), 320 << 20);
        // QEMU's overhead comes out of its share of the budget.
        assert_eq!(qemu_share(1024 << 20, 4, 320 << 20, 31 << 20), 225 << 20);
        assert_eq!(qemu_share(1024 << 20, 2, 320 << 20, 31 << 20), 320 << 20);
        assert_eq!(qemu_share(64 << 20, 4, 320 << 20, 31 << 20), 0);
    }

    #[test]
    fn overlap_is_the_time_all_jobs_run_over_the_whole_span() {
        // Starts 0, 1, 2; ends 10, 11, 12: all three run from 2 to 10 of 0..12.
        let j = [Some((0.0, 10.0)), Some((1.0, 11.0)), Some((2.0, 12.0))];
        assert!((overlap_fraction(&j).unwrap() - 8.0 / 12.0).abs() < 1e-9);
        // One after the other: never all at once.
        let j = [Some((0.0, 3.0)), Some((3.0, 6.0))];
        assert_eq!(overlap_fraction(&j), Some(0.0));
        let j = [Some((0.0, 3.0)), Some((4.0, 6.0))];
        assert_eq!(overlap_fraction(&j), Some(0.0));
        assert_eq!(overlap_fraction(&[Some((1.0, 5.0))]), Some(1.0));
        assert_eq!(overlap_fraction(&[Some((0.0, 3.0)), None]), None);
        assert_eq!(overlap_fraction(&[]), None);
    }

    #[test]
    fn memory_over_the_budget_is_counted_in_samples_and_seconds() {
        let at = |t, each: &[u64]| Sample {
            t,
            each: each.to_vec(),
        };
        let samples = [
            at(0.0, &[5]),
            at(0.5, &[6, 6]),
            at(1.0, &[11]),
            at(2.0, &[4, 5]),
            at(2.5, &[13, 7]),
        ];
        let s = memory_summary(&samples, Some(10));
        assert_eq!((s.peak, s.peak_each), (20, 13));
        assert_eq!(s.over_samples, 3);
        // 0.5..1.0 and 1.0..2.0 above; the last sample has no next one.
        assert!((s.over_secs - 1.5).abs() < 1e-9);
        assert_eq!(memory_summary(&[], Some(10)), MemorySummary::default());
        assert_eq!(memory_summary(&samples[..1], Some(5)).over_samples, 0);
        let unbounded = memory_summary(&samples, None);
        assert_eq!((unbounded.peak, unbounded.over_samples), (20, 0));
    }

    #[test]
    fn job_seconds_come_from_the_done_line_or_kv_phases() {
        let mr = "x\nRESULT workload=mapreduce phase=map ms=10\nRESULT workload=mapreduce phase=done ok=1 words=3 ms=5615.2 free_kb=1\n";
        assert_eq!(job_secs(mr, "mapreduce"), Some(5.6152));
        let kv = "RESULT workload=kv phase=load records=6 ms=200.5 ops_s=1\nRESULT workload=kv phase=run ok=1 mix=a ops=9 ms=799.5 ops_s=2\nRESULT workload=kv phase=done ok=1\n";
        assert_eq!(job_secs(kv, "kv"), Some(1.0));
        let failed = "RESULT workload=kv phase=load ms=1\nRESULT workload=kv phase=done ok=0\n";
        assert_eq!(job_secs(failed, "kv"), None);
        assert_eq!(job_secs(mr, "kv"), None);
        assert_eq!(job_secs("RESULT workload=kv phase=done ok=1\n", "kv"), None);
    }
}
