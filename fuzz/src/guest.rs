//! The guest side of the virtio targets: guest RAM, the disk image, and queues as a driver sets
//! them up.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use memvisor_devices::GuestMem;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};

/// Guest RAM: 64 KiB at 0 and 64 KiB right after it in a second region (a buffer may span
/// both; a range released to the host may not), then a hole, and 64 KiB at 4 GiB, where a VM's
/// RAM continues above the 32-bit MMIO hole.
pub const RAM: [(u64, usize); 3] = [
    (0, 0x1_0000),
    (0x1_0000, 0x1_0000),
    (0x1_0000_0000, 0x1_0000),
];

/// Where each run's input lands in RAM: the two regions from 0.
pub const IMAGE_MAX: usize = 0x2_0000;

/// One run at a time: the runs share guest RAM and the disk image (the seed tests run in
/// parallel threads; the fuzzer runs one input at a time anyway).
pub fn exclusive() -> MutexGuard<'static, ()> {
    static RUN: Mutex<()> = Mutex::new(());
    RUN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The guest RAM of every run, mapped once ([`load`] gives each run its content).
pub fn mem() -> &'static Arc<GuestMem> {
    static MEM: OnceLock<Arc<GuestMem>> = OnceLock::new();
    MEM.get_or_init(|| {
        let ranges: Vec<_> = RAM.iter().map(|&(a, l)| (GuestAddress(a), l)).collect();
        Arc::new(GuestMem::from_ranges(&ranges).expect("192 KiB of anonymous memory"))
    })
}

/// Guest RAM with `image` from address 0 and zeros elsewhere (what does not fit below
/// [`IMAGE_MAX`] is dropped). The memory is mapped once and cleared for each run.
pub fn load(image: &[u8]) -> &'static Arc<GuestMem> {
    static ZERO: [u8; 0x1_0000] = [0; 0x1_0000];
    let mem = mem();
    for &(addr, len) in &RAM {
        mem.write_slice(&ZERO[..len], GuestAddress(addr))
            .expect("a RAM region");
    }
    let n = image.len().min(IMAGE_MAX);
    mem.write_slice(&image[..n], GuestAddress(0))
        .expect("the first two regions");
    mem
}

/// Room the seeds and the driver set-up of `virtio_mmio` give each queue: queue `i` from
/// `i * QUEUE_STRIDE`, which holds 8 descriptors (larger queues overlap the next one).
pub const QUEUE_STRIDE: u64 = 0x100;

/// The descriptor table, available ring and used ring of a queue of `size` descriptors at
/// `base`, one after the other (each aligned as virtio 1.2 §2.7 asks).
pub fn rings(base: u64, size: u16) -> (u64, u64, u64) {
    let size = u64::from(size);
    let desc = base;
    let avail = desc + 16 * size;
    let used = (avail + 6 + 2 * size + 3) & !3;
    (desc, avail, used)
}

/// A queue of at most `max` descriptors as a driver sets it up: `size` descriptors, the rings
/// at `rings`, ready, and its next available and used index at `next` (where a driver that has
/// run for a while may be). `None` when the transport would refuse it: a size that is not a
/// power of two up to `max`, a misaligned ring, or a ring outside guest RAM.
pub fn queue(
    mem: &GuestMem,
    max: u16,
    size: u16,
    (desc, avail, used): (u64, u64, u64),
    next: u16,
) -> Option<Queue> {
    let mut q = Queue::new(max).expect("device queue sizes are powers of two");
    q.try_set_size(size).ok()?;
    q.try_set_desc_table_address(GuestAddress(desc)).ok()?;
    q.try_set_avail_ring_address(GuestAddress(avail)).ok()?;
    q.try_set_used_ring_address(GuestAddress(used)).ok()?;
    q.set_ready(true);
    q.set_next_avail(next);
    q.set_next_used(next);
    q.is_valid(mem).then_some(q)
}

/// 4 KiB blocks of the disk image.
pub const IMAGE_BLOCKS: u64 = 16;
pub const IMAGE_SIZE: u64 = IMAGE_BLOCKS * 4096;

/// The disk image: a real file, created once per process in /dev/shm (the temp dir where there
/// is none) and unlinked at once, so nothing is left behind however the process ends. The
/// block devices open it by its `/proc/self/fd` path, with `O_DIRECT` where the file system
/// allows it, as they open any image.
pub struct Image {
    file: File,
    path: PathBuf,
    content: Vec<u8>,
}

/// The disk image of every run.
pub fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        };
        let name = dir.join(format!("memvisor-fuzz-{}.img", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&name)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", name.display()));
        std::fs::remove_file(&name).expect("unlink the image");
        // Each byte is the low byte of its sector's number, so a read shows where it came from.
        let content: Vec<u8> = (0..IMAGE_SIZE).map(|i| (i / 512) as u8).collect();
        file.write_all_at(&content, 0).expect("write the image");
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Image {
            file,
            path,
            content,
        }
    })
}

impl Image {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// After a run: the image must have kept its size, and its content unless a write request
    /// succeeded (`written`). A written image gets its content back for the next run.
    pub fn check(&self, written: bool) {
        let len = self.file.metadata().expect("stat the image").len();
        assert_eq!(len, IMAGE_SIZE, "the disk image changed size");
        if written {
            self.file
                .write_all_at(&self.content, 0)
                .expect("restore the image");
            return;
        }
        let mut now = vec![0u8; self.content.len()];
        self.file
            .read_exact_at(&mut now, 0)
            .expect("read the image");
        assert!(
            now == self.content,
            "the disk image changed without a successful write request"
        );
    }
}
