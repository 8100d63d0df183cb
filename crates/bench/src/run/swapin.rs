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

use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use memvisor_api::{PagerStats, VmStats};
use plotters::prelude::*;

use crate::output::csv;
use crate::run::vm::Msg;
use crate::run::{host, teardown};

/// The limit memory is pushed out under.
pub const LIMIT: u64 = 64 << 20;
/// Guest RAM beyond the size touched (the guest kit's image, metadata and page tables).
pub const HEADROOM: u64 = 256 << 20;
/// How often `GET /stats` is asked while memory comes back.
pub const POLL: Duration = Duration::from_millis(10);
/// Smallest and largest size: the limit's floor, and the toucher's 2 GiB of virtual memory.
pub const MIN_SIZE: u64 = 16 << 20;
pub const MAX_SIZE: u64 = 2 << 30;
/// Sizes run when `--sizes` is not given (MemFlex Fig. 7 goes from 1 to 8 GB).
pub const DEFAULT_SIZES: [u64; 4] = [256 << 20, 512 << 20, 1 << 30, 2 << 30];

const MIB: f64 = 1024.0 * 1024.0;

/// Where swapped pages are, and how they come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mode {
    pub name: &'static str,
    /// A pool large enough for everything (`--pool` = guest RAM, never spilling).
    pub pool: bool,
    /// `--swap-in proactive` (otherwise `faults`).
    pub proactive: bool,
    pub about: &'static str,
}

/// The modes, in the order of the report.
pub const MODES: [Mode; 4] = [
    Mode {
        name: "pool-proactive",
        pool: true,
        proactive: true,
        about: "pool as large as guest RAM (`--pool-spill-at 1`: nothing spills), `--swap-in proactive`: the pager copies the pages back when the limit goes (MemFlex w/ opt)",
    },
    Mode {
        name: "pool-faults",
        pool: true,
        proactive: false,
        about: "the same pool, `--swap-in faults`: the guest's touches fault the pages back (MemFlex w/o opt)",
    },
    Mode {
        name: "disk-proactive",
        pool: false,
        proactive: true,
        about: "no pool: pages in the swap file (`O_DIRECT`), `--swap-in proactive`",
    },
    Mode {
        name: "disk-faults",
        pool: false,
        proactive: false,
        about: "no pool, `--swap-in faults`: every page comes back on a fault, with the pager's prefetch (the baseline, MemFlex's HDD)",
    },
];

/// The mode called `name`.
pub fn mode(name: &str) -> Option<&'static Mode> {
    MODES.iter().find(|m| m.name == name)
}

