//! A VM as the operator describes it: one schema for `memvisor host`'s config file (`[[vm]]`),
//! the host API's `POST /vms`, and `memvisor run`'s flags where they overlap ([`VmSpec::run_args`]
//! spells a spec as those flags). Sizes are written as in the flags (`512M`, `2G`, bytes) and
//! parsed by one function, [`parse_size`].

#![deny(missing_docs)]

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Parses a size: a number of bytes, or a number with K, M, G or T (binary units; `iB` optional).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let err =
        || format!("'{s}' is not a size; expected a number of bytes or one like 512M, 2G, 64K");
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| err())?;
    let shift = match unit
        .trim_end_matches("iB")
        .trim_end_matches('B')
        .to_ascii_uppercase()
        .as_str()
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(err()),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// How the host-memory pool stores pages (`memvisor run --pool-compress`, `[host] pool_compress`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolCompress {
    /// Whole pages.
    #[default]
    None,
    /// Each page compressed with LZ4 (fastest).
    Lz4,
    /// Each page compressed with Zstandard at level 1 (smaller, slower).
    Zstd,
}

impl PoolCompress {
    /// Every way, in the order of the flag's help.
    pub const ALL: [PoolCompress; 3] = [Self::None, Self::Lz4, Self::Zstd];

    /// The name on the wire and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolCompress::None => "none",
            PoolCompress::Lz4 => "lz4",
            PoolCompress::Zstd => "zstd",
        }
    }
}

impl fmt::Display for PoolCompress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PoolCompress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s.trim())
            .ok_or_else(|| format!("'{s}' is not a pool compression; expected none, lz4 or zstd"))
    }
}

/// Parses a duration: seconds (`30`, `0.5`) or a number with `ms`, `s`, `m` or `h`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let err = || format!("'{s}' is not a duration; expected one like 30s, 500ms, 2m or 1.5");
    let t = s.trim();
    let digits = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: f64 = num.parse().map_err(|_| err())?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(err()),
    };
    if !secs.is_finite() || secs > 1e9 {
        return Err(err());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// Serde for a size in bytes: reads a number of bytes or a string for [`parse_size`]; writes
/// bytes.
pub mod size {
    use super::*;

    /// Writes bytes.
    pub fn serialize<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }

    /// Reads a number of bytes or a size string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(SizeVisitor)
    }

    struct SizeVisitor;

    impl serde::de::Visitor<'_> for SizeVisitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a size: bytes, or a string like \"512M\"")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("{v} is not a size: it is negative")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            parse_size(v).map_err(E::custom)
        }
    }

    /// The same for an optional size.
    pub mod option {
        use super::*;

        /// Writes bytes or null.
        pub fn serialize<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => s.serialize_some(v),
                None => s.serialize_none(),
            }
        }

        /// Reads a size, or nothing.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
            #[derive(Deserialize)]
            struct Wrap(#[serde(with = "super")] u64);
            Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
        }
    }
}

/// Serde for a duration: reads seconds or a string for [`parse_duration`]; writes seconds.
pub mod duration {
    use super::*;
    use std::time::Duration;

    /// Writes seconds.
    pub fn serialize<S: serde::Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(v.as_secs_f64())
    }

    /// Reads seconds or a duration string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }

    struct DurationVisitor;

    impl serde::de::Visitor<'_> for DurationVisitor {
        type Value = Duration;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a duration: seconds, or a string like \"30s\" or \"500ms\"")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
            Ok(Duration::from_secs(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
            u64::try_from(v)
                .map(Duration::from_secs)
                .map_err(|_| E::custom(format!("{v} is not a duration: it is negative")))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Duration, E> {
            parse_duration(&v.to_string()).map_err(E::custom)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
            parse_duration(v).map_err(E::custom)
        }
    }
}

/// A disk as `--disk` spells it: `PATH[,ro][,id=NAME]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSpec {
    /// The image file.
    pub path: String,
    /// The guest cannot write it.
    pub read_only: bool,
    /// The serial the guest reads; `None`: `diskN`.
    pub id: Option<String>,
}

