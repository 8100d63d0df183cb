//! A `memvisor run` the harness started for a family (swapin, reclaimdelay, dwell, sharing):
//! its process, its console line by line, its socket (memvisor's API, or QEMU's QMP) and its
//! logs, and what the families ask of it: a guest phase's line, the pager's stats, a stop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use memvisor_api::{PagerStats, VmClient, VmStats};

use super::child::{spawn_logged, stop, wait_for, ConsoleEvent, Stopped};
use super::guest::{parse_result, read_final_stats};
use super::{teardown, Bench};

/// A started `memvisor run`.
pub struct Vm {
    pub child: Child,
    pub lines: mpsc::Receiver<ConsoleEvent>,
    /// memvisor's API socket, or QEMU's QMP socket, in the work directory.
    pub sock: PathBuf,
    /// Beside it, where `--stats-json` may write the VMM's final stats.
    pub stats: PathBuf,
    /// The logs' path less its extension (`.console`, `.stderr`).
    pub log: PathBuf,
}

impl Vm {
    /// Starts `memvisor run` with the flags `flags` adds (it gets the socket's and the stats
    /// file's paths), its socket `NAME.sock` and stats `NAME.stats.json` in the work directory,
    /// its logs `logs/LOG.*`, started and tracked as [`spawn_logged`] does.
    pub fn start(
        bench: &Bench,
        name: &str,
        log: &str,
        flags: impl FnOnce(&mut Command, &Path, &Path),
    ) -> Result<Vm, String> {
        let sock = bench.work.join(format!("{name}.sock"));
        let mut cmd = Command::new(&bench.exe);
        cmd.arg("run");
        flags(&mut cmd, &sock, &sock.with_extension("stats.json"));
        Vm::spawn(cmd, &bench.work, sock, bench.out.join("logs").join(log))
    }

    /// Starts `cmd` (a `memvisor run` with its socket `sock`, its stats beside it) as
    /// [`spawn_logged`] does, its logs `LOG.*`; the socket and the stats are removed before and
    /// the socket is tracked for teardown.
    pub fn spawn(cmd: Command, work: &Path, sock: PathBuf, log: PathBuf) -> Result<Vm, String> {
        let stats = sock.with_extension("stats.json");
        let _ = std::fs::remove_file(&sock);
        let _ = std::fs::remove_file(&stats);
        let (child, lines) = spawn_logged(cmd, work, &log)?;
        teardown::track_file(sock.clone());
        Ok(Vm {
            child,
            lines,
            sock,
            stats,
            log,
        })
    }

    /// The stats `--stats-json` wrote when the VM ended (the file removed once read).
    pub fn final_stats(&self) -> Option<VmStats> {
        let stats = read_final_stats(&self.stats);
        let _ = std::fs::remove_file(&self.stats);
        stats
    }

    /// Waits until `deadline` for the guest's `RESULT` line of `phase`: its `ms=` and when it
    /// came. The guest's `done` or a failure (`ok=0`) first is an error.
    pub fn wait_phase(
        &self,
        phase: &str,
        deadline: Instant,
    ) -> Result<(Option<f64>, Instant), String> {
        self.wait_phase_before(phase, "done", deadline)
    }

    /// [`Self::wait_phase`], and the guest's `later` phase first is an error too: a guest
    /// that went past `phase` without it never prints it.
    pub fn wait_phase_before(
        &self,
        phase: &str,
        later: &str,
        deadline: Instant,
    ) -> Result<(Option<f64>, Instant), String> {
        wait_for(
            &self.lines,
            deadline,
            &format!("the guest's {phase}"),
            |l, at| {
                let (p, ms, ok) = parse_result(l)?;
                if p == phase {
                    return Some(Ok((ms, at)));
                }
                let ended = || format!("the guest went past its {phase}: {}", l.trim());
                (p == "done" || p == later || ok.as_deref() == Some("0")).then(|| Err(ended()))
            },
        )
    }

    /// A client of its API.
    pub fn client(&self) -> VmClient {
        VmClient::new(&self.sock)
    }

    /// Its pager's stats (`GET /stats`).
    pub fn pager(&self) -> Result<PagerStats, String> {
        let stats = self.client().stats().map_err(|e| e.to_string())?;
        stats.pager.ok_or_else(|| "the VM has no pager".to_owned())
    }

    /// Stops it (SIGTERM, then SIGKILL to its process group after 5 s) and reaps it.
    pub fn stop(mut self) -> Stopped {
        stop(&mut self.child, Duration::from_secs(5))
    }
}
