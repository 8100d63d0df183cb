//! `workload=mapreduce` (Metis-like word count): `mappers` map tasks each read
//! their split of the input file through the page cache and count "words"
//! (each 8-byte word of the file maps to a word id in `0..vocab`, skewed
//! towards small ids) in their own open-addressed hash table in anonymous
//! memory; all tables stay alive until one reduce task merges them into a
//! final table. The final counts must add up to the words read.
//!
//! Keys: `input=src input_mb=16 vocab=50000 mappers=4`.

use memvisor_guest_mm::{Access, MmError, PAGE_SIZE};

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::mm;

use super::common::{self, io_fail, ms_since};

const NAME: &str = "mapreduce";
const KEYS: &[&str] = &["input", "input_mb", "vocab", "mappers"];
const MAX_MAPPERS: usize = 16;

/// A hash table of (word id + 1, count) pairs in task memory, 256 entries per page.
struct Table {
    task: u32,
    slots: u64,
}

impl Table {
    fn add(&self, key: u64, n: u64) -> Result<bool, MmError> {
        let mut s = memvisor_guest_mm::format::splitmix64(key) % self.slots;
        loop {
            let mut pg = mm::anon(self.task, s / 256, true)?;
            let w = pg.words();
            let i = (s % 256) as usize * 2;
            if w[i] == key + 1 {
                w[i + 1] += n;
                return Ok(false);
            }
            if w[i] == 0 {
                w[i] = key + 1;
                w[i + 1] = n;
                return Ok(true);
            }
            s = (s + 1) % self.slots;
        }
    }

    /// Calls `f(key, count)` for every entry.
    fn each(&self, mut f: impl FnMut(u64, u64) -> Result<(), MmError>) -> Result<(), MmError> {
        for p in 0..self.slots.div_ceil(256) {
            let mut buf = [0u64; 512];
            buf.copy_from_slice(mm::anon(self.task, p, false)?.words());
            for e in buf.chunks_exact(2) {
                if e[0] != 0 {
                    f(e[0] - 1, e[1])?;
                }
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
            common::mb_arg(cfg, "input_mb", 16)?,
            cfg.num("vocab", 50_000, 1, 1 << 26)?,
            cfg.num("mappers", 4, 1, MAX_MAPPERS as u64)?,
        ))
    })();
    let (input_pages, vocab, mappers) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let name = cfg.arg("input").unwrap_or("src");
    let input = match common::data_file(NAME, name, input_pages * PAGE_SIZE as u64) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let pages = input_pages.min(mm::file_pages(input));
    if let Err(e) = mm::drop_caches() {
        return io_fail(NAME, e);
    }
    let slots = (2 * vocab).next_power_of_two();
    let mut tables = [const { None::<Table> }; MAX_MAPPERS];
    let t0 = rdtsc();
    let mut words = 0u64;
    let split = pages.div_ceil(mappers);
    for (m, slot) in tables.iter_mut().enumerate().take(mappers as usize) {
        let task = match mm::task_create() {
            Ok(t) => t,
            Err(e) => return io_fail(NAME, e),
        };
        let table = Table { task, slots };
        let first = m as u64 * split;
        for p in first..(first + split).min(pages) {
            let mut buf = [0u64; 512];
            match mm::file_page(input, p, Access::Read) {
                Ok(mut pg) => buf.copy_from_slice(pg.words()),
                Err(e) => return io_fail(NAME, e),
            }
            for &w in &buf {
                // Skewed ids: the product of two uniform ids, scaled back.
                let id = (w % vocab) * ((w >> 32) % vocab) / vocab;
                if let Err(e) = table.add(id, 1) {
                    return io_fail(NAME, e);
                }
                words += 1;
            }
        }
        *slot = Some(table);
        println!("mapreduce: mapper {m} done");
    }
    let map_ms = ms_since(t0);
    println!(
        "RESULT workload=mapreduce phase=map ms={map_ms} words={words} mappers={mappers} table_kb={}",
        slots * 16 / 1024
    );
    let t1 = rdtsc();
    let reduce_task = match mm::task_create() {
        Ok(t) => t,
        Err(e) => return io_fail(NAME, e),
    };
    let fin = Table {
        task: reduce_task,
        slots,
    };
    let mut distinct = 0u64;
    for t in tables.iter().flatten() {
        if let Err(e) = t.each(|k, n| {
            distinct += u64::from(fin.add(k, n)?);
            Ok(())
        }) {
            return io_fail(NAME, e);
        }
    }
    let mut total = 0u64;
    let mut top = (0u64, 0u64);
    if let Err(e) = fin.each(|k, n| {
        total += n;
        if n > top.1 {
            top = (k, n);
        }
        Ok(())
    }) {
        return io_fail(NAME, e);
    }
    for t in tables.iter().flatten() {
        mm::task_exit(t.task);
    }
    mm::task_exit(reduce_task);
    let ok = total == words;
    println!(
        "RESULT workload=mapreduce phase=reduce ms={} distinct={distinct} total={total} top_word={} top_count={}",
        ms_since(t1),
        top.0,
        top.1
    );
    println!(
        "RESULT workload=mapreduce phase=done ok={} words={words} ms={} {}",
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
