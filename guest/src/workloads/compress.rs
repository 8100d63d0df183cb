//! `workload=compress` (VSwapper §5, Figs. 5 and 11: pbzip2 compresses a file while the memory
//! the guest is given varies): a parallel block compressor like pbzip2, with a real DEFLATE
//! (miniz_oxide, zlib format with its Adler-32) where pbzip2 has bzip2.
//!
//! The input is file `file` (`file_mb` MiB of text-like content, `memvisor_guest_mm::text`,
//! created or rewritten if it does not hold it). After drop-caches, every vCPU takes the next
//! `block_kb` block (pbzip2's 900 k default), reads it through the page cache into its buffer
//! (checking every page against the text it must hold), compresses it at `level`, and appends
//! it to file `out` in block order, through the page cache (a record: `MVZB`, block number,
//! raw length, compressed length, each a little-endian u32, then the zlib stream) — a vCPU whose
//! block is done waits for its turn, as pbzip2's writer thread writes blocks in order. Then
//! `sync` (the writeback), drop-caches, and every vCPU checks blocks of the output read back
//! from the disk: header, decompression (with its checksum) and every page against the text.
//!
//! Memory: beside the page cache, the compressor's working memory is on the kit's heap, set
//! aside before the memory manager starts and fixed for the run: per vCPU the input block, the
//! output buffer (`block + block/16 + 80` bytes) and [`ENGINE_BYTES`] for miniz_oxide's
//! compressor (32 KiB dictionary, 2 × 64 KiB hash chains, 64 KiB LZ codes, 83 KiB output
//! buffer, Huffman tables) and decompressor (11 KiB), plus 16 bytes per block for the index.
//! The `compress: heap ...` line says how much, and the `done` line how much was used at most.
//!
//! Keys: `file=text file_mb=32 block_kb=900 level=6 out=text.mvz`.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memvisor_guest_mm::text::Text;
use memvisor_guest_mm::{Access, MmError, PAGE_SIZE};
use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
};
use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::inflate_flags::{
    TINFL_FLAG_PARSE_ZLIB_HEADER, TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF,
};
use miniz_oxide::inflate::core::{DecompressorOxide, decompress};

use crate::boot::MAX_CPUS;
use crate::cmdline::Config;
use crate::cpu::{pause, rdtsc};
use crate::debug_exit::ExitCode;
use crate::mm;
use crate::sync::SpinLock;
use crate::time::Millis;

use super::common::{self, io_fail, ms_since, us_since};

const NAME: &str = "compress";
const KEYS: &[&str] = &["file", "file_mb", "block_kb", "level", "out"];
/// A record's header: magic, block number, raw length, compressed length.
const HEADER: usize = 16;
const MAGIC: &[u8; 4] = b"MVZB";
/// Heap per vCPU for miniz_oxide's compressor and decompressor (about 360 KiB), with room.
pub const ENGINE_BYTES: usize = 512 << 10;
/// Heap set aside besides the per-vCPU parts.
const HEAP_SLACK: usize = 64 << 10;
/// Stack of each AP for this workload. A worker used 14 KiB at most (measured by scanning its
/// zeroed stack after a run at level 9), but miniz_oxide resets its 64 KiB LZ buffer by
/// assignment, which a compiler may pass through the stack, and the usual 64 KiB has no guard.
pub const AP_STACK_BYTES: usize = 256 << 10;

/// The most a block's record can take: DEFLATE falls back to stored blocks (5 bytes per 64 KiB),
/// zlib adds 6, the record its header.
fn record_bound(block: usize) -> usize {
    HEADER + block + block / 16 + 64
}

#[derive(Clone, Copy)]
struct Job {
    input: u32,
    output: u32,
    /// The input's text (its vocabulary, on the heap for the run).
    text: &'static Text,
    in_bytes: u64,
    block: usize,
    blocks: u64,
    out_cap: u64,
}

/// A vCPU's compressor, decompressor and buffers, made on the BSP before the run.
struct Worker {
    comp: Box<CompressorOxide>,
    decomp: Box<DecompressorOxide>,
    /// The input block (and, when checking, the decompressed block).
    block: Vec<u8>,
    /// A record: header and compressed block.
    record: Vec<u8>,
}

