//! One simulated VM: the memory model that turns its allocation (resident pages, pool, swap,
//! balloon, pager limit, pause) and its generator's demand into faults, slowdown and the
//! sampled active estimate the VMM would report.
//!
//! Each tick of `dt` seconds, in order:
//! 1. the balloon moves toward the size asked, at the inflate or deflate rate; inflating takes
//!    the guest's free and cold pages (swapped, then pooled, then resident ones); a guest whose
//!    working set no longer fits deflates on OOM;
//! 2. a pager limit under the resident pages is reached at the reclaim rate; reclaimed pages go
//!    to the pool while the VM's share of it has room, to swap otherwise; a pool above its share
//!    spills to swap;
//! 3. unless paused, the guest runs: new pages (its footprint growing toward what it touches)
//!    cost a first touch each (a hot set's load and a loop's first pass are rates that hold
//!    them); a working-set page that is not resident costs a fault from the
//!    pool or from swap (random or sequential), one the guest's own memory lacks (its balloon
//!    left it short) a guest swap read; a loop's first pass, a read from the guest's disk at its
//!    fill rate in any case, has no misses. With `r` pages touched per second and `m` the miss
//!    fraction, a second of work takes `1 + r·m·c` seconds: that factor is the slowdown.
//!    Faulted pages stay while the limit leaves room; at the limit each evicts another;
//! 4. sampling: `sample_pages` pages are picked at the start of each period with a uniform draw
//!    each; a page counts as touched once the fraction of resident pages touched so far passes
//!    its draw, so the count is binomial with the true fraction, grows through the period, and
//!    feeds [`ActiveEstimate`] exactly as the VMM's sampler does (`period_so_far` every tick,
//!    `period_done` at the end).

use memvisor_policy::balance::BalanceObservation;
use memvisor_policy::{ActiveEstimate, VmAction, VmObservation};

use crate::costs::Costs;
use crate::rng::Rng;
use crate::scenario::Victim;
use crate::workload::{Access, Demand, Workload};

const PAGE: f64 = 4096.0;

/// A VM's configuration.
#[derive(Clone, Debug)]
pub struct VmConfig {
    pub group: usize,
    pub min: u64,
    pub max: u64,
    pub shares: u64,
    pub balloon: bool,
    pub overhead: u64,
    pub work: Option<f64>,
    pub phase: f64,
    /// Seconds into the run it started: its workload's clock starts there.
    pub start: f64,
    /// It stops once its work is done.
    pub exit: bool,
    /// It stops this many seconds after it started.
    pub lifetime: Option<f64>,
}

/// What the host is like for every VM: the tick, the costs, the victim order, sampling.
#[derive(Clone, Copy, Debug)]
pub struct HostModel {
    pub dt: f64,
    pub costs: Costs,
    pub victim: Victim,
    pub sample_pages: u32,
    pub sample_period: f64,
}

/// What one tick did to a VM.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TickOutcome {
    /// Seconds of useful work done.
    pub useful: f64,
    /// Wall seconds per second of work this tick (1 when nothing is missing; 0 when paused or
    /// done, which did no work).
    pub slowdown: f64,
    pub faults: f64,
}

/// One simulated VM.
#[derive(Clone, Debug)]
pub struct SimVm {
    pub cfg: VmConfig,
    /// Guest pages on the host, bytes (a whole number of pages as f64 keeps the model smooth).
    pub resident: f64,
    pub pooled: f64,
    pub swapped: f64,
    /// Balloon size now and asked for.
    pub balloon: f64,
    pub balloon_asked: u64,
    pub limit: u64,
    pub pool_share: u64,
    pub paused: bool,
    pub oom_demand: u32,
    /// Deflated on OOM since the last tick.
    pub oom_deflated: bool,
    pub target: u64,
    pub est: ActiveEstimate,
    /// The estimate when the host paused it (what the host reports while paused).
    active_at_pause: Option<f64>,
    /// This period's draws, sorted, and seconds into it.
    draws: Vec<f32>,
    period_elapsed: f64,
    /// Bytes of new data the guest has filled its memory with so far.
    loaded: f64,
    pub done_work: f64,
    pub completed_at: Option<f64>,
    /// When it stopped (see [`SimVm::exited`]).
    pub stopped_at: Option<f64>,
    pub rng: Rng,
    /// HyperDealer2's balancing (`[host] balancing = "hd2"`): its capacity gap and ticks out
    /// of balancing.
    pub gap: u64,
    pub quiet: u32,
    /// Resident bytes at the last tick, for its growth since.
    pub last_resident: Option<u64>,
}