impl DiskSpec {
    /// Parses `PATH[,ro][,id=NAME]`.
    pub fn parse(s: &str) -> Result<DiskSpec, String> {
        let mut parts = s.split(',');
        let path = parts
            .next()
            .filter(|p| !p.is_empty())
            .ok_or("a disk needs a path: PATH[,ro][,id=NAME]")?;
        let mut disk = DiskSpec {
            path: path.to_owned(),
            read_only: false,
            id: None,
        };
        for opt in parts {
            match opt.split_once('=') {
                None if opt == "ro" || opt == "readonly" => disk.read_only = true,
                Some(("id", id))
                    if !id.is_empty()
                        && id.len() <= 20
                        && id.bytes().all(|b| b.is_ascii_graphic()) =>
                {
                    disk.id = Some(id.to_owned());
                }
                Some(("id", id)) => {
                    return Err(format!(
                        "disk id '{id}' must be 1 to 20 printable characters"
                    ))
                }
                _ => {
                    return Err(format!(
                        "unknown disk option '{opt}'; expected ro or id=NAME"
                    ))
                }
            }
        }
        Ok(disk)
    }
}

fn default_shares() -> u64 {
    1000
}

fn default_vcpus() -> u8 {
    1
}

/// Most vCPUs a VM has (as `memvisor run --vcpus`).
pub const MAX_VCPUS: u8 = 64;

/// The smallest resident-memory limit a VM may have (16 MiB): the guest's own code, stacks and
/// queues must stay resident. The pager refuses less; the host never sets less.
pub const MIN_LIMIT: u64 = 16 << 20;

/// The default size of a chunk of pool memory (2 MiB).
pub const DEFAULT_CHUNK_BYTES: u64 = 2 << 20;
/// The largest chunk (1 GiB).
pub const MAX_CHUNK_BYTES: u64 = 1 << 30;
/// A pool chunk is a whole number of these pages.
const PAGE: u64 = 4096;

/// A chunk size that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkSizeError {
    /// A chunk of no bytes.
    #[error("0 is not a size for a pool chunk: give a multiple of 4 KiB, e.g. 64K or 2M")]
    Zero,
    /// A chunk that is not whole pages (its size in bytes).
    #[error("{0} is not a whole number of 4 KiB pages: give a multiple of 4 KiB, e.g. 64K or 2M")]
    NotPages(u64),
    /// A chunk above [`MAX_CHUNK_BYTES`] (its size in bytes).
    #[error("{0} is larger than the largest pool chunk, 1 GiB")]
    TooLarge(u64),
    /// A chunk larger than its pool.
    #[error("{chunk} is larger than the {pool}-byte pool it would be a chunk of: give at most the pool's size")]
    LargerThanPool {
        /// The chunk's size in bytes.
        chunk: u64,
        /// The pool's size in bytes.
        pool: u64,
    },
}

/// Checks a pool chunk size on its own.
pub fn check_chunk_size(chunk: u64) -> Result<(), ChunkSizeError> {
    if chunk == 0 {
        Err(ChunkSizeError::Zero)
    } else if chunk % PAGE != 0 {
        Err(ChunkSizeError::NotPages(chunk))
    } else if chunk > MAX_CHUNK_BYTES {
        Err(ChunkSizeError::TooLarge(chunk))
    } else {
        Ok(())
    }
}

/// The reclamation cache's size when none is given (`--release-cache`, `release_cache`).
pub const DEFAULT_RELEASE_CACHE: u64 = 4 << 20;

/// Checks the size of a VM's reclamation cache (HyperDealer2 §4.2, docs/hd2.md) for a VM of
/// `mem` bytes: whole 4 KiB pages, at most the VM's memory (0: no cache).
pub fn check_release_cache(bytes: u64, mem: u64) -> Result<(), String> {
    check_guest_pages(bytes, mem, "the cache holds released guest pages")
}

/// Checks how much of a VM of `mem` bytes is kept ready for instant release (`--release-ready`,
/// `release_ready`, docs/hd2.md): whole 4 KiB pages, at most the VM's memory (0: none).
pub fn check_release_ready(bytes: u64, mem: u64) -> Result<(), String> {
    check_guest_pages(bytes, mem, "those are guest pages")
}

