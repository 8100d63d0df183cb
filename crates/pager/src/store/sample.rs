//! The working-set sample's store (`sample.rs`): the pages a sampling period took out of guest
//! RAM, kept in host memory until they are touched or brought back.

use std::sync::Mutex;

use crate::page::PAGE_SIZE;
use crate::store::{PageStore, StoreCounters};

/// The pages out for a working-set sample, in host memory: slot `n` holds the content of the
/// `n`-th page of the period's sample.
pub struct SampleStore {
    slots: Mutex<Vec<u8>>,
    counters: StoreCounters,
}

impl SampleStore {
    pub fn new(slots: u32) -> Self {
        SampleStore {
            slots: Mutex::new(vec![0; slots as usize * PAGE_SIZE]),
            counters: StoreCounters::default(),
        }
    }

    /// The byte range of `len` bytes from slot `n`, if inside the store.
    fn range(slots: &[u8], n: u32, len: usize) -> std::io::Result<std::ops::Range<usize>> {
        let start = (n as usize)
            .checked_mul(PAGE_SIZE)
            .filter(|s| s.checked_add(len).is_some_and(|e| e <= slots.len()))
            .ok_or_else(|| std::io::Error::other(format!("sample slot {n} is out of range")))?;
        Ok(start..start + len)
    }
}

impl PageStore for SampleStore {
    fn describe(&self) -> String {
        "the sample store".into()
    }

    fn read(&self, n: u32, buf: &mut [u8]) -> std::io::Result<()> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        buf.copy_from_slice(&slots[Self::range(&slots, n, buf.len())?]);
        Ok(())
    }

    fn write(&self, n: u32, data: &[u8]) -> std::io::Result<()> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let r = Self::range(&slots, n, data.len())?;
        slots[r].copy_from_slice(data);
        Ok(())
    }

    fn counters(&self) -> &StoreCounters {
        &self.counters
    }
}
