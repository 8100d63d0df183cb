//! SMP bring-up: the real-mode SIPI trampoline (copied to 0x8000), the AP
//! long-mode entry, and the BSP side that starts APs one at a time with
//! INIT-SIPI-SIPI through the xAPIC (MMIO at 0xfee00000, written from ring 3).
//!
//! AP path: SIPI vector 0x08 -> 16-bit code at 0x8000 -> (CR4.PAE, CR3 = boot
//! PML4, EFER.LME, CR0.PE|PG in one step) -> 64-bit code -> `ap_entry64`
//! (loads IDT and its own TSS) -> `iretq` to ring 3 -> `ap_main(index)`.
//! Per-AP parameters are passed in `ap_boot_mailbox`; the BSP starts the next
//! AP only after the previous one is online, so one mailbox and one small
//! ring-0 boot stack suffice.

use core::arch::global_asm;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use crate::boot::{
    MAX_CPUS, TSS_BASE_SIZE, TSS_LIMIT, TSS_SIZE, USER_CS, USER_DS, USER_RFLAGS, boot_ap_tss,
    boot_gdt, tss_selector,
};
use crate::cpu::{park, pause, rdtsc};

/// Physical address the trampoline is copied to (SIPI vector = address >> 12).
pub const TRAMPOLINE_PADDR: usize = 0x8000;
const SIPI_VECTOR: u32 = (TRAMPOLINE_PADDR >> 12) as u32;

const LAPIC_BASE: usize = 0xfee0_0000;
const LAPIC_ID: usize = 0x020;
const LAPIC_SVR: usize = 0x0f0;
const LAPIC_ICR_LOW: usize = 0x300;
const LAPIC_ICR_HIGH: usize = 0x310;
const ICR_INIT_ASSERT: u32 = 0x0000_4500;
const ICR_STARTUP: u32 = 0x0000_4600;

const AP_STACK_BYTES: usize = 64 * 1024;
const AP_RING0_STACK_BYTES: usize = 16 * 1024;
const AP_IST_STACK_BYTES: usize = 8 * 1024;
/// Wait after the first SIPI before sending the second one.
const FIRST_SIPI_WAIT_MS: u64 = 50;
/// Total wait per AP before giving up on it.
const AP_TIMEOUT_MS: u64 = 1000;

/// Per-AP start parameters, read by `ap_entry64`.
#[repr(C)]
struct ApMailbox {
    ring3_rsp: u64,
    index: u64,
    tss_selector: u64,
}

global_asm!(
    r#"
/* ---- Real-mode trampoline, copied to {base}; runs with CS = {base} >> 4, IP = 0 ---- */
.pushsection .text.trampoline, "ax"
.balign 16
.global smp_tramp_start
smp_tramp_start:
.code16
    cli
    cld
    xorw %ax, %ax
    movw %ax, %ds
    lgdtl {base} + (tramp_gdtr - smp_tramp_start)
    movl $0x620, %eax                  /* CR4 = PAE | OSFXSR | OSXMMEXCPT */
    movl %eax, %cr4
    movl $boot_pml4, %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx             /* EFER.LME */
    movl $0x100, %eax
    xorl %edx, %edx
    wrmsr
    movl $0x80000033, %eax             /* CR0 = PG | NE | ET | MP | PE */
    movl %eax, %cr0
    ljmpl ${kcs}, ${base} + (tramp_long - smp_tramp_start)
.code64
tramp_long:
    movabsq $ap_entry64, %rax
    jmpq *%rax
.balign 8
tramp_gdtr:
    .word {gdt_limit}
    .long boot_gdt
.global smp_tramp_end
smp_tramp_end:
.popsection

/* ---- AP 64-bit entry (ring 0, in the kernel image) ---- */
.pushsection .text.smp, "ax"
ap_entry64:
    movl $ap_boot_stack_top, %esp
    lidt boot_idt_ptr
    movw ap_boot_mailbox + 16, %ax
    ltr %ax
    movq ap_boot_mailbox + 8, %rdi     /* cpu index: first argument of ap_main */
    movq ap_boot_mailbox, %rcx
    pushq ${uds}                       /* SS */
    pushq %rcx                         /* RSP */
    pushq ${rflags}                    /* RFLAGS: IOPL 3, IF 0 */
    pushq ${ucs}                       /* CS */
    pushq ${ap_main}                   /* RIP */
    iretq
.popsection

.pushsection .data.smp, "aw"
.balign 8
.global ap_boot_mailbox
ap_boot_mailbox:
    .quad 0, 0, 0
.popsection

.pushsection .bss.smp, "aw", @nobits
.balign 16
ap_boot_stack:
    .skip 512
ap_boot_stack_top:
.popsection
"#,
    base = const TRAMPOLINE_PADDR,
    kcs = const crate::boot::KERNEL_CS,
    gdt_limit = const (5 + 2 * MAX_CPUS) * 8 - 1,
    uds = const USER_DS,
    ucs = const USER_CS,
    rflags = const USER_RFLAGS,
    ap_main = sym ap_main,
    options(att_syntax)
);

