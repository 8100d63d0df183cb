//! The host manager's config file: `HostConfig::parse` on arbitrary text.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use memvisor_host::HostConfig;

fuzz_target!(|text: &str| {
    let _ = HostConfig::parse(Path::new("/fuzz/host.toml"), text);
});
