//! Never-touched memory taken by a guest, and memory a balloon deflate gave back, with real
//! userfaultfd (no KVM: the test's own thread plays the guest): the zero window grows while the
//! faults follow each other, upwards or downwards, and stays at its base for scattered touches;
//! deflated pages are mapped at once as far as the limit has room, and those the guest leaves
//! unwritten are the first reclaim drops; and every page holds what was written.

use std::sync::Arc;

use common::{config, known_page, wait_until};
use memvisor_devices::ram::{Discard, GuestRam, GuestRange};
use memvisor_devices::GuestMem;
use memvisor_pager::{NoVcpus, Pager};
use vm_memory::{Bytes, GuestAddress};

mod common;

const PAGE: u64 = 4096;
const MEM: usize = 64 << 20;
const PAGES: u64 = MEM as u64 / PAGE;
const TAG: u64 = 0x2e00_0000_0000_0000;

/// Fresh memory under a pager with a limit that holds all of it: taken over, every page zero.
fn pager_over_fresh_memory(dir: &std::path::Path) -> (Arc<GuestMem>, Pager) {
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), MEM)]).unwrap());
    let pager = Pager::start(
        mem.clone(),
        &config(dir, false),
        Arc::new(NoVcpus::default()),
        |why| panic!("the pager failed: {why}"),
    )
    .unwrap();
    pager.set_limit(Some(MEM as u64)).unwrap();
    (mem, pager)
}

#[test]
fn memory_filled_in_order_takes_a_few_zero_faults_per_megabyte() {
    let dir = tempfile::tempdir().unwrap();
    let (mem, pager) = pager_over_fresh_memory(dir.path());
    for p in 0..PAGES {
        mem.write_slice(&known_page(p, TAG), GuestAddress(p * PAGE))
            .unwrap();
    }
    let faults = pager.stats().counters.faults_zero;
    // 16,384 pages: 512 faults at the base window of 32 pages; about 67 with the window
    // doubling to 256 as each fault lands where the last run ended.
    assert!(
        faults <= 100,
        "{faults} zero faults for {PAGES} pages in order"
    );
    let mut got = [0u8; 4096];
    for p in 0..PAGES {
        mem.read_slice(&mut got, GuestAddress(p * PAGE)).unwrap();
        assert!(got[..] == known_page(p, TAG)[..], "page {p} differs");
    }
}

/// A guest allocator hands out what it freed last first: memory freed in address order is
/// taken back from the top down, and the window grows downwards as it does upwards.
#[test]
fn memory_filled_from_the_top_down_takes_a_few_zero_faults_per_megabyte() {
    let dir = tempfile::tempdir().unwrap();
    let (mem, pager) = pager_over_fresh_memory(dir.path());
    for p in (0..PAGES).rev() {
        mem.write_slice(&known_page(p, TAG), GuestAddress(p * PAGE))
            .unwrap();
    }
    let s = pager.stats();
    // Without the window below the fault, one fault per page: 16,384.
    assert!(
        s.counters.faults_zero <= 100,
        "{} zero faults for {PAGES} pages from the top down",
        s.counters.faults_zero
    );
    assert_eq!(s.pages.resident_pages, PAGES);
    let mut got = [0u8; 4096];
    for p in 0..PAGES {
        mem.read_slice(&mut got, GuestAddress(p * PAGE)).unwrap();
        assert!(got[..] == known_page(p, TAG)[..], "page {p} differs");
    }
}

#[test]
fn scattered_touches_take_the_base_window_each() {
    let dir = tempfile::tempdir().unwrap();
    let (mem, pager) = pager_over_fresh_memory(dir.path());
    let touched: Vec<u64> = (0..PAGES).step_by(128).collect();
    for &p in &touched {
        mem.write_obj(p | TAG, GuestAddress(p * PAGE)).unwrap();
    }
    let s = pager.stats();
    let n = touched.len() as u64;
    assert_eq!(s.counters.faults_zero, n, "one fault per touch");
    assert!(
        s.pages.resident_pages <= n * 32,
        "{} pages installed for {n} touches",
        s.pages.resident_pages
    );
    for &p in &touched {
        assert_eq!(
            mem.read_obj::<u64>(GuestAddress(p * PAGE)).unwrap(),
            p | TAG
        );
        assert_eq!(
            mem.read_obj::<u64>(GuestAddress(p * PAGE + 8)).unwrap(),
            0,
            "the rest of a touched page is zero"
        );
    }
}

/// The pages an inflate takes: 8 of every 16, as runs of 8 pages.
fn balloon_pages() -> Vec<u64> {
    (0..PAGES).filter(|p| p % 16 >= 8).collect()
}

fn ranges(pages: &[u64]) -> Vec<GuestRange> {
    pages
        .chunks(8)
        .map(|c| GuestRange {
            addr: c[0] * PAGE,
            len: c.len() as u64 * PAGE,
        })
        .collect()
}

/// The balloon pages given back in scattered order, as a guest allocator hands them out.
fn deflate_scattered(pager: &Pager, pages: &[u64]) {
    let mut r = ranges(pages);
    // A fixed shuffle: every 7th range of the rest, round and round.
    let mut order = Vec::new();
    while !r.is_empty() {
        let i = (order.len() * 7) % r.len();
        order.push(r.swap_remove(i));
    }
    for chunk in order.chunks(32) {
        pager.deflate(chunk);
    }
}

