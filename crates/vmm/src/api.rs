//! The VM's API socket: HTTP/JSON on a Unix socket, one request per connection.
//!
//! | request | does |
//! |---|---|
//! | `GET /vm` | configuration and state (`running`, or `paused` with the reason) |
//! | `GET /stats` | every counter: pager, balloon (with the guest's statistics), disks, exits, guest errors |
//! | `GET /metrics` | the same numbers in the OpenMetrics text format (`memvisor_api::metrics`, docs/metrics.md) |
//! | `PUT /memory {"limit": bytes\|null}` | changes the resident limit; shrinking reclaims down to it |
//! | `PUT /memory/release {"pages": n}` | releases up to `n` pages that mirror disk blocks now, without the vCPUs (HyperDealer2 §4.3, docs/hd2.md); the limit falls by what was released; a paused VM releases too |
//! | `PUT /pool {"bytes": bytes}` | resizes the host-memory pool (`--pool`); shrinking spills |
//! | `PUT /balloon {"target": bytes}` | sets the balloon size |
//! | `PUT /vm/pause` | parks every vCPU outside the guest until `PUT /vm/resume`; 400 if paused |
//! | `PUT /vm/resume` | resumes a paused VM (asked for, or the pager's swap or image I/O failed); 400 if it runs |
//! | `PUT /vm/snapshot {"dir", "stop"}` | writes the VM to a snapshot directory (`snapshot.rs`, docs/snapshot.md), then lets it run on or ends it; 400 if it cannot |
//! | `PUT /vm/migrate {"to", "token", "recover", "precopy_rounds"}` | moves the VM to a destination, post-copy after `precopy_rounds` rounds of pre-copy (`migrate/`, docs/migration.md), or with `recover` resumes one whose connection broke (`GET /vm` shows it meanwhile); answers once every page is there, then the VM ends; 400 if it cannot |
//!
//! Requests are parsed into a [`VmRequest`] by `memvisor_api` and handled here with one `match`.
//! Bad requests (malformed HTTP or JSON, unknown fields, values out of range) get 400 with
//! `{"error": "..."}` and change nothing. Every answer is a `memvisor_api` type ([`VmInfo`],
//! [`VmStats`], [`ErrorBody`]) built here and serialized once; the schema is `docs/openapi.json`.

use std::os::unix::net::UnixListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::DiskConfig;
use crate::lifecycle::Lifecycle;
use crate::report::{ExitCounters, VmReport};
use memvisor_api::server::{error, ok, refuse, Reply, Then};
use memvisor_api::{
    BalloonStats, DiskInfo, DiskStats, ExitStats, GuestErrors, GuestMemoryStats, PagerMode, VmInfo,
    VmRequest, VmState, VmStats,
};
use memvisor_devices::guest_log::{GuestError, GuestLog};
use memvisor_devices::virtio::balloon::{BalloonControl, BalloonState};
use memvisor_devices::virtio::block::BlockMetrics;
use memvisor_devices::virtio::mmio::TransportMetrics;

/// What the API can see and steer.
pub(crate) struct Control {
    pub mem_size: u64,
    pub vcpus: u8,
    pub pager_mode: &'static str,
    pub disks: Vec<(DiskConfig, Arc<BlockMetrics>, Arc<TransportMetrics>)>,
    pub lifecycle: Arc<Lifecycle>,
    pub balloon: Option<BalloonControl>,
    pub exits: Arc<ExitCounters>,
    /// Guest RAM is mergeable by KSM (`--sharing host`).
    pub sharing: bool,
    /// Writes the VM to a snapshot (`PUT /vm/snapshot`).
    pub snapshot: Arc<crate::snapshot::Snapshotter>,
    /// The `migrate` thread (`PUT /vm/migrate`), which keeps a migration that broke after the
    /// switch for `"recover": true`.
    pub migration: crate::migrate::source::Migrator,
}

