//! `workload=selftest`: probe virtio-blk disks, write the splitmix64 pattern
//! over the first `selftest_mb` MiB of the chosen disk, FLUSH, read it back and
//! compare every word. A read-only disk gets a read-only pass instead.

use core::fmt::{self, Display};

use crate::cmdline::Config;
use crate::cpu::rdtsc;
use crate::debug_exit::ExitCode;
use crate::time::{Millis, cycles_to_us};
use crate::virtio::blk::{BlkDevice, DISK_ID_MAX, SECTOR_SIZE};
use crate::virtio::{self, DEVICE_ID_BLOCK};

use super::pattern;

const MAX_DISKS: usize = 8;
const MAX_REPORTED_MISMATCHES: u64 = 5;

/// `write_ms=1.234` or `write_cycles=5678`, depending on whether the TSC frequency is known.
struct Duration {
    phase: &'static str,
    cycles: u64,
}

impl Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match cycles_to_us(self.cycles) {
            Some(us) => write!(f, "{}_ms={}", self.phase, Millis(us)),
            None => write!(f, "{}_cycles={}", self.phase, self.cycles),
        }
    }
}

/// Prints progress at 25 % steps.
struct Progress {
    phase: &'static str,
    total: u64,
    next_quarter: u64,
}

impl Progress {
    fn new(phase: &'static str, total: u64) -> Self {
        Self {
            phase,
            total,
            next_quarter: 1,
        }
    }
    fn update(&mut self, done: u64) {
        while self.next_quarter <= 4 && done * 4 >= self.next_quarter * self.total {
            println!(
                "selftest: {} {}% ({} KiB)",
                self.phase,
                self.next_quarter * 25,
                done / 1024
            );
            self.next_quarter += 1;
        }
    }
}

fn fail(reason: &str, cpus: u32) -> ExitCode {
    println!("RESULT workload=selftest ok=0 reason={reason} cpus={cpus}");
    ExitCode::Failure
}

