//! `workload=kv` (MemFlex §4.1): an in-memory key-value store in a task's
//! anonymous memory driven by a YCSB-like generator.
//!
//! Records are 1 KiB (four per page): key, version, then 126 value words that
//! are a function of (key, version), so every read is verified. The table is
//! open-addressed with linear probing over `2 * (records + inserts)` slots.
//! Load phase: insert `records` keys. Run phase: `ops` operations of workload
//! `mix` (YCSB: a = 50 % read / 50 % update, b = 95/5, c = 100 % read,
//! d = 95 % read latest / 5 % insert, e = 95 % scan of 1..100 records / 5 %
//! insert, f = 50 % read / 50 % read-modify-write; and the single-operation
//! workloads MemFlex §4.1 runs: `insert`, `update`, `scan`, all of one type)
//! with zipfian keys (`theta`/100, default 0.99, scrambled as YCSB does), or
//! for `secs` seconds if given. Ops per second are printed every second
//! (`kv: t=Ns ops_s=N`, one line per second of the run phase, 0 for a second in
//! which nothing finished).
//!
//! Inserts add new keys after the loaded ones, at most `inserts` of them
//! (default `ops`; the table is sized for them). A run that has made them all
//! and draws another insert ends there (`kv: inserts_exhausted t_ms=..`). At
//! the end every inserted key is read back and checked. `target_ops_s=N` paces
//! the operations at N a second at most, as YCSB's `-target` does (a client
//! that asks no faster); an insert run needs it for its table to stay bounded
//! over a run of `secs` seconds. 0 (the default) does not pace.
//!
//! Latency (MemFlex Fig. 6): every operation of the run phase is timed with the
//! TSC and counted in a fixed-size log-linear histogram of its type (read,
//! update, insert, scan, rmw; `memvisor_guest_mm::hist`, within 1/8 of the true
//! value, no allocation). The per-second line adds, for each type the mix uses,
//! that second's `TYPE_p50_us= TYPE_p99_us= TYPE_max_us=`; at the end one line
//! per type: `RESULT workload=kv phase=latency op=TYPE n=N p50_us= p95_us=
//! p99_us= p999_us= max_us=` (µs with one decimal). An operation is timed from
//! its start to its end, including the page faults it takes; the hog's writes
//! between two operations are not part of either.
//!
//! A memory hog beside the store (MemFlex §4.1: a memory-intensive program
//! starts in the VM that runs Redis): with `hog_mb=N`, `hog_at` seconds into
//! the run phase a second task allocates N MiB (the store waits meanwhile, as
//! it would for a CPU the allocation holds), then writes one word per page in
//! sequential sweeps at `hog_rate_mb_s` MiB/s, interleaved with the store's
//! operations (at most 1 MiB between two operations, never more than one
//! second's worth behind). Lines `kv: hog_start t_ms=.. mb=.. rate_mb_s=..` and
//! `kv: hog_allocated t_ms=.. ms=..` mark its start on the run phase's clock.
//!
//! Keys: `records=50000 ops=200000 mix=a theta=99 secs=0 hog_mb=0 hog_at=10
//! hog_rate_mb_s=64 inserts=<ops> target_ops_s=0`.

use core::fmt;

use memvisor_guest_mm::format::splitmix64;
use memvisor_guest_mm::hist::Histogram;

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;

use super::common::{self, Rng, Us, cycles_to_ns, io_fail, ms_since, us_since};

const NAME: &str = "kv";
const KEYS: &[&str] = &[
    "records",
    "ops",
    "mix",
    "theta",
    "secs",
    "hog_mb",
    "hog_at",
    "hog_rate_mb_s",
    "inserts",
    "target_ops_s",
];
const RECORD_WORDS: usize = 128;
const PER_PAGE: u64 = 4;

