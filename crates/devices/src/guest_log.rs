//! What a guest does wrong, counted, and logged at a rate the guest cannot raise.
//!
//! A guest can touch an address no device claims, or break the virtio protocol, as often as it
//! likes; logging each time would let it fill the host's disk and bury everything else in the
//! log. So every message a guest can cause at will goes through one [`GuestLog`], by kind
//! ([`GuestError`]):
//!
//! 1. every occurrence is counted (`GET /stats` reports the counts as `guest_errors`);
//! 2. the first [`BURST`] of each kind are logged as they come, the last of them saying that
//!    more will be summarized;
//! 3. after that, an occurrence at least [`INTERVAL`] after the kind's last line is logged as
//!    one summary line: how many were suppressed since, how many there were in all, and the
//!    latest message; the others are suppressed (counted in
//!    [`GuestLog::suppressed`]);
//! 4. at the end of the run, [`GuestLog::finish`] logs one line with every count, if anything
//!    was suppressed since its kind's last line.
//!
//! So a kind logs at most `BURST` lines, then one per interval, however hard the guest tries.
//! Host faults a guest can repeat at will (an I/O error on the disk image, which the guest can
//! retry in a loop; a userfaultfd call of the pager's that fails for each disk request) go
//! through here too, as kinds of their own. The VMM keeps one instance for
//! the process ([`guest_log`]: one VMM process runs one VM); tests make their own with
//! [`GuestLog::new`] and their own clock ([`GuestLog::record_at`]).

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Messages of one kind logged before the rest are only summarized.
pub const BURST: u64 = 5;
/// Least time between two summary lines of one kind.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// A kind of guest error (or of host fault a guest can repeat at will).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestError {
    /// A read or write of an I/O port no device claims.
    UnclaimedPort,
    /// A read or write of an MMIO address no device claims.
    UnclaimedMmio,
    /// FEATURES_OK refused: the driver accepted features the device did not offer, or not
    /// VIRTIO_F_VERSION_1.
    RefusedFeatures,
    /// DRIVER_OK without accepted features or with a ready queue outside guest memory: the
    /// device needs a reset.
    RefusedDriverOk,
    /// A write to a virtio-mmio register that does not take one now (a queue register outside
    /// set-up, a read-only register, a width other than 4 bytes).
    IgnoredRegisterWrite,
    /// A virtio-blk request rejected (malformed chain, buffer outside guest memory, sector past
    /// the end, a write to a read-only disk) or of a type the device does not support.
    BadBlockRequest,
    /// A used ring the device could not write (outside guest memory).
    UsedRingError,
    /// A balloon PFN or free page report outside guest RAM, a buffer it could not read, or PFNs
    /// and ranges past what one request may carry.
    BadBalloonPage,
    /// Host fault: reading or writing the disk image failed.
    DiskIoError,
    /// Host fault: releasing the pages the balloon took or the guest reported failed.
    BalloonReleaseError,
    /// Host fault: writing the serial port's output failed.
    SerialError,
    /// Host fault: the pager could not install or write-protect guest pages for a device
    /// request (a userfaultfd call failed).
    PagerDeviceError,
}

/// How loud a kind's messages are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Warn,
    Debug,
}

impl GuestError {
    /// Every kind, in the order of [`GuestError::name`]'s fields.
    pub const ALL: [GuestError; 12] = [
        GuestError::UnclaimedPort,
        GuestError::UnclaimedMmio,
        GuestError::RefusedFeatures,
        GuestError::RefusedDriverOk,
        GuestError::IgnoredRegisterWrite,
        GuestError::BadBlockRequest,
        GuestError::UsedRingError,
        GuestError::BadBalloonPage,
        GuestError::DiskIoError,
        GuestError::BalloonReleaseError,
        GuestError::SerialError,
        GuestError::PagerDeviceError,
    ];

