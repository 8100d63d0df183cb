//! `workload=probe` (ESX §4, and why VMware stopped sharing across VMs by default): what a VM can
//! learn from the time of its own writes. The probe holds two sets of `pages` pages in one task:
//! *common* pages, whose content is the same in every VM that runs the probe (a function of the
//! page number only), and *private* pages, whose content is seeded from this VM's clock and so
//! found nowhere else. Each round it rewrites both sets, waits `wait_secs` (long enough for a
//! host scanner to merge identical pages), then times the first write to every page, common and
//! private in turn. A write to a page the host shares with another VM traps to the host for a
//! copy; a write to a private page does not. So `ratio` (the common writes' mean time over the
//! private ones') well above 1 tells a VM that another VM holds the same content, and near 1 that
//! nothing it holds is shared.
//!
//! One line per round: `RESULT workload=probe phase=roundN ms=.. pages=N common_ns=..
//! private_ns=.. ratio=.. common_slow=.. private_slow=..` (mean ns of a first write; writes
//! slower than 2 µs, the cost of a trip to the host on any hypervisor here, counted). Keys:
//! `pages=1024 wait_secs=20 rounds=2`.

use memvisor_guest_mm::format::splitmix64;

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;
use crate::time::khz;

use super::common::{self, io_fail, ms_since};

const NAME: &str = "probe";
const KEYS: &[&str] = &["pages", "wait_secs", "rounds"];

/// The same in every VM, so identical pages can be found across VMs.
const COMMON_SEED: u64 = 0x5eed_c0de_0000_0001;

/// A first write slower than this went to the host.
const SLOW_NS: u64 = 2_000;

/// Word `i` of common page `p`: never zero, different in every page (so pages merge across VMs,
/// not within one).
fn common_word(p: u64, i: u64) -> u64 {
    splitmix64(COMMON_SEED ^ (p << 9) ^ i) | 1
}

/// Times of first writes to one set of pages, in cycles.
#[derive(Default)]
struct Times {
    cycles: u64,
    slow: u64,
}

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok((
            cfg.num("pages", 1024, 1, 1 << 18)?,
            cfg.num("wait_secs", 20, 0, 3600)?,
            cfg.num("rounds", 2, 1, 100)?,
        ))
    })();
    let (pages, wait_secs, rounds) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let Some(khz) = khz() else {
        return common::fail(
            NAME,
            "the TSC frequency is unknown, so writes cannot be timed",
        );
    };
    let slow_cycles = SLOW_NS * khz / 1_000_000;
    let task = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    // Common pages are task pages 0..pages, private pages pages..2*pages.
    let private_seed = splitmix64(rdtsc());
    for round in 1..=rounds {
        let t0 = rdtsc();
        for p in 0..pages {
            let fill = |vpn: u64, word: &dyn Fn(u64) -> u64| -> Result<(), ExitCode> {
                let mut pg = mm::anon(task, vpn, true).map_err(|e| io_fail(NAME, e))?;
                for (i, w) in pg.words().iter_mut().enumerate() {
                    *w = word(i as u64);
                }
                Ok(())
            };
            if let Err(code) = fill(p, &|i| common_word(p, i)) {
                return code;
            }
            if let Err(code) = fill(pages + p, &|i| {
                splitmix64(private_seed ^ (p << 9) ^ i ^ (round << 40)) | 1
            }) {
                return code;
            }
        }
        println!("probe: round {round} filled, waiting {wait_secs} s");
        common::idle_ms(wait_secs * 1000);
        let (mut common_t, mut private_t) = (Times::default(), Times::default());
        for p in 0..pages {
            for (vpn, t) in [(p, &mut common_t), (pages + p, &mut private_t)] {
                let mut pg = match mm::anon(task, vpn, true) {
                    Ok(pg) => pg,
                    Err(e) => return io_fail(NAME, e),
                };
                let w = pg.words();
                let v = w[1];
                let c0 = rdtsc();
                // SAFETY: `w[0]` is a valid, aligned word of a pinned page of this task; the
                // volatile write keeps it a single store between the two clock reads.
                unsafe { core::ptr::write_volatile(&raw mut w[0], v) };
                let c = rdtsc().saturating_sub(c0);
                t.cycles += c;
                t.slow += u64::from(c > slow_cycles);
            }
        }
        let ns = |t: &Times| t.cycles * 1_000_000 / khz / pages;
        let (cn, pn) = (ns(&common_t), ns(&private_t));
        println!(
            "RESULT workload=probe phase=round{round} ms={} pages={pages} common_ns={cn} private_ns={pn} ratio={}.{:02} common_slow={} private_slow={}",
            ms_since(t0),
            cn / pn.max(1),
            cn * 100 / pn.max(1) % 100,
            common_t.slow,
            private_t.slow
        );
    }
    mm::task_exit(task);
    println!("RESULT workload=probe phase=done ok=1 pages={pages} rounds={rounds}");
    ExitCode::Success
}
