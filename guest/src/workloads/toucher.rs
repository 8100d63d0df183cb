//! `workload=toucher` (ESX Fig. 6): touches a working set whose size follows a
//! schedule, `MB:SECS` steps separated by commas; during a step the first MB
//! MiB of the task's memory are swept repeatedly (one word written per page)
//! and the rest lies idle, so reclaim (or the hypervisor) can take it.
//!
//! When a step's first sweep of its MB is over, a `RESULT ... phase=sweepN ms=` line says how
//! long that sweep took (a harness that brings memory back measures its refaults by it).
//!
//! With `lat=1` every touch is timed with the TSC; the touches slower than
//! `lat_us` µs (default 2: a touch that took that long left the guest, i.e. the
//! hypervisor served a fault, or the host did not run the vCPU) are counted in
//! a fixed-size histogram, and each step's RESULT line and the `done` line add
//! their count, median, 99th percentile and maximum in µs. The histogram sits
//! on the stack, so timing allocates nothing and costs two `rdtsc` per touch.
//!
//! Keys: `schedule=64:2,16:2,64:2 lat=0 lat_us=2`.

use core::fmt;

use memvisor_guest_mm::hist::Histogram;

use crate::cmdline::{Config, parse_u64};
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;
use crate::time;

use super::common::{self, Us, cycles_to_ns, io_fail, ms_since, us_since};

const NAME: &str = "toucher";
const KEYS: &[&str] = &["schedule", "lat", "lat_us"];
const MAX_STEPS: usize = 32;

/// ` slow_over_us=T slow=N slow_p50_us=.. slow_p99_us=.. slow_max_us=..` for a RESULT line
/// (touches over T µs), or nothing when touches are not timed.
struct Slow<'a>(Option<(&'a Histogram, u64)>);

impl fmt::Display for Slow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => Ok(()),
            Some((h, over_us)) => write!(
                f,
                " slow_over_us={over_us} slow={} slow_p50_us={} slow_p99_us={} slow_max_us={}",
                h.count(),
                Us(h.quantile(500)),
                Us(h.quantile(990)),
                Us(h.max())
            ),
        }
    }
}

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
    let (lat, lat_us) = match cfg
        .num("lat", 0, 0, 1)
        .and_then(|l| Ok((l == 1, cfg.num("lat_us", 2, 1, 1_000_000)?)))
    {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let khz = time::khz();
    // The threshold in TSC cycles.
    let slow_cycles = match khz {
        Some(khz) => lat_us * khz / 1000,
        None => lat_us * 1000,
    };
    if lat {
        println!(
            "toucher: timing every touch; touches over {lat_us} us are counted{}",
            if khz.is_none() {
                " (TSC frequency unknown: one cycle taken as 1 ns)"
            } else {
                ""
            }
        );
    }
    let mut all = Histogram::new();
    let mut step_hist = Histogram::new();
    let task = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    let t_all = rdtsc();
    let mut errors = 0u64;
    let mut stamp = 1u64;
    for (i, &(mb, secs)) in steps[..n].iter().enumerate() {
        let pages = mb * 256;
        let before = mm::stats().events;
        let t0 = rdtsc();
        let mut touched = 0u64;
        let mut first_sweep = true;
        'step: loop {
            for p in 0..pages {
                if p % 64 == 0 && us_since(t0) >= secs * 1_000_000 {
                    break 'step;
                }
                let t = if lat { rdtsc() } else { 0 };
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
                if lat {
                    let took = rdtsc().saturating_sub(t);
                    if took > slow_cycles {
                        step_hist.record(cycles_to_ns(took, khz));
                    }
                }
                touched += 1;
            }
            if first_sweep {
                first_sweep = false;
                println!(
                    "RESULT workload=toucher phase=sweep{} ws_mb={mb} ms={}",
                    i + 1,
                    ms_since(t0)
                );
            }
            stamp += 1;
        }
        let after = mm::stats();
        println!(
            "RESULT workload=toucher phase=step{} ws_mb={mb} secs={secs} ms={} touches={touched} \
             pgfault={} pgmajfault={} anon_kb={} free_kb={}{}",
            i + 1,
            ms_since(t0),
            after.events.pgfault - before.pgfault,
            after.events.pgmajfault - before.pgmajfault,
            after.anon * 4,
            after.free * 4,
            Slow(lat.then_some((&step_hist, lat_us)))
        );
        all.merge(&step_hist);
        step_hist = Histogram::new();
    }
    mm::task_exit(task);
    let ok = errors == 0;
    println!(
        "RESULT workload=toucher phase=done ok={} steps={n} errors={errors} ms={}{} {}",
        u8::from(ok),
        ms_since(t_all),
        Slow(lat.then_some((&all, lat_us))),
        mm::stats_words()
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
