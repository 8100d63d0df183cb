//! Free-memory states (ESX §6.3): high, soft, hard and low, entered as the host's free memory
//! falls below 4 %, 2 % and 1 % of the budget, and left only once it is back above the next
//! higher threshold (soft is left for high above 6 %, hard for soft above 4 %, low for hard
//! above 2 %), so the state does not flap. In every state targets aim at 6 % free.

/// How hard the host is reclaiming.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FreeState {
    /// Free memory is sufficient: nothing is reclaimed.
    #[default]
    High,
    /// Balloons move VMs toward their targets.
    Soft,
    /// The pager's limits enforce targets as well.
    Hard,
    /// As hard, and VMs above their targets are paused while it lasts.
    Low,
}

/// The thresholds, as fractions of the budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    pub high: f64,
    pub soft: f64,
    pub hard: f64,
    pub low: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            high: 0.06,
            soft: 0.04,
            hard: 0.02,
            low: 0.01,
        }
    }
}

/// What a state asks of the host manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reclaim {
    /// Set balloon targets toward the allocation targets.
    pub balloon: bool,
    /// Set pager limits at the allocation targets.
    pub page: bool,
    /// Pause VMs above their targets (and resume them once the state is left).
    pub pause_above_target: bool,
}

impl FreeState {
    const ORDER: [FreeState; 4] = [
        FreeState::High,
        FreeState::Soft,
        FreeState::Hard,
        FreeState::Low,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// The free fraction below which this state is entered (from the one above it).
    fn entry(self, t: &Thresholds) -> f64 {
        match self {
            FreeState::High => f64::INFINITY,
            FreeState::Soft => t.soft,
            FreeState::Hard => t.hard,
            FreeState::Low => t.low,
        }
    }

    /// The free fraction above which this state is left for the one above it.
    fn exit(self, t: &Thresholds) -> f64 {
        match self {
            FreeState::High => 0.0,
            FreeState::Soft => t.high,
            FreeState::Hard => t.soft,
            FreeState::Low => t.hard,
        }
    }

    /// The state after observing `free` of `budget` pages free: down as far as the free memory
    /// says at once, up one state at a time and only past the next higher threshold.
    #[must_use]
    pub fn next(self, free: u64, budget: u64, t: &Thresholds) -> FreeState {
        if budget == 0 {
            return FreeState::Low;
        }
        let f = free as f64 / budget as f64;
        let mut i = self.index();
        while i + 1 < Self::ORDER.len() && f < Self::ORDER[i + 1].entry(t) {
            i += 1;
        }
        if i == self.index() && i > 0 && f >= Self::ORDER[i].exit(t) {
            i -= 1;
        }
        Self::ORDER[i]
    }

    pub fn reclaim(self) -> Reclaim {
        Reclaim {
            balloon: self >= FreeState::Soft,
            page: self >= FreeState::Hard,
            pause_above_target: self == FreeState::Low,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: u64 = 10_000;

    #[test]
    fn states_go_down_with_free_memory_and_come_back_with_hysteresis() {
        let t = Thresholds::default();
        let mut s = FreeState::High;
        s = s.next(500, B, &t); // 5 %
        assert_eq!(s, FreeState::High);
        s = s.next(350, B, &t); // 3.5 %
        assert_eq!(s, FreeState::Soft);
        s = s.next(500, B, &t); // 5 %: not yet back above 6 %
        assert_eq!(s, FreeState::Soft);
        s = s.next(50, B, &t); // 0.5 %: straight down to low
        assert_eq!(s, FreeState::Low);
        s = s.next(150, B, &t); // 1.5 %: still low (leaves above 2 %)
        assert_eq!(s, FreeState::Low);
        s = s.next(700, B, &t); // 7 %: one state up per observation
        assert_eq!(s, FreeState::Hard);
        s = s.next(700, B, &t);
        assert_eq!(s, FreeState::Soft);
        s = s.next(700, B, &t);
        assert_eq!(s, FreeState::High);
    }

    #[test]
    fn each_state_reclaims_as_esx_does() {
        assert_eq!(
            FreeState::High.reclaim(),
            Reclaim {
                balloon: false,
                page: false,
                pause_above_target: false
            }
        );
        assert!(FreeState::Soft.reclaim().balloon && !FreeState::Soft.reclaim().page);
        assert!(FreeState::Hard.reclaim().page && !FreeState::Hard.reclaim().pause_above_target);
        assert!(FreeState::Low.reclaim().pause_above_target);
    }

    proptest! {
        /// A free level held steady settles, and where it settles agrees with the thresholds.
        #[test]
        fn a_steady_free_level_settles(start in 0usize..4, free in 0u64..=B) {
            let t = Thresholds::default();
            let mut s = FreeState::ORDER[start];
            for _ in 0..4 {
                s = s.next(free, B, &t);
            }
            prop_assert_eq!(s.next(free, B, &t), s);
            let f = free as f64 / B as f64;
            if f < t.low {
                prop_assert_eq!(s, FreeState::Low);
            }
            if f >= t.high {
                prop_assert_eq!(s, FreeState::High);
            }
            if s != FreeState::High {
                prop_assert!(f < t.high);
            }
        }
    }
}
