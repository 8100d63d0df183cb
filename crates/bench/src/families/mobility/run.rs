//! `memvisor bench mobility`: one run is one configuration at one guest size and working set in
//! one repetition. Every run boots the guest kit's `alloc` (a fresh task allocates and touches
//! the working set, round after round: `Cell::rounds`); when its first round's line comes, the VM
//! moves (or, for `*-start`, runs on), and the work measured is what is left: the remaining
//! rounds to the guest's `done`. memvisor's runs, each with `--mem-limit` equal to guest RAM (the
//! pager holds it from boot, as under `memvisor host`, so it knows which pages were touched):
//!
//! - `memvisor-start`: `memvisor run`; the time from starting the process to vCPU 0's first
//!   `KVM_RUN` (its log line `vcpu0: first KVM_RUN at monotonic_ns=N`, on the clock the harness
//!   read just before it started the process), and the host time from the first round's line to
//!   `done`.
//! - `memvisor-restore`: `PUT /vm/snapshot {"stop": true}` at the first round's line; then
//!   `memvisor run --restore DIR`: its time to the first `KVM_RUN`, and the host time from its
//!   start to `done`.
//! - `memvisor-postcopy`, `memvisor-precopy`: the destination `memvisor run --incoming
//!   127.0.0.1:PORT --migration-token T` waits first; at the first round's line `PUT
//!   /vm/migrate` on the source. Its answer (`MigrateResult`) gives the downtime, total time,
//!   bytes and pages; the work is from the first round's line to `done` on the destination.
//!
//! Every VM must end with the guest's success (status 1): `alloc` checks every fresh page reads
//! zero, so a page a restore or a migration got wrong fails the run. QEMU's runs are in `qemu`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use memvisor_api::MigrateRequest;

