//! The run: VMs admitted and started as `memvisor host` starts them (`admit`, `start_limit`),
//! then every tick their observations, one plan, its actions carried out, the model stepped,
//! and what happened recorded.

use std::io::Write;

use memvisor_policy::balance::{self, BalanceParams};
use memvisor_policy::{
    admit, start_limit, Before, FreeState, Plan, Reservations, VmAction, VmObservation,
};

use crate::baseline::{decide, static_shares, Extra};
use crate::rng::Rng;
use crate::scenario::{Balancing, PolicyKind, Scenario};
use crate::stats::{Histogram, VmRunSummary};
use crate::vm::{bytes, HostModel, SimVm, VmConfig};
use memvisor_policy::trace::{write_line, TraceTick};

/// One tick of the host, for the plots and the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostTick {
    pub t: f64,
    pub state: u8,
    pub free: u64,
    pub resident: u64,
    pub pooled: u64,
    pub swapped: u64,
    pub balloons: u64,
    pub paused: u32,
    pub mean_slowdown: f64,
    /// Bytes the VMs held past the budget before the host's kernel swapped them out.
    pub over: u64,
}

/// A simulated host.
pub struct Sim {
    pub scenario: Scenario,
    pub vms: Vec<SimVm>,
    pub names: Vec<String>,
    /// VMs admission refused: name and why.
    pub refused: Vec<(String, String)>,
    pub state: FreeState,
    pub tick: u64,
    pub host: Vec<HostTick>,
    pub summaries: Vec<VmRunSummary>,
    pub slowdowns: Histogram,
    /// Seconds from a VM's allocation leaving its target to reaching it again.
    pub moves: Vec<f32>,
    /// Per tick, per group: mean resident MiB, mean target MiB, mean slowdown of those working
    /// (NaN when none worked).
    pub groups: Vec<Vec<[f32; 3]>>,
    static_share: Vec<u64>,
    /// Where to write each tick's observations and plan as a trace line (trace.rs); only
    /// written under memvisor's policy.
    pub trace: Option<Box<dyn Write>>,
    reservations: Reservations,
    /// With HyperDealer2's balancing: ticks that moved memory by a release, and bytes released.
    pub reallocations: u64,
    pub released: u64,
}

/// Column names of the per-VM CSV.
pub const VM_CSV_HEADER: &str =
    "t,vm,target,resident,balloon,limit,pooled,swapped,active,slowdown,paused";

impl Sim {
    /// Admits and starts the scenario's VMs in order, each with its start limit, as
    /// `memvisor host` starts them.
    pub fn new(scenario: Scenario) -> Sim {
        Sim::start(scenario, true)
    }

    /// As [`Sim::new`]; without `start_limits` every VM starts with its limit at its `max`
    /// (one `start_limit` costs a `targets` over every VM before it, so starting n VMs one by
    /// one is cubic: the scale measurement skips it past a few thousand VMs).
    pub fn start(scenario: Scenario, start_limits: bool) -> Sim {
        let mut sim = Sim::empty(scenario);
        let mut n = 0u64;
        for gi in 0..sim.scenario.groups.len() {
            for k in 0..sim.scenario.groups[gi].count {
                let name = format!("{}-{k}", sim.scenario.groups[gi].name);
                // Refused or not, it admits under its own error: the summary lists it.
                let _ = sim.add_vm(gi, name, n, start_limits, 0.0);
                n += 1;
            }
        }
        if sim.scenario.host.policy == PolicyKind::Static {
            let (running, _) = sim.observations();
            sim.static_share = static_shares(&sim.scenario.params(), &running);
        }
        sim
    }

    /// A host with no VMs yet: [`Sim::add_vm`] admits them, at the start or while it runs.
    pub fn empty(scenario: Scenario) -> Sim {
        let reservations = Reservations {
            memory: scenario.host.budget.0,
            swap: scenario.host.swap.map_or(u64::MAX, |s| s.0),
            ..Reservations::default()
        };
        Sim {
            scenario,
            vms: Vec::new(),
            names: Vec::new(),
            refused: Vec::new(),
            state: FreeState::High,
            tick: 0,
            host: Vec::new(),
            summaries: Vec::new(),
            slowdowns: Histogram::default(),
            moves: Vec::new(),
            groups: Vec::new(),
            static_share: Vec::new(),
            trace: None,
            reservations,
            reallocations: 0,
            released: 0,
        }
    }

