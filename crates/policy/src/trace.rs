//! Traces of a host's ticks as JSON lines, and their replay: each line holds the host's
//! parameters, the free-memory state the tick started in, every VM's observation and whether it
//! deflated on OOM, and the plan the host carried out. Replaying re-runs [`plan`] on each
//! line's observations and reports every tick whose decisions differ from the recorded ones.
//! `memvisor host` records its ticks in this format (`[host] trace`), and so does the simulator
//! (`memvisor sim --trace`); `memvisor sim --replay` replays either (docs/sim.md).

use std::io::{BufRead, Write};

use crate::balance::{self, BalanceObservation, BalanceParams, Decision, VmBalance};
use crate::free_state::{FreeState, Thresholds};
use crate::plan::plan;
use crate::tick::{BalloonInflate, Before, HostParams, Plan, VmAction, VmObservation};
use serde::{Deserialize, Serialize};

/// One tick.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceTick {
    /// Seconds since the host started.
    pub t: f64,
    pub host: TraceHost,
    /// The free-memory state the tick started in.
    pub state: String,
    pub vms: Vec<TraceVm>,
    pub plan: TracePlan,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceHost {
    pub budget: u64,
    /// The host's own memory (0 in traces written before it counted).
    #[serde(default)]
    pub own: u64,
    pub idle_tax: f64,
    pub pool: u64,
    pub thresholds: [f64; 4],
    /// Ticks a deflate-on-OOM counts as demand (10 in traces written before it was recorded).
    #[serde(default = "ten")]
    pub oom_demand_ticks: u32,
    /// The cap on balloons, a fraction of each VM's memory (1, no cap, in traces written
    /// before there was one).
    #[serde(default = "one")]
    pub balloon_max: f64,
    /// How far balloons inflate in soft (`target`, ESX's, in traces written before it was
    /// recorded).
    #[serde(default = "to_target")]
    pub balloon_inflate: BalloonInflate,
    /// HyperDealer2 balancing's settings; absent with balancing off (`[host] balancing =
    /// "balloon"`) and in traces written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<BalanceParams>,
}

fn to_target() -> BalloonInflate {
    BalloonInflate::Target
}

fn ten() -> u32 {
    10
}

fn one() -> f64 {
    1.0
}

/// One VM's observation, as `plan` got it, with its name and whether it deflated on OOM since
/// the last tick.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceVm {
    pub name: String,
    #[serde(flatten)]
    pub obs: VmObservation,
    pub oom_deflated: bool,
    /// Its balloon's step ([`BalloonWatch::step`](crate::balloon::BalloonWatch)): how far the
    /// host may raise its target above what the driver holds; absent without a balloon (and in
    /// traces written before the step). Not an input of `plan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balloon_step: Option<u64>,
    /// What the balancer knew of it; absent with balancing off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<BalanceObservation>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TracePlan {
    pub state: String,
    pub free: u64,
    /// The growth the state anticipated (not compared on replay: derived from the inputs).
    #[serde(default)]
    pub growth: u64,
    pub pool: u64,
    /// The plan's actions (before the balancer's changes).
    pub actions: Vec<VmAction>,
    /// What the balancer decided and what came of it; absent with balancing off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<TraceBalance>,
}

/// One tick of HyperDealer2 balancing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceBalance {
    /// Per VM, what [`balance::decide`] decided.
    pub vms: Vec<VmBalance>,
    /// Per VM, what its VMM released (bytes).
    pub released: Vec<u64>,
    /// Per VM, what it was given of that.
    pub gives: Vec<u64>,
    /// What was asked of each VM after balancing.
    pub actions: Vec<VmAction>,
}

/// A tick's balancing, as the trace records it.
#[derive(Clone, Copy, Debug)]
pub struct BalanceRecord<'a> {
    pub params: &'a BalanceParams,
    pub obs: &'a [BalanceObservation],
    pub decision: &'a Decision,
    pub released: &'a [u64],
    pub settled: &'a balance::Settled,
}

fn state_name(s: FreeState) -> &'static str {
    match s {
        FreeState::High => "high",
        FreeState::Soft => "soft",
        FreeState::Hard => "hard",
        FreeState::Low => "low",
    }
}

fn state_of(s: &str) -> Option<FreeState> {
    Some(match s {
        "high" => FreeState::High,
        "soft" => FreeState::Soft,
        "hard" => FreeState::Hard,
        "low" => FreeState::Low,
        _ => return None,
    })
}

impl TraceTick {
    /// The line for a tick decided from `obs` in `state`.
    pub fn new(
        t: f64,
        host: &HostParams,
        before: Before,
        names: &[String],
        obs: &[VmObservation],
        oom: &[bool],
        p: &Plan,
    ) -> TraceTick {
        let th = host.thresholds;
        TraceTick {
            t,
            host: TraceHost {
                budget: host.budget,
                own: host.own,
                idle_tax: host.idle_tax,
                pool: host.pool,
                thresholds: [th.high, th.soft, th.hard, th.low],
                oom_demand_ticks: host.oom_demand_ticks,
                balloon_max: host.balloon_max,
                balloon_inflate: host.balloon_inflate,
                balance: None,
            },
            state: state_name(before.state).into(),
            vms: obs
                .iter()
                .zip(names)
                .zip(oom)
                .map(|((&obs, n), &oom_deflated)| TraceVm {
                    name: n.clone(),
                    obs,
                    oom_deflated,
                    balloon_step: None,
                    balance: None,
                })
                .collect(),
            plan: TracePlan {
                state: state_name(p.state).into(),
                free: p.free,
                growth: p.growth,
                pool: p.pool,
                actions: p.actions.clone(),
                balance: None,
            },
        }
    }

