//! `workload=toucher` (ESX Fig. 6): touches a working set whose size follows a
//! schedule, `MB:SECS` steps separated by commas; during a step the first MB
//! MiB of the task's memory are swept repeatedly (one word written per page)
//! and the rest lies idle, so reclaim (or the hypervisor) can take it.
//!
//! Keys: `schedule=64:2,16:2,64:2`.

use crate::cmdline::{Config, parse_u64};
use crate::cpu::{ExitCode, rdtsc};
use crate::mm::{self, StatsWords};

use super::common::{self, io_fail, ms_since, us_since};

const NAME: &str = "toucher";
const KEYS: &[&str] = &["schedule"];
const MAX_STEPS: usize = 32;

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let spec = cfg.arg("schedule").unwrap_or("64:2,16:2,64:2");
    let mut steps = [(0u64, 0u64); MAX_STEPS];
    let mut n = 0;
    for item in spec.split(',') {
        let parsed = item
            .split_once(':')
            .and_then(|(m, s)| Some((parse_u64(m)?, parse_u64(s)?)))
            .filter(|&(m, s)| m > 0 && m <= 1 << 20 && s > 0 && s <= 86400);
        match parsed {
            Some(step) if n < MAX_STEPS => {
                steps[n] = step;
                n += 1;
            }
            _ => {
                return common::fail(
                    NAME,
                    format_args!(
                        "bad argument schedule={spec}: expected up to {MAX_STEPS} MB:SECS steps, e.g. 64:2,16:2"
                    ),
                );
            }
        }
    }
    let task = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    let t_all = rdtsc();
    let mut errors = 0u64;
    let mut stamp = 1u64;
    for (i, &(mb, secs)) in steps[..n].iter().enumerate() {
        let pages = mb * 256;
        let before = mm::stats().counters;
        let t0 = rdtsc();
        let mut touched = 0u64;
        'step: loop {
            for p in 0..pages {
                if p % 64 == 0 && us_since(t0) >= secs * 1_000_000 {
                    break 'step;
                }
                match mm::anon(task, p, true) {
                    Ok(mut pg) => {
                        let w = pg.words();
                        // Word 1 holds the page number once the page was touched.
                        if w[1] != 0 && w[1] != p + 1 {
                            errors += 1;
                        }
                        w[1] = p + 1;
                        w[0] = stamp;
                    }
                    Err(e) => return io_fail(NAME, e),
                }
                touched += 1;
            }
            stamp += 1;
        }
        let after = mm::stats();
        println!(
            "RESULT workload=toucher phase=step{} ws_mb={mb} secs={secs} ms={} touches={touched} \
             pgfault={} pgmajfault={} anon_kb={} free_kb={}",
            i + 1,
            ms_since(t0),
            after.counters.pgfault - before.pgfault,
            after.counters.pgmajfault - before.pgmajfault,
            after.anon * 4,
            after.free * 4
        );
    }
    mm::task_exit(task);
    let ok = errors == 0;
    println!(
        "RESULT workload=toucher phase=done ok={} steps={n} errors={errors} ms={} {}",
        u8::from(ok),
        ms_since(t_all),
        StatsWords(mm::stats())
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
