//! Workload generators: what a guest wants of its memory at each instant, for the papers'
//! workloads — a working set that steps (ESX Fig. 6), an idle VM, a page-cache stream and a
//! loop over a file (HyperDealer2), a hot set in a large store (a key-value server), bursts.

use serde::Deserialize;

use crate::units::{Secs, Size};

/// How the guest walks its working set; it decides what a miss costs and which pages reclaim
/// takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Uniformly at random over the working set.
    Random,
    /// Round and round a file of the working set's size: once the set does not fit, an LRU
    /// victim order misses on every page (the loop pathology), a random one on the fraction
    /// that is not resident.
    Loop,
    /// Each page once (a page-cache stream): the guest's cache fills its memory and the reused
    /// set is only the read window.
    Stream,
}

/// What the guest wants at one instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Demand {
    /// The set it reuses, bytes.
    pub ws: f64,
    /// Memory it fills (working set plus cold data or page cache), bytes; at least `ws`.
    pub touch: f64,
    /// Bytes it touches per second.
    pub rate: f64,
    /// Bytes per second at which it fills new memory (toward `touch`).
    pub fill: f64,
    /// Whether `fill` is a load rate (a hot set's `load`, a loop's first pass read from the
    /// guest's disk) whose time already holds the guest's first touches while it loads;
    /// otherwise each new page costs one.
    pub measured_fill: bool,
    pub access: Access,
}

/// A generator, as a scenario names it (`kind = "..."`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Workload {
    /// Next to nothing in use: a small set touched slowly.
    Idle {
        #[serde(default = "idle_ws")]
        ws: Size,
        #[serde(default = "idle_rate")]
        rate: Size,
    },
    /// A working set that changes size at given times (`[[seconds, size], ...]`), shifted per
    /// VM by up to `jitter` (ESX Fig. 6).
    Step {
        steps: Vec<(Secs, Size)>,
        rate: Size,
        #[serde(default)]
        jitter: Secs,
    },
    /// A hot set reused at random inside a store of `hot + cold` the guest loads at start at
    /// `load` bytes per second.
    Hot {
        hot: Size,
        cold: Size,
        rate: Size,
        #[serde(default = "hot_load")]
        load: Size,
    },
    /// A file read once at `rate`: the page cache fills the guest; `window` is reused.
    Stream {
        rate: Size,
        #[serde(default = "stream_window")]
        window: Size,
    },
    /// A file of `size` read round and round at `rate`.
    Loop {
        size: Size,
        rate: Size,
        /// The first pass's rate, when the file is read from disk (default `rate`).
        fill: Option<Size>,
    },
    /// `peak` for `duty` of every `period`, `base` otherwise; each VM at its own phase.
    Burst {
        base: Size,
        peak: Size,
        period: Secs,
        duty: f64,
        rate: Size,
    },
}

fn idle_ws() -> Size {
    Size(32 << 20)
}
fn idle_rate() -> Size {
    Size(1 << 20)
}
fn hot_load() -> Size {
    Size(200 << 20)
}
fn stream_window() -> Size {
    Size(64 << 20)
}

impl Workload {
    /// What the guest wants at `t` seconds; `phase` in `[0, 1)` is the VM's own offset.
    pub fn at(&self, t: f64, phase: f64) -> Demand {
        let set = |ws: f64, rate: u64, access| Demand {
            ws,
            touch: ws,
            rate: rate as f64,
            fill: rate as f64,
            measured_fill: false,
            access,
        };
        match self {
            Workload::Idle { ws, rate } => set(ws.0 as f64, rate.0, Access::Random),
            Workload::Step {
                steps,
                rate,
                jitter,
            } => {
                let t = t - phase * jitter.0;
                let ws = steps
                    .iter()
                    .take_while(|(at, _)| at.0 <= t)
                    .last()
                    .map_or(0, |(_, s)| s.0);
                set(ws as f64, rate.0, Access::Random)
            }
            Workload::Hot {
                hot,
                cold,
                rate,
                load,
            } => Demand {
                ws: hot.0 as f64,
                touch: (hot.0 + cold.0) as f64,
                rate: rate.0 as f64,
                fill: load.0 as f64,
                measured_fill: true,
                access: Access::Random,
            },
            Workload::Stream { rate, window } => Demand {
                ws: window.0 as f64,
                touch: f64::INFINITY,
                rate: rate.0 as f64,
                fill: rate.0 as f64,
                measured_fill: false,
                access: Access::Stream,
            },
            Workload::Loop { size, rate, fill } => Demand {
                fill: fill.map_or(rate.0, |f| f.0) as f64,
                measured_fill: true,
                ..set(size.0 as f64, rate.0, Access::Loop)
            },
            Workload::Burst {
                base,
                peak,
                period,
                duty,
                rate,
            } => {
                let p = period.0.max(1e-9);
                let x = ((t / p) + phase).fract();
                let ws = if x < *duty { peak.0 } else { base.0 };
                set(ws as f64, rate.0, Access::Random)
            }
        }
    }

    /// Distinct bytes touched in `elapsed` seconds of a sampling period (what sampling sees).
    pub fn distinct(d: &Demand, elapsed: f64) -> f64 {
        let n = d.rate * elapsed;
        match d.access {
            Access::Random if d.ws > 0.0 => d.ws * (1.0 - (-n / d.ws).exp()),
            Access::Random => 0.0,
            Access::Loop => n.min(d.ws),
            Access::Stream => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_workload_follows_its_steps_and_a_burst_its_duty_cycle() {
        let w = Workload::Step {
            steps: vec![(Secs(0.0), Size(100)), (Secs(60.0), Size(300))],
            rate: Size(10),
            jitter: Secs(0.0),
        };
        assert_eq!(w.at(59.0, 0.0).ws, 100.0);
        assert_eq!(w.at(60.0, 0.0).ws, 300.0);
        let b = Workload::Burst {
            base: Size(1),
            peak: Size(9),
            period: Secs(10.0),
            duty: 0.3,
            rate: Size(1),
        };
        let peaks = (0..100).filter(|&i| b.at(f64::from(i) / 10.0, 0.0).ws == 9.0);
        assert_eq!(peaks.count(), 30);
    }
}
