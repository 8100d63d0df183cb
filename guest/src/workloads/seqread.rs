//! `workload=seqread` (VSwapper §3.1): a file is read sequentially, whole, `passes`
//! times after the page cache is dropped; each pass is timed. The file is
//! `file=` (default `seq`, e.g. made by mkdisk) or, if absent, created with
//! `file_mb=` MiB (default 64) of mkdisk's deterministic content. Every word read
//! is checked against that content.
//!
//! Keys: `file=seq file_mb=64 passes=3`.

use memvisor_guest_mm::format::file_word;
use memvisor_guest_mm::{Access, PAGE_SIZE};

use crate::cmdline::Config;
use crate::cpu::{ExitCode, rdtsc};
use crate::mm;

use super::common::{self, Progress, io_fail, ms_since, us_since};

const NAME: &str = "seqread";
const KEYS: &[&str] = &["file", "file_mb", "passes"];

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
    let name = cfg.arg("file").unwrap_or("seq");
    let explicit = cfg.arg("file_mb").is_some();
    let id = match mm::lookup(name) {
        Some(id) => id,
        None => match common::data_file(NAME, name, file_pages * PAGE_SIZE as u64) {
            Ok(id) => id,
            Err(code) => return code,
        },
    };
    let pages = if explicit {
        file_pages.min(mm::file_pages(id))
    } else {
        mm::file_pages(id)
    };
    let seed = mm::fs_seed();
    if let Err(e) = mm::drop_caches() {
        return io_fail(NAME, e);
    }
    println!("seqread: file {name}: {} MiB, {passes} passes", pages / 256);
    let mut mismatches = 0u64;
    let t_all = rdtsc();
    for pass in 1..=passes {
        let before = mm::stats().counters;
        let t0 = rdtsc();
        let mut progress = Progress::new(NAME, "pass", pages);
        for p in 0..pages {
            let mut page = match mm::file_page(id, p, Access::Read) {
                Ok(pg) => pg,
                Err(e) => return io_fail(NAME, e),
            };
            let base = p * PAGE_SIZE as u64;
            for (i, &w) in page.words().iter().enumerate() {
                if w != file_word(seed, id, base + 8 * i as u64) {
                    if mismatches < 5 {
                        println!("seqread: MISMATCH page={p} word={i}");
                    }
                    mismatches += 1;
                }
            }
            if pass == 1 {
                progress.update(p + 1);
            }
        }
        let us = us_since(t0).max(1);
        let after = mm::stats().counters;
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
