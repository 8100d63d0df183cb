//! `workload=crashwrite` (Tesseract §4.4.1, crash consistency): writes generations of
//! sequence-numbered pages to file `crash` on the data disk while `anon_mb` MiB of anonymous
//! memory churns through the guest's own swap disk, and says which writes the disk
//! acknowledged, so the host can kill the VMM at any moment and a fresh boot can check that
//! every acknowledged write survived.
//!
//! - Page `i` of generation `g >= 1` holds word 0 = `TAG | g << 24 | i` and words 1.. from
//!   `splitmix64(seed, g, i, w)`; generation 0 is the file's content as `memvisor mkdisk`
//!   (or the first run) made it.
//! - Every `batch` pages: `sync` (the guest's writeback, which waits for the disk's answers),
//!   then `ACK gen=G page=I`: every page up to `I` of generation `G`, and every earlier
//!   generation, is on the disk. Between batches, `anon_mb` MiB of anonymous pages are written
//!   a word each in a sweep, so the guest also swaps.
//! - Runs `secs` seconds (0: until the VM is killed).
//! - `check=1 gen=G page=I` (the last ACK the host saw; `gen=0`: none) instead reads every
//!   page: each must be whole (every word of one generation) and of generation `G` or `G + 1`
//!   up to page `I`, `G - 1` or `G` after it.
//!
//! Keys: `mb=16 anon_mb=32 batch=256 secs=0 check=0 gen=0 page=0 seed=1`.

use memvisor_guest_mm::Access;
use memvisor_guest_mm::format::{file_word, splitmix64};

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;

use super::common::{self, io_fail, ms_since, us_since};

const NAME: &str = "crashwrite";
const KEYS: &[&str] = &["mb", "anon_mb", "batch", "secs", "check", "gen", "page"];
const FILE: &str = "crash";
const TAG: u64 = 0xc7a5 << 48;
const PAGE_WORDS: usize = 512;

fn word(seed: u64, g: u64, i: u64, w: usize) -> u64 {
    if w == 0 {
        TAG | g << 24 | i
    } else {
        splitmix64(seed ^ g << 40 ^ i << 12 ^ w as u64)
    }
}

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok((
            common::mb_arg(cfg, "mb", 16)?,
            cfg.num("anon_mb", 32, 0, 2048)? * 256,
            cfg.num("batch", 256, 1, 1 << 20)?,
            cfg.num("secs", 0, 0, 86_400)?,
            cfg.num("check", 0, 0, 1)? == 1,
            cfg.num("gen", 0, 0, (1 << 24) - 2)?,
            cfg.num("page", 0, 0, (1 << 24) - 1)?,
        ))
    })();
    let (pages, anon, batch, secs, check, acked_gen, acked_page) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let file = match common::data_file(NAME, FILE, pages * 4096) {
        Ok(f) => f,
        Err(code) => return code,
    };
    if check {
        verify(cfg.seed, file, pages, acked_gen, acked_page)
    } else {
        write(cfg.seed, file, pages, anon, batch, secs)
    }
}

fn write(seed: u64, file: u32, pages: u64, anon: u64, batch: u64, secs: u64) -> ExitCode {
    let task = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    let t0 = rdtsc();
    let (mut g, mut i, mut written, mut a) = (1u64, 0u64, 0u64, 0u64);
    loop {
        if secs > 0 && us_since(t0) >= secs * 1_000_000 {
            break;
        }
        for _ in 0..batch {
            match mm::file_page(file, i, Access::Overwrite) {
                Ok(mut p) => {
                    for (w, x) in p.words().iter_mut().enumerate() {
                        *x = word(seed, g, i, w);
                    }
                }
                Err(e) => return io_fail(NAME, e),
            }
            written += 1;
            i += 1;
            if i == pages {
                break;
            }
        }
        // The guest's other memory moves meanwhile: a word in each of `batch` anonymous pages.
        for _ in 0..batch.min(anon) {
            match mm::anon(task, a, true) {
                Ok(mut p) => p.words()[0] = written,
                Err(e) => return io_fail(NAME, e),
            }
            a = if a + 1 >= anon { 0 } else { a + 1 };
        }
        if let Err(e) = mm::sync() {
            return io_fail(NAME, e);
        }
        println!("ACK gen={g} page={}", i - 1);
        if i == pages {
            i = 0;
            g += 1;
        }
    }
    mm::task_exit(task);
    println!(
        "RESULT workload=crashwrite phase=done ok=1 ms={} pages_written={written} gen={g} {}",
        ms_since(t0),
        mm::stats_words()
    );
    ExitCode::Success
}

fn verify(seed: u64, file: u32, pages: u64, acked_gen: u64, acked_page: u64) -> ExitCode {
    let fs_seed = mm::fs_seed();
    let t0 = rdtsc();
    let (mut torn, mut lost, mut reported) = (0u64, 0u64, 0u64);
    for i in 0..pages {
        let got = match mm::file_page(file, i, Access::Read) {
            Ok(mut p) => {
                let words = p.words();
                let w0 = words[0];
                let g = if w0 & (0xffff << 48) == TAG && w0 & 0xff_ffff == i {
                    (w0 >> 24) & 0xff_ffff
                } else {
                    0
                };
                let whole = (0..PAGE_WORDS).all(|w| {
                    words[w]
                        == if g == 0 {
                            file_word(fs_seed, file, i * 4096 + 8 * w as u64)
                        } else {
                            word(seed, g, i, w)
                        }
                });
                whole.then_some(g)
            }
            Err(e) => return io_fail(NAME, e),
        };
        let (lo, hi) = if acked_gen == 0 {
            (0, 1)
        } else if i <= acked_page {
            (acked_gen, acked_gen + 1)
        } else {
            (acked_gen - 1, acked_gen)
        };
        let bad = match got {
            None => {
                torn += 1;
                true
            }
            Some(g) if g < lo || g > hi => {
                lost += 1;
                true
            }
            Some(_) => false,
        };
        if bad && reported < 5 {
            reported += 1;
            println!(
                "crashwrite: page {i}: generation {got:?} (None: torn), expected {lo} to {hi}"
            );
        }
    }
    let ok = torn == 0 && lost == 0;
    println!(
        "RESULT workload=crashwrite phase=check ok={} ms={} pages={pages} gen={acked_gen} page={acked_page} torn={torn} lost={lost}",
        u8::from(ok),
        ms_since(t0),
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
