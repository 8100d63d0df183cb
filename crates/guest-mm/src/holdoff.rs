//! When the balloon driver may inflate again after a deflate-on-OOM: pure logic over
//! milliseconds, so it is tested on the host.
//!
//! A deflate-on-OOM gives the guest memory it needs right now. If the driver then inflated
//! straight back towards the device's target, the next allocation would fail again, deflate
//! again, and the guest would spend its time moving the same pages in and out of the balloon.
//! So after a deflate-on-OOM the driver holds off inflating:
//!
//! 1. The first deflate-on-OOM starts a hold-off of the base length (`balloon_holdoff_ms`).
//! 2. Another one while the hold-off runs restarts it with the same length: the workload is
//!    still growing, and the hold-off counts from its last need.
//! 3. One that comes less than the last hold-off's length after inflation was allowed again
//!    (the memory the driver took back was needed at once) doubles the length, up to a
//!    maximum.
//! 4. One that comes later than that (inflation ran a whole hold-off's length without an OOM)
//!    starts over from the base length.
//!
//! Deflating never waits: a target below what the balloon holds is followed at once. A base of
//! 0 turns the hold-off off (inflation resumes at the next poll).

/// The inflation hold-off of the balloon driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holdoff {
    base_ms: u64,
    max_ms: u64,
    /// Length of the current (or last) hold-off.
    len_ms: u64,
    /// When the current (or last) hold-off ends; `None` before the first deflate-on-OOM.
    until_ms: Option<u64>,
}

impl Holdoff {
    /// A hold-off of `base_ms` after a first deflate-on-OOM, doubling up to `max_ms` (at least
    /// `base_ms`) while they keep coming.
    pub const fn new(base_ms: u64, max_ms: u64) -> Self {
        let max_ms = if max_ms < base_ms { base_ms } else { max_ms };
        Holdoff {
            base_ms,
            max_ms,
            len_ms: base_ms,
            until_ms: None,
        }
    }

    /// Whether the driver may inflate at `now_ms`.
    pub fn allows_inflate(&self, now_ms: u64) -> bool {
        self.until_ms.is_none_or(|until| now_ms >= until)
    }

    /// Records a deflate-on-OOM at `now_ms` and returns the length of the hold-off it started
    /// (0 when the hold-off is off).
    pub fn on_oom(&mut self, now_ms: u64) -> u64 {
        if self.base_ms == 0 {
            return 0;
        }
        self.len_ms = match self.until_ms {
            // Still holding off: restart with the same length.
            Some(until) if now_ms < until => self.len_ms,
            // Inflation had resumed and this came soon after: back off further.
            Some(until) if now_ms - until < self.len_ms => {
                self.len_ms.saturating_mul(2).min(self.max_ms)
            }
            _ => self.base_ms,
        };
        self.until_ms = Some(now_ms.saturating_add(self.len_ms));
        self.len_ms
    }

    /// Length of the current (or last) hold-off in milliseconds.
    pub fn len_ms(&self) -> u64 {
        self.len_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflation_waits_for_the_hold_off() {
        let mut h = Holdoff::new(1000, 8000);
        assert!(h.allows_inflate(0), "nothing held off before an OOM");
        assert_eq!(h.on_oom(100), 1000);
        assert!(!h.allows_inflate(100));
        assert!(!h.allows_inflate(1099));
        assert!(h.allows_inflate(1100));
    }

    #[test]
    fn an_oom_during_the_hold_off_restarts_it_without_doubling() {
        let mut h = Holdoff::new(1000, 8000);
        h.on_oom(0);
        assert_eq!(h.on_oom(10), 1000);
        assert_eq!(h.on_oom(900), 1000);
        assert!(!h.allows_inflate(1899));
        assert!(h.allows_inflate(1900));
    }

    #[test]
    fn ooms_right_after_inflation_resumes_double_it_up_to_the_maximum() {
        let mut h = Holdoff::new(1000, 5000);
        let mut now = 0;
        for want in [1000, 2000, 4000, 5000, 5000] {
            assert_eq!(h.on_oom(now), want);
            // Inflation resumes when the hold-off ends; the next OOM comes 50 ms later.
            now += want + 50;
            assert!(h.allows_inflate(now));
        }
    }

    #[test]
    fn a_calm_hold_off_length_resets_it() {
        let mut h = Holdoff::new(1000, 8000);
        h.on_oom(0);
        assert_eq!(h.on_oom(1050), 2000);
        // Ends at 3050; inflation then runs 2000 ms without an OOM.
        assert_eq!(h.on_oom(5050), 1000);
        assert_eq!(h.len_ms(), 1000);
    }

    #[test]
    fn a_base_of_zero_turns_it_off() {
        let mut h = Holdoff::new(0, 0);
        assert_eq!(h.on_oom(5), 0);
        assert!(h.allows_inflate(5));
    }

    #[test]
    fn a_maximum_below_the_base_is_the_base() {
        let mut h = Holdoff::new(3000, 1000);
        assert_eq!(h.on_oom(0), 3000);
        assert_eq!(h.on_oom(3010), 3000);
    }

    #[test]
    fn times_near_the_end_of_u64_do_not_overflow() {
        let mut h = Holdoff::new(u64::MAX / 2, u64::MAX);
        assert_eq!(h.on_oom(u64::MAX - 1), u64::MAX / 2);
        assert!(!h.allows_inflate(u64::MAX - 1));
        assert!(h.allows_inflate(u64::MAX));
    }
}