unsafe extern "C" {
    static smp_tramp_start: u8;
    static smp_tramp_end: u8;
    static mut ap_boot_mailbox: ApMailbox;
}

/// Set once the LAPIC has been used; before that the trap handler must not
/// touch it (a VMM without an in-kernel LAPIC would see an unhandled MMIO access).
static LAPIC_IN_USE: AtomicBool = AtomicBool::new(false);

/// CPUs that reached ring 3 (the BSP counts as one).
static ONLINE: AtomicU32 = AtomicU32::new(1);

pub fn online() -> u32 {
    ONLINE.load(Ordering::Acquire)
}

fn lapic_read(reg: usize) -> u32 {
    // SAFETY: the xAPIC page is identity-mapped user-accessible and uncached.
    unsafe { core::ptr::read_volatile((LAPIC_BASE + reg) as *const u32) }
}

fn lapic_write(reg: usize, value: u32) {
    // SAFETY: as in `lapic_read`; the caller picks a register whose write is intended.
    unsafe { core::ptr::write_volatile((LAPIC_BASE + reg) as *mut u32, value) }
}

/// APIC ID of the executing CPU (one LAPIC MMIO read).
pub fn current_apic_id() -> u32 {
    lapic_read(LAPIC_ID) >> 24
}

/// APIC ID of the executing CPU if SMP bring-up already used the LAPIC.
pub fn apic_id_if_known() -> Option<u32> {
    LAPIC_IN_USE.load(Ordering::Relaxed).then(current_apic_id)
}

fn send_ipi(apic_id: u32, icr_low: u32) {
    lapic_write(LAPIC_ICR_HIGH, apic_id << 24);
    lapic_write(LAPIC_ICR_LOW, icr_low);
}

/// Fills AP `cpu`'s TSS (own ring-0 and double-fault stacks, I/O bitmap) and its GDT descriptor.
fn setup_ap_tss(cpu: usize) -> Result<(), &'static str> {
    let rsp0 = crate::early_alloc::alloc_zeroed(AP_RING0_STACK_BYTES, 16).ok_or("out of memory")?
        + AP_RING0_STACK_BYTES;
    let ist1 = crate::early_alloc::alloc_zeroed(AP_IST_STACK_BYTES, 16).ok_or("out of memory")?
        + AP_IST_STACK_BYTES;
    let tss = (&raw mut boot_ap_tss as *mut u8).wrapping_add(cpu * TSS_SIZE);
    let base = tss as u64;
    let low = TSS_LIMIT as u64
        | ((base & 0xff_ffff) << 16)
        | (0x89 << 40)
        | (((base >> 24) & 0xff) << 56);
    let gdt = &raw mut boot_gdt as *mut u64;
    let slot = usize::from(tss_selector(cpu)) / 8;
    // SAFETY: cpu < MAX_CPUS, so the TSS lies inside `boot_ap_tss` and the
    // descriptor inside `boot_gdt`; the AP that will use them is not running yet.
    unsafe {
        (tss.add(4) as *mut u64).write_unaligned(rsp0 as u64); // RSP0
        (tss.add(36) as *mut u64).write_unaligned(ist1 as u64); // IST1
        (tss.add(102) as *mut u16).write_unaligned(TSS_BASE_SIZE as u16); // I/O bitmap offset
        tss.add(TSS_LIMIT).write(0xff); // bitmap terminator (bitmap bytes are zero: ports allowed)
        gdt.add(slot).write_volatile(low);
        gdt.add(slot + 1).write_volatile(base >> 32);
    }
    Ok(())
}

fn wait_online(target: u32, deadline: u64) -> bool {
    while ONLINE.load(Ordering::Acquire) < target {
        if rdtsc() > deadline {
            return false;
        }
        pause();
    }
    true
}

