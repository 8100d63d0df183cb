//! `memvisor bench confinement`: one run is one configuration in one repetition:
//! - a guest configuration is a `memvisor run` of the guest kit that ends by itself:
//!   1. `memvisor run --mem M --mem-limit M --seccomp on|off --workload exits`: the pager holds
//!      guest RAM from boot (the limit is guest RAM, so nothing is reclaimed and every first
//!      touch is a pager fault), as under `memvisor host`.
//!   2. The guest's `RESULT` lines give the measures (`experiment::MEASURES`); its `done` line
//!      ends the run; the VMM then ends by itself and must exit with status 1, the guest's
//!      success as its debug-exit port gives it (a VMM its filter killed exits 159).
//! - `filter-calls` times the calls of those paths in the bench itself (`filters`).
//!
//! The repetitions interleave the configurations (`order::interleave`), so the host's drift hits
//! filtered and unfiltered runs alike.

use std::process::Command;
use std::time::{Duration, Instant};

use super::experiment::{Config, ConfinementPlan, Workload, MEASURES};
use super::filters::{self, CallTimes};
use crate::harness::child::{exit_text, wait_for};
use crate::harness::guest::{parse_result, value};
use crate::harness::vm::Vm;
use crate::harness::{Bench, MeasureStatus};

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfRun {
    pub config: &'static str,
    pub rep: u32,
    pub status: MeasureStatus,
    pub error: String,
    /// The measures of its workload, by name (`experiment::MEASURES`), in their units.
    pub values: Vec<(&'static str, f64)>,
    /// `filter-calls`: each call's times.
    pub calls: Vec<CallTimes>,
}

impl ConfRun {
    pub fn ok(&self) -> bool {
        self.status == MeasureStatus::Ok
    }

    /// The value of measure `name`, if the run has it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|v| v.0 == name).map(|v| v.1)
    }
}

/// `memvisor run`'s flags for `config`.
fn flags(cmd: &mut Command, plan: &ConfinementPlan, config: &Config) {
    let mem = plan.sizes.mem.to_string();
    cmd.args(["--mem", &mem, "--mem-limit", &mem])
        .args(["--seccomp", if config.seccomp { "on" } else { "off" }])
        .args(["--workload", "exits", "--cmdline", &plan.sizes.exits]);
}

/// One run (see the module doc).
fn measure(bench: &Bench, plan: &ConfinementPlan, config: &'static Config, rep: u32) -> ConfRun {
    let mut r = ConfRun {
        config: config.name,
        rep,
        ..ConfRun::default()
    };
    let result = (|| {
        if config.workload == Workload::Calls {
            r.calls = filters::measure(&plan.sizes)?;
            return Ok(());
        }
        let log = format!("{}-rep{rep}", config.name);
        let vm = Vm::start(bench, config.name, &log, |cmd, _, _| {
            flags(cmd, plan, config)
        })?;
        let deadline = Instant::now() + bench.timeout;
        let wanted: Vec<_> = MEASURES.iter().filter(|m| m.0 == config.workload).collect();
        let followed = wait_for(&vm.lines, deadline, "the guest's done", |l, _| {
            let (phase, _, ok) = parse_result(l)?;
            for m in wanted.iter().filter(|m| m.3 == phase) {
                match value::<f64>(l, m.4) {
                    Some(v) => r.values.push((m.1, v)),
                    None => return Some(Err(format!("no {}= in: {}", m.4, l.trim()))),
                }
            }
            if ok.as_deref() == Some("0") {
                return Some(Err(format!("the guest failed: {}", l.trim())));
            }
            (phase == "done").then_some(Ok(()))
        });
        // After its `done` the guest exits through the debug-exit port and the VMM ends by
        // itself; it is stopped only if it does not.
        let mut vm = vm;
        let until = Instant::now() + Duration::from_secs(30);
        while followed.is_ok()
            && Instant::now() < until
            && !matches!(vm.child.try_wait(), Ok(Some(_)))
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let stopped = vm.stop();
        followed?;
        match stopped.status {
            // The guest's success (0 at the debug-exit port) is status 1, as under QEMU.
            Some(s) if s.code() == Some(1) && !stopped.killed => {}
            Some(s) => return Err(format!("memvisor run ended: {}", exit_text(s))),
            None => return Err("memvisor run could not be waited for".into()),
        }
        if r.values.len() != wanted.len() {
            return Err(format!(
                "the guest gave {} of its {} measures",
                r.values.len(),
                wanted.len()
            ));
        }
        Ok(())
    })();
    if let Err(e) = result {
        r.status = MeasureStatus::Failed;
        r.error = e;
    }
    r
}

/// Runs every configuration, repetition by repetition, through the bench's one loop
/// (`order::interleave`).
pub fn run(bench: &Bench, plan: &ConfinementPlan) -> Result<Vec<ConfRun>, String> {
    let what = |_: &(), c: &&'static Config| c.name.to_owned();
    crate::harness::order::interleave(
        "confinement",
        plan.reps,
        |_| vec![()],
        &plan.configs,
        what,
        |turn| {
            let r = measure(bench, plan, turn.config, turn.rep);
            let calls = r.calls.iter().map(|c| {
                let name = c.call.syscall.name();
                (name, c.cost_ns())
            });
            let vals: Vec<String> = (r.values.iter().copied().chain(calls))
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect();
            turn.say(&format!(
                "{}: {} {}",
                r.status.name(),
                vals.join(", "),
                r.error
            ));
            Ok(vec![r])
        },
    )
}
