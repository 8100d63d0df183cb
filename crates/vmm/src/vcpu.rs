//! vCPU set-up for PVH entry and the exit loop that routes port and MMIO accesses to devices.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use kvm_bindings::{
    kvm_fpu, kvm_segment, CpuId, KVM_SYSTEM_EVENT_CRASH, KVM_SYSTEM_EVENT_RESET,
    KVM_SYSTEM_EVENT_SHUTDOWN,
};
use kvm_ioctls::{VcpuExit, VcpuFd};
use memvisor_boot::{BootData, BOOT_GDT, CODE_SELECTOR, DATA_SELECTOR, GDT_ADDR};
use memvisor_devices::{guest_error, Bus, GuestMem};

use crate::control::Vcpus;
use crate::error::{kvm_err, VmmError};
use crate::report::ExitCounters;
use crate::signals;

/// What a vCPU thread needs to serve its exits.
pub(crate) struct VcpuContext {
    pub id: u8,
    pub pio: Arc<Bus>,
    pub mmio: Arc<Bus>,
    pub exits: Arc<ExitCounters>,
    /// Pauses, parks and ends this vCPU with the others.
    pub vcpus: Arc<Vcpus>,
    /// The pager, which may stop this vCPU to look at a faulting write.
    pub pager: Option<memvisor_pager::Pager>,
    /// Keeps guest RAM mapped while the vCPU may still touch it.
    pub _mem: Arc<GuestMem>,
    /// The MSRs a snapshot saves.
    pub msrs: Arc<Vec<u32>>,
}

/// Why a vCPU stopped running.
pub(crate) enum Stop {
    /// A device ended the VM.
    Ended,
    Shutdown,
    Crash(String),
}

const CR0_PE: u64 = 1;
const CR0_ET: u64 = 1 << 4;
const LAPIC_LVT_LINT0: usize = 0x350;
const LAPIC_LVT_LINT1: usize = 0x360;
const APIC_MODE_EXTINT: u32 = 0x7;
const APIC_MODE_NMI: u32 = 0x4;

