//! `workload=integrity`: every vCPU fills `anon_mb` MiB of its task's memory and
//! a `file_mb` MiB file with patterns keyed by address and generation, then for
//! `rounds` rounds verifies every word of every page and rewrites a third of the
//! pages with the next generation (anonymous pages through the access path,
//! file pages through the page cache), with `sync` + `drop_caches` every other
//! round. With less RAM than the working set this drives reclaim, swap-out,
//! swap-in, writeback and readahead hard; any word that differs is a mismatch.
//!
//! With `secs=N`, rounds continue past `rounds` until N seconds have passed
//! (so a test can move the balloon during the run).
//!
//! With `compressible=P`, P % of the pages (chosen by page, the same in every generation)
//! hold words with one random byte in eight and zeros elsewhere: data a compressor halves or
//! better, where the rest is random and does not compress at all.
//!
//! With `duplicate=P`, P % of the pages (chosen by page) hold the same content as every other
//! such page with the same page number modulo 8 and the same generation: identical pages for
//! share before swap (`docs/pager.md`) to find, which then differ again as the rounds rewrite
//! them. Their words are keyed by that shared number instead of their own page number.
//!
//! Keys: `anon_mb=64 file_mb=32 rounds=3 secs=0 compressible=0 duplicate=0 seed=1` (sizes per
//! vCPU).

use memvisor_guest_mm::format::splitmix64;
use memvisor_guest_mm::{Access, MmError};

use crate::boot::MAX_CPUS;
use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm::{self, BalloonWords};
use crate::sync::SpinLock;

use super::common::{self, Progress, ms_since};

const NAME: &str = "integrity";
pub const KEYS: &[&str] = &[
    "anon_mb",
    "file_mb",
    "rounds",
    "secs",
    "compressible",
    "duplicate",
];
const MAX_REPORTED: u64 = 5;

#[derive(Clone, Copy)]
struct Args {
    anon_pages: u64,
    file_pages: u64,
    rounds: u64,
    secs: u64,
    /// Percent of the pages whose words are compressible.
    compressible: u64,
    /// Percent of the pages that hold one of 8 shared contents (per generation).
    duplicate: u64,
    seed: u64,
}

#[derive(Clone, Copy, Default)]
struct CpuResult {
    done: bool,
    mismatches: u64,
    pages_checked: u64,
    error: Option<MmError>,
    ms: u64,
}

static ARGS: SpinLock<Args> = SpinLock::new(Args {
    anon_pages: 0,
    file_pages: 0,
    rounds: 0,
    secs: 0,
    compressible: 0,
    duplicate: 0,
    seed: 0,
});
static RESULTS: SpinLock<[CpuResult; MAX_CPUS]> = SpinLock::new(
    [CpuResult {
        done: false,
        mismatches: 0,
        pages_checked: 0,
        error: None,
        ms: 0,
    }; MAX_CPUS],
);

fn word(a: &Args, file: bool, cpu: u32, page: u64, i: usize, generation: u64) -> u64 {
    splitmix64(
        a.seed
            ^ (u64::from(file) << 62)
            ^ (u64::from(cpu) << 54)
            ^ (content_key(a, file, cpu, page) << 12)
            ^ ((i as u64) << 3)
            ^ generation.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    )
}

/// The number `page`'s words are keyed by: its own, or on a duplicate page one of 8 numbers
/// past any page's, shared by every duplicate page of the same class.
fn content_key(a: &Args, file: bool, cpu: u32, page: u64) -> u64 {
    if a.duplicate == 0 {
        return page;
    }
    let h =
        splitmix64(a.seed ^ 0x6475_7065 ^ (u64::from(file) << 62) ^ (u64::from(cpu) << 54) ^ page);
    if h % 100 < a.duplicate {
        (1 << 40) | (page % 8)
    } else {
        page
    }
}

/// What the words of `page` are masked with: one byte of eight kept on a compressible page.
fn mask(a: &Args, file: bool, cpu: u32, page: u64) -> u64 {
    let h =
        splitmix64(a.seed ^ 0x636f_6d70 ^ (u64::from(file) << 62) ^ (u64::from(cpu) << 54) ^ page);
    if h % 100 < a.compressible {
        0xff
    } else {
        u64::MAX
    }
}

/// The generation page `page` holds after round `r`.
fn gen_of(page: u64, r: u64) -> u64 {
    (1..=r)
        .rev()
        .find(|g| (page + g).is_multiple_of(3))
        .unwrap_or(0)
}

pub fn run(cfg: &Config, cpus: u32) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok(Args {
            anon_pages: common::mb_arg(cfg, "anon_mb", 64)?,
            file_pages: common::mb_arg(cfg, "file_mb", 32)?,
            rounds: cfg.num("rounds", 3, 1, 1000)?,
            secs: cfg.num("secs", 0, 0, 86400)?,
            compressible: cfg.num("compressible", 0, 0, 100)?,
            duplicate: cfg.num("duplicate", 0, 0, 100)?,
            seed: cfg.seed,
        })
    })();
    let args = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    *ARGS.lock() = args;
    println!(
        "integrity: {cpus} cpu(s), per cpu {} MiB anonymous + {} MiB file, {} rounds",
        args.anon_pages / 256,
        args.file_pages / 256,
        args.rounds
    );
    let t0 = rdtsc();
    crate::smp::run_on_all(worker);
    let results = *RESULTS.lock();
    let mut total = 0;
    let mut ok = true;
    for (cpu, r) in results.iter().enumerate().take(cpus as usize) {
        total += r.mismatches;
        if let Some(e) = r.error {
            println!("integrity: cpu {cpu} failed: {e:?}");
            ok = false;
        }
        if !r.done {
            ok = false;
        }
    }
    let structure = mm::with(|k| k.mm.verify());
    if let Err(e) = structure {
        println!("integrity: memory manager invariant broken: {e}");
        ok = false;
    }
    let ok = ok && total == 0;
    println!(
        "RESULT workload=integrity phase=done ok={} mismatches={total} cpus={cpus} ms={} {} {}",
        u8::from(ok),
        ms_since(t0),
        mm::stats_words(),
        BalloonWords(mm::balloon_stats())
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}

