//! PVH entry and the whole ring-0 boot path: ELF note, static GDT/TSS/page tables,
//! 32-bit -> long mode switch, and the `iretq` that drops the BSP into ring 3.
//!
//! Everything here runs in ring 0, which kvm_pvm emulates instruction by
//! instruction, so the path is kept to ~30 instructions: the page tables, GDT
//! and TSS are fully built at link time; the only run-time fix-up is the TSS
//! base inside its GDT descriptor. The IDT is loaded here but filled from
//! ring 3 (see `trap.rs`).
//!
//! Port I/O from ring 3 is allowed by the TSS I/O permission bitmap (ports
//! 0..0x400), not by RFLAGS.IOPL: kvm_pvm runs ring 3 with IOPL 0 whatever
//! the `iretq` loaded, under memvisor and QEMU alike (see
//! crates/memvisor/tests/iopl.rs).
//!
//! Entry contract (PVH): 32-bit protected mode, paging off, CS = flat 32-bit
//! code, DS = flat data, EBX = physical address of `hvm_start_info`.
//! No stack, no GDT and no IDT are assumed.

use core::arch::global_asm;

/// Maximum number of CPUs (BSP + APs) the kit supports; sizes the GDT and TSS tables.
pub const MAX_CPUS: usize = 64;

/// Segment selectors of the boot GDT.
pub const KERNEL_CS: u16 = 0x08;
#[allow(dead_code)]
pub const KERNEL_DS: u16 = 0x10;
pub const USER_DS: u16 = 0x18 | 3;
pub const USER_CS: u16 = 0x20 | 3;
/// Selector of CPU `i`'s TSS descriptor (16 bytes each).
pub const fn tss_selector(cpu: usize) -> u16 {
    (0x28 + 16 * cpu) as u16
}

/// RFLAGS for ring 3: IOPL = 3, IF = 0, reserved bit 1 set. (IOPL 3 allows port I/O
/// on hardware KVM; kvm_pvm drops it, and the TSS I/O bitmap covers that case.)
pub const USER_RFLAGS: u64 = 0x3002;

/// A 64-bit TSS is 104 bytes; ours is followed by an I/O permission bitmap.
pub const TSS_BASE_SIZE: usize = 104;
/// Ports `0..IO_BITMAP_PORTS` are allowed in ring 3 through the TSS bitmap.
/// (kvm_pvm does not honour RFLAGS.IOPL = 3 in ring 3, but does honour the bitmap.)
pub const IO_BITMAP_PORTS: usize = 0x400;
/// TSS limit: base TSS + bitmap + the 0xff terminator byte, minus one.
pub const TSS_LIMIT: usize = TSS_BASE_SIZE + IO_BITMAP_PORTS / 8;
/// Stride of the per-CPU TSS array.
pub const TSS_SIZE: usize = (TSS_LIMIT + 1).next_multiple_of(16);

unsafe extern "C" {
    /// The boot GDT (null, kernel code/data, user data/code, then MAX_CPUS TSS descriptors).
    pub static mut boot_gdt: [u64; 5 + 2 * MAX_CPUS];
    /// The 4 KiB IDT (256 gates), loaded by the boot path, filled by `trap::init`.
    pub static mut boot_idt: [u64; 512];
    /// Page-directory-pointer table of the identity map (its PML4 is `boot_pml4`).
    pub static mut boot_pdpt: [u64; 512];
    /// TSS storage for the application processors (index 0 unused, the BSP's TSS is static).
    pub static mut boot_ap_tss: [u8; TSS_SIZE * MAX_CPUS];
    /// Image bounds from the linker script.
    pub static __kernel_start: u8;
    pub static __kernel_end: u8;
}