/// A flat 4 GiB segment for the 32-bit PVH entry.
fn flat_segment(selector: u16, type_: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: 1,
        s: 1,
        l: 0,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// CPUID for vCPU `id`: what KVM supports, with this vCPU's APIC ID and the hypervisor bit.
fn cpuid_for(supported: &CpuId, id: u8, count: u8) -> CpuId {
    let mut cpuid = supported.clone();
    for e in cpuid.as_mut_slice() {
        match e.function {
            1 => {
                e.ebx = (e.ebx & 0x0000_ffff) | (u32::from(id) << 24) | (u32::from(count) << 16);
                e.ecx |= 1 << 31;
            }
            0xb | 0x1f => e.edx = u32::from(id),
            _ => {}
        }
    }
    cpuid
}

/// Routes legacy interrupts like a PC: LINT0 is ExtINT (from the PIC), LINT1 is NMI.
fn set_lint(fd: &VcpuFd) -> Result<(), VmmError> {
    let mut lapic = fd.get_lapic().map_err(kvm_err("KVM_GET_LAPIC"))?;
    for (reg, mode) in [
        (LAPIC_LVT_LINT0, APIC_MODE_EXTINT),
        (LAPIC_LVT_LINT1, APIC_MODE_NMI),
    ] {
        // The register file is `c_char`s; reinterpret each byte, no value changes.
        let bytes: [u8; 4] = std::array::from_fn(|i| lapic.regs[reg + i].to_ne_bytes()[0]);
        let v = (u32::from_le_bytes(bytes) & !0x700) | (mode << 8);
        for (i, b) in v.to_le_bytes().into_iter().enumerate() {
            lapic.regs[reg + i] = libc::c_char::from_ne_bytes([b]);
        }
    }
    fd.set_lapic(&lapic).map_err(kvm_err("KVM_SET_LAPIC"))
}

/// Prepares vCPU `id`. The boot vCPU gets the PVH entry state (`boot`); the others wait in the
/// in-kernel LAPIC for INIT and SIPI from the guest.
pub(crate) fn configure(
    fd: &VcpuFd,
    id: u8,
    count: u8,
    supported: &CpuId,
    boot: Option<BootData>,
) -> Result<(), VmmError> {
    fd.set_cpuid2(&cpuid_for(supported, id, count))
        .map_err(kvm_err("KVM_SET_CPUID2"))?;
    set_lint(fd)?;
    let Some(boot) = boot else {
        return Ok(());
    };
    let fpu = kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    };
    fd.set_fpu(&fpu).map_err(kvm_err("KVM_SET_FPU"))?;

    let mut sregs = fd.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
    sregs.cs = flat_segment(CODE_SELECTOR, 0xb);
    let data = flat_segment(DATA_SELECTOR, 0x3);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    // TR as QEMU leaves it at the PVH entry: the x86 reset value (base 0, limit 0xffff, busy
    // 32-bit TSS), which its firmware never reloads. The PVH ABI asks for limit 0x67, but the
    // limit decides whether ring-3 port I/O works in a guest that never loads a TR of its own:
    // under kvm_pvm ring 3 always runs with RFLAGS.IOPL = 0, so every ring-3 `in`/`out` is
    // checked against the I/O bitmap of the TSS that TR points at. That TSS lies at guest
    // address 0 and its bitmap in low memory; limit 0x67 cuts the bitmap off below port 0x340,
    // so the serial port raises #GP (a triple fault, with no IDT yet), while with 0xffff the
    // same guest runs on memvisor as on QEMU (crates/memvisor/tests/iopl.rs).
    sregs.tr = kvm_segment {
        limit: 0xffff,
        type_: 0xb,
        present: 1,
        ..flat_segment(0, 0xb)
    };
    sregs.tr.db = 0;
    sregs.tr.s = 0;
    sregs.tr.g = 0;
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = u16::try_from(BOOT_GDT.len() * 8 - 1).expect("small GDT");
    sregs.idt.base = 0;
    sregs.idt.limit = 0;
    sregs.cr0 = CR0_PE | CR0_ET;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;
    fd.set_sregs(&sregs).map_err(kvm_err("KVM_SET_SREGS"))?;

    let mut regs = fd.get_regs().map_err(kvm_err("KVM_GET_REGS"))?;
    regs.rip = u64::from(boot.entry);
    regs.rbx = boot.start_info;
    regs.rflags = 0x2;
    fd.set_regs(&regs).map_err(kvm_err("KVM_SET_REGS"))
}

/// The registers the pager's Preventer reads.
fn cpu_state(fd: &VcpuFd) -> Option<memvisor_pager::CpuState> {
    const EFER_LMA: u64 = 1 << 10;
    let r = fd.get_regs().ok()?;
    let sr = fd.get_sregs().ok()?;
    Some(memvisor_pager::CpuState {
        rip: r.rip,
        rax: r.rax,
        rcx: r.rcx,
        rsi: r.rsi,
        rdi: r.rdi,
        rflags: r.rflags,
        cr3: sr.cr3,
        long_mode: sr.efer & EFER_LMA != 0 && sr.cs.l == 1,
    })
}

/// Runs the vCPU until the guest stops it or the VM ends; returns why and the last RIP.
pub(crate) fn run_loop(mut fd: VcpuFd, ctx: &VcpuContext) -> (Stop, u64) {
    let flag: *mut u8 = &mut fd.get_kvm_run().immediate_exit;
    // SAFETY: `flag` is in this vCPU's `kvm_run` mapping, which `fd` keeps alive; it is set back
    // to null below, before `fd` goes.
    unsafe { signals::set_immediate_exit(flag) };
    ctx.vcpus.register();
    let stop = run_until_stopped(&mut fd, ctx);
    ctx.vcpus.unregister();
    // SAFETY: null turns the kick handler's store off for this thread.
    unsafe { signals::set_immediate_exit(std::ptr::null_mut()) };
    let rip = fd.get_regs().map(|r| r.rip).unwrap_or(0);
    tracing::debug!("vcpu{} stopped at rip {rip:#x}", ctx.id);
    (stop, rip)
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock other processes on this host read alike).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only to `ts`; CLOCK_MONOTONIC always exists (vDSO, no syscall).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