struct Name([u8; 24], usize);

impl core::fmt::Write for Name {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.1 + s.len();
        if end > self.0.len() {
            return Err(core::fmt::Error);
        }
        self.0[self.1..end].copy_from_slice(s.as_bytes());
        self.1 = end;
        Ok(())
    }
}

fn worker(cpu: u32) {
    let t0 = rdtsc();
    let mut res = CpuResult::default();
    if let Err(e) = work(cpu, &mut res) {
        res.error = Some(e);
    }
    res.done = true;
    res.ms = common::us_since(t0) / 1000;
    println!(
        "RESULT workload=integrity phase=cpu cpu={cpu} mismatches={} pages_checked={} ms={} ok={}",
        res.mismatches,
        res.pages_checked,
        res.ms,
        u8::from(res.error.is_none() && res.mismatches == 0)
    );
    RESULTS.lock()[cpu as usize] = res;
}

fn check(
    a: &Args,
    file: bool,
    cpu: u32,
    page: u64,
    words: &[u64; 512],
    g: u64,
    res: &mut CpuResult,
) {
    res.pages_checked += 1;
    let m = mask(a, file, cpu, page);
    for (i, &w) in words.iter().enumerate() {
        let want = word(a, file, cpu, page, i, g) & m;
        if w != want {
            if res.mismatches < MAX_REPORTED {
                println!(
                    "integrity: MISMATCH cpu={cpu} {} page={page} word={i} got={w:#x} want={want:#x} gen={g}",
                    if file { "file" } else { "anon" }
                );
            }
            res.mismatches += 1;
        }
    }
}

fn fill(a: &Args, file: bool, cpu: u32, page: u64, words: &mut [u64; 512], g: u64) {
    let m = mask(a, file, cpu, page);
    for (i, w) in words.iter_mut().enumerate() {
        *w = word(a, file, cpu, page, i, g) & m;
    }
}

fn work(cpu: u32, res: &mut CpuResult) -> Result<(), MmError> {
    let a = *ARGS.lock();
    let task = mm::task_create()?;
    let mut name = Name([0; 24], 0);
    let _ = core::fmt::write(&mut name, format_args!("integrity.{cpu}"));
    let name = core::str::from_utf8(&name.0[..name.1]).unwrap_or("integrity");
    let bytes = a.file_pages * 4096;
    let file = match mm::lookup(name) {
        Some(f) if mm::file_pages(f) >= a.file_pages => f,
        _ => mm::file_create(name, bytes)?,
    };
    let n = a.anon_pages.max(a.file_pages);
    let t = rdtsc();
    let mut progress = Progress::new(NAME, "fill", n);
    for p in 0..n {
        if p < a.anon_pages {
            fill(&a, false, cpu, p, mm::anon(task, p, true)?.words(), 0);
        }
        if p < a.file_pages {
            fill(
                &a,
                true,
                cpu,
                p,
                mm::file_page(file, p, Access::Overwrite)?.words(),
                0,
            );
        }
        if cpu == 0 {
            progress.update(p + 1);
        }
    }
    mm::sync()?;
    mm::drop_caches()?;
    if cpu == 0 {
        println!(
            "RESULT workload=integrity phase=fill cpu={cpu} ms={} {}",
            ms_since(t),
            mm::stats_words()
        );
    }
    let mut r = 0;
    loop {
        r += 1;
        if r > a.rounds && (a.secs == 0 || common::us_since(t) >= a.secs * 1_000_000) {
            break;
        }
        let t = rdtsc();
        let before = res.mismatches;
        for k in 0..n {
            // Alternate the direction so reclaim meets both orders.
            let p = if r % 2 == 1 { n - 1 - k } else { k };
            let rewrite = (p + r).is_multiple_of(3);
            if p < a.anon_pages {
                let mut pg = mm::anon(task, p, rewrite)?;
                check(&a, false, cpu, p, pg.words(), gen_of(p, r - 1), res);
                if rewrite {
                    fill(&a, false, cpu, p, pg.words(), r);
                }
            }
            if p < a.file_pages {
                let acc = if rewrite { Access::Write } else { Access::Read };
                let mut pg = mm::file_page(file, p, acc)?;
                check(&a, true, cpu, p, pg.words(), gen_of(p, r - 1), res);
                if rewrite {
                    fill(&a, true, cpu, p, pg.words(), r);
                }
            }
        }
        if r % 2 == 0 {
            mm::sync()?;
            mm::drop_caches()?;
        }
        if cpu == 0 {
            println!(
                "RESULT workload=integrity phase=round{r} cpu={cpu} ms={} mismatches={} {}",
                ms_since(t),
                res.mismatches - before,
                mm::stats_words()
            );
        }
    }
    // Final pass: everything once more, after the file's pages went through the disk.
    let last = r - 1;
    mm::sync()?;
    mm::drop_caches()?;
    for p in 0..n {
        if p < a.anon_pages {
            check(
                &a,
                false,
                cpu,
                p,
                mm::anon(task, p, false)?.words(),
                gen_of(p, last),
                res,
            );
        }
        if p < a.file_pages {
            check(
                &a,
                true,
                cpu,
                p,
                mm::file_page(file, p, Access::Read)?.words(),
                gen_of(p, last),
                res,
            );
        }
    }
    mm::task_exit(task);
    Ok(())
}
