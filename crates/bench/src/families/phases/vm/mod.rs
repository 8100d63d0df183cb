//! One run: `memvisor run` as a child process (the same binary), measured from the host while it
//! runs. The guest's console is read line by line; at each `RESULT` line of a phase the host
//! counters are read, so every phase gets its own deltas. Between lines the harness samples every
//! [`TICK`](crate::harness::child::TICK): the hypervisor process's I/O and peak RSS, the run's memory cgroup, the host swap
//! file's use, and moves the balloon once the VM answers on its socket. For a time-series
//! experiment it also asks the VM's API for `GET /stats` every [`Series::every`](super::experiment::Series::every) and keeps the
//! working-set estimate and page census of each answer. For an experiment that gives memory
//! back ([`GiveBack`]), it starts a clock at the guest's line that begins the measured phase,
//! gives the VM its memory back when the clock reaches the release time (raising the pager's
//! limit, the cgroup's limit, deflating the balloon), and keeps memvisor's `GET /stats` answers.

pub mod control;
mod monitor;
pub mod result;

use std::time::Instant;

use crate::families::phases::configs::{Hv, Limit};
use crate::harness::child::children_cpu_ms;
use crate::harness::readings::{self, ContextFaults, ProcIo};
use crate::harness::teardown;
use crate::harness::vm::Vm;
use control::{command, RunSpec};
use monitor::{RunMonitor, Snap};
use result::{PagerCounters, RunResult};

/// Runs one VM and measures it. Errors only when the run cannot be started.
pub fn run(spec: &RunSpec<'_>) -> Result<RunResult, String> {
    let c = spec.config;
    let sock = spec.work.join(format!("{}.sock", c.name));
    let cmd = command(spec, &sock, &sock.with_extension("stats.json"));
    // The kernel log's last line now: what follows it later is new (the ring buffer may be full,
    // so counting lines would not do).
    let dmesg_last = readings::dmesg().pop();
    let s0 = Snap {
        at: Instant::now(),
        vm: readings::vmstat(),
        io: ProcIo::default(),
        pager: (c.hv == Hv::Memvisor).then(PagerCounters::default),
        major_faults: Some(ContextFaults::default()),
        disk: readings::disk_ops(spec.work),
    };
    let jail = c.jail_dir(&sock);
    if let Some(dir) = &jail {
        std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let cpu0 = children_cpu_ms();
    let mut vm = Vm::spawn(cmd, spec.work, sock.clone(), spec.log_prefix.clone())?;
    let pid = vm.child.id();
    let cgroup_dir = readings::run_cgroup(pid);
    if c.limit == Limit::HostSwap {
        teardown::track_cgroup(cgroup_dir.clone());
    }
    let mut w = RunMonitor::new(spec, &sock, pid, s0, &cgroup_dir);
    w.follow(&vm.lines);
    let exit = vm
        .child
        .wait()
        .map_err(|e| format!("cannot wait for run: {e}"))?;
    let cpu_ms = match (cpu0, children_cpu_ms()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    teardown::forget_pid(pid);
    if let Some(h) = w.sm.hv_pid {
        teardown::forget_pid(h);
    }
    let end = Snap {
        at: Instant::now(),
        vm: readings::vmstat(),
        io: w.sm.last_io,
        pager: None,
        major_faults: None,
        disk: readings::disk_ops(spec.work),
    };
    let stderr = std::fs::read_to_string(spec.log_prefix.with_extension("stderr"));
    let stderr = stderr.unwrap_or_default();
    if let Some(s) = readings::cgroup_state(&cgroup_dir) {
        w.sm.cg = Some(s);
    }
    if c.limit == Limit::HostSwap {
        // A killed `memvisor run` could not remove its cgroup.
        let _ = teardown::remove_cgroup(&cgroup_dir);
    }
    let _ = std::fs::remove_file(&sock);
    if let Some(dir) = &jail {
        let _ = std::fs::remove_dir(dir);
    }
    let final_stats = vm.final_stats();
    let (status, reason) = w.verdict(exit, &stderr, dmesg_last.as_ref());
    let mut r = w.result(status, reason, exit, &end, final_stats);
    r.cpu_ms = cpu_ms;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::guest::{parse_result, read_final_stats};
    use memvisor_api::VmStats;
    use result::fault_latency;

    #[test]
    fn parses_result_lines_and_the_pager_stats() {
        let pass = parse_result("RESULT workload=seqread phase=pass2 ms=857.541 mb_s=244");
        assert_eq!(pass, Some(("pass2".into(), Some(857.541), None)));
        let done = parse_result("RESULT workload=alloc phase=done ok=1 ms=5");
        assert_eq!(done, Some(("done".into(), Some(5.0), Some("1".into()))));
        assert_eq!(parse_result("seqread: pass 1"), None);
        let stats = VmStats {
            pager: Some(memvisor_api::PagerStats {
                counters: PagerCounters {
                    swap_bytes_written: 7,
                    faults_swap: 2,
                    ..PagerCounters::default()
                },
                fault_latency: memvisor_api::LatencySummary {
                    samples: 1,
                    p50_us: 2,
                    p99_us: 3,
                    max_us: 4,
                },
                ..memvisor_api::PagerStats::default()
            }),
            ..VmStats::default()
        };
        let body = serde_json::to_string(&stats).unwrap();
        assert_eq!(fault_latency(&stats), Some((2, 3)));
        assert_eq!(fault_latency(&VmStats::default()), None);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, format!("{body}\n")).unwrap();
        assert_eq!(read_final_stats(&path), Some(stats));
        std::fs::write(&path, "pager: PagerStats { .. }").unwrap();
        assert_eq!(read_final_stats(&path), None);
    }
}
