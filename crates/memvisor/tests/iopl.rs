//! Ring-3 port I/O without the guest kit: a tiny PVH ELF, generated here, enters long mode,
//! `iretq`s to ring 3 and prints a line on port 0x3f8, then exits through port 0xf4. It runs on
//! memvisor and on QEMU microvm, and both must behave alike.
//!
//! Three ways for ring 3 to be allowed its port I/O:
//! - IOPL 3 and no TR of its own: the guest keeps the TR it was started with;
//! - IOPL 3 and its own TSS whose I/O map base lies past the TSS limit (no bitmap);
//! - IOPL 0 and its own TSS with an I/O bitmap that opens ports 0x3f8..0x3ff and 0xf4..0xf7.
//!
//! On x86, CPL <= IOPL allows every port without looking at the TSS. Under `kvm_pvm`, ring 3 runs
//! on the host CPU with IOPL 0 whatever the guest put in RFLAGS, and a ring-3 `out` is allowed
//! only by the I/O bitmap of the TSS that TR points at. The guest reports a #GP from ring 3
//! with the IOPL it ran at, so the test tells the two behaviours apart.

mod common;

/// Where the image is loaded and entered.
const BASE: u64 = 0x10_0000;
// Offsets inside the image; the code below has these addresses built in.
const GDT: usize = 0x800;
const GDTR: usize = 0x840;
const IDTR: usize = 0x850;
const LOAD_TR: usize = 0x860;
const RFLAGS3: usize = 0x868;
const MSG_OK: usize = 0x880;
const MSG_GP: usize = 0x8c0;
const TSS: usize = 0x900;
const IDT: usize = 0x1000;
const PML4: usize = 0x2000;
const PDPT: usize = 0x3000;
const PD: usize = 0x4000;
/// Image size; the loader adds 4 KiB of zeros after it, which hold the stacks (0x105800 for
/// ring 0, 0x106000 for ring 3).
const IMAGE: usize = 0x5000;
/// Offset of the ring-0 #GP handler in `CODE`.
const GP_HANDLER: u64 = 0x83;
const GP_VECTOR: usize = 13;

/// The guest's code, at `BASE`. Addresses are absolute (identity mapping).
#[rustfmt::skip]
const CODE: &[u8] = &[
    // 32-bit PVH entry, ring 0.
    0x0f, 0x01, 0x15, 0x40, 0x08, 0x10, 0x00, // 00: lgdt [0x100840]
    0xb8, 0x20, 0x00, 0x00, 0x00,             // 07: mov eax, 0x20 (CR4.PAE)
    0x0f, 0x22, 0xe0,                         // 0c: mov cr4, eax
    0xb8, 0x00, 0x20, 0x10, 0x00,             // 0f: mov eax, 0x102000 (PML4)
    0x0f, 0x22, 0xd8,                         // 14: mov cr3, eax
    0xb9, 0x80, 0x00, 0x00, 0xc0,             // 17: mov ecx, 0xc0000080 (EFER)
    0xb8, 0x00, 0x01, 0x00, 0x00,             // 1c: mov eax, 0x100 (LME)
    0x31, 0xd2,                               // 21: xor edx, edx
    0x0f, 0x30,                               // 23: wrmsr
    0xb8, 0x11, 0x00, 0x00, 0x80,             // 25: mov eax, 0x80000011 (PG | ET | PE)
    0x0f, 0x22, 0xc0,                         // 2a: mov cr0, eax
    0xea, 0x34, 0x00, 0x10, 0x00, 0x08, 0x00, // 2d: jmp 0x08:0x100034
    // 64-bit, ring 0.
    0xbc, 0x00, 0x58, 0x10, 0x00,             // 34: mov esp, 0x105800
    0x0f, 0x01, 0x1c, 0x25, 0x50, 0x08, 0x10, 0x00, // 39: lidt [0x100850]
    0x80, 0x3c, 0x25, 0x60, 0x08, 0x10, 0x00, 0x00, // 41: cmp byte [0x100860], 0
    0x74, 0x07,                               // 49: je 0x52 (keep the entry TR)
    0x66, 0xb8, 0x28, 0x00,                   // 4b: mov ax, 0x28
    0x0f, 0x00, 0xd8,                         // 4f: ltr ax
    0x6a, 0x1b,                               // 52: push 0x1b (SS: user data | 3)
    0x68, 0x00, 0x60, 0x10, 0x00,             // 54: push 0x106000 (RSP)
    0xff, 0x34, 0x25, 0x68, 0x08, 0x10, 0x00, // 59: push qword [0x100868] (RFLAGS)
    0x6a, 0x23,                               // 60: push 0x23 (CS: user code | 3)
    0x68, 0x69, 0x00, 0x10, 0x00,             // 62: push 0x100069 (RIP)
    0x48, 0xcf,                               // 67: iretq
    // Ring 3: print MSG_OK, exit with 0.
    0xbe, 0x80, 0x08, 0x10, 0x00,             // 69: mov esi, 0x100880
    0x66, 0xba, 0xf8, 0x03,                   // 6e: mov dx, 0x3f8
    0xac,                                     // 72: lodsb
    0x84, 0xc0,                               // 73: test al, al
    0x74, 0x03,                               // 75: je 0x7a
    0xee,                                     // 77: out dx, al
    0xeb, 0xf8,                               // 78: jmp 0x72
    0x66, 0xba, 0xf4, 0x00,                   // 7a: mov dx, 0xf4
    0x31, 0xc0,                               // 7e: xor eax, eax
    0xef,                                     // 80: out dx, eax
    0xeb, 0xfe,                               // 81: jmp 0x81
    // Ring 0, #GP: put the faulting code's IOPL into MSG_GP, print it, exit with 0x10.
    0x48, 0x8b, 0x5c, 0x24, 0x18,             // 83: mov rbx, [rsp + 24] (RFLAGS)
    0xc1, 0xeb, 0x0c,                         // 88: shr ebx, 12
    0x83, 0xe3, 0x03,                         // 8b: and ebx, 3
    0x83, 0xc3, 0x30,                         // 8e: add ebx, '0'
    0x88, 0x1c, 0x25, 0xc9, 0x08, 0x10, 0x00, // 91: mov [0x1008c9], bl
    0xbe, 0xc0, 0x08, 0x10, 0x00,             // 98: mov esi, 0x1008c0
    0x66, 0xba, 0xf8, 0x03,                   // 9d: mov dx, 0x3f8
    0xac,                                     // a1: lodsb
    0x84, 0xc0,                               // a2: test al, al
    0x74, 0x03,                               // a4: je 0xa9
    0xee,                                     // a6: out dx, al
    0xeb, 0xf8,                               // a7: jmp 0xa1
    0x66, 0xba, 0xf4, 0x00,                   // a9: mov dx, 0xf4
    0xb8, 0x10, 0x00, 0x00, 0x00,             // ad: mov eax, 0x10
    0xef,                                     // b2: out dx, eax
    0xeb, 0xfe,                               // b3: jmp 0xb3
];

