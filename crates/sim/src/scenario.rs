//! A scenario file (TOML): the host, groups of VMs with their generators, the duration and the
//! seed. A seed and a scenario fully determine a run. Bad input is refused with one line naming
//! the file and the field.

use std::path::Path;

use memvisor_policy::{HostParams, Thresholds};
use serde::Deserialize;
use thiserror::Error;

use crate::costs::Costs;
use crate::units::{Secs, Size};
use crate::workload::Workload;

/// Why a scenario was refused: one line naming the file and the field.
#[derive(Debug, Error)]
#[error("{file}: {field}: {message}")]
pub struct ScenarioError {
    pub file: String,
    pub field: String,
    pub message: String,
}

/// Which policy decides: memvisor's, or one of the simulator's own baselines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// `memvisor_policy::plan`, as `memvisor host` runs it.
    #[default]
    Esx,
    /// Baseline: each VM's share of the budget by shares, fixed at start (no policy).
    Static,
    /// Baseline: a MOM-like threshold rule (the simulator's own, not memvisor's policy).
    Threshold,
}

/// How memory moves between VMs under memvisor's policy (`[host] balancing`, as on the host).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balancing {
    /// ESX's balloons and pager limits only.
    #[default]
    Balloon,
    /// HyperDealer2's instant releases of clean page cache on top (`memvisor_policy::balance`),
    /// every VM with the Swap Mapper.
    Hd2,
}

/// Which pages a pager limit takes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Victim {
    /// Least recently used first: cold pages go before the working set.
    #[default]
    Lru,
    /// At random over the resident pages (ESX §4).
    Random,
}

#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdsSection {
    pub high: f64,
    pub soft: f64,
    pub hard: f64,
    pub low: f64,
}

impl Default for ThresholdsSection {
    fn default() -> Self {
        let t = Thresholds::default();
        ThresholdsSection {
            high: t.high,
            soft: t.soft,
            hard: t.hard,
            low: t.low,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    /// Memory for every VM together, overheads included.
    pub budget: Size,
    #[serde(default = "tax")]
    pub idle_tax: f64,
    #[serde(default = "tick")]
    pub tick: Secs,
    #[serde(default)]
    pub pool: Size,
    /// Swap the host can give VMs (admission reserves `max − min` of it); unlimited if absent.
    pub swap: Option<Size>,
    /// Each VMM's overhead (the host's default `vm_overhead`: 24 MiB).
    #[serde(default = "overhead")]
    pub overhead: Size,
    #[serde(default = "sample_pages")]
    pub sample_pages: u32,
    #[serde(default = "sample_period")]
    pub sample_period: Secs,
    #[serde(default)]
    pub policy: PolicyKind,
    #[serde(default)]
    pub thresholds: ThresholdsSection,
    #[serde(default)]
    pub victim: Victim,
    #[serde(default)]
    pub balancing: Balancing,
    /// With `hd2`: how long a VM is out of balancing, or idle, before its capacity gap is
    /// closed (the host's `gap_idle`).
    #[serde(default = "gap_idle")]
    pub gap_idle: Secs,
    /// The pager's smallest limit (the host's `MIN_LIMIT`, 16 MiB).
    #[serde(default = "min_limit")]
    pub min_limit: Size,
    /// The threshold baseline: inflate below this free fraction of the budget...
    #[serde(default = "mom_low")]
    pub mom_low: f64,
    /// ...and deflate above this one.
    #[serde(default = "mom_high")]
    pub mom_high: f64,
}

fn tax() -> f64 {
    0.75
}
fn tick() -> Secs {
    Secs(1.0)
}
fn overhead() -> Size {
    Size(24 << 20)
}
fn sample_pages() -> u32 {
    100
}
fn sample_period() -> Secs {
    Secs(30.0)
}
fn gap_idle() -> Secs {
    Secs(memvisor_policy::balance::GAP_IDLE_SECONDS)
}
fn min_limit() -> Size {
    Size(16 << 20)
}
fn mom_low() -> f64 {
    0.20
}
fn mom_high() -> f64 {
    0.30
}
fn one() -> u32 {
    1
}
fn shares() -> u64 {
    1000
}
fn yes() -> bool {
    true
}

/// `count` VMs alike.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub name: String,
    #[serde(default = "one")]
    pub count: u32,
    /// Guest RAM (the VM's `max`).
    pub mem: Size,
    #[serde(default)]
    pub min: Size,
    #[serde(default = "shares")]
    pub shares: u64,
    #[serde(default = "yes")]
    pub balloon: bool,
    /// Seconds of work at full speed; the VM completes when it has done them. Without it the
    /// VM runs for the whole scenario.
    pub work: Option<Secs>,
    /// The VM stops once its work is done (a guest kit workload's VM exits), and its memory
    /// returns to the host.
    #[serde(default)]
    pub exit: bool,
    /// The VM stops this long after it started, whatever its work (a workload that runs for a
    /// set time).
    pub lifetime: Option<Secs>,
    pub workload: Workload,
}

/// What the run writes.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Output {
    /// A CSV row every this many ticks.
    pub every: u32,
    /// CSV rows for the first this many VMs only (all if absent).
    pub vms: Option<u32>,
}

