//! The isa-debug-exit port that ends the VM: the [`ExitCode`] the guest writes there, and
//! [`exit`], which parks the CPU when the port is absent.

use crate::cpu::{outl, park};
use crate::serial;

/// I/O port of the isa-debug-exit device: the VMM exits with status `(value << 1) | 1`.
const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Value written to the debug-exit port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ExitCode {
    Success = 0,
    Failure = 1,
    Panic = 0x7e,
    Exception = 0x7f,
}

/// Ends the VM through the debug-exit port. Never returns; if the port is
/// absent, the CPU is parked.
pub fn exit(code: ExitCode) -> ! {
    // SAFETY: the debug-exit device terminates the VM; nothing else listens on 0xf4.
    unsafe { outl(DEBUG_EXIT_PORT, code as u32) };
    serial::emergency_unlock();
    println!(
        "exit: debug-exit port 0xf4 did not stop the VM (code {:#x}); parking",
        code as u32
    );
    park()
}
