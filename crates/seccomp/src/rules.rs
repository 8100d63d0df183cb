//! What each kind of thread may call: its allow list, with the arguments checked where a filter
//! can see them. The lists were found by tracing every thread (`strace -f`) through runs with
//! every mechanism on, and checked by running the test suite under `--seccomp on`; docs/security.md
//! says why each thread needs what it has.

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond,
    SeccompRule,
};

use crate::thread::Thread;

/// A call no thread's allow list has: `execve`, what an attacker who took a thread over would
/// make first. The test hook makes it.
pub const FORBIDDEN_BY_ALL: i64 = libc::SYS_execve;

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

// KVM ioctl numbers (linux/kvm.h), checked against kvm-bindings' struct sizes in the tests.
pub const KVM_RUN: u64 = 0xae80;
pub(crate) const KVM_GET_REGS: u64 = 0x8090_ae81;
pub(crate) const KVM_GET_SREGS: u64 = 0x8138_ae83;
pub(crate) const KVM_IOEVENTFD: u64 = 0x4040_ae79;
// What a vCPU reads of itself for a snapshot (`KVM_RUN` with `immediate_exit` first completes
// a half-done I/O exit), and what the API thread reads of the VM.
pub(crate) const KVM_GET_MSRS: u64 = 0xc008_ae88;
pub(crate) const KVM_GET_XSAVE: u64 = 0x9000_aea4;
pub(crate) const KVM_GET_XCRS: u64 = 0x8188_aea6;
pub(crate) const KVM_GET_DEBUGREGS: u64 = 0x8080_aea1;
pub(crate) const KVM_GET_LAPIC: u64 = 0x8400_ae8e;
pub(crate) const KVM_GET_MP_STATE: u64 = 0x8004_ae98;
pub(crate) const KVM_GET_VCPU_EVENTS: u64 = 0x8040_ae9f;
pub(crate) const KVM_GET_IRQCHIP: u64 = 0xc208_ae62;
pub(crate) const KVM_GET_CLOCK: u64 = 0x8030_ae7c;
// A migration's pre-copy: the memory slots' dirty logging turned on and off, and the log read.
pub(crate) const KVM_SET_USER_MEMORY_REGION: u64 = 0x4020_ae46;
pub(crate) const KVM_GET_DIRTY_LOG: u64 = 0x4010_ae42;
/// A vCPU's state for a snapshot (`PUT /vm/snapshot`; `crates/vmm/src/cpu_state.rs`).
const VCPU_SAVE: [u64; 7] = [
    KVM_GET_MSRS,
    KVM_GET_XSAVE,
    KVM_GET_XCRS,
    KVM_GET_DEBUGREGS,
    KVM_GET_LAPIC,
    KVM_GET_MP_STATE,
    KVM_GET_VCPU_EVENTS,
];
/// `UFFDIO_MOVE` (Linux 6.8; not in `userfaultfd-sys`).
const UFFDIO_MOVE: u64 = 0xc028_aa05;
/// `PAGEMAP_SCAN` on `/proc/self/pagemap` (Linux 6.7): which guest pages are present, or on the
/// zero page.
const PAGEMAP_SCAN: u64 = 0xc060_6610;

/// Filling, protecting and waking guest pages: what a thread that installs or protects guest
/// pages through the pager calls.
const UFFD_PAGES: [u64; 5] = [
    userfaultfd_sys::UFFDIO_COPY as u64,
    userfaultfd_sys::UFFDIO_ZEROPAGE as u64,
    userfaultfd_sys::UFFDIO_WAKE as u64,
    userfaultfd_sys::UFFDIO_WRITEPROTECT as u64,
    UFFDIO_MOVE,
];

/// The advice the pager, the balloon and glibc's heap give: dropping pages, huge pages on and
/// off, KSM on and off (`--sharing host`), cold pages. Not `MADV_DONTFORK`, `MADV_WIPEONFORK`,
/// `MADV_HWPOISON` and the like.
const ADVICE: [i32; 7] = [
    libc::MADV_DONTNEED,
    libc::MADV_COLD,
    libc::MADV_HUGEPAGE,
    libc::MADV_NOHUGEPAGE,
    libc::MADV_MERGEABLE,
    libc::MADV_UNMERGEABLE,
    libc::MADV_FREE,
];

