//! A fleet: several hosts alike, each a [`Sim`] running memvisor's policy, and an orchestrator
//! that places each arriving VM on one of them. The orchestrator knows of a host only what the
//! host's API tells it: whether admission would take the VM (`memvisor_policy::admit` on the
//! host's reservations, as `POST /vms` does) and the host's free memory at its last tick
//! (`GET /host`). It never moves a VM once placed; a VM no host admits is refused.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use memvisor_policy::admit;

use crate::report::{summary, svg_lines};
use crate::rng::Rng;
use crate::scenario::{FleetSection, Placement, Scenario};
use crate::sim::Sim;
use crate::stats::{jain, Histogram};

/// Where a VM went.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    pub name: String,
    pub group: usize,
    /// Seconds into the run it arrived.
    pub at: f64,
    /// The host and the VM's index there, or why no host took it.
    pub host: Result<(usize, usize), String>,
}

/// The hosts and the placements.
pub struct Fleet {
    pub scenario: Scenario,
    pub fleet: FleetSection,
    pub hosts: Vec<Sim>,
    pub placed: Vec<Placed>,
    /// Arrivals not yet placed: (group, index in the group, random stream), in arrival order.
    queue: Vec<(usize, u32, u64)>,
    tick: u64,
}

impl Fleet {
    /// The hosts, empty; the VMs' arrival order drawn from the seed. `None` unless the scenario
    /// has a `[fleet]`.
    pub fn new(scenario: Scenario) -> Option<Fleet> {
        let fleet = scenario.fleet?;
        let mut queue = Vec::new();
        let mut n = 0u64;
        for (gi, g) in scenario.groups.iter().enumerate() {
            for k in 0..g.count {
                queue.push((gi, k, n));
                n += 1;
            }
        }
        // Fisher–Yates with the scenario's seed, on a stream no VM uses.
        let mut rng = Rng::stream(scenario.seed, u64::MAX);
        for i in (1..queue.len()).rev() {
            // i + 1 fits in u64; the draw is below it.
            #[allow(clippy::cast_possible_truncation)]
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            queue.swap(i, j);
        }
        queue.reverse(); // popped from the end
        let hosts = (0..fleet.hosts)
            .map(|_| Sim::empty(scenario.clone()))
            .collect();
        Some(Fleet {
            scenario,
            fleet,
            hosts,
            placed: Vec::new(),
            queue,
            tick: 0,
        })
    }

    /// A host's free memory as `GET /host` reports it: the last tick's, the budget before one.
    pub fn free(&self, h: usize) -> u64 {
        self.hosts[h]
            .host
            .last()
            .map_or(self.scenario.host.budget.0, |t| t.free)
    }

    /// Memory a host's VMs actively use, as `GET /vms` reports it (active fraction × resident).
    pub fn active(&self, h: usize) -> u64 {
        self.hosts[h]
            .vms
            .iter()
            .map(|v| crate::vm::bytes(v.active() * v.resident))
            .sum()
    }

