//! `workload=alloc` (VSwapper Fig. 10): a fresh task allocates `mb` MiB and
//! touches every page once, as a newly forked process does; every first touch
//! is a minor fault that takes a page from the allocator and zeroes it (unless
//! `zero=0`). The task exits and the next round starts afresh. With several
//! vCPUs each runs its own task (`mb` per vCPU) and prints its own lines.
//! With zeroing on, every word of every fresh page but the one it writes must
//! read zero: whatever the hypervisor did to bring the page in (swap-in,
//! image refault, or installing the zeroed page without a read), any other
//! value is a mismatch.
//!
//! Keys: `mb=64 rounds=3`.

use crate::boot::MAX_CPUS;
use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm::{self, BalloonWords};
use crate::sync::SpinLock;

use super::common::{self, Progress, ms_since, us_since};

const NAME: &str = "alloc";
const KEYS: &[&str] = &["mb", "rounds"];

/// (pages, rounds) for the workers.
static ARGS: SpinLock<(u64, u64)> = SpinLock::new((0, 0));
/// Per-vCPU outcome: finished without an error.
static OK: SpinLock<[bool; MAX_CPUS]> = SpinLock::new([false; MAX_CPUS]);
/// Words of fresh pages that did not read zero, summed over vCPUs.
static MISMATCHES: SpinLock<u64> = SpinLock::new(0);
/// Whether fresh pages are zeroed (`zero=1`), so they can be checked.
static CHECK: SpinLock<bool> = SpinLock::new(true);

pub fn run(cfg: &Config, cpus: u32) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let (pages, rounds) = match (common::mb_arg(cfg, "mb", 64), cfg.num("rounds", 3, 1, 1000)) {
        (Ok(f), Ok(p)) => (f, p),
        (Err(e), _) | (_, Err(e)) => return common::bad_arg(NAME, e),
    };
    *ARGS.lock() = (pages, rounds);
    *CHECK.lock() = matches!(cfg.num("zero", 1, 0, 1), Ok(1));
    let t_all = rdtsc();
    crate::smp::run_on_all(worker);
    let mismatches = *MISMATCHES.lock();
    let ok = OK.lock()[..cpus as usize].iter().all(|&o| o) && mismatches == 0;
    println!(
        "RESULT workload=alloc phase=done ok={} mismatches={mismatches} mb={} rounds={rounds} cpus={cpus} ms={} {} {}",
        u8::from(ok),
        pages / 256,
        ms_since(t_all),
        mm::stats_words(),
        BalloonWords(mm::balloon_stats())
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}

fn worker(cpu: u32) {
    let (pages, rounds) = *ARGS.lock();
    let check = *CHECK.lock();
    let mut bad = 0u64;
    for round in 1..=rounds {
        let task = match mm::task_create() {
            Ok(t) => t,
            Err(e) => {
                println!("alloc: cpu {cpu}: {e:?}");
                return;
            }
        };
        let before = mm::stats().events;
        let t0 = rdtsc();
        let mut progress = Progress::new(NAME, "touch", pages);
        for p in 0..pages {
            match mm::anon(task, p, true) {
                Ok(mut pg) => {
                    let words = pg.words();
                    if check {
                        bad += words[1..].iter().filter(|&&w| w != 0).count() as u64;
                    }
                    words[0] = p;
                }
                Err(e) => {
                    println!("alloc: cpu {cpu}: {e:?}");
                    return;
                }
            }
            if round == 1 && cpu == 0 {
                progress.update(p + 1);
            }
        }
        let us = us_since(t0);
        let after = mm::stats().events;
        mm::task_exit(task);
        // With several vCPUs the counter deltas include the other vCPUs' faults.
        println!(
            "RESULT workload=alloc phase=round{round} cpu={cpu} ms={} ns_per_page={} pages={pages} pgfault={} zeroed={} pswpout={}",
            ms_since(t0),
            us * 1000 / pages.max(1),
            after.pgfault - before.pgfault,
            after.zeroed - before.zeroed,
            after.pswpout - before.pswpout
        );
    }
    *MISMATCHES.lock() += bad;
    OK.lock()[cpu as usize] = true;
}