/// The guest writes `pages` with `tag`.
fn write(mem: &GuestMem, pages: &[u64], tag: u64) {
    for &p in pages {
        mem.write_slice(&known_page(p, tag), GuestAddress(p * PAGE))
            .unwrap();
    }
}

/// Fresh memory under a pager, filled with [`TAG`], with the [`balloon_pages`] ballooned.
fn ballooned_memory(dir: &std::path::Path) -> (Arc<GuestMem>, Pager, Vec<u64>) {
    let (mem, pager) = pager_over_fresh_memory(dir);
    write(&mem, &(0..PAGES).collect::<Vec<_>>(), TAG);
    let gone = balloon_pages();
    let released = pager.discard(&ranges(&gone), Discard::Balloon).unwrap();
    assert_eq!(released, gone.len() as u64);
    (mem, pager, gone)
}

/// Checks every page against `want(p)`.
fn check(mem: &GuestMem, want: impl Fn(u64) -> Vec<u8>) {
    let mut got = [0u8; 4096];
    for p in 0..PAGES {
        mem.read_slice(&mut got, GuestAddress(p * PAGE)).unwrap();
        assert!(got[..] == want(p)[..], "page {p} differs");
    }
}

/// `new` written on `changed` (sorted), [`TAG`] on the rest.
fn tagged(changed: &[u64], new: u64) -> impl Fn(u64) -> Vec<u8> + '_ {
    move |p| {
        known_page(
            p,
            if changed.binary_search(&p).is_ok() {
                new
            } else {
                TAG
            },
        )
    }
}

#[test]
fn deflated_pages_come_back_without_a_fault() {
    const NEW: u64 = 0x2f00_0000_0000_0000;
    let dir = tempfile::tempdir().unwrap();
    let (mem, pager, gone) = ballooned_memory(dir.path());
    let before = pager.stats();
    deflate_scattered(&pager, &gone);
    let after = pager.stats();
    assert_eq!(
        after.counters.deflated_mapped,
        gone.len() as u64,
        "the limit has room for every deflated page"
    );
    // The guest reads each page it got back (zero), then writes it: no fault reaches the pager.
    for &p in &gone {
        assert_eq!(mem.read_obj::<u64>(GuestAddress(p * PAGE + 64)).unwrap(), 0);
    }
    write(&mem, &gone, NEW);
    let done = pager.stats();
    assert_eq!(
        done.counters.faults_zero, before.counters.faults_zero,
        "faults on deflated pages"
    );
    assert_eq!(done.pages.resident_pages, PAGES);
    check(&mem, tagged(&gone, NEW));
}

#[test]
fn deflated_pages_are_mapped_only_into_room_under_the_limit() {
    const NEW: u64 = 0x3000_0000_0000_0000;
    const ROOM: u64 = 700;
    let dir = tempfile::tempdir().unwrap();
    let (mem, pager, gone) = ballooned_memory(dir.path());
    let resident = PAGES - gone.len() as u64;
    pager.set_limit(Some((resident + ROOM) * PAGE)).unwrap();
    deflate_scattered(&pager, &gone);
    let s = pager.stats();
    assert_eq!(s.counters.deflated_mapped, ROOM);
    assert_eq!(s.pages.resident_pages, resident + ROOM);
    // The guest takes all of them back: the rest fault in, and reclaim makes room for them.
    write(&mem, &gone, NEW);
    let s = pager.stats();
    assert!(
        s.counters.faults_zero > 0,
        "the pages past the room faulted"
    );
    assert!(s.counters.swap_bytes_written > 0, "reclaim made room");
    check(&mem, tagged(&gone, NEW));
}

#[test]
fn reclaim_drops_deflated_pages_the_guest_left_unwritten_first() {
    const NEW: u64 = 0x3100_0000_0000_0000;
    let dir = tempfile::tempdir().unwrap();
    let (mem, pager, gone) = ballooned_memory(dir.path());
    deflate_scattered(&pager, &gone);
    // The guest writes half of what it got back, and leaves the rest on the zero page.
    let written: Vec<u64> = gone.iter().copied().filter(|p| p % 16 >= 12).collect();
    write(&mem, &written, NEW);
    let unwritten = (gone.len() - written.len()) as u64;
    assert_eq!(pager.stats().pages.resident_pages, PAGES);
    // A limit that leaves room for every page holding data: reclaim drops 3,840 of the 4,096
    // unwritten ones (down to the low watermark, 256 pages under the limit) and writes nothing.
    let limit = PAGES - unwritten + 512;
    pager.set_limit(Some(limit * PAGE)).unwrap();
    wait_until(
        "reclaim under the limit",
        std::time::Duration::from_secs(10),
        || pager.stats().pages.resident_pages <= limit - 256,
    );
    let s = pager.stats();
    assert_eq!(s.counters.swap_bytes_written, 0, "a page was written out");
    assert!(s.counters.reclaimed_zero >= unwritten - 256);
    // Every page holds what it held: the unwritten deflated ones zero, the rest their data.
    let data = tagged(&written, NEW);
    check(&mem, |p| {
        if gone.binary_search(&p).is_ok() && written.binary_search(&p).is_err() {
            vec![0; 4096]
        } else {
            data(p)
        }
    });
}