/// Serves `listener` on its own thread.
pub(crate) fn serve(listener: UnixListener, control: Arc<Control>) -> std::io::Result<()> {
    let confine = || memvisor_seccomp::confine(memvisor_seccomp::Thread::Api);
    memvisor_api::server::serve_after(
        listener,
        "api",
        confine,
        move |method, path, body| -> Reply {
            match VmRequest::parse(method, path, body) {
                Ok(request) => handle(&control, request),
                Err(e) => refuse(&e).into(),
            }
        },
    )
}

fn handle(c: &Control, request: VmRequest) -> Reply {
    match request {
        VmRequest::Metrics => return Reply::metrics(memvisor_api::metrics::vm(&stats(c))),
        VmRequest::Info => ok(&vm_info(c)),
        VmRequest::Stats => ok(&stats(c)),
        VmRequest::SetLimit(u) => match &c.lifecycle.pager {
            None => error(400, "this VM runs without memvisor's pager (--pager off): its limit belongs to the host cgroup"),
            Some(p) => match p.set_limit(u.limit) {
                Ok(()) => ok(&vm_info(c)),
                Err(e) => error(400, &e.to_string()),
            },
        },
        VmRequest::Release(r) => match &c.lifecycle.pager {
            None => error(400, "this VM runs without memvisor's pager (--pager off): it has no pages to release"),
            Some(p) => match p.release_clean(r.pages, r.cold_only) {
                // The released pages' bookkeeping once the answer is out (docs/hd2.md).
                Ok(done) => {
                    return Reply {
                        then: Some(Then(Arc::new(p.after_release()))),
                        ..ok(&done).into()
                    }
                }
                Err(e) => error(400, &e.to_string()),
            },
        },
        VmRequest::SetPool(u) => match &c.lifecycle.pager {
            None => error(400, "this VM runs without memvisor's pager (--pager off)"),
            Some(p) => match p.set_pool(u.bytes) {
                Ok(()) => ok(&vm_info(c)),
                Err(e) => error(400, &e.to_string()),
            },
        },
        VmRequest::SetBalloon(u) => match &c.balloon {
            None => error(400, "this VM has no balloon device (start it with --balloon)"),
            Some(_) if u.target > c.mem_size => error(
                400,
                &format!(
                    "a balloon of {} bytes is larger than the VM's {} bytes",
                    u.target, c.mem_size
                ),
            ),
            Some(b) => {
                b.set_target(u32::try_from(u.target / 4096).unwrap_or(u32::MAX));
                ok(&vm_info(c))
            }
        },
        VmRequest::Pause => match c.lifecycle.pause() {
            true => ok(&vm_info(c)),
            false => error(400, "the VM is already paused"),
        },
        VmRequest::Resume => match c.lifecycle.resume() {
            true => ok(&vm_info(c)),
            false => error(400, "the VM is not paused"),
        },
        VmRequest::Snapshot(req) => match c.snapshot.take(&c.lifecycle, &req) {
            // Ended only once the answer is written, or the client could lose it to the exit.
            Ok(r) if r.stopped => {
                let snapshot = c.snapshot.clone();
                return Reply {
                    then: Some(Then(Arc::new(move || (snapshot.stop)()))),
                    ..ok(&r).into()
                };
            }
            Ok(r) => ok(&r),
            Err(e) => error(400, &e),
        },
        VmRequest::Migrate(req) => match c.migration.migrate(&req) {
            // Every page is on the destination: the VM ends here once the answer is written.
            Ok(r) => {
                let snapshot = c.snapshot.clone();
                return Reply {
                    then: Some(Then(Arc::new(move || (snapshot.stop)()))),
                    ..ok(&r).into()
                };
            }
            Err(e) => error(400, &e),
        },
    }
    .into()
}

