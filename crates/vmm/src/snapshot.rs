//! Snapshots of a VM (`PUT /vm/snapshot`, `memvisor run --restore`): the format, taking one
//! from a running VM ([`Snapshotter::take`]) and reading one back, checked ([`load`]).
//!
//! A snapshot is a directory of two files:
//! - `vm.state`: the magic `MVSNAPST`, the format version (u32, little-endian), the CRC-32 of
//!   the rest, its length (u64), then JSON ([`VmSnapshot`]): the VM's size and vCPU count, the
//!   disks it refers to (with their size and modification time), the vCPUs' and the in-kernel
//!   devices' state, every virtio transport's, the serial port's, and what each guest page was
//!   (`memvisor_pager::SavedPages`);
//! - `memory`: guest page `p` at byte `p * 4096`, a hole where the page was not copied (zero,
//!   released, or recorded as a disk block).
//!
//! Taking one, step by step: the vCPUs are paused and each saves its own state on its own
//! thread (`Vcpus::save_all`); every transport's lock is taken in slot order, which waits for
//! the request its device thread is serving, and each serves what the driver made available
//! since (so every request is done before the snapshot, none half-seen or run again after a
//! restore) and saves itself; the locks are held until the end, so no device moves. Then the
//! VM's PIC, IOAPIC and clock, the serial port, and guest memory through the pager
//! (`Pager::save`: each page from where it is), the disks' identities, and `vm.state` last (a
//! directory without it is not a snapshot). The VM then runs on, or ends (`stop`).
//!
//! Where: an unjailed VMM writes where it is told. A jailed one writes only into the directory
//! it was given (`--snapshot-dir`, bound into its jail at `jail::SNAPSHOTS`), a snapshot being
//! one name there ([`SnapshotPlace::resolve`]). Each file is created new, never through a
//! symbolic link (`O_CREAT | O_EXCL | O_NOFOLLOW`, which the API thread's filter insists on),
//! and [`load`] opens a snapshot's directory and files without following a link either: a
//! snapshot a jailed VMM wrote is read back by root, before any jail, and must not point it
//! anywhere else.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use memvisor_api::{SnapshotRequest, SnapshotResult};
use memvisor_devices::serial::{Serial, SerialSnapshot};
use memvisor_devices::virtio::mmio::{MmioTransport, TransportSnapshot};
use memvisor_devices::GuestMem;
use memvisor_pager::store::saved::SavedMemory;
use memvisor_pager::store::PageStore;
use memvisor_pager::{SavedKind, SavedPages};
use serde::{Deserialize, Serialize};
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

use crate::cpu_state::{VcpuState, VmKvmState};
use crate::error_line::error_line;
use crate::lifecycle::Lifecycle;

/// The first bytes of `vm.state`.
pub const MAGIC: &[u8; 8] = b"MVSNAPST";
/// The format version this memvisor writes and reads (2: the page runs in binary after the
/// JSON).
pub const VERSION: u32 = 2;
pub const STATE_FILE: &str = "vm.state";
pub const MEMORY_FILE: &str = "memory";
/// Magic, version, CRC-32 and length.
const HEADER: usize = 8 + 4 + 4 + 8;

/// A disk the snapshot refers to, as it was when the snapshot was taken: a restore refuses an
/// image that has changed since (its pages recorded as disk blocks would read other data).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskIdentity {
    pub id: String,
    pub path: PathBuf,
    pub read_only: bool,
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub modified_ns: i128,
}

/// A disk as the VM is given it: its id, image and whether it is read-only.
pub type DiskSpec = (String, PathBuf, bool);

