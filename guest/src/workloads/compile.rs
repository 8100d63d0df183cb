//! `workload=compile` (kernbench-like): `jobs` short tasks run one after the
//! other; each reads a "source file" (8 to 32 pages at a job-dependent place of
//! the file `src`, through the page cache), allocates `mem_kb` KiB of task
//! memory and computes over it (hashing the source into it and reading it
//! back), writes an "object" (half the source's size) into the file `obj`
//! (whole-page writes: dirty page cache, written back on pressure and at the
//! end), and exits. At the end the objects are synced, dropped from the cache,
//! read back and verified. `work` is the compiler's own work: each source word is
//! hashed that many times, so a build can be as CPU-bound as a real one.
//!
//! Keys: `jobs=200 src=src src_mb=16 mem_kb=512 work=1`.

use memvisor_guest_mm::format::splitmix64;
use memvisor_guest_mm::{Access, PAGE_SIZE};

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;

use super::common::{self, io_fail, ms_since, us_since};

const NAME: &str = "compile";
const KEYS: &[&str] = &["jobs", "src", "src_mb", "mem_kb", "work"];
/// Object pages per job slot in `obj`.
const OBJ_SLOT: u64 = 16;

fn obj_word(job: u64, hash: u64, page: u64, i: usize) -> u64 {
    splitmix64(hash ^ job << 48 ^ page << 12 ^ i as u64)
}

pub fn run(cfg: &Config) -> ExitCode {
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    let args = (|| {
        Ok((
            cfg.num("jobs", 200, 1, 1 << 20)?,
            common::mb_arg(cfg, "src_mb", 16)?,
            cfg.num("mem_kb", 512, 4, 1 << 22)? / 4,
            cfg.num("work", 1, 1, 1 << 16)?,
        ))
    })();
    let (jobs, src_pages, mem_pages, work) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let src_name = cfg.arg("src").unwrap_or("src");
    let src = match common::data_file(NAME, src_name, src_pages * PAGE_SIZE as u64) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let src_pages = mm::file_pages(src);
    let obj = match mm::lookup("obj") {
        Some(f) if mm::file_pages(f) >= jobs * OBJ_SLOT => f,
        _ => match mm::file_create("obj", jobs * OBJ_SLOT * PAGE_SIZE as u64) {
            Ok(f) => f,
            Err(e) => return io_fail(NAME, e),
        },
    };
    if let Err(e) = mm::drop_caches() {
        return io_fail(NAME, e);
    }
    let t0 = rdtsc();
    let mut hashes = [0u64; 64];
    let mut last_print = 0;
    for job in 0..jobs {
        let r = splitmix64(cfg.seed ^ job);
        let len = 8 + r % 25;
        let start = (r >> 16) % src_pages.saturating_sub(len).max(1);
        let task = match mm::task_create() {
            Ok(t) => t,
            Err(e) => return io_fail(NAME, e),
        };
        // "Parse": hash the source pages.
        let mut hash = job;
        for p in start..(start + len).min(src_pages) {
            match mm::file_page(src, p, Access::Read) {
                Ok(mut pg) => {
                    for &w in pg.words().iter() {
                        hash = splitmix64(hash ^ w);
                        for _ in 1..work {
                            hash = splitmix64(hash);
                        }
                    }
                }
                Err(e) => return io_fail(NAME, e),
            }
        }
        // "Compile": build data structures in fresh memory and walk them.
        for p in 0..mem_pages {
            match mm::anon(task, p, true) {
                Ok(mut pg) => {
                    for (i, w) in pg.words().iter_mut().enumerate().step_by(16) {
                        *w = hash ^ (p << 9 | i as u64);
                    }
                }
                Err(e) => return io_fail(NAME, e),
            }
        }
        for p in 0..mem_pages {
            match mm::anon(task, p, false) {
                Ok(mut pg) => hash = hash.wrapping_add(pg.words()[16]),
                Err(e) => return io_fail(NAME, e),
            }
        }
        // "Emit": the object file.
        for p in 0..len / 2 {
            match mm::file_page(obj, job * OBJ_SLOT + p, Access::Overwrite) {
                Ok(mut pg) => {
                    for (i, w) in pg.words().iter_mut().enumerate() {
                        *w = obj_word(job, hash, p, i);
                    }
                }
                Err(e) => return io_fail(NAME, e),
            }
        }
        mm::task_exit(task);
        hashes[(job % 64) as usize] = hash;
        if job + 1 == jobs || us_since(t0) / 1_000_000 > last_print {
            last_print = us_since(t0) / 1_000_000;
            if job + 1 == jobs || last_print > 0 {
                println!("compile: {}/{jobs} jobs", job + 1);
            }
        }
        // Verify the last 64 objects' hashes later: keep them (a ring).
    }
    if let Err(e) = mm::sync() {
        return io_fail(NAME, e);
    }
    let build_us = us_since(t0).max(1);
    println!(
        "RESULT workload=compile phase=build jobs={jobs} ms={} jobs_s={}",
        ms_since(t0),
        jobs * 1_000_000 / build_us
    );
    // Read back the objects of the last (up to) 64 jobs from disk.
    if let Err(e) = mm::drop_caches() {
        return io_fail(NAME, e);
    }
    let mut mismatches = 0u64;
    for job in jobs.saturating_sub(64)..jobs {
        let r = splitmix64(cfg.seed ^ job);
        let len = 8 + r % 25;
        let hash = hashes[(job % 64) as usize];
        for p in 0..len / 2 {
            match mm::file_page(obj, job * OBJ_SLOT + p, Access::Read) {
                Ok(mut pg) => {
                    for (i, &w) in pg.words().iter().enumerate() {
                        if w != obj_word(job, hash, p, i) {
                            mismatches += 1;
                        }
                    }
                }
                Err(e) => return io_fail(NAME, e),
            }
        }
    }
    let ok = mismatches == 0;
    println!(
        "RESULT workload=compile phase=done ok={} jobs={jobs} mismatches={mismatches} ms={} {}",
        u8::from(ok),
        ms_since(t0),
        mm::stats_words()
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