    /// The kind's counter in `GET /stats`'s `guest_errors`.
    pub fn name(self) -> &'static str {
        match self {
            GuestError::UnclaimedPort => "unclaimed_port_accesses",
            GuestError::UnclaimedMmio => "unclaimed_mmio_accesses",
            GuestError::RefusedFeatures => "refused_features",
            GuestError::RefusedDriverOk => "refused_driver_ok",
            GuestError::IgnoredRegisterWrite => "ignored_register_writes",
            GuestError::BadBlockRequest => "bad_block_requests",
            GuestError::UsedRingError => "used_ring_errors",
            GuestError::BadBalloonPage => "bad_balloon_pages",
            GuestError::DiskIoError => "disk_io_errors",
            GuestError::BalloonReleaseError => "balloon_release_errors",
            GuestError::SerialError => "serial_errors",
            GuestError::PagerDeviceError => "pager_device_errors",
        }
    }

    /// What one occurrence is, for summary lines (plural).
    fn what(self) -> &'static str {
        match self {
            GuestError::UnclaimedPort => "accesses to unclaimed I/O ports",
            GuestError::UnclaimedMmio => "accesses to unclaimed MMIO addresses",
            GuestError::RefusedFeatures => "refused virtio FEATURES_OK",
            GuestError::RefusedDriverOk => "refused virtio DRIVER_OK",
            GuestError::IgnoredRegisterWrite => "ignored virtio-mmio register writes",
            GuestError::BadBlockRequest => "rejected virtio-blk requests",
            GuestError::UsedRingError => "virtio used ring write failures",
            GuestError::BadBalloonPage => "bad balloon PFNs and reports",
            GuestError::DiskIoError => "disk image I/O errors",
            GuestError::BalloonReleaseError => "balloon release failures",
            GuestError::SerialError => "serial output failures",
            GuestError::PagerDeviceError => "pager failures serving device I/O",
        }
    }

    /// Ordinary driver mistakes a guest makes while probing are not worth a warning.
    fn level(self) -> Level {
        match self {
            GuestError::IgnoredRegisterWrite | GuestError::BadBlockRequest => Level::Debug,
            _ => Level::Warn,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What to do with one occurrence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Log the message; `last` for the last of the burst.
    Log { last: bool },
    /// Only count it.
    Suppress,
    /// Log a summary: `suppressed` messages of this kind (this one included) since its last
    /// line, `total` in all.
    Summary { suppressed: u64, total: u64 },
}

/// One kind's count and when it last logged.
#[derive(Clone, Copy, Debug)]
struct KindState {
    total: u64,
    /// Suppressed since the kind's last line.
    pending: u64,
    /// When the kind last logged a line.
    last_line: Option<Instant>,
}

impl KindState {
    const NEW: KindState = KindState {
        total: 0,
        pending: 0,
        last_line: None,
    };
}

#[derive(Debug)]
struct State {
    kinds: [KindState; GuestError::ALL.len()],
    suppressed: u64,
}

/// The counts and rate limits of guest errors; see the module's documentation.
#[derive(Debug)]
pub struct GuestLog(Mutex<State>);

impl Default for GuestLog {
    fn default() -> Self {
        Self::new()
    }
}

static GUEST_LOG: GuestLog = GuestLog::new();

/// The process's guest log, which every device and the VMM report to.
pub fn guest_log() -> &'static GuestLog {
    &GUEST_LOG
}

/// Reports a guest error of kind `$kind` (a [`GuestError`] variant's name) to [`guest_log`],
/// with a message in `format!` syntax, formatted only when it is logged.
#[macro_export]
macro_rules! guest_error {
    ($kind:ident, $($arg:tt)+) => {
        $crate::guest_log::guest_log()
            .report($crate::guest_log::GuestError::$kind, format_args!($($arg)+))
    };
}

