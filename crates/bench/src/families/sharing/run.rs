//! `memvisor bench sharing` and `zeroboot`: N identical VMs per mode, KSM at one fixed scan
//! budget for all (`experiment::SCAN_PAGES`), and what the harness reads meanwhile.
//!
//! One run is one mode with N VMs in one repetition:
//! 1. Everything KSM merged before is unmerged (`run` 2) and the scanner starts afresh.
//! 2. N `memvisor run` processes start at once (`--hypervisor qemu` runs QEMU under each), all
//!    with the same workload and command line, so their memory is the same.
//! 3. Every `every`, over the guest RAM mapping of each VM's process (memvisor's VMM, or QEMU):
//!    present pages and those mapping a KSM page (`/proc/PID/pagemap`, `/proc/kpageflags`), the
//!    distinct KSM pages among them, and the pages merged with the zero page
//!    (`/proc/PID/ksm_stat`); and ksmd's CPU. Only these VMs' pages enter, whatever else on the
//!    host is mergeable.
//! 4. From the consoles: the store's ops per second (`kv: t=Ns ops_s=N`), the probe's rounds,
//!    what memhog zeroed, and every guest's `done` line. From memvisor's `--stats-json` at exit,
//!    the pager's `reclaimed_zero` and `reclaimed_written`; from `/proc/vmstat` over the run,
//!    host swap-outs (`pswpout`) and zero pages the kernel's swap kept without a write
//!    (`swpout_zero`).

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use memvisor_host::ksm::Ksm;

use super::experiment::{Census, Mode, SharingPlan, SCAN_PAGES, SCAN_SLEEP_MS};
use crate::harness::child::ConsoleEvent;
use crate::harness::guest::value;
use crate::harness::order::interleave;
use crate::harness::vm::Vm;
use crate::harness::{readings, teardown, Bench};

/// One reading of the VMs' page maps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MapReading {
    /// Seconds since the VMs started.
    pub t_s: f64,
    pub census: Census,
    /// Pages merged with the zero page (part of the census).
    pub zero: u64,
    /// ksmd's CPU since the run started, ms.
    pub ksmd_ms: u64,
}

/// One round of the timing probe in one VM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeRound {
    pub pages: u64,
    pub common_ns: u64,
    pub private_ns: u64,
    pub common_slow: u64,
    pub private_slow: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SharingRun {
    pub mode: String,
    pub vms: u32,
    pub rep: u32,
    /// The timing probe rather than the experiment's workload.
    pub probe: bool,
    /// Why the run failed; empty when every guest finished.
    pub error: String,
    pub samples: Vec<MapReading>,
    /// The store's ops per second, per VM, each second of its run phase.
    pub ops: Vec<Vec<u64>>,
    pub probe_rounds: Vec<ProbeRound>,
    /// Guests that printed `done ok=1`.
    pub guests_ok: u32,
    /// Pages the guests zeroed (memhog's `zero` phase).
    pub zeroed: u64,
    /// memvisor's pager, summed over the VMs: victims dropped as zero, victims written.
    pub reclaimed_zero: u64,
    pub reclaimed_written: u64,
    /// Host swap over the run: pages written, zero pages kept without a write.
    pub swap_out: u64,
    pub swap_out_zero: u64,
    pub seconds: f64,
    /// When the first VM ended (seconds since they started): the steady state is read before.
    pub first_exit_s: Option<f64>,
    /// VMs the kernel's OOM killer ended (QEMU in its memory cgroup), from the kernel log.
    pub oom_kills: u32,
}

impl SharingRun {
    pub fn ok(&self) -> bool {
        self.error.is_empty()
    }
}