impl SimVm {
    pub fn new(cfg: VmConfig, limit: u64, rng: Rng) -> SimVm {
        SimVm {
            balloon_asked: 0,
            limit,
            target: cfg.max,
            cfg,
            resident: 0.0,
            pooled: 0.0,
            swapped: 0.0,
            balloon: 0.0,
            pool_share: 0,
            paused: false,
            oom_demand: 0,
            oom_deflated: false,
            est: ActiveEstimate::default(),
            active_at_pause: None,
            draws: Vec::new(),
            period_elapsed: 0.0,
            loaded: 0.0,
            done_work: 0.0,
            completed_at: None,
            stopped_at: None,
            rng,
            gap: 0,
            quiet: 0,
            last_resident: None,
        }
    }

    /// Whether it has stopped (its work done with `exit`, or its lifetime over): it holds no
    /// memory and the host no longer sees it.
    pub fn exited(&self) -> bool {
        self.stopped_at.is_some()
    }

    /// Whether it has finished its work.
    pub fn done(&self) -> bool {
        self.completed_at.is_some()
    }

    /// The sampled active fraction the VMM reports (as at the pause while paused).
    pub fn active(&self) -> f64 {
        self.active_at_pause.unwrap_or_else(|| self.est.estimate())
    }

    /// What the host sees of it, as `memvisor host` builds it (crates/host manager `observe`).
    pub fn observe(&self) -> VmObservation {
        VmObservation {
            min: self.cfg.min,
            max: self.cfg.max,
            shares: self.cfg.shares,
            active: self.active(),
            resident: bytes(self.resident),
            pooled: bytes(self.pooled),
            overhead: self.cfg.overhead,
            balloon: self.cfg.balloon.then_some(self.balloon_asked),
            balloon_pending: bytes(self.balloon_asked as f64 - self.balloon),
            // A simulated driver always answers.
            balloon_usable: true,
            balloon_reread_cap: None,
            limit: self.limit,
            oom_demand: self.oom_demand,
            // A simulated VM at its limit holds exactly its limit, so it shows as pressed
            // against it without a count of what its pager reclaimed.
            reclaimed: 0,
            grown: self
                .last_resident
                .map_or(0, |last| bytes(self.resident).saturating_sub(last)),
        }
    }

    /// Whether it has not yet filled all it touches of demand `d` (a loop's first pass, a hot
    /// set's load).
    fn loading(&self, d: &Demand) -> bool {
        self.loaded < d.touch.min(self.cfg.max as f64)
    }

    /// What HyperDealer2's balancer knows of it (`memvisor_policy::balance`) at `t` seconds into
    /// its workload, every VM running the Swap Mapper as under `balancing = "hd2"` on the host:
    /// - clean pages: its page cache (a loop's or a stream's resident pages; this model has no
    ///   dirty page cache), which its VMM releases without a write;
    /// - demand: what the host's estimator would find (§4.6): a loop past its first pass wants
    ///   the pages of it that are not resident (a ghost cache over the pages it lost counts a
    ///   hit for each at the next pass), a working set of anonymous memory wants what its
    ///   guest swaps (what its balloon leaves it short); a stream reuses nothing.
    pub fn balance_observation(&self, w: &Workload, t: f64) -> BalanceObservation {
        let d = w.at(t, self.cfg.phase);
        let max = self.cfg.max as f64;
        let room = (max - self.balloon).max(0.0);
        let ws = d.ws.min(max);
        let demand = match d.access {
            Access::Loop if !self.loading(&d) => (ws - self.resident).max(0.0),
            Access::Random => (ws - room).max(0.0),
            _ => 0.0,
        };
        let resident = bytes(self.resident);
        BalanceObservation {
            releasable: !self.paused,
            clean: if d.access == Access::Random {
                0
            } else {
                resident
            },
            demand: Some(bytes(demand)),
            // The plan's OOM flags carry deflates; the model does not count their bytes.
            oom: 0,
            gap: self.gap,
            quiet: self.quiet,
        }
    }

