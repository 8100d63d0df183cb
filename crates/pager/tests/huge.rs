//! Huge pages under the pager, with real userfaultfd and transparent huge pages: guest memory
//! filled with known data on huge pages is taken over, then the balloon and free page reporting
//! release single pages inside them, a whole huge page, and reclaim takes most of the rest
//! while a writer keeps rewriting it. Every release that takes part of a huge page splits it
//! first, so its memory is really freed; every byte reads as last written (or as zero, where
//! the balloon or the guest's report took it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{config, wait_until};
use memvisor_devices::ram::{Discard, GuestRam, GuestRange};
use memvisor_devices::GuestMem;
use memvisor_pager::{NoVcpus, Pager};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

mod common;

/// The longest a test waits for the pager.
const WAIT: Duration = Duration::from_secs(30);

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
const HUGE: u64 = 2 << 20;
const MEM: usize = 64 << 20;
const PAGES: u64 = (MEM / PAGE) as u64;

/// Page `p`'s known content.
fn page_of(p: u64) -> Vec<u8> {
    common::known_page(p, 0x0a00_0000_0000_0000)
}

/// A counter of /proc/vmstat.
fn vmstat(name: &str) -> u64 {
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap();
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("/proc/vmstat has no {name}"))
}

/// The kB of `AnonHugePages` of this process's mappings that overlap `start..end`.
fn huge_kb(start: u64, end: u64) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                inside = a < end && b > start;
                continue;
            }
        }
        if let Some(v) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
            kb += v.trim().trim_end_matches(" kB").parse::<u64>().unwrap();
        }
    }
    kb
}

#[test]
fn every_release_splits_the_huge_pages_it_takes_part_of_and_keeps_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), MEM)]).unwrap());
    let host = mem.get_host_address(GuestAddress(0)).unwrap() as u64;
    // Plain memory on huge pages, as a VM runs until its first limit.
    // SAFETY: the advice only changes how the kernel backs the test's own guest memory.
    let advised = unsafe { libc::madvise(host as *mut _, MEM, libc::MADV_HUGEPAGE) };
    assert_eq!(advised, 0);
    for p in 0..PAGES {
        mem.write_slice(&page_of(p), GuestAddress(p * PAGE as u64))
            .unwrap();
    }
    let on_huge = huge_kb(host, host + MEM as u64);
    assert!(on_huge >= 32 * 1024, "only {on_huge} kB on huge pages");
    let vcpus = Arc::new(NoVcpus::default());
    let pager = Pager::start(
        mem.clone(),
        &config(dir.path(), false),
        vcpus.clone(),
        |why| panic!("the pager failed: {why}"),
    )
    .unwrap();
    pager.set_limit(Some(MEM as u64)).unwrap();
    let split = || pager.stats().counters.huge_pages_split;
    assert_eq!(split(), 0);

    // The first huge-page boundary in guest memory, and the huge pages after it.
    let first = (host + HUGE - 1) & !(HUGE - 1);
    let gpa = |h: u64| h - host;
    let regions: Vec<u64> = (0u64..)
        .map(|i| first + i * HUGE)
        .take_while(|r| r + HUGE <= host + MEM as u64)
        .collect();
    let mut gone = std::collections::HashSet::new();
    let kernel_split = vmstat("thp_split_page");
    // One page inflated into the balloon in every other huge page of the first 20, eight
    // reported free in the others; the rest stay whole for reclaim.
    const PARTS: usize = 19;
    let parts = PARTS as u64;
    for (i, &r) in regions.iter().enumerate().skip(1).take(PARTS) {
        let (why, n) = if i % 2 == 0 {
            (Discard::Balloon, 1)
        } else {
            (Discard::Reported, 8)
        };
        let at = gpa(r) + 16 * PAGE as u64;
        pager
            .discard(
                &[GuestRange {
                    addr: at,
                    len: n * PAGE as u64,
                }],
                why,
            )
            .unwrap();
        gone.extend((0..n).map(|k| at / PAGE as u64 + k));
    }
    assert_eq!(split(), parts, "one split per huge page released in part");
    let by_kernel = vmstat("thp_split_page") - kernel_split;
    // Other processes can only add to the kernel's count.
    assert!(
        by_kernel >= parts,
        "the kernel split {by_kernel} of {parts} huge pages"
    );
    // A whole huge page is freed whole: nothing to split.
    let whole = gpa(regions[0]);
    pager
        .discard(
            &[GuestRange {
                addr: whole,
                len: HUGE,
            }],
            Discard::Balloon,
        )
        .unwrap();
    gone.extend((0..HUGE / PAGE as u64).map(|k| whole / PAGE as u64 + k));
    assert_eq!(split(), parts, "a whole huge page released was split");

    // Reclaim takes most of the rest while a writer rewrites pages with their own content.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mem, stop, gone) = (mem.clone(), stop.clone(), gone.clone());
        std::thread::spawn(move || {
            let mut p = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if !gone.contains(&p) {
                    mem.write_slice(&page_of(p), GuestAddress(p * PAGE as u64))
                        .unwrap();
                }
                p = (p + 97) % PAGES;
                if p % 64 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        })
    };
    pager.set_limit(Some(16 * MIB)).unwrap();
    wait_until("reclaim takes guest memory down to its limit", WAIT, || {
        pager.stats().pages.resident_pages <= 16 * MIB / PAGE as u64
    });
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        split() > parts,
        "reclaim split none of the huge pages left whole"
    );

    let mut all = vec![0u8; MEM];
    mem.read_slice(&mut all, GuestAddress(0)).unwrap();
    let zero = vec![0u8; PAGE];
    for (p, got) in (0..PAGES).zip(all.chunks_exact(PAGE)) {
        if gone.contains(&p) {
            assert!(got == zero.as_slice(), "released page {p} is not zero");
        } else {
            assert!(got == page_of(p).as_slice(), "page {p} differs");
        }
    }
    assert_eq!(vcpus.paused(), None);
}