    /// What the last tick left, for the next plan.
    pub fn before(&self) -> Before {
        Before { state: self.state }
    }

    /// Admits one VM of group `group` as `memvisor host` admits one (`admit`, then its start
    /// limit beside the VMs running, when `start_limits`), starting at `start` seconds with the
    /// random stream `stream`; a refusal is listed in `refused` and returned.
    pub fn add_vm(
        &mut self,
        group: usize,
        name: String,
        stream: u64,
        start_limits: bool,
        start: f64,
    ) -> Result<(), String> {
        let g = &self.scenario.groups[group];
        let overhead = self.scenario.host.overhead.0;
        let mut rng = Rng::stream(self.scenario.seed, stream);
        match admit(&self.reservations, g.min.0, g.mem.0, overhead) {
            Ok(next) => self.reservations = next,
            Err(e) => {
                let why = e.to_string();
                self.refused.push((name, why.clone()));
                return Err(why);
            }
        }
        let cfg = VmConfig {
            group,
            min: g.min.0,
            max: g.mem.0,
            shares: g.shares,
            balloon: g.balloon,
            overhead,
            work: g.work.map(|w| w.0),
            phase: rng.unit(),
            start,
            exit: g.exit,
            lifetime: g.lifetime.map(|l| l.0),
        };
        let (max, min_limit) = (g.mem.0, self.scenario.host.min_limit.0);
        let mut vm = SimVm::new(cfg, max, rng);
        if start_limits {
            let (running, _) = self.observations();
            vm.limit = start_limit(&self.scenario.params(), &running, &vm.observe())
                .max(min_limit)
                .min(max);
        }
        self.vms.push(vm);
        self.names.push(name);
        self.summaries.push(VmRunSummary::default());
        Ok(())
    }

    /// What admission has reserved so far (what an orchestrator asks a host before placing a
    /// VM on it).
    pub fn reservations(&self) -> Reservations {
        self.reservations
    }

    /// The VMs that have not stopped, in order: those the host sees.
    pub fn live(&self) -> Vec<usize> {
        (0..self.vms.len())
            .filter(|&i| !self.vms[i].exited())
            .collect()
    }

    /// What the host sees this tick (of the VMs that have not stopped), and which VMs deflated
    /// on OOM since the last.
    /// With HyperDealer2's balancing the host caps each VM's active fraction by what its
    /// streams still being read from disk hold (`balance::active_outside_streams`), and so does
    /// this.
    pub fn observations(&self) -> (Vec<VmObservation>, Vec<bool>) {
        let live = self.live();
        let hd2 = self.scenario.host.balancing == Balancing::Hd2;
        let t = self.tick as f64 * self.scenario.host.tick.0;
        let obs = live
            .iter()
            .map(|&i| {
                let v = &self.vms[i];
                let mut o = v.observe();
                if hd2 {
                    let w = &self.scenario.groups[v.cfg.group].workload;
                    let seq = v.streaming(w, t - v.cfg.start);
                    o.active = balance::active_outside_streams(o.active, o.resident, seq);
                }
                o
            })
            .collect();
        let oom = live.iter().map(|&i| self.vms[i].oom_deflated).collect();
        (obs, oom)
    }

    /// Decides one tick from the VMs' observations (the decision only; nothing is applied).
    pub fn decide(&self, obs: &[VmObservation], oom: &[bool]) -> Plan {
        let live = self.live();
        let guest_free: Vec<u64> = live
            .iter()
            .map(|&i| {
                let v = &self.vms[i];
                let used = v.resident + v.pooled + v.swapped + v.balloon;
                bytes(v.cfg.max as f64 - used)
            })
            .collect();
        let static_share: Vec<u64> = live
            .iter()
            .filter_map(|&i| self.static_share.get(i).copied())
            .collect();
        decide(
            &self.scenario,
            self.before(),
            obs,
            oom,
            &Extra {
                guest_free: &guest_free,
                static_share: &static_share,
            },
        )
    }