/// A non-negative flag or command of libc's as a filter's argument value.
fn flag(v: i32) -> u64 {
    u64::from(v.unsigned_abs())
}

fn cond(arg: u8, op: Op, value: u64) -> Result<Cond, BackendError> {
    Cond::new(arg, Len::Qword, op, value)
}

struct List(Rules);

impl List {
    fn allow(&mut self, calls: &[i64]) {
        for &nr in calls {
            self.0.insert(nr, Vec::new());
        }
    }

    /// `nr` only when argument `arg` (32 bits) is one of `values`.
    fn allow_arg(&mut self, nr: i64, arg: u8, values: &[u64]) -> Result<(), BackendError> {
        let rules = self.0.entry(nr).or_default();
        for &v in values {
            rules.push(SeccompRule::new(vec![Cond::new(
                arg,
                Len::Dword,
                Op::Eq,
                v,
            )?])?);
        }
        Ok(())
    }

    /// `nr` only when the bits `mask` of argument `arg` are `value`.
    fn allow_masked(
        &mut self,
        nr: i64,
        arg: u8,
        mask: u64,
        value: u64,
    ) -> Result<(), BackendError> {
        let rule = SeccompRule::new(vec![cond(arg, Op::MaskedEq(mask), value)?])?;
        self.0.entry(nr).or_default().push(rule);
        Ok(())
    }

    fn ioctls(&mut self, requests: &[u64]) -> Result<(), BackendError> {
        self.allow_arg(libc::SYS_ioctl, 1, requests)
    }
}

/// Whether `thread` opens files by path once confined; a thread that does not gets `EACCES`
/// from `openat` (`lib.rs` says why that is not a kill).
pub(crate) fn opens_files(thread: Thread) -> bool {
    matches!(thread, Thread::Main | Thread::Pager | Thread::Api)
}