#[derive(Clone, Copy)]
enum Failure {
    Mm(MmError),
    Why(&'static str),
}

impl From<MmError> for Failure {
    fn from(e: MmError) -> Self {
        Failure::Mm(e)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Mm(e) => write!(f, "memory manager error: {e:?}"),
            Failure::Why(w) => f.write_str(w),
        }
    }
}

#[derive(Clone, Copy, Default)]
struct CpuResult {
    blocks: u64,
    raw: u64,
    compressed: u64,
    /// Input pages that did not hold the text they must.
    input_bad: u64,
    /// Output pages that did not decompress to the input (a record that does not decode
    /// counts all its pages).
    mismatches: u64,
    failure: Option<Failure>,
}

static JOB: SpinLock<Option<Job>> = SpinLock::new(None);
static WORKERS: [SpinLock<Option<Worker>>; MAX_CPUS] = [const { SpinLock::new(None) }; MAX_CPUS];
static RESULTS: SpinLock<[CpuResult; MAX_CPUS]> = SpinLock::new(
    [CpuResult {
        blocks: 0,
        raw: 0,
        compressed: 0,
        input_bad: 0,
        mismatches: 0,
        failure: None,
    }; MAX_CPUS],
);
/// Per block: where its record starts in the output and its compressed length.
static INDEX: SpinLock<Vec<(u64, u32)>> = SpinLock::new(Vec::new());
/// The next block to take.
static NEXT: AtomicU64 = AtomicU64::new(0);
/// The block whose record is written next.
static TURN: AtomicU64 = AtomicU64::new(0);
/// Where the next record goes.
static OUT_POS: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicBool = AtomicBool::new(false);

/// Bytes of the heap this run sets aside.
pub fn heap_bytes(cpus: u32, block: usize, blocks: u64) -> usize {
    cpus as usize * (block + record_bound(block) + ENGINE_BYTES)
        + blocks as usize * 16
        + size_of::<Text>()
        + HEAP_SLACK
}

/// Reads `buf.len()` bytes at `off` of `file` through the page cache.
fn read_at(file: u32, off: u64, buf: &mut [u8]) -> Result<(), MmError> {
    let mut done = 0;
    while done < buf.len() {
        let o = off + done as u64;
        let in_page = (o % PAGE_SIZE as u64) as usize;
        let n = (PAGE_SIZE - in_page).min(buf.len() - done);
        let mut pg = mm::file_page(file, o / PAGE_SIZE as u64, Access::Read)?;
        buf[done..done + n].copy_from_slice(&pg.bytes()[in_page..in_page + n]);
        done += n;
    }
    Ok(())
}