fn run_until_stopped(fd: &mut VcpuFd, ctx: &VcpuContext) -> Stop {
    let mut first = ctx.id == 0;
    loop {
        if ctx.vcpus.ended() {
            break Stop::Ended;
        }
        if ctx.vcpus.must_park() {
            ctx.vcpus
                .park(ctx.id, &mut || crate::cpu_state::save(fd, &ctx.msrs));
            continue;
        }
        if first {
            // When the guest's first instruction is about to run (a migration's destination
            // starts its vCPU threads held), on the clock `memvisor bench mobility` reads
            // before it starts this process: how long a start, a restore or a switch took.
            tracing::info!("vcpu0: first KVM_RUN at monotonic_ns={}", monotonic_ns());
            if let Some(p) = &ctx.pager {
                p.guest_runs();
            }
            first = false;
        }
        match fd.run() {
            Ok(VcpuExit::IoOut(port, data)) => {
                ctx.exits.io.fetch_add(1, Ordering::Relaxed);
                if !ctx.pio.write(u64::from(port), data) {
                    guest_error!(
                        UnclaimedPort,
                        "guest write to unclaimed I/O port {port:#x} ignored"
                    );
                }
            }
            Ok(VcpuExit::IoIn(port, data)) => {
                ctx.exits.io.fetch_add(1, Ordering::Relaxed);
                if !ctx.pio.read(u64::from(port), data) {
                    data.fill(0xff);
                    guest_error!(
                        UnclaimedPort,
                        "guest read from unclaimed I/O port {port:#x}: all ones"
                    );
                }
            }
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                ctx.exits.mmio.fetch_add(1, Ordering::Relaxed);
                if !ctx.mmio.write(addr, data) {
                    guest_error!(
                        UnclaimedMmio,
                        "guest write to unclaimed MMIO address {addr:#x} ignored"
                    );
                }
            }
            Ok(VcpuExit::MmioRead(addr, data)) => {
                ctx.exits.mmio.fetch_add(1, Ordering::Relaxed);
                if !ctx.mmio.read(addr, data) {
                    data.fill(0);
                    guest_error!(
                        UnclaimedMmio,
                        "guest read from unclaimed MMIO address {addr:#x}: zeros"
                    );
                }
            }
            Ok(exit) => {
                ctx.exits.other.fetch_add(1, Ordering::Relaxed);
                match exit {
                    VcpuExit::SystemEvent(t, _)
                        if t == KVM_SYSTEM_EVENT_SHUTDOWN || t == KVM_SYSTEM_EVENT_RESET =>
                    {
                        break Stop::Shutdown;
                    }
                    VcpuExit::SystemEvent(t, _) if t == KVM_SYSTEM_EVENT_CRASH => {
                        break Stop::Crash("the guest reported a crash (system event)".into());
                    }
                    VcpuExit::Shutdown => {
                        break Stop::Crash("triple fault (KVM_EXIT_SHUTDOWN)".into())
                    }
                    VcpuExit::Hlt => {
                        break Stop::Crash(
                            "halted with interrupts it cannot receive (KVM_EXIT_HLT)".into(),
                        )
                    }
                    VcpuExit::FailEntry(reason, cpu) => {
                        break Stop::Crash(format!(
                            "VM entry failed (hardware reason {reason:#x}, cpu {cpu})"
                        ));
                    }
                    VcpuExit::InternalError => {
                        break Stop::Crash("KVM internal error (KVM_EXIT_INTERNAL_ERROR)".into())
                    }
                    other => break Stop::Crash(format!("unexpected VM exit {other:?}")),
                }
            }
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                // Cleared before anything a kick asks for is looked at, so none is lost.
                fd.set_kvm_immediate_exit(0);
                if let Some(p) = &ctx.pager {
                    p.vcpu_interrupted(|| cpu_state(fd));
                }
            }
            Err(e) => break Stop::Crash(format!("KVM_RUN failed: {e}")),
        }
    }
}
