//! The host kernel's KSM, driven by the host like a memory manager (docs/sharing.md): while a
//! VM shares (`sharing = "host"`), the scan rate follows free memory, as oVirt MOM's KSM rules
//! do (scan faster by 300 pages a tick while free memory is short, slower by 50 while it is
//! not, within 64 to 1250 pages per wake-up; sleep 10 ms per 16 GiB of host memory), and the
//! scanner's CPU is read from its thread's `/proc` entry. The knobs the host found are put
//! back when it lets KSM go.

use std::time::Instant;

use memvisor_api::HostKsm;
use memvisor_policy::free_state::FreeState;

/// Where the kernel's KSM knobs are.
pub const KSM_DIR: &str = "/sys/kernel/mm/ksm";

/// The knobs the host sets, put back as they were.
const KNOBS: [&str; 4] = ["use_zero_pages", "pages_to_scan", "sleep_millisecs", "run"];

/// Fewest and most pages a wake-up scans, and the steps between (MOM's `ksm.rules`).
pub const MIN_PAGES: u64 = 64;
pub const MAX_PAGES: u64 = 1250;
const BOOST: u64 = 300;
const DECAY: u64 = 50;
/// Below this fraction of the budget free, memory counts as short (MOM's 20 %).
const SHORT: f64 = 0.20;

/// Whether this kernel has KSM.
pub fn available() -> bool {
    std::path::Path::new(KSM_DIR).join("run").exists()
}

fn read(name: &str) -> Result<String, String> {
    std::fs::read_to_string(format!("{KSM_DIR}/{name}"))
        .map(|s| s.trim().to_owned())
        .map_err(|e| format!("cannot read {KSM_DIR}/{name}: {e}"))
}

fn write(name: &str, value: &str) -> Result<(), String> {
    std::fs::write(format!("{KSM_DIR}/{name}"), value)
        .map_err(|e| format!("cannot set {KSM_DIR}/{name} to {value}: {e}"))
}

fn number(name: &str) -> u64 {
    read(name).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The scan rate for the next tick: `now` pages per wake-up, moved by the free memory.
pub fn next_pages(now: u64, state: FreeState, free: u64, budget: u64) -> u64 {
    #[allow(clippy::cast_precision_loss)] // a fraction of memory sizes
    let short = (free as f64) < SHORT * budget as f64;
    let next = match state {
        // Reclaim has started (ESX soft and below): merging is the cheapest memory there is.
        FreeState::Hard | FreeState::Low => MAX_PAGES,
        _ if short || state == FreeState::Soft => now.saturating_add(BOOST),
        _ => now.saturating_sub(DECAY),
    };
    next.clamp(MIN_PAGES, MAX_PAGES)
}

/// `sleep_millisecs` for a host of `total` bytes of memory: MOM's 10 ms per 16 GiB, at least 1.
pub fn sleep_ms(total: u64) -> u64 {
    (10 * (16u64 << 30) / total.max(1)).max(1)
}

/// KSM while the host drives it.
pub struct Ksm {
    /// The knobs as the host found them.
    saved: Vec<(&'static str, String)>,
    pages: u64,
    sleep_ms: u64,
    /// ksmd's `/proc/PID/stat`, and its CPU time (clock ticks) when the host took it.
    ksmd: Option<std::path::PathBuf>,
    cpu_start: u64,
    last: (Instant, u64),
    fraction: f64,
}

/// The pid of the `ksmd` kernel thread.
fn ksmd_stat() -> Option<std::path::PathBuf> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let name = e.file_name();
        let pid = name.to_str()?;
        pid.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == "ksmd").then(|| e.path().join("stat"))
    })
}