    /// The host the orchestrator picks for a VM of `group`, or why none.
    pub fn choose(&self, group: usize) -> Result<usize, String> {
        let g = &self.scenario.groups[group];
        let overhead = self.scenario.host.overhead.0;
        let mut first_refusal = None;
        let mut ok = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            match admit(&h.reservations(), g.min.0, g.mem.0, overhead) {
                Ok(_) => ok.push(i),
                Err(e) => {
                    first_refusal.get_or_insert_with(|| format!("host {i}: {e}"));
                }
            }
        }
        let refused = || {
            format!(
                "no host admits it ({})",
                first_refusal.clone().unwrap_or_default()
            )
        };
        match self.fleet.placement {
            Placement::First => ok.first().copied().ok_or_else(refused),
            // Ties go to the lower index.
            Placement::Spread => ok
                .iter()
                .copied()
                .max_by(|&a, &b| self.free(a).cmp(&self.free(b)).then(b.cmp(&a)))
                .ok_or_else(refused),
            Placement::LeastActive => ok
                .iter()
                .copied()
                .min_by(|&a, &b| self.active(a).cmp(&self.active(b)).then(a.cmp(&b)))
                .ok_or_else(refused),
            Placement::Pack => {
                // A fraction of a size: at most the size.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let need = (g.mem.0 as f64 * self.fleet.need) as u64;
                ok.iter()
                    .copied()
                    .filter(|&h| self.free(h) >= need)
                    .min_by(|&a, &b| self.free(a).cmp(&self.free(b)).then(a.cmp(&b)))
                    .ok_or_else(|| {
                        if ok.is_empty() {
                            refused()
                        } else {
                            format!("no host that admits it has {need} bytes free")
                        }
                    })
            }
        }
    }

    /// Places the VMs that have arrived by now, then runs every host one tick.
    pub fn step(&mut self) -> std::io::Result<()> {
        let dt = self.scenario.host.tick.0;
        let t = self.tick as f64 * dt;
        while let Some(&(group, k, stream)) = self.queue.last() {
            let at = self.placed.len() as f64 * self.fleet.arrival.0;
            if at > t + 1e-9 {
                break;
            }
            self.queue.pop();
            let name = format!("{}-{k}", self.scenario.groups[group].name);
            let host = match self.choose(group) {
                Ok(h) => {
                    let index = self.hosts[h].vms.len();
                    match self.hosts[h].add_vm(group, name.clone(), stream, true, t) {
                        Ok(()) => Ok((h, index)),
                        Err(e) => Err(format!("host {h}: {e}")),
                    }
                }
                Err(e) => Err(e),
            };
            self.placed.push(Placed {
                name,
                group,
                at: t,
                host,
            });
        }
        for h in &mut self.hosts {
            h.step(None)?;
        }
        self.tick += 1;
        Ok(())
    }

    /// Runs the whole scenario.
    pub fn run(&mut self) -> std::io::Result<()> {
        for _ in 0..self.scenario.ticks() {
            self.step()?;
        }
        Ok(())
    }
}

/// A fleet's figures, over every host.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSummary {
    pub placed: usize,
    pub refused: usize,
    pub mean_slowdown: f64,
    pub p99_slowdown: f64,
    /// Jain's index of each VM's mean resident memory per share, over the fleet.
    pub fairness: f64,
    pub pauses: u64,
    pub completed: usize,
    pub with_work: usize,
    /// Mean seconds from arrival to completion of the VMs that completed.
    pub completion_mean_s: f64,
    /// Jain's index of the hosts' guest memory (sum of `max`) per budget: 1 when every host
    /// carries the same overcommit.
    pub balance: f64,
    pub ticks_over_budget: u64,
    /// Hosts that ever paused a VM.
    pub hosts_pausing: usize,
}

pub fn fleet_summary(f: &Fleet) -> FleetSummary {
    let mut hist = Histogram::default();
    let mut per_share = Vec::new();
    let mut done = Vec::new();
    let mut with_work = 0;
    let mut commit = Vec::new();
    let mut pauses = 0;
    let mut hosts_pausing = 0;
    let mut over = 0;
    for h in &f.hosts {
        hist.merge(&h.slowdowns);
        let s = summary(h);
        pauses += s.pauses;
        hosts_pausing += usize::from(s.pauses > 0);
        over += s.ticks_over_budget;
        for (v, st) in h.vms.iter().zip(&h.summaries) {
            per_share.push(st.mean_resident() / v.cfg.shares as f64);
            with_work += usize::from(v.cfg.work.is_some());
            if let Some(c) = v.completed_at {
                done.push(c - v.cfg.start);
            }
        }
        let maxes: u64 = h.vms.iter().map(|v| v.cfg.max).sum();
        commit.push(maxes as f64 / f.scenario.host.budget.0 as f64);
    }
    let refused = f.placed.iter().filter(|p| p.host.is_err()).count();
    FleetSummary {
        placed: f.placed.len() - refused,
        refused,
        mean_slowdown: hist.mean(),
        p99_slowdown: hist.quantile(0.99),
        fairness: jain(&per_share),
        pauses,
        completed: done.len(),
        with_work,
        completion_mean_s: if done.is_empty() {
            0.0
        } else {
            done.iter().sum::<f64>() / done.len() as f64
        },
        balance: jain(&commit),
        ticks_over_budget: over,
        hosts_pausing,
    }
}

