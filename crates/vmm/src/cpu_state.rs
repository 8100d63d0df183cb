//! The KVM state of a vCPU and of the VM's in-kernel devices, read for a snapshot and written
//! back on restore: registers, segment and control registers, the FPU/SSE/AVX state (xsave),
//! XCR0, debug registers, the local APIC, the MP state (running, waiting for SIPI...), pending
//! events, and every MSR KVM lists that reads back; for the VM, the PIC and IOAPIC and the
//! kvmclock.

use kvm_bindings::{
    kvm_clock_data, kvm_debugregs, kvm_irqchip, kvm_lapic_state, kvm_mp_state, kvm_msr_entry,
    kvm_regs, kvm_sregs, kvm_vcpu_events, kvm_xcrs, kvm_xsave, Msrs, KVM_IRQCHIP_IOAPIC,
    KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use serde::{Deserialize, Serialize};

/// One vCPU's state.
#[derive(Debug, Serialize, Deserialize)]
pub struct VcpuState {
    pub regs: kvm_regs,
    pub sregs: kvm_sregs,
    pub xsave: kvm_xsave,
    pub xcrs: kvm_xcrs,
    pub debugregs: kvm_debugregs,
    pub lapic: kvm_lapic_state,
    pub mp_state: kvm_mp_state,
    pub events: kvm_vcpu_events,
    /// Every MSR KVM lists that this vCPU reads back: `(index, value)`.
    pub msrs: Vec<(u32, u64)>,
}

/// The VM's in-kernel devices: PIC master, PIC slave and IOAPIC, and the kvmclock.
#[derive(Debug, Serialize, Deserialize)]
pub struct VmKvmState {
    pub irqchips: Vec<kvm_irqchip>,
    pub clock: kvm_clock_data,
}

fn err(what: &str) -> impl FnOnce(kvm_ioctls::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// The MSRs KVM lists for this host.
pub fn msr_list(kvm: &Kvm) -> Result<Vec<u32>, String> {
    let list = kvm
        .get_msr_index_list()
        .map_err(err("KVM_GET_MSR_INDEX_LIST"))?;
    Ok(list.as_slice().to_vec())
}

/// Reads vCPU `fd`'s state. Called on the vCPU's own thread, outside `KVM_RUN`: an I/O exit the
/// guest is in the middle of is completed first (a `KVM_RUN` with `immediate_exit` set finishes
/// it and returns at once), so the registers are those after the instruction.
pub fn save(fd: &mut VcpuFd, msr_indices: &[u32]) -> Result<VcpuState, String> {
    fd.set_kvm_immediate_exit(1);
    let r = match fd.run() {
        Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => Ok(()),
        Err(e) => Err(format!("completing the vCPU's last exit: {e}")),
        Ok(exit) => Err(format!("the vCPU left KVM_RUN with {exit:?} while paused")),
    };
    fd.set_kvm_immediate_exit(0);
    r?;
    let mut msrs = Vec::new();
    for &index in msr_indices {
        let mut one = Msrs::from_entries(&[kvm_msr_entry {
            index,
            ..Default::default()
        }])
        .map_err(|e| format!("MSR list: {e:?}"))?;
        if fd.get_msrs(&mut one).map_err(err("KVM_GET_MSRS"))? == 1 {
            msrs.push((index, one.as_slice()[0].data));
        }
    }
    Ok(VcpuState {
        regs: fd.get_regs().map_err(err("KVM_GET_REGS"))?,
        sregs: fd.get_sregs().map_err(err("KVM_GET_SREGS"))?,
        xsave: fd.get_xsave().map_err(err("KVM_GET_XSAVE"))?,
        xcrs: fd.get_xcrs().map_err(err("KVM_GET_XCRS"))?,
        debugregs: fd.get_debug_regs().map_err(err("KVM_GET_DEBUGREGS"))?,
        lapic: fd.get_lapic().map_err(err("KVM_GET_LAPIC"))?,
        mp_state: fd.get_mp_state().map_err(err("KVM_GET_MP_STATE"))?,
        events: fd.get_vcpu_events().map_err(err("KVM_GET_VCPU_EVENTS"))?,
        msrs,
    })
}

/// Writes `s` into vCPU `fd` (its CPUID already set), in the order KVM needs: the MP state,
/// registers, the extended state, the APIC, MSRs, and the pending events last.
pub fn restore(fd: &VcpuFd, s: &VcpuState) -> Result<(), String> {
    fd.set_mp_state(s.mp_state)
        .map_err(err("KVM_SET_MP_STATE"))?;
    fd.set_regs(&s.regs).map_err(err("KVM_SET_REGS"))?;
    fd.set_sregs(&s.sregs).map_err(err("KVM_SET_SREGS"))?;
    // SAFETY: `s.xsave` is a whole `kvm_xsave` read by KVM_GET_XSAVE on the same host's KVM;
    // the vCPU was given the CPUID it was saved with.
    unsafe { fd.set_xsave(&s.xsave) }.map_err(err("KVM_SET_XSAVE"))?;
    fd.set_xcrs(&s.xcrs).map_err(err("KVM_SET_XCRS"))?;
    fd.set_debug_regs(&s.debugregs)
        .map_err(err("KVM_SET_DEBUGREGS"))?;
    fd.set_lapic(&s.lapic).map_err(err("KVM_SET_LAPIC"))?;
    let entries: Vec<kvm_msr_entry> = s
        .msrs
        .iter()
        .map(|&(index, data)| kvm_msr_entry {
            index,
            data,
            ..Default::default()
        })
        .collect();
    let msrs = Msrs::from_entries(&entries).map_err(|e| format!("MSR list: {e:?}"))?;
    let set = fd.set_msrs(&msrs).map_err(err("KVM_SET_MSRS"))?;
    if set != entries.len() {
        return Err(format!(
            "KVM_SET_MSRS took {set} of {} MSRs; MSR {:#x} was refused",
            entries.len(),
            entries[set].index
        ));
    }
    fd.set_vcpu_events(&s.events)
        .map_err(err("KVM_SET_VCPU_EVENTS"))
}

/// Reads the VM's PIC, IOAPIC and clock.
pub fn save_vm(vm: &VmFd) -> Result<VmKvmState, String> {
    let mut irqchips = Vec::new();
    for chip_id in [
        KVM_IRQCHIP_PIC_MASTER,
        KVM_IRQCHIP_PIC_SLAVE,
        KVM_IRQCHIP_IOAPIC,
    ] {
        let mut chip = kvm_irqchip {
            chip_id,
            ..Default::default()
        };
        vm.get_irqchip(&mut chip).map_err(err("KVM_GET_IRQCHIP"))?;
        irqchips.push(chip);
    }
    let clock = vm.get_clock().map_err(err("KVM_GET_CLOCK"))?;
    Ok(VmKvmState { irqchips, clock })
}

/// Writes the VM's PIC, IOAPIC and clock back.
pub fn restore_vm(vm: &VmFd, s: &VmKvmState) -> Result<(), String> {
    for chip in &s.irqchips {
        vm.set_irqchip(chip).map_err(err("KVM_SET_IRQCHIP"))?;
    }
    let clock = kvm_clock_data {
        clock: s.clock.clock,
        ..Default::default()
    };
    vm.set_clock(&clock).map_err(err("KVM_SET_CLOCK"))
}
