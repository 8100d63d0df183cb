//! Kernel command line: space-separated `key=value` options selecting the
//! workload and its parameters.

use crate::boot::MAX_CPUS;
use crate::virtio::blk::DISK_ID_MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Print RESULT and exit at once (boot-time measurement).
    Boot,
    /// Write/flush/read-back/compare test of a virtio-blk disk.
    Selftest,
    Seqread,
    Alloc,
    Compile,
    Mapreduce,
    Kv,
    Gcchurn,
    Memhog,
    Toucher,
    Integrity,
    Crashwrite,
    Probe,
    Compress,
    /// Round trips of guest exits and of faults on fresh memory.
    Exits,
}

impl Workload {
    pub const ALL: [(&'static str, Workload); 15] = [
        ("boot", Workload::Boot),
        ("selftest", Workload::Selftest),
        ("seqread", Workload::Seqread),
        ("alloc", Workload::Alloc),
        ("compile", Workload::Compile),
        ("mapreduce", Workload::Mapreduce),
        ("kv", Workload::Kv),
        ("gcchurn", Workload::Gcchurn),
        ("memhog", Workload::Memhog),
        ("toucher", Workload::Toucher),
        ("integrity", Workload::Integrity),
        ("crashwrite", Workload::Crashwrite),
        ("probe", Workload::Probe),
        ("compress", Workload::Compress),
        ("exits", Workload::Exits),
    ];
}

/// Most `key=value` words kept for the workload and the memory manager to interpret.
pub const MAX_ARGS: usize = 32;

pub struct Config {
    pub workload: Workload,
    pub cpus: u32,
    pub tsc_khz: Option<u64>,
    disk: [u8; DISK_ID_MAX],
    disk_len: usize,
    pub selftest_mb: u64,
    pub req_kb: u32,
    pub seed: u64,
    args: [(&'static str, &'static str); MAX_ARGS],
    nr_args: usize,
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
            args: [("", ""); MAX_ARGS],
            nr_args: 0,
        }
    }
}

impl Config {
    /// The value of a workload or memory-manager key, if given.
    pub fn arg(&self, key: &str) -> Option<&'static str> {
        self.args[..self.nr_args]
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// A number argument within `lo..=hi`, `default` when absent. The error names the key
    /// and the accepted range.
    pub fn num(&self, key: &'static str, default: u64, lo: u64, hi: u64) -> Result<u64, BadArg> {
        match self.arg(key) {
            None => Ok(default),
            Some(v) => parse_u64(v)
                .filter(|n| (lo..=hi).contains(n))
                .ok_or(BadArg {
                    key,
                    value: v,
                    lo,
                    hi,
                }),
        }
    }

    /// Prints one warning line for keys in none of the `known` lists (the workload's and the
    /// memory manager's).
    pub fn warn_unknown(&self, known: &[&[&str]]) {
        let mut first = true;
        for (k, _) in &self.args[..self.nr_args] {
            if !known.iter().any(|keys| keys.contains(k)) {
                if first {
                    print!("warning: ignoring unknown cmdline keys:");
                    first = false;
                }
                print!(" {k}");
            }
        }
        if !first {
            println!();
        }
    }
}

/// A workload argument out of range or not a number.
pub struct BadArg {
    pub key: &'static str,
    pub value: &'static str,
    pub lo: u64,
    pub hi: u64,
}

impl core::fmt::Display for BadArg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "bad argument {}={}: expected a number from {} to {}",
            self.key, self.value, self.lo, self.hi
        )
    }
}

/// Parses a decimal or `0x` hexadecimal unsigned number.
pub fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Parses the command line. Invalid values are errors (the run is misconfigured);
/// unknown keys are collected into a single warning line.
pub fn parse(cmdline: &'static str) -> Result<Config, &'static str> {
    let mut cfg = Config::default();

    for token in cmdline.split_ascii_whitespace() {
        let (key, value) = token.split_once('=').unwrap_or((token, ""));
        let number = || parse_u64(value);
        match key {
            "workload" => {
                cfg.workload = Workload::ALL
                    .iter()
                    .find(|(n, _)| *n == value)
                    .map(|(_, w)| *w)
                    .ok_or(
                        "unknown workload= (expected boot, selftest, seqread, alloc, compile, \
                         mapreduce, kv, gcchurn, memhog, toucher, integrity, crashwrite, probe, \
                         compress or exits)",
                    )?
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
                if cfg.nr_args == MAX_ARGS {
                    return Err("too many key=value words (at most 32 besides the fixed ones)");
                }
                cfg.args[cfg.nr_args] = (key, value);
                cfg.nr_args += 1;
            }
        }
    }
    Ok(cfg)
}