/// `fleet.md`: the fleet, then a row per host.
pub fn fleet_markdown(f: &Fleet, title: &str) -> String {
    let s = fleet_summary(f);
    let sc = &f.scenario;
    let mut o = String::new();
    let maxes: u64 = sc.groups.iter().map(|g| g.mem.0 * u64::from(g.count)).sum();
    let budgets = sc.host.budget.0 * u64::from(f.fleet.hosts);
    let _ = writeln!(o, "# {title}\n");
    let _ = writeln!(
        o,
        "{} hosts of {} MiB, placement `{}`{}; {} VMs arriving {} s apart ({} MiB of guest RAM, {:.2}x the fleet's memory); memvisor's policy, idle tax {}; {} s in ticks of {} s, seed {}.\n",
        f.fleet.hosts,
        sc.host.budget.0 >> 20,
        f.fleet.placement.name(),
        if f.fleet.placement == Placement::Pack {
            format!(" (need {} of a VM's RAM free)", f.fleet.need)
        } else {
            String::new()
        },
        f.placed.len() + f.queue.len(),
        f.fleet.arrival.0,
        maxes >> 20,
        maxes as f64 / budgets as f64,
        sc.host.idle_tax,
        sc.duration.0,
        sc.host.tick.0,
        sc.seed
    );
    let _ = writeln!(o, "| measure | value |\n|---|---|");
    let _ = writeln!(o, "| VMs placed / refused | {} / {} |", s.placed, s.refused);
    let _ = writeln!(
        o,
        "| mean slowdown (per working tick) | {:.3} |",
        s.mean_slowdown
    );
    let _ = writeln!(o, "| p99 slowdown | {:.3} |", s.p99_slowdown);
    let _ = writeln!(
        o,
        "| fairness (Jain, allocation per share, all VMs) | {:.3} |",
        s.fairness
    );
    let _ = writeln!(
        o,
        "| balance (Jain, overcommit of the hosts) | {:.3} |",
        s.balance
    );
    let _ = writeln!(
        o,
        "| VMs that completed their work | {} of {}, {:.0} s after arriving on average |",
        s.completed, s.with_work, s.completion_mean_s
    );
    let _ = writeln!(
        o,
        "| pauses (hosts that paused) | {} ({}) |",
        s.pauses, s.hosts_pausing
    );
    let _ = writeln!(o, "| host-ticks over budget | {} |", s.ticks_over_budget);
    let _ = writeln!(o, "\n## Per host\n");
    let _ = writeln!(o, "| host | VMs | overcommit | mean slowdown | p99 slowdown | completed | min free MiB | pauses |\n|---|---|---|---|---|---|---|---|");
    for (i, h) in f.hosts.iter().enumerate() {
        let hs = summary(h);
        let maxes: u64 = h.vms.iter().map(|v| v.cfg.max).sum();
        let min_free = h.host.iter().map(|t| t.free).min().unwrap_or(0);
        let _ = writeln!(
            o,
            "| {i} | {} | {:.2}x | {:.3} | {:.3} | {} of {} | {} | {} |",
            h.vms.len(),
            maxes as f64 / sc.host.budget.0 as f64,
            hs.mean_slowdown,
            hs.p99_slowdown,
            hs.completed,
            h.vms.iter().filter(|v| v.cfg.work.is_some()).count(),
            min_free >> 20,
            hs.pauses
        );
    }
    let refused: Vec<&Placed> = f.placed.iter().filter(|p| p.host.is_err()).collect();
    if !refused.is_empty() {
        let _ = writeln!(o, "\n## Refused\n");
        for p in refused.iter().take(20) {
            if let Err(why) = &p.host {
                let _ = writeln!(o, "- {} at {:.0} s: {why}", p.name, p.at);
            }
        }
    }
    let _ = writeln!(
        o,
        "\nFiles: placements.csv (each VM's arrival, host and completion), fleet.csv (per tick and host), fleet-free.svg, fleet-slowdown.svg."
    );
    o
}

