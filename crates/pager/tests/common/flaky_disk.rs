//! A disk that fails on demand, for fault-injection tests (shared by the pager's and the
//! binary's tests with `#[path]`): a small ext4 file system on a loop device whose size the test
//! shrinks to 1 MiB (every later I/O past it fails with EIO) and restores. The backing file, and
//! so every block written before, stays as it was. [`FlakyDisk::slow_reads`] and
//! [`FlakyDisk::slow_writes`] make its reads or writes slow instead.
// Each test crate that includes this uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

pub struct FlakyDisk {
    lo: String,
    /// Where the file system is mounted.
    pub mnt: PathBuf,
}

fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl FlakyDisk {
    /// A file system of `mib` MiB on a loop device, mounted at `dir`/mnt.
    pub fn new(dir: &Path, mib: u64) -> FlakyDisk {
        let backing = dir.join("backing.img");
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(mib * MIB)
            .unwrap();
        let lo = sh("losetup", &["-f", "--show", backing.to_str().unwrap()]);
        let d = FlakyDisk {
            lo,
            mnt: dir.join("mnt"),
        };
        // No journal: a failed journal write would make the file system refuse writes for good.
        sh("mkfs.ext4", &["-q", "-F", "-O", "^has_journal", &d.lo]);
        std::fs::create_dir(&d.mnt).unwrap();
        sh(
            "mount",
            &["-o", "errors=continue", &d.lo, d.mnt.to_str().unwrap()],
        );
        d
    }

    /// Every I/O past the first MiB fails (`false`) or works again (`true`).
    pub fn set_working(&self, working: bool) {
        self.try_set_working(working).unwrap();
    }

    fn try_set_working(&self, working: bool) -> std::io::Result<()> {
        const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
        const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
        // `struct loop_info64` is 232 bytes; `lo_sizelimit` is the u64 at offset 32.
        let mut info = [0u8; 232];
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.lo)?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&dev);
        // SAFETY: LOOP_GET_STATUS64 fills a loop_info64, which `info` is large enough to hold.
        if unsafe { libc::ioctl(fd, LOOP_GET_STATUS64, info.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let limit: u64 = if working { 0 } else { MIB };
        info[32..40].copy_from_slice(&limit.to_ne_bytes());
        // SAFETY: LOOP_SET_STATUS64 reads the loop_info64 in `info`.
        if unsafe { libc::ioctl(fd, LOOP_SET_STATUS64, info.as_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Reads or writes of a [`FlakyDisk`] by this process held to a few bytes a second (the blkio
/// cgroup v1 controller's `read_bps_device` or `write_bps_device` throttle on the loop device),
/// until lifted or dropped: a real disk that answers as slowly as a test needs.
pub struct Throttled {
    /// The cgroup this process was moved into, and the one it came from.
    cgroup: PathBuf,
    home: PathBuf,
    dev: String,
    /// The cgroup's throttle file.
    knob: &'static str,
}

impl FlakyDisk {
    /// Throttles this process's reads of the disk to `bytes_per_s`.
    pub fn slow_reads(&self, bytes_per_s: u64) -> Throttled {
        self.throttle("blkio.throttle.read_bps_device", bytes_per_s)
    }

    /// Throttles this process's writes to the disk (its direct I/O: the pager's swap file) to
    /// `bytes_per_s`.
    pub fn slow_writes(&self, bytes_per_s: u64) -> Throttled {
        self.throttle("blkio.throttle.write_bps_device", bytes_per_s)
    }

    fn throttle(&self, knob: &'static str, bytes_per_s: u64) -> Throttled {
        let root = Path::new("/sys/fs/cgroup/blkio");
        // This process's blkio cgroup now, from its `N:blkio:/path` line.
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own
            .lines()
            .find_map(|l| l.split_once(":blkio:").map(|(_, p)| p.to_owned()))
            .expect("a blkio cgroup (v1)");
        let home = root.join(path.trim_start_matches('/'));
        let cgroup = home.join(format!("memvisor-slow-{}", std::process::id()));
        std::fs::create_dir_all(&cgroup).unwrap();
        let name = Path::new(&self.lo).file_name().unwrap().to_str().unwrap();
        let dev = std::fs::read_to_string(format!("/sys/block/{name}/dev")).unwrap();
        let slow = Throttled {
            cgroup,
            home,
            dev: dev.trim().to_owned(),
            knob,
        };
        slow.set(bytes_per_s);
        std::fs::write(
            slow.cgroup.join("cgroup.procs"),
            std::process::id().to_string(),
        )
        .unwrap();
        slow
    }
}

impl Throttled {
    fn set(&self, bytes_per_s: u64) {
        std::fs::write(
            self.cgroup.join(self.knob),
            format!("{} {bytes_per_s}", self.dev),
        )
        .unwrap();
    }

    /// I/O goes at the disk's speed again (a held request goes on at once).
    pub fn lift(&self) {
        self.set(0);
    }
}

impl Drop for Throttled {
    fn drop(&mut self) {
        let _ = std::fs::write(self.cgroup.join(self.knob), format!("{} 0", self.dev));
        let _ = std::fs::write(
            self.home.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

impl Drop for FlakyDisk {
    fn drop(&mut self) {
        // A test that failed with the disk failing would otherwise leave the truncation of its
        // unlinked files stuck on the device, and the loop device with it.
        let _ = self.try_set_working(true);
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.lo]).status();
    }
}