/// The allow list of `thread`.
pub(crate) fn allowed(thread: Thread) -> Result<Rules, BackendError> {
    let mut l = List(Rules::new());
    runtime(&mut l)?;
    match thread {
        Thread::Signals => l.allow(&[libc::SYS_rt_sigtimedwait]),
        Thread::Vcpu => {
            guest_memory(&mut l)?;
            disk_io(&mut l);
            l.ioctls(&[KVM_RUN, KVM_GET_REGS, KVM_GET_SREGS, KVM_IOEVENTFD])?;
            l.ioctls(&VCPU_SAVE)?;
            // Serial output, eventfds.
            l.allow(&[libc::SYS_read, libc::SYS_write]);
        }
        Thread::Block | Thread::Balloon => {
            guest_memory(&mut l)?;
            if thread == Thread::Block {
                disk_io(&mut l);
            }
            // Queue eventfds; the notifications given back to the vCPUs on a failure.
            l.ioctls(&[KVM_IOEVENTFD])?;
            l.allow(&[
                libc::SYS_poll,
                libc::SYS_ppoll,
                libc::SYS_read,
                libc::SYS_write,
            ]);
        }
        Thread::Pager => {
            guest_memory(&mut l)?;
            disk_io(&mut l);
            read_only_opens(&mut l)?;
            // Fault events; the Preventer's look at a vCPU's state in /proc.
            l.allow(&[libc::SYS_poll, libc::SYS_ppoll, libc::SYS_read]);
            // A migration's destination: a fault on a page not yet there asks the source.
            l.allow(&[libc::SYS_sendto]);
            log_only(&mut l)?;
        }
        Thread::Reclaim => {
            guest_memory(&mut l)?;
            disk_io(&mut l);
            // Proactive swap-in's read-ahead: a thread (CLONE_THREAD), never a process.
            let thread_flags = flag(libc::CLONE_THREAD);
            l.allow_masked(libc::SYS_clone, 0, thread_flags, thread_flags)?;
            l.allow(&[libc::SYS_read]);
            log_only(&mut l)?;
        }
        Thread::PoolFlush | Thread::Defrag => {
            disk_io(&mut l);
            log_only(&mut l)?;
        }
        Thread::Prefetch => {
            // Pages read from the snapshot's memory file and installed; on a migration's
            // destination, asked of the source.
            guest_memory(&mut l)?;
            l.allow(&[libc::SYS_pread64, libc::SYS_preadv, libc::SYS_sendto]);
            log_only(&mut l)?;
        }
        Thread::ReleaseReady => {
            guest_memory(&mut l)?;
            l.allow(&[libc::SYS_pread64, libc::SYS_preadv]);
            log_only(&mut l)?;
        }
        Thread::Api => {
            guest_memory(&mut l)?;
            disk_io(&mut l);
            read_only_opens(&mut l)?;
            // One request per connection on the socket bound before the VM started: no new
            // sockets.
            l.allow(&[
                libc::SYS_accept4,
                libc::SYS_read,
                libc::SYS_write,
                libc::SYS_recvfrom,
                libc::SYS_sendto,
                libc::SYS_setsockopt,
                libc::SYS_shutdown,
                libc::SYS_poll,
            ]);
            // The takeover of guest RAM at the first limit set at run time.
            l.ioctls(&[
                u64::from(userfaultfd_sys::UFFDIO_REGISTER),
                u64::from(userfaultfd_sys::UFFDIO_UNREGISTER),
            ])?;
            // A snapshot (`PUT /vm/snapshot`): the VM's interrupt controllers and clock, and
            // its directory made, its memory and state files created new, written, and the
            // state renamed into place. Jailed, the one directory it may write is the
            // snapshot directory bound into the jail; unjailed, the operator names it.
            l.ioctls(&[KVM_GET_IRQCHIP, KVM_GET_CLOCK])?;
            new_files(&mut l)?;
            l.allow(&[
                libc::SYS_mkdir,
                libc::SYS_mkdirat,
                libc::SYS_rename,
                libc::SYS_renameat,
                libc::SYS_ftruncate,
            ]);
        }
        Thread::Migrate => {
            // The VM's state (as a snapshot's) and its pages read where they are.
            guest_memory(&mut l)?;
            disk_io(&mut l);
            l.ioctls(&[KVM_GET_IRQCHIP, KVM_GET_CLOCK])?;
            // Pre-copy: what the vCPUs write, from KVM's dirty log of each memory slot.
            l.ioctls(&[KVM_SET_USER_MEMORY_REGION, KVM_GET_DIRTY_LOG])?;
            // One TCP connection to the destination at a time: an IPv4 or IPv6 stream socket
            // (connected with a timeout: non-blocking, then polled), its options, and the
            // copy of it `migrate-rx` reads. `migrate-rx` is started with the VM, not by this
            // thread: a thread this one started could not narrow its filter.
            tcp_sockets(&mut l)?;
            l.ioctls(&[libc::FIONBIO])?;
            l.allow(&[
                libc::SYS_connect,
                libc::SYS_poll,
                libc::SYS_getsockopt,
                libc::SYS_setsockopt,
                libc::SYS_sendto,
                libc::SYS_recvfrom,
            ]);
            // A connection that failed is shut down, so `migrate-rx` stops reading it.
            l.allow(&[libc::SYS_shutdown]);
            l.allow_arg(libc::SYS_fcntl, 1, &[flag(libc::F_DUPFD_CLOEXEC)])?;
            // The disks' size and modification time in the state, by path.
            l.allow(&[libc::SYS_statx]);
            log_only(&mut l)?;
        }
        Thread::MigrateRx => {
            // Messages read; on the destination, pages written to the local file and
            // acknowledged, and the source taken back on the socket bound before the VM
            // started (`migrate-recover`): no new sockets.
            l.allow(&[
                libc::SYS_recvfrom,
                libc::SYS_sendto,
                libc::SYS_pwrite64,
                libc::SYS_accept4,
                libc::SYS_setsockopt,
            ]);
            l.allow_arg(libc::SYS_fcntl, 1, &[flag(libc::F_DUPFD_CLOEXEC)])?;
            log_only(&mut l)?;
        }
        Thread::MigrateResume => {
            // The faults that failed, served again: pages asked of the source and installed.
            guest_memory(&mut l)?;
            disk_io(&mut l);
            l.allow(&[libc::SYS_sendto]);
            log_only(&mut l)?;
        }
        Thread::Main => {
            guest_memory(&mut l)?;
            disk_io(&mut l);
            // The end of a run: the final flush, Tesseract's blocks back into the images and
            // its logs removed, the swap file removed, --stats-json written, the memory cgroup
            // of `--pager off --mem-limit` left and removed.
            l.allow(&[
                libc::SYS_openat,
                libc::SYS_read,
                libc::SYS_write,
                libc::SYS_statx,
                libc::SYS_newfstatat,
                libc::SYS_fstat,
                libc::SYS_lseek,
                libc::SYS_unlink,
                libc::SYS_unlinkat,
                libc::SYS_rmdir,
                libc::SYS_rename,
                libc::SYS_renameat,
                libc::SYS_ftruncate,
                libc::SYS_poll,
            ]);
            // The device threads' notifications given back as they stop.
            l.ioctls(&[KVM_IOEVENTFD, u64::from(userfaultfd_sys::UFFDIO_UNREGISTER)])?;
        }
    }
    Ok(l.0)
}

