//! `memvisor bench swapin` (MemFlex §4, Table 1 and Fig. 7): how long it takes to bring back
//! memory the pager swapped out, from the pool or from the swap file, proactively or by the
//! guest's faults.
//!
//! One run is one size in one mode:
//! 1. `memvisor run` boots a guest of the size plus [`HEADROOM`] with the `toucher` workload:
//!    step 1 touches the size (its first sweep also writes every page), step 2 touches 1 MiB,
//!    step 3 touches the size again.
//! 2. When step 1's line arrives the harness pauses the VM (`PUT /vm/pause`), sets a limit of
//!    [`LIMIT`] (`PUT /memory`) and waits until the pager has swapped the rest out (to the
//!    pool, or to the swap file without one).
//! 3. It removes the limit (`PUT /memory` with `null`). Proactive modes: the pager brings the
//!    pages back by itself and the harness asks `GET /stats` every [`POLL`] until no page is
//!    swapped; the time is from the request to that answer. Fault modes: nothing comes back
//!    until the guest touches it; the harness resumes the VM (step 2 has run out meanwhile, so
//!    step 3 starts at once) and the time is the guest's own for its first sweep of step 3
//!    (`sweep3`), which faults every page back.
//! 4. The VM is resumed (proactive modes) and its `sweep3` line read, then stopped.
//!
//! The VM is paused while its memory goes out and, in the proactive modes, while it comes
//! back, so the guest touches nothing meanwhile: the proactive time is the pager's alone, as
//! in MemFlex's measurement.

use std::time::{Duration, Instant};

use memvisor_api::PagerStats;

use super::experiment::{schedule, Mode, SwapinPlan, HEADROOM, LIMIT, POLL};
use crate::harness::order::interleave;
use crate::harness::vm::Vm;
use crate::harness::{teardown, Bench};
use crate::report::numbers::MIB;

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SwapinRun {
    pub mode: &'static str,
    pub size: u64,
    pub rep: u32,
    /// Empty when the run measured what it should; otherwise why not.
    pub error: String,
    /// Seconds from the lower limit to everything out.
    pub out_s: f64,
    /// Pages swapped when the limit went.
    pub swapped_before: u64,
    /// Proactive modes: seconds from removing the limit to no page swapped (host clock).
    /// Fault modes: the guest's first sweep of the size after it resumed (its clock).
    pub back_s: f64,
    /// Pages that came back in that time (proactive: all that were swapped; faults: those
    /// the sweep faulted in).
    pub back_pages: u64,
    /// Fault modes: host seconds from the resume to the sweep's line.
    pub host_s: Option<f64>,
    /// The guest's first sweep of step 1 (fresh memory) and of step 3 (after the swap-in).
    pub first_touch_ms: Option<f64>,
    pub touch_after_ms: Option<f64>,
    /// The pager's counters across the swap-in: pages brought back proactively, faults served
    /// from the swap store, bytes read from the swap file, pool hits.
    pub proactive_pages: u64,
    pub faults_swap: u64,
    pub swap_bytes_read: u64,
    pub pool_hits: u64,
    pub polls: u64,
    /// Proactive modes: where the pager says its swap-in spent the time (its log line).
    pub pager_timing: String,
}

/// The pager's own time for a proactive swap-in, in seconds, from its log line's `in X ms`.
pub fn pager_seconds(timing: &str) -> Option<f64> {
    let (_, rest) = timing.split_once(" pages in ")?;
    let (ms, _) = rest.split_once(" ms")?;
    ms.parse::<f64>().ok().map(|ms| ms / 1e3)
}

impl SwapinRun {
    pub fn ok(&self) -> bool {
        self.error.is_empty()
    }

    /// MiB per second brought back.
    pub fn mib_s(&self) -> Option<f64> {
        let mib = (self.back_pages << 12) as f64 / MIB;
        (self.ok() && self.back_s > 0.0).then(|| mib / self.back_s)
    }

    /// The pager's own seconds (proactive modes), and MiB per second by them.
    pub fn pager_s(&self) -> Option<f64> {
        pager_seconds(&self.pager_timing).filter(|_| self.ok())
    }

    pub fn pager_mib_s(&self) -> Option<f64> {
        let mib = (self.back_pages << 12) as f64 / MIB;
        self.pager_s().filter(|&s| s > 0.0).map(|s| mib / s)
    }

    /// Nanoseconds per page brought back (MemFlex Table 1's "Total" per page).
    pub fn ns_per_page(&self) -> Option<f64> {
        (self.ok() && self.back_pages > 0).then(|| self.back_s * 1e9 / self.back_pages as f64)
    }
}