const OK_LINE: &str = "port I/O from ring 3\n";
/// What the guest prints for a #GP in ring 3; `?` becomes the IOPL it ran at.
const GP_LINE: &str = "#GP iopl=?\n";
/// The guest's debug-exit value after a #GP, and the status that gives.
const GP_STATUS: i32 = (0x10 << 1) | 1;

/// How ring 3 gets its port I/O.
#[derive(Clone, Copy, Debug)]
enum Io {
    /// IOPL 3; TR stays what the guest was started with.
    IoplEntryTr,
    /// IOPL 3; its own TSS, I/O map base past the limit.
    IoplNoBitmap,
    /// IOPL 0; its own TSS with a bitmap opening the serial and debug-exit ports.
    Bitmap,
}

fn put(image: &mut [u8], at: usize, bytes: &[u8]) {
    image[at..at + bytes.len()].copy_from_slice(bytes);
}

fn put_u64(image: &mut [u8], at: usize, v: u64) {
    put(image, at, &v.to_le_bytes());
}

/// Builds the PVH ELF for `io`.
fn kernel(io: Io) -> tempfile::NamedTempFile {
    let mut image = vec![0u8; IMAGE];
    put(&mut image, 0, CODE);

    // GDT: null, kernel code 64, kernel data, user data, user code 64, then a 16-byte TSS
    // descriptor at 0x28.
    for (i, d) in [
        0,
        0x00af_9b00_0000_ffff,
        0x00cf_9300_0000_ffff,
        0x00cf_f300_0000_ffff,
        0x00af_fb00_0000_ffff,
    ]
    .into_iter()
    .enumerate()
    {
        put_u64(&mut image, GDT + 8 * i, d);
    }
    let tss_base = BASE + TSS as u64;
    let (map_base, tss_limit) = match io {
        // The I/O map base is the TSS size, one past the limit: no bitmap.
        Io::IoplEntryTr | Io::IoplNoBitmap => (104u16, 103u16),
        // 0x400 ports (128 bytes) plus the 0xff byte that ends the bitmap.
        Io::Bitmap => (104, 104 + 128),
    };
    let desc_lo = u64::from(tss_limit)
        | (tss_base & 0xff_ffff) << 16
        | 0x89 << 40 // present, DPL 0, available 64-bit TSS
        | (tss_base >> 24 & 0xff) << 56;
    put_u64(&mut image, GDT + 0x28, desc_lo);
    put_u64(&mut image, GDT + 0x30, tss_base >> 32);
    put(&mut image, GDTR, &0x37u16.to_le_bytes());
    put_u64(&mut image, GDTR + 2, BASE + GDT as u64);

    // IDT: only the #GP gate, a 64-bit interrupt gate to the ring-0 handler.
    let idt_limit = u16::try_from(16 * (GP_VECTOR + 1) - 1).unwrap();
    put(&mut image, IDTR, &idt_limit.to_le_bytes());
    put_u64(&mut image, IDTR + 2, BASE + IDT as u64);
    let handler = BASE + GP_HANDLER;
    let gate_lo = (handler & 0xffff) | 0x08 << 16 | 0x8e << 40 | (handler >> 16 & 0xffff) << 48;
    put_u64(&mut image, IDT + 16 * GP_VECTOR, gate_lo);
    put_u64(&mut image, IDT + 16 * GP_VECTOR + 8, handler >> 32);

    image[LOAD_TR] = u8::from(!matches!(io, Io::IoplEntryTr));
    let rflags: u64 = match io {
        Io::IoplEntryTr | Io::IoplNoBitmap => 0x3002, // IOPL 3, IF 0
        Io::Bitmap => 0x0002,
    };
    put_u64(&mut image, RFLAGS3, rflags);
    put(&mut image, MSG_OK, OK_LINE.as_bytes());
    put(&mut image, MSG_GP, GP_LINE.as_bytes());

    // 64-bit TSS: RSP0 for the #GP from ring 3, then the I/O map base.
    put_u64(&mut image, TSS + 4, BASE + 0x5800);
    put(&mut image, TSS + 102, &map_base.to_le_bytes());
    if let Io::Bitmap = io {
        let bitmap = &mut image[TSS + 104..TSS + 104 + 129];
        bitmap.fill(0xff);
        bitmap[0xf4 / 8] = 0x0f; // ports 0xf4..0xf7 open
        bitmap[0x3f8 / 8] = 0x00; // ports 0x3f8..0x3ff open
    }

    // Identity map of the first 2 MiB, user-accessible, with one large page.
    put_u64(&mut image, PML4, (BASE + PDPT as u64) | 0x7);
    put_u64(&mut image, PDPT, (BASE + PD as u64) | 0x7);
    put_u64(&mut image, PD, 0x87);

    common::pvh_kernel(BASE, &image)
}