impl GuestLog {
    pub const fn new() -> Self {
        GuestLog(Mutex::new(State {
            kinds: [KindState::NEW; GuestError::ALL.len()],
            suppressed: 0,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one occurrence of `kind` at `now` and says whether to log it.
    pub fn record_at(&self, kind: GuestError, now: Instant) -> Verdict {
        let mut st = self.state();
        let k = &mut st.kinds[kind.index()];
        k.total = k.total.saturating_add(1);
        if k.total <= BURST {
            k.last_line = Some(now);
            return Verdict::Log {
                last: k.total == BURST,
            };
        }
        k.pending += 1;
        let due = k
            .last_line
            .is_none_or(|t| now.saturating_duration_since(t) >= INTERVAL);
        let verdict = if due {
            let v = Verdict::Summary {
                suppressed: k.pending,
                total: k.total,
            };
            k.pending = 0;
            k.last_line = Some(now);
            v
        } else {
            Verdict::Suppress
        };
        st.suppressed += 1;
        verdict
    }

    /// Counts one occurrence of `kind` now and logs `msg`, a summary with it, or nothing.
    pub fn report(&self, kind: GuestError, msg: fmt::Arguments<'_>) {
        match self.record_at(kind, Instant::now()) {
            Verdict::Log { last: false } => emit(kind.level(), format_args!("{msg}")),
            Verdict::Log { last: true } => emit(
                kind.level(),
                format_args!(
                    "{msg} (more {} are counted and summarized every {} s)",
                    kind.what(),
                    INTERVAL.as_secs()
                ),
            ),
            Verdict::Suppress => {}
            Verdict::Summary { suppressed, total } => emit(
                kind.level(),
                format_args!(
                    "{suppressed} more {} suppressed ({total} in all); the latest: {msg}",
                    kind.what()
                ),
            ),
        }
    }

    /// Occurrences of `kind` so far, logged or not.
    pub fn count(&self, kind: GuestError) -> u64 {
        self.state().kinds[kind.index()].total
    }

    /// Messages of every kind suppressed so far (those counted in summaries included).
    pub fn suppressed(&self) -> u64 {
        self.state().suppressed
    }

    /// The end-of-run line: every kind's count, if some messages were suppressed after their
    /// kind's last line (a warning when one of those kinds warns). Returns the line.
    pub fn finish(&self) -> Option<String> {
        let st = self.state();
        let pending: Vec<GuestError> = GuestError::ALL
            .into_iter()
            .filter(|k| st.kinds[k.index()].pending > 0)
            .collect();
        if pending.is_empty() {
            return None;
        }
        let counts: Vec<String> = GuestError::ALL
            .into_iter()
            .filter(|k| st.kinds[k.index()].total > 0)
            .map(|k| format!("{} {}", st.kinds[k.index()].total, k.what()))
            .collect();
        let line = format!(
            "guest errors in this run: {} ({} messages suppressed)",
            counts.join(", "),
            st.suppressed
        );
        let level = if pending.iter().any(|k| k.level() == Level::Warn) {
            Level::Warn
        } else {
            Level::Debug
        };
        drop(st);
        emit(level, format_args!("{line}"));
        Some(line)
    }
}

fn emit(level: Level, msg: fmt::Arguments<'_>) {
    match level {
        Level::Warn => tracing::warn!("{msg}"),
        Level::Debug => tracing::debug!("{msg}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_suppression_then_one_summary_per_interval() {
        let log = GuestLog::new();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let kind = GuestError::UnclaimedPort;
        for i in 1..=BURST {
            assert_eq!(
                log.record_at(kind, at(i)),
                Verdict::Log { last: i == BURST }
            );
        }
        // Within the interval after the burst's last line: counted, not logged.
        for i in 0..100 {
            assert_eq!(log.record_at(kind, at(10 + i)), Verdict::Suppress);
        }
        assert_eq!(log.count(kind), BURST + 100);
        assert_eq!(log.suppressed(), 100);
        // The first one an interval after that line is the summary, itself included.
        let burst_end = BURST;
        let due = burst_end + u64::try_from(INTERVAL.as_millis()).unwrap();
        assert_eq!(log.record_at(kind, at(due - 1)), Verdict::Suppress);
        assert_eq!(
            log.record_at(kind, at(due)),
            Verdict::Summary {
                suppressed: 102,
                total: BURST + 102
            }
        );
        // The next interval starts at the summary.
        assert_eq!(log.record_at(kind, at(due + 1)), Verdict::Suppress);
        assert_eq!(
            log.record_at(kind, at(due + 20_000)),
            Verdict::Summary {
                suppressed: 2,
                total: BURST + 104
            }
        );
        assert_eq!(log.suppressed(), 104);
    }

    #[test]
    fn kinds_are_limited_apart() {
        let log = GuestLog::new();
        let t = Instant::now();
        for _ in 0..BURST {
            log.record_at(GuestError::RefusedFeatures, t);
        }
        assert_eq!(
            log.record_at(GuestError::RefusedFeatures, t),
            Verdict::Suppress
        );
        // Another kind has its own burst.
        assert_eq!(
            log.record_at(GuestError::RefusedDriverOk, t),
            Verdict::Log { last: false }
        );
        assert_eq!(log.count(GuestError::RefusedFeatures), BURST + 1);
        assert_eq!(log.count(GuestError::RefusedDriverOk), 1);
        assert_eq!(log.count(GuestError::UnclaimedMmio), 0);
        assert_eq!(log.suppressed(), 1);
    }

    #[test]
    fn a_clock_that_goes_back_does_not_summarize_early() {
        let log = GuestLog::new();
        let t = Instant::now() + Duration::from_secs(100);
        for _ in 0..BURST {
            log.record_at(GuestError::SerialError, t);
        }
        let earlier = t - Duration::from_secs(50);
        assert_eq!(
            log.record_at(GuestError::SerialError, earlier),
            Verdict::Suppress
        );
    }

    #[test]
    fn finish_reports_only_what_no_line_covered() {
        let log = GuestLog::new();
        let t = Instant::now();
        assert_eq!(log.finish(), None);
        for _ in 0..BURST {
            log.record_at(GuestError::UnclaimedMmio, t);
        }
        // Everything was logged: nothing to add.
        assert_eq!(log.finish(), None);
        for _ in 0..7 {
            log.record_at(GuestError::UnclaimedMmio, t);
        }
        log.record_at(GuestError::BadBlockRequest, t);
        let line = log.finish().unwrap();
        assert!(
            line.contains("12 accesses to unclaimed MMIO addresses"),
            "{line}"
        );
        assert!(line.contains("1 rejected virtio-blk requests"), "{line}");
        assert!(line.contains("(7 messages suppressed)"), "{line}");
    }

    #[test]
    fn every_kind_has_its_own_index_and_name() {
        for (i, k) in GuestError::ALL.into_iter().enumerate() {
            assert_eq!(k.index(), i);
            assert!(GuestError::ALL[..i].iter().all(|o| o.name() != k.name()));
        }
    }

    #[test]
    fn report_counts_whether_or_not_it_logs() {
        let log = GuestLog::new();
        for i in 0..50 {
            log.report(GuestError::DiskIoError, format_args!("error {i}"));
        }
        assert_eq!(log.count(GuestError::DiskIoError), 50);
        assert_eq!(log.suppressed(), 50 - BURST);
    }
}
