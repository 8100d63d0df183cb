//! The PVH kernel loader: `PvhImage::parse` on arbitrary bytes, then, for an image it accepts,
//! `write_boot_data` into 16 MiB of real guest memory, the smallest a VM may have.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use memvisor_boot::{write_boot_data, PvhImage, RamLayout, MIN_MEM_SIZE};
use vm_memory::{GuestAddress, GuestMemoryMmap};

fn guest() -> &'static (GuestMemoryMmap, RamLayout) {
    static GUEST: OnceLock<(GuestMemoryMmap, RamLayout)> = OnceLock::new();
    GUEST.get_or_init(|| {
        let layout = RamLayout::new(MIN_MEM_SIZE).expect("the minimum size is valid");
        let ranges: Vec<(GuestAddress, usize)> = layout
            .regions()
            .iter()
            .map(|r| {
                let size = usize::try_from(r.size).expect("16 MiB fits a usize");
                (GuestAddress(r.guest_addr), size)
            })
            .collect();
        let mem = GuestMemoryMmap::from_ranges(&ranges).expect("16 MiB of anonymous memory");
        (mem, layout)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(image) = PvhImage::parse(data) else {
        return;
    };
    let _ = image.end();
    let (mem, layout) = guest();
    if let Ok(boot) = write_boot_data(mem, layout, &image, data, "console=ttyS0") {
        assert_eq!(boot.entry, image.entry);
    }
});
