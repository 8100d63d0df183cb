//! The host experiments' common form: VMs that join a running `memvisor host` at given times,
//! its budget, idle tax and sampling, and what each measures; the experiments themselves are
//! `shares`, `idletax` and `reallocation`.

use std::path::Path;
use std::time::Duration;

use memvisor_api::VmSpec;

/// One VM of an experiment and when it joins the host.
#[derive(Clone, Debug)]
pub struct PlannedVm {
    pub spec: VmSpec,
    /// Seconds after the host starts; 0: in the config file.
    pub at: f64,
}

/// A host experiment.
#[derive(Clone, Debug)]
pub struct HostExperiment {
    pub name: &'static str,
    pub about: &'static str,
    /// The host's budget in bytes.
    pub memory: u64,
    /// The idle tax the host starts with.
    pub idle_tax: f64,
    pub sample_pages: u32,
    pub sample_period: Duration,
    pub tick: Duration,
    pub vms: Vec<PlannedVm>,
    /// `(seconds after the host starts, new idle tax)`.
    pub tax_changes: Vec<(f64, f64)>,
    /// Seconds from the host's start to its stop.
    pub duration: f64,
    pub goal: Goal,
    /// Why the configuration is what it is, one line each, for the report.
    pub why: Vec<String>,
}

/// The budget that leaves `usable` bytes to divide among `n` VMs: targets divide the budget
/// minus each VMM's overhead and the high state's 6 % reserve.
pub fn budget_for(usable_mb: u64, n: u64) -> u64 {
    let overhead = memvisor_host::config::DEFAULT_VM_OVERHEAD >> 20;
    // budget - n * overhead - 0.06 * budget = usable
    ((usable_mb + n * overhead) * 100).div_ceil(94) << 20
}

/// What an experiment measures, and with which VMs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// Two VMs that both want more than they get: their allocations should follow their shares.
    Shares {
        big: &'static str,
        small: &'static str,
        /// The shares ratio, big over small.
        ratio: f64,
    },
    /// One idle and one busy VM with equal shares; the idle tax goes from 0 to 0.75 at `switch`.
    IdleTax {
        idle: &'static str,
        busy: &'static str,
        switch: f64,
    },
    /// Several VMs with `min` set: the free-memory states over the run, and VM `returns` that
    /// goes idle in the window `idle` (seconds) and then works again.
    Reallocation {
        returns: &'static str,
        idle: (f64, f64),
    },
}

/// The config file's text for the VMs that start with the host.
pub fn config_text(e: &HostExperiment, state_dir: &Path) -> String {
    let (memory, idle_tax, sample_pages) = (e.memory, e.idle_tax, e.sample_pages);
    let (period, tick) = (e.sample_period.as_millis(), e.tick.as_millis());
    let dir = state_dir.display();
    let mut s = format!("[host]\nmemory = {memory}\nidle_tax = {idle_tax}\nsample_pages = {sample_pages}\nsample_period = \"{period}ms\"\ntick = \"{tick}ms\"\nstate_dir = \"{dir}\"\n");
    for v in e.vms.iter().filter(|v| v.at <= 0.0) {
        let VmSpec {
            name,
            mem,
            min,
            shares,
            cmdline,
            balloon,
            ..
        } = &v.spec;
        let workload = v.spec.workload.as_deref().unwrap_or("boot");
        s.push_str(&format!("\n[[vm]]\nname = \"{name}\"\nmem = {mem}\nshares = {shares}\nworkload = \"{workload}\"\ncmdline = \"{cmdline}\"\n"));
        if *min > 0 {
            s.push_str(&format!("min = {min}\n"));
        }
        if *balloon {
            s.push_str("balloon = true\n");
        }
    }
    s
}
