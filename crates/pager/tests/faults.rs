//! Faults in the middle of paging, with real userfaultfd and a real disk that fails or slows on
//! demand (no KVM: a thread of this test plays a device thread copying guest memory in the middle
//! of a request, which waits in the kernel on a page the pager must bring in).
//!
//! Each failing case: memory is filled with known data, the pager moves it to a store, the
//! store's disk starts failing, a device access needs a page from it. The pager pauses the VM
//! with a reason and the access waits (it is neither given wrong data nor left to hang for good);
//! once the disk works again, the resume serves the access, and every byte reads as written. The
//! slow case checks what a fault's held-up read does not hold up.

use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{config, flaky_disk::FlakyDisk, present, wait_until};
use memvisor_devices::ram::{DiskPage, GuestRam};
use memvisor_devices::GuestMem;
use memvisor_pager::{NoVcpus, Pager};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

mod common;

/// The longest a test waits for the pager.
const WAIT: Duration = Duration::from_secs(20);

/// Held by each test while it runs: the slow case tells its pager thread waiting on the disk by
/// the thread's name, and another test's pager on its own disk would pass for it.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
const MEM: usize = 64 << 20;
const PAGES: u64 = (MEM / PAGE) as u64;

/// Page `p`'s known content.
fn page_of(p: u64) -> Vec<u8> {
    common::known_page(p, 0x5a00_0000_0000_0000)
}

/// Reads all of guest memory from another thread, as a device thread copies a request's
/// buffers; returns the thread.
fn device_reads_everything(mem: &Arc<GuestMem>) -> std::thread::JoinHandle<Vec<u8>> {
    let mem = mem.clone();
    std::thread::spawn(move || {
        let mut all = vec![0u8; MEM];
        mem.read_slice(&mut all, GuestAddress(0)).unwrap();
        all
    })
}

/// Checks that `all` (guest memory as read whole) holds `want(p)` in every page `p`.
fn every_page_is(all: &[u8], want: impl Fn(u64) -> Vec<u8>) {
    for (p, got) in (0..PAGES).zip(all.chunks_exact(PAGE)) {
        assert!(got == want(p).as_slice(), "page {p} differs");
    }
}

/// The common end: the access waits while paused, the disk comes back, the resume serves it,
/// and every page reads as written.
fn resume_and_check(
    disk: &FlakyDisk,
    pager: &Pager,
    vcpus: &NoVcpus,
    reader: std::thread::JoinHandle<Vec<u8>>,
    store: &str,
) {
    wait_until("the pager pauses the VM", WAIT, || vcpus.paused().is_some());
    let why = vcpus.paused().unwrap().to_string();
    eprintln!("paused: {why}");
    assert!(
        why.contains("could not be resolved") && why.contains(store),
        "{why}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !reader.is_finished(),
        "the device access finished while its page could not be read"
    );
    assert!(pager.stats().counters.pauses >= 1);

    // A resume while the disk still fails pauses again, and the access keeps waiting.
    vcpus.resume();
    pager.retry();
    assert!(vcpus.paused().is_some(), "the retry failed: paused again");
    assert!(!reader.is_finished());

    disk.set_working(true);
    vcpus.resume();
    pager.retry();
    wait_until("the device access completes after the resume", WAIT, || {
        reader.is_finished()
    });
    every_page_is(&reader.join().unwrap(), page_of);
    assert_eq!(
        vcpus.paused(),
        None,
        "nothing failed after the disk came back"
    );
}

/// Memory filled with known pages, under a pager whose swap file is on `disk`, with all but
/// 16 MiB of it swapped out: returns once reclaim has finished.
fn swapped_out(disk: &FlakyDisk) -> (Arc<GuestMem>, Arc<NoVcpus>, Pager) {
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), MEM)]).unwrap());
    for p in 0..PAGES {
        mem.write_slice(&page_of(p), GuestAddress(p * PAGE as u64))
            .unwrap();
    }
    let vcpus = Arc::new(NoVcpus::default());
    let pager = Pager::start(
        mem.clone(),
        &config(&disk.mnt, false),
        vcpus.clone(),
        |why| panic!("the pager failed: {why}"),
    )
    .unwrap();
    pager.set_limit(Some(16 * MIB)).unwrap();
    // Reclaim goes on below the limit to its low watermark (the limit less a 256-page chunk):
    // once there it has finished, so only what the test does next meets the disk. (Waiting for
    // the limit alone let reclaim's last chunk meet a failing disk first, now and then.)
    wait_until("reclaim swaps out 49 MiB", WAIT, || {
        pager.stats().pages.resident_pages <= 16 * MIB / PAGE as u64 - 256
    });
    (mem, vcpus, pager)
}

