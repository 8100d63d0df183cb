//! Pages kept clean that a guest writes through (real userfaultfd, no KVM: threads of this test
//! play the guest). Swapped pages that come back for a read are kept clean, write-protected with
//! their blocks, so reclaim can drop them without a write; once the guest is seen to write
//! nearly every page it gets that way, a write to one makes the clean pages of its 64-page
//! window writable too (`opened_ahead`), so writing through them costs a fault per window
//! instead of one per page.
//! Every byte reads as written afterwards, and pages opened that way are written out, not
//! dropped, when reclaim takes them again.

use std::sync::Arc;
use std::time::Duration;

use common::{config, present, wait_until};
use memvisor_devices::GuestMem;
use memvisor_pager::{NoVcpus, Pager};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

mod common;

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
const MEM: usize = 64 << 20;
const PAGES: u64 = (MEM / PAGE) as u64;
const WAIT: Duration = Duration::from_secs(30);

fn first(p: u64) -> Vec<u8> {
    common::known_page(p, 0x1100_0000_0000_0000)
}

fn second(p: u64) -> Vec<u8> {
    common::known_page(p, 0x2200_0000_0000_0000)
}

fn every_page_is(mem: &GuestMem, pages: &[u64], want: fn(u64) -> Vec<u8>) {
    let mut page = vec![0u8; PAGE];
    for &p in pages {
        mem.read_slice(&mut page, GuestAddress(p * PAGE as u64))
            .unwrap();
        assert!(page == want(p), "page {p} differs");
    }
}

#[test]
fn a_guest_writing_through_pages_kept_clean_opens_them_a_window_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), MEM)]).unwrap());
    for p in 0..PAGES {
        mem.write_slice(&first(p), GuestAddress(p * PAGE as u64))
            .unwrap();
    }
    let pager = Pager::start(
        mem.clone(),
        &config(dir.path(), false),
        Arc::new(NoVcpus::default()),
        |why| panic!("the pager failed: {why}"),
    )
    .unwrap();
    pager.set_limit(Some(16 * MIB)).unwrap();
    wait_until("reclaim swaps out 48 MiB", WAIT, || {
        pager.stats().pages.swapped_pages >= 40 * MIB / PAGE as u64
    });
    let swapped: Vec<u64> = {
        let host = |p: u64| mem.get_host_address(GuestAddress(p * PAGE as u64)).unwrap();
        (0..PAGES).filter(|&p| !present(host(p))).collect()
    };
    // Room for everything: the reads bring the swapped pages back clean.
    pager.set_limit(Some(MEM as u64)).unwrap();
    every_page_is(&mem, &swapped, first);
    let before = pager.stats().counters;
    // The guest writes every page it read back, in order.
    let writer = {
        let (mem, swapped) = (mem.clone(), swapped.clone());
        std::thread::spawn(move || {
            for p in swapped {
                mem.write_slice(&second(p), GuestAddress(p * PAGE as u64))
                    .unwrap();
            }
        })
    };
    writer.join().unwrap();
    let after = pager.stats().counters;
    let faults = after.write_faults - before.write_faults;
    let opened = after.opened_ahead - before.opened_ahead;
    let n = swapped.len() as u64;
    assert!(opened > n / 2, "{opened} of {n} pages opened ahead");
    assert!(
        faults + opened >= n / 2,
        "{faults} write faults, {opened} opened"
    );
    assert!(
        faults < n / 4,
        "{faults} write faults for {n} pages written"
    );
    // Reclaim takes them again: the opened pages were written, so they go to swap with their
    // new content (a drop would bring back the old).
    pager.set_limit(Some(16 * MIB)).unwrap();
    wait_until("reclaim swaps out again", WAIT, || {
        pager.stats().pages.resident_pages <= 16 * MIB / PAGE as u64
    });
    pager.set_limit(Some(MEM as u64)).unwrap();
    every_page_is(&mem, &swapped, second);
}