/// What every thread calls: the Rust runtime and glibc (locks, signals masks, the heap, stacks,
/// clocks, randomness for hash maps, thread exit) and its log lines on stderr. `mmap` and
/// `mprotect` never with `PROT_EXEC`; `madvise` only with [`ADVICE`]; `fcntl` only reads and
/// sets descriptor and status flags. `clone3` and `openat` are in every list so that the filters
/// stacked on it decide (`lib.rs`).
fn runtime(l: &mut List) -> Result<(), BackendError> {
    l.allow(&[
        libc::SYS_futex,
        libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigprocmask,
        libc::SYS_sigaltstack,
        libc::SYS_munmap,
        libc::SYS_brk,
        libc::SYS_mremap,
        libc::SYS_sched_yield,
        libc::SYS_sched_getaffinity,
        libc::SYS_gettid,
        libc::SYS_getpid,
        libc::SYS_getrandom,
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_close,
        libc::SYS_clock_gettime,
        libc::SYS_clock_nanosleep,
        libc::SYS_nanosleep,
        libc::SYS_restart_syscall,
        libc::SYS_clone3,
        libc::SYS_openat,
        // What glibc does in a thread as it starts (the reclaim thread's read-ahead).
        libc::SYS_rseq,
        libc::SYS_set_robust_list,
    ]);
    // Kicking a vCPU out of the guest (a pause, the end, the Preventer), which any thread that
    // pauses the VM on a failure does: only threads of this process.
    // SAFETY: getpid has no memory effects.
    let pid = unsafe { libc::getpid() };
    l.allow_arg(libc::SYS_tgkill, 0, &[flag(pid)])?;
    let exec = flag(libc::PROT_EXEC);
    l.allow_masked(libc::SYS_mmap, 2, exec, 0)?;
    l.allow_masked(libc::SYS_mprotect, 2, exec, 0)?;
    let advice: Vec<u64> = ADVICE.iter().map(|&a| flag(a)).collect();
    l.allow_arg(libc::SYS_madvise, 2, &advice)?;
    let fcntl = [libc::F_GETFD, libc::F_SETFD, libc::F_GETFL, libc::F_SETFL];
    l.allow_arg(libc::SYS_fcntl, 1, &fcntl.map(flag))?;
    Ok(())
}

/// `write` only to stdout and stderr: log lines, for threads that write to no other descriptor.
fn log_only(l: &mut List) -> Result<(), BackendError> {
    l.allow_arg(libc::SYS_write, 0, &[1, 2])
}