    /// Its resident bytes in sequential streams still being read from disk, as the Swap
    /// Mapper's pattern table counts them: a stream's page cache, and a loop's in its first pass
    /// (the next passes hit the guest's cache, or refault what was taken and make it a loop).
    pub fn streaming(&self, w: &Workload, t: f64) -> u64 {
        let d = w.at(t, self.cfg.phase);
        let first_pass = d.access == Access::Loop && self.loading(&d);
        if d.access == Access::Stream || first_pass {
            bytes(self.resident)
        } else {
            0
        }
    }

    /// Releases up to `bytes` of its clean page cache at once, as its VMM does for a release
    /// order: the pages leave RAM without a write, and a later use brings them back from the
    /// disk image (the model's swap costs; its guest still counts them as its own). A
    /// `cold_only` release takes a stream's page cache (read once, so behind its reader or found
    /// unused by its probe) and a loop's in its first pass (still being read from disk, it looks
    /// like a stream), but none of a loop's after that (its probe is read again). Returns what
    /// was released.
    pub fn release_clean(&mut self, bytes: f64, cold_only: bool, w: &Workload, t: f64) -> f64 {
        let d = w.at(t, self.cfg.phase);
        let first_pass = d.access == Access::Loop && self.loading(&d);
        if cold_only && d.access != Access::Stream && !first_pass {
            return 0.0;
        }
        let x = bytes.min(self.resident).max(0.0);
        self.resident -= x;
        self.swapped += x;
        x
    }

    /// Carries out a plan's action as the host does (crates/host manager `decide` and `sent`):
    /// the balloon asked, the limit (never below the pager's smallest), the pool share, pause.
    pub fn apply(&mut self, a: &VmAction, min_limit: u64) {
        self.target = a.target;
        self.oom_demand = a.oom_demand;
        self.oom_deflated = false;
        if let (true, Some(b)) = (self.cfg.balloon, a.balloon) {
            self.balloon_asked = b;
        }
        self.limit = a.limit.max(min_limit).min(self.cfg.max);
        self.pool_share = a.pool;
        if a.pause != self.paused {
            self.active_at_pause = a.pause.then(|| self.est.estimate());
            self.paused = a.pause;
        }
    }

    fn footprint(&self) -> f64 {
        self.resident + self.pooled + self.swapped
    }

    /// Runs one tick of `h.dt` seconds at time `t`.
    pub fn step(&mut self, w: &Workload, t: f64, h: &HostModel) -> TickOutcome {
        let (dt, costs) = (h.dt, &h.costs);
        let d = w.at(t, self.cfg.phase);
        let max = self.cfg.max as f64;
        let running = !self.paused && !self.done();
        // 1. The balloon.
        if self.cfg.balloon {
            let asked = self.balloon_asked as f64;
            let before = self.balloon;
            if asked > self.balloon {
                self.balloon = asked.min(self.balloon + costs.inflate_bytes_s * dt);
            } else {
                self.balloon = asked.max(self.balloon - costs.deflate_bytes_s * dt);
            }
            // A working set of anonymous memory that no longer fits beside the balloon: if it
            // grew into the balloon the guest deflates on OOM and takes back what it needs; if
            // the balloon grew into it, inflation stalls there (the guest's balloon driver
            // gets no more pages). Page cache (loops, streams) is dropped instead.
            let anon = d.access == Access::Random;
            if running && anon && d.ws > max - self.balloon && self.balloon > 0.0 {
                self.oom_deflated |= d.ws > max - before;
                self.balloon = (max - d.ws).max(0.0);
            }
            let over = self.footprint() - (max - self.balloon);
            if over > 0.0 {
                self.give_to_balloon(over);
            }
        }
        // 2. The pager limit and the pool share.
        let limit = self.limit as f64;
        if self.resident > limit {
            let take = (self.resident - limit).min(costs.reclaim_bytes_s * dt);
            self.resident -= take;
            let to_pool = take.min((self.pool_share as f64 - self.pooled).max(0.0));
            self.pooled += to_pool;
            self.swapped += take - to_pool;
        }
        if self.pooled > self.pool_share as f64 {
            let spill = self.pooled - self.pool_share as f64;
            self.pooled -= spill;
            self.swapped += spill;
        }
        let mut out = TickOutcome::default();
        if running {
            out = self.run(&d, dt, costs, h.victim);
        }
        // 4. Sampling.
        self.sample(&d, dt, running, h.sample_pages, h.sample_period);
        out
    }

