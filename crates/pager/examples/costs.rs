//! The host-side costs the pager is designed around, measured on this machine.
//!
//! ```sh
//! cargo run --release -p memvisor-pager --example costs            # disk tests in $TMPDIR
//! cargo run --release -p memvisor-pager --example costs -- /var/tmp # disk tests in that directory
//! ```
//!
//! Prints one row per cost (the median of several rounds, with the fastest and slowest round):
//! a userfaultfd fault's round trip from a faulting thread to the thread that installs the page,
//! `UFFDIO_COPY` of one page and of 64 KiB batches, `MADV_DONTNEED` per page, a first touch of
//! fresh host memory per page, 4 KiB random and 1 MiB sequential `O_DIRECT` reads. These are
//! the numbers `docs/costs.md` states and the simulator's `Costs` start from. A fault taken by a
//! vCPU adds a KVM exit and re-entry to the thread's round trip; the VMM's own
//! `fault_latency` counter (`GET /stats`) measures that one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use userfaultfd::{Event, UffdBuilder};

const PAGE: usize = 4096;
/// Pages in each round's region (64 MiB).
const PAGES: usize = 16384;
/// Rounds per cost; the median is printed.
const ROUNDS: usize = 7;

/// One anonymous private mapping, unmapped on drop.
struct Region {
    addr: *mut u8,
    len: usize,
}

impl Region {
    /// `len` bytes of fresh memory on 4 KiB pages (no transparent huge pages, which would make a
    /// first touch cost one fault per 2 MiB).
    fn new(len: usize) -> Region {
        // SAFETY: a new anonymous mapping; the result is checked.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED, "mmap failed");
        // SAFETY: advice on the mapping just made.
        let r = unsafe { libc::madvise(addr, len, libc::MADV_NOHUGEPAGE) };
        assert_eq!(r, 0, "madvise(MADV_NOHUGEPAGE) failed");
        Region {
            addr: addr.cast(),
            len,
        }
    }

    fn page(&self, i: usize) -> *mut u8 {
        assert!(i * PAGE < self.len);
        self.addr.wrapping_add(i * PAGE)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        let r = unsafe { libc::munmap(self.addr.cast(), self.len) };
        if r != 0 {
            eprintln!("costs: munmap failed: {}", std::io::Error::last_os_error());
        }
    }
}

// SAFETY: the region is plain memory; the threads that share it touch disjoint pages or only
// read fault addresses.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// Nanoseconds per unit of each round, then the median, the fastest and the slowest.
fn rounds(units: usize, mut round: impl FnMut() -> Duration) -> (f64, f64, f64) {
    let mut per: Vec<f64> = (0..ROUNDS)
        .map(|_| round().as_nanos() as f64 / units as f64)
        .collect();
    per.sort_by(f64::total_cmp);
    (per[ROUNDS / 2], per[0], per[ROUNDS - 1])
}

fn row(name: &str, (median, min, max): (f64, f64, f64), unit: &str) {
    println!(
        "{name:<44} {:>9.2} µs  ({:.2}–{:.2}) {unit}",
        median / 1e3,
        min / 1e3,
        max / 1e3
    );
}

/// A thread touches every page of a registered region once; the main thread answers each fault
/// with `UFFDIO_COPY` of one page. Time per fault, as the faulting thread sees it.
fn fault_round_trip() -> Duration {
    let pages = 4096;
    let region = Arc::new(Region::new(pages * PAGE));
    let uffd = UffdBuilder::new()
        .close_on_exec(true)
        .user_mode_only(true)
        .create()
        .expect("userfaultfd (as root, or with vm.unprivileged_userfaultfd=1)");
    uffd.register(region.addr.cast(), region.len)
        .expect("UFFDIO_REGISTER");
    let src = vec![0x5au8; PAGE];
    let toucher = {
        let region = Arc::clone(&region);
        std::thread::spawn(move || {
            let start = Instant::now();
            for i in 0..pages {
                // SAFETY: a page of the region; the fault is resolved by the main thread.
                unsafe { region.page(i).write_volatile(1) };
            }
            start.elapsed()
        })
    };
    let mut served = 0;
    while served < pages {
        if let Some(Event::Pagefault { addr, .. }) =
            uffd.read_event().expect("reading a fault event")
        {
            let page = (addr as usize) & !(PAGE - 1);
            // SAFETY: one page of the registered region, copied from a page-sized buffer.
            unsafe { uffd.copy(src.as_ptr().cast(), page as *mut _, PAGE, true) }
                .expect("UFFDIO_COPY");
            served += 1;
        }
    }
    toucher.join().expect("the faulting thread") / u32::try_from(pages).unwrap()
}

/// `UFFDIO_COPY` into missing pages of a registered region, `batch` pages a call, with no fault.
fn copy(batch: usize) -> Duration {
    let region = Region::new(PAGES * PAGE);
    let uffd = UffdBuilder::new()
        .close_on_exec(true)
        .user_mode_only(true)
        .create()
        .expect("userfaultfd");
    uffd.register(region.addr.cast(), region.len)
        .expect("UFFDIO_REGISTER");
    let src = vec![0x5au8; batch * PAGE];
    let start = Instant::now();
    for i in (0..PAGES).step_by(batch) {
        // SAFETY: `batch` missing pages of the registered region, from a buffer that long.
        unsafe {
            uffd.copy(
                src.as_ptr().cast(),
                region.page(i).cast(),
                batch * PAGE,
                false,
            )
        }
        .expect("UFFDIO_COPY");
    }
    start.elapsed() / u32::try_from(PAGES).unwrap()
}

