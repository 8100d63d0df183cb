//! Where a hypervisor's CPU time goes: every thread of its processes read from `/proc`, and
//! charged by the thread's name to running the guest, serving what the guest waits for, or the
//! hypervisor's background work. On a host with fewer cores than vCPUs every CPU second a VMM
//! spends beside its guests is a second some guest does not run, so this is where an
//! overcommitted host's time goes.

use std::collections::HashMap;

/// The part of a hypervisor a thread's CPU time goes to, by the thread's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuRole {
    /// Running the guest: memvisor's `vcpuN`, QEMU's `CPU N/KVM`. A vCPU's time includes the
    /// faults, exits and polling its guest makes it wait through on the CPU.
    Guest,
    /// Serving what a guest waits for: memvisor's fault thread (`pager`) and its devices'
    /// threads (`blk-ID`, `balloon`); QEMU's main loop, which runs its devices, and its I/O
    /// workers.
    Serving,
    /// Everything else: reclaim, release readiness, prefetch, the pool's flusher, the API.
    Background,
}

/// The role of a thread called `name` (its `comm`).
pub fn cpu_role(name: &str) -> CpuRole {
    let vcpu = name
        .strip_prefix("vcpu")
        .is_some_and(|n| n.parse::<u32>().is_ok())
        || (name.starts_with("CPU ") && name.ends_with("/KVM"));
    if vcpu {
        return CpuRole::Guest;
    }
    let serving = matches!(name, "pager" | "balloon" | "worker")
        || name.starts_with("blk-")
        || name.starts_with("qemu-system");
    if serving {
        CpuRole::Serving
    } else {
        CpuRole::Background
    }
}

/// CPU seconds by role.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuUse {
    pub guest: f64,
    pub serving: f64,
    pub background: f64,
}

impl CpuUse {
    pub fn total(&self) -> f64 {
        self.guest + self.serving + self.background
    }

    /// The hypervisor's own: all but the guest's.
    pub fn vmm(&self) -> f64 {
        self.serving + self.background
    }

    fn add(&mut self, role: CpuRole, secs: f64) {
        match role {
            CpuRole::Guest => self.guest += secs,
            CpuRole::Serving => self.serving += secs,
            CpuRole::Background => self.background += secs,
        }
    }

    /// Every one of `uses` together.
    pub fn sum<'a>(uses: impl IntoIterator<Item = &'a CpuUse>) -> CpuUse {
        let mut s = CpuUse::default();
        for u in uses {
            s.add(CpuRole::Guest, u.guest);
            s.add(CpuRole::Serving, u.serving);
            s.add(CpuRole::Background, u.background);
        }
        s
    }
}

/// The CPU time of processes' threads, each kept at its last reading (a thread that ends
/// between two looks loses the time since the last one: at most a look's interval).
#[derive(Debug, Default)]
pub struct CpuMeter {
    /// (process, thread) → whose it is, its role and seconds on a CPU.
    threads: HashMap<(u32, u32), (usize, CpuRole, f64)>,
}

impl CpuMeter {
    /// Reads every thread of process `pid`, charged to `who` (a VM's index; nothing once the
    /// process is gone).
    pub fn look(&mut self, who: usize, pid: u32) {
        for tid in crate::harness::readings::threads(pid) {
            let Some(secs) = thread_cpu_secs(pid, tid) else {
                continue;
            };
            // Read each time: a thread names itself once it runs, after a look may have seen it.
            let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")) else {
                continue;
            };
            let entry = self
                .threads
                .entry((pid, tid))
                .or_insert((who, CpuRole::Background, 0.0));
            *entry = (who, cpu_role(comm.trim_end()), entry.2.max(secs));
        }
    }

    /// The use charged to each of `0..n`.
    pub fn each(&self, n: usize) -> Vec<CpuUse> {
        let mut each = vec![CpuUse::default(); n];
        for &(who, role, secs) in self.threads.values() {
            if let Some(u) = each.get_mut(who) {
                u.add(role, secs);
            }
        }
        each
    }
}

/// The whole machine's CPU seconds, every CPU together, from the `cpu` line of `/proc/stat`:
/// `busy` (user, nice, system, irq and softirq; a guest's time is within user) and `steal`,
/// the time the hypervisor under this machine ran something else while a CPU of this one had
/// work. On a shared machine steal is the noise a run cannot see from inside its processes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MachineCpu {
    pub busy: f64,
    pub steal: f64,
}

