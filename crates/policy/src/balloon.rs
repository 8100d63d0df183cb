//! Whether a VM's balloon can be used, and how fast the host moves it (ESX §3.2, §6.3).
//!
//! - **Usable.** ESX's soft state reclaims by ballooning "and resorts to paging only in cases
//!   where ballooning is not possible", and a balloon driver "may be uninstalled, disabled
//!   explicitly, unavailable while a guest OS is booting, or temporarily unable to reclaim
//!   memory quickly enough" (§3.2). So a balloon device is not enough: a balloon is usable once
//!   its driver has answered (it has inflated, or sent statistics), and only while, whenever the
//!   balloon's target is above what the driver holds, the driver has made progress toward it
//!   within [`ANSWER_DEADLINE`] seconds. A VM whose balloon is not usable is planned for as one
//!   without a balloon ([`VmObservation::balloon_usable`](crate::tick::VmObservation)): paged
//!   to its target in the soft state. Its balloon is still asked to inflate, so a driver that
//!   loads late or comes unstuck shows it by making progress, and is usable again.
//! - **The rate.** ESX's drivers "limit their allocation rates adaptively to avoid stressing
//!   the guest OS". Here the host does it, so it works with any virtio-balloon driver: a
//!   balloon's target rises toward the plan's by at most [`BalloonWatch::step`] above what the
//!   driver holds per tick; the step doubles while the driver keeps up (by the next reading it
//!   holds the target it was given, or has taken half a step toward it) and halves when it
//!   falls behind (short of its target, it took less than half a step), within [`STEP_MIN`]
//!   and [`STEP_MAX`]. Deflating is never held back: it gives memory back to the guest.
//! - **The cap** (`[host] balloon_max`, [`BALLOON_MAX`]) is applied by the plan
//!   ([`crate::plan`]): a balloon never holds more than that fraction of the VM's memory.
//! - **The cap a guest's re-reads set** ([`BalloonWatch::take_rereads`], `[host]
//!   balloon_rereads`). ESX balloons first because the guest knows best which of its pages
//!   to give up; a guest whose balloon leaves it less page cache than a file it reads in a
//!   loop gives up, by LRU, each block just before it reads it again, and reads the whole file
//!   from its disk every pass. The Swap Mapper sees this: the guest reads a block again that
//!   its page cache had given up (`guest_rereads` of its statistics). Each page a guest so
//!   re-reads while its balloon holds memory lowers its balloon's cap by a page, below what
//!   the balloon holds then; host paging takes the rest of the VM's target, which leaves the
//!   guest's cache whole and pages what the host's victim order finds cold. The cap is lifted
//!   after [`REREAD_QUIET`] seconds without such re-reads. Not in ESX; the measurement behind
//!   it is in docs/bench.md.
//!
//! No clocks: the host passes the time of each reading.

/// How long a driver may leave its balloon's target unmet without progress before its balloon
/// counts as unusable, in seconds.
pub const ANSWER_DEADLINE: f64 = 2.0;

/// The most of a VM's memory a balloon holds by default: ESX's default, 65 % (quoted by
/// Amit, Tsafrir and Schuster, "VSwapper", ASPLOS 2014, §2).
pub const BALLOON_MAX: f64 = 0.65;

/// Re-reads between two readings below this many pages say nothing of the balloon: a guest
/// with memory to spare evicts a few blocks now and then (HyperDealer2's least demand, 32).
pub const REREAD_MIN_PAGES: u64 = 32;

/// How long a guest must go without re-reads before the cap they set is lifted, in seconds.
pub const REREAD_QUIET: f64 = 30.0;

/// The smallest step of a balloon's target per tick.
pub const STEP_MIN: u64 = 4 << 20;
/// The largest step of a balloon's target per tick.
pub const STEP_MAX: u64 = 256 << 20;
/// The step a balloon starts with.
pub const STEP_START: u64 = 16 << 20;

/// What the host reads of a balloon at a tick (bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BalloonReading {
    /// When, in seconds (any origin, the same for every reading).
    pub now: f64,
    /// What the device asks the driver to hold.
    pub target: u64,
    /// What the driver holds.
    pub actual: u64,
    /// The driver has ever answered: inflated, or sent statistics.
    pub answered: bool,
}