/// Runs the guest for `io` on both hypervisors; returns what each printed and its status.
fn on_both(io: Io) -> [(String, Option<i32>); 2] {
    let k = kernel(io);
    ["memvisor", "qemu"].map(|hv| {
        let out = common::run_kernel(hv, &k);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code(),
        )
    })
}

/// IOPL 3 with the TR the guest was started with: QEMU enters PVH with the reset TR (base 0,
/// limit 0xffff) and memvisor with the same, so this prints and succeeds on both, whether the
/// CPU honours IOPL or consults the I/O bitmap.
#[test]
fn iopl_with_the_entry_tr_works_on_both() {
    for (hv, (stdout, status)) in ["memvisor", "qemu"].iter().zip(on_both(Io::IoplEntryTr)) {
        assert_eq!(stdout, OK_LINE, "on {hv}");
        assert_eq!(status, Some(1), "on {hv}");
    }
}

/// IOPL 3 and a TSS without a bitmap: the port I/O succeeds where ring 3 keeps IOPL 3, and
/// raises #GP (reported with IOPL 0) under `kvm_pvm`; either way, memvisor and QEMU agree.
#[test]
fn iopl_without_a_bitmap_behaves_the_same_on_both() {
    let [m, q] = on_both(Io::IoplNoBitmap);
    assert_eq!(m, q, "memvisor and QEMU differ");
    let dropped = GP_LINE.replace('?', "0");
    assert!(
        m == (OK_LINE.to_owned(), Some(1)) || m == (dropped, Some(GP_STATUS)),
        "{m:?}"
    );
}

/// IOPL 0 and an I/O bitmap that opens the two ports: works on both.
#[test]
fn io_bitmap_without_iopl_works_on_both() {
    for (hv, (stdout, status)) in ["memvisor", "qemu"].iter().zip(on_both(Io::Bitmap)) {
        assert_eq!(stdout, OK_LINE, "on {hv}");
        assert_eq!(status, Some(1), "on {hv}");
    }
}