impl Default for Output {
    fn default() -> Self {
        Output {
            every: 1,
            vms: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default = "seed")]
    pub seed: u64,
    pub duration: Secs,
    pub host: HostSection,
    #[serde(default)]
    pub costs: Costs,
    #[serde(default)]
    pub output: Output,
    #[serde(rename = "group", default)]
    pub groups: Vec<Group>,
    /// Several hosts alike, the VMs placed on them by an orchestrator (fleet.rs).
    pub fleet: Option<FleetSection>,
}

/// How the orchestrator picks a host for a VM, from what each host's API tells it: whether
/// admission would take the VM (`admit`) and the host's free memory (`GET /host`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// The first host, in order, whose admission takes it.
    #[default]
    First,
    /// Of the hosts whose admission takes it, the one with the most free memory.
    Spread,
    /// Of the hosts whose admission takes it and that have `need` of its RAM free, the one
    /// with the least free memory (best fit).
    Pack,
    /// Of the hosts whose admission takes it, the one whose VMs actively use the least memory
    /// (the sum of each VM's active fraction times its resident memory, as `GET /vms` reports
    /// `active` bytes).
    LeastActive,
}

impl Placement {
    /// As a scenario writes it.
    pub fn name(self) -> &'static str {
        match self {
            Placement::First => "first",
            Placement::Spread => "spread",
            Placement::Pack => "pack",
            Placement::LeastActive => "least_active",
        }
    }
}

/// `[fleet]`: `hosts` hosts of the `[host]` section; the scenario's VMs arrive one by one,
/// `arrival` seconds apart, in an order drawn from the seed, and each is placed by `placement`.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSection {
    pub hosts: u32,
    #[serde(default)]
    pub placement: Placement,
    #[serde(default)]
    pub arrival: Secs,
    /// `pack` only: the fraction of a VM's RAM a host must have free to take it.
    #[serde(default = "need")]
    pub need: f64,
}

fn need() -> f64 {
    0.5
}

