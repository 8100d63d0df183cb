//! A hostile guest cannot flood the host's log: a PVH kernel made of machine code here writes
//! to tens of thousands of unclaimed I/O ports and MMIO addresses, then drives a virtio-blk
//! transport's Status register through refused handshakes in a loop, then spins. `GET /stats`
//! must count every abuse in `guest_errors`, and memvisor's stderr must hold only a few WARN or
//! ERROR lines (each kind's first few messages, its summaries and the end-of-run line). The VMM
//! runs jailed, as `memvisor host` runs every VMM.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

mod common;
use common::{disk_spec, run_command, stderr, TestVm};

/// Unclaimed ports written, one byte each: `PORT_FIRST..PORT_FIRST + PORTS`. The range holds
/// no device of memvisor's or of KVM's in-kernel irqchip (the PIC's ELCR is 0x4d0).
const PORT_FIRST: u32 = 0x1000;
const PORTS: u32 = 20_000;
/// Unclaimed MMIO addresses written, 4 bytes each, 8 bytes apart: above the 64 MiB of RAM and
/// below the virtio-mmio slots, the IOAPIC and the LAPIC.
const MMIO_FIRST: u32 = 0xd000_0000;
const MMIOS: u32 = 20_000;
/// Rounds of the virtio loop.
const ROUNDS: u32 = 5_000;
/// The first virtio-mmio slot: the disk.
const SLOT0: u32 = 0xfeb0_0000;
/// Status register offset and bits (virtio 1.2 §2.1).
const STATUS: u8 = 0x70;
const QUEUE_NUM: u8 = 0x38;
const ACK_DRIVER_FEATURES_OK_DRIVER_OK: u32 = 1 | 2 | 8 | 4;

/// The hostile kernel, 32-bit protected mode code entered at 1 MiB:
///
/// ```text
///     mov edx, PORT_FIRST
/// 1:  out dx, al                  ; an unclaimed port
///     inc edx
///     cmp edx, PORT_FIRST + PORTS
///     jne 1b
///     mov ebx, MMIO_FIRST
/// 2:  mov [ebx], eax              ; an unclaimed MMIO address
///     add ebx, 8
///     cmp ebx, MMIO_FIRST + 8 * MMIOS
///     jne 2b
///     mov ebx, SLOT0
///     mov ecx, ROUNDS
/// 3:  mov dword [ebx + STATUS], ACK | DRIVER | FEATURES_OK | DRIVER_OK
///                                 ; no features accepted: FEATURES_OK refused, so is DRIVER_OK
///     mov dword [ebx + QUEUE_NUM], 16
///                                 ; a queue register outside set-up: ignored
///     mov dword [ebx + STATUS], 0 ; reset
///     dec ecx
///     jnz 3b
/// 4:  jmp 4b
/// ```
///
/// About 185 000 instructions: under a second here even with ring 0 emulated.
fn hostile_code() -> Vec<u8> {
    let mut c = Vec::new();
    let imm = |c: &mut Vec<u8>, v: u32| c.extend_from_slice(&v.to_le_bytes());
    // Relative 8-bit jump from the end of a 2-byte jcc at the current end of `c` to `target`.
    let back = |c: &Vec<u8>, target: usize| -> u8 {
        let rel = i64::try_from(target).unwrap() - i64::try_from(c.len() + 2).unwrap();
        i8::try_from(rel).unwrap().to_le_bytes()[0]
    };

    c.push(0xba); // mov edx, imm32
    imm(&mut c, PORT_FIRST);
    let l1 = c.len();
    c.push(0xee); // out dx, al
    c.push(0x42); // inc edx
    c.extend_from_slice(&[0x81, 0xfa]); // cmp edx, imm32
    imm(&mut c, PORT_FIRST + PORTS);
    let r = back(&c, l1);
    c.extend_from_slice(&[0x75, r]); // jne l1

    c.push(0xbb); // mov ebx, imm32
    imm(&mut c, MMIO_FIRST);
    let l2 = c.len();
    c.extend_from_slice(&[0x89, 0x03]); // mov [ebx], eax
    c.extend_from_slice(&[0x83, 0xc3, 0x08]); // add ebx, 8
    c.extend_from_slice(&[0x81, 0xfb]); // cmp ebx, imm32
    imm(&mut c, MMIO_FIRST + 8 * MMIOS);
    let r = back(&c, l2);
    c.extend_from_slice(&[0x75, r]); // jne l2

    c.push(0xbb); // mov ebx, imm32
    imm(&mut c, SLOT0);
    c.push(0xb9); // mov ecx, imm32
    imm(&mut c, ROUNDS);
    let l3 = c.len();
    c.extend_from_slice(&[0xc7, 0x43, STATUS]); // mov dword [ebx + disp8], imm32
    imm(&mut c, ACK_DRIVER_FEATURES_OK_DRIVER_OK);
    c.extend_from_slice(&[0xc7, 0x43, QUEUE_NUM]);
    imm(&mut c, 16);
    c.extend_from_slice(&[0xc7, 0x43, STATUS]);
    imm(&mut c, 0);
    c.push(0x49); // dec ecx
    let r = back(&c, l3);
    c.extend_from_slice(&[0x75, r]); // jnz l3
    c.extend_from_slice(&[0xeb, 0xfe]); // jmp $
    c
}