impl DiskIdentity {
    /// `spec`'s identity, from `m`, its image's metadata.
    fn of(
        (id, path, read_only): &DiskSpec,
        m: &std::fs::Metadata,
    ) -> std::io::Result<DiskIdentity> {
        Ok(DiskIdentity {
            id: id.clone(),
            // No `getcwd` for a path that is absolute already: a filtered thread may not make it.
            path: match path.is_absolute() {
                true => path.clone(),
                false => std::path::absolute(path)?,
            },
            read_only: *read_only,
            size: m.len(),
            modified_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// What `vm.state` holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct VmSnapshot {
    pub mem_size: u64,
    pub vcpus: u8,
    pub disks: Vec<DiskIdentity>,
    pub balloon: bool,
    pub vm: VmKvmState,
    pub cpus: Vec<VcpuState>,
    pub serial: SerialSnapshot,
    /// The virtio transports with a device, in slot order (the disks, then the balloon).
    pub transports: Vec<TransportSnapshot>,
    pub pages: SavedPages,
}

/// What a VM is made of apart from its state: what a migration's destination builds before
/// the source pauses the VM (its memory's size, its vCPUs, its balloon, its disks by id).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmShape {
    pub mem_size: u64,
    pub vcpus: u8,
    pub balloon: bool,
    pub disks: Vec<String>,
}

impl VmSnapshot {
    /// The shape of the VM this state is of.
    pub fn shape(&self) -> VmShape {
        VmShape {
            mem_size: self.mem_size,
            vcpus: self.vcpus,
            balloon: self.balloon,
            disks: self.disks.iter().map(|d| d.id.clone()).collect(),
        }
    }
}

/// Why a snapshot cannot be read, or does not fit the VM asked for.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot directory {0} does not exist")]
    Missing(PathBuf),
    #[error("{0}: not a memvisor snapshot (it has no {STATE_FILE})")]
    NoState(PathBuf),
    #[error("{0}: not a memvisor snapshot (wrong magic)")]
    NotASnapshot(PathBuf),
    #[error("{path}: snapshot format version {found}; this memvisor reads version {VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: truncated snapshot ({what})")]
    Truncated { path: PathBuf, what: String },
    #[error("{path}: corrupt snapshot ({why})")]
    Corrupt { path: PathBuf, why: String },
    #[error("cannot read snapshot file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: a symbolic link; give the snapshot's directory itself (a snapshot is read without following links)")]
    Link(PathBuf),
    #[error("{0}")]
    Mismatch(String),
}

/// Where a VMM may write snapshots (the module's documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotPlace {
    /// Wherever it is told: an unjailed VMM.
    Anywhere,
    /// A jailed VMM: only into its `--snapshot-dir` (this host path, seen in the jail at
    /// `jail::SNAPSHOTS`); `None`: it was given none, and takes no snapshots.
    Jailed(Option<PathBuf>),
}

impl SnapshotPlace {
    /// Where a snapshot asked for as `asked` is written by this VMM, and where the host sees
    /// it. Jailed: `asked` is one name, or the snapshot directory's host path and one name;
    /// anything else (an absolute path elsewhere, `..`, a name with a `/`) is refused, and the
    /// refusal says what to give.
    pub fn resolve(&self, asked: &str) -> Result<(PathBuf, PathBuf), String> {
        let host = match self {
            SnapshotPlace::Anywhere => return Ok((PathBuf::from(asked), PathBuf::from(asked))),
            SnapshotPlace::Jailed(None) => {
                return Err(format!(
                    "cannot write {asked}: this VMM is jailed and was given no directory for \
                     snapshots; start it with --snapshot-dir DIR \
                     (docs/security.md#snapshots-and-migrations-jailed)"
                ))
            }
            SnapshotPlace::Jailed(Some(host)) => host,
        };
        let refused = || {
            format!(
                "cannot write {asked}: this VMM is jailed and writes snapshots only into {}: \
                 give a name there (e.g. \"snap1\", or {}/snap1), one directory, without '/' \
                 or '..'",
                host.display(),
                host.display()
            )
        };
        let asked_path = Path::new(asked);
        let rel = if asked_path.is_absolute() {
            asked_path.strip_prefix(host).map_err(|_| refused())?
        } else {
            asked_path
        };
        let mut parts = rel.components();
        let name = match (parts.next(), parts.next()) {
            (Some(std::path::Component::Normal(name)), None) => name,
            _ => return Err(refused()),
        };
        Ok((
            Path::new(crate::jail::SNAPSHOTS).join(name),
            host.join(name),
        ))
    }
}