/// Writes one byte to every page of fresh memory.
fn first_touch() -> Duration {
    let region = Region::new(PAGES * PAGE);
    let start = Instant::now();
    for i in 0..PAGES {
        // SAFETY: a page of the region.
        unsafe { region.page(i).write_volatile(1) };
    }
    start.elapsed() / u32::try_from(PAGES).unwrap()
}

/// `MADV_DONTNEED` over populated memory, 16 pages (64 KiB) a call, as the pager drops victims.
fn dontneed() -> Duration {
    let region = Region::new(PAGES * PAGE);
    for i in 0..PAGES {
        // SAFETY: a page of the region.
        unsafe { region.page(i).write_volatile(1) };
    }
    let start = Instant::now();
    for i in (0..PAGES).step_by(16) {
        // SAFETY: 16 pages of the region, whose content is not needed again.
        let r = unsafe { libc::madvise(region.page(i).cast(), 16 * PAGE, libc::MADV_DONTNEED) };
        assert_eq!(r, 0, "madvise(MADV_DONTNEED) failed");
    }
    start.elapsed() / u32::try_from(PAGES).unwrap()
}

/// A page-aligned buffer for `O_DIRECT`.
struct Aligned {
    region: Region,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let region = Region::new(len);
        // SAFETY: the whole region, fresh and writable.
        unsafe { std::ptr::write_bytes(region.addr, 0xa5, len) };
        Aligned { region }
    }

    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: the region is `len` bytes of mapped memory owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.region.addr, self.region.len) }
    }
}

/// A 256 MiB file written in `dir`, opened `O_DIRECT` so reads reach the disk, removed on drop.
struct DiskFile {
    path: PathBuf,
    file: File,
    len: u64,
}

impl DiskFile {
    fn new(dir: &Path) -> DiskFile {
        let path = dir.join(format!("memvisor-costs-{}.tmp", std::process::id()));
        let len = 256 << 20;
        let mut f = File::create(&path).expect("creating the test file");
        let block = vec![0x3cu8; 1 << 20];
        for _ in 0..(len >> 20) {
            f.write_all(&block).expect("writing the test file");
        }
        f.sync_all().expect("syncing the test file");
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .expect("opening the test file O_DIRECT (a file system that supports it)");
        DiskFile { path, file, len }
    }
}

impl Drop for DiskFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            eprintln!("costs: cannot remove {}: {e}", self.path.display());
        }
    }
}

/// 2,048 reads of 4 KiB at random 4 KiB offsets.
fn random_reads(disk: &DiskFile, seed: &mut u64) -> Duration {
    let reads = 2048;
    let mut buf = Aligned::new(PAGE);
    let blocks = disk.len / PAGE as u64;
    let start = Instant::now();
    for _ in 0..reads {
        // splitmix64: a different block each read, the same sequence each run.
        *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let block = (z ^ (z >> 31)) % blocks;
        disk.file
            .read_exact_at(buf.slice(), block * PAGE as u64)
            .expect("a random read");
    }
    start.elapsed() / reads
}

/// The whole file in 1 MiB reads; time per MiB.
fn sequential_reads(disk: &DiskFile) -> Duration {
    let mut buf = Aligned::new(1 << 20);
    let start = Instant::now();
    for mib in 0..(disk.len >> 20) {
        disk.file
            .read_exact_at(buf.slice(), mib << 20)
            .expect("a sequential read");
    }
    start.elapsed() / u32::try_from(disk.len >> 20).unwrap()
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(std::env::temp_dir, PathBuf::from);
    println!("memvisor costs on this machine: median of {ROUNDS} rounds (fastest–slowest)");
    row(
        "userfaultfd fault, thread round trip",
        rounds(1, fault_round_trip),
        "per fault",
    );
    row(
        "UFFDIO_COPY, one page a call",
        rounds(1, || copy(1)),
        "per page",
    );
    row(
        "UFFDIO_COPY, 64 KiB a call",
        rounds(1, || copy(16)),
        "per page",
    );
    row(
        "MADV_DONTNEED, 64 KiB a call",
        rounds(1, dontneed),
        "per page",
    );
    row(
        "first touch of fresh memory",
        rounds(1, first_touch),
        "per page",
    );
    let disk = DiskFile::new(&dir);
    let mut seed = 1;
    row(
        &format!("4 KiB random read, O_DIRECT ({})", dir.display()),
        rounds(1, || random_reads(&disk, &mut seed)),
        "per read",
    );
    let (median, min, max) = rounds(1, || sequential_reads(&disk));
    let mb_s = |ns_per_mib: f64| f64::from(1u32 << 20) / ns_per_mib * 1e9 / 1e6;
    println!(
        "{:<44} {:>9.0} MB/s ({:.0}–{:.0})",
        "1 MiB sequential reads, O_DIRECT",
        mb_s(median),
        mb_s(max),
        mb_s(min)
    );
}