/// Writes the fleet's files into `dir`.
pub fn write_fleet(f: &Fleet, dir: &Path, title: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut csv = String::from("vm,group,arrived,host,completed_after\n");
    for p in &f.placed {
        let (host, done) = match &p.host {
            Ok((h, i)) => (
                h.to_string(),
                f.hosts[*h].vms[*i]
                    .completed_at
                    .map_or(String::new(), |c| format!("{:.1}", c - p.at)),
            ),
            Err(_) => ("refused".to_owned(), String::new()),
        };
        let _ = writeln!(
            csv,
            "{},{},{:.1},{host},{done}",
            p.name, f.scenario.groups[p.group].name, p.at
        );
    }
    std::fs::write(dir.join("placements.csv"), csv)?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("fleet.csv"))?);
    writeln!(
        out,
        "t,host,vms,state,free,resident,swapped,paused,mean_slowdown,over"
    )?;
    let ticks = f.hosts.first().map_or(0, |h| h.host.len());
    for k in 0..ticks {
        for (i, h) in f.hosts.iter().enumerate() {
            let t = &h.host[k];
            let vms = h
                .vms
                .iter()
                .filter(|v| v.cfg.start <= t.t && v.stopped_at.is_none_or(|s| s > t.t))
                .count();
            writeln!(
                out,
                "{:.3},{i},{vms},{},{},{},{},{},{:.4},{}",
                t.t, t.state, t.free, t.resident, t.swapped, t.paused, t.mean_slowdown, t.over
            )?;
        }
    }
    out.flush()?;
    std::fs::write(dir.join("fleet.md"), fleet_markdown(f, title))?;
    let gib = 1073741824.0;
    let per_host = |g: &dyn Fn(&crate::sim::HostTick) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        f.hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                (
                    format!("host {i}"),
                    h.host.iter().map(|t| (t.t, g(t))).collect(),
                )
            })
            .collect()
    };
    std::fs::write(
        dir.join("fleet-free.svg"),
        svg_lines(
            &format!("{title}: free memory per host"),
            "GiB",
            &per_host(&|t| t.free as f64 / gib),
        ),
    )?;
    std::fs::write(
        dir.join("fleet-slowdown.svg"),
        svg_lines(
            &format!("{title}: mean slowdown per host"),
            "slowdown",
            &per_host(&|t| {
                if t.mean_slowdown > 0.0 {
                    t.mean_slowdown
                } else {
                    f64::NAN
                }
            }),
        ),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(placement: &str, hosts: u32, count: u32) -> Fleet {
        let mut f = unplaced(placement, hosts, count);
        f.run().unwrap();
        f
    }

    /// The fleet before its first tick: no VM placed yet.
    fn unplaced(placement: &str, hosts: u32, count: u32) -> Fleet {
        let text = format!(
            r#"
seed = 3
duration = "2m"
[host]
budget = "8G"
[fleet]
hosts = {hosts}
placement = "{placement}"
arrival = "5s"
[[group]]
name = "busy"
count = {count}
mem = "2G"
min = "1G"
workload = {{ kind = "hot", hot = "1500M", cold = "100M", rate = "200M", load = "1G" }}
[[group]]
name = "idle"
count = {count}
mem = "2G"
min = "1G"
workload = {{ kind = "idle" }}
"#
        );
        Fleet::new(Scenario::parse("f.toml", &text).unwrap()).unwrap()
    }

    fn per_host(f: &Fleet) -> Vec<usize> {
        f.hosts.iter().map(|h| h.vms.len()).collect()
    }

    /// Each host admits 7 VMs (1 GiB min + 24 MiB overhead in 8 GiB): first-fit fills host 0,
    /// then host 1; the rest is refused with admission's reason.
    #[test]
    fn first_fit_fills_a_host_until_admission_refuses() {
        let f = fleet("first", 2, 8);
        assert_eq!(per_host(&f), [7, 7]);
        let s = fleet_summary(&f);
        assert_eq!((s.placed, s.refused), (14, 2));
        let why = f.placed.iter().find_map(|p| p.host.clone().err()).unwrap();
        assert!(why.contains("unreserved memory"), "{why}");
        // Every VM on a host is one placed there, started when it arrived.
        for p in &f.placed {
            if let Ok((h, i)) = p.host {
                assert_eq!(f.hosts[h].names[i], p.name);
                assert!((f.hosts[h].vms[i].cfg.start - p.at).abs() < 1e-9);
            }
        }
    }

    /// What each placement picks, given the free memory each host reported at its last tick
    /// and the VMs' active memory.
    #[test]
    fn each_placement_picks_by_what_the_hosts_report() {
        let mut f = unplaced("spread", 3, 1);
        let gib = 1u64 << 30;
        let free = [3 * gib, 5 * gib, gib / 2];
        for (h, &fr) in f.hosts.iter_mut().zip(&free) {
            h.host.push(crate::sim::HostTick {
                free: fr,
                ..Default::default()
            });
        }
        assert_eq!(f.choose(0), Ok(1), "spread: the most free");
        f.fleet.placement = Placement::First;
        assert_eq!(f.choose(0), Ok(0));
        f.fleet.placement = Placement::Pack;
        f.fleet.need = 0.5;
        assert_eq!(f.choose(0), Ok(0), "pack: the least free with 1 GiB free");
        f.fleet.need = 1.0;
        assert_eq!(f.choose(0), Ok(0));
        f.fleet.need = 0.0;
        assert_eq!(f.choose(0), Ok(2));
        // Host 0 busy, host 1 idle, host 2 empty and least active.
        f.fleet.placement = Placement::LeastActive;
        for (h, group) in [(0, 0), (1, 1)] {
            f.hosts[h]
                .add_vm(group, format!("v{h}"), h as u64, true, 0.0)
                .unwrap();
            let v = f.hosts[h].vms.last_mut().unwrap();
            v.resident = 1e9;
        }
        assert_eq!(f.choose(0), Ok(2));
        f.hosts[2].add_vm(0, "v2".into(), 2, true, 0.0).unwrap();
        f.hosts[2].vms[0].resident = 1e9;
        // Each VM is counted fully active until it is sampled; a period's estimate lowers
        // the idle one's.
        let v = &mut f.hosts[1].vms[0];
        v.est.period_done(0, 100);
        assert_eq!(f.choose(0), Ok(1), "least active: the idle VM's host");
    }

    #[test]
    fn pack_needs_the_free_memory_it_asks_for() {
        let f = fleet("pack", 2, 3);
        // 6 VMs fit on one host by admission, and its free memory never falls below 1 GiB
        // here: packed on host 0.
        assert_eq!(per_host(&f), [6, 0]);
        let s = fleet_summary(&f);
        assert!(s.mean_slowdown >= 1.0);
    }

    #[test]
    fn a_fleet_run_is_determined_by_its_seed_and_scenario() {
        let a = fleet_markdown(&fleet("spread", 3, 4), "t");
        assert_eq!(a, fleet_markdown(&fleet("spread", 3, 4), "t"));
        assert!(a.contains("| 0 | "), "{a}");
    }

    #[test]
    fn a_bad_fleet_section_is_refused_naming_the_field() {
        let base = "seed = 1\nduration = 10\n[host]\nbudget = \"1G\"\n[[group]]\nname = \"a\"\nmem = \"64M\"\nworkload = { kind = \"idle\" }\n";
        for (fleet, field) in [
            ("[fleet]\nhosts = 0\n", "fleet.hosts"),
            ("[fleet]\nhosts = 2\nneed = 2.0\n", "fleet.need"),
            ("[fleet]\nhosts = 2\nplacement = \"best\"\n", "placement"),
        ] {
            let e = Scenario::parse("f.toml", &format!("{base}{fleet}")).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert_eq!(e.to_string().lines().count(), 1, "{e}");
        }
    }
}