fn seed() -> u64 {
    1
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            field: "file".into(),
            message: format!("cannot be read: {e}"),
        })?;
        Scenario::parse(&file, &text)
    }

    /// Parses and checks scenario text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| {
            // The line the error is on names the field; toml's own message is several lines.
            let missing = e
                .message()
                .strip_prefix("missing field `")
                .and_then(|m| m.split('`').next());
            let (field, line) = match e.span() {
                Some(_) if missing.is_some() => (missing.unwrap_or("").to_owned(), String::new()),
                Some(span) => {
                    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                    let src = text.lines().nth(line - 1).unwrap_or("").trim();
                    let key = src.split('=').next().unwrap_or(src).trim();
                    (key.to_owned(), format!(" (line {line}: {src})"))
                }
                None => ("file".to_owned(), String::new()),
            };
            ScenarioError {
                file: file.to_owned(),
                field,
                message: format!("{}{line}", e.message().trim()),
            }
        })?;
        s.check().map_err(|(field, message)| ScenarioError {
            file: file.to_owned(),
            field,
            message,
        })?;
        Ok(s)
    }

    fn check(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((f.to_owned(), m));
        let h = &self.host;
        if self.duration.0 <= 0.0 {
            return bad("duration", "must be above 0".into());
        }
        if h.tick.0 <= 0.0 {
            return bad("host.tick", "must be above 0".into());
        }
        if h.budget.0 == 0 {
            return bad("host.budget", "must be above 0".into());
        }
        if !(0.0..1.0).contains(&h.idle_tax) {
            return bad(
                "host.idle_tax",
                format!("{} is not in 0 to 1 (1 excluded)", h.idle_tax),
            );
        }
        if h.sample_pages > 10_000 {
            return bad("host.sample_pages", "give 0 to 10000".into());
        }
        if h.sample_period.0 < h.tick.0 {
            return bad("host.sample_period", "must be at least one tick".into());
        }
        let t = h.thresholds;
        if !(t.high > t.soft && t.soft > t.hard && t.hard > t.low && t.low >= 0.0 && t.high < 1.0) {
            return bad(
                "host.thresholds",
                "need 1 > high > soft > hard > low >= 0".into(),
            );
        }
        if !(0.0..1.0).contains(&h.mom_low) || h.mom_high < h.mom_low {
            return bad("host.mom_low", "need 0 <= mom_low <= mom_high".into());
        }
        if h.balancing == Balancing::Hd2 && h.policy != PolicyKind::Esx {
            return bad(
                "host.balancing",
                "hd2 balances on top of memvisor's policy (esx) only".into(),
            );
        }
        if h.gap_idle.0 <= 0.0 {
            return bad("host.gap_idle", "must be above 0".into());
        }
        if self.output.every == 0 {
            return bad("output.every", "must be 1 or more".into());
        }
        if self.groups.iter().map(|g| u64::from(g.count)).sum::<u64>() == 0 {
            return bad(
                "group",
                "no VMs: add a [[group]] with count 1 or more".into(),
            );
        }
        if let Some(f) = &self.fleet {
            if f.hosts == 0 || f.hosts > 10_000 {
                return bad("fleet.hosts", format!("{} is not in 1 to 10000", f.hosts));
            }
            if f.arrival.0 < 0.0 {
                return bad("fleet.arrival", "must be 0 or more".into());
            }
            if !(0.0..=1.0).contains(&f.need) {
                return bad("fleet.need", format!("{} is not in 0 to 1", f.need));
            }
            if h.policy != PolicyKind::Esx {
                return bad(
                    "host.policy",
                    "a fleet runs memvisor's policy (esx) only".into(),
                );
            }
        }
        for (i, g) in self.groups.iter().enumerate() {
            let f = |k: &str| format!("group[{i}] ({}).{k}", g.name);
            if g.mem.0 < 4096 {
                return Err((f("mem"), "must be at least one page".into()));
            }
            if g.min > g.mem {
                return Err((f("min"), format!("{} is above mem {}", g.min.0, g.mem.0)));
            }
            if g.shares == 0 {
                return Err((f("shares"), "must be 1 or more".into()));
            }
            if let Some(w) = g.work {
                if w.0 <= 0.0 {
                    return Err((f("work"), "must be above 0".into()));
                }
            }
            if g.exit && g.work.is_none() {
                return Err((
                    f("exit"),
                    "needs work (the VM exits once it is done)".into(),
                ));
            }
            if let Some(l) = g.lifetime {
                if l.0 <= 0.0 {
                    return Err((f("lifetime"), "must be above 0".into()));
                }
            }
            if let Workload::Burst { duty, period, .. } = &g.workload {
                if !(0.0..=1.0).contains(duty) {
                    return Err((f("workload.duty"), "must be 0 to 1".into()));
                }
                if period.0 <= 0.0 {
                    return Err((f("workload.period"), "must be above 0".into()));
                }
            }
        }
        Ok(())
    }

    /// The policy's host-wide inputs.
    pub fn params(&self) -> HostParams {
        let t = self.host.thresholds;
        HostParams {
            budget: self.host.budget.0,
            own: 0,
            idle_tax: self.host.idle_tax,
            thresholds: Thresholds {
                high: t.high,
                soft: t.soft,
                hard: t.hard,
                low: t.low,
            },
            pool: self.host.pool.0,
            oom_demand_ticks: HostParams::oom_demand_ticks(self.host.tick.0),
            // The host's default cap: `[host] balloon_max`.
            balloon_max: memvisor_policy::balloon::BALLOON_MAX,
            balloon_inflate: memvisor_policy::tick::BalloonInflate::default(),
        }
    }

    /// How many VMs the scenario describes.
    pub fn vm_count(&self) -> u64 {
        self.groups.iter().map(|g| u64::from(g.count)).sum()
    }

    /// Ticks in the run.
    pub fn ticks(&self) -> u64 {
        // Both positive (checked); a run of more than 2^53 ticks is not a run.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = (self.duration.0 / self.host.tick.0).ceil() as u64;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
seed = 3
duration = "10m"
[host]
budget = "8G"
[[group]]
name = "web"
count = 4
mem = "2G"
workload = { kind = "step", steps = [[0, "512M"], [120, "1G"]], rate = "50M" }
"#;

    fn err(text: &str) -> String {
        Scenario::parse("s.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn a_good_scenario_parses_with_defaults() {
        let s = Scenario::parse("s.toml", GOOD).unwrap();
        assert_eq!(s.vm_count(), 4);
        assert_eq!(s.host.budget, Size(8 << 30));
        assert_eq!(s.host.idle_tax, 0.75);
        assert_eq!(s.ticks(), 600);
        assert_eq!(s.groups[0].shares, 1000);
    }

    #[test]
    fn bad_input_is_one_line_naming_the_file_and_the_field() {
        let cases = [
            (GOOD.replace("\"8G\"", "\"-8G\""), "budget"),
            (GOOD.replace("\"8G\"", "-8"), "budget"),
            (GOOD.replace("\"8G\"", "\"eight\""), "budget"),
            (GOOD.replace("count = 4", "count = 0"), "group"),
            (
                GOOD.replace("mem = \"2G\"", "mem = \"2G\"\nmin = \"3G\""),
                "min",
            ),
            (
                GOOD.replace("duration = \"10m\"", "duration = \"soon\""),
                "duration",
            ),
            (GOOD.replace("[host]", "[host\n"), "host"),
            (
                GOOD.replace("kind = \"step\"", "kind = \"walk\""),
                "workload",
            ),
            (GOOD.replace("budget", "budgett"), "budgett"),
            ("seed = 1".to_owned(), "duration"),
            (GOOD.replace("mem = \"2G\"\n", ""), "mem"),
        ];
        for (text, field) in cases {
            let e = err(&text);
            assert!(e.starts_with("s.toml: "), "{e}");
            assert!(e.contains(field), "{field}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}
