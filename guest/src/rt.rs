//! Freestanding runtime symbols that compiler-generated code calls: `memcpy`,
//! `memmove`, `memset`, `memcmp`, `bcmp` (the host target's compiler_builtins
//! does not provide them without its "mem" feature).
//!
//! They use `rep movsb`/`rep stosb` or volatile loops so the compiler cannot
//! turn them back into calls to themselves. The direction flag is clear
//! everywhere in the kit (ABI requirement; the trap stub does `cld`).

use core::arch::asm;

/// Copies `n` bytes from `src` to `dst` (non-overlapping).
///
/// # Safety
/// Both ranges must be valid for `n` bytes and must not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees valid, non-overlapping ranges; DF is clear.
    unsafe {
        asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _,
             options(nostack, preserves_flags));
    }
    dst
}

/// Copies `n` bytes from `src` to `dst`; the ranges may overlap.
///
/// # Safety
/// Both ranges must be valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize).wrapping_add(n) {
        // SAFETY: a forward copy is correct when dst is below src or the ranges are disjoint.
        unsafe { memcpy(dst, src, n) }
    } else {
        // SAFETY: dst overlaps the tail of src, so copy backwards (DF set just for
        // this instruction and cleared again).
        unsafe {
            asm!("std", "rep movsb", "cld",
                 inout("rcx") n => _,
                 inout("rdi") dst.add(n - 1) => _,
                 inout("rsi") src.add(n - 1) => _,
                 options(nostack));
        }
        dst
    }
}

/// Fills `n` bytes at `dst` with the low byte of `value`.
///
/// # Safety
/// The range must be valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(dst: *mut u8, value: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the range is valid; DF is clear.
    unsafe {
        asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") value as u8,
             options(nostack, preserves_flags));
    }
    dst
}

/// Compares `n` bytes; returns <0, 0 or >0 like C's memcmp.
///
/// # Safety
/// Both ranges must be valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: i < n and the caller guarantees both ranges are valid; volatile
        // reads keep the compiler from turning this loop back into a memcmp call.
        let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// Compares `n` bytes for equality (0 = equal).
///
/// # Safety
/// Both ranges must be valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract as memcmp.
    unsafe { memcmp(a, b, n) }
}

/// Personality routine referenced by the precompiled (unwind-enabled) libcore's
/// unwind tables. The kit is built with `panic = "abort"` and never unwinds,
/// so this is never called; it only satisfies the linker in non-LTO builds.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}