/// Writes `data` at `off` of `file` through the page cache: a page written from its start is
/// not read first (the rest of it is written by the next record), one written from the middle
/// is (it holds the end of the previous record).
fn write_at(file: u32, off: u64, data: &[u8]) -> Result<(), MmError> {
    let mut done = 0;
    while done < data.len() {
        let o = off + done as u64;
        let in_page = (o % PAGE_SIZE as u64) as usize;
        let n = (PAGE_SIZE - in_page).min(data.len() - done);
        let access = if in_page == 0 {
            Access::Overwrite
        } else {
            Access::Write
        };
        let mut pg = mm::file_page(file, o / PAGE_SIZE as u64, access)?;
        pg.bytes()[in_page..in_page + n].copy_from_slice(&data[done..done + n]);
        done += n;
    }
    Ok(())
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Block `b`: its first byte in the input and its length.
fn block_range(job: &Job, b: u64) -> (u64, usize) {
    let first = b * job.block as u64;
    (first, (job.in_bytes - first).min(job.block as u64) as usize)
}

/// Compresses block `b` and appends its record to the output in its turn.
fn compress_block(job: &Job, w: &mut Worker, b: u64, r: &mut CpuResult) -> Result<(), Failure> {
    let (first, len) = block_range(job, b);
    let mut expect = [0u8; PAGE_SIZE];
    for (i, chunk) in w.block[..len].chunks_exact_mut(PAGE_SIZE).enumerate() {
        let p = first / PAGE_SIZE as u64 + i as u64;
        chunk.copy_from_slice(mm::file_page(job.input, p, Access::Read)?.bytes());
        job.text.page(p, &mut expect);
        r.input_bad += u64::from(*chunk != expect[..]);
    }
    w.comp.reset();
    let (status, used, clen) = compress(
        &mut w.comp,
        &w.block[..len],
        &mut w.record[HEADER..],
        TDEFLFlush::Finish,
    );
    if status != TDEFLStatus::Done || used != len {
        return Err(Failure::Why("a compressed block did not fit its buffer"));
    }
    w.record[..4].copy_from_slice(MAGIC);
    for (i, v) in [b as u32, len as u32, clen as u32].into_iter().enumerate() {
        w.record[4 + 4 * i..8 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    let rec = HEADER + clen;
    while TURN.load(Ordering::Acquire) != b {
        if FAILED.load(Ordering::Relaxed) {
            return Err(Failure::Why("another vCPU failed"));
        }
        pause();
    }
    let pos = OUT_POS.load(Ordering::Relaxed);
    if pos + rec as u64 > job.out_cap {
        return Err(Failure::Why("the output file is too small"));
    }
    write_at(job.output, pos, &w.record[..rec])?;
    INDEX.lock()[b as usize] = (pos, clen as u32);
    OUT_POS.store(pos + rec as u64, Ordering::Relaxed);
    TURN.store(b + 1, Ordering::Release);
    r.blocks += 1;
    r.raw += len as u64;
    r.compressed += rec as u64;
    Ok(())
}

/// Reads block `b`'s record back, decompresses it and compares every page with the text.
fn check_block(job: &Job, w: &mut Worker, b: u64, r: &mut CpuResult) -> Result<(), Failure> {
    let (first, len) = block_range(job, b);
    let pages = (len / PAGE_SIZE) as u64;
    let (pos, clen) = INDEX.lock()[b as usize];
    let rec = HEADER + clen as usize;
    read_at(job.output, pos, &mut w.record[..rec])?;
    let h = &w.record[..HEADER];
    if &h[..4] != MAGIC
        || u64::from(u32_at(h, 4)) != b
        || u32_at(h, 8) as usize != len
        || u32_at(h, 12) != clen
    {
        r.mismatches += pages;
        return Ok(());
    }
    w.decomp.init();
    let (status, read, made) = decompress(
        &mut w.decomp,
        &w.record[HEADER..rec],
        &mut w.block[..len],
        0,
        TINFL_FLAG_PARSE_ZLIB_HEADER | TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF,
    );
    if status != TINFLStatus::Done || read != clen as usize || made != len {
        r.mismatches += pages;
        return Ok(());
    }
    let mut expect = [0u8; PAGE_SIZE];
    for (i, chunk) in w.block[..len].chunks_exact(PAGE_SIZE).enumerate() {
        job.text
            .page(first / PAGE_SIZE as u64 + i as u64, &mut expect);
        r.mismatches += u64::from(*chunk != expect[..]);
    }
    r.blocks += 1;
    r.raw += len as u64;
    Ok(())
}

/// Runs `step` on blocks taken in turn until none is left or a vCPU failed.
fn work(cpu: u32, step: fn(&Job, &mut Worker, u64, &mut CpuResult) -> Result<(), Failure>) {
    let job = JOB.lock().expect("the job is set before the workers run");
    let mut slot = WORKERS[cpu as usize].lock();
    let mut r = CpuResult::default();
    match slot.as_mut() {
        None => r.failure = Some(Failure::Why("no worker was made for this vCPU")),
        Some(w) => loop {
            if FAILED.load(Ordering::Relaxed) {
                break;
            }
            let b = NEXT.fetch_add(1, Ordering::Relaxed);
            if b >= job.blocks {
                break;
            }
            if let Err(e) = step(&job, w, b, &mut r) {
                r.failure = Some(e);
                FAILED.store(true, Ordering::Relaxed);
                break;
            }
        },
    }
    RESULTS.lock()[cpu as usize] = r;
}

fn compress_worker(cpu: u32) {
    work(cpu, compress_block);
}

fn check_worker(cpu: u32) {
    work(cpu, check_block);
}

/// Runs `job` on every vCPU and adds up their results; prints a failure per vCPU.
fn run_all(job: fn(u32), cpus: u32) -> (CpuResult, bool) {
    NEXT.store(0, Ordering::Relaxed);
    crate::smp::run_on_all(job);
    let mut total = CpuResult::default();
    let mut ok = true;
    for (cpu, r) in RESULTS.lock().iter().enumerate().take(cpus as usize) {
        total.blocks += r.blocks;
        total.raw += r.raw;
        total.compressed += r.compressed;
        total.input_bad += r.input_bad;
        total.mismatches += r.mismatches;
        if let Some(f) = r.failure {
            println!("compress: cpu {cpu} failed: {f}");
            ok = false;
        }
    }
    (total, ok)
}

/// The text of file `id` (its key is the disk's seed and the file), made on the heap and kept
/// for the run.
fn text_of(id: u32) -> &'static Text {
    let key = memvisor_guest_mm::format::splitmix64(mm::fs_seed() ^ u64::from(id));
    // SAFETY: a `Text` is arrays of bytes and a u64, for which all zeroes is a valid value.
    let mut t = unsafe { Box::<Text>::new_zeroed().assume_init() };
    t.fill(key);
    Box::leak(t)
}

/// Opens file `name` if it holds its text (its first and last pages are checked; the run checks
/// every page it reads), else creates it or writes the text over all of it, through the page cache,
/// then syncs.
fn input_file(name: &str, bytes: u64) -> Result<(u32, &'static Text), ExitCode> {
    let pages = bytes / PAGE_SIZE as u64;
    let mut buf = [0u8; PAGE_SIZE];
    let (id, text) = match mm::lookup(name) {
        Some(id) if mm::file_pages(id) < pages => {
            return Err(common::fail(
                NAME,
                format_args!(
                    "file {name} holds {} bytes, fewer than the {bytes} asked for",
                    mm::file_pages(id) * PAGE_SIZE as u64
                ),
            ));
        }
        Some(id) => {
            let text = text_of(id);
            let mut holds = true;
            for p in [0, mm::file_pages(id) - 1] {
                let mut pg = mm::file_page(id, p, Access::Read).map_err(|e| io_fail(NAME, e))?;
                text.page(p, &mut buf);
                holds &= *pg.bytes() == buf;
            }
            if holds {
                return Ok((id, text));
            }
            (id, text)
        }
        None => {
            let id = mm::file_create(name, bytes).map_err(|e| {
                common::fail(
                    NAME,
                    format_args!(
                        "cannot create file {name} of {} MiB: {e:?} (format the data disk with memvisor mkdisk data)",
                        bytes >> 20
                    ),
                )
            })?;
            (id, text_of(id))
        }
    };
    // The whole file, not only what this run reads: a later run that reads more finds it whole.
    let t0 = rdtsc();
    let all = mm::file_pages(id);
    for p in 0..all {
        let mut pg = mm::file_page(id, p, Access::Overwrite).map_err(|e| io_fail(NAME, e))?;
        text.page(p, pg.bytes());
    }
    mm::sync().map_err(|e| io_fail(NAME, e))?;
    println!(
        "compress: wrote {} MiB of text to file {name} in {} ms",
        all >> 8,
        ms_since(t0)
    );
    Ok((id, text))
}

/// The output file, at least `bytes` long (created if absent).
fn output_file(name: &str, bytes: u64) -> Result<u32, ExitCode> {
    match mm::lookup(name) {
        Some(id) if mm::file_pages(id) * (PAGE_SIZE as u64) < bytes => Err(common::fail(
            NAME,
            format_args!(
                "file {name} holds {} bytes, fewer than the {bytes} the output may need",
                mm::file_pages(id) * PAGE_SIZE as u64
            ),
        )),
        Some(id) => Ok(id),
        None => mm::file_create(name, bytes).map_err(|e| {
            common::fail(
                NAME,
                format_args!("cannot create file {name} of {bytes} bytes: {e:?}"),
            )
        }),
    }
}

/// MB/s (10^6 bytes) of `bytes` in `us`, with one decimal.
struct Rate(u64, u64);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = self.0 * 10 / self.1.max(1);
        write!(f, "{}.{}", tenths / 10, tenths % 10)
    }
}

