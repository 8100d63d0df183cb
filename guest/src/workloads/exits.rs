//! `workload=exits`: the round trip of a guest exit and of a fault on fresh memory, as the guest
//! sees them, to measure what the hypervisor's own path costs (e.g. its seccomp filters).
//!
//! 1. **Exits**: `batches` batches of `batch` one-byte writes to the serial port's scratch
//!    register (COM1 + 7, `0x3ff`: a register every 16550 holds and nothing reads, so the write
//!    is harmless on memvisor and QEMU alike). Each write leaves the guest: the hypervisor's
//!    vCPU thread returns from `KVM_RUN`, hands the write to the device and enters `KVM_RUN`
//!    again. Each batch is timed with the TSC; its time over `batch` is one exit's round trip.
//! 2. **Faults**: `fault_mb` MiB of RAM this workload takes untouched from the early allocator
//!    (the memory manager is not started), first-touched one word every `fault_stride` pages,
//!    each touch timed on its own. Each touch faults to the host: on memvisor's pager
//!    (`--mem-limit`) a userfaultfd fault its fault thread serves by installing a window of
//!    zeroed pages (32 at a first fault; the stride, 64 by default, leaves a gap between windows
//!    so that none grows into a stream and every touch is a fault of its own), without a pager
//!    the host kernel's own fault (where it backs RAM with huge pages, one fault per 2 MiB: the
//!    other touches find their page present). Every touched word is read back afterwards (`errors=` counts
//!    the wrong ones).
//!
//! Per phase one line, `RESULT workload=exits phase=exits ms=.. exits=N batch=N exit_ns_p50=..
//! exit_ns_p99=.. exit_ns_min=..` (per exit, over batches) and `RESULT workload=exits
//! phase=faults ms=.. faults=N stride=N fault_ns_p50=.. fault_ns_p99=.. fault_ns_min=..` (over
//! touches): the median, 99th percentile and minimum; then `phase=done ok=1 errors=0`.
//!
//! Keys: `batches=200 batch=1000 fault_mb=64 fault_stride=64` (`fault_mb=0` skips the faults).

use core::fmt;

use crate::cmdline::Config;
use crate::cpu::{outb, rdtsc};
use crate::debug_exit::ExitCode;
use crate::early_alloc;
use crate::time::khz;

use super::common::{self, ms_since};

const NAME: &str = "exits";
const KEYS: &[&str] = &["batches", "batch", "fault_mb", "fault_stride"];

/// COM1's scratch register.
const SCRATCH_PORT: u16 = 0x3f8 + 7;

const PAGE: usize = early_alloc::PAGE_SIZE;

/// What a word of fresh page `p` holds once touched.
fn stamp(p: usize) -> u64 {
    0x6578_6974_0000_0000 | p as u64
}

/// Per-event nanoseconds of a phase's batches, sorted: median, 99th percentile, minimum.
struct Spread<'a> {
    key: &'a str,
    sorted: &'a [u64],
}

impl fmt::Display for Spread<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.sorted;
        let at = |per_mille: usize| s[(s.len() - 1) * per_mille / 1000];
        let k = self.key;
        write!(
            f,
            "{k}_ns_p50={} {k}_ns_p99={} {k}_ns_min={}",
            at(500),
            at(990),
            s[0]
        )
    }
}

/// Nanoseconds per event of a batch of `n` events that took `cycles`.
fn per_event_ns(cycles: u64, n: u64, khz: u64) -> u64 {
    (u128::from(cycles) * 1_000_000 / u128::from(khz) / u128::from(n)) as u64
}

pub fn run(cfg: &Config) -> ExitCode {
    cfg.warn_unknown(&[KEYS]);
    let args = (|| {
        Ok((
            cfg.num("batches", 200, 1, 1 << 16)?,
            cfg.num("batch", 1000, 1, 1 << 20)?,
            cfg.num("fault_mb", 64, 0, 3 << 10)?,
            cfg.num("fault_stride", 64, 1, 1 << 16)?,
        ))
    })();
    let (batches, batch, fault_mb, stride) = match args {
        Ok(a) => a,
        Err(e) => return common::bad_arg(NAME, e),
    };
    let Some(khz) = khz() else {
        return common::fail(
            NAME,
            "the TSC frequency is unknown, so exits cannot be timed",
        );
    };
    // Room for the larger phase's batch times, taken before the rest of RAM.
    let fault_pages = (fault_mb as usize) << 20 >> 12;
    let stride = stride as usize;
    let touches = fault_pages.div_ceil(stride);
    let slots = (batches as usize).max(touches).max(1);
    let Some(buf) = early_alloc::alloc_zeroed(slots * 8, 8) else {
        return common::fail(NAME, "out of memory for the batch times");
    };
    // SAFETY: `buf` is `slots` zeroed, aligned u64s handed out once by the early allocator, used
    // only by this workload.
    let times = unsafe { core::slice::from_raw_parts_mut(buf as *mut u64, slots) };

    let t0 = rdtsc();
    for (i, t) in times[..batches as usize].iter_mut().enumerate() {
        let c0 = rdtsc();
        for _ in 0..batch {
            // SAFETY: the scratch register stores the byte and does nothing else.
            unsafe { outb(SCRATCH_PORT, i as u8) };
        }
        *t = per_event_ns(rdtsc() - c0, batch, khz);
    }
    let ms = ms_since(t0);
    let exit_times = &mut times[..batches as usize];
    exit_times.sort_unstable();
    println!(
        "RESULT workload={NAME} phase=exits ms={ms} exits={} batch={batch} {}",
        batches * batch,
        Spread {
            key: "exit",
            sorted: exit_times
        }
    );

    let mut errors = 0u64;
    if fault_pages > 0 {
        let (start, end) = early_alloc::take_rest();
        if end - start < fault_pages * PAGE {
            return common::fail(
                NAME,
                format_args!(
                    "fault_mb={fault_mb}: only {} MiB of RAM is left untouched",
                    (end - start) >> 20
                ),
            );
        }
        let base = start as *mut u64;
        let t0 = rdtsc();
        for (i, t) in times[..touches].iter_mut().enumerate() {
            let p = i * stride;
            let c0 = rdtsc();
            // SAFETY: page `p` of [start, end) is RAM no one else uses (`take_rest` handed it
            // out), identity-mapped writable; a volatile store keeps every first touch.
            unsafe { base.add(p * PAGE / 8).write_volatile(stamp(p)) };
            *t = per_event_ns(rdtsc() - c0, 1, khz);
        }
        let ms = ms_since(t0);
        for i in 0..touches {
            let p = i * stride;
            // SAFETY: as above; the page was written.
            if unsafe { base.add(p * PAGE / 8).read_volatile() } != stamp(p) {
                errors += 1;
            }
        }
        let fault_times = &mut times[..touches];
        fault_times.sort_unstable();
        println!(
            "RESULT workload={NAME} phase=faults ms={ms} faults={touches} stride={stride} {}",
            Spread {
                key: "fault",
                sorted: fault_times
            }
        );
    }
    println!(
        "RESULT workload={NAME} phase=done ok={} errors={errors}",
        u8::from(errors == 0)
    );
    if errors == 0 {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
