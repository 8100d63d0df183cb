//! `workload=gcchurn` (SPECjbb-like, Tesseract §6): a generational collector's
//! memory pattern. Each generation is a fresh task that allocates and fills
//! `gen_mb` MiB (the young space); a collection copies `live_pct` % of its
//! pages into the old space (a long-lived task of `heap_mb - gen_mb` MiB, used
//! as a ring) and drops the young task; the copy + drop is the pause. Copies
//! are verified when they are overwritten in the ring.
//!
//! With `hog_mb=N` (Tesseract §6.1, inducing double paging): first a hog task allocates and
//! fills N MiB and then leaves it alone, while the old space is swept for `hog_secs` seconds so
//! it is hot and the hog cold: a hypervisor short of memory swaps the hog out. The collector's
//! generations then push the guest to swap its coldest pages, the hog's, to its own swap disk.
//! The hog is verified at the end. Phases: `hog` (fill and sweep), `run` (the generations),
//! `pause_max` and `pause_total` (the collections' pauses, as `ms=`), then `done`.
//!
//! Keys: `heap_mb=64 gen_mb=8 gens=20 live_pct=10 hog_mb=0 hog_secs=5`.

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;

use super::common::{self, Rng, io_fail, ms_since, us_since};

const NAME: &str = "gcchurn";
const KEYS: &[&str] = &[
    "heap_mb", "gen_mb", "gens", "live_pct", "hog_mb", "hog_secs",
];

fn hog_word(page: u64, i: usize) -> u64 {
    memvisor_guest_mm::format::splitmix64(0x4805 << 48 ^ page << 10 ^ i as u64)
}

fn obj(gen_no: u64, page: u64, i: usize) -> u64 {
    memvisor_guest_mm::format::splitmix64(gen_no << 40 ^ page << 10 ^ i as u64)
}

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok((
            common::mb_arg(cfg, "heap_mb", 64)?,
            common::mb_arg(cfg, "gen_mb", 8)?,
            cfg.num("gens", 20, 1, 1 << 20)?,
            cfg.num("live_pct", 10, 0, 100)?,
            cfg.num("hog_mb", 0, 0, memvisor_guest_mm::TASK_PAGES / 256)? * 256,
            cfg.num("hog_secs", 5, 0, 3600)?,
        ))
    })();
    let (heap, young, gens, live_pct, hog_pages, hog_secs) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    if young >= heap {
        return common::fail(NAME, "bad arguments: gen_mb must be smaller than heap_mb");
    }
    let old_pages = heap - young;
    let old = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    let mut rng = Rng(cfg.seed | 1);
    let mut ring = 0u64; // next old-space page
    let mut errors = 0u64;
    let (mut pause_max, mut pause_sum, mut alloc_us) = (0u64, 0u64, 0u64);
    let t_all = rdtsc();
    let hog = if hog_pages > 0 {
        match hog_fill(hog_pages, old, old_pages, hog_secs) {
            Ok(t) => Some(t),
            Err(e) => return io_fail(NAME, e),
        }
    } else {
        None
    };
    let t_run = rdtsc();
    for g in 1..=gens {
        let task = match mm::task_create() {
            Ok(t) => t,
            Err(e) => return io_fail(NAME, e),
        };
        let t0 = rdtsc();
        for p in 0..young {
            match mm::anon(task, p, true) {
                Ok(mut pg) => {
                    for (i, w) in pg.words().iter_mut().enumerate().step_by(8) {
                        *w = obj(g, p, i);
                    }
                }
                Err(e) => return io_fail(NAME, e),
            }
        }
        alloc_us += us_since(t0);
        // Collection: copy the survivors, drop the young space.
        let t1 = rdtsc();
        let mut buf = [0u64; 512];
        for p in 0..young {
            if rng.below(100) >= live_pct {
                continue;
            }
            match mm::anon(task, p, false) {
                Ok(mut pg) => buf.copy_from_slice(pg.words()),
                Err(e) => return io_fail(NAME, e),
            }
            let slot = ring % old_pages;
            match mm::anon(old, slot, true) {
                Ok(mut pg) => {
                    let w = pg.words();
                    // The page being overwritten holds an earlier survivor: check it.
                    let (pg_no, gen_no) = (w[1], w[2]);
                    if gen_no != 0 && w[8] != obj(gen_no, pg_no, 8) {
                        errors += 1;
                    }
                    w.copy_from_slice(&buf);
                    w[1] = p;
                    w[2] = g;
                }
                Err(e) => return io_fail(NAME, e),
            }
            ring += 1;
        }
        mm::task_exit(task);
        let pause = us_since(t1);
        pause_max = pause_max.max(pause);
        pause_sum += pause;
        if g % 10 == 0 || g == gens {
            println!(
                "gcchurn: {g}/{gens} generations, max pause {} us",
                pause_max
            );
        }
    }
    mm::task_exit(old);
    if let Some(task) = hog {
        println!("RESULT workload=gcchurn phase=run ms={}", ms_since(t_run));
        #[allow(clippy::cast_precision_loss)]
        let ms = |us: u64| us as f64 / 1000.0;
        println!(
            "RESULT workload=gcchurn phase=pause_max ms={:.3}",
            ms(pause_max)
        );
        println!(
            "RESULT workload=gcchurn phase=pause_total ms={:.3}",
            ms(pause_sum)
        );
        for p in 0..hog_pages {
            match mm::anon(task, p, false) {
                Ok(mut pg) => {
                    let w = pg.words();
                    if (0..512).step_by(8).any(|i| w[i] != hog_word(p, i)) {
                        errors += 1;
                    }
                }
                Err(e) => return io_fail(NAME, e),
            }
        }
        mm::task_exit(task);
    }
    let ok = errors == 0;
    println!(
        "RESULT workload=gcchurn phase=done ok={} gens={gens} heap_mb={} gen_mb={} pause_max_us={pause_max} \
         pause_avg_us={} alloc_mb_s={} errors={errors} ms={} {}",
        u8::from(ok),
        heap / 256,
        young / 256,
        pause_sum / gens,
        (young * gens * 4096) / alloc_us.max(1),
        ms_since(t_all),
        mm::stats_words()
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}

/// The hog: `pages` pages filled, then `secs` seconds of sweeps over the old space's pages (so
/// they are hot and the hog cold). Returns the hog's task.
fn hog_fill(
    pages: u64,
    old: u32,
    old_pages: u64,
    secs: u64,
) -> Result<u32, memvisor_guest_mm::MmError> {
    let t0 = rdtsc();
    let task = mm::task_create()?;
    for p in 0..pages {
        let mut pg = mm::anon(task, p, true)?;
        for (i, w) in pg.words().iter_mut().enumerate().step_by(8) {
            *w = hog_word(p, i);
        }
    }
    let t1 = rdtsc();
    let mut sweeps = 0u64;
    while us_since(t1) < secs * 1_000_000 {
        for p in 0..old_pages {
            // Word 0 only: words 1 and 2 say which survivor a page holds (none yet).
            mm::anon(old, p, true)?.words()[0] = sweeps;
        }
        sweeps += 1;
    }
    println!(
        "RESULT workload=gcchurn phase=hog ms={} hog_mb={} sweeps={sweeps}",
        ms_since(t0),
        pages / 256
    );
    Ok(task)
}