/// `bytes` is whole 4 KiB pages, at most `mem`; `why` says what the pages are.
fn check_guest_pages(bytes: u64, mem: u64, why: &str) -> Result<(), String> {
    if bytes % PAGE != 0 {
        return Err(format!("{bytes} is not a whole number of 4 KiB pages"));
    }
    if bytes > mem {
        return Err(format!(
            "{bytes} is more than the VM's {mem} bytes of memory ({why})"
        ));
    }
    Ok(())
}

/// Checks a chunk size for a pool of `pool` bytes.
pub fn check_chunk(chunk: u64, pool: u64) -> Result<(), ChunkSizeError> {
    check_chunk_size(chunk)?;
    if chunk > pool {
        return Err(ChunkSizeError::LargerThanPool { chunk, pool });
    }
    Ok(())
}

/// One VM of a host: `[[vm]]` in the config file, the body of `POST /vms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSpec {
    /// Its name on the host: 1 to 32 letters, digits, `-` or `_`.
    pub name: String,
    /// Guest RAM, and the most host memory it is ever given (`--mem`).
    #[serde(with = "size")]
    pub mem: u64,
    /// Host memory it is guaranteed (default 0); admission reserves it.
    #[serde(with = "size", default)]
    pub min: u64,
    /// Its memory shares (default 1000): its claim, against the others', to memory above `min`.
    #[serde(default = "default_shares")]
    pub shares: u64,
    /// vCPUs (`--vcpus`, default 1).
    #[serde(default = "default_vcpus")]
    pub vcpus: u8,
    /// A guest kit workload (`--workload`).
    #[serde(default)]
    pub workload: Option<String>,
    /// A PVH kernel ELF instead of the guest kit (`--kernel`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Extra words for the guest command line (`--cmdline`).
    #[serde(default)]
    pub cmdline: String,
    /// Disks as `--disk` spells them: `PATH[,ro][,id=NAME]`.
    #[serde(default)]
    pub disks: Vec<String>,
    /// A virtio-balloon device (`--balloon`), which the host inflates under pressure.
    #[serde(default)]
    pub balloon: bool,
    /// VSwapper's Swap Mapper (`--mapper`).
    #[serde(default)]
    pub mapper: bool,
    /// VSwapper's False Reads Preventer (`--preventer`).
    #[serde(default)]
    pub preventer: bool,
    /// Tesseract's indirections on the VM's writable disks (`--tesseract`).
    #[serde(default)]
    pub tesseract: bool,
    /// With `tesseract`: the most indirections live at once, 4K to 4 times `mem`
    /// (`--tesseract-max`; default `mem`).
    #[serde(with = "size::option", default)]
    pub tesseract_max: Option<u64>,
    /// With `tesseract`: when the indirection logs are synced, `write` or `flush`
    /// (`--tesseract-sync`; default write).
    #[serde(default)]
    pub tesseract_sync: Option<String>,
    /// With `tesseract`: background defragmentation, `guest` (copied back into the images) or
    /// `store` (grouped in the swap file) (`--tesseract-defrag`; default none).
    #[serde(default)]
    pub tesseract_defrag: Option<String>,
    /// The victim cache, in percent of the VM's limit, 0 to 50 (`--victim-cache`; default 0:
    /// none).
    #[serde(default)]
    pub victim_cache: u8,
    /// How the pager picks victims, `random`, `clock`, `hd2` or `hd2-whole` (`--victims`;
    /// default random); the `hd2` ones need `mapper`.
    #[serde(default)]
    pub victims: Option<String>,
    /// The reclamation cache of instant release (HyperDealer2 §4.2): bytes of released pages'
    /// contents kept in host memory, whole 4 KiB pages up to `mem` (`--release-cache`; default
    /// 4M; 0: none).
    #[serde(with = "size::option", default)]
    pub release_cache: Option<u64>,
    /// Bytes of the first release candidates kept write-protected and checked in the
    /// background, so an instant release only drops them (`--release-ready`; needs `mapper`;
    /// default, with `mapper`: 32M on a host started with `balancing = "hd2"`, else 0: none).
    #[serde(with = "size::option", default)]
    pub release_ready: Option<u64>,
    /// The pager's mode, `full` or `baseline` (`--pager`; default full). A host needs the
    /// pager, so `off` is not offered.
    #[serde(default)]
    pub pager: Option<String>,
    /// Content-based page sharing (`--sharing`): `off` (default: never merged with anything,
    /// so no other VM can time its writes against shared pages) or `host` (identical pages
    /// merged with every other VM of the host that has `host`, through the kernel's KSM).
    #[serde(default)]
    pub sharing: Option<String>,
}