    /// The same line with each VM's balloon step (`None` without a balloon).
    #[must_use]
    pub fn with_balloon_steps(mut self, steps: &[Option<u64>]) -> TraceTick {
        for (v, &s) in self.vms.iter_mut().zip(steps) {
            v.balloon_step = s;
        }
        self
    }

    /// The same line with the tick's balancing.
    #[must_use]
    pub fn with_balance(mut self, b: &BalanceRecord<'_>) -> TraceTick {
        self.host.balance = Some(*b.params);
        for (v, o) in self.vms.iter_mut().zip(b.obs) {
            v.balance = Some(*o);
        }
        self.plan.balance = Some(TraceBalance {
            vms: b.decision.vms.clone(),
            released: b.released.to_vec(),
            gives: b.settled.gives.clone(),
            actions: b.settled.actions.clone(),
        });
        self
    }

    /// The policy's inputs recorded on this line.
    pub fn inputs(&self) -> Option<(HostParams, Before, Vec<VmObservation>, Vec<bool>)> {
        let [high, soft, hard, low] = self.host.thresholds;
        let host = HostParams {
            budget: self.host.budget,
            own: self.host.own,
            idle_tax: self.host.idle_tax,
            thresholds: Thresholds {
                high,
                soft,
                hard,
                low,
            },
            pool: self.host.pool,
            oom_demand_ticks: self.host.oom_demand_ticks,
            balloon_max: self.host.balloon_max,
            balloon_inflate: self.host.balloon_inflate,
        };
        let before = Before {
            state: state_of(&self.state)?,
        };
        let obs = self.vms.iter().map(|v| v.obs).collect();
        let oom = self.vms.iter().map(|v| v.oom_deflated).collect();
        Some((host, before, obs, oom))
    }
}

/// A tick whose replayed decision differs from the recorded one.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    pub line: usize,
    pub what: String,
}

/// Replays a trace: `plan` on each line's inputs, compared with the line's plan. Returns the
/// number of ticks replayed and the mismatches; a line that does not parse is an error naming it.
pub fn replay(r: impl BufRead) -> Result<(usize, Vec<Mismatch>), String> {
    let mut n = 0;
    let mut bad = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let tick: TraceTick =
            serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let (host, before, obs, oom) = tick
            .inputs()
            .ok_or_else(|| format!("line {}: state '{}' is not a state", i + 1, tick.state))?;
        let p = plan(&host, before, &obs, &oom);
        let again = TraceTick::new(tick.t, &host, before, &[], &[], &[], &p).plan;
        n += 1;
        if let (Some(params), Some(recorded)) = (&tick.host.balance, &tick.plan.balance) {
            let bal: Vec<BalanceObservation> = tick
                .vms
                .iter()
                .map(|v| v.balance.unwrap_or_default())
                .collect();
            let d = balance::decide(&host, params, &p, &obs, &bal);
            let s = balance::settle(&host, &d, &obs, &recorded.released);
            if d.vms != recorded.vms || s.gives != recorded.gives || s.actions != recorded.actions {
                bad.push(Mismatch {
                    line: i + 1,
                    what: format!(
                        "balancing: replayed {:?} gives {:?}, recorded {:?} gives {:?}",
                        d.vms, s.gives, recorded.vms, recorded.gives
                    ),
                });
            }
        }
        if again.state != tick.plan.state
            || again.free != tick.plan.free
            || again.pool != tick.plan.pool
        {
            bad.push(Mismatch {
                line: i + 1,
                what: format!(
                    "host: replayed {} free {} pool {}, recorded {} free {} pool {}",
                    again.state,
                    again.free,
                    again.pool,
                    tick.plan.state,
                    tick.plan.free,
                    tick.plan.pool
                ),
            });
        }
        for (k, (a, b)) in again.actions.iter().zip(&tick.plan.actions).enumerate() {
            if a != b {
                let name = tick.vms.get(k).map_or("?", |v| v.name.as_str());
                bad.push(Mismatch {
                    line: i + 1,
                    what: format!("{name}: replayed {a:?}, recorded {b:?}"),
                });
            }
        }
        if again.actions.len() != tick.plan.actions.len() {
            bad.push(Mismatch {
                line: i + 1,
                what: format!(
                    "replayed {} actions, recorded {}",
                    again.actions.len(),
                    tick.plan.actions.len()
                ),
            });
        }
    }
    Ok((n, bad))
}

/// Writes one line.
pub fn write_line(w: &mut dyn Write, tick: &TraceTick) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, tick)?;
    w.write_all(b"\n")
}
