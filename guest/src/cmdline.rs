//! Kernel command line: space-separated `key=value` options selecting the
//! workload and its parameters.

use crate::boot::MAX_CPUS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Print RESULT and exit at once (boot-time measurement).
    Boot,
    /// Write/flush/read-back/compare test of a virtio-blk disk.
    Selftest,
}

/// Longest device ID virtio-blk GET_ID can return.
pub const DISK_ID_MAX: usize = 20;

pub struct Config {
    pub workload: Workload,
    pub cpus: u32,
    pub tsc_khz: Option<u64>,
    disk: [u8; DISK_ID_MAX],
    disk_len: usize,
    pub selftest_mb: u64,
    pub req_kb: u32,
    pub seed: u64,
}

impl Config {
    /// The `disk=` ID, or None for "first block device".
    pub fn disk(&self) -> Option<&[u8]> {
        (self.disk_len > 0).then(|| &self.disk[..self.disk_len])
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workload: Workload::Boot,
            cpus: 1,
            tsc_khz: None,
            disk: [0; DISK_ID_MAX],
            disk_len: 0,
            selftest_mb: 16,
            req_kb: 64,
            seed: 1,
        }
    }
}

/// Parses a decimal or `0x` hexadecimal unsigned number.
fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Parses the command line. Invalid values are errors (the run is misconfigured);
/// unknown keys are collected into a single warning line.
pub fn parse(cmdline: &str) -> Result<Config, &'static str> {
    let mut cfg = Config::default();
    let mut unknown_seen = false;

    for token in cmdline.split_ascii_whitespace() {
        let (key, value) = token.split_once('=').unwrap_or((token, ""));
        let number = || parse_u64(value);
        match key {
            "workload" => {
                cfg.workload = match value {
                    "boot" => Workload::Boot,
                    "selftest" => Workload::Selftest,
                    _ => return Err("unknown workload= (expected boot or selftest)"),
                }
            }
            "cpus" => {
                let n = number()
                    .filter(|&n| n >= 1)
                    .ok_or("cpus= must be a number >= 1")?;
                if n > MAX_CPUS as u64 {
                    println!("warning: cpus={n} clamped to {MAX_CPUS}");
                }
                cfg.cpus = n.min(MAX_CPUS as u64) as u32;
            }
            "tsc_khz" => {
                cfg.tsc_khz = Some(
                    number()
                        .filter(|&n| n > 0)
                        .ok_or("tsc_khz= must be a number > 0")?,
                )
            }
            "disk" => {
                if value.is_empty() || value.len() > DISK_ID_MAX {
                    return Err("disk= must be 1..20 characters");
                }
                cfg.disk[..value.len()].copy_from_slice(value.as_bytes());
                cfg.disk_len = value.len();
            }
            "selftest_mb" => {
                cfg.selftest_mb = number()
                    .filter(|&n| n > 0)
                    .ok_or("selftest_mb= must be a number > 0")?
            }
            "req_kb" => {
                let kb = number()
                    .filter(|&n| n > 0 && n <= 16384)
                    .ok_or("req_kb= must be 1..16384")?;
                let fixed = (kb.max(4) / 4) * 4;
                if fixed != kb {
                    println!("warning: req_kb={kb} adjusted to {fixed} (min 4, multiple of 4)");
                }
                cfg.req_kb = fixed as u32;
            }
            "seed" => cfg.seed = number().ok_or("seed= must be a number")?,
            _ => {
                if !unknown_seen {
                    print!("warning: ignoring unknown cmdline keys:");
                    unknown_seen = true;
                }
                print!(" {key}");
            }
        }
    }
    if unknown_seen {
        println!();
    }
    Ok(cfg)
}