/// A device thread needs a page the pager swapped out, and the swap file's disk fails: paused,
/// then served on resume.
#[test]
fn a_device_access_to_a_swapped_page_waits_out_a_failing_swap_disk() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let disk = FlakyDisk::new(dir.path(), 160);
    let (mem, vcpus, pager) = swapped_out(&disk);

    disk.set_working(false);
    let reader = device_reads_everything(&mem);
    resume_and_check(
        &disk,
        &pager,
        &vcpus,
        reader,
        "reading the swap file failed",
    );
    assert!(pager.stats().counters.swap_bytes_read >= 40 * MIB);
}

/// The Swap Mapper dropped pages that mirror image blocks, and the image's disk fails when a
/// device thread needs one of them back: paused, then served on resume.
#[test]
fn a_refault_from_a_failing_image_disk_waits_and_resumes() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let disk = FlakyDisk::new(dir.path(), 160);
    let image_path = disk.mnt.join("disk.img");
    let image = common::image(&image_path, PAGES, page_of);
    image.sync_all().unwrap();
    let swap_dir = dir.path().join("swap");
    std::fs::create_dir(&swap_dir).unwrap();
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), MEM)]).unwrap());
    let vcpus = Arc::new(NoVcpus::default());
    let pager = Pager::start(
        mem.clone(),
        &config(&swap_dir, true),
        vcpus.clone(),
        |why| panic!("the pager failed: {why}"),
    )
    .unwrap();
    // Read past the page cache, as the device's O_DIRECT handle does.
    let direct = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&image_path)
        .unwrap();
    pager.attach_disk(0, direct, None).unwrap();
    // Take RAM over first, so the device reads below are tracked.
    pager.set_limit(Some(PAGES * PAGE as u64)).unwrap();
    // "Device reads": block b into page b, every page of RAM.
    for b in 0..PAGES {
        let addr = GuestAddress(b * PAGE as u64);
        pager.write(addr, &page_of(b)).unwrap();
        pager.disk_read(0, &[DiskPage { block: b, addr }]);
    }
    pager.set_limit(Some(16 * MIB)).unwrap();
    wait_until("the mapper drops 40 MiB of mirrors", WAIT, || {
        pager.stats().pages.on_disk_pages >= 40 * MIB / PAGE as u64
    });
    assert_eq!(
        pager.stats().counters.swap_bytes_written,
        0,
        "mirrors are dropped, not written"
    );

    disk.set_working(false);
    let reader = device_reads_everything(&mem);
    resume_and_check(&disk, &pager, &vcpus, reader, "reading disk image 0 failed");
}

/// Whether a thread of this process named `name` waits on the disk (state `D`).
fn on_disk(name: &str) -> bool {
    std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
        let t = t.unwrap().path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(t.join("stat")).unwrap_or_default();
        // `pid (comm) S ...`: the state follows the last ')'.
        let state = stat.rsplit_once(')').map(|(_, s)| s.trim_start());
        comm.trim() == name && state.is_some_and(|s| s.starts_with('D'))
    })
}

