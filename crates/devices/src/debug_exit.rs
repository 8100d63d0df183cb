//! The debug-exit port: a guest write ends the VM, like QEMU's `isa-debug-exit`.
//!
//! The VMM process then exits with status `(value << 1) | 1`, so a guest that writes 0 makes
//! the process exit with 1, exactly as under QEMU.

use crate::BusDevice;

/// Port of the debug-exit device (QEMU's `isa-debug-exit,iobase=0xf4`).
pub const DEBUG_EXIT_PORT: u64 = 0xf4;
/// Width of the port window: one 32-bit register.
pub const DEBUG_EXIT_LEN: u64 = 4;

/// The process exit status QEMU's `isa-debug-exit` gives for `value`.
pub fn exit_status(value: u32) -> u8 {
    // The process status is 8 bits wide; QEMU's `exit((val << 1) | 1)` truncates the same way.
    ((value << 1) | 1).to_le_bytes()[0]
}

/// Calls its handler with the value the guest wrote.
pub struct DebugExit {
    on_exit: Box<dyn FnMut(u32) + Send>,
}

impl DebugExit {
    pub fn new(on_exit: impl FnMut(u32) + Send + 'static) -> Self {
        DebugExit {
            on_exit: Box::new(on_exit),
        }
    }
}

impl BusDevice for DebugExit {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        data.fill(0xff);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset != 0 || data.len() > 4 {
            return;
        }
        let mut v = [0u8; 4];
        v[..data.len()].copy_from_slice(data);
        (self.on_exit)(u32::from_le_bytes(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_matches_qemu() {
        assert_eq!(exit_status(0), 1);
        assert_eq!(exit_status(1), 3);
        assert_eq!(exit_status(0x7f), 0xff);
        assert_eq!(exit_status(0x80), 1);
    }

    #[test]
    fn byte_and_dword_writes_reach_the_handler() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut d = DebugExit::new(move |v| tx.send(v).unwrap());
        d.write(0, &[7]);
        d.write(0, &0x1234u32.to_le_bytes());
        d.write(1, &[9]);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![7, 0x1234]);
    }
}