/// Installing, protecting and waking guest pages through the userfaultfd, and scanning which
/// are present or on the zero page (`PAGEMAP_SCAN` on `/proc/self/pagemap`, opened at start:
/// reclaim's zero pages, the pager's census in every snapshot of its counters).
fn guest_memory(l: &mut List) -> Result<(), BackendError> {
    l.ioctls(&UFFD_PAGES)?;
    l.ioctls(&[PAGEMAP_SCAN])
}

/// `socket` only for TCP over IPv4 or IPv6 (`SOCK_STREAM`, protocol 0), `SOCK_CLOEXEC` and
/// `SOCK_NONBLOCK` allowed: no raw, netlink, packet or Unix sockets.
fn tcp_sockets(l: &mut List) -> Result<(), BackendError> {
    const SOCK_TYPE_MASK: u64 = 0xf;
    for family in [libc::AF_INET, libc::AF_INET6] {
        let rule = SeccompRule::new(vec![
            Cond::new(0, Len::Dword, Op::Eq, flag(family))?,
            Cond::new(
                1,
                Len::Dword,
                Op::MaskedEq(SOCK_TYPE_MASK),
                flag(libc::SOCK_STREAM),
            )?,
            Cond::new(2, Len::Dword, Op::Eq, 0)?,
        ])?;
        l.0.entry(libc::SYS_socket).or_default().push(rule);
    }
    Ok(())
}

/// Reads and writes at offsets in files opened before (disk images, the swap file,
/// Tesseract's logs), and making them durable.
fn disk_io(l: &mut List) {
    l.allow(&[
        libc::SYS_pread64,
        libc::SYS_pwrite64,
        libc::SYS_preadv,
        libc::SYS_pwritev,
        libc::SYS_fdatasync,
        libc::SYS_fsync,
        libc::SYS_fallocate,
    ]);
}

/// Opening files to read them (`/proc/self/...`, KSM's counters in `/sys/kernel/mm/ksm`):
/// `openat` without write access or `O_CREAT`, and looking at what was opened.
fn read_only_opens(l: &mut List) -> Result<(), BackendError> {
    let mask = flag(libc::O_ACCMODE | libc::O_CREAT | libc::O_TRUNC);
    let rule = SeccompRule::new(vec![cond(2, Op::MaskedEq(mask), flag(libc::O_RDONLY))?])?;
    // Replaces the unconditional entry `runtime` put in.
    l.0.insert(libc::SYS_openat, vec![rule]);
    l.allow(&[
        libc::SYS_statx,
        libc::SYS_fstat,
        libc::SYS_newfstatat,
        libc::SYS_lseek,
    ]);
    Ok(())
}