fn vm_info(c: &Control) -> VmInfo {
    let limit_bytes = c.lifecycle.pager.as_ref().and_then(|p| p.limit_bytes());
    let balloon_target_bytes = c
        .balloon
        .as_ref()
        .map(|b| u64::from(b.state.target_pages.load(Ordering::SeqCst)) * 4096);
    let (state, paused_because) = match c.lifecycle.state() {
        crate::lifecycle::VmState::Created => (VmState::Created, None),
        crate::lifecycle::VmState::Running => (VmState::Running, None),
        crate::lifecycle::VmState::Paused { why, .. } => (VmState::Paused, Some(why.to_string())),
    };
    VmInfo {
        state,
        paused_because,
        mem_bytes: c.mem_size,
        vcpus: c.vcpus.into(),
        // `Control` names the mode as `run` set it up: "off", "baseline" or "full".
        pager: match c.pager_mode {
            "off" => PagerMode::Off,
            "baseline" => PagerMode::Baseline,
            _ => PagerMode::Full,
        },
        limit_bytes,
        balloon_target_bytes,
        disks: c
            .disks
            .iter()
            .map(|(d, _, _)| DiskInfo {
                id: d.id.clone(),
                path: d.path.display().to_string(),
                read_only: d.read_only,
            })
            .collect(),
        migration: c.migration.broken(),
        snapshot_dir: match &c.snapshot.place {
            crate::snapshot::SnapshotPlace::Jailed(Some(dir)) => Some(dir.display().to_string()),
            _ => None,
        },
    }
}

pub(crate) fn balloon_stats(st: &BalloonState) -> BalloonStats {
    let m = &st.metrics;
    let guest = st.stats().map(|(age, values)| {
        let mut g = GuestMemoryStats {
            age_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
            ..GuestMemoryStats::default()
        };
        for (tag, value) in values {
            if !g.set(tag, value) {
                tracing::debug!("balloon: guest statistic with unknown tag {tag} left out");
            }
        }
        g
    });
    BalloonStats {
        target_pages: st.target_pages.load(Ordering::SeqCst).into(),
        actual_pages: st.actual_pages.load(Ordering::SeqCst).into(),
        inflated_pages: m.inflated_pages.load(Ordering::Relaxed),
        deflated_pages: m.deflated_pages.load(Ordering::Relaxed),
        oom_deflated_pages: m.oom_deflated_pages.load(Ordering::Relaxed),
        oom_deflates: m.oom_deflates.load(Ordering::Relaxed),
        reported_pages: m.reported_pages.load(Ordering::Relaxed),
        invalid_pfns: m.invalid_pfns.load(Ordering::Relaxed),
        stats_updates: m.stats_updates.load(Ordering::Relaxed),
        guest,
    }
}

fn disk_stats(m: &BlockMetrics, t: &TransportMetrics) -> DiskStats {
    DiskStats {
        notifies: t.notifies.load(Ordering::Relaxed).into(),
        kernel_notifies: t.kernel_notifies.load(Ordering::Relaxed).into(),
        ioevent_refusals: t.ioevent_refusals.load(Ordering::Relaxed).into(),
        reads: m.reads.load(Ordering::Relaxed),
        writes: m.writes.load(Ordering::Relaxed),
        flushes: m.flushes.load(Ordering::Relaxed),
        bytes_read: m.bytes_read.load(Ordering::Relaxed),
        bytes_written: m.bytes_written.load(Ordering::Relaxed),
        full_pauses: m.full_pauses.load(Ordering::Relaxed),
        write_prepare_us: m.write_prepare_us.load(Ordering::Relaxed),
        write_prepare_max_us: m.write_prepare_max_us.load(Ordering::Relaxed),
        write_end_us: m.write_end_us.load(Ordering::Relaxed),
        read_us: m.read_us.load(Ordering::Relaxed),
        writes_holes_1_20: m.writes_holes_1_20.load(Ordering::Relaxed),
        writes_holes_21_50: m.writes_holes_21_50.load(Ordering::Relaxed),
        writes_holes_over_50: m.writes_holes_over_50.load(Ordering::Relaxed),
        write_holes: m.write_holes.load(Ordering::Relaxed),
        split_reads: m.split_reads.load(Ordering::Relaxed),
        split_read_us: m.split_read_us.load(Ordering::Relaxed),
        errors: m.errors.load(Ordering::Relaxed),
    }
}

