//! 8250/16550 UART console on I/O port 0x3f8 and the `print!`/`println!` macros.
//!
//! Every port access is a VM exit, so the driver is frugal: it reads LSR only
//! when it has no known transmit room. If the UART reports working FIFOs
//! (IIR bits 7:6 = 11 after enabling them) it writes 16 bytes per LSR check,
//! otherwise one byte per check.

use core::fmt::{self, Write};

use crate::cpu::{inb, outb};
use crate::sync::SpinLock;

const COM1: u16 = 0x3f8;
const THR: u16 = COM1; // transmit holding register (write)
const FCR: u16 = COM1 + 2; // FIFO control (write)
const IIR: u16 = COM1 + 2; // interrupt identification (read)
const LSR: u16 = COM1 + 5; // line status
const LSR_THRE: u8 = 1 << 5;
const FIFO_DEPTH: u32 = 16;

struct Uart {
    /// Bytes we may still write without checking LSR.
    room: u32,
    /// Bytes the transmitter accepts once LSR.THRE is seen (1, or 16 with FIFOs).
    burst: u32,
}

impl Uart {
    fn put(&mut self, byte: u8) {
        if self.room == 0 {
            // SAFETY: reading LSR of the console UART has no side effects.
            while unsafe { inb(LSR) } & LSR_THRE == 0 {
                crate::cpu::pause();
            }
            self.room = self.burst;
        }
        // SAFETY: THR is empty (LSR.THRE seen, room accounted), writing transmits the byte.
        unsafe { outb(THR, byte) };
        self.room -= 1;
    }
}

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        s.bytes().for_each(|b| self.put(b));
        Ok(())
    }
}

static UART: SpinLock<Uart> = SpinLock::new(Uart { room: 0, burst: 1 });

/// Enables and clears the UART FIFOs and detects whether they work.
/// Costs two port accesses. Printing works (slower) without it.
pub fn init() {
    let mut uart = UART.lock();
    // SAFETY: FCR = enable + clear both FIFOs; IIR read only reports state.
    let iir = unsafe {
        outb(FCR, 0x07);
        inb(IIR)
    };
    uart.burst = if iir & 0xc0 == 0xc0 { FIFO_DEPTH } else { 1 };
    uart.room = 0;
}

/// Releases the console lock; used by the panic and exception paths.
pub fn emergency_unlock() {
    // SAFETY: called only on fatal paths, where interleaved output is acceptable.
    unsafe { UART.force_unlock() };
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments<'_>) {
    let _ = UART.lock().write_fmt(args);
}

#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::serial::_print(format_args!($($arg)*)) };
}

#[macro_export]
macro_rules! println {
    () => { $crate::serial::_print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::serial::_print(format_args!("{}\n", format_args!($($arg)*))) };
}
