//! Never-touched memory taken by a guest, with real userfaultfd (no KVM: the test's own thread
//! plays the guest): the zero window grows while the faults follow each other, stays at its
//! base for scattered touches, and every page holds what was written.

use std::sync::Arc;

use common::{config, known_page};
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
    let faults = pager.snapshot().counters.faults_zero;
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

#[test]
fn scattered_touches_take_the_base_window_each() {
    let dir = tempfile::tempdir().unwrap();
    let (mem, pager) = pager_over_fresh_memory(dir.path());
    let touched: Vec<u64> = (0..PAGES).step_by(128).collect();
    for &p in &touched {
        mem.write_obj(p | TAG, GuestAddress(p * PAGE)).unwrap();
    }
    let s = pager.snapshot();
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
