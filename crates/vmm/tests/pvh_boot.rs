//! Boots tiny hand-assembled PVH kernels on real KVM and checks the entry state and exits.

use memvisor_boot::test_utils::make_elf;
use memvisor_vmm::{run, VmConfig, VmExit, VmmError};

const ENTRY: u32 = 0x10_0000;

/// 32-bit code: prints "hi\n" on COM1, then writes 0x21 to the debug-exit port if `ebx` points at
/// an `hvm_start_info` with the right magic, else 0x22.
const CHECK_START_INFO: &[u8] = &[
    0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
    0xb0, 0x68, 0xee, // mov al, 'h'; out dx, al
    0xb0, 0x69, 0xee, // mov al, 'i'; out dx, al
    0xb0, 0x0a, 0xee, // mov al, '\n'; out dx, al
    0x8b, 0x03, // mov eax, [ebx]
    0x3d, 0x78, 0xc5, 0x6e, 0x33, // cmp eax, 0x336ec578
    0x75, 0x0a, // jne bad
    0x66, 0xba, 0xf4, 0x00, // mov dx, 0xf4
    0xb8, 0x21, 0x00, 0x00, 0x00, // mov eax, 0x21
    0xef, // out dx, eax
    0x66, 0xba, 0xf4, 0x00, // bad: mov dx, 0xf4
    0xb8, 0x22, 0x00, 0x00, 0x00, // mov eax, 0x22
    0xef, // out dx, eax
    0xf4, // hlt
];

fn config(code: &[u8]) -> VmConfig {
    VmConfig {
        kernel: make_elf(u64::from(ENTRY), code, Some(ENTRY)),
        cmdline: "test".into(),
        mem_size: 64 << 20,
        vcpus: 1,
        disks: vec![],
        pager: None,
        balloon: false,
        api_sock: None,
        vcpu_cpus: None,
        sharing: false,
        serving_nice: 0,
        restore: None,
        seccomp: memvisor_seccomp::Mode::On,
        incoming: None,
        jail: None,
    }
}

#[test]
fn pvh_entry_gets_start_info_in_ebx() {
    let report = run(&config(CHECK_START_INFO)).expect("the VM runs");
    assert_eq!(report.exit, VmExit::DebugExit(0x21));
    // Three serial bytes and one debug-exit write, at least.
    assert!(report.exits.io.load(std::sync::atomic::Ordering::Relaxed) >= 4);
}

#[test]
fn triple_fault_is_reported_with_rip() {
    // ud2 with no IDT: #UD, then #DF, then a triple fault.
    let err = run(&config(&[0x0f, 0x0b]))
        .err()
        .expect("the guest crashes");
    match err {
        VmmError::GuestCrash {
            vcpu: 0,
            rip,
            reason,
        } => {
            assert!(reason.contains("triple fault"), "{reason}");
            assert_eq!(rip, u64::from(ENTRY), "RIP of the faulting instruction");
        }
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn unknown_ports_and_mmio_are_ignored() {
    let code = [
        0x66, 0xba, 0x80, 0x00, // mov dx, 0x80
        0xee, // out dx, al (nobody there)
        0xec, // in al, dx (reads 0xff)
        0xa1, 0x00, 0x00, 0x00, 0xd0, // mov eax, [0xd0000000] (no device there)
        0x66, 0xba, 0xf4, 0x00, // mov dx, 0xf4
        0xef, // out dx, eax: exit with what the MMIO read returned
    ];
    let report = run(&config(&code)).expect("the VM runs");
    assert_eq!(report.exit, VmExit::DebugExit(0));
    // Counted by the process's guest log, which the other tests' VMs share: at least these.
    let g = &report.guest_errors;
    assert!(g.unclaimed_port_accesses >= 2, "{g:?}");
    assert!(g.unclaimed_mmio_accesses >= 1, "{g:?}");
}

#[test]
fn bad_configs_are_refused() {
    let mut c = config(CHECK_START_INFO);
    c.vcpus = 0;
    assert!(matches!(run(&c), Err(VmmError::BadVcpuCount(0))));
    let mut c = config(CHECK_START_INFO);
    c.mem_size = 1 << 20;
    assert!(matches!(run(&c), Err(VmmError::Boot(_))));
    let mut c = config(CHECK_START_INFO);
    c.kernel = b"not an elf".to_vec();
    assert!(matches!(run(&c), Err(VmmError::Boot(_))));
}
