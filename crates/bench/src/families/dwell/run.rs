//! `memvisor bench dwell` (HyperDealer2 §6.4, Fig. 14): the dwell time of released pages — how
//! long a page the host released stays out before the guest touches or reads it again — per
//! victim policy.
//!
//! One run is one policy in one repetition:
//! 1. `memvisor run --mapper --victims POLICY --mem-limit LIMIT` (the limit is guest RAM: only a
//!    release takes pages out) boots a guest that reads [`Sizes::files`] files once, one after
//!    another (`seqread file=f0,f2,...,f1,f3,... passes=1`): together more than its memory, so
//!    its page cache turns over, each file a sequential stream of its own.
//! 2. From [`Sizes::start_after`] after the guest began reading (its cache full by then) to its
//!    `done` line, the harness releases [`Sizes::release_pages`] pages every [`Sizes::every`]
//!    (`PUT /memory/release`), as a host balancing would, and puts the limit back where it was
//!    (a released page comes back when the guest needs it: it reads it, or reuses its frame for
//!    another block); a VMM without the endpoint answers 501, and the run goes on without.
//! 3. After `done` (the guest stays up `hold_secs`), `GET /stats`: the pager's
//!    `patterns.dwell_ms_log2` (released pages that came back, by how long they stayed out) and
//!    its release counters. The VM is stopped.
//!
//! A policy `memvisor run` does not know (it exits at once, status 2) is "not available".

use std::sync::mpsc;
use std::time::{Duration, Instant};

use memvisor_api::ClientError;

use super::experiment::DwellPlan;
use crate::harness::child::ConsoleEvent;
use crate::harness::order::interleave;
use crate::harness::vm::Vm;
use crate::harness::{teardown, Bench, MeasureStatus};

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DwellRun {
    pub policy: String,
    pub rep: u32,
    pub status: MeasureStatus,
    pub error: String,
    /// The guest's passes, ms.
    pub pass_ms: Vec<f64>,
    /// Release calls answered, and whether the VMM answered 501 (it has no release).
    pub calls: u64,
    pub no_release: bool,
    /// The pager's counters at the end: releases, pages released, released pages that came
    /// back.
    pub released_pages: u64,
    pub refaults: u64,
    /// `dwell_ms_log2`; empty when the VMM does not report it.
    pub hist: Vec<u64>,
}

impl DwellRun {
    pub fn ok(&self) -> bool {
        self.status == MeasureStatus::Ok
    }
}

/// One run (see the module doc).
fn measure(bench: &Bench, setup: &DwellPlan, policy: &str, rep: u32) -> DwellRun {
    let mut p = DwellRun {
        policy: policy.to_owned(),
        rep,
        ..DwellRun::default()
    };
    let z = &setup.sizes;
    let (mem, limit) = (z.mem.to_string(), z.limit.to_string());
    let disk = format!("{},id=data,ro", bench.work.join("data.img").display());
    let started = Vm::start(
        bench,
        policy,
        &format!("{policy}-rep{rep}"),
        |cmd, sock, _| {
            cmd.args(["--mem", &mem, "--mem-limit", &limit])
                .args(["--mapper", "--victims", policy])
                .args(["--sample-pages", "0", "--api-sock"])
                .arg(sock)
                .args(["--disk", &disk, "--workload", "seqread"])
                .args(["--cmdline", &z.cmdline()]);
        },
    );
    let vm = match started {
        Ok(vm) => vm,
        Err(e) => {
            p.status = MeasureStatus::Failed;
            p.error = e;
            return p;
        }
    };
    if let Err(e) = follow(setup, bench.timeout, &vm, &mut p) {
        p.status = MeasureStatus::Failed;
        p.error = e;
    }
    let stderr = vm.log.with_extension("stderr");
    let code = vm.stop().status.and_then(|s| s.code());
    if code == Some(2) && p.pass_ms.is_empty() {
        let why = std::fs::read_to_string(stderr).unwrap_or_default();
        p.status = MeasureStatus::NotAvailable;
        let line = why
            .lines()
            .find(|l| l.contains("error"))
            .or_else(|| why.lines().last());
        let line = line.unwrap_or("").trim();
        p.error = format!("memvisor run refused --victims {policy}: {line}");
    }
    p
}

/// Follows the guest's passes, releasing pages meanwhile, then reads the statistics.
fn follow(setup: &DwellPlan, timeout: Duration, vm: &Vm, p: &mut DwellRun) -> Result<(), String> {
    let z = &setup.sizes;
    let deadline = Instant::now() + timeout;
    let mut next = None;
    loop {
        if teardown::interrupted() {
            return Err("interrupted".into());
        }
        if Instant::now() >= deadline {
            return Err("timed out before the guest's done".into());
        }
        let wait = next.map_or(Duration::from_millis(200), |n: Instant| {
            n.saturating_duration_since(Instant::now())
        });
        match vm.lines.recv_timeout(wait.min(Duration::from_millis(200))) {
            Ok(ConsoleEvent::Line(l, _)) => {
                if l.contains("seqread: file ") {
                    next.get_or_insert_with(|| Instant::now() + z.start_after);
                }
                if let Some((phase, ms, ok)) = crate::harness::guest::parse_result(&l) {
                    if phase.starts_with("pass") {
                        p.pass_ms.push(ms.unwrap_or(0.0));
                    } else if phase == "done" {
                        if ok.as_deref() != Some("1") {
                            return Err(format!("the guest failed: {}", l.trim()));
                        }
                        break;
                    }
                }
            }
            Ok(ConsoleEvent::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the VM ended before the guest's done".into());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(n) = next {
            if Instant::now() >= n && !p.no_release {
                match vm.client().release(z.release_pages) {
                    Ok(r) => {
                        p.calls += 1;
                        // The limit stays where it was: the pages come back when the guest
                        // needs them, without pushing others out.
                        if r.limit_bytes != Some(z.limit) {
                            vm.client()
                                .set_limit(Some(z.limit))
                                .map_err(|e| format!("restoring the limit: {e}"))?;
                        }
                    }
                    Err(ClientError::Refused { status: 501, .. }) => p.no_release = true,
                    Err(e) => return Err(format!("release: {e}")),
                }
                next = Some(n + z.every);
            }
        }
    }
    let s = vm.pager()?;
    p.released_pages = s.counters.released_pages;
    p.refaults = s.counters.released_refaults;
    p.hist = s.patterns.map(|x| x.dwell_ms_log2).unwrap_or_default();
    Ok(())
}

/// Runs every policy, repetition by repetition (in `order::of_rep`'s order).
pub fn run(bench: &Bench, setup: &DwellPlan) -> Result<Vec<DwellRun>, String> {
    let img = bench.work.join("data.img");
    let (mb, files) = (setup.sizes.disk_mb(), setup.sizes.disk_files());
    crate::harness::setup::mkdisk(&bench.exe, &img, mb, Some(&files))?;
    let what = |_: &(), policy: &String| policy.clone();
    let once = |_| vec![()];
    interleave("dwell", setup.reps, once, &setup.policies, what, |t| {
        let pt = measure(bench, setup, t.config, t.rep);
        let back = pt.hist.iter().sum::<u64>();
        let (status, calls) = (pt.status.name(), pt.calls);
        t.say(&format!(
            "{status}: {calls} releases, {back} pages came back {}",
            pt.error
        ));
        Ok(vec![pt])
    })
}
