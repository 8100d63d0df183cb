//! `workload=memhog` (Tesseract §6 set-up): allocate `mb` MiB, then hold it for
//! `secs` seconds, writing one word per page in a sequential sweep at
//! `rate_mb_s` MiB/s (0 = as fast as possible). Prints progress every second.
//!
//! With `zero_mb=Z` it first zeroes Z MiB and frees them, as an OS that zeroes
//! its free memory at boot does (ESX §6.3): a task touches Z MiB (every first
//! touch zeroes a page) and exits, leaving the frames free in the guest and
//! all-zero in the host (`RESULT workload=memhog phase=zero ms=.. mb=Z`).
//!
//! Keys: `mb=64 secs=5 rate_mb_s=0 zero_mb=0`.

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;

use super::common::{self, io_fail, ms_since, us_since};

const NAME: &str = "memhog";
const KEYS: &[&str] = &["mb", "secs", "rate_mb_s", "zero_mb"];

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok((
            common::mb_arg(cfg, "mb", 64)?,
            cfg.num("secs", 5, 1, 86400)?,
            cfg.num("rate_mb_s", 0, 0, 1 << 20)?,
            cfg.num("zero_mb", 0, 0, memvisor_guest_mm::TASK_PAGES / 256)? * 256,
        ))
    })();
    let (pages, secs, rate, zero_pages) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    if zero_pages > 0 {
        let t0 = rdtsc();
        let zeroer = match mm::task_create() {
            Ok(t) => t,
            Err(e) => return io_fail(NAME, e),
        };
        for p in 0..zero_pages {
            if let Err(e) = mm::anon(zeroer, p, true) {
                return io_fail(NAME, e);
            }
        }
        mm::task_exit(zeroer);
        println!(
            "RESULT workload=memhog phase=zero ms={} mb={}",
            ms_since(t0),
            zero_pages / 256
        );
    }
    let task = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    let t0 = rdtsc();
    for p in 0..pages {
        match mm::anon(task, p, true) {
            Ok(mut pg) => pg.words()[0] = p,
            Err(e) => return io_fail(NAME, e),
        }
    }
    println!(
        "RESULT workload=memhog phase=alloc ms={} mb={}",
        ms_since(t0),
        pages / 256
    );
    let t1 = rdtsc();
    let mut touched = 0u64;
    let mut errors = 0u64;
    let mut sweeps = 0u64;
    let mut next_report = 1;
    let mut p = 0;
    loop {
        let us = us_since(t1);
        if us >= secs * 1_000_000 {
            break;
        }
        if us >= next_report * 1_000_000 {
            let c = mm::stats().events;
            println!(
                "memhog: t={next_report}s touched_mb={} pswpin={} pswpout={}",
                touched / 256,
                c.pswpin,
                c.pswpout
            );
            next_report += 1;
        }
        // Rate limit: pages allowed so far = rate MiB/s * elapsed.
        if rate > 0 && touched >= rate * 256 * us / 1_000_000 {
            core::hint::spin_loop();
            mm::tick();
            continue;
        }
        match mm::anon(task, p, true) {
            Ok(mut pg) => {
                let w = pg.words();
                if w[0] != p + sweeps * pages {
                    errors += 1;
                }
                w[0] = p + (sweeps + 1) * pages;
            }
            Err(e) => return io_fail(NAME, e),
        }
        touched += 1;
        p += 1;
        if p == pages {
            p = 0;
            sweeps += 1;
        }
    }
    mm::task_exit(task);
    let ok = errors == 0;
    println!(
        "RESULT workload=memhog phase=done ok={} mb={} secs={secs} touches={touched} sweeps={sweeps} \
         touch_mb_s={} errors={errors} {}",
        u8::from(ok),
        pages / 256,
        touched / 256 / secs,
        mm::stats_words()
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