    /// Gives up `bytes` of the guest's memory to the balloon: cold pages first.
    fn give_to_balloon(&mut self, mut bytes: f64) {
        for part in [&mut self.swapped, &mut self.pooled, &mut self.resident] {
            let x = bytes.min(*part);
            *part -= x;
            bytes -= x;
        }
    }

    fn run(&mut self, d: &Demand, dt: f64, costs: &Costs, victim: Victim) -> TickOutcome {
        let max = self.cfg.max as f64;
        let room = (max - self.balloon).max(0.0);
        let limit = (self.limit as f64).min(room);
        // Growth, at its fill rate: new data toward what the guest touches (once: data its
        // balloon took is not read again unless it is in the working set), and working-set
        // pages it no longer holds.
        let fp = self.footprint();
        // A loop's first pass reads its file from the guest's disk at the fill rate whether or
        // not memory is short: that time is part of its work at full speed, so the pass is not
        // slowed by misses; they cost from the second pass on.
        let loading = d.measured_fill && self.loading(d);
        let first_pass = loading && d.access == Access::Loop;
        let grow = (d.touch - self.loaded)
            .max(d.ws.min(max) - fp)
            .min(room - fp)
            .clamp(0.0, d.fill * dt);
        // The first pass reads on at the fill rate even when the guest has no room left for
        // it (its page cache drops what it read before).
        self.loaded += if first_pass {
            grow.max((d.fill * dt).min(d.touch.min(max) - self.loaded))
        } else {
            grow
        };
        // A load rate (a loop's first pass from the guest's reads, a hot set's load) holds the
        // first touches; elsewhere each new page costs one.
        let first_touch = if loading {
            0.0
        } else {
            grow / PAGE * costs.first_touch_s
        };
        let fits = (limit - self.resident).clamp(0.0, grow);
        self.resident += fits;
        self.swapped += grow - fits;
        // Misses on the working set.
        let ws = d.ws.min(max);
        let fp = self.footprint().max(1.0);
        let ws_resident = match victim {
            Victim::Lru => ws.min(self.resident),
            Victim::Random => ws * (self.resident / fp).min(1.0),
        };
        let guest_short = (ws - room).max(0.0);
        let host_missing = (ws.min(room) - ws_resident).max(0.0);
        let (m_host, m_guest) = if ws <= 0.0 || first_pass {
            (0.0, 0.0)
        } else if d.access == Access::Loop && guest_short > 0.0 {
            // The guest's page cache, LRU-like, is smaller than the loop: it misses on every
            // page and reads it from its own disk.
            (0.0, 1.0)
        } else if d.access == Access::Loop && victim == Victim::Lru && host_missing > 0.0 {
            // A loop larger than what LRU keeps misses on every page.
            (1.0 - guest_short / ws, guest_short / ws)
        } else {
            (host_missing / ws, guest_short / ws)
        };
        let sequential = d.access != Access::Random;
        let out_of_ram = (self.pooled + self.swapped).max(1.0);
        let c_host = (self.pooled * costs.pool_fault()
            + self.swapped * costs.swap_fault(sequential))
            / out_of_ram;
        let rate = d.rate / PAGE;
        let factor = 1.0 + rate * (m_host * c_host + m_guest * costs.guest_swap(sequential));
        let useful = ((dt - first_touch).max(0.0)) / factor;
        let faults = rate * useful * m_host;
        // Faulted pages stay while the limit has room. Only pages out of RAM come back this
        // way: those never loaded arrive at the fill rate above.
        let install = (faults * PAGE)
            .min(host_missing)
            .min(self.pooled + self.swapped)
            .min((limit - self.resident).max(0.0));
        let from_pool = install * self.pooled / out_of_ram;
        self.pooled = (self.pooled - from_pool).max(0.0);
        self.swapped = (self.swapped - (install - from_pool)).max(0.0);
        self.resident += install;
        self.done_work += useful;
        TickOutcome {
            useful,
            slowdown: if useful > 0.0 { dt / useful } else { 0.0 },
            faults,
        }
    }

