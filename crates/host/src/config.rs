//! The host's config file (TOML): `[host]` and one `[[vm]]` per VM ([`VmSpec`], the same
//! schema as the host API's `POST /vms`). Relative paths (`state_dir`, `api_sock`, a VM's
//! `kernel` and `disks`) are relative to the directory of the config file. A file that does not
//! parse, or a value out of range, is an error that names the file, the line and the key.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use memvisor_api::spec::{duration, size};
use memvisor_api::{Balancing, DiskSpec, PoolCompress, VmSpec};
use memvisor_policy::tick::BalloonInflate;
use memvisor_policy::{admit, AdmissionRefusal, Reservations};
use serde::{Deserialize, Deserializer};

/// The config, checked, with paths resolved and defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct HostConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// Memory for every VM together, VMM overheads included.
    pub memory: u64,
    pub idle_tax: f64,
    /// The most of a VM's memory its balloon holds, above 0 and at most 1
    /// (`memvisor_policy::balloon::BALLOON_MAX` unless set).
    pub balloon_max: f64,
    /// How far balloons inflate in the soft state (`deficit` unless set).
    pub balloon_inflate: BalloonInflate,
    /// Whether a guest's re-reads of what its balloon took lower its balloon's cap
    /// (`memvisor_policy::balloon`, on unless set).
    pub balloon_rereads: bool,
    pub sample_pages: u32,
    pub sample_period: Duration,
    pub tick: Duration,
    /// How long the host remembers: ticks (`GET /history`), events (`GET /events`) and VMs
    /// that ended (`GET /vms`) older than this are forgotten.
    pub keep: Duration,
    pub api_sock: PathBuf,
    pub state_dir: PathBuf,
    /// Swap space admission may reserve for the VMs' pagers; `None` until
    /// [`HostConfig::prepare_state_dir`] measures it (90 % of the free space of `state_dir`).
    pub swap: Option<u64>,
    /// Host memory each VMM is taken to need besides guest RAM.
    pub vm_overhead: u64,
    /// Where the live web page is served; `None`: nowhere.
    pub web_addr: Option<SocketAddr>,
    /// Memory of the budget set aside for the VMs' pools (MemFlex); 0: none.
    pub pool: u64,
    /// How every VM's pool keeps pages (`memvisor run --pool-compress`).
    pub pool_compress: PoolCompress,
    /// Size of a chunk of pool memory (`memvisor run --pool-chunk`).
    pub pool_chunk: u64,
    /// What each VMM's seccomp filters do with a call outside them (`memvisor run --seccomp`).
    pub seccomp: crate::process::SeccompMode,
    /// Where `GET /metrics` is also served over TCP; `None`: only on the API socket.
    pub metrics_addr: Option<SocketAddr>,
    /// Where every tick's observations and plan are written as JSON lines
    /// (`memvisor_policy::trace`, for `memvisor sim --replay`); `None`: nowhere.
    pub trace: Option<PathBuf>,
    /// How memory moves between VMs: ESX's balloons and limits alone, or HyperDealer2's
    /// instant releases on top (docs/hd2.md).
    pub balancing: Balancing,
    /// How long a VM is out of balancing (or idle) before its capacity gap is closed.
    pub gap_idle: Duration,
    /// The uids each VM's VMM runs as, jailed (`jail`, `uid_range`; `jailing.rs`); `None`:
    /// the VMMs run unjailed, as the host.
    pub jail: Option<std::ops::RangeInclusive<u32>>,
    /// The group that may use the host's API socket besides its owner (`group`).
    pub group: Option<u32>,
    pub vms: Vec<VmSpec>,
    /// For each VM of `vms`, the line of each of its keys in the file (and `[[vm]]`, the line
    /// of its table header), so that a problem found after parsing names its line.
    pub vm_lines: Vec<BTreeMap<String, usize>>,
}

/// Host memory a memvisor VMM takes besides its guest's RAM: code, thread stacks, the pager's
/// page table and I/O buffers, device queues. Measured as the RSS of a VMM running a 512 MiB
/// guest minus its resident guest pages (docs/host.md).
pub const DEFAULT_VM_OVERHEAD: u64 = 24 << 20;

/// A field of `/proc/meminfo` (`MemTotal`, `MemAvailable`, ...) in bytes.
pub fn meminfo(field: &str) -> Result<u64, String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| format!("cannot read /proc/meminfo: {e}"))?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {field} in /proc/meminfo"))?;
    Ok(kib * 1024)
}