/// utime + stime of a `/proc/PID/stat`, in clock ticks.
fn cpu_ticks(stat: &std::path::Path) -> Option<u64> {
    let s = std::fs::read_to_string(stat).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The kernel's clock ticks a second (`USER_HZ`): the unit of the CPU times in `/proc`.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

impl Ksm {
    /// Takes KSM over: saves its knobs, turns zero-page merging on and starts the scanner
    /// slowly.
    pub fn take(host_memory: u64) -> Result<Ksm, String> {
        let saved = KNOBS
            .iter()
            .map(|&k| read(k).map(|v| (k, v)))
            .collect::<Result<Vec<_>, _>>()?;
        let ksmd = ksmd_stat();
        let cpu = ksmd.as_deref().and_then(cpu_ticks).unwrap_or(0);
        let ksm = Ksm {
            saved,
            pages: MIN_PAGES,
            sleep_ms: sleep_ms(host_memory),
            ksmd,
            cpu_start: cpu,
            last: (Instant::now(), cpu),
            fraction: 0.0,
        };
        // use_zero_pages can only change while nothing is merged with the zero page under the
        // old setting; a failure there leaves sharing on, without zero pages.
        if let Err(e) = write("use_zero_pages", "1") {
            tracing::warn!("KSM: {e}; zero pages are merged as any other content");
        }
        ksm.apply()?;
        Ok(ksm)
    }

    /// Takes KSM over at a fixed scan rate (a benchmark's one budget for every hypervisor).
    pub fn fixed(pages: u64, sleep_ms: u64) -> Result<Ksm, String> {
        let mut ksm = Ksm::take(16 << 30)?;
        ksm.pages = pages;
        ksm.sleep_ms = sleep_ms;
        ksm.apply()?;
        Ok(ksm)
    }

    /// Unmerges every merged page of the machine (`run` 2, which returns once they are all
    /// private again) and starts the scanner afresh at the same rate, so a run starts from
    /// nothing merged.
    pub fn restart(&self) -> Result<(), String> {
        write("run", "2")?;
        // With nothing merged, zero-page merging can be turned on if taking KSM could not.
        write("use_zero_pages", "1")?;
        self.apply()
    }

    /// The scanner's CPU time since KSM was taken, read now (ms).
    pub fn cpu_ms_now(&self) -> u64 {
        let now = self
            .ksmd
            .as_deref()
            .and_then(cpu_ticks)
            .unwrap_or(self.last.1);
        now.saturating_sub(self.cpu_start) * 1000 / ticks_per_second()
    }

    fn apply(&self) -> Result<(), String> {
        write("pages_to_scan", &self.pages.to_string())?;
        write("sleep_millisecs", &self.sleep_ms.to_string())?;
        write("run", "1")
    }

    /// One tick: the scan rate from the free memory, and the scanner's CPU since the last.
    pub fn tick(&mut self, state: FreeState, free: u64, budget: u64) {
        let pages = next_pages(self.pages, state, free, budget);
        if pages != self.pages {
            self.pages = pages;
            if let Err(e) = self.apply() {
                tracing::warn!("KSM: {e}");
            }
        }
        if let Some(cpu) = self.ksmd.as_deref().and_then(cpu_ticks) {
            let (then, before) = self.last;
            let secs = then.elapsed().as_secs_f64();
            if secs > 0.0 {
                #[allow(clippy::cast_precision_loss)] // clock ticks
                let used = cpu.saturating_sub(before) as f64 / ticks_per_second() as f64;
                self.fraction = used / secs;
            }
            self.last = (Instant::now(), cpu);
        }
    }

    /// What `GET /host` shows of it.
    pub fn info(&self) -> HostKsm {
        HostKsm {
            running: number("run") == 1,
            pages_to_scan: self.pages,
            sleep_ms: self.sleep_ms,
            shared_pages: number("pages_shared"),
            sharing_pages: number("pages_sharing"),
            zero_pages: number("ksm_zero_pages"),
            full_scans: number("full_scans"),
            cpu_ms: self.last.1.saturating_sub(self.cpu_start) * 1000 / ticks_per_second(),
            cpu_fraction: self.fraction,
        }
    }
}

impl Drop for Ksm {
    /// Puts the knobs back as the host found them (`run` last). Merged pages stay merged
    /// unless `run` was 2 (unmerge everything); they belonged to VMs that are gone by now.
    fn drop(&mut self) {
        for (k, v) in self.saved.iter().rev() {
            if let Err(e) = write(k, v) {
                tracing::warn!("KSM: cannot put back what the host found: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_rate_follows_free_memory() {
        let gib = 1u64 << 30;
        // Plenty: decays to the floor.
        assert_eq!(next_pages(500, FreeState::High, 8 * gib, 10 * gib), 450);
        assert_eq!(
            next_pages(70, FreeState::High, 8 * gib, 10 * gib),
            MIN_PAGES
        );
        // Short (below 20 % free) or soft: boosts, up to the ceiling.
        assert_eq!(next_pages(500, FreeState::High, gib, 10 * gib), 800);
        assert_eq!(
            next_pages(1200, FreeState::Soft, 9 * gib, 10 * gib),
            MAX_PAGES
        );
        // Hard or low: the ceiling at once.
        assert_eq!(
            next_pages(MIN_PAGES, FreeState::Hard, 0, 10 * gib),
            MAX_PAGES
        );
        assert_eq!(
            next_pages(MIN_PAGES, FreeState::Low, 0, 10 * gib),
            MAX_PAGES
        );
    }

    #[test]
    fn sleep_follows_host_memory() {
        assert_eq!(sleep_ms(16 << 30), 10);
        assert_eq!(sleep_ms(24 << 30), 6);
        assert_eq!(sleep_ms(256 << 30), 1);
        assert_eq!(sleep_ms(4 << 30), 40);
    }

    #[test]
    fn cpu_ticks_read_past_a_command_with_spaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stat");
        std::fs::write(
            &p,
            "36 (ks md) S 2 0 0 0 -1 2129984 0 0 0 0 17 25 0 0 25 5 1 0",
        )
        .unwrap();
        assert_eq!(cpu_ticks(&p), Some(42));
    }
}