    /// HyperDealer2's balancing on top of plan `p` (as the host's manager does it, in one
    /// tick): the balancer decides, the victims release their clean pages at once, and what
    /// they released is handed to the beneficiaries' limits. Returns the tick's actions.
    fn balance(
        &mut self,
        t: f64,
        live: &[usize],
        obs: &[VmObservation],
        p: &Plan,
    ) -> Vec<VmAction> {
        let h = &self.scenario.host;
        let params = BalanceParams::new(h.tick.0, h.gap_idle.0);
        let bal: Vec<_> = live
            .iter()
            .map(|&i| {
                let v = &self.vms[i];
                let w = &self.scenario.groups[v.cfg.group].workload;
                v.balance_observation(w, t - v.cfg.start)
            })
            .collect();
        let d = balance::decide(&self.scenario.params(), &params, p, obs, &bal);
        let mut released = Vec::with_capacity(live.len());
        for (&i, b) in live.iter().zip(&d.vms) {
            let v = &mut self.vms[i];
            let w = &self.scenario.groups[v.cfg.group].workload;
            let r = v.release_clean(b.release as f64, d.cold_only, w, t - v.cfg.start);
            released.push(bytes(r));
        }
        let s = balance::settle(&self.scenario.params(), &d, obs, &released);
        for (k, &i) in live.iter().enumerate() {
            self.vms[i].gap = s.gaps[k];
            self.vms[i].quiet = d.vms[k].quiet;
        }
        let total: u64 = released.iter().sum();
        if total > 0 {
            self.reallocations += 1;
            self.released += total;
        }
        s.actions
    }

