//! The 16550A UART at port 0x3f8 (`vm-superio`, which reports FIFOs in IIR, so drivers send
//! 16 bytes per status check), its output copied to a host stream (the VMM's stdout).

use std::io::Write;

use vm_superio::{Serial as Uart, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::BusDevice;

/// Port of the first PC serial port.
pub const COM1_PORT: u64 = 0x3f8;
/// Number of registers of an 8250.
pub const COM1_LEN: u64 = 8;

/// Raises the serial interrupt line through an irqfd.
pub struct IrqTrigger(pub EventFd);

impl Trigger for IrqTrigger {
    type E = std::io::Error;
    fn trigger(&self) -> std::io::Result<()> {
        self.0.write(1)
    }
}

/// An 8250 whose transmitted bytes go to `W`.
pub struct Serial<W: Write + Send> {
    uart: Uart<IrqTrigger, vm_superio::serial::NoEvents, W>,
}

impl<W: Write + Send> Serial<W> {
    pub fn new(irq: EventFd, out: W) -> Self {
        Serial {
            uart: Uart::new(IrqTrigger(irq), out),
        }
    }
}

impl<W: Write + Send> BusDevice for Serial<W> {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if let (Ok(off), [b]) = (u8::try_from(offset), data) {
            *b = self.uart.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Ok(off), [b]) = (u8::try_from(offset), data) {
            if let Err(e) = self.uart.write(off, *b) {
                // A host fault the guest repeats with every byte it writes: rate-limited.
                crate::guest_error!(SerialError, "serial output failed: {e:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmits_bytes_and_ignores_odd_accesses() {
        let mut s = Serial::new(EventFd::new(libc::EFD_NONBLOCK).unwrap(), Vec::new());
        let mut b = [0u8];
        s.read(2, &mut b);
        assert_eq!(b[0] & 0xc0, 0xc0, "IIR reports FIFOs");
        s.read(5, &mut b);
        assert_eq!(b[0] & 0x60, 0x60, "transmitter empty");
        for c in b"ok\n" {
            s.write(0, &[*c]);
        }
        s.write(0, &[1, 2]);
        s.write(u64::MAX, &[1]);
        let mut wide = [0u8; 2];
        s.read(0, &mut wide);
        assert_eq!(wide, [0, 0]);
        assert_eq!(s.uart.writer(), b"ok\n");
    }
}