global_asm!(
    r#"
/* ---- PVH ELF note: XEN_ELFNOTE_PHYS32_ENTRY (type 18), name "Xen", 32-bit entry ---- */
.pushsection .note.Xen, "a", @note
    .balign 4
    .long 4                         /* namesz */
    .long 4                         /* descsz */
    .long 18                        /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .long pvh_start32
    .balign 4
.popsection

/* ---- 32-bit entry ---- */
.pushsection .text.boot, "ax"
.code32
.global pvh_start32
pvh_start32:
    movl %ebx, boot_start_info           /* keep the hvm_start_info pointer */

    /* Patch the BSP TSS base into its GDT descriptor (bytes 2,3,4,7). */
    movl $boot_tss0, %eax
    movw %ax, boot_gdt + 0x28 + 2
    shrl $16, %eax
    movb %al, boot_gdt + 0x28 + 4
    movb %ah, boot_gdt + 0x28 + 7

    lgdt boot_gdt_ptr

    movl $0x620, %eax                    /* CR4 = PAE | OSFXSR | OSXMMEXCPT */
    movl %eax, %cr4
    movl $boot_pml4, %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx               /* EFER.LME */
    movl $0x100, %eax
    xorl %edx, %edx
    wrmsr
    movl $0x80000033, %eax               /* CR0 = PG | NE | ET | MP | PE (EM = TS = 0) */
    movl %eax, %cr0
    ljmp ${kcs}, $pvh_start64

/* ---- 64-bit, still ring 0 ---- */
.code64
pvh_start64:
    movl $boot_r0_stack_top, %esp
    movw ${tss0}, %ax
    ltr %ax
    lidt boot_idt_ptr
    movl boot_start_info, %edi           /* first argument of kmain */
    pushq ${uds}                         /* SS */
    pushq $boot_r3_stack_top - 8         /* RSP (ABI: rsp+8 16-byte aligned at entry) */
    pushq ${rflags}                      /* RFLAGS: IOPL 3, IF 0 */
    pushq ${ucs}                         /* CS */
    pushq $kmain                         /* RIP: main.rs's entry point */
    iretq
.popsection

/* ---- Descriptor tables, TSS, boot variables ---- */
.pushsection .data.boot, "aw"
.balign 16
.global boot_gdt
boot_gdt:
    .quad 0                              /* 0x00 null */
    .quad 0x00AF9B000000FFFF             /* 0x08 kernel code, 64-bit */
    .quad 0x00CF93000000FFFF             /* 0x10 kernel data */
    .quad 0x00CFF3000000FFFF             /* 0x18 user data (DPL 3) */
    .quad 0x00AFFB000000FFFF             /* 0x20 user code, 64-bit (DPL 3) */
    .quad 0x0000890000000000 + {tss_limit} /* 0x28 BSP TSS, base patched at entry */
    .quad 0
    .fill ({max_cpus} - 1) * 2, 8, 0     /* AP TSS descriptors, written by smp.rs */
boot_gdt_end:

.balign 8
.global boot_gdt_ptr
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt
.balign 8
.global boot_idt_ptr
boot_idt_ptr:
    .word 4096 - 1
    .quad boot_idt
.balign 8
.global boot_start_info
boot_start_info:
    .long 0

.balign 16
boot_tss0:
    .long 0
    .quad boot_r0_stack_top              /* RSP0 */
    .quad 0, 0                           /* RSP1, RSP2 */
    .quad 0
    .quad boot_df_stack_top              /* IST1: double fault */
    .fill 6, 8, 0                        /* IST2..IST7 */
    .quad 0
    .word 0
    .word {tss_base_size}                /* I/O permission bitmap right after the TSS */
    .fill {io_ports} / 8, 1, 0           /* ports 0..{io_ports} allowed in ring 3 */
    .byte 0xff                           /* terminator */
.popsection

/* ---- Identity map of 0..4 GiB with 2 MiB pages, all user-accessible ---- */
.pushsection .data.pagetables, "aw"
.balign 4096
.global boot_pml4
boot_pml4:
    .quad boot_pdpt + 0x7                /* P | RW | US */
    .fill 511, 8, 0
.global boot_pdpt
boot_pdpt:
    .quad boot_pd + 0x0007
    .quad boot_pd + 0x1007
    .quad boot_pd + 0x2007
    .quad boot_pd + 0x3007
    .fill 508, 8, 0
boot_pd:
    .set pde_index, 0
    .rept 2048
    .if pde_index >= 0x7f0
    .quad (pde_index << 21) | 0x9f       /* 0xfe000000+: P RW US PWT PCD PS (MMIO) */
    .else
    .quad (pde_index << 21) | 0x87       /* P RW US PS */
    .endif
    .set pde_index, pde_index + 1
    .endr
.popsection

/* ---- Stacks and tables that need no initial contents ---- */
.pushsection .bss.boot, "aw", @nobits
.balign 4096
.global boot_idt
boot_idt:
    .skip 4096
boot_r0_stack:
    .skip 16384
boot_r0_stack_top:
boot_df_stack:
    .skip 8192
boot_df_stack_top:
boot_r3_stack:
    .skip 262144
.global boot_r3_stack_top
boot_r3_stack_top:
.balign 16
.global boot_ap_tss
boot_ap_tss:
    .skip {tss_size} * {max_cpus}
.popsection
"#,
    kcs = const KERNEL_CS,
    tss0 = const tss_selector(0),
    uds = const USER_DS,
    ucs = const USER_CS,
    rflags = const USER_RFLAGS,
    max_cpus = const MAX_CPUS,
    tss_size = const TSS_SIZE,
    tss_limit = const TSS_LIMIT,
    tss_base_size = const TSS_BASE_SIZE,
    io_ports = const IO_BITMAP_PORTS,
    options(att_syntax)
);

/// Physical address range `[start, end)` occupied by the loaded image (including .bss).
pub fn kernel_range() -> (usize, usize) {
    (
        &raw const __kernel_start as usize,
        &raw const __kernel_end as usize,
    )
}
