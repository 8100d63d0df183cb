//! A memory limit enforced by the host kernel instead of memvisor's pager: a cgroup v1 memory
//! cgroup with host swap. This is what QEMU/KVM users get, and the baseline memvisor is measured
//! against (`--pager off --mem-limit`).

use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup/memory";
/// Room for what the VMM itself holds besides guest RAM and its current RSS: KVM's page tables,
/// thread stacks, I/O buffers.
const SLACK: u64 = 16 << 20;

/// A process in its own memory cgroup; dropping it moves the process back and removes the cgroup.
pub struct HostLimit {
    dir: PathBuf,
    pid: u32,
    /// The cgroup's limit in bytes.
    limit: u64,
}

fn rss_bytes(pid: u32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| std::io::Error::other("no VmRSS in /proc/PID/status"))?;
    Ok(kb << 10)
}

/// Whether the host has any swap space enabled.
pub fn host_swap_enabled() -> bool {
    std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() > 1)
}

impl HostLimit {
    /// Puts process `pid` (and the children it starts later) in a new cgroup limited to
    /// `guest_limit` bytes plus the hypervisor's overhead: `pid`'s resident memory now, plus
    /// [`SLACK`], plus `extra` (what a child hypervisor process adds).
    pub fn enter(pid: u32, guest_limit: u64, extra: u64) -> std::io::Result<Self> {
        let root = Path::new(ROOT);
        if !root.join("memory.limit_in_bytes").exists() {
            return Err(std::io::Error::other(format!(
                "no cgroup v1 memory controller at {ROOT}"
            )));
        }
        let overhead = rss_bytes(pid)? + SLACK + extra;
        let dir = root.join(format!("memvisor-{pid}"));
        std::fs::create_dir(&dir)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", dir.display())))?;
        let me = HostLimit {
            dir,
            pid,
            limit: guest_limit + overhead,
        };
        std::fs::write(me.dir.join("memory.limit_in_bytes"), me.limit.to_string())?;
        std::fs::write(me.dir.join("cgroup.procs"), pid.to_string())?;
        tracing::info!(
            "host memory limit: {} bytes = guest limit {guest_limit} + VMM overhead {overhead} (cgroup {})",
            me.limit,
            me.dir.display()
        );
        if !host_swap_enabled() {
            tracing::warn!(
                "the host has no swap enabled: past the limit the kernel can only OOM-kill the VM"
            );
        }
        Ok(me)
    }

    /// The cgroup's limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Processes the kernel's OOM killer has killed in the cgroup (`oom_kill` of
    /// `memory.oom_control`; 0 if the kernel does not count them).
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.oom_control"))
            .ok()
            .and_then(|t| oom_kill_count(&t))
            .unwrap_or(0)
    }
}

/// The `oom_kill` count of a cgroup v1 `memory.oom_control`.
fn oom_kill_count(oom_control: &str) -> Option<u64> {
    oom_control
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

impl Drop for HostLimit {
    fn drop(&mut self) {
        let _ = std::fs::write(Path::new(ROOT).join("cgroup.procs"), self.pid.to_string());
        // The cgroup can be removed once its charges are gone; that takes a moment after a move.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!("could not remove cgroup {}", self.dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_kill_count_is_read_from_oom_control() {
        let t = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(oom_kill_count(t), Some(2));
        assert_eq!(oom_kill_count("oom_kill_disable 0\nunder_oom 0\n"), None);
        assert_eq!(oom_kill_count("oom_kill x\n"), None);
    }
}
