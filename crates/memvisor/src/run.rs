//! `memvisor run`: its flags turned into a plan (`plan.rs`: the kernel, disks, guest command
//! line), then the VM run on memvisor's VMM (with its pager and host limits) or QEMU, its exit
//! status mapped to the process's, and its counters written out (`--stats-json`) and summed up.

use std::process::ExitCode;

use memvisor_api::exit::status;
use memvisor_api::VmStats;
use memvisor_vmm::{error_line, VmConfig, VmExit, VmmError};

use crate::cli::{
    DefragArg, Hypervisor, LogSyncArg, PagerMode, PreventerArg, RunArgs, SharingArg, SwapIn,
    VictimArg,
};
use crate::plan::plan;
use crate::qemu;

/// `memvisor run`.
pub fn run(args: RunArgs) -> ExitCode {
    let plan = match plan(args) {
        Ok(p) => p,
        Err(bad) => return bad.report(),
    };
    // Before any thread starts: every thread started from here on inherits it (QEMU too).
    if let Some(cpus) = &plan.args.vmm_cpus {
        if let Err(e) = cpus.apply(0) {
            eprintln!("memvisor: cannot run on CPUs {cpus}: {e}");
            return ExitCode::from(status::VMM_FAILURE);
        }
    }
    if plan.args.hypervisor == Hypervisor::Qemu {
        return qemu::run(&plan);
    }
    let a = &plan.args;
    // The pid of the process that was started: a jailed VMM is pid 1 of its own namespace.
    let pid = std::process::id();
    let pager = (a.pager != PagerMode::Off).then(|| memvisor_pager::PagerConfig {
        mech: match a.pager {
            PagerMode::Baseline => memvisor_pager::Mechanisms::BASELINE,
            _ => memvisor_pager::Mechanisms {
                prefetch: a.prefetch,
                mapper: a.mapper,
                preventer: match a.preventer {
                    None => memvisor_pager::Preventing::Off,
                    Some(PreventerArg::Measured) => memvisor_pager::Preventing::Measured,
                    Some(PreventerArg::Always) => memvisor_pager::Preventing::Always,
                },
                ..memvisor_pager::Mechanisms::DEFAULT
            },
        },
        policy: match a.victims {
            VictimArg::Random => memvisor_pager::VictimPolicy::Random,
            VictimArg::Clock => memvisor_pager::VictimPolicy::Clock,
            VictimArg::Hd2 => memvisor_pager::VictimPolicy::Hd2,
            VictimArg::Hd2Whole => memvisor_pager::VictimPolicy::Hd2Whole,
        },
        victim_cache: a.victim_cache,
        limit: a.mem_limit,
        swap_path: a
            .swap
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join(format!("memvisor-{pid}.swap"))),
        temporary_swap: a.swap.is_none(),
        batch: 256,
        sample_pages: a.sample_pages,
        sample_period: std::time::Duration::from_secs_f64(a.sample_period),
        pool: a.pool.map(|bytes| memvisor_pager::PoolConfig {
            bytes,
            spill_at: a.pool_spill_at,
            compress: a.pool_compress.into(),
            chunk_bytes: a.pool_chunk,
        }),
        proactive: a.swap_in.unwrap_or(if a.pool.is_some() {
            SwapIn::Proactive
        } else {
            SwapIn::Faults
        }) == SwapIn::Proactive,
        sharing: a.sharing == SharingArg::Host,
        release_cache: a.release_cache,
        release_ready: a.release_ready,
        serving_nice: a.serving_nice,
        restore: None,
        indirections: a.tesseract.then(|| memvisor_pager::IndirectConfig {
            max: u32::try_from(a.tesseract_max.unwrap_or(a.mem) / 4096).unwrap_or(u32::MAX),
            keep: a.keep_indirections,
            sync: match a.tesseract_sync {
                LogSyncArg::Write => memvisor_pager::indirect::LogSync::Write,
                LogSyncArg::Flush => memvisor_pager::indirect::LogSync::Flush,
            },
            defrag: a.tesseract_defrag.map(|d| match d {
                DefragArg::Guest => memvisor_pager::indirect::Defrag::Guest,
                DefragArg::Store => memvisor_pager::indirect::Defrag::Store,
            }),
        }),
    });
    let _host_limit = match (a.pager, a.mem_limit) {
        (PagerMode::Off, Some(limit)) => {
            match crate::hostlimit::HostLimit::enter(std::process::id(), limit, 0) {
                Ok(h) => Some(h),
                Err(e) => {
                    eprintln!("memvisor: cannot enforce --mem-limit with the host kernel: {e}");
                    return ExitCode::from(status::VMM_FAILURE);
                }
            }
        }
        _ => None,
    };
    let jail = match (&a.jail, a.uid, a.gid) {
        (Some(dir), Some(uid), Some(gid)) => Some(memvisor_vmm::jail::Jail {
            dir: dir.clone(),
            uid,
            gid,
            // The indirection logs grow; nothing else does.
            file_size: (!a.tesseract).then(|| largest_file(&plan.disks, a.mem)),
            ksm: a.sharing == SharingArg::Host,
            nice: a.serving_nice,
            network: a.api_sock.is_some(),
            // Absolute as `memvisor ctl snapshot` makes the paths it sends, so that the VMM
            // finds those beneath it.
            snapshots: a
                .snapshot_dir
                .as_deref()
                .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_owned())),
        }),
        _ => None,
    };
    let mut stats_file = None;
    if jail.is_some() {
        let leftovers = crate::jailed::Leftovers {
            api_sock: a.api_sock.clone(),
            logs: match &pager {
                Some(p) if p.indirections.is_some() => plan
                    .disks
                    .iter()
                    .filter(|d| !d.read_only)
                    .map(|d| memvisor_pager::indirect::log_path(&d.path))
                    .collect(),
                _ => Vec::new(),
            },
            temporary_swap: pager
                .as_ref()
                .filter(|p| p.temporary_swap)
                .map(|p| p.swap_path.clone()),
        };
        match crate::jailed::fork(&leftovers) {
            Ok(crate::jailed::Side::Vmm) => {
                // The parent removes the cgroup once the VMM has left it.
                std::mem::forget(_host_limit);
                // Written at the end, where the jail no longer shows the path.
                if let Some(path) = &a.stats_json {
                    match std::fs::File::create(path) {
                        Ok(f) => stats_file = Some(f),
                        Err(e) => {
                            eprintln!(
                                "memvisor: cannot write --stats-json {}: {e}",
                                path.display()
                            );
                            return ExitCode::from(status::VMM_FAILURE);
                        }
                    }
                }
            }
            Ok(crate::jailed::Side::Ended(code)) => return code,
            Err(e) => {
                eprintln!("memvisor: cannot start the VMM in a PID namespace: {e}");
                return ExitCode::from(status::VMM_FAILURE);
            }
        }
    }
    // The main thread's name, which the kernel's record of a seccomp kill gives (`exe` after
    // the re-exec of huge_heap.rs otherwise).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    if unsafe { libc::prctl(libc::PR_SET_NAME, c"memvisor".as_ptr()) } != 0 {
        tracing::debug!(
            "cannot name the main thread: {}",
            std::io::Error::last_os_error()
        );
    }
    let config = VmConfig {
        kernel: plan.kernel,
        cmdline: plan.cmdline,
        mem_size: plan.args.mem,
        vcpus: plan.args.vcpus,
        disks: plan.disks,
        pager,
        balloon: plan.args.balloon,
        api_sock: plan.args.api_sock.clone(),
        vcpu_cpus: plan.args.vcpu_cpus.clone(),
        sharing: plan.args.sharing == SharingArg::Host,
        serving_nice: plan.args.serving_nice,
        restore: plan.restore.clone(),
        seccomp: plan.args.seccomp.into(),
        incoming: plan.incoming.clone(),
        jail,
    };
    match memvisor_vmm::run(&config) {
        Ok(report) => {
            let stats = report.stats();
            tracing::info!("end of run:\n{}", summary_table(&stats));
            if let Some(path) = &plan.args.stats_json {
                let written = match stats_file {
                    Some(file) => write_stats(file, &stats),
                    None => std::fs::File::create(path).and_then(|f| write_stats(f, &stats)),
                };
                if let Err(e) = written {
                    eprintln!(
                        "memvisor: cannot write --stats-json {}: {e}",
                        path.display()
                    );
                    return ExitCode::from(status::VMM_FAILURE);
                }
            }
            match report.exit {
                VmExit::DebugExit(v) => {
                    ExitCode::from(memvisor_devices::debug_exit::exit_status(v))
                }
                VmExit::Shutdown | VmExit::Stopped => ExitCode::from(status::SHUTDOWN),
                VmExit::Signal(sig) => {
                    eprintln!("memvisor: stopped by signal {sig}");
                    ExitCode::from(u8::try_from(128 + sig).unwrap_or(status::VMM_FAILURE))
                }
            }
        }
        Err(e) => {
            eprintln!("memvisor: {}", error_line(&e));
            ExitCode::from(match e {
                VmmError::Boot(_)
                | VmmError::Pager(memvisor_pager::PagerError::Swap(_))
                | VmmError::Disk(_)
                | VmmError::DiskInUse(_)
                | VmmError::BadVcpuCount(_)
                | VmmError::TooManyDevices(_)
                | VmmError::MigrationMismatch(_)
                | VmmError::Seccomp(memvisor_seccomp::SeccompError::Unsupported)
                | VmmError::Seccomp(memvisor_seccomp::SeccompError::MissingAction(_)) => {
                    status::BAD_INPUT
                }
                VmmError::GuestCrash { .. } => status::GUEST_CRASH,
                _ => status::VMM_FAILURE,
            })
        }
    }
}