    fn sample(&mut self, d: &Demand, dt: f64, running: bool, n: u32, period: f64) {
        if n == 0 {
            return;
        }
        if self.draws.is_empty() {
            self.new_period(n);
        }
        if running {
            self.period_elapsed += dt;
        }
        let seen = if running {
            Workload::distinct(d, self.period_elapsed)
        } else {
            0.0
        };
        let f = (seen / self.resident.max(PAGE)).clamp(0.0, 1.0);
        let touched = self.draws.partition_point(|&u| f64::from(u) < f) as u64;
        let sampled = u64::from(n);
        if self.period_elapsed + 1e-9 >= period {
            self.est.period_done(touched, sampled);
            self.new_period(n);
        } else if running {
            self.est.period_so_far(touched, sampled);
        }
    }

    fn new_period(&mut self, n: u32) {
        self.draws.clear();
        for _ in 0..n {
            // f32 draws keep 100 samples in 400 bytes; the rounding does not matter here.
            #[allow(clippy::cast_possible_truncation)]
            self.draws.push(self.rng.unit() as f32);
        }
        self.draws.sort_unstable_by(f32::total_cmp);
        self.period_elapsed = 0.0;
    }

    /// Heap bytes it holds beside its struct.
    pub fn heap_bytes(&self) -> usize {
        self.draws.capacity() * std::mem::size_of::<f32>()
    }
}

