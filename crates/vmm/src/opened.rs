//! What a VM opens by path or with privileges, opened before anything else so that the VMM can
//! give up both ([`crate::jail`]) before its first thread starts: the pager's userfaultfd and
//! swap file, each disk image with its indirection log, and the API socket. `/dev/kvm` is
//! opened just before, and disentangling the last run's logs done just before that, once the
//! writable images are locked ([`lock_images`]).

use memvisor_devices::virtio::block::DiskImage;
use memvisor_pager::indirect::Indirect;
use memvisor_pager::PagerFiles;

use crate::{VmConfig, VmmError};

/// A disk's image and, with indirections, its log and handles.
pub(crate) struct OpenedDisk {
    pub(crate) image: DiskImage,
    pub(crate) indirect: Option<Indirect>,
}

/// Every file a VM needs, open; taken by `Vm::build` as it goes.
pub(crate) struct Opened {
    pub(crate) pager: Option<PagerFiles>,
    /// One per disk of the config, in its order.
    pub(crate) disks: Vec<OpenedDisk>,
    /// One read-only handle per disk of the config, in its order: what a snapshot or a
    /// migration says of each image (its size and modification time) is read through it, since
    /// a jailed VMM sees no path.
    pub(crate) identities: Vec<std::fs::File>,
    /// The API socket, and its file, removed if the VM is never built.
    pub(crate) api: Option<(
        std::os::unix::net::UnixListener,
        memvisor_api::server::SocketFile,
    )>,
}

impl Opened {
    pub(crate) fn open(config: &VmConfig) -> Result<Self, VmmError> {
        let pager = config
            .pager
            .as_ref()
            .map(|c| PagerFiles::open(c, config.mem_size))
            .transpose()?;
        let (mut disks, mut identities) = (Vec::new(), Vec::new());
        for disk in &config.disks {
            let image = DiskImage::open(&disk.path, disk.read_only)?;
            let indirect = match &config.pager {
                Some(c) if !disk.read_only => memvisor_pager::open_indirect(
                    c.indirections.as_ref(),
                    &c.swap_path,
                    &disk.path,
                )?,
                _ => None,
            };
            disks.push(OpenedDisk { image, indirect });
            identities.push(std::fs::File::open(&disk.path).map_err(|source| {
                VmmError::Disk(memvisor_devices::virtio::block::BlockError::Open {
                    path: disk.path.clone(),
                    source,
                })
            })?);
        }
        // Bound now (a bad path fails before the guest runs) and served once the vCPUs run, so
        // a client that finds the socket finds a running VM.
        let api = config
            .api_sock
            .as_deref()
            .map(|path| {
                memvisor_api::server::bind(path)
                    .map(|l| (l, memvisor_api::server::SocketFile::new(path.to_path_buf())))
            })
            .transpose()
            .map_err(VmmError::Api)?;
        Ok(Opened {
            pager,
            disks,
            identities,
            api,
        })
    }
}

/// How long a start waits for another VMM to let go of an image: one that was just killed
/// (a jailed VMM dies a moment after the process that started it) is gone well within it.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Takes an exclusive `flock` on each writable image, held while the returned files are open
/// (the VM's life; the kernel lets go however the process ends). Two VMMs never write one
/// image, and a start never reads an indirection log that a VMM on its way out still writes.
pub(crate) fn lock_images(disks: &[crate::DiskConfig]) -> Result<Vec<std::fs::File>, VmmError> {
    use std::os::fd::AsRawFd;
    let mut locks = Vec::new();
    for disk in disks.iter().filter(|d| !d.read_only) {
        let err = |source| {
            VmmError::Disk(memvisor_devices::virtio::block::BlockError::Open {
                path: disk.path.clone(),
                source,
            })
        };
        let file = std::fs::File::open(&disk.path).map_err(err)?;
        let t = std::time::Instant::now();
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(err(e));
            }
            if t.elapsed() > LOCK_WAIT {
                return Err(VmmError::DiskInUse(disk.path.clone()));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        locks.push(file);
    }
    Ok(locks)
}