pub fn run(cfg: &Config, cpus: u32) -> ExitCode {
    let args = (|| {
        Ok((
            common::mb_arg(cfg, "file_mb", 32)?,
            cfg.num("block_kb", 900, 4, 16 << 10)?,
            cfg.num("level", 6, 1, 10)?,
        ))
    })();
    let (in_pages, block_kb, level) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    if block_kb % 4 != 0 {
        return common::fail(
            NAME,
            format_args!(
                "bad argument block_kb={block_kb}: expected a multiple of 4 (whole pages)"
            ),
        );
    }
    let block = block_kb as usize * 1024;
    let in_bytes = in_pages * PAGE_SIZE as u64;
    let blocks = in_bytes.div_ceil(block as u64);
    let heap = heap_bytes(cpus, block, blocks);
    // Before the memory manager takes the rest of RAM.
    if let Err(e) = crate::heap::init(heap) {
        return common::fail(NAME, format_args!("{e} ({} KiB)", heap >> 10));
    }
    if let Err(code) = common::start(cfg, NAME, KEYS) {
        return code;
    }
    println!(
        "compress: heap {} KiB ({cpus} vCPUs x ({block_kb} KiB block + {} KiB record + {} KiB engine) + index and vocabulary)",
        heap >> 10,
        record_bound(block) >> 10,
        ENGINE_BYTES >> 10
    );
    let in_name = cfg.arg("file").unwrap_or("text");
    let out_name = cfg.arg("out").unwrap_or("text.mvz");
    if in_name == out_name {
        return common::fail(NAME, "file= and out= name the same file");
    }
    let (input, text) = match input_file(in_name, in_bytes) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let out_cap = blocks * record_bound(block) as u64;
    let output = match output_file(out_name, out_cap) {
        Ok(f) => f,
        Err(code) => return code,
    };
    // The compressors, made here on the BSP's large stack.
    let flags = create_comp_flags_from_zip_params(level as i32, 15, 0);
    for slot in WORKERS.iter().take(cpus as usize) {
        *slot.lock() = Some(Worker {
            comp: Box::new(CompressorOxide::new(flags)),
            decomp: Box::new(DecompressorOxide::new()),
            block: alloc::vec![0; block],
            record: alloc::vec![0; record_bound(block)],
        });
    }
    *INDEX.lock() = alloc::vec![(0, 0); blocks as usize];
    *JOB.lock() = Some(Job {
        input,
        output,
        text,
        in_bytes,
        block,
        blocks,
        out_cap,
    });
    if let Err(e) = mm::drop_caches() {
        return io_fail(NAME, e);
    }

    let t0 = rdtsc();
    let (c, mut ok) = run_all(compress_worker, cpus);
    let compress_ms = ms_since(t0);
    let t1 = rdtsc();
    if ok && let Err(e) = mm::sync() {
        return io_fail(NAME, e);
    }
    let sync_ms = ms_since(t1);
    let total_us = us_since(t0).max(1);
    let ratio_x100 = c.raw * 100 / c.compressed.max(1);
    println!(
        "RESULT workload=compress phase=compress ok={} blocks={} block_kb={block_kb} level={level} cpus={cpus} \
         in_bytes={} out_bytes={} ratio={}.{:02} ms={} compress_ms={compress_ms} sync_ms={sync_ms} mb_s={} input_mismatches={}",
        u8::from(ok && c.input_bad == 0),
        c.blocks,
        c.raw,
        c.compressed,
        ratio_x100 / 100,
        ratio_x100 % 100,
        Millis(total_us),
        Rate(c.raw, total_us),
        c.input_bad
    );
    if c.input_bad > 0 {
        println!(
            "compress: {} pages of file {in_name} did not hold the text they must (written by another program?)",
            c.input_bad
        );
    }
    ok &= c.blocks == blocks && c.raw == in_bytes && c.input_bad == 0;

    let mut v = CpuResult::default();
    if ok {
        if let Err(e) = mm::drop_caches() {
            return io_fail(NAME, e);
        }
        let t2 = rdtsc();
        let (checked, check_ok) = run_all(check_worker, cpus);
        v = checked;
        ok &= check_ok && v.blocks == blocks && v.mismatches == 0;
        println!(
            "RESULT workload=compress phase=check ok={} blocks={} bytes={} mismatches={} ms={} mb_s={}",
            u8::from(ok),
            v.blocks,
            v.raw,
            v.mismatches,
            ms_since(t2),
            Rate(v.raw, us_since(t2).max(1))
        );
    }
    let (_, peak, _) = crate::heap::usage();
    for slot in WORKERS.iter().take(cpus as usize) {
        *slot.lock() = None;
    }
    println!(
        "RESULT workload=compress phase=done ok={} mismatches={} input_mismatches={} ratio={}.{:02} ms={} heap_kb={} heap_peak_kb={} {}",
        u8::from(ok),
        v.mismatches,
        c.input_bad,
        ratio_x100 / 100,
        ratio_x100 % 100,
        Millis(total_us),
        heap >> 10,
        peak >> 10,
        mm::stats_words()
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
