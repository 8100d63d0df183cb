//! Time from the TSC: where its frequency comes from (command line, else the
//! hypervisor CPUID leaf 0x40000010) and conversion of cycle counts.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::cpu::{cpuid, rdtsc};

/// TSC frequency in kHz; 0 = unknown.
static TSC_KHZ: AtomicU64 = AtomicU64::new(0);
/// Frequency assumed for timeouts only, when the real one is unknown.
const FALLBACK_KHZ: u64 = 3_000_000;

/// Establishes the TSC frequency; returns it and where it came from.
pub fn init(cmdline_khz: Option<u64>) -> Option<(u64, &'static str)> {
    let found = match cmdline_khz {
        Some(khz) => Some((khz, "cmdline")),
        None => {
            // Hypervisor timing leaf (KVM/VMware convention): EAX = TSC kHz.
            let (max_leaf, ..) = cpuid(0x4000_0000, 0);
            let (khz, ..) = if max_leaf >= 0x4000_0010 {
                cpuid(0x4000_0010, 0)
            } else {
                (0, 0, 0, 0)
            };
            (khz != 0).then_some((u64::from(khz), "cpuid 0x40000010"))
        }
    };
    if let Some((khz, _)) = found {
        TSC_KHZ.store(khz, Ordering::Relaxed);
    }
    found
}

pub fn khz() -> Option<u64> {
    match TSC_KHZ.load(Ordering::Relaxed) {
        0 => None,
        khz => Some(khz),
    }
}

/// TSC value `ms` milliseconds from now (uses a 3 GHz guess if the frequency is unknown).
pub fn deadline_after_ms(ms: u64) -> u64 {
    rdtsc().saturating_add(ms.saturating_mul(khz().unwrap_or(FALLBACK_KHZ)))
}

/// Milliseconds since the TSC started (uses a 3 GHz guess if the frequency is unknown).
pub fn now_ms() -> u64 {
    rdtsc() / khz().unwrap_or(FALLBACK_KHZ)
}

/// Converts a cycle count to microseconds, if the frequency is known.
pub fn cycles_to_us(cycles: u64) -> Option<u64> {
    khz().map(|khz| ((u128::from(cycles) * 1000) / u128::from(khz)) as u64)
}

/// Formats microseconds as milliseconds with three decimals ("12.345").
pub struct Millis(pub u64);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}