/// What the host's cap on a balloon from its guest's re-reads did at a reading
/// ([`BalloonWatch::take_rereads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RereadCap {
    /// The guest began re-reading what its balloon took: its balloon holds at most this.
    Set(u64),
    /// Quiet for [`REREAD_QUIET`]: only the host's cap again.
    Lifted,
}

/// What the host keeps of one balloon between ticks: whether it is usable and its step.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BalloonWatch {
    /// The driver answers: the plan may balloon this VM.
    pub usable: bool,
    /// How far above what the driver holds the next target may go (bytes).
    pub step: u64,
    /// The most the balloon may hold since its guest re-read what it took, below the host's
    /// cap (bytes); `None`: only the host's cap.
    #[serde(default)]
    pub reread_cap: Option<u64>,
    /// The guest's re-reads at the last reading (pages, cumulative).
    #[serde(skip)]
    rereads: Option<u64>,
    /// When the guest last re-read [`REREAD_MIN_PAGES`] or more between two readings.
    #[serde(skip)]
    reread_at: Option<f64>,
    /// When the driver last held its target or moved toward it.
    #[serde(skip)]
    progress_at: Option<f64>,
    /// What the driver held at the last reading.
    #[serde(skip)]
    actual: u64,
    /// What [`BalloonWatch::observe`] last announced.
    #[serde(skip)]
    announced: Option<bool>,
}

impl Default for BalloonWatch {
    fn default() -> Self {
        BalloonWatch {
            usable: false,
            step: STEP_START,
            reread_cap: None,
            rereads: None,
            reread_at: None,
            progress_at: None,
            actual: 0,
            announced: None,
        }
    }
}

impl BalloonWatch {
    /// Takes in a reading: whether the balloon is usable now, and the step. Returns what to
    /// announce: `Some(true)` when it becomes usable, `Some(false)` when it stops being usable,
    /// or when a driver that never answered has let the deadline pass on its first target
    /// (once; a driver that has not answered and was asked nothing is not news).
    pub fn observe(&mut self, r: BalloonReading) -> Option<bool> {
        let behind = r.actual < r.target;
        let moved = r.actual > self.actual;
        if !behind || moved || self.progress_at.is_none() {
            self.progress_at = Some(r.now);
        }
        let moved_by = r.actual.saturating_sub(self.actual);
        // It keeps up if it took its whole target, or half a step since the last reading
        // while still short of it; less than that, it falls behind.
        let keeps_up = if behind {
            moved_by.saturating_mul(2) >= self.step
        } else {
            moved
        };
        if keeps_up {
            self.step = self.step.saturating_mul(2).min(STEP_MAX);
        } else if behind {
            self.step = (self.step / 2).max(STEP_MIN);
        }
        self.actual = r.actual;
        let waited = r.now - self.progress_at.unwrap_or(r.now);
        let stalled = behind && waited > ANSWER_DEADLINE;
        self.usable = r.answered && !stalled;
        let say = if self.usable {
            Some(true)
        } else if stalled || self.announced == Some(true) {
            Some(false)
        } else {
            None
        };
        if say.is_none() || say == self.announced {
            return None;
        }
        self.announced = say;
        say
    }

    /// Takes in the guest's re-reads at `now` (`total` pages since it started, as the Swap
    /// Mapper counts them) while its balloon holds `held` bytes: the cap falls by a page for
    /// each page re-read since the last reading, from at most `held`, if they are
    /// [`REREAD_MIN_PAGES`] or more and the balloon holds memory; it is lifted after
    /// [`REREAD_QUIET`] seconds without. Returns what to announce: the cap when it is first set,
    /// and its lifting.
    pub fn take_rereads(&mut self, now: f64, held: u64, total: u64) -> Option<RereadCap> {
        let new = total.saturating_sub(self.rereads.unwrap_or(total));
        self.rereads = Some(total);
        if new >= REREAD_MIN_PAGES {
            self.reread_at = Some(now);
            if held == 0 {
                return None;
            }
            let was = self.reread_cap;
            let cap = was
                .unwrap_or(u64::MAX)
                .min(held)
                .saturating_sub(new.saturating_mul(crate::balance::PAGE));
            self.reread_cap = Some(cap);
            return was.is_none().then_some(RereadCap::Set(cap));
        }
        let quiet = now - self.reread_at.unwrap_or(now) > REREAD_QUIET;
        if self.reread_cap.is_some() && quiet {
            self.reread_cap = None;
            return Some(RereadCap::Lifted);
        }
        None
    }

