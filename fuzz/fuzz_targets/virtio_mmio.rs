//! The virtio-mmio transport with a virtio-blk device or a balloon behind it: register reads
//! and writes as a guest's MMIO exits deliver them, the driver set-up to DRIVER_OK, queue
//! notifications and guest RAM from the input (`memvisor_fuzz::virtio_mmio` has the format).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    memvisor_fuzz::virtio_mmio::run(data);
});