/// Reads one console line into the run's point (VM `vm`).
fn read_line(line: &str, vm: usize, p: &mut SharingRun) {
    if let Some(rest) = line.strip_prefix("kv: t=") {
        if let Some(ops) = value(rest, "ops_s") {
            p.ops[vm].push(ops);
        }
    } else if line.starts_with("RESULT ") {
        if line.contains(" phase=done ") || line.trim_end().ends_with(" phase=done") {
            p.guests_ok += u32::from(line.contains(" ok=1"));
        } else if line.contains("workload=memhog phase=zero ") {
            p.zeroed += value(line, "mb").unwrap_or(0) * 256;
        } else if line.contains("workload=probe phase=round") {
            p.probe_rounds.push(ProbeRound {
                pages: value(line, "pages").unwrap_or(0),
                common_ns: value(line, "common_ns").unwrap_or(0),
                private_ns: value(line, "private_ns").unwrap_or(0),
                common_slow: value(line, "common_slow").unwrap_or(0),
                private_slow: value(line, "private_slow").unwrap_or(0),
            });
        }
    }
}

/// The largest anonymous mapping of `pid` (its guest RAM), as a range of addresses.
fn ram_mapping(pid: u32) -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines()
        // Named mappings (a file, the heap, a stack) have a sixth field.
        .filter(|l| l.split_whitespace().count() <= 5)
        .filter_map(|l| {
            let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
            let hex = |s| u64::from_str_radix(s, 16).ok();
            Some((hex(lo)?, hex(hi)?))
        })
        .max_by_key(|(lo, hi)| hi - lo)
}

const PAGE: u64 = 4096;
const PM_PRESENT: u64 = 1 << 63;
const PM_PFN: u64 = (1 << 55) - 1;
const KPF_KSM: u64 = 1 << 21;

/// Present pages of `pid`'s guest RAM, and the KSM frames among them (one per page mapping
/// one, so a frame twice in the same VM counts twice).
fn ram_pages(pid: u32, kpageflags: &File, ksm: &mut Vec<u64>) -> u64 {
    let Some((lo, hi)) = ram_mapping(pid) else {
        return 0;
    };
    let Ok(pagemap) = File::open(format!("/proc/{pid}/pagemap")) else {
        return 0;
    };
    let mut present = 0;
    let mut buf = vec![0u8; 8 * 32_768];
    let mut flags = [0u8; 8];
    let mut addr = lo;
    while addr < hi {
        let n = ((hi - addr) / PAGE).min(32_768) as usize;
        let Ok(got) = pagemap.read_at(&mut buf[..n * 8], addr / PAGE * 8) else {
            break;
        };
        for e in buf[..got].chunks_exact(8) {
            let e = u64::from_le_bytes(e.try_into().unwrap_or_default());
            if e & PM_PRESENT == 0 {
                continue;
            }
            present += 1;
            let pfn = e & PM_PFN;
            if kpageflags.read_at(&mut flags, pfn * 8).ok() == Some(8)
                && u64::from_le_bytes(flags) & KPF_KSM != 0
            {
                ksm.push(pfn);
            }
        }
        addr += n as u64 * PAGE;
        if got < n * 8 {
            break;
        }
    }
    present
}

/// Pages of `pid` merged with the zero page.
fn zero_pages(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/ksm_stat"))
        .ok()
        .and_then(|s| value::<u64>(&s.replace(' ', "="), "ksm_zero_pages"))
        .unwrap_or(0)
}

/// The census of the VMs whose guest RAM is in processes `pids`.
fn census(pids: &[u32], kpageflags: &File) -> (Census, u64) {
    let mut ksm = Vec::new();
    let (mut present, mut zero) = (0, 0);
    for &pid in pids {
        present += ram_pages(pid, kpageflags, &mut ksm);
        zero += zero_pages(pid);
    }
    let distinct = ksm.iter().collect::<HashSet<_>>().len() as u64;
    (Census::of(present, ksm.len() as u64, distinct, zero), zero)
}

fn start_vm(
    bench: &Bench,
    setup: &SharingPlan,
    mode: &Mode,
    name: &str,
    probe: bool,
) -> Result<Vm, String> {
    let z = &setup.sizes;
    Vm::start(bench, name, name, |cmd, _, stats| {
        cmd.args(["--hypervisor", if mode.qemu { "qemu" } else { "memvisor" }])
            .args(["--sharing", if mode.sharing { "host" } else { "off" }])
            .args(["--mem", &z.mem.to_string()]);
        if let (Some(l), false) = (z.limit, probe) {
            cmd.args(["--mem-limit", &l.to_string()]);
        }
        if !mode.qemu {
            cmd.arg("--stats-json").arg(stats);
        }
        let (workload, cmdline) = match (&z.probe, probe) {
            (Some(c), true) => ("probe", c.as_str()),
            _ => (z.workload, z.cmdline.as_str()),
        };
        cmd.args(["--workload", workload, "--cmdline", cmdline]);
        if let Some(o) = setup.qemu_overhead {
            cmd.env("MEMVISOR_QEMU_OVERHEAD", o.to_string());
        }
    })
}