use super::experiment::{Action, Cell, Config};
use crate::harness::child::{exit_text, wait_for, ConsoleEvent};
use crate::harness::guest::parse_result;
use crate::harness::vm::Vm;
use crate::harness::{Bench, MeasureStatus};

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct MobRun {
    pub config: &'static str,
    pub cell: Cell,
    pub rep: u32,
    pub status: MeasureStatus,
    pub error: String,
    /// The measures it has, by name (`report::MEASURES`), in their units.
    pub values: Vec<(&'static str, f64)>,
}

impl MobRun {
    pub fn new(config: &'static Config, cell: Cell, rep: u32) -> MobRun {
        MobRun {
            config: config.name,
            cell,
            rep,
            status: MeasureStatus::Ok,
            error: String::new(),
            values: Vec::new(),
        }
    }

    pub fn ok(&self) -> bool {
        self.status == MeasureStatus::Ok
    }

    /// The value of measure `name`, if the run has it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|v| v.0 == name).map(|v| v.1)
    }

    pub fn set(&mut self, name: &'static str, v: f64) {
        self.values.push((name, v));
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the VMM's first-`KVM_RUN` line.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only to `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The milliseconds from `started` (a [`monotonic_ns`] reading) to vCPU 0's first `KVM_RUN`,
/// from the VMM's log `log` (its `.stderr`).
pub fn first_kvm_run_ms(log: &Path, started: u64) -> Result<f64, String> {
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    first_kvm_run_in(&text, started)
        .ok_or_else(|| format!("no first KVM_RUN line in {}", log.display()))
}

fn first_kvm_run_in(text: &str, started: u64) -> Option<f64> {
    let ns = monotonic_in(text, "first KVM_RUN at monotonic_ns=")?;
    Some(ns.checked_sub(started)? as f64 / 1e6)
}

/// The clock reading a VMM's log line `…KEYN` gives (the first such line).
fn monotonic_in(text: &str, key: &str) -> Option<u64> {
    let (_, rest) = text.split_once(key)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// A migration's time with no vCPU running: from the source's pause (its line `the vCPUs
/// stopped at monotonic_ns=N`) to the destination's first `KVM_RUN`, both on this host's
/// clock.
fn stopped_ms(src_log: &Path, dst_log: &Path) -> Result<f64, String> {
    let text =
        std::fs::read_to_string(src_log).map_err(|e| format!("{}: {e}", src_log.display()))?;
    let stopped = monotonic_in(&text, "the vCPUs stopped at monotonic_ns=")
        .ok_or_else(|| format!("no line of the vCPUs stopping in {}", src_log.display()))?;
    first_kvm_run_ms(dst_log, stopped)
}

/// The guest's lines a run keeps: when its first round ended, its later rounds' own times,
/// when it was done.
#[derive(Default)]
pub struct Guest {
    pub round1_at: Option<Instant>,
    pub rounds: Vec<(u32, f64)>,
    pub done_at: Option<Instant>,
}

impl Guest {
    /// Takes `line` (arrived `at`): `Some(Err)` when the guest failed, `Some(Ok)` at `done`,
    /// or, when `stop_at_round1`, at the first round's line.
    pub fn take(
        &mut self,
        line: &str,
        at: Instant,
        stop_at_round1: bool,
    ) -> Option<Result<(), String>> {
        let (phase, ms, ok) = parse_result(line)?;
        if ok.as_deref() == Some("0") {
            return Some(Err(format!("the guest failed: {}", line.trim())));
        }
        if phase == "done" {
            self.done_at = Some(at);
            return Some(Ok(()));
        }
        let r: u32 = phase.strip_prefix("round")?.parse().ok()?;
        if r == 1 {
            self.round1_at = Some(at);
            return stop_at_round1.then_some(Ok(()));
        }
        if let Some(ms) = ms {
            self.rounds.push((r, ms));
        }
        None
    }

    /// Reads `vm`'s console until its first round's line (`to_round1`) or its `done`.
    pub fn follow(&mut self, vm: &Vm, deadline: Instant, to_round1: bool) -> Result<(), String> {
        let what = if to_round1 {
            "the guest's first round"
        } else {
            "the guest's done"
        };
        wait_for(&vm.lines, deadline, what, |l, at| {
            self.take(l, at, to_round1)
        })
    }

    /// Takes the lines `vm` printed that nobody read yet (a source's, after it moved).
    pub fn drain(&mut self, vm: &Vm) {
        while let Ok(ConsoleEvent::Line(l, at)) = vm.lines.try_recv() {
            let _ = self.take(&l, at, false);
        }
    }

    /// Round 2, the one the guest was in when it moved, with the guest's own time, as a
    /// measure.
    pub fn into_run(self, r: &mut MobRun) {
        if let Some((_, ms)) = self.rounds.iter().find(|x| x.0 == 2) {
            r.set("round 2", *ms);
        }
    }
}

/// Waits for `vm` to end by itself after its guest's `done` (30 s), stops it, and checks it
/// ended as a guest's success does (status 1).
pub fn end(vm: Vm, what: &str) -> Result<(), String> {
    end_with(vm, what, 1)
}

/// [`end`] after the guest's lines were followed to its `done` (`followed`); a VM whose guest
/// went wrong, or was not followed to the end, is stopped at once with that error.
pub fn finish(vm: Vm, followed: Result<(), String>, what: &str) -> Result<(), String> {
    match followed {
        Ok(()) => end(vm, what),
        Err(e) => {
            vm.stop();
            Err(e)
        }
    }
}

/// [`end`], for a VM that ends with status `code` (0: a source a snapshot or migration ended).
pub fn end_with(vm: Vm, what: &str, code: i32) -> Result<(), String> {
    let mut vm = vm;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until && !matches!(vm.child.try_wait(), Ok(Some(_))) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped = vm.stop();
    match stopped.status {
        Some(s) if s.code() == Some(code) && !stopped.killed => Ok(()),
        Some(s) => Err(format!("{what} ended: {}", exit_text(s))),
        None => Err(format!("{what} could not be waited for")),
    }
}

/// Starts `memvisor run` of `cell`'s guest (`extra` adds flags); its name in the work
/// directory `NAME`, its logs `NAME-repR.*`.
pub fn start(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    name: &str,
    extra: impl FnOnce(&mut Command, &Path),
) -> Result<Vm, String> {
    let mem = cell.size.to_string();
    let tag = format!("{name}-{}M-ws{}", cell.size >> 20, cell.ws_pct);
    Vm::start(bench, &tag, &format!("{tag}-rep{rep}"), |cmd, sock, _| {
        cmd.args(["--mem", &mem])
            .args(["--workload", "alloc", "--cmdline", &cell.cmdline()]);
        extra(cmd, sock);
    })
}

/// [`start`] of memvisor itself, its pager holding guest RAM from boot (`--mem-limit` = guest
/// RAM).
fn start_memvisor(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    name: &str,
    extra: impl FnOnce(&mut Command, &Path),
) -> Result<Vm, String> {
    start(bench, cell, rep, name, |cmd, sock| {
        cmd.args(["--mem-limit", &cell.size.to_string()]);
        extra(cmd, sock);
    })
}

/// One memvisor run (see the module doc).
pub fn measure(bench: &Bench, config: &'static Config, cell: Cell, rep: u32) -> MobRun {
    let mut r = MobRun::new(config, cell, rep);
    let deadline = Instant::now() + bench.timeout;
    let result = match config.action {
        Action::Start => fresh(bench, cell, rep, deadline, &mut r),
        Action::Restore => restore(bench, cell, rep, deadline, &mut r),
        Action::Migrate { precopy_rounds, .. } => {
            migrate(bench, cell, rep, precopy_rounds, deadline, &mut r)
        }
    };
    if let Err(e) = result {
        r.status = MeasureStatus::Failed;
        r.error = e;
    }
    r
}

/// `d` in milliseconds.
pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn fresh(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    deadline: Instant,
    r: &mut MobRun,
) -> Result<(), String> {
    let t0 = monotonic_ns();
    let vm = start_memvisor(bench, cell, rep, "memvisor-start", |_, _| {})?;
    let mut g = Guest::default();
    let followed = g.follow(&vm, deadline, false);
    let log = vm.log.with_extension("stderr");
    let ended = finish(vm, followed, "memvisor run");
    ended?;
    r.set("first instruction", first_kvm_run_ms(&log, t0)?);
    let (Some(a), Some(b)) = (g.round1_at, g.done_at) else {
        return Err("the guest gave no first round".into());
    };
    r.set("work", ms(b.duration_since(a)));
    g.into_run(r);
    Ok(())
}

/// The bytes a file takes on disk (a sparse file's holes take none).
pub fn on_disk(path: &Path) -> Option<f64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.blocks() * 512) as f64)
}