/// Polls `GET /stats` until `done` holds; fails when the census stops moving for 30 s.
fn poll_until(
    vm: &Vm,
    deadline: Instant,
    what: &str,
    done: impl Fn(&PagerStats) -> bool,
) -> Result<(PagerStats, Instant, u64), String> {
    let mut last = (u64::MAX, u64::MAX);
    let mut moved = Instant::now();
    let mut polls = 0;
    loop {
        let s = vm.pager()?;
        let at = Instant::now();
        polls += 1;
        if done(&s) {
            return Ok((s, at, polls));
        }
        let now = (s.pages.swapped_pages, s.pages.resident_pages);
        if now != last {
            last = now;
            moved = at;
        } else if moved.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "{what}: nothing moved for 30 s ({} pages resident, {} swapped)",
                now.1, now.0
            ));
        }
        if teardown::interrupted() {
            return Err("interrupted".into());
        }
        if at >= deadline {
            return Err(format!("{what}: timed out"));
        }
        std::thread::sleep(POLL);
    }
}

fn start(bench: &Bench, mode: &Mode, size: u64, rep: u32) -> Result<Vm, String> {
    let name = format!("{}-{}M", mode.name, size >> 20);
    let mem_bytes = size + HEADROOM;
    let mem = mem_bytes.to_string();
    let pool = mode.pool_bytes(size, mem_bytes).map(|b| b.to_string());
    let swap_in = if mode.proactive {
        "proactive"
    } else {
        "faults"
    };
    Vm::start(bench, &name, &format!("{name}-rep{rep}"), |cmd, sock, _| {
        cmd.args(["--mem", &mem])
            .arg("--api-sock")
            .arg(sock)
            .args(["--swap-in", swap_in, "--sample-pages", "0"])
            .args(["--workload", "toucher"])
            .args(["--cmdline", &format!("schedule={}", schedule(size))]);
        if let Some(pool) = &pool {
            cmd.args(["--pool", pool, "--pool-spill-at", "1"]);
        }
    })
}

/// One run: see the module doc.
pub fn measure(bench: &Bench, mode: &'static Mode, size: u64, rep: u32) -> SwapinRun {
    let mut p = SwapinRun {
        mode: mode.name,
        size,
        rep,
        ..SwapinRun::default()
    };
    let vm = match start(bench, mode, size, rep) {
        Ok(vm) => vm,
        Err(e) => {
            p.error = e;
            return p;
        }
    };
    let deadline = Instant::now() + bench.timeout;
    if let Err(e) = steps(&vm, deadline, mode, size, &mut p) {
        p.error = e;
    }
    let log = vm.log.with_extension("stderr");
    vm.stop();
    p.pager_timing = pager_timing(&std::fs::read_to_string(log).unwrap_or_default());
    p
}

/// What follows `proactive swap-in: ` in the pager's last such log line (empty without one).
pub fn pager_timing(log: &str) -> String {
    let line = log
        .lines()
        .rev()
        .find_map(|l| l.split_once("pager: proactive swap-in: "));
    line.map_or(String::new(), |(_, t)| t.trim().to_owned())
}