    /// The target to ask for when the device's is `now` and the plan's `plan`: the plan's when
    /// it is no higher, otherwise at most a step above what the driver holds (never below
    /// `now`: what was asked stays asked).
    #[must_use]
    pub fn next(&self, now: u64, plan: u64) -> u64 {
        if plan <= now {
            return plan;
        }
        plan.min(self.actual.saturating_add(self.step)).max(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn at(now: f64, target: u64, actual: u64, answered: bool) -> BalloonReading {
        BalloonReading {
            now,
            target,
            actual,
            answered,
        }
    }

    /// A driver that never loaded (booting, or left out) never answers: not usable, however
    /// long the device has asked.
    #[test]
    fn a_driver_that_never_answered_is_not_usable() {
        let mut w = BalloonWatch::default();
        assert_eq!(w.observe(at(0.0, 0, 0, false)), None, "not asked: not news");
        assert!(!w.usable);
        let said: Vec<Option<bool>> = (1..10)
            .map(|t| w.observe(at(f64::from(t), 64 * MIB, 0, false)))
            .collect();
        assert!(!w.usable);
        // Said once, when the deadline passed on its first target.
        assert_eq!(said[..3], [None, None, Some(false)], "{said:?}");
        assert!(said[3..].iter().all(Option::is_none), "{said:?}");
        // It loads and inflates: usable at once.
        assert_eq!(w.observe(at(10.0, 64 * MIB, 8 * MIB, true)), Some(true));
        assert!(w.usable);
    }

    /// A driver that answered and then stops moving toward its target is unusable once the
    /// deadline has passed, and usable again as soon as it moves.
    #[test]
    fn a_stuck_driver_is_unusable_after_the_deadline_and_usable_once_it_moves() {
        let mut w = BalloonWatch::default();
        assert_eq!(
            w.observe(at(0.0, 0, 0, true)),
            Some(true),
            "statistics are an answer"
        );
        assert_eq!(w.observe(at(1.0, 32 * MIB, 16 * MIB, true)), None);
        assert!(w.usable);
        w.observe(at(1.0 + ANSWER_DEADLINE, 32 * MIB, 16 * MIB, true));
        assert!(w.usable, "at the deadline, not past it");
        let stuck = at(1.1 + ANSWER_DEADLINE, 32 * MIB, 16 * MIB, true);
        assert_eq!(w.observe(stuck), Some(false));
        assert!(!w.usable);
        assert_eq!(
            w.observe(BalloonReading { now: 5.0, ..stuck }),
            None,
            "said once"
        );
        assert_eq!(w.observe(at(9.0, 32 * MIB, 17 * MIB, true)), Some(true));
        assert!(w.usable);
        // Holding its target, it may sit still for ever.
        w.observe(at(10.0, 32 * MIB, 32 * MIB, true));
        w.observe(at(100.0, 32 * MIB, 32 * MIB, true));
        assert!(w.usable);
    }

    #[test]
    fn the_step_doubles_while_the_driver_keeps_up_and_halves_when_it_falls_behind() {
        let mut w = BalloonWatch::default();
        w.observe(at(0.0, 0, 0, true));
        assert_eq!(w.step, STEP_START);
        // The target moves one step above what the driver holds, and no further.
        assert_eq!(w.next(0, 500 * MIB), STEP_START);
        assert_eq!(w.next(0, 10 * MIB), 10 * MIB, "the plan's, when nearer");
        let mut target = 0;
        let mut steps = Vec::new();
        for t in 1..8 {
            target = w.next(target, 500 * MIB);
            w.observe(at(f64::from(t), target, target, true));
            steps.push(w.step);
        }
        assert_eq!(steps[..3], [32 * MIB, 64 * MIB, 128 * MIB]);
        assert_eq!(*steps.last().unwrap(), STEP_MAX, "{steps:?}");
        // Short of its target and not moving: halved, down to the least.
        let mut now = 8.0;
        for _ in 0..10 {
            w.observe(at(now, target + 300 * MIB, target, true));
            now += 0.1;
        }
        assert_eq!(w.step, STEP_MIN);
        // A driver that takes 24 MiB a tick, however much it is asked: the step settles
        // between 24 and 48 MiB, never more than twice what it takes.
        let (mut actual, mut asked) = (target, target);
        let mut seen = Vec::new();
        for _ in 0..20 {
            asked = w.next(asked, 2000 * MIB);
            actual = (actual + 24 * MIB).min(asked);
            now += 0.25;
            w.observe(at(now, asked, actual, true));
            seen.push(w.step);
        }
        assert!(
            seen[10..]
                .iter()
                .all(|&s| (24 * MIB..=64 * MIB).contains(&s)),
            "{seen:?}"
        );
        // Deflating is never held back.
        assert_eq!(w.next(400 * MIB, 0), 0);
    }

    /// A guest that re-reads what its balloon took lowers its cap by what it re-reads, from
    /// what the balloon holds; a few re-reads, or re-reads with an empty balloon, change
    /// nothing; quiet for [`REREAD_QUIET`], the cap is lifted.
    #[test]
    fn re_reads_lower_the_balloons_cap_until_they_stop() {
        let mut w = BalloonWatch::default();
        assert_eq!(
            w.take_rereads(0.0, 200 * MIB, 1000),
            None,
            "the first reading"
        );
        assert_eq!(w.take_rereads(0.25, 200 * MIB, 1000 + 31), None, "noise");
        assert_eq!(w.reread_cap, None);
        // 2,048 pages (8 MiB) re-read: the balloon may hold 8 MiB less than it does.
        assert_eq!(
            w.take_rereads(0.5, 200 * MIB, 1031 + 2048),
            Some(RereadCap::Set(192 * MIB))
        );
        // It keeps falling while they go on, announced once, from below what it holds.
        assert_eq!(w.take_rereads(0.75, 190 * MIB, 3079 + 1024), None);
        assert_eq!(w.reread_cap, Some(186 * MIB));
        assert_eq!(w.take_rereads(1.0, 186 * MIB, 4103 + 1024 * 1024), None);
        assert_eq!(w.reread_cap, Some(0), "never below nothing");
        // Re-reads with nothing in the balloon are not the balloon's: the cap stays.
        let total = 4103 + 1024 * 1024;
        assert_eq!(w.take_rereads(2.0, 0, total + 4096), None);
        assert_eq!(w.reread_cap, Some(0));
        // Quiet: lifted once REREAD_QUIET has passed since the last re-reads.
        assert_eq!(w.take_rereads(2.0 + REREAD_QUIET, 0, total + 4096), None);
        assert_eq!(
            w.take_rereads(2.1 + REREAD_QUIET, 0, total + 4096),
            Some(RereadCap::Lifted)
        );
        assert_eq!(w.reread_cap, None);
        assert_eq!(w.take_rereads(100.0, 0, total + 4096), None, "said once");
    }

    proptest! {
        /// Whatever the driver does, the step stays in its bounds, the next target never
        /// passes the plan's or goes more than a step beyond what the driver holds when
        /// inflating, and a driver that never answered is never usable.
        #[test]
        fn the_watch_stays_in_bounds(
            readings in proptest::collection::vec((0u64..1024, 0u64..1024, any::<bool>()), 1..40),
            plan in 0u64..1024,
        ) {
            let mut w = BalloonWatch::default();
            let mut ever = false;
            for (i, &(target, actual, answered)) in readings.iter().enumerate() {
                ever |= answered;
                w.observe(at(i as f64 * 0.5, target * MIB, actual * MIB, ever));
                prop_assert!((STEP_MIN..=STEP_MAX).contains(&w.step));
                if !ever {
                    prop_assert!(!w.usable);
                }
                let next = w.next(target * MIB, plan * MIB);
                prop_assert!(next <= (plan * MIB).max(target * MIB));
                if next > target * MIB {
                    prop_assert!(next <= plan * MIB);
                    prop_assert!(next <= actual * MIB + w.step);
                }
            }
        }
    }
}
