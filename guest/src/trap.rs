//! CPU exceptions: the IDT contents, the ring-0 entry stubs, the fatal handler
//! (prints vector, error code, RIP, CR2 and exits with 0x7f), and the
//! ring-3-callable "park" gate that halts a CPU for good (`cpu::park` enters it).
//!
//! The park gate is vector 3 (`int3`, DPL 3): kvm_pvm raises #UD for `int n`
//! executed in ring 3, but delivers `int3` through the IDT like an exception.
//!
//! `boot.rs` loads the (empty) IDT in ring 0; the gates are written here from
//! ring 3 because the IDT page is identity-mapped user-writable, which saves
//! a few hundred emulated ring-0 instructions. The CPU reads gates from memory
//! when it delivers an exception, so this is equivalent.

use core::arch::{asm, global_asm};

use crate::boot::{KERNEL_CS, boot_idt};
use crate::debug_exit::{self, ExitCode};

/// Vector of the park gate: #BP, entered with `int3` (DPL 3, so ring 3 may use it).
pub const PARK_VECTOR: u8 = 3;
/// Number of architectural exception vectors with a stub.
const EXCEPTION_VECTORS: usize = 32;
/// Bytes per exception stub in `trap_stubs`.
const STUB_SIZE: usize = 16;
/// IST slot used for the double-fault handler (see the BSP/AP TSS set-up).
const DOUBLE_FAULT_IST: u8 = 1;

global_asm!(
    r#"
.pushsection .text.trap, "ax"
.macro TRAP_STUB vec, has_error
    .balign 16
    .if \has_error == 0
    pushq $0                      /* uniform frame: fake error code */
    .endif
    pushq $\vec
    jmp trap_common
.endm

.balign 16
.global trap_stubs
trap_stubs:
    TRAP_STUB 0, 0
    TRAP_STUB 1, 0
    TRAP_STUB 2, 0
    TRAP_STUB 3, 0
    TRAP_STUB 4, 0
    TRAP_STUB 5, 0
    TRAP_STUB 6, 0
    TRAP_STUB 7, 0
    TRAP_STUB 8, 1
    TRAP_STUB 9, 0
    TRAP_STUB 10, 1
    TRAP_STUB 11, 1
    TRAP_STUB 12, 1
    TRAP_STUB 13, 1
    TRAP_STUB 14, 1
    TRAP_STUB 15, 0
    TRAP_STUB 16, 0
    TRAP_STUB 17, 1
    TRAP_STUB 18, 0
    TRAP_STUB 19, 0
    TRAP_STUB 20, 0
    TRAP_STUB 21, 1
    TRAP_STUB 22, 0
    TRAP_STUB 23, 0
    TRAP_STUB 24, 0
    TRAP_STUB 25, 0
    TRAP_STUB 26, 0
    TRAP_STUB 27, 0
    TRAP_STUB 28, 0
    TRAP_STUB 29, 1
    TRAP_STUB 30, 1
    TRAP_STUB 31, 0

trap_common:
    cld
    movq %rsp, %rdi               /* &TrapFrame */
    andq $-16, %rsp
    call {fatal}
    ud2

/* Park gate: halt forever with interrupts off (only INIT/NMI wake the CPU). */
.balign 16
.global trap_park_stub
trap_park_stub:
    cli
1:  hlt
    jmp 1b
.popsection
"#,
    fatal = sym trap_fatal,
    options(att_syntax)
);

unsafe extern "C" {
    static trap_stubs: u8;
    static trap_park_stub: u8;
}

/// Stack frame built by a stub plus the CPU's interrupt frame.
#[repr(C)]
struct TrapFrame {
    vector: u64,
    error: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

/// Encodes a 64-bit interrupt gate (P = 1, type 0xE) as two quadwords.
fn interrupt_gate(handler: u64, dpl: u8, ist: u8) -> [u64; 2] {
    let type_attr = 0x8e_u64 | (u64::from(dpl & 3) << 5);
    let low = (handler & 0xffff)
        | (u64::from(KERNEL_CS) << 16)
        | (u64::from(ist & 7) << 32)
        | (type_attr << 40)
        | (((handler >> 16) & 0xffff) << 48);
    [low, handler >> 32]
}

fn set_gate(vector: u8, gate: [u64; 2]) {
    let idt = &raw mut boot_idt as *mut u64;
    let slot = usize::from(vector) * 2;
    // SAFETY: the IDT has 256 gates (512 quadwords) and `slot + 1 < 512`;
    // it is identity-mapped and user-writable, and only the BSP writes it, at boot.
    unsafe {
        idt.add(slot).write_volatile(gate[0]);
        idt.add(slot + 1).write_volatile(gate[1]);
    }
}

/// Fills the exception gates and the park gate. Called once by the BSP, first
/// thing in ring 3; the APs share the same IDT.
pub fn init() {
    let stubs = &raw const trap_stubs as u64;
    for vector in 0..EXCEPTION_VECTORS {
        if vector == usize::from(PARK_VECTOR) {
            continue;
        }
        let ist = if vector == 8 { DOUBLE_FAULT_IST } else { 0 };
        set_gate(
            vector as u8,
            interrupt_gate(stubs + (vector * STUB_SIZE) as u64, 0, ist),
        );
    }
    set_gate(
        PARK_VECTOR,
        interrupt_gate(&raw const trap_park_stub as u64, 3, 0),
    );
}

fn exception_name(vector: u64) -> &'static str {
    const NAMES: [&str; 32] = [
        "#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "CSO", "#TS", "#NP", "#SS",
        "#GP", "#PF", "?", "#MF", "#AC", "#MC", "#XM", "#VE", "#CP", "?", "?", "?", "?", "?", "?",
        "#HV", "#VC", "#SX", "?",
    ];
    NAMES.get(vector as usize).copied().unwrap_or("?")
}

/// Prints an APIC ID, or "?" when the LAPIC must not be touched.
struct ApicId(Option<u32>);

impl core::fmt::Display for ApicId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{id}"),
            None => f.write_str("?"),
        }
    }
}

/// Ring-0 handler for every exception: report and exit with 0x7f.
extern "C" fn trap_fatal(frame: &TrapFrame) -> ! {
    let cr2: u64;
    // SAFETY: we are in ring 0 here; reading CR2 has no side effects.
    unsafe { asm!("mov {}, cr2", out(reg) cr2, options(nomem, nostack, preserves_flags)) };
    crate::serial::emergency_unlock();
    println!(
        "EXCEPTION {} vector={} error={:#x} rip={:#x} cr2={:#x} cs={:#x} rsp={:#x} rflags={:#x} apic_id={}",
        exception_name(frame.vector),
        frame.vector,
        frame.error,
        frame.rip,
        cr2,
        frame.cs,
        frame.rsp,
        frame.rflags,
        ApicId(crate::smp::apic_id_if_known())
    );
    debug_exit::exit(ExitCode::Exception)
}
