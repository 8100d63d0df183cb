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
//! With `keep=1` the rounds are one task's growth, as HyperDealer2 §6.3's beneficiary asks for
//! 32 MB at a time and fills it with random data: round N touches `mb` MiB more of the same
//! task, which keeps them all, every word of a fresh page is filled with a pseudo-random value
//! of its address, and after the last round every word of every round is read back and checked
//! (a mismatch is a word the hypervisor lost while the guest kept it). `gap_ms=` waits that
//! long between two rounds (serving the balloon), as a program whose needs grow over time, so a
//! host has time to bring memory before the next round asks for it. The done line's `ms` is the
//! rounds' time and the read-back's (`check_ms` alone), the gaps left out: memory a host did not
//! bring in time costs the guest there, once what it allocated was paged out to make room.
//!
//! Keys: `mb=64 rounds=3 keep=0 gap_ms=0`.

use memvisor_guest_mm::format::splitmix64;

use crate::boot::MAX_CPUS;
use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm::{self, BalloonWords};
use crate::sync::SpinLock;
use crate::time::Millis;

use super::common::{self, Progress, ms_since, us_since};

const NAME: &str = "alloc";
const KEYS: &[&str] = &["mb", "rounds", "keep", "gap_ms"];

/// What the workers do, from the command line.
#[derive(Clone, Copy)]
struct Args {
    pages: u64,
    rounds: u64,
    /// Whether fresh pages are zeroed (`zero=1`), so they can be checked.
    check: bool,
    /// `keep=1`: the rounds grow one task, filled with random words, checked at the end.
    keep: bool,
    /// `gap_ms=`: the wait between two rounds.
    gap_ms: u64,
}

static ARGS: SpinLock<Args> = SpinLock::new(Args {
    pages: 0,
    rounds: 0,
    check: true,
    keep: false,
    gap_ms: 0,
});
/// Per-vCPU outcome: finished without an error.
static OK: SpinLock<[bool; MAX_CPUS]> = SpinLock::new([false; MAX_CPUS]);
/// Words of fresh pages that did not read zero, summed over vCPUs.
static MISMATCHES: SpinLock<u64> = SpinLock::new(0);
/// The longest read-back of a vCPU's kept pages (`keep=1`), in microseconds.
static CHECK_US: SpinLock<u64> = SpinLock::new(0);

pub fn run(cfg: &Config, cpus: u32) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok(Args {
            pages: common::mb_arg(cfg, "mb", 64)?,
            rounds: cfg.num("rounds", 3, 1, 1000)?,
            check: matches!(cfg.num("zero", 1, 0, 1), Ok(1)),
            keep: cfg.num("keep", 0, 0, 1)? == 1,
            gap_ms: cfg.num("gap_ms", 0, 0, 60_000)?,
        })
    })();
    let args = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let Args {
        pages,
        rounds,
        keep,
        gap_ms,
        ..
    } = args;
    *ARGS.lock() = args;
    let t_all = rdtsc();
    crate::smp::run_on_all(worker);
    let mismatches = *MISMATCHES.lock();
    let check_us = *CHECK_US.lock();
    let ok = OK.lock()[..cpus as usize].iter().all(|&o| o) && mismatches == 0;
    println!(
        "RESULT workload=alloc phase=done ok={} mismatches={mismatches} mb={} rounds={rounds} keep={} cpus={cpus} ms={} check_ms={} {} {}",
        u8::from(ok),
        pages / 256,
        u8::from(keep),
        Millis(us_since(t_all).saturating_sub(gap_ms * 1000 * (rounds - 1))),
        Millis(check_us),
        mm::stats_words(),
        BalloonWords(mm::balloon_stats())
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}

/// The word `keep=1` writes at word `i` of page `vpn` of vCPU `cpu`'s task: a splitmix64 of
/// its address, so every word differs and a page put back in the wrong place reads wrong.
fn fill_word(cpu: u32, vpn: u64, i: usize) -> u64 {
    splitmix64(u64::from(cpu) << 56 ^ vpn << 9 ^ i as u64)
}

fn worker(cpu: u32) {
    let Args {
        pages,
        rounds,
        check,
        keep,
        gap_ms,
    } = *ARGS.lock();
    let mut bad = 0u64;
    let mut kept = None;
    for round in 1..=rounds {
        if round > 1 && gap_ms > 0 {
            common::idle_ms(gap_ms);
        }
        let task = match kept.map_or_else(mm::task_create, Ok) {
            Ok(t) => t,
            Err(e) => {
                println!("alloc: cpu {cpu}: {e:?}");
                return;
            }
        };
        // With `keep`, round N's pages follow round N-1's in the same task.
        let first = if keep { (round - 1) * pages } else { 0 };
        let before = mm::stats().events;
        let t0 = rdtsc();
        let mut progress = Progress::new(NAME, "touch", pages);
        for p in 0..pages {
            let vpn = first + p;
            match mm::anon(task, vpn, true) {
                Ok(mut pg) => {
                    let words = pg.words();
                    if check {
                        bad += words[1..].iter().filter(|&&w| w != 0).count() as u64;
                    }
                    if keep {
                        for (i, w) in words.iter_mut().enumerate() {
                            *w = fill_word(cpu, vpn, i);
                        }
                    } else {
                        words[0] = p;
                    }
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
        if keep {
            kept = Some(task);
        } else {
            mm::task_exit(task);
        }
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
    if let Some(task) = kept {
        // Every word of every round, as written.
        let t0 = rdtsc();
        for vpn in 0..rounds * pages {
            match mm::anon(task, vpn, false) {
                Ok(mut pg) => {
                    let words = pg.words();
                    let wrong = words.iter().enumerate();
                    bad += wrong.filter(|&(i, &w)| w != fill_word(cpu, vpn, i)).count() as u64;
                }
                Err(e) => {
                    println!("alloc: cpu {cpu}: reading back page {vpn}: {e:?}");
                    return;
                }
            }
        }
        mm::task_exit(task);
        let us = us_since(t0);
        let mut longest = CHECK_US.lock();
        *longest = (*longest).max(us);
    }
    *MISMATCHES.lock() += bad;
    OK.lock()[cpu as usize] = true;
}
