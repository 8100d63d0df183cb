//! `--hypervisor qemu`: the same VM on QEMU microvm with KVM, the peer every comparison runs against.
//!
//! The machine mirrors memvisor's: PVH boot of the same ELF and command line, the same memory size
//! and vCPUs, virtio-mmio (modern) block devices with 4 KiB blocks and `cache=none`, the 8250 on
//! stdout and `isa-debug-exit` at port 0xf4, so the guest probes both the same way and the exit
//! status means the same.

use std::process::{Command, ExitCode};

use crate::cli::RunPlan;
use crate::hostlimit::HostLimit;
use crate::{guest_kit, status};

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
        "microvm,acpi=off,pit=off,pic=off,rtc=off,auto-kernel-cmdline=off",
    ])
    .args(["-cpu", "host,-arch-capabilities"])
    .args(["-m", &format!("{}M", a.mem >> 20)])
    .args(["-smp", &a.vcpus.to_string()])
    .args(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"])
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
    // A limit on QEMU is the host kernel's: this process enters a memory cgroup that QEMU
    // inherits, sized for the guest limit plus QEMU's own memory.
    let _host_limit = match plan.args.mem_limit {
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
    match child.wait() {
        Ok(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
            (Some(c), _) => ExitCode::from(u8::try_from(c).unwrap_or(status::VMM_FAILURE)),
            (None, Some(sig)) => {
                eprintln!("memvisor: QEMU was killed by signal {sig}");
                ExitCode::from(u8::try_from(128 + sig).unwrap_or(status::VMM_FAILURE))
            }
            (None, None) => ExitCode::from(status::VMM_FAILURE),
        },
        Err(e) => {
            eprintln!("memvisor: waiting for QEMU failed: {e}");
            ExitCode::from(status::VMM_FAILURE)
        }
    }
}
