//! `memvisor run --hypervisor qemu` keeps the exit statuses' meaning: a triple fault is a guest
//! crash (4) on both hypervisors, and QEMU failing by itself is not a guest's success (1).

mod common;

use common::{memvisor, pvh_kernel, run_kernel};

/// A PVH ELF that loads an empty IDT and executes `ud2`: #UD, then a triple fault.
fn triple_fault_kernel() -> tempfile::NamedTempFile {
    #[rustfmt::skip]
    let code: &[u8] = &[
        0x0f, 0x01, 0x1d, 0x10, 0x00, 0x10, 0x00, // 00: lidt [0x100010]
        0x0f, 0x0b,                               // 07: ud2
        0, 0, 0, 0, 0, 0, 0,                      // 09: padding
        0, 0, 0, 0, 0, 0,                         // 10: IDT limit 0, base 0
    ];
    pvh_kernel(0x10_0000, code)
}

#[test]
fn triple_fault_is_a_guest_crash_on_both_hypervisors() {
    let k = triple_fault_kernel();
    for hv in ["memvisor", "qemu"] {
        let out = run_kernel(hv, &k);
        assert_eq!(out.status.code(), Some(4), "on {hv}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("triple fault"), "on {hv}: {err}");
    }
}

/// QEMU cannot create the QMP socket (its directory does not exist) and exits 1 by itself.
#[test]
fn qemu_failing_is_not_guest_success() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("no-such-dir").join("qmp.sock");
    let out = memvisor(&[
        "run",
        "--hypervisor",
        "qemu",
        "--mem",
        "64M",
        "--qmp-sock",
        sock.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("qmp.sock"),
        "QEMU's own message is shown: {err}"
    );
    assert!(err.contains("QEMU failed"), "{err}");
}

/// A guest that needs far more than its `--mem-limit` on a host without swap: the cgroup's OOM
/// killer ends QEMU (status 137, as any SIGKILL), and the launcher says that it was the OOM
/// killer, and at which limit.
#[test]
fn an_oom_kill_in_qemus_cgroup_is_named() {
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    if swaps.lines().count() > 1 {
        eprintln!("skipped: host swap is on here, so the guest would swap rather than be killed");
        return;
    }
    let out = memvisor(&[
        "run",
        "--hypervisor",
        "qemu",
        "--mem",
        "256M",
        "--mem-limit",
        "16M",
        "--workload",
        "memhog",
        "--cmdline",
        "mb=160 secs=2",
    ]);
    assert_eq!(out.status.code(), Some(137));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(memvisor_api::exit::QEMU_OOM_KILLED) && err.contains("limit "),
        "{err}"
    );
}