/// Host memory left out of the default budget: 10 % of RAM, at least 1 GiB.
fn default_budget() -> Result<u64, String> {
    let total = meminfo("MemTotal").map_err(|e| format!("default memory budget: {e}"))?;
    Ok(total.saturating_sub((total / 10).max(1 << 30)))
}

/// Free space in the file system of `dir` (the default swap for admission: 90 % of it).
fn free_space(dir: &Path) -> Result<u64, String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} has a NUL byte", dir.display()))?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "cannot measure free space in {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(st.f_bavail.saturating_mul(st.f_frsize) / 10 * 9)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    host: HostSection,
    #[serde(default)]
    vm: Vec<toml::Spanned<VmSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HostSection {
    #[serde(with = "size::option")]
    memory: Option<u64>,
    #[serde(deserialize_with = "tax")]
    idle_tax: f64,
    #[serde(deserialize_with = "balloon_max")]
    balloon_max: f64,
    balloon_inflate: BalloonInflate,
    balloon_rereads: bool,
    #[serde(deserialize_with = "sample_pages")]
    sample_pages: u32,
    #[serde(deserialize_with = "sample_period")]
    sample_period: Duration,
    #[serde(deserialize_with = "tick")]
    tick: Duration,
    #[serde(deserialize_with = "keep")]
    keep: Duration,
    api_sock: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    #[serde(with = "size::option")]
    swap: Option<u64>,
    #[serde(with = "size::option")]
    vm_overhead: Option<u64>,
    #[serde(deserialize_with = "web_addr")]
    web_addr: Option<SocketAddr>,
    #[serde(with = "size::option")]
    pool: Option<u64>,
    pool_compress: PoolCompress,
    #[serde(with = "size::option")]
    pool_chunk: Option<u64>,
    seccomp: crate::process::SeccompMode,
    #[serde(deserialize_with = "metrics_addr")]
    metrics_addr: Option<SocketAddr>,
    trace: Option<PathBuf>,
    #[serde(deserialize_with = "balancing")]
    balancing: Balancing,
    #[serde(deserialize_with = "gap_idle")]
    gap_idle: Duration,
    jail: bool,
    uid_range: Option<String>,
    group: Option<String>,
}

impl Default for HostSection {
    fn default() -> Self {
        HostSection {
            memory: None,
            idle_tax: 0.75,
            balloon_max: memvisor_policy::balloon::BALLOON_MAX,
            balloon_inflate: BalloonInflate::default(),
            balloon_rereads: true,
            sample_pages: 100,
            sample_period: Duration::from_secs(30),
            tick: Duration::from_millis(250),
            keep: Duration::from_secs(3600),
            api_sock: None,
            state_dir: None,
            swap: None,
            vm_overhead: None,
            web_addr: None,
            pool: None,
            pool_compress: PoolCompress::None,
            pool_chunk: None,
            seccomp: crate::process::SeccompMode::On,
            metrics_addr: None,
            trace: None,
            balancing: Balancing::Balloon,
            gap_idle: Duration::from_secs(10),
            jail: true,
            uid_range: None,
            group: None,
        }
    }
}

fn balancing<'de, D: Deserializer<'de>>(d: D) -> Result<Balancing, D::Error> {
    let v = String::deserialize(d)?;
    match v.as_str() {
        "balloon" => Ok(Balancing::Balloon),
        "hd2" => Ok(Balancing::Hd2),
        _ => Err(serde::de::Error::custom(format!(
            "balancing '{v}': give \"balloon\" (ESX's balloons and limits) or \"hd2\" (HyperDealer2's instant releases on top)"
        ))),
    }
}

fn gap_idle<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    ranged(
        d,
        "gap_idle",
        Duration::from_millis(100),
        Duration::from_secs(3600),
    )
}

fn tax<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "idle_tax {v}: give a fraction from 0 up to (not including) 1, e.g. 0.75"
        )))
    }
}

fn balloon_max<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "balloon_max {v}: give the most of a VM's memory its balloon may hold, a fraction above 0 and at most 1, e.g. 0.65"
        )))
    }
}

fn sample_pages<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v <= 10_000 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "sample_pages {v}: give 0 (no sampling) to 10000"
        )))
    }
}

fn ranged<'de, D: Deserializer<'de>>(
    d: D,
    key: &str,
    lo: Duration,
    hi: Duration,
) -> Result<Duration, D::Error> {
    let v = duration::deserialize(d)?;
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "{key} {v:?}: give {lo:?} to {hi:?}"
        )))
    }
}