pub fn run(cfg: &Config, cpus: u32) -> ExitCode {
    let mut disks: [Option<BlkDevice>; MAX_DISKS] = [const { None }; MAX_DISKS];
    let mut count = 0;
    virtio::probe(|found| {
        if found.device_id != DEVICE_ID_BLOCK {
            return;
        }
        match BlkDevice::init(found.slot, found.transport) {
            Ok(dev) => {
                println!(
                    "virtio-blk: slot {} serial=\"{}\" capacity={} MiB ro={} block_size={} flush={} max_req={} KiB",
                    dev.slot,
                    dev.id_str(),
                    dev.capacity_bytes() >> 20,
                    u8::from(dev.read_only),
                    dev.block_size,
                    u8::from(dev.has_flush),
                    dev.max_request_bytes() / 1024
                );
                if count < MAX_DISKS {
                    disks[count] = Some(dev);
                    count += 1;
                }
            }
            Err(e) => println!("virtio-blk: slot {}: init failed: {e}", found.slot),
        }
    });

    let wanted = cfg.disk();
    let chosen = disks[..count]
        .iter_mut()
        .flatten()
        .find(|d| wanted.is_none_or(|id| d.id() == id));
    let Some(disk) = chosen else {
        match wanted {
            Some(id) => println!(
                "selftest: no virtio-blk disk with serial \"{}\" ({} found)",
                core::str::from_utf8(id).unwrap_or("?"),
                count
            ),
            None => println!("selftest: no virtio-blk disk found"),
        }
        return fail("no_disk", cpus);
    };
    if !disk.id_ok {
        println!("selftest: GET_ID failed on the chosen disk");
        return fail("get_id", cpus);
    }

    let block = u64::from(disk.block_size);
    let req_bytes = u64::from(cfg.req_kb) * 1024;
    if !req_bytes.is_multiple_of(block) {
        println!(
            "selftest: req_kb={} is not a multiple of the {}-byte block size",
            cfg.req_kb, block
        );
        return fail("req_size", cpus);
    }
    let bytes = (cfg.selftest_mb << 20).min(disk.capacity_bytes()) / block * block;
    if bytes == 0 {
        return fail("empty_disk", cpus);
    }
    if bytes < cfg.selftest_mb << 20 {
        println!("selftest: clamped to the disk size: {} bytes", bytes);
    }
    let Some(buf_addr) = crate::early_alloc::alloc_zeroed(req_bytes as usize, 4096) else {
        println!("selftest: cannot allocate a {} KiB buffer", cfg.req_kb);
        return fail("no_memory", cpus);
    };
    // SAFETY: freshly allocated, zeroed, 4096-aligned, owned by this function only.
    let words =
        unsafe { core::slice::from_raw_parts_mut(buf_addr as *mut u64, req_bytes as usize / 8) };

    let mut id_buf = [0u8; DISK_ID_MAX];
    let id_len = disk.id().len();
    id_buf[..id_len].copy_from_slice(disk.id());
    let id = core::str::from_utf8(&id_buf[..id_len]).unwrap_or("?");
    println!(
        "selftest: disk={} bytes={} req_kb={} seed={} mode={}",
        id,
        bytes,
        cfg.req_kb,
        cfg.seed,
        if disk.read_only {
            "read-only"
        } else {
            "write+flush+verify"
        }
    );

    let mut write_cycles = 0;
    if !disk.read_only {
        let mut progress = Progress::new("write", bytes);
        let t0 = rdtsc();
        let mut offset = 0;
        while offset < bytes {
            let len = (bytes - offset).min(req_bytes) as usize;
            let chunk = &mut words[..len / 8];
            pattern::fill(chunk, cfg.seed, offset);
            // SAFETY: viewing initialised u64s as bytes is always valid.
            let data = unsafe { core::slice::from_raw_parts(chunk.as_ptr() as *const u8, len) };
            if let Err(e) = disk.write(offset / SECTOR_SIZE, data) {
                println!("selftest: write at byte {offset} failed: {e:?}");
                return fail("write_error", cpus);
            }
            offset += len as u64;
            progress.update(offset);
        }
        if let Err(e) = disk.flush() {
            println!("selftest: flush failed: {e:?}");
            return fail("flush_error", cpus);
        }
        write_cycles = rdtsc() - t0;
    }

    let mut progress = Progress::new("read", bytes);
    let mut mismatches = 0u64;
    let mut checksum = 0u64;
    let t0 = rdtsc();
    let mut offset = 0;
    while offset < bytes {
        let len = (bytes - offset).min(req_bytes) as usize;
        let chunk = &mut words[..len / 8];
        // SAFETY: any byte pattern is a valid u64, so the device may fill the words.
        let data = unsafe { core::slice::from_raw_parts_mut(chunk.as_mut_ptr() as *mut u8, len) };
        if let Err(e) = disk.read(offset / SECTOR_SIZE, data) {
            println!("selftest: read at byte {offset} failed: {e:?}");
            return fail("read_error", cpus);
        }
        for (i, &raw) in chunk.iter().enumerate() {
            let got = u64::from_le(raw);
            let at = offset + 8 * i as u64;
            checksum = checksum.wrapping_add(got);
            if disk.read_only {
                continue;
            }
            let want = pattern::word_at(cfg.seed, at);
            if got != want {
                if mismatches < MAX_REPORTED_MISMATCHES {
                    println!("selftest: mismatch at byte {at}: want {want:#018x} got {got:#018x}");
                }
                mismatches += 1;
            }
        }
        offset += len as u64;
        progress.update(offset);
    }
    let read_cycles = rdtsc() - t0;

    let stats = disk.stats;
    println!(
        "selftest: requests={} notifies={} checksum={:#018x}",
        stats.requests, stats.notifies, checksum
    );
    let read = Duration {
        phase: "read",
        cycles: read_cycles,
    };
    if disk.read_only {
        println!(
            "RESULT workload=selftest ok=1 ro=1 disk={id} bytes={bytes} req_kb={} {read} requests={} cpus={cpus}",
            cfg.req_kb, stats.requests
        );
        return ExitCode::Success;
    }
    let ok = mismatches == 0;
    let write = Duration {
        phase: "write",
        cycles: write_cycles,
    };
    println!(
        "RESULT workload=selftest ok={} disk={id} bytes={bytes} req_kb={} {write} {read} mismatches={mismatches} requests={} cpus={cpus}",
        u8::from(ok),
        cfg.req_kb,
        stats.requests
    );
    if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
}
