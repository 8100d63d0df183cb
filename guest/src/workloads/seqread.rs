//! `workload=seqread` (VSwapper §3.1): a file is read sequentially, whole, `passes`
//! times after the page cache is dropped; each pass is timed. The file is
//! `file=` (default `seq`, e.g. made by mkdisk) or, if absent, created with
//! `file_mb=` MiB (default 64) of mkdisk's deterministic content. Every word read
//! is checked against that content. `file=a,b,c` reads several files one after
//! another in every pass, in that order (a stream of files, as HyperDealer2 §6.4's
//! sequential reader).
//!
//! `then=idle|spin|write` keeps the guest in a state for `then_secs` seconds after the passes,
//! its page cache warm, so the host can take memory from a guest in that state (HyperDealer2
//! §6.2, Table 2): `idle` does nothing but serve the balloon; `spin` computes (a CPU-bound loop
//! that lets the balloon driver run between its steps, as a scheduler would); `write` overwrites
//! the file `write_file=` (default `dirty`, created with `write_mb=` MiB if absent) front to
//! back, again and again, with new content each round, so the page cache fills with dirty
//! pages the guest writes back as it needs the memory. With several vCPUs, `spin` and `write`
//! keep every other vCPU computing too (HyperDealer2 §6.2.3, Fig. 12: as many CPU-bound tasks as
//! vCPUs, one of them doing I/O in the write state); the balloon is served by vCPU 0 between
//! its steps. Its `RESULT ... phase=then` line says what it did.
//!
//! Keys: `file=seq file_mb=64 passes=3 then= then_secs=60 write_file=dirty write_mb=64`.

use memvisor_guest_mm::format::file_word;
use memvisor_guest_mm::{Access, PAGE_SIZE};

use core::sync::atomic::{AtomicU64, Ordering};

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::{mm, smp};

use super::common::{self, Progress, io_fail, ms_since, us_since};

const NAME: &str = "seqread";
/// Files one `file=` may list.
const MAX_FILES: usize = 64;
const KEYS: &[&str] = &[
    "file",
    "file_mb",
    "passes",
    "then",
    "then_secs",
    "write_file",
    "write_mb",
];

/// What the guest does after its passes (`then=`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    Idle,
    Spin,
    Write,
}

impl Then {
    fn parse(s: &str) -> Option<Then> {
        match s {
            "idle" => Some(Then::Idle),
            "spin" => Some(Then::Spin),
            "write" => Some(Then::Write),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Then::Idle => "idle",
            Then::Spin => "spin",
            Then::Write => "write",
        }
    }
}

/// Whether the guest stays busy after its passes (`then=spin` or `then=write`), so its other
/// vCPUs are set to compute beside it.
pub fn busy_after(cfg: &Config) -> bool {
    cfg.arg("then")
        .and_then(Then::parse)
        .is_some_and(|t| t != Then::Idle)
}

/// About a microsecond of arithmetic: one step of the CPU-bound state.
fn compute(mut x: u64) -> u64 {
    for _ in 0..256 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    core::hint::black_box(x)
}

/// When the other vCPUs stop computing (TSC), and the steps they made.
static SPIN_UNTIL: AtomicU64 = AtomicU64::new(0);
static SPIN_STEPS: AtomicU64 = AtomicU64::new(0);

/// An AP's part of the busy states: compute until [`SPIN_UNTIL`].
fn spin_beside(cpu: u32) {
    let (mut x, mut steps) = (0x9E37_79B9_7F4A_7C15u64 ^ u64::from(cpu), 0u64);
    let until = SPIN_UNTIL.load(Ordering::Relaxed);
    while rdtsc() < until {
        x = compute(x);
        steps += 1;
    }
    SPIN_STEPS.fetch_add(steps, Ordering::Relaxed);
}

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let (file_pages, passes) = match (
        common::mb_arg(cfg, "file_mb", 64),
        cfg.num("passes", 3, 1, 1000),
    ) {
        (Ok(f), Ok(p)) => (f, p),
        (Err(e), _) | (_, Err(e)) => return common::bad_arg(NAME, e),
    };
    let then = match cfg.arg("then") {
        None => None,
        Some(t) => match Then::parse(t) {
            Some(t) => Some(t),
            None => {
                return common::fail(
                    NAME,
                    format_args!("bad argument then={t}: expected idle, spin or write"),
                );
            }
        },
    };
    let (then_secs, write_pages) = match (
        cfg.num("then_secs", 60, 1, 86_400),
        common::mb_arg(cfg, "write_mb", 64),
    ) {
        (Ok(t), Ok(w)) => (t, w),
        (Err(e), _) | (_, Err(e)) => return common::bad_arg(NAME, e),
    };
    // `file=a,b,c`: the files are read one after another, in that order, in every pass.
    let names = cfg.arg("file").unwrap_or("seq");
    let explicit = cfg.arg("file_mb").is_some();
    let mut list = [(0u32, 0u64); MAX_FILES];
    let mut count = 0;
    for name in names.split(',') {
        if count == MAX_FILES {
            return common::fail(
                NAME,
                format_args!("bad argument file={names}: at most {MAX_FILES} files"),
            );
        }
        let id = match mm::lookup(name) {
            Some(id) => id,
            None => match common::data_file(NAME, name, file_pages * PAGE_SIZE as u64) {
                Ok(id) => id,
                Err(code) => return code,
            },
        };
        let n = if explicit {
            file_pages.min(mm::file_pages(id))
        } else {
            mm::file_pages(id)
        };
        list[count] = (id, n);
        count += 1;
    }
    let files = &list[..count];
    let pages: u64 = files.iter().map(|&(_, n)| n).sum();
    let seed = mm::fs_seed();
    if let Err(e) = mm::drop_caches() {
        return io_fail(NAME, e);
    }
    println!(
        "seqread: file {names}: {} MiB, {passes} passes",
        pages / 256
    );
    let mut mismatches = 0u64;
    let t_all = rdtsc();
    for pass in 1..=passes {
        let before = mm::stats().events;
        let t0 = rdtsc();
        let mut progress = Progress::new(NAME, "pass", pages);
        let mut done = 0u64;
        for &(id, n) in files {
            for p in 0..n {
                let mut page = match mm::file_page(id, p, Access::Read) {
                    Ok(pg) => pg,
                    Err(e) => return io_fail(NAME, e),
                };
                let base = p * PAGE_SIZE as u64;
                for (i, &w) in page.words().iter().enumerate() {
                    if w != file_word(seed, id, base + 8 * i as u64) {
                        if mismatches < 5 {
                            println!("seqread: MISMATCH file={id} page={p} word={i}");
                        }
                        mismatches += 1;
                    }
                }
                done += 1;
                if pass == 1 {
                    progress.update(done);
                }
            }
        }
        let us = us_since(t0).max(1);
        let after = mm::stats().events;
        println!(
            "RESULT workload=seqread phase=pass{pass} ms={} mb_s={} pages={pages} hits={} misses={} pgpgin={} io_requests={}",
            ms_since(t0),
            pages * PAGE_SIZE as u64 / us,
            after.cache_hits - before.cache_hits,
            after.cache_misses - before.cache_misses,
            after.pgpgin - before.pgpgin,
            after.io_requests - before.io_requests
        );
    }
    if let Some(then) = then {
        let write_name = cfg.arg("write_file").unwrap_or("dirty");
        match stay(then, then_secs, write_name, write_pages) {
            Ok(m) => mismatches += m,
            Err(code) => return code,
        }
    }
    let ok = mismatches == 0;
    println!(
        "RESULT workload=seqread phase=done ok={} passes={passes} mib={} mismatches={mismatches} ms={} {}",
        u8::from(ok),
        pages / 256,
        ms_since(t_all),
        mm::stats_words()
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}