fn sample_period<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    ranged(
        d,
        "sample_period",
        Duration::from_millis(100),
        Duration::from_secs(3600),
    )
}

fn keep<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    ranged(
        d,
        "keep",
        Duration::from_secs(1),
        Duration::from_secs(7 * 24 * 3600),
    )
}

fn tick<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    ranged(
        d,
        "tick",
        Duration::from_millis(50),
        Duration::from_secs(60),
    )
}

/// A TCP address to listen on (`metrics_addr`, `web_addr`). A port alone (`"9464"` or
/// `":9464"`) and `localhost:PORT` are the loopback address 127.0.0.1: reachable only from this
/// machine. Any other address must be an IP address spelled out (`"0.0.0.0:9464"`,
/// `"[::]:9464"`, `"10.0.0.5:9464"`), so what is served there (without authentication) reaches
/// another machine only when the config says so in so many words; host names other than
/// `localhost` are refused rather than resolved.
pub fn parse_listen_addr(key: &str, s: &str) -> Result<SocketAddr, String> {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let port = |p: &str| {
        p.parse::<u16>().map_err(|_| {
            format!("{key} '{s}': '{p}' is not a port (0 to 65535); give e.g. \"127.0.0.1:9464\"")
        })
    };
    let s = s.trim();
    if s.is_empty() {
        return Err(format!(
            "{key} is empty: give e.g. \"127.0.0.1:9464\", or leave the key out"
        ));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(SocketAddr::new(loopback, port(s)?));
    }
    if let Some(p) = s.strip_prefix(':').filter(|p| !p.contains(':')) {
        return Ok(SocketAddr::new(loopback, port(p)?));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    match s.rsplit_once(':') {
        Some(("localhost", p)) => Ok(SocketAddr::new(loopback, port(p)?)),
        Some((host, p)) if host.parse::<IpAddr>().is_ok() || host.starts_with('[') => {
            port(p)?;
            Err(format!("{key} '{s}': not an address and port; an IPv6 address goes in brackets, e.g. \"[::1]:9464\""))
        }
        Some((host, _)) => Err(format!(
            "{key} '{s}': '{host}' is a host name; give an IP address (\"127.0.0.1:9464\" for this machine only, \"0.0.0.0:9464\" for every interface) or a port alone for loopback"
        )),
        None => Err(format!(
            "{key} '{s}': give an address and port, e.g. \"127.0.0.1:9464\", or a port alone for loopback"
        )),
    }
}

fn metrics_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen_addr("metrics_addr", &s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn web_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen_addr("web_addr", &s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// For each `[[vm]]` table of `text`, in order, the line of each of its keys. A file that does
/// not parse gives none (its parse error already names the line).
fn vm_key_lines(text: &str) -> Vec<BTreeMap<String, usize>> {
    #[derive(Deserialize)]
    struct Tables {
        #[serde(default)]
        vm: Vec<BTreeMap<String, toml::Spanned<toml::Value>>>,
    }
    let Ok(t) = toml::from_str::<Tables>(text) else {
        return Vec::new();
    };
    t.vm.into_iter()
        .map(|keys| {
            keys.into_iter()
                .map(|(k, v)| (k, line_of(text, v.span().start)))
                .collect()
        })
        .collect()
}

/// Problems with what a VM needs of this host: a kernel or a disk image that does not exist or
/// is not a regular file, sharing on a kernel without KSM, as (the `[[vm]]` key, a sentence).
/// Paths are taken as they are (resolve them first).
pub fn missing_files(spec: &VmSpec) -> Vec<(&'static str, String)> {
    let n = &spec.name;
    let mut problems = Vec::new();
    let check = |what: &str, p: &str| match std::fs::metadata(p) {
        Ok(m) if m.is_file() => None,
        Ok(_) => Some(format!("vm '{n}': {what} {p} is not a file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "vm '{n}': {what} {p} does not exist{}",
            if what == "disk" {
                " (make one with `memvisor mkdisk data --out FILE --size SIZE`, or `truncate -s SIZE FILE` for an empty one)"
            } else {
                ""
            }
        )),
        Err(e) => Some(format!("vm '{n}': {what} {p}: {e}")),
    };
    if let Some(k) = &spec.kernel {
        problems.extend(check("kernel", k).map(|e| ("kernel", e)));
    }
    for d in &spec.disks {
        if let Ok(d) = DiskSpec::parse(d) {
            problems.extend(check("disk", &d.path).map(|e| ("disks", e)));
        }
    }
    if spec.sharing.as_deref() == Some("host") && !crate::ksm::available() {
        problems.push((
            "sharing",
            format!(
                "vm '{n}': sharing \"host\" needs the kernel's KSM, and this host has none ({} is missing)",
                crate::ksm::KSM_DIR
            ),
        ));
    }
    problems
}

/// The nearest directory at or above `dir` that exists (the state directory is only made when
/// the host starts).
fn nearest_existing(dir: &Path) -> &Path {
    dir.ancestors()
        .find(|d| d.is_dir())
        .unwrap_or(Path::new("/"))
}

/// `p` made absolute against `base` when relative.
fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    }
}

/// A VM spec with its kernel and disk paths made absolute against `base`.
pub fn resolve_paths(mut spec: VmSpec, base: &Path) -> Result<VmSpec, String> {
    if let Some(k) = &spec.kernel {
        spec.kernel = Some(resolve(base, Path::new(k)).display().to_string());
    }
    for d in &mut spec.disks {
        let parsed = DiskSpec::parse(d)?;
        let path = resolve(base, Path::new(&parsed.path)).display().to_string();
        let mut s = path;
        if parsed.read_only {
            s.push_str(",ro");
        }
        if let Some(id) = parsed.id {
            s.push_str(",id=");
            s.push_str(&id);
        }
        *d = s;
    }
    Ok(spec)
}

impl HostConfig {
    /// Reads and checks the config at `path`: its syntax and values ([`HostConfig::parse`]),
    /// then what needs the machine ([`HostConfig::problems`]). Every problem is one line of the
    /// error, naming the file, the line and the key.
    pub fn load(path: &Path) -> Result<HostConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let (mut config, mut problems) = Self::parse_all(path, &text)?;
        if config.swap.is_none() {
            config.swap = Some(free_space(nearest_existing(&config.state_dir))?);
        }
        problems.extend(config.problems());
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems.join("\n"))
        }
    }

    /// What stops a VM of the config from ever starting, one line each: kernels and disk
    /// images that do not exist, and VMs that admission control (ESX §6.2: `min` plus overhead
    /// in memory, `mem - min` in swap) would refuse even alone on this host. VMs that fit alone
    /// but not beside the ones above them are no mistake of the file: the host refuses them at
    /// start (state `refused`), as ESX refuses to power on a VM whose reservation does not fit.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = memvisor_seccomp::check_kernel(self.seccomp.mode()) {
            problems.push(format!("{}: [host] seccomp: {e}", self.path.display()));
        }
        let empty = Reservations {
            memory: self.memory - self.pool,
            swap: self.swap.unwrap_or(0),
            ..Reservations::default()
        };
        for (i, spec) in self.vms.iter().enumerate() {
            let keys = self.vm_lines.get(i);
            let at = |key: &str, e: &str| match keys.and_then(|k| k.get(key)) {
                Some(line) => format!("{}: line {line}: [[vm]] {key}: {e}", self.path.display()),
                None => format!(
                    "{}: line {}: [[vm]]: {e}",
                    self.path.display(),
                    keys.and_then(|k| k.get("[[vm]]")).copied().unwrap_or(0)
                ),
            };
            for (key, e) in missing_files(spec) {
                problems.push(at(key, &e));
            }
            if let Err(e) = admit(&empty, spec.min, spec.mem, self.vm_overhead) {
                let key = match e {
                    AdmissionRefusal::Memory { .. } if spec.min > 0 => "min",
                    _ => "mem",
                };
                let budget = format!(
                    "[host] memory {}, pool {}, swap {}, vm_overhead {}",
                    self.memory,
                    self.pool,
                    self.swap.unwrap_or(0),
                    self.vm_overhead
                );
                let e = format!(
                    "vm '{}' can never be admitted on this host: {e} ({budget})",
                    spec.name
                );
                problems.push(at(key, &e));
            }
        }
        problems
    }

    /// Checks `text`, the content of the config at `path`.
    pub fn parse(path: &Path, text: &str) -> Result<HostConfig, String> {
        let (config, problems) = Self::parse_all(path, text)?;
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems.join("\n"))
        }
    }

    /// Checks `text`: an error for a file that cannot be read as a config at all, else the
    /// config of the VMs that passed with one line for each VM that did not.
    fn parse_all(path: &Path, text: &str) -> Result<(HostConfig, Vec<String>), String> {
        let file: File = toml::from_str(text)
            .map_err(|e| format!("{}: {}", path.display(), e.to_string().trim_end()))?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let base = std::path::absolute(base)
            .map_err(|e| format!("{}: cannot resolve its directory: {e}", path.display()))?;
        let h = file.host;
        let state_dir = match &h.state_dir {
            Some(d) => resolve(&base, d),
            None => base.join(format!(
                "{}.state",
                path.file_stem().unwrap_or_default().to_string_lossy()
            )),
        };
        let api_sock = match &h.api_sock {
            Some(s) => resolve(&base, s),
            None => state_dir.join("host.sock"),
        };
        let memory = match h.memory {
            Some(m) => m,
            None => default_budget()?,
        };
        if h.pool.unwrap_or(0) >= memory {
            return Err(format!(
                "{}: [host] pool {} leaves nothing of the memory budget {memory} to the VMs",
                path.display(),
                h.pool.unwrap_or(0)
            ));
        }
        if let (Some(pool), Ok(avail)) = (h.pool, meminfo("MemAvailable")) {
            if pool > avail {
                return Err(format!(
                    "{}: [host] pool {pool} is more than the {avail} bytes of memory this host has available",
                    path.display()
                ));
            }
        }
        let pool_chunk = h
            .pool_chunk
            .unwrap_or(memvisor_api::spec::DEFAULT_CHUNK_BYTES);
        let chunk_ok = match h.pool {
            Some(pool) if pool > 0 => memvisor_api::spec::check_chunk(pool_chunk, pool),
            _ => memvisor_api::spec::check_chunk_size(pool_chunk),
        };
        if let Err(e) = chunk_ok {
            return Err(format!("{}: [host] pool_chunk {e}", path.display()));
        }
        let in_host = |e: String| format!("{}: [host] {e}", path.display());
        let uids = match &h.uid_range {
            Some(r) => crate::jailing::parse_range(r).map_err(in_host)?,
            None => crate::jailing::DEFAULT_UIDS,
        };
        let group = h
            .group
            .as_deref()
            .map(crate::jailing::group_id)
            .transpose()
            .map_err(in_host)?;
        let lines = vm_key_lines(text);
        let mut vms: Vec<VmSpec> = Vec::new();
        let mut vm_lines = Vec::new();
        let mut problems = Vec::new();
        for (i, s) in file.vm.into_iter().enumerate() {
            let table = line_of(text, s.span().start);
            let keys = lines.get(i).cloned().unwrap_or_default();
            let spec = s.into_inner();
            let at = |key: &str, e: String| match keys.get(key) {
                Some(line) => format!("{}: line {line}: [[vm]] {key}: {e}", path.display()),
                None => format!("{}: line {table}: [[vm]]: {e}", path.display()),
            };
            if let Err((key, e)) = spec.check_key() {
                problems.push(at(key, e));
                continue;
            }
            if vms.iter().any(|v| v.name == spec.name) {
                problems.push(at("name", format!("a second VM named '{}'", spec.name)));
                continue;
            }
            match resolve_paths(spec, &base) {
                Ok(spec) => {
                    let mut keys = keys.clone();
                    keys.insert("[[vm]]".into(), table);
                    vms.push(spec);
                    vm_lines.push(keys);
                }
                Err(e) => problems.push(at("disks", e)),
            }
        }
        let config = HostConfig {
            path: path.to_owned(),
            memory,
            idle_tax: h.idle_tax,
            balloon_max: h.balloon_max,
            balloon_inflate: h.balloon_inflate,
            balloon_rereads: h.balloon_rereads,
            sample_pages: h.sample_pages,
            sample_period: h.sample_period,
            tick: h.tick,
            keep: h.keep,
            api_sock,
            swap: h.swap,
            state_dir,
            vm_overhead: h.vm_overhead.unwrap_or(DEFAULT_VM_OVERHEAD),
            web_addr: h.web_addr,
            pool: h.pool.unwrap_or(0),
            pool_compress: h.pool_compress,
            pool_chunk,
            seccomp: h.seccomp,
            metrics_addr: h.metrics_addr,
            trace: h.trace.as_deref().map(|t| resolve(&base, t)),
            balancing: h.balancing,
            gap_idle: h.gap_idle,
            jail: h.jail.then_some(uids),
            group,
            vms,
            vm_lines,
        };
        Ok((config, problems))
    }

    /// Creates the state directory and, when `swap` was not given, measures its free space.
    pub fn prepare_state_dir(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.state_dir).map_err(|e| {
            format!(
                "cannot create the state directory {}: {e}",
                self.state_dir.display()
            )
        })?;
        if self.swap.is_none() {
            self.swap = Some(free_space(&self.state_dir)?);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