fn steps(
    vm: &Vm,
    deadline: Instant,
    mode: &Mode,
    size: u64,
    p: &mut SwapinRun,
) -> Result<(), String> {
    // A first sweep that outlasts step 1 is never printed: fail at step 1, not at the deadline.
    p.first_touch_ms = vm.wait_phase_before("sweep1", "step1", deadline)?.0;
    let (_, step1_at) = vm.wait_phase("step1", deadline)?;
    vm.client().pause().map_err(|e| e.to_string())?;
    // Out: everything above the limit goes to the pool or the file.
    let t = Instant::now();
    let api = vm.client();
    api.set_limit(Some(LIMIT)).map_err(|e| e.to_string())?;
    let limit_pages = LIMIT >> 12;
    let want_out = (size >> 12).saturating_sub(limit_pages);
    let (s0, at, _) = poll_until(vm, deadline, "swapping out", |s| {
        s.pages.resident_pages <= limit_pages && s.pages.swapped_pages >= want_out
    })?;
    p.out_s = at.duration_since(t).as_secs_f64();
    p.swapped_before = s0.pages.swapped_pages;
    // Step 2 (one second) runs out while the VM is paused, so step 3 starts at the resume.
    if let Some(wait) = Duration::from_millis(1500).checked_sub(step1_at.elapsed()) {
        std::thread::sleep(wait);
    }
    let c0 = s0.counters;
    let hits0 = s0.pool.map_or(0, |x| x.hit_pages);
    let t = Instant::now();
    vm.client().set_limit(None).map_err(|e| e.to_string())?;
    let s1 = if mode.proactive {
        let (s1, at, polls) =
            poll_until(vm, deadline, "swapping in", |s| s.pages.swapped_pages == 0)?;
        p.back_s = at.duration_since(t).as_secs_f64();
        p.back_pages = p.swapped_before - s1.pages.swapped_pages;
        p.polls = polls;
        vm.client().resume().map_err(|e| e.to_string())?;
        p.touch_after_ms = vm.wait_phase("sweep3", deadline)?.0;
        s1
    } else {
        let t = Instant::now();
        vm.client().resume().map_err(|e| e.to_string())?;
        let (ms, at) = vm.wait_phase("sweep3", deadline)?;
        let s1 = vm.pager()?;
        p.back_s = ms.unwrap_or(0.0) / 1e3;
        p.host_s = Some(at.duration_since(t).as_secs_f64());
        p.touch_after_ms = ms;
        p.back_pages = p.swapped_before.saturating_sub(s1.pages.swapped_pages);
        s1
    };
    let c = s1.counters.since(&c0);
    p.proactive_pages = c.proactive_swap_ins;
    p.faults_swap = c.faults_swap;
    p.swap_bytes_read = c.swap_bytes_read;
    p.pool_hits = s1.pool.map_or(0, |x| x.hit_pages).saturating_sub(hits0);
    Ok(())
}

/// Runs every size × mode × repetition, repetition by repetition (the modes in
/// `order::of_rep`'s order). Returns the points.
pub fn run(bench: &Bench, setup: &SwapinPlan) -> Result<Vec<SwapinRun>, String> {
    let what = |size: &u64, mode: &&Mode| format!("{} {} MiB", mode.name, size >> 20);
    let sizes = |_| setup.sizes.clone();
    interleave("swapin", setup.reps, sizes, &setup.modes, what, |t| {
        let pt = measure(bench, t.config, *t.cell, t.rep);
        t.say(&if pt.ok() {
            let mib_s = pt.mib_s().unwrap_or(0.0);
            let (out, back) = (pt.out_s, pt.back_s);
            format!("out in {out:.2} s, back in {back:.3} s ({mib_s:.0} MiB/s)")
        } else {
            format!("failed: {}", pt.error)
        });
        Ok(vec![pt])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::swapin::experiment::{check_size, mode};
    use crate::harness::guest::parse_result;

    #[test]
    fn sizes_are_checked_and_schedules_fit_them() {
        assert_eq!(check_size(256 << 20), Ok(256 << 20));
        assert_eq!(check_size(2 << 30), Ok(2 << 30));
        assert!(check_size((2 << 30) + (1 << 20))
            .unwrap_err()
            .contains("2048M"));
        assert!(check_size(8 << 20).unwrap_err().contains("from 16M"));
        assert!(check_size((64 << 20) + 5)
            .unwrap_err()
            .contains("whole MiB"));
        assert_eq!(schedule(256 << 20), "256:6,1:1,256:3600");
        assert_eq!(schedule(2 << 30), "2048:23,1:1,2048:3600");
        let disk_faults = mode("disk-faults").map(|m| (m.pool_pct, m.proactive));
        assert_eq!(disk_faults, Some((0, false)));
        let half = mode("disk50-proactive").unwrap();
        // Half of what a 1 GiB run swaps (1 GiB less the 64 MiB limit), in whole MiB.
        assert_eq!(half.pool_bytes(1 << 30, 2 << 30), Some(480 << 20));
        assert_eq!(
            mode("pool-faults").unwrap().pool_bytes(1 << 30, 2 << 30),
            Some(2 << 30)
        );
        assert_eq!(
            mode("disk-proactive").unwrap().pool_bytes(1 << 30, 2 << 30),
            None
        );
        assert!(mode("pool").is_none());
        let sweep = parse_result("RESULT workload=toucher phase=sweep3 ws_mb=64 ms=812.5");
        assert_eq!(sweep, Some(("sweep3".into(), Some(812.5), None)));
        let log = "x INFO pager: proactive swap-in: 10 pages in 1.0 ms (39 MiB/s): table scan 0.1 ms\nother\ny INFO pager: proactive swap-in: 20 pages in 2.0 ms\n";
        assert_eq!(pager_timing(log), "20 pages in 2.0 ms");
        assert_eq!(pager_timing("nothing"), "");
    }
}
