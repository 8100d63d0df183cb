//! One run to do ([`RunSpec`]), its `memvisor run` command, and what the harness asks of the
//! VM while it runs: its stats, and its memory given back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use memvisor_api::{ClientError, VmClient, VmStats};

use super::result::PagerCounters;
use crate::families::phases::configs::{Config, Hv, Limit};
use crate::families::phases::experiment::{Measure, Step};
use crate::harness::{qmp, readings};

/// One run to do.
pub struct RunSpec<'a> {
    pub exe: &'a Path,
    pub config: &'static Config,
    pub step: &'a Step,
    pub mem: u64,
    pub limit: Option<u64>,
    pub disk: Option<(PathBuf, bool)>,
    /// Directory for the run's socket and pager swap file.
    pub work: &'a Path,
    /// Where the console and log of the run are kept.
    pub log_prefix: PathBuf,
    pub qemu_overhead: Option<u64>,
    pub host_swap_file: &'a Path,
    pub timeout: Duration,
    /// What the experiment measures: with a time series the VM's API is polled and the answers
    /// kept (memvisor configurations only); with a release the VM gets its memory back during
    /// the run.
    pub measure: &'a Measure,
    /// A swap disk image for the guest kit (`id=swap`).
    pub guest_swap: Option<PathBuf>,
    /// Progress line prefix (`[seqread 3/24 rep 1/3 qemu-hostswap]`).
    pub label: String,
}

pub fn api_stats(sock: &Path) -> Option<PagerCounters> {
    api_vm_stats(sock)?.pager.map(|p| p.counters)
}

/// `GET /stats` as the API's type; `None` when the VM does not answer (yet, or any more).
pub fn api_vm_stats(sock: &Path) -> Option<VmStats> {
    match VmClient::new(sock).stats() {
        Ok(stats) => Some(stats),
        Err(e @ ClientError::Schema { .. }) => {
            tracing::warn!("{e}");
            None
        }
        Err(_) => None,
    }
}

/// Where a run's logs are kept, less their extension (`.console`, `.stderr`).
pub fn log_prefix(out: &Path, config: &str, workload: &str, rep: u32) -> PathBuf {
    out.join("logs")
        .join(format!("{config}-{workload}-rep{rep}"))
}

/// The `memvisor run` command of a run: the configuration's flags, the step's workload, its
/// disks, sampling for a time series, the stats file, and QEMU's overhead (the rest of its
/// set-up is `harness::vm`'s).
pub fn command(spec: &RunSpec<'_>, sock: &Path, stats_path: &Path) -> Command {
    let c = spec.config;
    let mut cmd = Command::new(spec.exe);
    cmd.arg("run")
        .args(["--mem", &spec.mem.to_string()])
        .args(c.run_flags(spec.limit, sock))
        .args(["--workload", spec.step.workload])
        .args(["--cmdline", &spec.step.cmdline]);
    if let Some(s) = spec.measure.series().filter(|_| c.hv == Hv::Memvisor) {
        cmd.args(s.run_flags());
    }
    if let Some((disk, writable)) = &spec.disk {
        let ro = if *writable { "" } else { ",ro" };
        cmd.args(["--disk", &format!("{},id=data{ro}", disk.display())]);
    }
    if let Some(swap) = &spec.guest_swap {
        cmd.args(["--disk", &format!("{},id=swap", swap.display())]);
    }
    if c.hv == Hv::Memvisor {
        cmd.arg("--stats-json").arg(stats_path);
    }
    if let Some(o) = spec.qemu_overhead {
        cmd.env("MEMVISOR_QEMU_OVERHEAD", o.to_string());
    }
    cmd
}

/// Gives a VM its memory back: the balloon deflated, the cgroup's limit raised by what the
/// guest lacked (guest RAM minus the limit), the pager's limit raised to the guest's size. Says
/// what it did, or the first request that failed.
pub fn give_back(
    c: &Config,
    sock: &Path,
    pid: u32,
    mem: u64,
    limit: Option<u64>,
) -> Result<String, String> {
    let mut done = Vec::new();
    if c.limit == Limit::HostSwap {
        let raise = mem.saturating_sub(limit.unwrap_or(mem));
        let file = readings::run_cgroup(pid).join("memory.limit_in_bytes");
        let now: u64 = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: {e}", file.display()))?
            .trim()
            .parse()
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let new = now.saturating_add(raise);
        std::fs::write(&file, new.to_string()).map_err(|e| format!("{}: {e}", file.display()))?;
        done.push(format!("cgroup limit {} → {} MiB", now >> 20, new >> 20));
    }
    if c.balloon {
        match c.hv {
            Hv::Qemu => qmp::set_balloon(sock, mem)?,
            Hv::Memvisor => {
                let api = VmClient::new(sock);
                api.set_balloon(0).map_err(|e| e.to_string())?;
            }
        }
        done.push("balloon deflated".into());
    }
    if c.pager_holds_ram() {
        let pager = VmClient::new(sock);
        pager.set_limit(Some(mem)).map_err(|e| e.to_string())?;
        done.push(format!("pager limit → {} MiB", mem >> 20));
    }
    if done.is_empty() {
        return Err(format!("{} has no limit to raise", c.name));
    }
    Ok(done.join(", "))
}
