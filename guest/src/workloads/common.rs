//! Helpers shared by the memory workloads: timing, argument errors, data files
//! with deterministic content, page patterns and sparse progress lines.

use memvisor_guest_mm::format::file_word;
use memvisor_guest_mm::{Access, MmError, PAGE_SIZE};

use crate::cmdline::{BadArg, Config};
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;
use crate::time::{Millis, cycles_to_us};

/// Microseconds since `t0` (TSC cycles / 1000 if the frequency is unknown).
pub fn us_since(t0: u64) -> u64 {
    let c = rdtsc().saturating_sub(t0);
    cycles_to_us(c).unwrap_or(c / 1000)
}

/// Waits `ms` milliseconds doing nothing but the memory manager's periodic work (the balloon
/// above all), as an idle task would.
pub fn idle_ms(ms: u64) {
    let end = crate::time::deadline_after_ms(ms);
    while rdtsc() < end {
        mm::tick();
        core::hint::spin_loop();
    }
}

/// `12.345` milliseconds since `t0`.
pub fn ms_since(t0: u64) -> Millis {
    Millis(us_since(t0))
}

/// TSC cycles as nanoseconds (one cycle a nanosecond when the frequency is unknown).
pub fn cycles_to_ns(cycles: u64, khz: Option<u64>) -> u64 {
    match khz {
        Some(khz) => {
            (u128::from(cycles) * 1_000_000 / u128::from(khz)).min(u128::from(u64::MAX)) as u64
        }
        None => cycles,
    }
}

/// Nanoseconds as microseconds with one decimal.
pub struct Us(pub u64);

impl core::fmt::Display for Us {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, self.0 % 1000 / 100)
    }
}

/// Prints the failure RESULT line and returns the failure exit code.
pub fn fail(workload: &str, why: impl core::fmt::Display) -> ExitCode {
    println!("{workload}: {why}");
    println!("RESULT workload={workload} phase=done ok=0");
    ExitCode::Failure
}

/// Reports a bad argument on the console.
pub fn bad_arg(workload: &str, e: BadArg) -> ExitCode {
    fail(workload, e)
}

/// Starts the memory manager or explains why it cannot, then warms the page cache if asked
/// (`warm_mb=`, [`warm`]).
pub fn start(cfg: &Config, workload: &str, known: &[&str]) -> Result<(), ExitCode> {
    cfg.warn_unknown(&[known, mm::KEYS]);
    mm::init(cfg).map_err(|e| fail(workload, e))?;
    warm(cfg, workload)
}

/// `warm_mb=N` (any workload that starts the memory manager): before the workload, the page
/// cache is filled with N MiB, half clean and half dirty, as HyperDealer2 §6.5 warms each guest
/// (clean:dirty = 1:1): file `warm` is read whole (N/2 MiB, created if absent) and file
/// `warm_dirty` (N/2 MiB, created if absent) is overwritten with new content and left unsynced.
/// Every word read is checked. Prints `warm: ...` with what it did; the workload's own time
/// starts after it.
fn warm(cfg: &Config, workload: &str) -> Result<(), ExitCode> {
    let mb = cfg
        .num("warm_mb", 0, 0, memvisor_guest_mm::TASK_PAGES / 256)
        .map_err(|e| bad_arg(workload, e))?;
    if mb == 0 {
        return Ok(());
    }
    let half = mb * 256 / 2;
    let t0 = rdtsc();
    let clean = data_file(workload, "warm", half * PAGE_SIZE as u64)?;
    let dirty = data_file(workload, "warm_dirty", half * PAGE_SIZE as u64)?;
    let seed = mm::fs_seed();
    let mut mismatches = 0u64;
    for p in 0..half {
        let mut page = mm::file_page(clean, p, Access::Read).map_err(|e| io_fail(workload, e))?;
        let base = p * PAGE_SIZE as u64;
        for (i, &w) in page.words().iter().enumerate() {
            mismatches += u64::from(w != file_word(seed, clean, base + 8 * i as u64));
        }
    }
    for p in 0..half {
        let mut page =
            mm::file_page(dirty, p, Access::Overwrite).map_err(|e| io_fail(workload, e))?;
        let base = p * PAGE_SIZE as u64;
        for (i, w) in page.words().iter_mut().enumerate() {
            *w = !file_word(seed, dirty, base + 8 * i as u64);
        }
    }
    if mismatches > 0 {
        return Err(fail(
            workload,
            format_args!("warm: {mismatches} words of file warm read back wrong"),
        ));
    }
    println!(
        "warm: {half} clean and {half} dirty pages in the page cache in {} ms",
        ms_since(t0)
    );
    Ok(())
}

/// A `size_mb`-like argument in MiB, as pages: at most a task's virtual space (2 GiB), so a size
/// nothing could hold is a bad argument at once rather than a failure mid-run.
pub fn mb_arg(cfg: &Config, key: &'static str, default: u64) -> Result<u64, BadArg> {
    Ok(cfg.num(key, default, 1, memvisor_guest_mm::TASK_PAGES / 256)? * 256)
}

/// Opens file `name` (at least `bytes` long) or creates it and fills it with the
/// deterministic content mkdisk would have written (through the page cache, then sync).
pub fn data_file(workload: &str, name: &str, bytes: u64) -> Result<u32, ExitCode> {
    if let Some(id) = mm::lookup(name) {
        let have = mm::file_pages(id) * PAGE_SIZE as u64;
        if have >= bytes {
            return Ok(id);
        }
        return Err(fail(
            workload,
            format_args!("file {name} holds {have} bytes, fewer than the {bytes} asked for"),
        ));
    }
    let id = mm::file_create(name, bytes).map_err(|e| {
        fail(
            workload,
            format_args!(
                "cannot create file {name} of {} MiB: {e:?} (format the data disk with memvisor mkdisk data)",
                bytes >> 20
            ),
        )
    })?;
    let seed = mm::fs_seed();
    let t0 = rdtsc();
    for p in 0..mm::file_pages(id) {
        let mut page = mm::file_page(id, p, Access::Overwrite).map_err(|e| io_fail(workload, e))?;
        let base = p * PAGE_SIZE as u64;
        for (i, w) in page.words().iter_mut().enumerate() {
            *w = file_word(seed, id, base + 8 * i as u64);
        }
    }
    mm::sync().map_err(|e| io_fail(workload, e))?;
    println!(
        "{workload}: created file {name} ({} MiB) in {} ms",
        bytes >> 20,
        ms_since(t0)
    );
    Ok(id)
}

pub fn io_fail(workload: &str, e: MmError) -> ExitCode {
    fail(workload, format_args!("memory manager error: {e:?}"))
}

/// Prints `workload: phase N%` at 25 % steps.
pub struct Progress {
    workload: &'static str,
    phase: &'static str,
    total: u64,
    next: u64,
}

impl Progress {
    pub fn new(workload: &'static str, phase: &'static str, total: u64) -> Self {
        Self {
            workload,
            phase,
            total: total.max(1),
            next: 1,
        }
    }

    pub fn update(&mut self, done: u64) {
        while self.next <= 3 && done * 4 >= self.next * self.total {
            println!("{}: {} {}%", self.workload, self.phase, self.next * 25);
            self.next += 1;
        }
    }
}

/// A small xorshift generator for workload decisions.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}