impl VmSpec {
    /// Checks what can be checked without the host: the name, `min <= mem`, shares, vCPUs,
    /// the disk syntax, the victim policy, and that `workload` and `kernel` are not both given.
    pub fn check(&self) -> Result<(), String> {
        self.check_key().map_err(|(_, e)| e)
    }

    /// [`VmSpec::check`], with the key (as the config file spells it) that the problem is about.
    pub fn check_key(&self) -> Result<(), (&'static str, String)> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 32
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err((
                "name",
                format!("VM name '{n}': give 1 to 32 letters, digits, '-' or '_'"),
            ));
        }
        if self.mem < 16 << 20 || self.mem % (1 << 20) != 0 {
            return Err((
                "mem",
                format!(
                    "vm '{n}': mem {} is not usable: give a whole number of MiB, at least 16M",
                    self.mem
                ),
            ));
        }
        if self.min > self.mem {
            return Err((
                "min",
                format!("vm '{n}': min {} is above mem {}", self.min, self.mem),
            ));
        }
        if self.shares == 0 || self.shares > 1_000_000 {
            return Err((
                "shares",
                format!("vm '{n}': shares {} must be 1 to 1000000", self.shares),
            ));
        }
        if self.vcpus == 0 || self.vcpus > MAX_VCPUS {
            return Err((
                "vcpus",
                format!("vm '{n}': {} vCPUs: a VM has 1 to {MAX_VCPUS}", self.vcpus),
            ));
        }
        if self.workload.is_some() && self.kernel.is_some() {
            return Err((
                "workload",
                format!("vm '{n}': give a workload (the guest kit's) or a kernel, not both"),
            ));
        }
        for d in &self.disks {
            DiskSpec::parse(d).map_err(|e| ("disks", format!("vm '{n}': disk '{d}': {e}")))?;
        }
        match self.pager.as_deref() {
            None | Some("full" | "baseline") => {}
            Some(p) => {
                return Err((
                    "pager",
                    format!(
                        "vm '{n}': pager '{p}': expected full or baseline (a host needs the pager)"
                    ),
                ))
            }
        }
        if (self.tesseract || self.victim_cache > 0) && self.pager.as_deref() == Some("baseline") {
            return Err(("tesseract", format!(
                "vm '{n}': tesseract and victim_cache are part of the full pager, not pager 'baseline'"
            )));
        }
        if (self.tesseract_sync.is_some()
            || self.tesseract_defrag.is_some()
            || self.tesseract_max.is_some())
            && !self.tesseract
        {
            return Err(("tesseract", format!(
                "vm '{n}': tesseract_sync, tesseract_defrag and tesseract_max go with tesseract = true"
            )));
        }
        if let Some(m) = self.tesseract_max {
            if m < 4096 || m > self.mem.saturating_mul(4) {
                return Err((
                    "tesseract_max",
                    format!(
                        "vm '{n}': tesseract_max {m}: give 4K to 4 times mem ({} bytes)",
                        self.mem.saturating_mul(4)
                    ),
                ));
            }
        }
        match self.tesseract_sync.as_deref() {
            None | Some("write" | "flush") => {}
            Some(v) => {
                return Err((
                    "tesseract_sync",
                    format!("vm '{n}': tesseract_sync '{v}': expected write or flush"),
                ))
            }
        }
        match self.tesseract_defrag.as_deref() {
            None | Some("guest" | "store") => {}
            Some(v) => {
                return Err((
                    "tesseract_defrag",
                    format!("vm '{n}': tesseract_defrag '{v}': expected guest or store"),
                ))
            }
        }
        if self.victim_cache > 50 {
            return Err((
                "victim_cache",
                format!(
                    "vm '{n}': victim_cache {}: give 0 to 50 (percent of the VM's limit)",
                    self.victim_cache
                ),
            ));
        }
        if let Some(c) = self.release_cache {
            check_release_cache(c, self.mem)
                .map_err(|e| ("release_cache", format!("vm '{n}': release_cache {e}")))?;
        }
        if let Some(r) = self.release_ready {
            check_release_ready(r, self.mem)
                .map_err(|e| ("release_ready", format!("vm '{n}': release_ready {e}")))?;
            if r > 0 && !self.mapper {
                return Err((
                    "release_ready",
                    format!(
                        "vm '{n}': release_ready keeps pages that mirror disk blocks ready: it needs mapper = true"
                    ),
                ));
            }
        }
        match self.victims.as_deref() {
            None | Some("random" | "clock") => {}
            Some("hd2" | "hd2-whole") if !self.mapper => {
                return Err((
                    "victims",
                    format!(
                        "vm '{n}': victims 'hd2' orders the pages that mirror disk blocks: it needs mapper = true"
                    ),
                ))
            }
            Some("hd2" | "hd2-whole") => {}
            Some(v) => {
                return Err((
                    "victims",
                    format!("vm '{n}': victims '{v}': expected random, clock, hd2 or hd2-whole"),
                ))
            }
        }
        match self.sharing.as_deref() {
            None | Some("off" | "host") => {}
            Some(v) => {
                return Err((
                    "sharing",
                    format!("vm '{n}': sharing '{v}': expected off or host"),
                ))
            }
        }
        Ok(())
    }

    /// The `memvisor run` flags for this spec (the host adds its own: socket, swap file,
    /// sampling, limit).
    pub fn run_args(&self) -> Vec<String> {
        let mut a = vec![
            "--mem".to_owned(),
            self.mem.to_string(),
            "--vcpus".to_owned(),
            self.vcpus.to_string(),
        ];
        if let Some(w) = &self.workload {
            a.extend(["--workload".to_owned(), w.clone()]);
        }
        if let Some(k) = &self.kernel {
            a.extend(["--kernel".to_owned(), k.clone()]);
        }
        if !self.cmdline.is_empty() {
            a.extend(["--cmdline".to_owned(), self.cmdline.clone()]);
        }
        for d in &self.disks {
            a.extend(["--disk".to_owned(), d.clone()]);
        }
        for (on, flag) in [
            (self.balloon, "--balloon"),
            (self.mapper, "--mapper"),
            (self.preventer, "--preventer"),
            (self.tesseract, "--tesseract"),
        ] {
            if on {
                a.push(flag.to_owned());
            }
        }
        for (value, flag) in [
            (&self.tesseract_sync, "--tesseract-sync"),
            (&self.tesseract_defrag, "--tesseract-defrag"),
            (&self.victims, "--victims"),
            (&self.sharing, "--sharing"),
        ] {
            if let Some(v) = value {
                a.extend([flag.to_owned(), v.clone()]);
            }
        }
        if self.victim_cache > 0 {
            a.extend(["--victim-cache".to_owned(), self.victim_cache.to_string()]);
        }
        if let Some(m) = self.tesseract_max {
            a.extend(["--tesseract-max".to_owned(), m.to_string()]);
        }
        if let Some(c) = self.release_cache {
            a.extend(["--release-cache".to_owned(), c.to_string()]);
        }
        if let Some(r) = self.release_ready {
            a.extend(["--release-ready".to_owned(), r.to_string()]);
        }
        if let Some(p) = &self.pager {
            a.extend(["--pager".to_owned(), p.clone()]);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(
            parse_duration("30s"),
            Ok(std::time::Duration::from_secs(30))
        );
        assert_eq!(
            parse_duration("250ms"),
            Ok(std::time::Duration::from_millis(250))
        );
        assert_eq!(
            parse_duration("1.5"),
            Ok(std::time::Duration::from_millis(1500))
        );
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("1e300").is_err());
    }

    #[test]
    fn a_spec_reads_sizes_as_strings_or_bytes_and_refuses_unknown_keys() {
        let s: VmSpec =
            serde_json::from_str(r#"{"name":"a","mem":"512M","min":1048576,"balloon":true}"#)
                .unwrap();
        assert_eq!(
            (s.mem, s.min, s.shares, s.vcpus),
            (512 << 20, 1 << 20, 1000, 1)
        );
        assert!(s.check().is_ok());
        for bad in [
            r#"{"name":"a","mem":"512Q"}"#,
            r#"{"name":"a","mem":-5}"#,
            r#"{"name":"a","mem":"512M","colour":"red"}"#,
            r#"{"mem":"512M"}"#,
        ] {
            assert!(serde_json::from_str::<VmSpec>(bad).is_err(), "{bad}");
        }
        for (bad, why) in [
            (r#"{"name":"a b","mem":"512M"}"#, "name"),
            (r#"{"name":"a","mem":"512M","min":"1G"}"#, "above mem"),
            (r#"{"name":"a","mem":"512M","shares":0}"#, "shares"),
            (r#"{"name":"a","mem":"512M","vcpus":65}"#, "vCPUs"),
            (r#"{"name":"a","mem":"512M","disks":["x,zz"]}"#, "disk"),
            (r#"{"name":"a","mem":"512M","victims":"lru"}"#, "victims"),
            (r#"{"name":"a","mem":"512M","sharing":"all"}"#, "sharing"),
            (r#"{"name":"a","mem":"512M","pager":"off"}"#, "pager"),
            (r#"{"name":"a","mem":"1000000"}"#, "whole number"),
            (
                r#"{"name":"a","mem":"512M","tesseract_max":"64M"}"#,
                "go with tesseract",
            ),
            (
                r#"{"name":"a","mem":"512M","tesseract":true,"tesseract_max":"4G"}"#,
                "tesseract_max",
            ),
            (
                r#"{"name":"a","mem":"512M","tesseract":true,"tesseract_defrag":"both"}"#,
                "tesseract_defrag",
            ),
            (
                r#"{"name":"a","mem":"512M","tesseract":true,"tesseract_sync":"never"}"#,
                "tesseract_sync",
            ),
            (
                r#"{"name":"a","mem":"512M","victim_cache":60}"#,
                "victim_cache",
            ),
            (
                r#"{"name":"a","mem":"512M","pager":"baseline","victim_cache":10}"#,
                "full pager",
            ),
            (
                r#"{"name":"a","mem":"512M","victims":"hd2-whole"}"#,
                "needs mapper = true",
            ),
            (
                r#"{"name":"a","mem":"512M","victims":"hd3","mapper":true}"#,
                "expected random, clock, hd2 or hd2-whole",
            ),
            (
                r#"{"name":"a","mem":"512M","release_cache":"1G"}"#,
                "release_cache 1073741824 is more than the VM's",
            ),
            (
                r#"{"name":"a","mem":"512M","release_cache":4097}"#,
                "release_cache 4097 is not a whole number of 4 KiB pages",
            ),
            (
                r#"{"name":"a","mem":"512M","mapper":true,"release_ready":"1G"}"#,
                "release_ready 1073741824 is more than the VM's",
            ),
            (
                r#"{"name":"a","mem":"512M","release_ready":"40M"}"#,
                "release_ready keeps pages that mirror disk blocks ready: it needs mapper = true",
            ),
        ] {
            let s: VmSpec = serde_json::from_str(bad).unwrap();
            let e = s.check().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        for good in ["hd2", "hd2-whole"] {
            let s: VmSpec = serde_json::from_str(&format!(
                r#"{{"name":"a","mem":"512M","victims":"{good}","mapper":true}}"#
            ))
            .unwrap();
            assert!(s.check().is_ok(), "{good}");
            assert!(s
                .run_args()
                .join(" ")
                .contains(&format!("--victims {good}")));
        }
    }

    #[test]
    fn disks_parse_as_the_flag_does() {
        assert_eq!(
            DiskSpec::parse("a.img,ro,id=data"),
            Ok(DiskSpec {
                path: "a.img".into(),
                read_only: true,
                id: Some("data".into())
            })
        );
        assert!(DiskSpec::parse(",ro").is_err());
        assert!(DiskSpec::parse("a,id=").is_err());
    }
}