/// A snapshot read from its directory and checked (or received by a migration's destination,
/// `migrate/incoming.rs`): its state, and where its copied pages are read.
pub struct Snapshot {
    /// The directory, or the address a migration came in on.
    pub dir: PathBuf,
    pub state: VmSnapshot,
    /// Guest page `p` is page `p` of this store: the memory file, or the migration's source.
    pub memory: Arc<dyn PageStore>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("dir", &self.dir)
            .field("memory", &self.memory.describe())
            .finish_non_exhaustive()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads the snapshot in `dir`: the magic, the version, the state's length and checksum, the
/// page runs, and the memory file's length are all checked before anything is used.
pub fn load(dir: &Path) -> Result<Snapshot, SnapshotError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => return Err(SnapshotError::Link(dir.to_owned())),
        Ok(m) if m.is_dir() => {}
        _ => return Err(SnapshotError::Missing(dir.to_owned())),
    }
    let path = dir.join(STATE_FILE);
    let mut bytes = Vec::new();
    match open_file(&path) {
        Err(SnapshotError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(SnapshotError::NoState(dir.to_owned()))
        }
        r => r?.read_to_end(&mut bytes).map_err(io(&path))?,
    };
    let truncated = |what: &str| SnapshotError::Truncated {
        path: path.clone(),
        what: what.to_owned(),
    };
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        return Err(if bytes.len() < 8 && MAGIC.starts_with(&bytes) {
            truncated("no header")
        } else {
            SnapshotError::NotASnapshot(path)
        });
    }
    if bytes.len() < HEADER {
        return Err(truncated("header cut short"));
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
    let found = word(8);
    if found != VERSION {
        return Err(SnapshotError::Version { path, found });
    }
    let crc = word(12);
    let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap_or_default());
    let body = &bytes[HEADER..];
    if (body.len() as u64) < len {
        return Err(truncated(&format!(
            "{} of {len} bytes of state",
            body.len()
        )));
    }
    let corrupt = |why: String| SnapshotError::Corrupt {
        path: path.clone(),
        why,
    };
    if (body.len() as u64) > len || crc32fast::hash(body) != crc {
        return Err(corrupt("its checksum does not match".into()));
    }
    let state = parse_state(body).map_err(corrupt)?;
    let mpath = dir.join(MEMORY_FILE);
    let memory = open_file(&mpath)?;
    let have = memory.metadata().map_err(io(&mpath))?.len();
    if have != state.mem_size {
        return Err(SnapshotError::Truncated {
            path: mpath,
            what: format!("{have} of {} bytes of guest memory", state.mem_size),
        });
    }
    Ok(Snapshot {
        dir: dir.to_owned(),
        state,
        memory: Arc::new(SavedMemory::new(memory)),
    })
}

/// Opens the snapshot file at `path` to read it: a regular file, not reached through a
/// symbolic link (the module's documentation says why).
fn open_file(path: &Path) -> Result<File, SnapshotError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => SnapshotError::Link(path.to_owned()),
            _ => io(path)(e),
        })?;
    if !file.metadata().map_err(io(path))?.is_file() {
        return Err(SnapshotError::Corrupt {
            path: path.to_owned(),
            why: "not a regular file".into(),
        });
    }
    Ok(file)
}

/// Creates the snapshot file at `path` to write it: new, not through a symbolic link, and
/// readable by its owner only (it holds guest memory).
fn create_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(path)
}

/// Reads a state (`vm.state`'s JSON, or a migration's) and checks that its parts agree.
pub(crate) fn parse_state(body: &[u8]) -> Result<VmSnapshot, String> {
    let json_len = body
        .get(..8)
        .and_then(|b| usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok())
        .ok_or("its state is cut short")?;
    let (json, runs) = body[8..]
        .split_at_checked(json_len)
        .ok_or("its state is cut short")?;
    let mut state: VmSnapshot =
        serde_json::from_slice(json).map_err(|e| format!("its state: {e}"))?;
    state.pages.runs = memvisor_pager::SavedPages::runs_from_bytes(runs)?;
    state.pages.check()?;
    if u64::from(state.pages.pages) * 4096 != state.mem_size
        || state.cpus.len() != usize::from(state.vcpus)
    {
        return Err("its sizes disagree".into());
    }
    Ok(state)
}

impl Snapshot {
    /// Checks that the VM asked for can take this snapshot: the same disks, unchanged, and, if
    /// the snapshot names disk blocks, the Swap Mapper on.
    pub fn check_disks(&self, disks: &[DiskSpec], mapper: bool) -> Result<(), SnapshotError> {
        let images: Vec<std::fs::File> = disks
            .iter()
            .map(|d| File::open(&d.1).map_err(io(&d.1)))
            .collect::<Result<_, _>>()?;
        self.check_images(disks, &images, mapper)
    }