    /// Runs one tick; writes the per-VM CSV rows to `csv` when given.
    pub fn step(&mut self, csv: Option<&mut (dyn Write + '_)>) -> std::io::Result<()> {
        let dt = self.scenario.host.tick.0;
        let t = self.tick as f64 * dt;
        let live = self.live();
        let (obs, oom) = self.observations();
        let p = self.decide(&obs, &oom);
        let actions = if self.scenario.host.balancing == Balancing::Hd2 {
            self.balance(t, &live, &obs, &p)
        } else {
            p.actions.clone()
        };
        let s = &self.scenario;
        let before = self.before();
        if let (Some(w), PolicyKind::Esx) = (self.trace.as_mut(), s.host.policy) {
            let names: Vec<String> = live.iter().map(|&i| self.names[i].clone()).collect();
            let line = TraceTick::new(t, &s.params(), before, &names, &obs, &oom, &p);
            write_line(w, &line)?;
        }
        self.state = p.state;
        let min_limit = s.host.min_limit.0;
        for ((&i, a), o) in live.iter().zip(&actions).zip(&obs) {
            self.vms[i].last_resident = Some(o.resident);
            self.vms[i].apply(a, min_limit);
        }
        let model = HostModel {
            dt,
            costs: s.costs,
            victim: s.host.victim,
            sample_pages: s.host.sample_pages,
            sample_period: s.host.sample_period.0,
        };
        let mut h = HostTick {
            t,
            state: p.state as u8,
            free: p.free,
            ..HostTick::default()
        };
        let (mut slow_sum, mut slow_n) = (0.0, 0u32);
        let write_every = u64::from(s.output.every);
        let write_vms = s.output.vms.map_or(usize::MAX, |n| n as usize);
        let mut g = vec![[0f64; 5]; s.groups.len()];
        let mut csv = csv.filter(|_| self.tick % write_every == 0);
        for (i, v) in self.vms.iter_mut().enumerate() {
            if v.exited() {
                continue;
            }
            let w = &s.groups[v.cfg.group].workload;
            let was_paused = v.paused;
            let out = v.step(w, t - v.cfg.start, &model);
            let st = &mut self.summaries[i];
            if let (Some(work), None) = (v.cfg.work, v.completed_at) {
                if v.done_work >= work {
                    v.completed_at = Some(t + dt);
                }
            }
            let over = v
                .cfg
                .lifetime
                .is_some_and(|l| t + dt - v.cfg.start >= l - 1e-9);
            if over || (v.cfg.exit && v.done()) {
                // It stops: its memory goes back to the host.
                v.stopped_at = Some(t + dt);
                v.resident = 0.0;
                v.pooled = 0.0;
                v.swapped = 0.0;
                v.balloon = 0.0;
            }
            st.record(v, &out, was_paused, dt);
            if out.useful > 0.0 {
                self.slowdowns.add(out.slowdown);
                slow_sum += out.slowdown;
                slow_n += 1;
            }
            let tol = (4u64 << 20).max(v.cfg.max / 50) as f64;
            let off = (v.resident - v.target as f64).abs() > tol && v.resident > v.target as f64;
            match (st.gap_since, off) {
                (None, true) => st.gap_since = Some(t),
                (Some(since), false) => {
                    // Durations of at most a few hours: f32 keeps a millisecond.
                    #[allow(clippy::cast_possible_truncation)]
                    self.moves.push((t + dt - since) as f32);
                    st.gap_since = None;
                }
                _ => {}
            }
            let gs = &mut g[v.cfg.group];
            gs[0] += v.resident;
            gs[1] += v.target as f64;
            gs[2] += 1.0;
            if out.useful > 0.0 {
                gs[3] += out.slowdown;
                gs[4] += 1.0;
            }
            h.resident += bytes(v.resident);
            h.pooled += bytes(v.pooled);
            h.swapped += bytes(v.swapped);
            h.balloons += bytes(v.balloon);
            h.paused += u32::from(v.paused);
            if let Some(f) = csv.as_deref_mut().filter(|_| i < write_vms) {
                writeln!(
                    f,
                    "{:.3},{},{},{},{},{},{},{},{:.4},{:.4},{}",
                    t + dt,
                    self.names[i],
                    v.target,
                    bytes(v.resident),
                    bytes(v.balloon),
                    v.limit,
                    bytes(v.pooled),
                    bytes(v.swapped),
                    v.active(),
                    out.slowdown,
                    u8::from(v.paused)
                )?;
            }
        }
        // Past the budget, the host's kernel swaps (the budget is what the host has): the excess
        // leaves every VM in proportion to its resident pages, whatever the policy asked.
        let running = self.vms.iter().filter(|v| !v.exited()).count() as u64;
        let overheads = s.host.overhead.0 * running;
        let held = h.resident + h.pooled + overheads;
        h.over = held.saturating_sub(s.host.budget.0);
        if h.over > 0 && h.resident > 0 {
            let f = h.over as f64 / h.resident as f64;
            for v in &mut self.vms {
                let x = (v.resident * f).min(v.resident);
                v.resident -= x;
                v.swapped += x;
            }
        }
        h.mean_slowdown = if slow_n > 0 {
            slow_sum / f64::from(slow_n)
        } else {
            0.0
        };
        self.host.push(h);
        // Means of MiB and slowdowns: f32 is plenty for a plot.
        #[allow(clippy::cast_possible_truncation)]
        self.groups.push(
            g.iter()
                .map(|x| {
                    let n = x[2].max(1.0);
                    [
                        (x[0] / n / 1048576.0) as f32,
                        (x[1] / n / 1048576.0) as f32,
                        if x[4] > 0.0 {
                            (x[3] / x[4]) as f32
                        } else {
                            f32::NAN // none working: no point on the plot
                        },
                    ]
                })
                .collect(),
        );
        self.tick += 1;
        Ok(())
    }

    /// Runs the whole scenario.
    pub fn run<'w>(&mut self, mut csv: Option<&mut (dyn Write + 'w)>) -> std::io::Result<()> {
        if let Some(f) = csv.as_deref_mut() {
            writeln!(f, "{VM_CSV_HEADER}")?;
        }
        for _ in 0..self.scenario.ticks() {
            self.step(csv.as_deref_mut())?;
        }
        if let Some(w) = self.trace.as_mut() {
            w.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use memvisor_policy::plan;

    pub(crate) const SCENARIO: &str = r#"
seed = 9
duration = "10m"
[host]
budget = "4G"
pool = "256M"
[[group]]
name = "steps"
count = 3
mem = "2G"
workload = { kind = "step", steps = [[0, "200M"], [120, "1500M"], [400, "300M"]], rate = "80M", jitter = 60 }
[[group]]
name = "idle"
count = 2
mem = "2G"
workload = { kind = "hot", hot = "16M", cold = "1G", rate = "1M" }
[[group]]
name = "nob"
mem = "1G"
balloon = false
workload = { kind = "burst", base = "100M", peak = "900M", period = 60, duty = 0.5, rate = "50M" }
"#;

    pub(crate) fn sim() -> Sim {
        Sim::new(Scenario::parse("t.toml", SCENARIO).unwrap())
    }

    /// The simulator's decision is `plan`'s, called with the same observations: at every tick
    /// of a run under pressure, the actions it carries out are those `plan` returns for what it
    /// observed.
    #[test]
    fn the_simulators_decisions_are_plans_for_the_same_observations() {
        let mut s = sim();
        let host = s.scenario.params();
        let mut pressure = false;
        for _ in 0..s.scenario.ticks() {
            let (obs, oom) = s.observations();
            let expected = plan(&host, s.before(), &obs, &oom);
            let got = s.decide(&obs, &oom);
            assert_eq!(got, expected);
            s.step(None).unwrap();
            pressure |= expected.state != FreeState::High;
            // What the VMs now carry out is what the plan asked (limits at least the pager's
            // smallest).
            for (v, a) in s.vms.iter().zip(&expected.actions) {
                assert_eq!(v.target, a.target);
                assert_eq!(
                    v.limit,
                    a.limit.max(s.scenario.host.min_limit.0).min(v.cfg.max)
                );
                assert_eq!(v.paused, a.pause);
                if let Some(b) = a.balloon {
                    assert_eq!(v.balloon_asked, b);
                }
            }
        }
        assert!(pressure, "the scenario never left the high state");
    }

    /// A trace the simulator writes replays through `plan` with no difference; a changed
    /// decision is found and named.
    #[test]
    fn a_written_trace_replays_with_the_same_decisions() {
        use std::sync::{Arc, Mutex};
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut s =
            Sim::new(Scenario::parse("t.toml", &SCENARIO.replace("\"10m\"", "\"4m\"")).unwrap());
        s.trace = Some(Box::new(Shared(buf.clone())));
        s.run(None).unwrap();
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        let (n, bad) = memvisor_policy::trace::replay(text.as_bytes()).unwrap();
        assert_eq!(n, 240);
        assert!(bad.is_empty(), "{bad:?}");
        // One VM's recorded limit changed on line 200: replay finds it.
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let mut t: memvisor_policy::trace::TraceTick = serde_json::from_str(&lines[199]).unwrap();
        t.plan.actions[1].limit += 4096;
        lines[199] = serde_json::to_string(&t).unwrap();
        let (_, bad) = memvisor_policy::trace::replay(lines.join("\n").as_bytes()).unwrap();
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].line, 200);
        assert!(bad[0].what.starts_with("steps-1:"), "{bad:?}");
        assert!(memvisor_policy::trace::replay("{".as_bytes())
            .unwrap_err()
            .starts_with("line 1:"));
    }

    /// With HyperDealer2's balancing, a stream's page cache counts as idle for the tax and is
    /// released at once: the loops that miss in their guests get the memory, the stream keeps
    /// its speed, and nothing is over the budget; the balancer's releases are carried out.
    #[test]
    fn hd2_balancing_takes_a_streams_cache_for_the_loops() {
        let text = r#"
seed = 7
duration = "5m"
[host]
budget = "3G"
tick = "1s"
[[group]]
name = "stream"
mem = "2G"
workload = { kind = "stream", rate = "100M", window = "64M" }
[[group]]
name = "loop"
count = 2
mem = "2G"
workload = { kind = "loop", size = "1200M", rate = "100M" }
"#;
        let run = |t: &str| {
            let mut s = Sim::new(Scenario::parse("t.toml", t).unwrap());
            s.run(None).unwrap();
            s
        };
        let esx = run(text);
        let hd2 = run(&text.replace("tick = \"1s\"", "tick = \"1s\"\nbalancing = \"hd2\""));
        let mean = |s: &Sim, i: usize| s.summaries[i].mean_resident() / 1048576.0;
        let slow = |s: &Sim, i: usize| s.summaries[i].slowdown();
        assert!(
            mean(&hd2, 0) < 0.7 * mean(&esx, 0),
            "stream {} vs {}",
            mean(&hd2, 0),
            mean(&esx, 0)
        );
        for i in 1..3 {
            assert!(mean(&hd2, i) > mean(&esx, i) + 100.0, "loop {i}");
            assert!(
                slow(&hd2, i) < 0.5 * slow(&esx, i),
                "loop {i}: {} vs {}",
                slow(&hd2, i),
                slow(&esx, i)
            );
        }
        assert!(
            slow(&hd2, 0) < 1.1,
            "the stream is not slowed: {}",
            slow(&hd2, 0)
        );
        assert!(hd2.released > 0 && hd2.reallocations > 0);
        assert_eq!(esx.released, 0);
        assert!(hd2.host.iter().all(|h| h.over == 0));
    }

    #[test]
    fn admission_refuses_what_does_not_fit_and_start_limits_come_from_the_policy() {
        let text = SCENARIO.replace("budget = \"4G\"", "budget = \"4G\"\nswap = \"5G\"");
        let s = Sim::new(Scenario::parse("t.toml", &text).unwrap());
        // Each VM reserves max − min of swap: two of 2 GiB fit, then only the 1 GiB one.
        assert_eq!(s.names, ["steps-0", "steps-1", "nob-0"]);
        assert_eq!(s.refused.len(), 3);
        assert!(s.refused[0].1.contains("swap"), "{:?}", s.refused);
        let s = sim();
        let host = s.scenario.params();
        let mut before = Vec::new();
        for v in &s.vms {
            let fresh = SimVm::new(v.cfg.clone(), v.cfg.max, crate::rng::Rng::new(0));
            let want = start_limit(&host, &before, &fresh.observe())
                .max(s.scenario.host.min_limit.0)
                .min(v.cfg.max);
            assert_eq!(v.limit, want);
            before.push(fresh.observe());
            before.last_mut().unwrap().limit = want;
        }
    }

    /// A VM that exits when its work is done, or at the end of its lifetime, holds no memory
    /// after and the host no longer sees it.
    #[test]
    fn a_vm_that_stops_gives_its_memory_back_and_leaves_the_host() {
        let text = r#"
seed = 1
duration = "40s"
[host]
budget = "2G"
[[group]]
name = "job"
mem = "512M"
work = "10s"
exit = true
workload = { kind = "hot", hot = "100M", cold = "0", rate = "10M" }
[[group]]
name = "timed"
mem = "512M"
lifetime = "20s"
workload = { kind = "hot", hot = "100M", cold = "0", rate = "10M" }
[[group]]
name = "stays"
mem = "512M"
workload = { kind = "idle" }
"#;
        let mut s = Sim::new(Scenario::parse("t.toml", text).unwrap());
        s.run(None).unwrap();
        let job = &s.vms[0];
        let done = job.completed_at.unwrap();
        assert_eq!(job.stopped_at, Some(done));
        assert!((10.0..20.0).contains(&done), "{done}");
        assert_eq!(s.vms[1].stopped_at, Some(20.0));
        assert!(s.vms[1].completed_at.is_none());
        assert!(s.vms[2].stopped_at.is_none());
        for v in &s.vms[..2] {
            assert_eq!(v.resident + v.pooled + v.swapped + v.balloon, 0.0);
        }
        assert_eq!(s.live(), [2]);
        let (obs, _) = s.observations();
        assert_eq!(obs.len(), 1);
        assert_eq!(s.decide(&obs, &[false]).actions.len(), 1);
        // The last tick's resident memory is the one VM left's.
        assert_eq!(s.host.last().unwrap().resident, bytes(s.vms[2].resident));
        let bad = text.replace("work = \"10s\"\n", "");
        let e = Scenario::parse("t.toml", &bad).unwrap_err();
        assert_eq!(e.field, "group[0] (job).exit", "{e}");
    }
}
