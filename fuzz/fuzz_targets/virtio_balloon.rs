//! The virtio-balloon device over `PlainRam`: inflate and deflate PFN arrays, the statistics
//! buffer and free page reports in descriptor chains from the input, and the VMM's requests in
//! between (`memvisor_fuzz::virtio_balloon` has the format).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    memvisor_fuzz::virtio_balloon::run(data);
});
