//! `--hypervisor qemu`: the same VM on QEMU microvm with KVM, the peer every comparison runs against.
//!
//! The machine mirrors memvisor's: PVH boot of the same ELF and command line, the same memory size
//! and vCPUs, virtio-mmio (modern) block devices with 4 KiB blocks and `cache=none`, the 8250 on
//! stdout and `isa-debug-exit` at port 0xf4, so the guest probes both the same way and the exit
//! status means the same.
//!
//! QEMU's own exit status needs reading before it is passed on ([`status_of`]):
//! - `isa-debug-exit` ends QEMU with `(value << 1) | 1`, so 1 is a guest that wrote 0, but QEMU
//!   also exits 1 when it fails itself (a bad option, a file it cannot open). It then prints the
//!   reason on stderr as it exits, while a guest's debug exit ends QEMU without a word, so 1 with
//!   an error as QEMU's last stderr line is QEMU's failure ([`status::VMM_FAILURE`]).
//! - With `-no-reboot`, a guest reset ends QEMU with 0. microvm as configured here (no ACPI, no
//!   reset device) resets only on a triple fault, so 0 is a guest crash
//!   ([`status::GUEST_CRASH`]), as on memvisor. QEMU also exits 0 when a signal stops it, and
//!   says so on stderr (`terminating on signal N`); that gives `128 + N`, as on memvisor.

use std::io::BufRead;
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use memvisor_api::exit::status;
use memvisor_vmm::affinity::CpuSet;

use crate::guest_kit;
use crate::hostlimit::HostLimit;
use crate::plan::RunPlan;

/// QEMU's own resident memory besides guest RAM: 33 MiB measured for an idle microvm with
/// 512 MiB (11 MiB anonymous, 22 MiB file-backed), rounded up.
const QEMU_OVERHEAD: u64 = 40 << 20;

/// QEMU's overhead for the cgroup limit: `MEMVISOR_QEMU_OVERHEAD` (bytes; `memvisor bench`
/// measures it and passes it), else [`QEMU_OVERHEAD`].
fn overhead() -> u64 {
    std::env::var("MEMVISOR_QEMU_OVERHEAD")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(QEMU_OVERHEAD)
}