/// The process holding `vm`'s guest RAM: the VMM, or the QEMU it started.
fn ram_pid(vm: &Vm, qemu: bool) -> Option<u32> {
    let pid = vm.child.id();
    if qemu {
        readings::child_named(pid, "qemu")
    } else {
        Some(pid)
    }
}

/// One run (see the module doc).
fn measure(
    bench: &Bench,
    setup: &SharingPlan,
    ksm: &Ksm,
    mode: &Mode,
    n: u32,
    rep: u32,
    probe: bool,
) -> SharingRun {
    let mut p = SharingRun {
        mode: mode.name.to_owned(),
        vms: n,
        rep,
        probe,
        ops: vec![Vec::new(); n as usize],
        ..SharingRun::default()
    };
    if let Err(e) = ksm.restart() {
        p.error = e;
        return p;
    }
    let what = if probe { "probe" } else { setup.experiment };
    let swap0 = readings::vmstat();
    // The kernel log's last line before the run: its ring buffer may drop old lines meanwhile.
    let log0 = readings::dmesg().pop();
    let cpu0 = ksm.cpu_ms_now();
    let t0 = Instant::now();
    let (mut vms, mut done) = (Vec::new(), Vec::new());
    for i in 0..n {
        let name = format!("{what}-{}-n{n}-rep{rep}-vm{i}", mode.name);
        match start_vm(bench, setup, mode, &name, probe) {
            Ok(vm) => {
                vms.push(vm);
                done.push(false);
            }
            Err(e) => {
                p.error = e;
                break;
            }
        }
    }
    let kpageflags = File::open("/proc/kpageflags");
    let mut next = t0 + setup.sizes.every;
    while p.error.is_empty() && done.contains(&false) {
        if teardown::interrupted() {
            p.error = "interrupted".into();
            break;
        }
        if t0.elapsed() > bench.timeout {
            p.error = format!("timed out after {} s", bench.timeout.as_secs());
            break;
        }
        for (i, vm) in vms.iter().enumerate() {
            while let Ok(m) = vm.lines.try_recv() {
                match m {
                    ConsoleEvent::Line(l, _) => read_line(&l, i, &mut p),
                    ConsoleEvent::Eof => {
                        done[i] = true;
                        p.first_exit_s.get_or_insert(t0.elapsed().as_secs_f64());
                    }
                }
            }
        }
        if Instant::now() >= next {
            next += setup.sizes.every;
            if let Ok(kpf) = &kpageflags {
                let pids: Vec<u32> = vms.iter().filter_map(|v| ram_pid(v, mode.qemu)).collect();
                let (c, zero) = census(&pids, kpf);
                p.samples.push(MapReading {
                    t_s: t0.elapsed().as_secs_f64(),
                    census: c,
                    zero,
                    ksmd_ms: ksm.cpu_ms_now().saturating_sub(cpu0),
                });
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    p.seconds = t0.elapsed().as_secs_f64();
    let new = readings::dmesg_since(log0.as_ref());
    for (vm, done) in vms.iter_mut().zip(done) {
        let pid = vm.child.id();
        // The kernel names the cgroup (`memvisor-<launcher pid>`) in its `oom-kill:` line.
        let lines = readings::oom_lines(&new, pid, &[]);
        let killed = lines.iter().any(|l| l.starts_with("oom-kill:"));
        p.oom_kills += u32::from(killed);
        if !done {
            teardown::kill(pid);
        }
        let _ = vm.child.wait();
        teardown::forget_pid(pid);
        if let Some(c) = vm.final_stats().and_then(|s| s.pager) {
            p.reclaimed_zero += c.counters.reclaimed_zero;
            p.reclaimed_written += c.counters.reclaimed_written;
        }
    }
    let swap1 = readings::vmstat();
    p.swap_out = swap1.pswpout.saturating_sub(swap0.pswpout);
    p.swap_out_zero = swap1.swpout_zero.saturating_sub(swap0.swpout_zero);
    if let Err(e) = kpageflags {
        p.error = format!("/proc/kpageflags: {e}");
    }
    if p.error.is_empty() && p.guests_ok < n {
        p.error = format!("{} of {n} guests did not finish with ok=1", n - p.guests_ok);
        if p.oom_kills > 0 {
            let kills = p.oom_kills;
            p.error += &format!(" ({kills} killed by the OOM killer of their memory cgroup)");
        }
    }
    p
}

/// Runs every number of VMs and mode, repetition by repetition (the modes in `order::of_rep`'s
/// order), then (in the first repetition) the timing probe per mode; KSM is the harness's
/// meanwhile.
pub fn run(bench: &Bench, setup: &SharingPlan) -> Result<Vec<SharingRun>, String> {
    let ksm = Ksm::fixed(SCAN_PAGES, SCAN_SLEEP_MS)?;
    // The timing probe counts traps, not speed: once, in the first repetition.
    let cells = |rep| {
        let mut runs: Vec<(u32, bool)> = setup.sizes.vms.iter().map(|&n| (n, false)).collect();
        if setup.sizes.probe.is_some() && rep == 1 {
            runs.push((2, true));
        }
        runs
    };
    let what = |&(n, probe): &(u32, bool), mode: &Mode| {
        format!("{} x{n}{}", mode.name, if probe { " probe" } else { "" })
    };
    let name = setup.experiment;
    let points = interleave(name, setup.reps, cells, &setup.modes, what, |t| {
        let (n, probe) = *t.cell;
        let pt = measure(bench, setup, &ksm, t.config, n, t.rep, probe);
        let last = pt.samples.last().map(|s| s.census).unwrap_or_default();
        t.say(&format!(
            "{} in {:.0} s: {} of {} pages shared, {} reclaimed",
            if pt.ok() { "ok" } else { pt.error.as_str() },
            pt.seconds,
            last.shared,
            last.present,
            last.reclaimed
        ));
        Ok(vec![pt])
    });
    drop(ksm);
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_lines_are_read_into_the_point() {
        let mut p = SharingRun {
            ops: vec![Vec::new(); 2],
            ..SharingRun::default()
        };
        read_line("kv: t=3s ops_s=123456", 1, &mut p);
        read_line("kv: run 50%", 1, &mut p);
        read_line("RESULT workload=memhog phase=zero ms=1.5 mb=200", 0, &mut p);
        read_line("RESULT workload=probe phase=round1 ms=1 pages=64 common_ns=40000 private_ns=150 ratio=266.66 common_slow=60 private_slow=0", 0, &mut p);
        read_line("RESULT workload=kv phase=done ok=1 ops=5", 0, &mut p);
        read_line("RESULT workload=kv phase=done ok=0", 1, &mut p);
        assert_eq!(p.ops, vec![vec![], vec![123_456]]);
        assert_eq!(p.zeroed, 200 * 256);
        assert_eq!(p.guests_ok, 1);
        let r = &p.probe_rounds;
        assert_eq!(r.len(), 1);
        let got = (
            r[0].pages,
            r[0].common_ns,
            r[0].private_ns,
            r[0].common_slow,
            r[0].private_slow,
        );
        assert_eq!(got, (64, 40_000, 150, 60, 0));
        let zero = value::<u64>("ksm_zero_pages=17", "ksm_zero_pages");
        assert_eq!(zero, Some(17));
        assert_eq!(value::<u64>("a=1 ab=2", "ab"), Some(2));
    }

    #[test]
    fn guest_ram_is_the_largest_anonymous_mapping() {
        // This test process: its largest anonymous mapping exists and is inside its address
        // space; a process that does not exist has none.
        let me = std::process::id();
        let (lo, hi) = ram_mapping(me).unwrap();
        assert!(hi > lo);
        assert_eq!(ram_mapping(u32::MAX), None);
    }
}
