//! Address-range dispatch of port I/O and MMIO accesses to devices.

use std::sync::{Arc, Mutex};

use thiserror::Error;

/// A device on a bus: accesses arrive with the offset from the start of its window.
pub trait BusDevice: Send {
    fn read(&mut self, offset: u64, data: &mut [u8]);
    fn write(&mut self, offset: u64, data: &[u8]);
}

#[derive(Debug, Error)]
pub enum BusError {
    #[error("bus window {base:#x}+{len:#x} overlaps an existing device or is empty")]
    Overlap { base: u64, len: u64 },
}

struct Window {
    base: u64,
    len: u64,
    device: Arc<Mutex<dyn BusDevice>>,
}

/// A set of non-overlapping device windows. Built once, then shared by every vCPU.
#[derive(Default)]
pub struct Bus {
    windows: Vec<Window>,
}

impl Bus {
    pub fn new() -> Self {
        Self::default()
    }

    /// Places `device` at `[base, base + len)`.
    pub fn insert(
        &mut self,
        base: u64,
        len: u64,
        device: Arc<Mutex<dyn BusDevice>>,
    ) -> Result<(), BusError> {
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(BusError::Overlap { base, len })?;
        if self
            .windows
            .iter()
            .any(|w| base < w.base + w.len && w.base < end)
        {
            return Err(BusError::Overlap { base, len });
        }
        let at = self.windows.partition_point(|w| w.base < base);
        self.windows.insert(at, Window { base, len, device });
        Ok(())
    }

    fn find(&self, addr: u64, len: usize) -> Option<(&Window, u64)> {
        let i = self
            .windows
            .partition_point(|w| w.base <= addr)
            .checked_sub(1)?;
        let w = &self.windows[i];
        let offset = addr - w.base;
        (offset.checked_add(len as u64)? <= w.len).then_some((w, offset))
    }

    /// Reads from the device at `addr`; returns false when no device claims the whole access.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> bool {
        let Some((w, offset)) = self.find(addr, data.len()) else {
            return false;
        };
        lock(&w.device).read(offset, data);
        true
    }

    /// Writes to the device at `addr`; returns false when no device claims the whole access.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        let Some((w, offset)) = self.find(addr, data.len()) else {
            return false;
        };
        lock(&w.device).write(offset, data);
        true
    }
}

/// Locks a device, carrying on if another vCPU panicked while holding it.
fn lock<'a>(
    d: &'a Mutex<dyn BusDevice + 'static>,
) -> std::sync::MutexGuard<'a, dyn BusDevice + 'static> {
    d.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test values are small by construction
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder {
        last: Option<(u64, Vec<u8>)>,
    }

    impl BusDevice for Recorder {
        fn read(&mut self, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&mut self, offset: u64, data: &[u8]) {
            self.last = Some((offset, data.to_vec()));
        }
    }

    #[test]
    fn dispatches_by_window_and_rejects_overlap() {
        let mut bus = Bus::new();
        let a = Arc::new(Mutex::new(Recorder::default()));
        bus.insert(0x100, 0x10, a.clone()).unwrap();
        bus.insert(0x200, 0x10, Arc::new(Mutex::new(Recorder::default())))
            .unwrap();
        assert!(bus
            .insert(0x108, 0x10, Arc::new(Mutex::new(Recorder::default())))
            .is_err());
        assert!(bus
            .insert(0x1f8, 0x10, Arc::new(Mutex::new(Recorder::default())))
            .is_err());
        assert!(bus
            .insert(0x300, 0, Arc::new(Mutex::new(Recorder::default())))
            .is_err());
        assert!(bus
            .insert(u64::MAX, 2, Arc::new(Mutex::new(Recorder::default())))
            .is_err());

        let mut buf = [0u8; 2];
        assert!(bus.read(0x104, &mut buf));
        assert_eq!(buf, [4, 4]);
        assert!(bus.write(0x10e, &[1, 2]));
        assert_eq!(a.lock().unwrap().last, Some((0xe, vec![1, 2])));
        // Straddling the end of a window, or outside every window: nobody claims it.
        assert!(!bus.write(0x10f, &[1, 2]));
        assert!(!bus.read(0x0ff, &mut buf));
        assert!(!bus.read(0x150, &mut buf));
        assert!(!bus.read(u64::MAX, &mut buf));
    }
}