impl MachineCpu {
    /// Now; `None` where `/proc/stat` cannot be read.
    pub fn now() -> Option<MachineCpu> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        parse_stat(&stat, memvisor_host::ksm::ticks_per_second())
    }

    /// What the machine did from `earlier` to `self`.
    pub fn since(self, earlier: MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: (self.busy - earlier.busy).max(0.0),
            steal: (self.steal - earlier.steal).max(0.0),
        }
    }
}

/// The all-CPU `cpu` line of `/proc/stat` text, whose fields are in `hz` ticks a second.
fn parse_stat(stat: &str, hz: u64) -> Option<MachineCpu> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal ...; steal since Linux 2.6.11.
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0) as f64 / hz.max(1) as f64;
    Some(MachineCpu {
        busy: at(0) + at(1) + at(2) + at(5) + at(6),
        steal: at(7),
    })
}

/// Seconds thread `tid` of `pid` has run (the first field of its `schedstat`, in ns).
fn thread_cpu_secs(pid: u32, tid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_charged_by_their_names() {
        for (name, role) in [
            ("vcpu0", CpuRole::Guest),
            ("vcpu12", CpuRole::Guest),
            ("CPU 0/KVM", CpuRole::Guest),
            ("pager", CpuRole::Serving),
            ("blk-data", CpuRole::Serving),
            ("balloon", CpuRole::Serving),
            ("worker", CpuRole::Serving),
            ("qemu-system-x86", CpuRole::Serving),
            ("reclaim", CpuRole::Background),
            ("release-ready", CpuRole::Background),
            ("vcpuish", CpuRole::Background),
            ("memvisor", CpuRole::Background),
        ] {
            assert_eq!(cpu_role(name), role, "{name}");
        }
    }

    #[test]
    fn the_machine_line_of_proc_stat_is_read() {
        let stat =
            "cpu  300 20 100 9000 50 7 3 40 80 0\ncpu0 150 10 50 4500 25 3 2 20 40 0\nintr 1 2\n";
        let m = parse_stat(stat, 100).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(m.busy, 4.3) && close(m.steal, 0.4), "{m:?}");
        // A kernel before steal time: none.
        assert_eq!(parse_stat("cpu 100 0 100 50\n", 100).unwrap().steal, 0.0);
        assert_eq!(parse_stat("cpu0 1 2 3\n", 100), None);
        assert_eq!(parse_stat("cpu 1 x 3\n", 100), None);
        let later = MachineCpu {
            busy: 5.0,
            steal: 1.0,
        };
        let d = later.since(m);
        assert!(close(d.busy, 0.7) && close(d.steal, 0.6), "{d:?}");
        assert_eq!(m.since(later), MachineCpu::default(), "never negative");
        // This machine's own, and it moves forward.
        let a = MachineCpu::now().unwrap();
        let b = MachineCpu::now().unwrap();
        assert!(b.busy >= a.busy && b.steal >= a.steal);
    }

    #[test]
    fn a_busy_thread_of_this_process_is_metered() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let spin = std::thread::Builder::new()
            .name("vcpu7".into())
            .spawn(move || {
                let mut x = 0u64;
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
            .unwrap();
        let t = std::time::Instant::now();
        let mut m = CpuMeter::default();
        let pid = std::process::id();
        while t.elapsed() < std::time::Duration::from_millis(200) {
            m.look(1, pid);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        m.look(1, pid);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spin.join().unwrap();
        let each = m.each(3);
        assert_eq!(each.len(), 3);
        assert_eq!(each[0].total(), 0.0, "charged to whom it was looked at for");
        assert_eq!(each[2].total(), 0.0);
        let each = &each[1..];
        // The spinning thread ran for most of 200 ms (on a loaded machine, at least some).
        assert!(each[0].guest > 0.01, "{each:?}");
        assert!(
            each[0].guest <= t.elapsed().as_secs_f64() + 0.01,
            "{each:?}"
        );
        // Looking at a process that is gone adds nothing.
        m.look(0, u32::MAX);
        assert_eq!(m.each(1)[0].total(), 0.0);
    }
}