/// Operation types, in the order of [`OP_NAMES`].
const OPS: usize = 5;
const READ: usize = 0;
const UPDATE: usize = 1;
const INSERT: usize = 2;
const SCAN: usize = 3;
const RMW: usize = 4;
const OP_NAMES: [&str; OPS] = ["read", "update", "insert", "scan", "rmw"];

/// Per-type latency histograms (nanoseconds) of the types a mix uses.
struct Latency {
    used: [bool; OPS],
    hist: [Histogram; OPS],
}

impl Latency {
    fn new(used: [bool; OPS]) -> Self {
        Latency {
            used,
            hist: [const { Histogram::new() }; OPS],
        }
    }

    fn merge_into(&self, total: &mut Latency) {
        for (t, h) in total.hist.iter_mut().zip(&self.hist) {
            t.merge(h);
        }
    }
}

/// ` read_p50_us=.. read_p99_us=.. read_max_us=..` for each type the mix uses (the
/// per-second line).
impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, h) in self.hist.iter().enumerate().filter(|(i, _)| self.used[*i]) {
            let n = OP_NAMES[i];
            write!(
                f,
                " {n}_p50_us={} {n}_p99_us={} {n}_max_us={}",
                Us(h.quantile(500)),
                Us(h.quantile(990)),
                Us(h.max())
            )?;
        }
        Ok(())
    }
}

/// YCSB's zipfian generator (Gray et al.), over `0..n`.
struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

fn powf(x: f64, y: f64) -> f64 {
    // exp(y * ln x) with the few terms we need (no libm in the guest).
    exp(y * ln(x))
}

fn ln(x: f64) -> f64 {
    // ln x = 2 atanh((x-1)/(x+1)), after scaling x into [0.5, 1) by powers of two.
    let mut e = 0i32;
    let mut m = x;
    while m >= 1.0 {
        m /= 2.0;
        e += 1;
    }
    while m < 0.5 {
        m *= 2.0;
        e -= 1;
    }
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let mut term = t;
    let mut sum = 0.0;
    let mut k = 1.0;
    for _ in 0..40 {
        sum += term / k;
        term *= t2;
        k += 2.0;
    }
    2.0 * sum + f64::from(e) * core::f64::consts::LN_2
}