fn hostile_kernel(dir: &Path) -> PathBuf {
    let path = dir.join("hostile.elf");
    common::write_kernel(&path, 0x10_0000, &hostile_code());
    path
}

#[test]
fn a_hostile_guest_is_counted_and_not_logged() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = hostile_kernel(dir.path());
    let disk = dir.path().join("d.img");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let disk = disk_spec(&disk, "data");
    let sock = dir.path().join("api.sock");
    // Jailed, as `memvisor host` runs every VMM: the hostile guest meets the VMM it would meet
    // in production.
    let jail = dir.path().join("jail");
    std::fs::create_dir(&jail).unwrap();
    let mut cmd = run_command(
        &sock,
        &["--mem", "64M", "--kernel", kernel.to_str().unwrap()],
    );
    cmd.arg("--jail")
        .arg(&jail)
        .args(["--uid=900940", "--gid=900940"]);
    let vm = TestVm::spawn(cmd.args(["--disk", &disk]).stderr(Stdio::piped()), &sock);
    // The last thing the guest does before it spins is its last round of the virtio loop.
    let s = vm.stats_until("the guest's loops", Duration::from_secs(300), |s| {
        s.guest_errors.refused_driver_ok >= u64::from(ROUNDS)
    });
    let g = &s.guest_errors;
    eprintln!("guest errors: {g:?}");
    // Every access of the guest's was one of these, and nothing else touched those addresses.
    assert_eq!(g.unclaimed_port_accesses, u64::from(PORTS));
    assert_eq!(g.unclaimed_mmio_accesses, u64::from(MMIOS));
    assert_eq!(g.refused_features, u64::from(ROUNDS));
    assert_eq!(g.refused_driver_ok, u64::from(ROUNDS));
    assert_eq!(g.ignored_register_writes, u64::from(ROUNDS));
    assert_eq!(
        (
            g.bad_block_requests,
            g.used_ring_errors,
            g.bad_balloon_pages
        ),
        (0, 0, 0)
    );
    assert_eq!(
        (
            g.disk_io_errors,
            g.balloon_release_errors,
            g.serial_errors,
            g.pager_device_errors
        ),
        (0, 0, 0, 0)
    );
    // Each kind logs its first few messages; every other one is suppressed (counted in a
    // summary line instead).
    let kinds = [
        g.unclaimed_port_accesses,
        g.unclaimed_mmio_accesses,
        g.refused_features,
        g.refused_driver_ok,
        g.ignored_register_writes,
    ];
    let burst = memvisor_devices::guest_log::BURST;
    let logged: u64 = kinds.iter().map(|&n| n.min(burst)).sum();
    assert_eq!(
        g.suppressed_messages,
        kinds.iter().sum::<u64>() - logged,
        "{g:?}"
    );
    // The exits agree: one per port write, one per MMIO write (the spin loop takes none).
    assert!(s.exits.io >= u64::from(PORTS), "{:?}", s.exits);
    assert!(
        s.exits.mmio >= u64::from(MMIOS + 3 * ROUNDS),
        "{:?}",
        s.exits
    );

    // SIGTERM stops it the ordinary way: it did not crash.
    vm.signal(libc::SIGTERM);
    let out = vm.finish();
    let stderr = stderr(&out);
    eprintln!("--- memvisor stderr:\n{stderr}");
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGTERM),
        "{:?}",
        out.status
    );
    let loud = stderr
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .count();
    // Four kinds log at WARN (the ignored register writes at debug): 5 messages each, a
    // summary per kind for each 10 s the hammering lasts (it takes under a second here; the
    // bound leaves room for two each), and one line at the end of the run. Unlimited, the same
    // guest made 11 025 lines.
    assert!(loud <= 30, "{loud} WARN/ERROR lines:\n{stderr}");
    assert!(
        stderr.contains("suppressed"),
        "the suppressed messages are summarized:\n{stderr}"
    );
}
