//! The swap disk's slots (Linux's `mm/swapfile.c`, its `swap_info_struct`): a bitmap allocated
//! next-fit. A leaf: swap-in and swap-out (`swap.rs`) take and free slots in it, and
//! [`Mm`](crate::Mm) holds it.

/// The swap disk's slots (Linux's `swap_info_struct`): one bit per slot in a bitmap the caller
/// hands in, allocated next-fit from the last slot handed out.
pub(crate) struct SwapInfo<'a> {
    map: &'a mut [u64],
    slots: u32,
    used: u32,
    cursor: u32,
}

impl<'a> SwapInfo<'a> {
    /// No swap disk yet: no slots, over a bitmap of `map.len() * 64` bits.
    pub(crate) fn new(map: &'a mut [u64]) -> Self {
        SwapInfo {
            map,
            slots: 0,
            used: 0,
            cursor: 0,
        }
    }

    /// Slots of the swap disk.
    pub(crate) fn slots(&self) -> u32 {
        self.slots
    }

    /// Slots in use.
    pub(crate) fn used(&self) -> u32 {
        self.used
    }

    /// Whether slot `s` (below [`SwapInfo::slots`]) is in use.
    pub(crate) fn in_use(&self, s: u32) -> bool {
        self.map[(s / 64) as usize] & (1 << (s % 64)) != 0
    }

    /// Slots whose bit is set, counted in the bitmap (for [`Mm::verify`]).
    pub(crate) fn count_used(&self) -> u32 {
        self.map.iter().map(|w| w.count_ones()).sum()
    }

    /// Uses a swap disk of `slots` slots (at most the bitmap's bits). Only valid while no slot
    /// is in use.
    pub(crate) fn set(&mut self, slots: u32) {
        assert_eq!(self.used, 0);
        let slots = slots.min((self.map.len() * 64) as u32);
        self.map.fill(0);
        self.slots = slots;
        self.cursor = 0;
    }

    /// Allocates a slot, next-fit from the last one.
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        if self.used >= self.slots {
            return None;
        }
        let mut s = self.cursor;
        for _ in 0..self.slots {
            if s >= self.slots {
                s = 0;
            }
            let (w, b) = ((s / 64) as usize, s % 64);
            if self.map[w] & (1 << b) == 0 {
                self.map[w] |= 1 << b;
                self.used += 1;
                self.cursor = s + 1;
                return Some(s);
            }
            s += 1;
        }
        None
    }

    /// Frees a slot in use.
    pub(crate) fn free(&mut self, s: u32) {
        let (w, b) = ((s / 64) as usize, s % 64);
        assert!(
            s < self.slots && self.map[w] & (1 << b) != 0,
            "swap slot {s} is not in use"
        );
        self.map[w] &= !(1 << b);
        self.used -= 1;
    }
}