/// A size given with `--sizes`, checked: a whole number of MiB from [`MIN_SIZE`] to
/// [`MAX_SIZE`].
pub fn check_size(bytes: u64) -> Result<u64, String> {
    if bytes % (1 << 20) != 0 {
        return Err(format!("--sizes {bytes}: give whole MiB, e.g. 256M or 1G"));
    }
    if !(MIN_SIZE..=MAX_SIZE).contains(&bytes) {
        return Err(format!(
            "--sizes {}M: give sizes from {}M to {}M (the guest's toucher has 2 GiB of virtual memory)",
            bytes >> 20,
            MIN_SIZE >> 20,
            MAX_SIZE >> 20
        ));
    }
    Ok(bytes)
}

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point {
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

impl Point {
    pub fn ok(&self) -> bool {
        self.error.is_empty()
    }

    /// MiB per second brought back.
    pub fn mib_s(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        let mib = (self.back_pages << 12) as f64 / MIB;
        (self.ok() && self.back_s > 0.0).then(|| mib / self.back_s)
    }

    /// The pager's own seconds (proactive modes), and MiB per second by them.
    pub fn pager_s(&self) -> Option<f64> {
        pager_seconds(&self.pager_timing).filter(|_| self.ok())
    }

    pub fn pager_mib_s(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        let mib = (self.back_pages << 12) as f64 / MIB;
        self.pager_s().filter(|&s| s > 0.0).map(|s| mib / s)
    }

    /// Nanoseconds per page brought back (MemFlex Table 1's "Total" per page).
    pub fn ns_per_page(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        (self.ok() && self.back_pages > 0).then(|| self.back_s * 1e9 / self.back_pages as f64)
    }
}

/// What a run needs.
pub struct Setup {
    pub exe: PathBuf,
    pub out: PathBuf,
    pub sizes: Vec<u64>,
    pub modes: Vec<&'static Mode>,
    pub reps: u32,
    pub timeout: Duration,
}

/// The toucher's schedule for `size`: step 1 long enough for a first sweep of fresh memory
/// (the guest zeroes every page), step 2 a second (the VM is paused through it), step 3 as
/// long as the slowest swap-in could take (the run is stopped after its first sweep).
pub fn schedule(size: u64) -> String {
    let mb = size >> 20;
    format!("{mb}:{},1:1,{mb}:3600", 3 + (mb * 4).div_ceil(1024))
}

/// `ms=` of the guest's `RESULT ... phase=PHASE` line, if `line` is one.
pub fn phase_ms(line: &str, phase: &str) -> Option<f64> {
    let (p, ms, _) = crate::run::vm::parse_result(line)?;
    if p == phase {
        ms
    } else {
        None
    }
}

fn stats(sock: &Path) -> Result<PagerStats, String> {
    match memvisor_api::call(sock, "GET", "/stats", None) {
        Ok((200, body)) => serde_json::from_str::<VmStats>(&body)
            .map_err(|e| format!("GET /stats answered what is not VmStats: {e}"))?
            .pager
            .ok_or_else(|| "the VM has no pager".to_owned()),
        Ok((code, body)) => Err(format!("GET /stats: HTTP {code}: {}", body.trim())),
        Err(e) => Err(format!("GET /stats: {e}")),
    }
}

fn put(sock: &Path, path: &str, body: &str) -> Result<(), String> {
    match memvisor_api::call(sock, "PUT", path, Some(body)) {
        Ok((200, _)) => Ok(()),
        Ok((code, b)) => Err(format!("PUT {path}: HTTP {code}: {}", b.trim())),
        Err(e) => Err(format!("PUT {path}: {e}")),
    }
}

/// A running VM: its process, console lines and socket.
struct Vm {
    child: Child,
    lines: mpsc::Receiver<Msg>,
    sock: PathBuf,
    deadline: Instant,
}

impl Vm {
    /// Waits for the guest's `phase` line; its `ms=` and when it arrived.
    fn wait_phase(&self, phase: &str) -> Result<(f64, Instant), String> {
        loop {
            if teardown::interrupted() {
                return Err("interrupted".into());
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("timed out waiting for the guest's {phase}"));
            }
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(Msg::Line(l, at)) => {
                    if let Some(ms) = phase_ms(&l, phase) {
                        return Ok((ms, at));
                    }
                    if l.contains("phase=done") {
                        return Err(format!("the guest ended before its {phase}: {}", l.trim()));
                    }
                }
                Ok(Msg::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(format!("the VM ended before the guest's {phase}"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Polls `GET /stats` until `done` holds; fails when the census stops moving for 30 s.
    fn poll_until(
        &self,
        what: &str,
        done: impl Fn(&PagerStats) -> bool,
    ) -> Result<(PagerStats, Instant, u64), String> {
        let mut last = (u64::MAX, u64::MAX);
        let mut moved = Instant::now();
        let mut polls = 0;
        loop {
            let s = stats(&self.sock)?;
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
            if at >= self.deadline {
                return Err(format!("{what}: timed out"));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Stops the VM (SIGTERM, then SIGKILL after 5 s) and reaps it.
    fn stop(mut self) {
        let pid = self.child.id();
        teardown::signal(pid, libc::SIGTERM);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                teardown::forget_pid(pid);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        teardown::kill(pid);
        let _ = self.child.wait();
        teardown::forget_pid(pid);
    }
}

fn start(setup: &Setup, mode: &Mode, size: u64, rep: u32) -> Result<Vm, String> {
    let work = setup.out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let sock = work.join(format!("{}-{}M.sock", mode.name, size >> 20));
    let _ = std::fs::remove_file(&sock);
    let mem = size + HEADROOM;
    let mut cmd = Command::new(&setup.exe);
    cmd.arg("run")
        .args(["--mem", &mem.to_string()])
        .arg("--api-sock")
        .arg(&sock)
        .args([
            "--swap-in",
            if mode.proactive {
                "proactive"
            } else {
                "faults"
            },
        ])
        .args(["--sample-pages", "0"])
        .args(["--workload", "toucher"])
        .args(["--cmdline", &format!("schedule={}", schedule(size))]);
    if mode.pool {
        cmd.args(["--pool", &mem.to_string(), "--pool-spill-at", "1"]);
    }
    let log = setup
        .out
        .join("logs")
        .join(format!("{}-{}M-rep{rep}", mode.name, size >> 20));
    let stderr = std::fs::File::create(log.with_extension("stderr"))
        .map_err(|e| format!("{}: {e}", log.display()))?;
    // The pager's swap file goes in the work directory, on the disk under --out (a tmpfs
    // $TMPDIR would make its "disk" host memory).
    cmd.env("MEMVISOR_LOG", "info")
        .env("TMPDIR", &work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", setup.exe.display()))?;
    teardown::track_pid(child.id());
    teardown::track_file(sock.clone());
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (rx, _) = crate::run::vm::tee_console(stdout, log.with_extension("console"));
    Ok(Vm {
        child,
        lines: rx,
        sock,
        deadline: Instant::now() + setup.timeout,
    })
}

/// One run: see the module doc.
pub fn measure(setup: &Setup, mode: &'static Mode, size: u64, rep: u32) -> Point {
    let mut p = Point {
        mode: mode.name,
        size,
        rep,
        ..Point::default()
    };
    let vm = match start(setup, mode, size, rep) {
        Ok(vm) => vm,
        Err(e) => {
            p.error = e;
            return p;
        }
    };
    if let Err(e) = steps(&vm, mode, size, &mut p) {
        p.error = e;
    }
    vm.stop();
    let log = setup
        .out
        .join("logs")
        .join(format!("{}-{}M-rep{rep}.stderr", mode.name, size >> 20));
    p.pager_timing = pager_timing(&std::fs::read_to_string(log).unwrap_or_default());
    p
}

/// What follows `proactive swap-in: ` in the pager's last such log line (empty without one).
pub fn pager_timing(log: &str) -> String {
    log.lines()
        .rev()
        .find_map(|l| l.split_once("pager: proactive swap-in: "))
        .map(|(_, t)| t.trim().to_owned())
        .unwrap_or_default()
}

fn steps(vm: &Vm, mode: &Mode, size: u64, p: &mut Point) -> Result<(), String> {
    let (ms, _) = vm.wait_phase("sweep1")?;
    p.first_touch_ms = Some(ms);
    let (_, step1_at) = vm.wait_phase("step1")?;
    put(&vm.sock, "/vm/pause", "")?;
    // Out: everything above the limit goes to the pool or the file.
    let t = Instant::now();
    put(&vm.sock, "/memory", &format!("{{\"limit\": {LIMIT}}}"))?;
    let limit_pages = LIMIT >> 12;
    let want_out = (size >> 12).saturating_sub(limit_pages);
    let (s0, at, _) = vm.poll_until("swapping out", |s| {
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
    put(&vm.sock, "/memory", "{\"limit\": null}")?;
    let s1 = if mode.proactive {
        let (s1, at, polls) = vm.poll_until("swapping in", |s| s.pages.swapped_pages == 0)?;
        p.back_s = at.duration_since(t).as_secs_f64();
        p.back_pages = p.swapped_before - s1.pages.swapped_pages;
        p.polls = polls;
        put(&vm.sock, "/vm/resume", "")?;
        let (ms, _) = vm.wait_phase("sweep3")?;
        p.touch_after_ms = Some(ms);
        s1
    } else {
        let t = Instant::now();
        put(&vm.sock, "/vm/resume", "")?;
        let (ms, at) = vm.wait_phase("sweep3")?;
        let s1 = stats(&vm.sock)?;
        p.back_s = ms / 1e3;
        p.host_s = Some(at.duration_since(t).as_secs_f64());
        p.touch_after_ms = Some(ms);
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

/// Runs every size × mode × repetition, repetition by repetition (the modes' order rotated
/// each time), and writes the outputs. Returns the points.
pub fn run(setup: &Setup) -> Result<Vec<Point>, String> {
    let env = host::environment(&setup.out, "qemu-system-x86_64");
    let mut points = Vec::new();
    let total = setup.sizes.len() * setup.modes.len() * setup.reps as usize;
    let started = Instant::now();
    'reps: for rep in 1..=setup.reps {
        for &size in &setup.sizes {
            let k = setup.modes.len();
            for j in 0..k {
                if teardown::interrupted() {
                    break 'reps;
                }
                let mode = setup.modes[(j + rep as usize - 1) % k];
                eprintln!(
                    "[swapin {}/{total} rep {rep}/{} {} {} MiB] starting ({:.0} s since the bench started)",
                    points.len() + 1,
                    setup.reps,
                    mode.name,
                    size >> 20,
                    started.elapsed().as_secs_f64()
                );
                let pt = measure(setup, mode, size, rep);
                if pt.ok() {
                    eprintln!(
                        "[swapin rep {rep} {} {} MiB] out in {:.2} s, back in {:.3} s ({:.0} MiB/s)",
                        mode.name,
                        size >> 20,
                        pt.out_s,
                        pt.back_s,
                        pt.mib_s().unwrap_or(0.0)
                    );
                } else {
                    eprintln!(
                        "[swapin rep {rep} {} {} MiB] failed: {}",
                        mode.name,
                        size >> 20,
                        pt.error
                    );
                }
                points.push(pt);
            }
        }
    }
    let _ = std::fs::remove_dir_all(setup.out.join("work"));
    let csv_path = setup.out.join("results.csv");
    std::fs::write(&csv_path, csv(&points)).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    let svg = setup.out.join("swapin.svg");
    let drawn = plot(&svg, &setup.modes, &points);
    let mut md = markdown(setup, &points, &env);
    match &drawn {
        Ok(()) => md.push_str("\n![swapin](swapin.png)\n"),
        Err(e) => eprintln!("memvisor bench: cannot draw {}: {e}", svg.display()),
    }
    let md_path = setup.out.join("report.md");
    std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("{md}");
    Ok(points)
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,mode,size_bytes,rep,status,out_s,swapped_before_pages,back_s,back_pages,mib_s,ns_per_page,host_s,first_touch_ms,touch_after_ms,proactive_pages,faults_swap,swap_bytes_read,pool_hit_pages,polls,pager_timing,reason";

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or(String::new(), |x| format!("{x:.digits$}"))
}

/// `results.csv`: one row per run.
pub fn csv(points: &[Point]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for p in points {
        let _ = writeln!(
            s,
            "swapin,{},{},{},{},{:.3},{},{:.4},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.mode,
            p.size,
            p.rep,
            if p.ok() { "ok" } else { "failed" },
            p.out_s,
            p.swapped_before,
            p.back_s,
            p.back_pages,
            opt(p.mib_s(), 1),
            opt(p.ns_per_page(), 0),
            opt(p.host_s, 4),
            opt(p.first_touch_ms, 0),
            opt(p.touch_after_ms, 0),
            p.proactive_pages,
            p.faults_swap,
            p.swap_bytes_read,
            p.pool_hits,
            p.polls,
            csv::quoted(&p.pager_timing),
            csv::quoted(&p.error)
        );
    }
    s
}

/// Median, min and max of `v` (`None` when empty).
pub fn spread(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((med, v[0], v[n - 1]))
}

/// The measured points of one size and mode.
fn cell<'a>(points: &'a [Point], size: u64, mode: &str) -> Vec<&'a Point> {
    points
        .iter()
        .filter(|p| p.size == size && p.mode == mode)
        .collect()
}

fn show(s: Option<(f64, f64, f64)>, digits: usize) -> String {
    match s {
        None => "–".into(),
        Some((m, lo, hi)) if (hi - lo).abs() < f64::EPSILON => format!("{m:.digits$}"),
        Some((m, lo, hi)) => format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})"),
    }
}

/// `report.md`.
pub fn markdown(setup: &Setup, points: &[Point], env: &[(String, String)]) -> String {
    let mut s = String::from("# memvisor bench swapin\n\n");
    let _ = writeln!(
        s,
        "MemFlex §4 (Table 1, Fig. 7): the time to bring back memory the pager swapped out. A guest of the size + {} MiB touches the size (`toucher`), is paused, gets a {} MiB limit, and once everything is out the limit is removed: proactive modes are timed on the host from that request until `GET /stats` (asked every {} ms) shows no page swapped; fault modes by the guest's own first sweep of the size after it resumes. {} repetition(s), modes interleaved.\n",
        HEADROOM >> 20,
        LIMIT >> 20,
        POLL.as_millis(),
        setup.reps
    );
    let _ = writeln!(s, "## Time to bring the memory back\n");
    let _ = writeln!(
        s,
        "Median (min–max) over the runs that completed; MiB/s counts the pages that came back (proactive: every swapped page, a few MiB of the guest kit's own besides the size)."
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "\"Pager's own\": proactive modes, the time the pager's log gives for the swap-in (from the limit's removal reaching it to its last install); the harness's time adds the wait for the `GET /stats` answer that shows it done. \"Guest's next sweep\": the guest's first sweep of the size once it runs again (in the fault modes, that is the measurement).\n"
    );
    let _ = writeln!(s, "| size | mode | runs ok | seconds | MiB/s | pager's own s | pager's own MiB/s | ns per page | out (s) | guest's next sweep (ms) |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for &size in &setup.sizes {
        for m in &setup.modes {
            let c = cell(points, size, m.name);
            let ok: Vec<&&Point> = c.iter().filter(|p| p.ok()).collect();
            let col = |f: &dyn Fn(&Point) -> Option<f64>| {
                spread(ok.iter().filter_map(|p| f(p)).collect())
            };
            let _ = writeln!(
                s,
                "| {} MiB | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} |",
                size >> 20,
                m.name,
                ok.len(),
                c.len(),
                show(col(&|p| Some(p.back_s)), 3),
                show(col(&Point::mib_s), 0),
                show(col(&Point::pager_s), 3),
                show(col(&Point::pager_mib_s), 0),
                show(col(&Point::ns_per_page), 0),
                show(col(&|p| Some(p.out_s)), 2),
                show(col(&|p| p.touch_after_ms), 0),
            );
        }
    }
    let _ = writeln!(s, "\n## Against MemFlex\n");
    let _ = writeln!(
        s,
        "MemFlex (Fig. 7a, Table 1; a 6 GB Redis VM, 2 GB swapped, HDD swap): proactive swap-in from its shared-memory pool brought back 1 GB in 1.8 s and 8 GB in 6.5 s, 2 GB in 3.46 s (6,045 ns per page); without the optimisation, 286,984.8 ns per page (PTE update 277,498 ns of it, 416 ns with the optimisation), and from the HDD 401,021.8 ns per page (212.96 s for 2 GB).\n"
    );
    let _ = writeln!(
        s,
        "| size | mode | seconds here | ns per page here | MemFlex |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    let paper = |size: u64, m: &Mode| -> &'static str {
        match (size, m.pool, m.proactive) {
            (0x4000_0000, true, true) => "1.8 s (w/ opt, Fig. 7a)",
            (0x8000_0000, true, true) => "3.46 s, 6,045 ns/page (w/ opt, Table 1)",
            (0x8000_0000, true, false) => "150.19 s, 286,984.8 ns/page (w/o opt, Table 1)",
            (0x8000_0000, false, false) => "212.96 s, 401,021.8 ns/page (HDD, Table 1)",
            _ => "–",
        }
    };
    for &size in &setup.sizes {
        for m in &setup.modes {
            let ok: Vec<&Point> = cell(points, size, m.name)
                .into_iter()
                .filter(|p| p.ok())
                .collect();
            let _ = writeln!(
                s,
                "| {} MiB | {} | {} | {} | {} |",
                size >> 20,
                m.name,
                show(spread(ok.iter().map(|p| p.back_s).collect()), 3),
                show(
                    spread(ok.iter().filter_map(|p| p.ns_per_page()).collect()),
                    0
                ),
                paper(size, m)
            );
        }
    }
    let failed: Vec<&Point> = points.iter().filter(|p| !p.ok()).collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "\n## Runs that did not complete\n");
        for p in failed {
            let _ = writeln!(
                s,
                "- {} {} MiB rep {}: {}",
                p.mode,
                p.size >> 20,
                p.rep,
                p.error
            );
        }
    }
    let _ = writeln!(s, "\n## Per run\n");
    let _ = writeln!(s, "| mode | size | rep | back (s) | MiB/s | host (s) | proactive pages | swap faults | read from the swap store (MiB) | of it from the pool (MiB) | polls |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for p in points.iter().filter(|p| p.ok()) {
        let _ = writeln!(
            s,
            "| {} | {} MiB | {} | {:.3} | {} | {} | {} | {} | {} | {} | {} |",
            p.mode,
            p.size >> 20,
            p.rep,
            p.back_s,
            opt(p.mib_s(), 0),
            opt(p.host_s, 3),
            p.proactive_pages,
            p.faults_swap,
            p.swap_bytes_read >> 20,
            p.pool_hits >> 8,
            p.polls
        );
    }
    let timed: Vec<&Point> = points
        .iter()
        .filter(|p| !p.pager_timing.is_empty())
        .collect();
    if !timed.is_empty() {
        let _ = writeln!(
            s,
            "\n## Where the pager's proactive swap-ins spent their time\n"
        );
        let _ = writeln!(
            s,
            "From each run's log (`pager: proactive swap-in: ...`): the table scan and the checks are under the page lock, the ordering and the file's reads off it (the reads on a read-ahead thread, overlapping the installs), the `UFFDIO_COPY`s under it (256 pages per hold at most).\n"
        );
        for p in timed {
            let _ = writeln!(
                s,
                "- {} {} MiB rep {}: {}",
                p.mode,
                p.size >> 20,
                p.rep,
                p.pager_timing
            );
        }
    }
    let _ = writeln!(s, "\n## Modes\n");
    for m in &setup.modes {
        let _ = writeln!(s, "- `{}`: {}", m.name, m.about);
    }
    let _ = writeln!(
        s,
        "- every run: `memvisor run --mem SIZE+{}M --sample-pages 0 --workload toucher --cmdline schedule=…`, the pager's swap file in the output directory's `work/` (on its disk)",
        HEADROOM >> 20
    );
    let _ = writeln!(s, "\n## Environment\n");
    for (k, v) in env {
        let _ = writeln!(s, "- {k}: {v}");
    }
    s
}

const COLORS: [RGBColor; 4] = [
    RGBColor(202, 0, 32),
    RGBColor(244, 165, 130),
    RGBColor(33, 102, 172),
    RGBColor(146, 197, 222),
];

/// `swapin.svg` and `.png` (MemFlex Fig. 7a): seconds to bring memory back against its size,
/// one line per mode (the median of the runs), every run as a small mark; log scale.
pub fn plot(path: &Path, modes: &[&'static Mode], points: &[Point]) -> Result<(), String> {
    if !points.iter().any(Point::ok) {
        return Err("no run completed".into());
    }
    crate::output::plot::svg_and_png!(path, (900, 620), |root| draw(root, modes, points))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    modes: &[&'static Mode],
    points: &[Point],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let ok: Vec<&Point> = points.iter().filter(|p| p.ok()).collect();
    #[allow(clippy::cast_precision_loss)]
    let gib = |p: &Point| p.size as f64 / 1024.0 / MIB;
    let xmax = ok.iter().map(|p| gib(p)).fold(0.0f64, f64::max) * 1.1;
    let ymax = ok.iter().map(|p| p.back_s).fold(0.0f64, f64::max) * 2.0;
    let ymin = ok
        .iter()
        .map(|p| p.back_s)
        .filter(|&v| v > 0.0)
        .fold(ymax, f64::min)
        / 2.0;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "swapin: time to bring swapped memory back (MemFlex Fig. 7a)",
            ("sans-serif", 22),
        )
        .margin(14)
        .margin_right(30)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, (ymin.max(1e-3)..ymax.max(1e-2)).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("GiB brought back")
        .y_desc("seconds (log scale)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    for (i, m) in modes.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut sizes: Vec<u64> = ok
            .iter()
            .filter(|p| p.mode == m.name)
            .map(|p| p.size)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let line: Vec<(f64, f64)> = sizes
            .iter()
            .filter_map(|&sz| {
                let v: Vec<&Point> = ok
                    .iter()
                    .copied()
                    .filter(|p| p.mode == m.name && p.size == sz)
                    .collect();
                let med = spread(v.iter().map(|p| p.back_s).collect())?.0;
                Some((gib(v[0]), med))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(3)))
            .map_err(e)?
            .label(m.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(
                ok.iter()
                    .filter(|p| p.mode == m.name)
                    .map(|p| Cross::new((gib(p), p.back_s), 4, color.stroke_width(1))),
            )
            .map_err(e)?;
        chart
            .draw_series(line.iter().map(|&q| Circle::new(q, 5, color.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .margin(10)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(mode: &'static str, size: u64, back_s: f64, pages: u64) -> Point {
        Point {
            mode,
            size,
            rep: 1,
            back_s,
            back_pages: pages,
            ..Point::default()
        }
    }

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
        assert_eq!(schedule(256 << 20), "256:4,1:1,256:3600");
        assert_eq!(schedule(2 << 30), "2048:11,1:1,2048:3600");
        assert_eq!(
            mode("disk-faults").map(|m| (m.pool, m.proactive)),
            Some((false, false))
        );
        assert!(mode("pool").is_none());
        assert_eq!(
            phase_ms(
                "RESULT workload=toucher phase=sweep3 ws_mb=64 ms=812.5",
                "sweep3"
            ),
            Some(812.5)
        );
        assert_eq!(
            phase_ms("RESULT workload=toucher phase=step3 ms=9", "sweep3"),
            None
        );
        let log = "x INFO pager: proactive swap-in: 10 pages in 1.0 ms (39 MiB/s): table scan 0.1 ms\nother\ny INFO pager: proactive swap-in: 20 pages in 2.0 ms\n";
        assert_eq!(pager_timing(log), "20 pages in 2.0 ms");
        assert_eq!(pager_timing("nothing"), "");
    }

    #[test]
    fn rates_medians_and_the_report() {
        // 1 GiB in 0.5 s: 2048 MiB/s, 1907 ns per page.
        let p = pt("pool-proactive", 1 << 30, 0.5, 262_144);
        assert!((p.mib_s().unwrap() - 2048.0).abs() < 1e-9);
        assert!((p.ns_per_page().unwrap() - 1907.3486).abs() < 1e-3);
        let failed = Point {
            error: "timed out".into(),
            ..p.clone()
        };
        assert_eq!(failed.mib_s(), None);
        assert_eq!(spread(vec![3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(vec![4.0, 1.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(vec![]), None);

        let timed = Point {
            pager_timing: "262144 pages in 400.0 ms (2560 MiB/s): table scan 1.0 ms".into(),
            ..p.clone()
        };
        assert_eq!(timed.pager_s(), Some(0.4));
        assert!((timed.pager_mib_s().unwrap() - 2560.0).abs() < 1e-9);
        assert_eq!(pager_seconds("garbage"), None);
        assert_eq!(p.pager_s(), None);
        let points = vec![
            timed,
            pt("pool-proactive", 1 << 30, 0.7, 262_144),
            failed,
            pt("disk-faults", 1 << 30, 4.0, 262_144),
        ];
        let setup = Setup {
            exe: PathBuf::new(),
            out: PathBuf::new(),
            sizes: vec![1 << 30],
            modes: vec![
                mode("pool-proactive").unwrap(),
                mode("disk-faults").unwrap(),
            ],
            reps: 3,
            timeout: Duration::from_secs(1),
        };
        let md = markdown(&setup, &points, &[]);
        assert!(md.contains("| 1024 MiB | pool-proactive | 2/3 | 0.600 (0.500–0.700) | 1755 (1463–2048) | 0.400 | 2560 |"), "{md}");
        assert!(
            md.contains("| 1024 MiB | disk-faults | 1/1 | 4.000 | 256 | – | – |"),
            "{md}"
        );
        assert!(md.contains("1.8 s (w/ opt, Fig. 7a)"));
        assert!(md.contains("- pool-proactive 1024 MiB rep 1: timed out"));
        let csv = csv(&points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        let cols = CSV_HEADER.split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == cols), "{csv}");
        assert!(lines[1].starts_with("swapin,pool-proactive,1073741824,1,ok,"));
        assert!(lines[3].contains(",failed,") && lines[3].ends_with("\"timed out\""));
    }
}
