//! The 16550A UART at port 0x3f8 (`vm-superio`, which reports FIFOs in IIR, so drivers send
//! 16 bytes per status check), its output copied to a host stream (the VMM's stdout) a whole
//! line at a time ([`Lines`]).

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

/// How long a partial line may grow before it is passed on without its newline, in bytes.
pub const MAX_LINE: usize = 4096;

/// A writer that passes on whole lines, each with one `write_all`, and ignores flushes between
/// them. The UART flushes after every byte it transmits; written through as they come, the
/// guest's console lines would cost a system call a byte and be cut by whatever else writes to
/// the same file (the VMM's log lines, when both go to one file as under `memvisor host`). A
/// partial line waits for its newline, for [`MAX_LINE`] bytes, or for the writer's end.
pub struct Lines<W: Write> {
    out: W,
    line: Vec<u8>,
}

impl<W: Write> Lines<W> {
    pub fn new(out: W) -> Self {
        Lines {
            out,
            line: Vec::new(),
        }
    }

    /// What was passed on so far.
    pub fn inner(&self) -> &W {
        &self.out
    }

    fn pass_on(&mut self) -> std::io::Result<()> {
        if self.line.is_empty() {
            return Ok(());
        }
        let r = self
            .out
            .write_all(&self.line)
            .and_then(|()| self.out.flush());
        self.line.clear();
        r
    }
}

impl<W: Write> Write for Lines<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for chunk in buf.split_inclusive(|&b| b == b'\n') {
            self.line.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") || self.line.len() >= MAX_LINE {
                self.pass_on()?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for Lines<W> {
    fn drop(&mut self) {
        // The VMM is going away: what the guest wrote last is not lost.
        let _ = self.pass_on();
    }
}

/// An 8250 whose transmitted bytes go to `W`, line by line.
pub struct Serial<W: Write + Send> {
    uart: Uart<IrqTrigger, vm_superio::serial::NoEvents, Lines<W>>,
}

/// The UART's registers in a snapshot (`vm_superio::serial::SerialState`'s fields).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SerialSnapshot {
    pub baud_divisor_low: u8,
    pub baud_divisor_high: u8,
    pub interrupt_enable: u8,
    pub interrupt_identification: u8,
    pub line_control: u8,
    pub line_status: u8,
    pub modem_control: u8,
    pub modem_status: u8,
    pub scratch: u8,
    pub in_buffer: Vec<u8>,
}

impl<W: Write + Send> Serial<W> {
    pub fn new(irq: EventFd, out: W) -> Self {
        Serial {
            uart: Uart::new(IrqTrigger(irq), Lines::new(out)),
        }
    }

    /// The UART's registers for a snapshot (a partial output line stays with this VMM).
    pub fn save(&self) -> SerialSnapshot {
        let s = self.uart.state();
        SerialSnapshot {
            baud_divisor_low: s.baud_divisor_low,
            baud_divisor_high: s.baud_divisor_high,
            interrupt_enable: s.interrupt_enable,
            interrupt_identification: s.interrupt_identification,
            line_control: s.line_control,
            line_status: s.line_status,
            modem_control: s.modem_control,
            modem_status: s.modem_status,
            scratch: s.scratch,
            in_buffer: s.in_buffer,
        }
    }

    /// A UART with the registers of `s`.
    pub fn restored(irq: EventFd, out: W, s: &SerialSnapshot) -> Result<Self, String> {
        let state = vm_superio::serial::SerialState {
            baud_divisor_low: s.baud_divisor_low,
            baud_divisor_high: s.baud_divisor_high,
            interrupt_enable: s.interrupt_enable,
            interrupt_identification: s.interrupt_identification,
            line_control: s.line_control,
            line_status: s.line_status,
            modem_control: s.modem_control,
            modem_status: s.modem_status,
            scratch: s.scratch,
            in_buffer: s.in_buffer.clone(),
        };
        let uart = Uart::from_state(
            &state,
            IrqTrigger(irq),
            vm_superio::serial::NoEvents,
            Lines::new(out),
        )
        .map_err(|e| format!("the snapshot's serial port is not a valid 16550A: {e:?}"))?;
        Ok(Serial { uart })
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
        assert_eq!(s.uart.writer().inner(), b"ok\n");
    }

    #[test]
    fn a_restored_uart_has_the_saved_registers() {
        let mut s = Serial::new(EventFd::new(libc::EFD_NONBLOCK).unwrap(), Vec::new());
        s.write(3, &[0x83]); // LCR with DLAB
        s.write(0, &[0x01]);
        s.write(3, &[0x03]);
        s.write(7, &[0x5a]);
        let saved = s.save();
        let mut r = Serial::restored(
            EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            Vec::new(),
            &saved,
        )
        .unwrap();
        assert_eq!(r.save(), saved);
        let mut b = [0u8];
        r.read(7, &mut b);
        assert_eq!(b[0], 0x5a);
        let bad = SerialSnapshot {
            in_buffer: vec![0; 1000],
            ..saved
        };
        assert!(
            Serial::restored(EventFd::new(libc::EFD_NONBLOCK).unwrap(), Vec::new(), &bad).is_err()
        );
    }

    /// Each line reaches the host stream in one write, whole, however the UART feeds it; a
    /// partial line waits for its newline, a very long one is passed on at the bound, and the
    /// rest is not lost when the writer ends.
    #[test]
    fn the_console_is_passed_on_whole_lines_at_a_time() {
        struct Writes(std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>>);
        impl Write for Writes {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.borrow_mut().push(b.to_vec());
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut l = Lines::new(Writes(seen.clone()));
        for b in b"RESULT workload=kv" {
            l.write_all(&[*b]).unwrap();
            l.flush().unwrap();
        }
        assert!(seen.borrow().is_empty(), "no partial line passed on");
        l.write_all(b" ok=1\nnext\nhalf").unwrap();
        assert_eq!(
            *seen.borrow(),
            [b"RESULT workload=kv ok=1\n".to_vec(), b"next\n".to_vec()]
        );
        l.write_all(&vec![b'x'; MAX_LINE]).unwrap();
        assert_eq!(seen.borrow().len(), 3);
        assert_eq!(
            seen.borrow()[2].len(),
            4 + MAX_LINE,
            "\"half\" and the long run"
        );
        l.write_all(b"tail").unwrap();
        drop(l);
        assert_eq!(seen.borrow().last().unwrap(), b"tail");
    }
}