/// Besides [`read_only_opens`]: `openat` creating a file that did not exist, never through a
/// symbolic link (`O_CREAT`, `O_EXCL` and `O_NOFOLLOW` all set). An existing file is never
/// opened to write: not an image, not `/proc/self/mem`.
fn new_files(l: &mut List) -> Result<(), BackendError> {
    let new = flag(libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW);
    l.allow_masked(libc::SYS_openat, 2, new, new)
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
        (dir << 30) | ((size as u64) << 16) | (0xae << 8) | nr
    }

    #[test]
    fn kvm_ioctl_numbers_match_the_kernel_structs() {
        use kvm_bindings::{
            kvm_clock_data, kvm_debugregs, kvm_dirty_log, kvm_ioeventfd, kvm_irqchip,
            kvm_lapic_state, kvm_mp_state, kvm_msrs, kvm_regs, kvm_sregs,
            kvm_userspace_memory_region, kvm_vcpu_events, kvm_xcrs, kvm_xsave,
        };
        assert_eq!(KVM_RUN, ioc(0, 0x80, 0));
        assert_eq!(KVM_GET_MSRS, ioc(3, 0x88, size_of::<kvm_msrs>()));
        assert_eq!(KVM_GET_XSAVE, ioc(2, 0xa4, size_of::<kvm_xsave>()));
        assert_eq!(KVM_GET_XCRS, ioc(2, 0xa6, size_of::<kvm_xcrs>()));
        assert_eq!(KVM_GET_DEBUGREGS, ioc(2, 0xa1, size_of::<kvm_debugregs>()));
        assert_eq!(KVM_GET_LAPIC, ioc(2, 0x8e, size_of::<kvm_lapic_state>()));
        assert_eq!(KVM_GET_MP_STATE, ioc(2, 0x98, size_of::<kvm_mp_state>()));
        assert_eq!(
            KVM_GET_VCPU_EVENTS,
            ioc(2, 0x9f, size_of::<kvm_vcpu_events>())
        );
        assert_eq!(KVM_GET_IRQCHIP, ioc(3, 0x62, size_of::<kvm_irqchip>()));
        assert_eq!(KVM_GET_CLOCK, ioc(2, 0x7c, size_of::<kvm_clock_data>()));
        assert_eq!(KVM_GET_REGS, ioc(2, 0x81, size_of::<kvm_regs>()));
        assert_eq!(KVM_GET_SREGS, ioc(2, 0x83, size_of::<kvm_sregs>()));
        assert_eq!(KVM_IOEVENTFD, ioc(1, 0x79, size_of::<kvm_ioeventfd>()));
        assert_eq!(
            KVM_SET_USER_MEMORY_REGION,
            ioc(1, 0x46, size_of::<kvm_userspace_memory_region>())
        );
        assert_eq!(KVM_GET_DIRTY_LOG, ioc(1, 0x42, size_of::<kvm_dirty_log>()));
    }

    #[test]
    fn no_list_allows_exec_sockets_or_privileges() {
        for t in Thread::ALL {
            let rules = allowed(t).unwrap();
            for nr in [
                FORBIDDEN_BY_ALL,
                libc::SYS_execveat,
                libc::SYS_ptrace,
                libc::SYS_setuid,
                libc::SYS_setresuid,
                libc::SYS_setgid,
                libc::SYS_setresgid,
                libc::SYS_capset,
                libc::SYS_chroot,
                libc::SYS_pivot_root,
                libc::SYS_mount,
                libc::SYS_unshare,
                libc::SYS_setns,
                libc::SYS_kill,
                libc::SYS_process_vm_writev,
                libc::SYS_prctl,
                libc::SYS_seccomp,
                libc::SYS_bpf,
                libc::SYS_fork,
                libc::SYS_vfork,
                libc::SYS_init_module,
            ] {
                assert!(!rules.contains_key(&nr), "{t:?} allows syscall {nr}");
            }
            // Sockets only for a migration's source, and only TCP (both rules checked).
            for nr in [libc::SYS_socket, libc::SYS_connect] {
                let allows = rules.contains_key(&nr);
                assert_eq!(allows, t == Thread::Migrate, "{t:?} and syscall {nr}");
            }
            for nr in [libc::SYS_bind, libc::SYS_listen, libc::SYS_socketpair] {
                assert!(!rules.contains_key(&nr), "{t:?} allows syscall {nr}");
            }
            // mmap and mprotect always carry their PROT_EXEC check.
            assert!(!rules[&libc::SYS_mmap].is_empty());
            assert!(!rules[&libc::SYS_mprotect].is_empty());
            assert!(!rules[&libc::SYS_madvise].is_empty());
            assert!(rules.get(&libc::SYS_ioctl).is_none_or(|r| !r.is_empty()));
        }
        assert!(allowed(Thread::Reclaim).unwrap()[&libc::SYS_clone].len() == 1);
        assert_eq!(
            allowed(Thread::Migrate).unwrap()[&libc::SYS_socket].len(),
            2
        );
        // tgkill only to threads of this process, in every thread (any may pause the VM).
        for t in Thread::ALL {
            assert_eq!(allowed(t).unwrap()[&libc::SYS_tgkill].len(), 1, "{t:?}");
        }
        assert!(!allowed(Thread::Vcpu)
            .unwrap()
            .contains_key(&libc::SYS_clone));
    }
}