/// Writes `stats` to `file` as one line of JSON.
fn write_stats(mut file: std::fs::File, stats: &VmStats) -> std::io::Result<()> {
    use std::io::Write;
    let mut line = serde_json::to_string(stats).map_err(std::io::Error::other)?;
    line.push('\n');
    file.write_all(line.as_bytes())
}

/// The largest file a VMM without indirections writes: a disk image, or the swap file (as
/// large as guest RAM).
fn largest_file(disks: &[memvisor_vmm::DiskConfig], mem: u64) -> u64 {
    disks
        .iter()
        .filter_map(|d| std::fs::metadata(&d.path).ok())
        .map(|m| m.len())
        .fold(mem, u64::max)
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 20))
}

/// The end-of-run summary: exits, the pager's census and main counters, the balloon, each disk's
/// I/O, what the guest did wrong, as aligned `name  value unit` rows. Rows of mechanisms that did
/// nothing (the balloon, the Swap Mapper, prefetch, pauses, deflates-on-OOM, guest errors) are
/// left out; every counter is in `--stats-json`.
pub fn summary_table(s: &VmStats) -> String {
    let mut rows: Vec<(String, String, &str)> = Vec::new();
    let mut row = |name: &str, value: String, unit: &'static str| {
        rows.push((name.to_owned(), value, unit));
    };
    let e = &s.exits;
    row(
        "exits io/mmio/other",
        format!("{}/{}/{}", e.io, e.mmio, e.other),
        "",
    );
    if let Some(p) = &s.pager {
        match p.limit_bytes {
            Some(l) => row("pager limit", mib(l), "MiB"),
            None => row("pager limit", "none".into(), ""),
        }
        let g = &p.pages;
        let c = &p.counters;
        // (name, value, unit, always shown)
        let counts = [
            ("pages resident", g.resident_pages, "pages", true),
            ("pages zero", g.zero_pages, "pages", true),
            ("pages swapped", g.swapped_pages, "pages", true),
            ("pages ballooned", g.ballooned_pages, "pages", false),
            ("pages reported", g.reported_pages, "pages", false),
            ("pages on disk", g.on_disk_pages, "pages", false),
            ("pages mirrored", g.mirrored_pages, "pages", false),
            ("faults zero", c.faults_zero, "faults", true),
            ("faults swap", c.faults_swap, "faults", true),
            ("faults image", c.faults_image, "faults", false),
            ("faults released", c.faults_released, "faults", false),
            ("faults restored", c.faults_restored, "faults", false),
            ("write faults", c.write_faults, "faults", false),
            ("reclaimed zero", c.reclaimed_zero, "pages", true),
            ("reclaimed clean", c.reclaimed_clean, "pages", true),
            ("reclaimed written", c.reclaimed_written, "pages", true),
            ("reclaimed mirrored", c.reclaimed_mirrored, "pages", false),
            ("prefetched", c.prefetched, "pages", false),
            ("prefetch hits", c.prefetch_hits, "pages", false),
            ("swapped in writable", c.swapped_in_writable, "pages", false),
            ("preventions", c.preventer_completed, "", false),
            ("preventer fallbacks", c.preventer_fallbacks, "", false),
            ("preventer passed", c.preventer_passed, "faults", false),
            (
                "deflated, mapped at once",
                c.deflated_mapped,
                "pages",
                false,
            ),
            ("pauses", c.pauses, "", false),
        ];
        for (name, n, unit, always) in counts {
            if always || n > 0 {
                row(name, n.to_string(), unit);
            }
        }
        row("swap read", mib(c.swap_bytes_read), "MiB");
        row("swap written", mib(c.swap_bytes_written), "MiB");
        if c.image_bytes_read > 0 {
            row("image read", mib(c.image_bytes_read), "MiB");
        }
        for (name, l) in [
            ("fault latency p50/p99", p.fault_latency),
            ("swap fault latency p50/p99", p.swap_fault_latency),
            ("reclaim latency p50/p99", p.reclaim_latency),
        ] {
            if l.samples > 0 {
                row(name, format!("{}/{}", l.p50_us, l.p99_us), "us");
            }
        }
    }
    if let Some(b) = &s.balloon {
        if b.inflated_pages > 0 || b.target_pages > 0 {
            row(
                "balloon target/actual",
                format!("{}/{}", b.target_pages, b.actual_pages),
                "pages",
            );
            row(
                "balloon inflated/deflated",
                format!("{}/{}", b.inflated_pages, b.deflated_pages),
                "pages",
            );
        }
        if b.oom_deflates > 0 {
            row(
                "balloon OOM deflates",
                b.oom_deflates.to_string(),
                "requests",
            );
            row(
                "balloon OOM deflated",
                b.oom_deflated_pages.to_string(),
                "pages",
            );
        }
    }
    for (id, d) in &s.disks {
        row(
            &format!("disk {id} read/written"),
            format!("{}/{}", mib(d.bytes_read), mib(d.bytes_written)),
            "MiB",
        );
        row(
            &format!("disk {id} reads/writes/flushes"),
            format!("{}/{}/{}", d.reads, d.writes, d.flushes),
            "requests",
        );
        if d.errors > 0 {
            row(
                &format!("disk {id} errors"),
                d.errors.to_string(),
                "requests",
            );
        }
    }
    // Only the kinds of guest error that happened, by their names in `GET /stats`.
    for (name, n) in s.guest_errors.fields() {
        if n > 0 {
            row(
                &format!("guest {}", name.replace('_', " ")),
                n.to_string(),
                "",
            );
        }
    }
    let name_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let value_w = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (name, value, unit) in rows {
        let line = format!("  {name:<name_w$}  {value:>value_w$} {unit}");
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_an_aligned_table() {
        let mut s = VmStats::default();
        s.exits.io = 12;
        s.pager = Some(memvisor_api::PagerStats {
            limit_bytes: Some(100 << 20),
            counters: memvisor_api::PagerCounters {
                swap_bytes_written: 3 << 20,
                ..Default::default()
            },
            ..Default::default()
        });
        s.disks.insert(
            "data".into(),
            memvisor_api::DiskStats {
                reads: 4,
                bytes_read: 1 << 20,
                ..Default::default()
            },
        );
        s.balloon = Some(memvisor_api::BalloonStats {
            target_pages: 1000,
            actual_pages: 744,
            inflated_pages: 1000,
            deflated_pages: 256,
            oom_deflated_pages: 256,
            oom_deflates: 1,
            ..Default::default()
        });
        let t = summary_table(&s);
        let lines: Vec<&str> = t.lines().collect();
        let has = |name: &str, tail: &str| {
            lines
                .iter()
                .any(|l| l.starts_with(&format!("  {name} ")) && l.ends_with(tail))
        };
        assert!(has("exits io/mmio/other", " 12/0/0"), "{t}");
        assert!(has("pager limit", " 100.0 MiB"), "{t}");
        assert!(has("swap written", " 3.0 MiB"), "{t}");
        assert!(
            has("disk data reads/writes/flushes", " 4/0/0 requests"),
            "{t}"
        );
        assert!(has("disk data read/written", " 1.0/0.0 MiB"), "{t}");
        assert!(has("balloon target/actual", " 1000/744 pages"), "{t}");
        assert!(has("balloon inflated/deflated", " 1000/256 pages"), "{t}");
        assert!(has("balloon OOM deflates", " 1 requests"), "{t}");
        assert!(has("balloon OOM deflated", " 256 pages"), "{t}");
        assert!(!t.contains("mirrored") && !t.contains("latency"), "{t}");
        assert!(!t.contains("guest"), "no guest errors, no rows: {t}");
        // A balloon device that did nothing gets no rows.
        s.balloon = Some(memvisor_api::BalloonStats::default());
        assert!(!summary_table(&s).contains("balloon"));
        // Values are right-aligned in one column: the `exits` row (no unit) ends where every
        // value ends.
        let end = lines[0].len();
        for l in &lines {
            let b = l.as_bytes();
            assert!(
                b[end - 1] != b' ' && (b.len() == end || b[end] == b' '),
                "{t}"
            );
        }
        // The kinds of guest error that happened get a row each.
        s.guest_errors.unclaimed_port_accesses = 20_000;
        s.guest_errors.suppressed_messages = 19_995;
        let t = summary_table(&s);
        let has = |name: &str, tail: &str| {
            t.lines()
                .any(|l| l.starts_with(&format!("  {name} ")) && l.ends_with(tail))
        };
        assert!(has("guest unclaimed port accesses", " 20000"), "{t}");
        assert!(has("guest suppressed messages", " 19995"), "{t}");
        assert!(!t.contains("guest refused"), "{t}");
    }
}