fn restore(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    deadline: Instant,
    r: &mut MobRun,
) -> Result<(), String> {
    let dir = bench.work.join(format!("snapshot-{}", rep));
    let _ = std::fs::remove_dir_all(&dir);
    let result = (|| {
        let src = start_memvisor(bench, cell, rep, "memvisor-snapshot", |cmd, sock| {
            cmd.arg("--api-sock").arg(sock);
        })?;
        let mut g = Guest::default();
        g.follow(&src, deadline, true)?;
        let client = src.client().with_timeout(bench.timeout);
        let dir_text = dir.display().to_string();
        let snap = client.snapshot(&dir_text, true);
        let src_ended = match &snap {
            Ok(_) => end_with(src, "the snapshot's source", 0),
            Err(_) => {
                src.stop();
                Ok(())
            }
        };
        let snap = snap.map_err(|e| format!("snapshot: {e}"))?;
        src_ended?;
        r.set("save", snap.paused_ms as f64);
        r.set(
            "saved MiB",
            on_disk(&dir.join("memory")).unwrap_or(0.0) / 1048576.0,
        );
        r.set("touched MiB", (snap.copied_pages << 12) as f64 / 1048576.0);
        let t0 = monotonic_ns();
        let started = Instant::now();
        let vm = start_memvisor(bench, cell, rep, "memvisor-restored", |cmd, _| {
            cmd.arg("--restore").arg(&dir);
        })?;
        let mut g = Guest::default();
        let followed = g.follow(&vm, deadline, false);
        let log = vm.log.with_extension("stderr");
        finish(vm, followed, "memvisor run --restore")?;
        r.set("first instruction", first_kvm_run_ms(&log, t0)?);
        let done = g.done_at.ok_or("no done")?;
        r.set("work", ms(done.duration_since(started)));
        g.into_run(r);
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A TCP port on localhost nobody listens on now.
pub fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Waits until the file `log` holds `what` (a VMM's stderr saying it is ready).
pub fn wait_in_log(log: &Path, what: &str, deadline: Instant) -> Result<(), String> {
    let until = deadline.min(Instant::now() + Duration::from_secs(60));
    loop {
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(what)) {
            return Ok(());
        }
        if Instant::now() >= until || crate::harness::teardown::interrupted() {
            return Err(format!("{} never said '{what}'", log.display()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn migrate(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    precopy_rounds: u32,
    deadline: Instant,
    r: &mut MobRun,
) -> Result<(), String> {
    let port = free_port()?;
    let token = format!("bench-{}-{rep}-{port}", std::process::id());
    let to = format!("127.0.0.1:{port}");
    let name = if precopy_rounds > 0 {
        "memvisor-precopy"
    } else {
        "memvisor-postcopy"
    };
    let dst = start_memvisor(bench, cell, rep, &format!("{name}-dst"), |cmd, _| {
        cmd.args(["--incoming", &to, "--migration-token", &token]);
    })?;
    let src = match start_memvisor(bench, cell, rep, &format!("{name}-src"), |cmd, sock| {
        cmd.arg("--api-sock").arg(sock);
    }) {
        Ok(s) => s,
        Err(e) => {
            dst.stop();
            return Err(e);
        }
    };
    let log = dst.log.with_extension("stderr");
    let src_log = src.log.with_extension("stderr");
    let mut g = Guest::default();
    let moved = wait_in_log(&log, "waiting for a migration", deadline)
        .and_then(|()| g.follow(&src, deadline, true))
        .and_then(|()| {
            let client = src.client().with_timeout(bench.timeout);
            client
                .migrate(MigrateRequest {
                    to: to.clone(),
                    token: token.clone(),
                    recover: false,
                    precopy_rounds,
                })
                .map_err(|e| format!("migrate: {e}"))
        });
    g.drain(&src);
    // As QEMU's pre-copy may not converge before the guest is done, memvisor's rounds may
    // outlast its work: the VM then ends on the source, unmoved, and so does the call.
    let moved = moved.map_err(|e| match g.done_at {
        Some(_) => format!(
            "the guest ended its work on the source before the migration switched (its pre-copy rounds outlasted it; {e})"
        ),
        None => e,
    });
    let src_ended = match &moved {
        Ok(_) => end_with(src, "the migration's source", 0),
        Err(_) => {
            src.stop();
            Ok(())
        }
    };
    let result = moved.and_then(|m| {
        src_ended?;
        g.follow(&dst, deadline, false)?;
        Ok(m)
    });
    let dst_ended = match &result {
        Ok(_) => end(dst, "the migration's destination"),
        Err(_) => {
            dst.stop();
            Ok(())
        }
    };
    let m = result?;
    dst_ended?;
    r.set("downtime", m.downtime_ms as f64);
    r.set("stopped", stopped_ms(&src_log, &log)?);
    r.set("total", m.total_ms as f64);
    r.set("sent MiB", m.sent_bytes as f64 / 1048576.0);
    r.set("touched MiB", (m.copied_pages << 12) as f64 / 1048576.0);
    r.set("requested pages", m.requested_pages as f64);
    r.set("resent pages", m.resent_pages as f64);
    let (Some(a), Some(b)) = (g.round1_at, g.done_at) else {
        return Err("the guest gave no first round or no done".into());
    };
    r.set("work", ms(b.duration_since(a)));
    g.into_run(r);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_kvm_run_is_read_from_the_log() {
        let log = "2026-11-29T17:00:00Z INFO memvisor_vmm::vcpu: vcpu0: first KVM_RUN at monotonic_ns=1500000 \n";
        assert_eq!(first_kvm_run_in(log, 1_000_000), Some(0.5));
        assert_eq!(first_kvm_run_in(log, 2_000_000), None, "before the start");
        assert_eq!(first_kvm_run_in("nothing", 0), None);
        let src = "INFO migration: the vCPUs stopped at monotonic_ns=1200000\n";
        let stopped = monotonic_in(src, "the vCPUs stopped at monotonic_ns=").unwrap();
        assert_eq!(first_kvm_run_in(log, stopped), Some(0.3));
    }

    #[test]
    fn the_guest_lines_give_the_rounds() {
        let mut g = Guest::default();
        let at = Instant::now();
        let line = |p: &str| format!("RESULT workload=alloc phase={p} cpu=0 ms=12 ns_per_page=3");
        assert_eq!(g.take(&line("round1"), at, true), Some(Ok(())));
        assert_eq!(g.take(&line("round2"), at, true), None);
        assert_eq!(g.take("console noise", at, true), None);
        assert_eq!(g.take(&line("done"), at, true), Some(Ok(())));
        let failed = g.take(
            "RESULT workload=alloc phase=done ok=0 mismatches=3",
            at,
            false,
        );
        assert!(matches!(failed, Some(Err(_))));
        let mut r = MobRun::new(
            &super::super::experiment::CONFIGS[0],
            Cell {
                size: 1 << 30,
                ws_pct: 10,
            },
            1,
        );
        g.into_run(&mut r);
        assert_eq!(r.get("round 2"), Some(12.0));
    }
}