/// The QEMU command line for `plan`, with `kernel` as the ELF path.
pub fn command(plan: &RunPlan, kernel: &std::path::Path) -> Command {
    let a = &plan.args;
    let mut cmd = Command::new(&a.qemu);
    cmd.args([
        "-enable-kvm",
        "-machine",
        // mem-merge (QEMU's default is on) follows --sharing, so both hypervisors share alike.
        if a.sharing == crate::cli::SharingArg::Host {
            "microvm,acpi=off,pit=off,pic=off,rtc=off,auto-kernel-cmdline=off,mem-merge=on"
        } else {
            "microvm,acpi=off,pit=off,pic=off,rtc=off,auto-kernel-cmdline=off,mem-merge=off"
        },
    ])
    .args(["-cpu", "host,-arch-capabilities"])
    .args(["-m", &format!("{}M", a.mem >> 20)])
    .args(["-smp", &a.vcpus.to_string()])
    .args(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"])
    // Threads named after what they do ("CPU 0/KVM"), so --vcpu-cpus can find the vCPUs.
    .args(["-name", "memvisor-peer,debug-threads=on"])
    .args(["-serial", "stdio", "-monitor", "none"])
    .arg("-kernel")
    .arg(kernel)
    .args(["-append", &plan.cmdline])
    .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
    .args(["-global", "virtio-mmio.force-legacy=false"]);
    if a.balloon {
        cmd.args([
            "-device",
            "virtio-balloon-device,deflate-on-oom=on,free-page-reporting=on",
        ]);
    }
    if let Some(sock) = &a.qmp_sock {
        cmd.args([
            "-qmp",
            &format!("unix:{},server=on,wait=off", sock.display()),
        ]);
    }
    if let Some(uri) = &a.qemu_incoming {
        cmd.args(["-incoming", uri]);
    }
    for d in &plan.disks {
        let ro = if d.read_only { ",readonly=on" } else { "" };
        let path = d.path.display().to_string().replace(',', ",,");
        cmd.args([
            "-drive",
            &format!(
                "id={},file={path},format=raw,if=none,cache=none,aio=threads{ro}",
                d.id
            ),
        ]);
        cmd.args([
            "-device",
            &format!(
                "virtio-blk-device,drive={},serial={},logical_block_size=4096,physical_block_size=4096",
                d.id, d.id
            ),
        ]);
    }
    cmd
}

/// Runs `plan` under QEMU and passes its exit status through.
pub fn run(plan: &RunPlan) -> ExitCode {
    let kernel = match &plan.args.kernel {
        Some(k) => k.clone(),
        None => match guest_kit::as_file() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("memvisor: cannot write the guest kit for QEMU: {e}");
                return ExitCode::from(status::VMM_FAILURE);
            }
        },
    };
    // An image memvisor left indirected (killed with --tesseract) is made whole first.
    if let Err(e) = memvisor_vmm::recover_indirections(&plan.disks, None) {
        eprintln!("memvisor: {e}");
        return ExitCode::from(status::VMM_FAILURE);
    }
    // A limit on QEMU is the host kernel's: this process enters a memory cgroup that QEMU
    // inherits, sized for the guest limit plus QEMU's own memory.
    let host_limit = match plan.args.mem_limit {
        Some(limit) => match HostLimit::enter(std::process::id(), limit, overhead()) {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("memvisor: cannot limit QEMU's memory: {e}");
                return ExitCode::from(status::VMM_FAILURE);
            }
        },
        None => None,
    };
    let mut cmd = command(plan, &kernel);
    tracing::info!("running {cmd:?}");
    // If this process is killed (SIGKILL cannot be caught), QEMU must not outlive it. This
    // thread waits for QEMU below, so it lives as long as QEMU should.
    // SAFETY: the closure runs in the child between fork and exec and only calls prctl(2),
    // which is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("memvisor: cannot run {}: {e}", plan.args.qemu.display());
            return ExitCode::from(status::BAD_INPUT);
        }
    };
    // Told to stop, stop QEMU too, then clean up (the cgroup) as after any exit.
    let pid = child.id();
    if memvisor_vmm::signals::block().is_ok() {
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let sig = memvisor_vmm::signals::wait();
                tracing::info!("signal {sig}: stopping QEMU (pid {pid})");
                // SAFETY: plain kill(2) of our own child, which we have not reaped yet.
                unsafe { libc::kill(i32::try_from(pid).unwrap_or(0), libc::SIGTERM) };
            });
    }
    if let Some(cpus) = plan.args.vcpu_cpus.clone() {
        let vcpus = usize::from(plan.args.vcpus);
        if let Err(e) = std::thread::Builder::new()
            .name("qemu-pin".into())
            .spawn(move || pin_vcpus(pid, vcpus, &cpus))
        {
            tracing::warn!("cannot start the thread that pins QEMU's vCPUs: {e}");
        }
    }
    // QEMU's stderr goes on to ours line by line; its last line tells how QEMU ended.
    let stderr = child.stderr.take().map(|e| {
        std::thread::Builder::new()
            .name("qemu-stderr".into())
            .spawn(move || forward_stderr(e))
    });
    let waited = child.wait();
    let last_line = match stderr {
        Some(Ok(t)) => t.join().unwrap_or_default(),
        _ => None,
    };
    // A QEMU the cgroup's OOM killer ended dies of SIGKILL like any other: say which it was,
    // before the cgroup (and its count) goes.
    if let Some(h) = &host_limit {
        let kills = h.oom_kills();
        if kills > 0 {
            eprintln!(
                "memvisor: {} (oom_kill {kills}, limit {} MiB): the guest and QEMU needed more than the limit, and host swap (if any) did not make room in time",
                memvisor_api::exit::QEMU_OOM_KILLED,
                h.limit() >> 20
            );
        }
    }
    match waited {
        Ok(s) => ExitCode::from(status_of(s, last_line.as_deref())),
        Err(e) => {
            eprintln!("memvisor: waiting for QEMU failed: {e}");
            ExitCode::from(status::VMM_FAILURE)
        }
    }
}

