//! The virtio-blk device serving a queue notification: the queue, its descriptor chains,
//! request headers and data all in guest RAM from the input, the requests against a real disk
//! image (`memvisor_fuzz::virtio_blk` has the format).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    memvisor_fuzz::virtio_blk::run(data);
});