    /// [`Snapshot::check_disks`] with each image read through a handle opened before (a
    /// jailed VMM sees no path).
    pub fn check_images(
        &self,
        disks: &[DiskSpec],
        images: &[File],
        mapper: bool,
    ) -> Result<(), SnapshotError> {
        let ids: Vec<&str> = disks.iter().map(|d| d.0.as_str()).collect();
        let want: Vec<&str> = self.state.disks.iter().map(|d| d.id.as_str()).collect();
        if ids != want || images.len() != disks.len() {
            return Err(SnapshotError::Mismatch(format!(
                "the snapshot's VM had disks {want:?}; give the same --disk flags (got {ids:?})"
            )));
        }
        for ((d, saved), image) in disks.iter().zip(&self.state.disks).zip(images) {
            let now = image
                .metadata()
                .and_then(|m| DiskIdentity::of(d, &m))
                .map_err(io(&d.1))?;
            if now.size != saved.size || now.modified_ns != saved.modified_ns {
                return Err(SnapshotError::Mismatch(format!(
                    "disk {}: {} changed since the snapshot was taken (it must be the image as it was then)",
                    d.0,
                    d.1.display()
                )));
            }
        }
        let on_disk = self
            .state
            .pages
            .runs
            .iter()
            .any(|r| matches!(r.kind, SavedKind::Disk { .. }));
        if on_disk && !mapper {
            return Err(SnapshotError::Mismatch(
                "the snapshot records pages as disk blocks: restore it with --mapper".into(),
            ));
        }
        Ok(())
    }

    /// Copies the snapshot's memory into `mem` at once (a VM without memvisor's pager): copied
    /// pages from the memory file, disk pages from their images.
    pub fn fill(&self, mem: &GuestMem) -> Result<(), String> {
        let images: Vec<File> = self
            .state
            .disks
            .iter()
            .map(|d| File::open(&d.path).map_err(|e| format!("{}: {e}", d.path.display())))
            .collect::<Result<_, _>>()?;
        let hosts: Vec<u64> = pages(mem).map(|(_, host)| host).collect();
        let mut page = vec![0u8; 4096];
        for r in &self.state.pages.runs {
            for i in 0..r.count {
                let p = r.first + i;
                let read = match r.kind {
                    SavedKind::Copied => self.memory.read(p, &mut page),
                    SavedKind::Disk { disk, block } => images
                        .get(usize::from(disk))
                        .ok_or_else(|| std::io::Error::other("no such disk"))
                        .and_then(|f| f.read_exact_at(&mut page, u64::from(block + i) * 4096)),
                    _ => break,
                };
                read.map_err(|e| format!("reading page {p} of the snapshot: {e}"))?;
                let host = *hosts
                    .get(p as usize)
                    .ok_or_else(|| format!("page {p} is outside this VM's RAM"))?;
                // SAFETY: `host` is the address of a whole page of a live guest RAM mapping,
                // and no vCPU runs yet.
                unsafe { std::ptr::copy_nonoverlapping(page.as_ptr(), host as *mut u8, 4096) };
            }
        }
        Ok(())
    }
}

/// Every guest page in page order, with its host address.
fn pages(mem: &GuestMem) -> impl Iterator<Item = (u32, u64)> + '_ {
    mem.iter()
        .flat_map(|r| {
            let base = r.as_ptr() as u64;
            (0..r.len() / 4096).map(move |i| base + i * 4096)
        })
        .zip(0u32..)
        .map(|(host, p)| (p, host))
}