/// Pins QEMU's vCPU threads (named `CPU N/KVM`) to `cpus` as they appear, waiting up to 10 s
/// for all `vcpus` of them. QEMU's other threads keep the CPUs they inherited (`--vmm-cpus`).
fn pin_vcpus(pid: u32, vcpus: usize, cpus: &CpuSet) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut pinned = std::collections::HashSet::new();
    while pinned.len() < vcpus && Instant::now() < deadline {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return; // QEMU is gone.
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let name = comm.trim_end();
            if !(name.starts_with("CPU ") && name.ends_with("/KVM")) || pinned.contains(&tid) {
                continue;
            }
            match cpus.apply(tid) {
                Ok(()) => {
                    tracing::info!("QEMU's {name} pinned to CPUs {cpus}");
                    pinned.insert(tid);
                }
                Err(e) => {
                    tracing::warn!("cannot pin QEMU's {name} to CPUs {cpus}: {e}");
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if pinned.len() < vcpus {
        tracing::warn!(
            "QEMU's vCPU threads did not all appear in 10 s: {} of {vcpus} pinned",
            pinned.len()
        );
    }
}

/// Copies QEMU's stderr to this process's stderr; returns the last line QEMU wrote.
fn forward_stderr(from: std::process::ChildStderr) -> Option<String> {
    let mut last = None;
    for line in std::io::BufReader::new(from).lines() {
        let Ok(line) = line else { break };
        eprintln!("{line}");
        if !line.trim().is_empty() {
            last = Some(line);
        }
    }
    last
}

/// The signal QEMU says stopped it: `... terminating on signal N[ from pid ...]`.
fn stopping_signal(line: &str) -> Option<u8> {
    let rest = line.split("terminating on signal ").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether a QEMU stderr line reports an error (QEMU's `error_report`), not a warning.
fn is_error(line: &str) -> bool {
    !line.contains("warning:") && stopping_signal(line).is_none()
}

/// memvisor's exit status for QEMU's exit `s`, given the last line QEMU wrote on stderr.
fn status_of(s: ExitStatus, last_line: Option<&str>) -> u8 {
    let sig = std::os::unix::process::ExitStatusExt::signal(&s);
    match (s.code(), sig) {
        (Some(0), _) => match last_line.and_then(stopping_signal) {
            Some(sig) => {
                eprintln!("memvisor: stopped by signal {sig}");
                128u8.saturating_add(sig)
            }
            None => {
                eprintln!(
                    "memvisor: guest crashed: it reset, which QEMU microvm does only on a triple fault"
                );
                status::GUEST_CRASH
            }
        },
        (Some(1), _) if last_line.is_some_and(is_error) => {
            eprintln!("memvisor: QEMU failed (its message is above); the guest did not report");
            status::VMM_FAILURE
        }
        (Some(c), _) => u8::try_from(c).unwrap_or(status::VMM_FAILURE),
        (None, Some(sig)) => {
            eprintln!("memvisor: QEMU was killed by signal {sig}");
            u8::try_from(128 + sig).unwrap_or(status::VMM_FAILURE)
        }
        (None, None) => status::VMM_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn guest_debug_exit_passes_through() {
        assert_eq!(status_of(exited(1), None), 1);
        assert_eq!(status_of(exited(0x43), None), 0x43);
        let warning = "qemu-system-x86_64: warning: host doesn't support requested feature";
        assert_eq!(status_of(exited(1), Some(warning)), 1);
    }

    #[test]
    fn qemu_error_is_not_guest_success() {
        let line = "qemu-system-x86_64: -bogus: invalid option";
        assert_eq!(status_of(exited(1), Some(line)), status::VMM_FAILURE);
    }

    #[test]
    fn reset_is_a_crash_and_a_signal_is_a_signal() {
        assert_eq!(status_of(exited(0), None), status::GUEST_CRASH);
        let line = "qemu-system-x86_64: terminating on signal 15 from pid 7 (memvisor)";
        assert_eq!(stopping_signal(line), Some(15));
        assert_eq!(status_of(exited(0), Some(line)), 128 + 15);
        assert_eq!(status_of(ExitStatus::from_raw(9), None), 128 + 9);
    }
}