/// A byte count from the model's smooth quantity, in whole pages.
pub fn bytes(x: f64) -> u64 {
    // Non-negative and far below 2^63 for any VM.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let pages = (x.max(0.0) / PAGE).round() as u64;
    pages * 4096
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{Secs, Size};
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn workload(k: u8, a: u64, b: u64) -> Workload {
        let (a, b) = (Size(a * MIB), Size(b * MIB));
        let rate = Size(50 * MIB);
        match k % 5 {
            0 => Workload::Step {
                steps: vec![(Secs(0.0), a), (Secs(20.0), b)],
                rate,
                jitter: Secs(0.0),
            },
            1 => Workload::Hot {
                hot: a,
                cold: b,
                rate,
                load: Size(200 * MIB),
            },
            2 => Workload::Stream { rate, window: a },
            3 => Workload::Loop {
                size: a,
                rate,
                fill: None,
            },
            _ => Workload::Idle { ws: a, rate },
        }
    }

    proptest! {
        /// Whatever is asked, the model keeps its books: nothing negative, the guest's memory
        /// and its balloon within its RAM, the pool within its share, the limit reached at the
        /// reclaim rate, and a VM that works is never faster than with all its memory.
        #[test]
        fn the_memory_model_keeps_its_books(
            kind in 0u8..5,
            a in 1u64..1500,
            b in 1u64..1500,
            lru in any::<bool>(),
            asks in proptest::collection::vec((0u64..2048, 16u64..2048, 0u64..256, any::<bool>()), 1..60),
        ) {
            let max = 2048 * MIB;
            let cfg = VmConfig { group: 0, min: 0, max, shares: 1000, balloon: true, overhead: 0, work: None, phase: 0.3, start: 0.0, exit: false, lifetime: None };
            let mut v = SimVm::new(cfg, max, crate::rng::Rng::new(5));
            let w = workload(kind, a, b);
            let h = HostModel {
                dt: 1.0,
                costs: Costs::default(),
                victim: if lru { Victim::Lru } else { Victim::Random },
                sample_pages: 100,
                sample_period: 5.0,
            };
            for (i, (balloon, limit, pool, pause)) in asks.into_iter().enumerate() {
                let action = VmAction { target: limit * MIB, balloon: Some(balloon * MIB), limit: limit * MIB, pause, pool: pool * MIB, oom_demand: 0 };
                v.apply(&action, 16 * MIB);
                let before = v.resident;
                let out = v.step(&w, i as f64, &h);
                let eps = 1.0;
                prop_assert!(v.resident >= 0.0 && v.pooled >= 0.0 && v.swapped >= 0.0 && v.balloon >= 0.0);
                prop_assert!(v.footprint() + v.balloon <= max as f64 + eps, "{:?}", v);
                prop_assert!(v.pooled <= v.pool_share as f64 + eps);
                prop_assert!(v.resident <= (v.limit as f64).max(before) + eps);
                if v.resident > v.limit as f64 + eps {
                    prop_assert!(before - v.resident >= h.costs.reclaim_bytes_s - eps);
                }
                if out.useful > 0.0 {
                    prop_assert!(out.slowdown >= 1.0 - 1e-9);
                    prop_assert!(!v.paused);
                } else {
                    prop_assert!(v.paused || out.slowdown == 0.0);
                }
                let e = v.active();
                prop_assert!((0.0..=1.0).contains(&e));
            }
        }
    }

    /// A loop larger than what LRU keeps misses on every page; a random victim order misses
    /// only on what is not resident (HyperDealer2's case for treating loops apart).
    #[test]
    fn a_loop_larger_than_its_limit_thrashes_under_lru_only() {
        let run = |victim| {
            let cfg = VmConfig {
                group: 0,
                min: 0,
                max: 1024 * MIB,
                shares: 1000,
                balloon: false,
                overhead: 0,
                work: None,
                phase: 0.0,
                start: 0.0,
                exit: false,
                lifetime: None,
            };
            let mut v = SimVm::new(cfg, 512 * MIB, crate::rng::Rng::new(1));
            let w = Workload::Loop {
                size: Size(600 * MIB),
                rate: Size(100 * MIB),
                fill: None,
            };
            let h = HostModel {
                dt: 1.0,
                costs: Costs::default(),
                victim,
                sample_pages: 0,
                sample_period: 30.0,
            };
            let mut last = TickOutcome::default();
            for i in 0..60 {
                last = v.step(&w, f64::from(i), &h);
            }
            last.slowdown
        };
        let (lru, random) = (run(Victim::Lru), run(Victim::Random));
        assert!(
            lru - 1.0 > 3.0 * (random - 1.0),
            "lru {lru} random {random}"
        );
        assert!(random > 1.0);
    }

    fn ballooned(balloon: bool) -> SimVm {
        let cfg = VmConfig {
            group: 0,
            min: 0,
            max: 384 * MIB,
            shares: 1000,
            balloon,
            overhead: 0,
            work: None,
            phase: 0.0,
            start: 0.0,
            exit: false,
            lifetime: None,
        };
        SimVm::new(cfg, 384 * MIB, crate::rng::Rng::new(1))
    }

    fn host() -> HostModel {
        HostModel {
            dt: 1.0,
            costs: Costs::default(),
            victim: Victim::Lru,
            sample_pages: 0,
            sample_period: 30.0,
        }
    }

    fn ask_balloon(v: &mut SimVm, mib: u64) {
        let a = VmAction {
            target: 0,
            balloon: Some(mib * MIB),
            limit: 384 * MIB,
            pause: false,
            pool: 0,
            oom_demand: 0,
        };
        v.apply(&a, 16 * MIB);
    }

    /// A balloon inflating into a working set of anonymous memory stalls beside it (the guest
    /// gives no more); a working set growing into the balloon deflates it on OOM. Page cache
    /// (a loop) is dropped for the balloon instead.
    #[test]
    fn a_balloon_stalls_at_a_working_set_and_a_growing_one_deflates_it() {
        let h = host();
        let hot = |mib| Workload::Hot {
            hot: Size(mib * MIB),
            cold: Size(0),
            rate: Size(100 * MIB),
            load: Size(400 * MIB),
        };
        let mut v = ballooned(true);
        v.step(&hot(200), 0.0, &h);
        ask_balloon(&mut v, 300);
        v.step(&hot(200), 1.0, &h);
        assert_eq!(
            bytes(v.balloon),
            184 * MIB,
            "stalled at RAM minus the working set"
        );
        assert!(!v.oom_deflated);
        assert_eq!(bytes(v.resident), 200 * MIB, "the working set stays");
        v.step(&hot(250), 2.0, &h);
        assert!(v.oom_deflated, "the working set grew into the balloon");
        assert_eq!(bytes(v.balloon), 134 * MIB);
        let looped = Workload::Loop {
            size: Size(200 * MIB),
            rate: Size(100 * MIB),
            fill: Some(Size(400 * MIB)),
        };
        let mut v = ballooned(true);
        v.step(&looped, 0.0, &h);
        ask_balloon(&mut v, 300);
        let out = v.step(&looped, 1.0, &h);
        assert_eq!(bytes(v.balloon), 300 * MIB, "the page cache gave way");
        assert!(!v.oom_deflated);
        // Every page of the loop is now read from the guest's disk.
        let per_page = 4096.0 / h.costs.guest_read_bytes_s;
        let want = 1.0 + 100.0 * 256.0 * per_page;
        assert!(
            (out.slowdown - want).abs() < 1e-6,
            "{} {want}",
            out.slowdown
        );
    }

    /// A loop's first pass is read from the guest's disk at the fill rate with or without
    /// memory, so a guest too small for the loop runs it at full speed; the second pass misses
    /// on every page.
    #[test]
    fn a_loops_first_pass_is_not_slowed_by_a_short_guest() {
        let h = host();
        let w = Workload::Loop {
            size: Size(200 * MIB),
            rate: Size(100 * MIB),
            fill: Some(Size(100 * MIB)),
        };
        let mut v = ballooned(true);
        ask_balloon(&mut v, 300);
        let first = v.step(&w, 0.0, &h);
        assert_eq!(bytes(v.balloon), 300 * MIB);
        assert!((first.slowdown - 1.0).abs() < 1e-6, "{}", first.slowdown);
        // The second 100 MiB of the pass: read on, dropped, not slowed.
        let second = v.step(&w, 1.0, &h);
        assert!((second.slowdown - 1.0).abs() < 1e-6, "{}", second.slowdown);
        let later = v.step(&w, 2.0, &h);
        let per_page = 4096.0 / h.costs.guest_read_bytes_s;
        assert!(
            (later.slowdown - (1.0 + 100.0 * 256.0 * per_page)).abs() < 1e-6,
            "{}",
            later.slowdown
        );
    }

    /// A cold-only release (the high state) takes a stream's cache and a loop's while its
    /// first pass is read from disk, nothing of a loop after that or of anonymous memory; an
    /// ordinary release takes any page cache.
    #[test]
    fn a_cold_only_release_takes_streams_and_first_passes_only() {
        let h = host();
        let looped = Workload::Loop {
            size: Size(200 * MIB),
            rate: Size(100 * MIB),
            fill: Some(Size(100 * MIB)),
        };
        let mut v = ballooned(false);
        v.step(&looped, 0.0, &h);
        assert_eq!(v.release_clean(MIB as f64, true, &looped, 0.5), MIB as f64);
        v.step(&looped, 1.0, &h);
        v.step(&looped, 2.0, &h);
        assert_eq!(v.release_clean(MIB as f64, true, &looped, 2.5), 0.0);
        assert_eq!(v.release_clean(MIB as f64, false, &looped, 2.5), MIB as f64);
        let stream = Workload::Stream {
            rate: Size(50 * MIB),
            window: Size(64 * MIB),
        };
        let mut v = ballooned(false);
        v.step(&stream, 0.0, &h);
        assert_eq!(v.release_clean(MIB as f64, true, &stream, 0.5), MIB as f64);
    }

    /// A working set that is not resident because it was never loaded arrives at the fill
    /// rate, not through faults.
    #[test]
    fn pages_never_loaded_arrive_at_the_fill_rate() {
        let h = host();
        let w = Workload::Loop {
            size: Size(160 * MIB),
            rate: Size(290 * MIB),
            fill: Some(Size(20 * MIB)),
        };
        let mut v = ballooned(false);
        for i in 0..3 {
            v.step(&w, f64::from(i), &h);
            assert_eq!(
                bytes(v.resident),
                20 * MIB * (u64::try_from(i).unwrap() + 1)
            );
        }
    }

    /// A hot set's load rate was measured with the guest's first touches in it: the load is
    /// work at full speed, and a page that comes back after it costs a first touch.
    #[test]
    fn a_hot_sets_load_holds_its_first_touches() {
        let h = host();
        let w = Workload::Hot {
            hot: Size(100 * MIB),
            cold: Size(0),
            rate: Size(10 * MIB),
            load: Size(50 * MIB),
        };
        let mut v = ballooned(false);
        for i in 0..2 {
            let out = v.step(&w, f64::from(i), &h);
            assert!((out.useful - 1.0).abs() < 1e-9, "tick {i}: {}", out.useful);
        }
        assert_eq!(bytes(v.resident), 100 * MIB);
        // Ten pages leave (a balloon took them, say) and come back at a first touch each.
        v.give_to_balloon(40960.0);
        let out = v.step(&w, 2.0, &h);
        assert!(
            (out.useful - (1.0 - 10.0 * h.costs.first_touch_s)).abs() < 1e-9,
            "{}",
            out.useful
        );
    }
}