/// A fault's swap read that the disk holds up (reads throttled to 1 KiB/s: one 64 KiB run takes
/// a minute) holds up neither `GET /stats` nor devices: the pager thread reads without the page
/// lock. A device then overwrites the very page being read, which wakes the waiting access
/// with the device's data; once the read lands, the pager finds the page changed and does not
/// install what it read over it (`fault_reads_redone`). Every byte reads as written.
#[test]
fn a_slow_swap_read_holds_up_neither_stats_nor_devices() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let disk = FlakyDisk::new(dir.path(), 160);
    let (mem, _vcpus, pager) = swapped_out(&disk);
    let host = |p: u64| mem.get_host_address(GuestAddress(p * PAGE as u64)).unwrap();
    // A swapped page, and one far from it that a device will write meanwhile.
    let p = (0..PAGES).find(|&p| !present(host(p))).unwrap();
    let elsewhere = PAGES - 1;
    let before = pager.stats().counters;

    let slow = disk.slow_reads(1024);
    let reader = {
        let mem = mem.clone();
        std::thread::spawn(move || {
            let mut page = vec![0u8; PAGE];
            mem.read_slice(&mut page, GuestAddress(p * PAGE as u64))
                .unwrap();
            page
        })
    };
    wait_until("the pager thread waits on the swap read", WAIT, || {
        on_disk("pager")
    });

    // The read has not landed, and the pager answers anyway.
    let during = pager.stats().counters;
    assert_eq!(
        during.faults_swap, before.faults_swap,
        "the read landed already"
    );
    assert!(!reader.is_finished());
    // A device writes a page elsewhere, then the page being read.
    let new_elsewhere = page_of(elsewhere + PAGES);
    pager
        .write(GuestAddress(elsewhere * PAGE as u64), &new_elsewhere)
        .unwrap();
    let new_p = page_of(p + 2 * PAGES);
    pager.write(GuestAddress(p * PAGE as u64), &new_p).unwrap();
    assert!(
        reader.join().unwrap() == new_p,
        "the waiting access did not get the device's data"
    );
    assert_eq!(
        pager.stats().counters.faults_swap,
        before.faults_swap,
        "the device writes waited for the read"
    );

    slow.lift();
    wait_until("the held read lands and is redone", WAIT, || {
        pager.stats().counters.fault_reads_redone == before.fault_reads_redone + 1
    });
    drop(slow);
    every_page_is(
        &device_reads_everything(&mem).join().unwrap(),
        |q| match q {
            _ if q == p => new_p.clone(),
            _ if q == elsewhere => new_elsewhere.clone(),
            _ => page_of(q),
        },
    );
}

/// Reads `pages` one by one from another thread, as a vCPU faults them in, and checks each.
fn read_back(mem: &Arc<GuestMem>, pages: &[u64]) -> std::thread::JoinHandle<()> {
    let mem = mem.clone();
    let pages = pages.to_vec();
    std::thread::spawn(move || {
        for p in pages {
            let mut page = vec![0u8; PAGE];
            mem.read_slice(&mut page, GuestAddress(p * PAGE as u64))
                .unwrap();
            assert!(page == page_of(p), "page {p} differs");
        }
    })
}

/// A fault that takes the VM a chunk over its limit waits for reclaim's next chunk; when the
/// limit is raised meanwhile, the fault goes on at once: reclaim does not act below the new
/// limit, so the chunk the fault waited for is not coming. (The wait used to keep the limit it
/// started with, and held every fault of the VM for its full 10 s.) Here the chunk cannot come
/// anyway: reclaim's swap writes are throttled to 1 KiB/s. Every byte reads as written.
#[test]
fn a_raised_limit_ends_a_fault_s_wait_for_reclaim() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let disk = FlakyDisk::new(dir.path(), 160);
    let (mem, _vcpus, pager) = swapped_out(&disk);
    let host = |p: u64| mem.get_host_address(GuestAddress(p * PAGE as u64)).unwrap();
    let swapped: Vec<u64> = (0..PAGES).filter(|&p| !present(host(p))).collect();
    assert!(swapped.len() as u64 >= 40 * MIB / PAGE as u64);

    // 16 MiB more brought back under a 32 MiB limit; then the limit falls to 16 MiB again, and
    // reclaim's first chunk meets a disk that writes 1 KiB a second.
    pager.set_limit(Some(32 * MIB)).unwrap();
    let back = (16 << 20) / PAGE;
    read_back(&mem, &swapped[..back]).join().unwrap();
    let slow = disk.slow_writes(1024);
    pager.set_limit(Some(16 * MIB)).unwrap();
    wait_until("reclaim waits on its chunk's write", WAIT, || {
        on_disk("reclaim")
    });
    // The guest brings swapped pages back, a 4 KiB fault at a time, until a fault takes it a
    // chunk past the limit and waits for reclaim.
    let reader = read_back(&mem, &swapped[back..back + 2048]);
    let mut seen = (u64::MAX, Instant::now());
    wait_until("a fault waits for reclaim", WAIT, || {
        let faults = pager.stats().counters.faults_swap;
        if faults != seen.0 {
            seen = (faults, Instant::now());
        }
        seen.1.elapsed() > Duration::from_millis(500)
    });
    assert!(!reader.is_finished(), "no fault waited");

    pager.set_limit(Some(MEM as u64)).unwrap();
    let raised = Instant::now();
    wait_until("the faults go on", WAIT, || reader.is_finished());
    assert!(
        raised.elapsed() < Duration::from_secs(5),
        "the faults went on only after {:?}: the wait kept its old limit",
        raised.elapsed()
    );
    reader.join().unwrap();
    // Writes go at the disk's speed again, and reclaim's chunk lands.
    drop(slow);
    every_page_is(&device_reads_everything(&mem).join().unwrap(), page_of);
}