/// Stays in state `then` for `secs` seconds, then prints the `then` RESULT line; returns the
/// words of the written file that did not read back as written.
fn stay(then: Then, secs: u64, write_name: &str, write_pages: u64) -> Result<u64, ExitCode> {
    let write = match then {
        Then::Write => Some(common::data_file(
            NAME,
            write_name,
            write_pages * PAGE_SIZE as u64,
        )?),
        _ => None,
    };
    let write_len = write.map_or(0, |id| mm::file_pages(id).min(write_pages));
    println!("seqread: then={} for {secs} s", then.name());
    let before = mm::stats().events;
    let seed = mm::fs_seed();
    let t0 = rdtsc();
    let end = crate::time::deadline_after_ms(secs * 1000);
    let (mut steps, mut written, mut rounds) = (0u64, 0u64, 0u64);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    // Every other vCPU computes while this one is in the state (they wait for work: `busy_after`).
    let spinners = if then == Then::Idle {
        0
    } else {
        smp::online() - 1
    };
    if spinners > 0 {
        SPIN_UNTIL.store(end, Ordering::Relaxed);
        SPIN_STEPS.store(0, Ordering::Relaxed);
        smp::start_on_aps(spin_beside);
    }
    while rdtsc() < end {
        match write {
            None if then == Then::Idle => {
                mm::tick();
                core::hint::spin_loop();
            }
            None => {
                // About a microsecond of arithmetic per step, then the balloon's turn.
                x = compute(x);
                mm::tick();
            }
            Some(id) => {
                let p = written % write_len.max(1);
                if p == 0 {
                    rounds += 1;
                }
                let mut page =
                    mm::file_page(id, p, Access::Overwrite).map_err(|e| io_fail(NAME, e))?;
                let base = p * PAGE_SIZE as u64;
                for (i, w) in page.words().iter_mut().enumerate() {
                    *w = file_word(seed, id, base + 8 * i as u64) ^ rounds;
                }
                written += 1;
            }
        }
        steps += 1;
    }
    let ms = ms_since(t0);
    if spinners > 0 {
        smp::wait_for_aps();
    }
    let mut after = mm::stats().events;
    // Every page written has its last round's content on disk once synced and read back.
    let mut mismatches = 0u64;
    if let Some(id) = write {
        let pages = write_len;
        mm::sync().map_err(|e| io_fail(NAME, e))?;
        after = mm::stats().events;
        mm::drop_caches().map_err(|e| io_fail(NAME, e))?;
        for p in 0..pages {
            let round = if written > p {
                (written - 1 - p) / pages + 1
            } else {
                0
            };
            let mut page = mm::file_page(id, p, Access::Read).map_err(|e| io_fail(NAME, e))?;
            let base = p * PAGE_SIZE as u64;
            for (i, &w) in page.words().iter().enumerate() {
                if w != file_word(seed, id, base + 8 * i as u64) ^ round {
                    if mismatches < 5 {
                        println!("seqread: MISMATCH in {write_name} page={p} word={i}");
                    }
                    mismatches += 1;
                }
            }
        }
    }
    println!(
        "RESULT workload=seqread phase=then state={} ms={ms} ok={} steps={steps} written_pages={written} rounds={rounds} mismatches={mismatches} pgpgout={} misses={} spinners={spinners} spinner_steps={}",
        then.name(),
        u8::from(mismatches == 0),
        after.pgpgout - before.pgpgout,
        after.cache_misses - before.cache_misses,
        SPIN_STEPS.load(Ordering::Relaxed)
    );
    Ok(mismatches)
}