/// What a running VM needs to write itself to a snapshot.
pub(crate) struct Snapshotter {
    pub mem_size: u64,
    pub vcpus: u8,
    /// Each disk, with a read-only handle on its image (`opened.rs`).
    pub disks: Vec<(DiskSpec, std::fs::File)>,
    pub balloon: bool,
    pub vm: Arc<kvm_ioctls::VmFd>,
    pub mem: Arc<GuestMem>,
    pub serial: Arc<Mutex<Serial<std::io::Stdout>>>,
    /// The transports with a device, in slot order.
    pub transports: Vec<Arc<Mutex<MmioTransport>>>,
    /// Ends the VM (`stop`).
    pub stop: Box<dyn Fn() + Send + Sync>,
    /// Where it may write snapshots.
    pub place: SnapshotPlace,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Snapshotter {
    /// The shape of the VM it writes.
    pub fn shape(&self) -> VmShape {
        VmShape {
            mem_size: self.mem_size,
            vcpus: self.vcpus,
            balloon: self.balloon,
            disks: self.disks.iter().map(|d| d.0 .0.clone()).collect(),
        }
    }

    /// Writes the VM to `req.dir` (module doc), then lets it run on or, with `req.stop`, leaves
    /// it paused for the caller to end once it has answered ([`Snapshotter::stop`]). An error
    /// leaves the VM as it was (running, if it ran) and says why.
    pub fn take(&self, life: &Lifecycle, req: &SnapshotRequest) -> Result<SnapshotResult, String> {
        let (dir, shown) = self.place.resolve(&req.dir)?;
        if dir.join(STATE_FILE).exists() {
            return Err(format!("{} already holds a snapshot", shown.display()));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", shown.display()))?;
        check_pausable(life)?;
        let t0 = Instant::now();
        let was_running = life.pause();
        let r = self.write(life, &dir, &shown);
        let paused_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        let pages = match r {
            Ok(pages) => pages,
            Err(e) => {
                if was_running {
                    life.resume();
                }
                return Err(e);
            }
        };
        if !req.stop && was_running {
            life.resume();
        }
        let (copied, zero, disk, released) = pages.census();
        tracing::info!(
            "snapshot {}: {copied} pages copied, {zero} zero, {disk} on disk, {released} released; vCPUs stopped {paused_ms} ms",
            shown.display()
        );
        Ok(SnapshotResult {
            dir: shown.display().to_string(),
            copied_pages: copied,
            zero_pages: zero,
            disk_pages: disk,
            released_pages: released,
            paused_ms,
            stopped: req.stop,
        })
    }

    /// Saves everything into `dir` with the vCPUs paused (module doc); errors name it as the
    /// host sees it, `shown`.
    fn write(&self, life: &Lifecycle, dir: &Path, shown: &Path) -> Result<SavedPages, String> {
        let mpath = dir.join(MEMORY_FILE);
        let shown_memory = shown.join(MEMORY_FILE);
        let (held, state) = self.capture(life, || {
            let memory = create_file(&mpath).map_err(|e| {
                let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
                    " (an earlier snapshot that failed left it: give a new directory)".to_owned()
                } else {
                    String::new()
                };
                format!("cannot create {}: {e}{why}", shown_memory.display())
            })?;
            match &life.pager {
                Some(p) => p.save(&memory).map_err(|e| error_line(&e)),
                None => save_plain(&self.mem, &memory)
                    .map_err(|e| format!("writing {}: {e}", shown_memory.display())),
            }
        })?;
        write_state(dir, &state)
            .map_err(|e| format!("writing {}: {e}", shown.join(STATE_FILE).display()))?;
        drop(held);
        Ok(state.pages)
    }

    /// The VM's state with the vCPUs paused (module doc), guest memory as `pages` gives it;
    /// the transports' locks come back held, so that no device moves until they are dropped.
    pub(crate) fn capture(
        &self,
        life: &Lifecycle,
        pages: impl FnOnce() -> Result<SavedPages, String>,
    ) -> Result<(Vec<std::sync::MutexGuard<'_, MmioTransport>>, VmSnapshot), String> {
        let cpus = life.vcpus.save_all(std::time::Duration::from_secs(10))?;
        // Held to the end: no device moves while the rest is saved.
        let mut held: Vec<_> = self.transports.iter().map(|t| lock(t)).collect();
        let transports = held.iter_mut().map(|t| t.save()).collect();
        let serial = lock(&self.serial).save();
        let vm = crate::cpu_state::save_vm(&self.vm)?;
        let pages = pages()?;
        let disks = self
            .disks
            .iter()
            .map(|(d, image)| {
                image
                    .metadata()
                    .and_then(|m| DiskIdentity::of(d, &m))
                    .map_err(|e| format!("{}: {e}", d.1.display()))
            })
            .collect::<Result<_, _>>()?;
        let state = VmSnapshot {
            mem_size: self.mem_size,
            vcpus: self.vcpus,
            disks,
            balloon: self.balloon,
            vm,
            cpus,
            serial,
            transports,
            pages,
        };
        Ok((held, state))
    }
}

/// Refuses to pause a VM that has not started, or that is paused for a failure (a snapshot or
/// a migration of it would carry the failure along).
pub(crate) fn check_pausable(life: &Lifecycle) -> Result<(), String> {
    match life.state() {
        crate::lifecycle::VmState::Created => Err("the VM has not started".into()),
        crate::lifecycle::VmState::Paused { why, .. }
            if why != crate::control::PauseReason::Requested =>
        {
            Err(format!("the VM is paused because {why}: resume it first"))
        }
        _ => Ok(()),
    }
}

/// Guest memory of a VM without memvisor's pager (plain memory): every non-zero page copied.
fn save_plain(mem: &GuestMem, out: &File) -> std::io::Result<SavedPages> {
    let mut saved = SavedPages::default();
    let mut size = 0u64;
    for (p, host) in pages(mem) {
        // SAFETY: a whole page of a live guest RAM mapping of plain memory (no userfaultfd);
        // the vCPUs are paused and the devices held.
        let page = unsafe { std::slice::from_raw_parts(host as *const u8, 4096) };
        if page.iter().all(|&b| b == 0) {
            saved.push(p, SavedKind::Zero);
        } else {
            out.write_all_at(page, u64::from(p) * 4096)?;
            saved.push(p, SavedKind::Copied);
        }
        size = u64::from(p + 1) * 4096;
    }
    out.set_len(size)?;
    out.sync_all()?;
    Ok(saved)
}

/// Writes `vm.state` (module doc) through a temporary file renamed into place, so a directory
/// holds a whole state file or none.
fn write_state(dir: &Path, state: &VmSnapshot) -> std::io::Result<()> {
    let bytes = encode_state(state)?;
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    let mut f = create_file(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(STATE_FILE))?;
    File::open(dir)?.sync_all()
}

/// `vm.state`'s bytes (module doc): the header, then the state as JSON. A migration sends the
/// same bytes.
pub(crate) fn encode_state(state: &VmSnapshot) -> std::io::Result<Vec<u8>> {
    // The JSON's length, the JSON, then the page runs in binary (`SavedPages::runs_to_bytes`).
    let json = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    let runs = state.pages.runs_to_bytes();
    let mut body = Vec::with_capacity(8 + json.len() + runs.len());
    body.extend_from_slice(&(json.len() as u64).to_le_bytes());
    body.extend_from_slice(&json);
    body.extend_from_slice(&runs);
    let mut bytes = Vec::with_capacity(HEADER + body.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// Reads bytes [`encode_state`] made: the magic, the version, the length and the checksum,
/// then the state, checked ([`parse_state`]).
pub(crate) fn decode_state(bytes: &[u8]) -> Result<VmSnapshot, String> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("not a memvisor VM state".into());
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
    if word(8) != VERSION {
        return Err(format!(
            "state format version {}; this memvisor reads version {VERSION}",
            word(8)
        ));
    }
    let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap_or_default());
    let body = &bytes[HEADER..];
    if body.len() as u64 != len || crc32fast::hash(body) != word(12) {
        return Err("the state's length or checksum does not match".into());
    }
    parse_state(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jailed_vmm_writes_one_name_beneath_its_snapshot_directory_only() {
        let jailed = SnapshotPlace::Jailed(Some(PathBuf::from("/srv/vm/snapshots")));
        let inside = (
            PathBuf::from("/snapshots/s1"),
            PathBuf::from("/srv/vm/snapshots/s1"),
        );
        for asked in [
            "s1",
            "s1/",
            "/srv/vm/snapshots/s1",
            "/srv/vm/snapshots/./s1",
        ] {
            assert_eq!(jailed.resolve(asked).as_ref(), Ok(&inside), "{asked}");
        }
        for asked in [
            "",
            ".",
            "..",
            "../s1",
            "a/b",
            "a/../b",
            "/tmp/s1",
            "/srv/vm/snapshots",
            "/srv/vm/snapshots/../s1",
            "/srv/vm/snapshots/a/b",
            "/srv/vm/snapshotsX/s1",
        ] {
            let e = jailed.resolve(asked).unwrap_err();
            assert!(
                e.contains("writes snapshots only into /srv/vm/snapshots"),
                "{asked}: {e}"
            );
        }
        let e = SnapshotPlace::Jailed(None).resolve("s1").unwrap_err();
        assert!(e.contains("--snapshot-dir"), "{e}");
        let anywhere = SnapshotPlace::Anywhere.resolve("/x/../y").unwrap();
        assert_eq!(anywhere.0, PathBuf::from("/x/../y"));
    }

    #[test]
    fn a_snapshot_is_read_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(load(&link), Err(SnapshotError::Link(_))));
        // A state file that is a link, to anything, is refused the same way.
        std::os::unix::fs::symlink("/etc/hostname", real.join(STATE_FILE)).unwrap();
        let e = load(&real).unwrap_err();
        assert!(matches!(e, SnapshotError::Link(_)), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // Files are created new, never through a link.
        std::os::unix::fs::symlink("/nonexistent", real.join("m")).unwrap();
        assert!(create_file(&real.join("m")).is_err());
        assert!(create_file(&real.join("n")).is_ok());
        assert!(create_file(&real.join("n")).is_err(), "created once");
        let mode = std::fs::metadata(real.join("n")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600, "guest memory is its owner's alone");
    }
}
