//! Thin wrappers around x86-64 instructions used from ring 3: port I/O (allowed by
//! the TSS I/O bitmap), TSC, CPUID, `pause`, and `int3` into the park gate. A leaf.

use core::arch::asm;

/// Writes one byte to an I/O port.
///
/// # Safety
/// The caller must know what the device behind `port` does with the write.
#[inline]
pub unsafe fn outb(port: u16, value: u8) {
    // SAFETY: port I/O has no memory effects; the TSS I/O bitmap allows ports < 0x400 in ring 3.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags))
    }
}

/// Reads one byte from an I/O port.
///
/// # Safety
/// The caller must know that reading `port` has no harmful side effect.
#[inline]
pub unsafe fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: port I/O has no memory effects; the TSS I/O bitmap allows ports < 0x400 in ring 3.
    unsafe {
        asm!("in al, dx", in("dx") port, out("al") value, options(nomem, nostack, preserves_flags))
    }
    value
}

/// Writes a 32-bit value to an I/O port.
///
/// # Safety
/// The caller must know what the device behind `port` does with the write.
#[inline]
pub unsafe fn outl(port: u16, value: u32) {
    // SAFETY: port I/O has no memory effects; the TSS I/O bitmap allows ports < 0x400 in ring 3.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags))
    }
}

/// Reads the time-stamp counter.
#[inline]
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: rdtsc only reads the TSC (CR4.TSD is clear, so it works in ring 3).
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Spin-wait hint.
#[inline]
pub fn pause() {
    core::hint::spin_loop();
}

/// Executes CPUID and returns (eax, ebx, ecx, edx).
pub fn cpuid(leaf: u32, subleaf: u32) -> (u32, u32, u32, u32) {
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is always available on x86-64 and has no side effects.
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, subleaf) };
    (r.eax, r.ebx, r.ecx, r.edx)
}

/// Halts this CPU for good through the park gate `trap.rs` installs (vector 3,
/// entered with `int3`; a ring-0 `hlt` loop), so a parked vCPU costs the host
/// nothing.
pub fn park() -> ! {
    loop {
        // SAFETY: `int3` enters the park gate (vector 3, DPL 3), which halts
        // this CPU with interrupts off and never returns.
        unsafe { asm!("int3", options(nomem, nostack)) };
    }
}