/// Starts APs until `requested` CPUs are online (APIC IDs 0..requested, minus
/// the BSP's own). Returns the number of CPUs online.
pub fn start_aps(requested: u32) -> u32 {
    let requested = (requested as usize).min(MAX_CPUS) as u32;
    if requested <= 1 {
        return online();
    }
    let start = &raw const smp_tramp_start as usize;
    let len = &raw const smp_tramp_end as usize - start;
    // SAFETY: the trampoline page at 0x8000 is low RAM not used by the image,
    // the allocator, or (already parsed) boot structures; it is identity-mapped.
    unsafe { core::ptr::copy_nonoverlapping(start as *const u8, TRAMPOLINE_PADDR as *mut u8, len) };

    LAPIC_IN_USE.store(true, Ordering::Relaxed);
    let bsp_apic = current_apic_id();
    lapic_write(LAPIC_SVR, 0x1ff); // software-enable the LAPIC, spurious vector 0xff
    let t0 = rdtsc();
    let mut next_cpu = 1usize;
    let mut apic_id = 0u32;
    while (next_cpu as u32) < requested && apic_id < MAX_CPUS as u32 {
        let this_apic = apic_id;
        apic_id += 1;
        if this_apic == bsp_apic {
            continue;
        }
        if let Err(e) = setup_ap_tss(next_cpu) {
            println!("smp: cannot prepare cpu {next_cpu}: {e}");
            break;
        }
        let stack_bytes = AP_STACK.load(Ordering::Relaxed);
        let stack = match crate::early_alloc::alloc_zeroed(stack_bytes, 16) {
            Some(s) => s,
            None => {
                println!("smp: out of memory for cpu {next_cpu}'s stack");
                break;
            }
        };
        // SAFETY: no AP is between SIPI and ring 3 right now (we wait for each),
        // so nobody reads the mailbox while we write it.
        unsafe {
            (&raw mut ap_boot_mailbox).write_volatile(ApMailbox {
                ring3_rsp: (stack + stack_bytes - 8) as u64,
                index: next_cpu as u64,
                tss_selector: u64::from(tss_selector(next_cpu)),
            });
        }
        let target = next_cpu as u32 + 1;
        send_ipi(this_apic, ICR_INIT_ASSERT);
        send_ipi(this_apic, ICR_STARTUP | SIPI_VECTOR);
        let mut up = wait_online(target, crate::time::deadline_after_ms(FIRST_SIPI_WAIT_MS));
        if !up {
            send_ipi(this_apic, ICR_STARTUP | SIPI_VECTOR);
            up = wait_online(
                target,
                crate::time::deadline_after_ms(AP_TIMEOUT_MS - FIRST_SIPI_WAIT_MS),
            );
        }
        if !up {
            println!("smp: cpu {next_cpu} (apic id {this_apic}) did not come up; giving up");
            break;
        }
        next_cpu += 1;
    }
    let cpus = online();
    match crate::time::cycles_to_us(rdtsc() - t0) {
        Some(us) => println!(
            "smp: {cpus}/{requested} cpus online in {} ms",
            crate::time::Millis(us)
        ),
        None => println!(
            "smp: {cpus}/{requested} cpus online in {} cycles",
            rdtsc() - t0
        ),
    }
    cpus
}

/// Whether APs wait for work (`run_on_all`) instead of parking.
static WORKERS: AtomicBool = AtomicBool::new(false);
/// The job for `run_on_all`: a `fn(u32)` as an address, and its generation.
static JOB: AtomicUsize = AtomicUsize::new(0);
static JOB_GEN: AtomicU32 = AtomicU32::new(0);
static JOB_DONE: AtomicU32 = AtomicU32::new(0);

/// Ring-3 stack of each AP started later (at least [`AP_STACK_BYTES`]).
static AP_STACK: AtomicUsize = AtomicUsize::new(AP_STACK_BYTES);

/// Gives APs started later a larger ring-3 stack, for a workload whose library code needs it.
pub fn set_ap_stack_bytes(bytes: usize) {
    AP_STACK.store(bytes.max(AP_STACK_BYTES), Ordering::Relaxed);
}

/// Makes APs started later wait for `run_on_all` jobs (spinning) instead of parking.
pub fn set_workers(on: bool) {
    WORKERS.store(on, Ordering::Relaxed);
}

/// Runs `job(cpu)` on every online CPU (the caller is CPU 0) and waits for all.
pub fn run_on_all(job: fn(u32)) {
    start_on_aps(job);
    job(0);
    wait_for_aps();
}

/// Starts `job(cpu)` on every AP and returns at once, so CPU 0 can do other work beside them;
/// [`wait_for_aps`] waits for them.
pub fn start_on_aps(job: fn(u32)) {
    if online() > 1 {
        assert!(WORKERS.load(Ordering::Relaxed), "APs were parked");
        JOB_DONE.store(0, Ordering::Relaxed);
        JOB.store(job as usize, Ordering::Relaxed);
        JOB_GEN.fetch_add(1, Ordering::Release);
    }
}

/// Waits until every AP has finished the job [`start_on_aps`] gave it.
pub fn wait_for_aps() {
    while JOB_DONE.load(Ordering::Acquire) < online() - 1 {
        pause();
    }
}

/// First Rust code of an AP, in ring 3 on its own stack.
extern "C" fn ap_main(index: u64) -> ! {
    println!("cpu {index} online");
    let workers = WORKERS.load(Ordering::Relaxed);
    let mut seen = JOB_GEN.load(Ordering::Acquire);
    ONLINE.fetch_add(1, Ordering::Release);
    if !workers {
        park()
    }
    loop {
        let generation = JOB_GEN.load(Ordering::Acquire);
        if generation == seen {
            pause();
            continue;
        }
        seen = generation;
        let addr = JOB.load(Ordering::Relaxed);
        // SAFETY: `run_on_all` stored a `fn(u32)` as its address before bumping JOB_GEN
        // (release/acquire), and function pointers and addresses have the same size.
        let job: fn(u32) = unsafe { core::mem::transmute::<usize, fn(u32)>(addr) };
        job(index as u32);
        JOB_DONE.fetch_add(1, Ordering::Release);
    }
}