impl ExitCounters {
    /// The exits so far, as the API reports them.
    pub fn stats(&self) -> ExitStats {
        ExitStats {
            io: self.io.load(Ordering::Relaxed),
            mmio: self.mmio.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }
}

/// The counts of `log` as the API reports them.
pub fn guest_errors(log: &GuestLog) -> GuestErrors {
    let n = |k| log.count(k);
    GuestErrors {
        unclaimed_port_accesses: n(GuestError::UnclaimedPort),
        unclaimed_mmio_accesses: n(GuestError::UnclaimedMmio),
        refused_features: n(GuestError::RefusedFeatures),
        refused_driver_ok: n(GuestError::RefusedDriverOk),
        ignored_register_writes: n(GuestError::IgnoredRegisterWrite),
        bad_block_requests: n(GuestError::BadBlockRequest),
        used_ring_errors: n(GuestError::UsedRingError),
        bad_balloon_pages: n(GuestError::BadBalloonPage),
        disk_io_errors: n(GuestError::DiskIoError),
        balloon_release_errors: n(GuestError::BalloonReleaseError),
        serial_errors: n(GuestError::SerialError),
        pager_device_errors: n(GuestError::PagerDeviceError),
        suppressed_messages: log.suppressed(),
    }
}

impl VmReport {
    /// The finished VM's counters in the schema of `GET /stats`.
    pub fn stats(&self) -> VmStats {
        VmStats {
            pager: self.pager.clone(),
            balloon: self.balloon.clone(),
            disks: self
                .disks
                .iter()
                .map(|(id, m, t)| (id.clone(), disk_stats(m, t)))
                .collect(),
            exits: self.exits.stats(),
            guest_errors: self.guest_errors.clone(),
            sharing: self.sharing.clone(),
        }
    }
}

fn stats(c: &Control) -> VmStats {
    // The balloon is read before the pager: the driver writes `actual_pages` only after the
    // device released those pages, so every page counted there is already in the pager's census
    // below (read the other way round, a request landing in between made them disagree).
    let balloon = c.balloon.as_ref().map(|b| {
        // A statistics request makes the device write its used ring: not once the VM has
        // moved, when a page not yet sent would carry the write to the destination.
        if !c.migration.switched() {
            b.request_stats();
        }
        balloon_stats(&b.state)
    });
    let pager = c.lifecycle.pager.as_ref().map(|p| p.stats());
    let attached = pager.as_ref().is_some_and(|p| p.attached);
    VmStats {
        pager,
        balloon,
        disks: c
            .disks
            .iter()
            .map(|(d, m, t)| (d.id.clone(), disk_stats(m, t)))
            .collect(),
        exits: c.exits.stats(),
        guest_errors: guest_errors(memvisor_devices::guest_log::guest_log()),
        sharing: c.sharing.then(|| crate::sharing::stats(attached)).flatten(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn every_guest_error_kind_has_its_own_counter() {
        for kind in GuestError::ALL {
            let log = GuestLog::new();
            log.record_at(kind, Instant::now());
            let v = serde_json::to_value(guest_errors(&log)).unwrap();
            let counted: Vec<&String> = v
                .as_object()
                .unwrap()
                .iter()
                .filter(|(_, n)| n.as_u64() != Some(0))
                .map(|(name, _)| name)
                .collect();
            assert_eq!(counted, [kind.name()], "{kind:?}");
        }
        let fields = serde_json::to_value(GuestErrors::default()).unwrap();
        // One field per kind, and the suppressed messages.
        assert_eq!(fields.as_object().unwrap().len(), GuestError::ALL.len() + 1);
    }
}