fn exp(x: f64) -> f64 {
    // e^x = 2^k * e^r with |r| <= ln2/2.
    let k = (x / core::f64::consts::LN_2) as i64;
    let r = x - k as f64 * core::f64::consts::LN_2;
    let mut term = 1.0;
    let mut sum = 1.0;
    for i in 1..30 {
        term *= r / f64::from(i);
        sum += term;
    }
    let mut scale = 1.0;
    let (mut k, base) = if k >= 0 { (k, 2.0) } else { (-k, 0.5) };
    while k > 0 {
        scale *= base;
        k -= 1;
    }
    sum * scale
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Self {
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / powf(i as f64, theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - powf(2.0 / n as f64, 1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    fn next(&self, rng: &mut Rng) -> u64 {
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + powf(0.5, self.theta) {
            return 1;
        }
        let v = self.n as f64 * powf(self.eta * u - self.eta + 1.0, self.alpha);
        (v as u64).min(self.n - 1)
    }
}

fn value(key: u64, version: u64, i: usize) -> u64 {
    splitmix64(key.wrapping_mul(0x100_0000_01b3) ^ version << 32 ^ i as u64)
}

struct Store {
    task: u32,
    slots: u64,
    errors: u64,
}

impl Store {
    /// Runs `f` on the record in slot `s` (128 words).
    fn with<R>(
        &self,
        s: u64,
        write: bool,
        f: impl FnOnce(&mut [u64]) -> R,
    ) -> Result<R, memvisor_guest_mm::MmError> {
        let mut pg = mm::anon(self.task, s / PER_PAGE, write)?;
        let off = (s % PER_PAGE) as usize * RECORD_WORDS;
        Ok(f(&mut pg.words()[off..off + RECORD_WORDS]))
    }

    fn home(&self, key: u64) -> u64 {
        splitmix64(key) % self.slots
    }

    /// Slot of `key`, or the empty slot where it would go.
    fn find(&self, key: u64) -> Result<(u64, bool), memvisor_guest_mm::MmError> {
        let mut s = self.home(key);
        loop {
            let k = self.with(s, false, |r| r[0])?;
            if k == key + 1 {
                return Ok((s, true));
            }
            if k == 0 {
                return Ok((s, false));
            }
            s = (s + 1) % self.slots;
        }
    }

    fn put(&mut self, key: u64) -> Result<(), memvisor_guest_mm::MmError> {
        let (s, found) = self.find(key)?;
        self.with(s, true, |r| {
            let version = if found { r[1] + 1 } else { 1 };
            r[0] = key + 1;
            r[1] = version;
            for (i, w) in r[2..].iter_mut().enumerate() {
                *w = value(key, version, i);
            }
        })
    }

    fn get(&mut self, key: u64) -> Result<bool, memvisor_guest_mm::MmError> {
        let (s, found) = self.find(key)?;
        if !found {
            return Ok(false);
        }
        let bad = self.with(s, false, |r| {
            r[2..]
                .iter()
                .enumerate()
                .any(|(i, &w)| w != value(key, r[1], i))
        })?;
        if bad {
            self.errors += 1;
        }
        Ok(true)
    }
}

/// Pages the hog writes at most between two of the store's operations (1 MiB).
const HOG_BURST: u64 = 256;

/// The memory hog: `pages` pages of its own task, swept one word per page at `rate` MiB/s.
struct Hog {
    task: u32,
    pages: u64,
    rate: u64,
    /// When the sweeps began (TSC).
    t0: u64,
    touched: u64,
    /// Pages the rate allowance skipped because the hog fell more than a second behind.
    skipped: u64,
    next: u64,
    sweeps: u64,
    errors: u64,
}

impl Hog {
    /// Allocates the hog's pages (each written with its number, as `memhog` does).
    fn start(pages: u64, rate: u64) -> Result<Hog, memvisor_guest_mm::MmError> {
        let task = mm::task_create()?;
        for p in 0..pages {
            mm::anon(task, p, true)?.words()[0] = p;
        }
        Ok(Hog {
            task,
            pages,
            rate,
            t0: rdtsc(),
            touched: 0,
            skipped: 0,
            next: 0,
            sweeps: 0,
            errors: 0,
        })
    }

    /// Writes the pages the rate allows by now, up to [`HOG_BURST`]. A page holds its number
    /// plus `pages` times the sweeps that wrote it, so every write also checks the last one.
    fn step(&mut self) -> Result<(), memvisor_guest_mm::MmError> {
        let allowed = self.rate * 256 * us_since(self.t0) / 1_000_000;
        // A bounded rate: pages the hog could not write while the store waited on a fault
        // are not made up for later beyond one second's worth.
        let floor = allowed.saturating_sub(self.rate * 256);
        let done = self.touched + self.skipped;
        if done < floor {
            self.skipped += floor - done;
        }
        let mut n = 0;
        while self.touched + self.skipped < allowed && n < HOG_BURST {
            let p = self.next;
            let mut pg = mm::anon(self.task, p, true)?;
            let w = pg.words();
            if w[0] != p + self.sweeps * self.pages {
                self.errors += 1;
            }
            w[0] = p + (self.sweeps + 1) * self.pages;
            drop(pg);
            self.touched += 1;
            n += 1;
            self.next += 1;
            if self.next == self.pages {
                self.next = 0;
                self.sweeps += 1;
            }
        }
        Ok(())
    }
}

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok((
            cfg.num("records", 50_000, 1, 1 << 30)?,
            cfg.num("ops", 200_000, 1, 1 << 40)?,
            cfg.num("theta", 99, 1, 99)?,
            cfg.num("secs", 0, 0, 86400)?,
            cfg.num("hog_mb", 0, 0, memvisor_guest_mm::TASK_PAGES / 256)?,
            cfg.num("hog_at", 10, 0, 86400)?,
            cfg.num("hog_rate_mb_s", 64, 1, 1 << 20)?,
            cfg.num("target_ops_s", 0, 0, 1 << 40)?,
        ))
    })();
    let (records, ops, theta, secs, hog_mb, hog_at, hog_rate, target) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let mix = cfg.arg("mix").unwrap_or("a");
    // Percentages of (read, update, insert, scan, read-modify-write); "read latest" for d.
    let (read, update, insert, scan, rmw) = match mix {
        "a" => (50, 50, 0, 0, 0),
        "b" => (95, 5, 0, 0, 0),
        "c" => (100, 0, 0, 0, 0),
        "d" => (95, 0, 5, 0, 0),
        "e" => (0, 0, 5, 95, 0),
        "f" => (50, 0, 0, 0, 50),
        "insert" => (0, 0, 100, 0, 0),
        "update" => (0, 100, 0, 0, 0),
        "scan" => (0, 0, 0, 100, 0),
        _ => {
            return common::fail(
                NAME,
                format_args!(
                    "bad argument mix={mix}: expected a, b, c, d, e, f, insert, update or scan"
                ),
            );
        }
    };
    let max_inserts = match cfg.num("inserts", ops, 1, 1 << 30) {
        Ok(n) if insert > 0 => n,
        Ok(_) => 0,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let task = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    let mut store = Store {
        task,
        slots: 2 * (records + max_inserts),
        errors: 0,
    };
    let t0 = rdtsc();
    for k in 0..records {
        if let Err(e) = store.put(k) {
            return io_fail(NAME, e);
        }
    }
    let load_us = us_since(t0).max(1);
    println!(
        "RESULT workload=kv phase=load records={records} ms={} ops_s={} table_mb={}",
        ms_since(t0),
        records * 1_000_000 / load_us,
        store.slots / PER_PAGE / 256
    );
    let used = [read > 0, update > 0, insert > 0, scan > 0, rmw > 0];
    let khz = crate::time::khz();
    let mut lat_total = Latency::new(used);
    let mut lat_sec = Latency::new(used);
    let zipf = Zipf::new(records, theta as f64 / 100.0);
    let mut rng = Rng(cfg.seed | 1);
    let mut count = records;
    let t1 = rdtsc();
    let (mut done, mut last_done, mut next_sec) = (0u64, 0u64, 1u64);
    let mut hog: Option<Hog> = None;
    let (mut n_read, mut n_update, mut n_insert, mut n_scan, mut n_rmw, mut missing) =
        (0, 0, 0, 0, 0, 0u64);
    loop {
        if secs > 0 {
            if us_since(t1) >= secs * 1_000_000 {
                break;
            }
        } else if done >= ops {
            break;
        }
        let el = us_since(t1);
        // Every second gets its line, also those a long wait (a fault, the hog's allocation)
        // went by without an operation.
        while el >= next_sec * 1_000_000 {
            println!("kv: t={next_sec}s ops_s={}{lat_sec}", done - last_done);
            lat_sec.merge_into(&mut lat_total);
            lat_sec = Latency::new(used);
            last_done = done;
            next_sec += 1;
        }
        if hog_mb > 0 && hog.is_none() && el >= hog_at * 1_000_000 {
            println!(
                "kv: hog_start t_ms={} mb={hog_mb} rate_mb_s={hog_rate}",
                el / 1000
            );
            match Hog::start(hog_mb * 256, hog_rate) {
                Ok(h) => hog = Some(h),
                Err(e) => return io_fail(NAME, e),
            }
            let now = us_since(t1);
            println!(
                "kv: hog_allocated t_ms={} ms={}",
                now / 1000,
                (now - el) / 1000
            );
            continue;
        }
        if let Some(h) = hog.as_mut()
            && let Err(e) = h.step()
        {
            return io_fail(NAME, e);
        }
        // Paced: no operation before its turn (the hog's writes go on meanwhile).
        if target > 0 && done * 1_000_000 > el * target {
            core::hint::spin_loop();
            continue;
        }
        let op_t0 = rdtsc();
        let r = rng.below(100);
        // Scrambled zipfian: popular ranks are spread over the key space.
        let pick = |rng: &mut Rng, n: u64| splitmix64(zipf.next(rng)) % n;
        let op;
        let res = if r < read {
            op = READ;
            n_read += 1;
            let key = if mix == "d" {
                count - 1 - zipf.next(&mut rng) % count
            } else {
                pick(&mut rng, records)
            };
            store.get(key).map(|f| missing += u64::from(!f))
        } else if r < read + update {
            op = UPDATE;
            n_update += 1;
            store.put(pick(&mut rng, records))
        } else if r < read + update + insert {
            if count == records + max_inserts {
                println!("kv: inserts_exhausted t_ms={}", el / 1000);
                break;
            }
            op = INSERT;
            n_insert += 1;
            count += 1;
            store.put(count - 1)
        } else if r < read + update + insert + scan {
            op = SCAN;
            n_scan += 1;
            let start = pick(&mut rng, count);
            let len = 1 + rng.below(100);
            (start..(start + len).min(count)).try_for_each(|k| store.get(k).map(|_| ()))
        } else {
            op = RMW;
            n_rmw += 1;
            let key = pick(&mut rng, records);
            store.get(key).and_then(|_| store.put(key))
        };
        if let Err(e) = res {
            return io_fail(NAME, e);
        }
        lat_sec.hist[op].record(cycles_to_ns(rdtsc().wrapping_sub(op_t0), khz));
        done += 1;
    }
    lat_sec.merge_into(&mut lat_total);
    let us = us_since(t1).max(1);
    // Every inserted key back, checked (the loaded ones are checked by the reads that find them).
    for k in records..count {
        match store.get(k) {
            Ok(found) => missing += u64::from(!found),
            Err(e) => return io_fail(NAME, e),
        }
    }
    mm::task_exit(task);
    let (hog_touches, hog_sweeps, hog_skipped, hog_errors) = match &hog {
        Some(h) => {
            mm::task_exit(h.task);
            (h.touched, h.sweeps, h.skipped, h.errors)
        }
        None => (0, 0, 0, 0),
    };
    let stats = mm::stats_words();
    let ok = store.errors == 0 && missing == 0 && hog_errors == 0;
    println!(
        "RESULT workload=kv phase=run ok={} mix={mix} ops={done} ms={} ops_s={} reads={n_read} updates={n_update} \
         inserts={n_insert} scans={n_scan} rmw={n_rmw} errors={} missing={missing} hog_mb={} hog_touches={hog_touches} \
         hog_sweeps={hog_sweeps} hog_skipped={hog_skipped} hog_errors={hog_errors} {}",
        u8::from(ok),
        ms_since(t1),
        done * 1_000_000 / us,
        store.errors,
        if hog.is_some() { hog_mb } else { 0 },
        stats
    );
    for (i, h) in lat_total.hist.iter().enumerate() {
        if used[i] {
            println!(
                "RESULT workload=kv phase=latency op={} n={} p50_us={} p95_us={} p99_us={} p999_us={} max_us={}",
                OP_NAMES[i],
                h.count(),
                Us(h.quantile(500)),
                Us(h.quantile(950)),
                Us(h.quantile(990)),
                Us(h.quantile(999)),
                Us(h.max())
            );
        }
    }
    println!(
        "RESULT workload=kv phase=done ok={} mismatches={}",
        u8::from(ok),
        store.errors + missing + hog_errors
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
