//! `memvisor run`'s flags checked against each other and this host, and turned into a
//! [`RunPlan`]: the kernel, the disks and the whole guest command line. Both hypervisors run
//! from a plan: memvisor's VMM (`run.rs`) and QEMU (`qemu.rs`).

use memvisor_vmm::affinity::CpuSet;
use memvisor_vmm::migrate::incoming::{self, Incoming};
use memvisor_vmm::snapshot::VmShape;
use memvisor_vmm::DiskConfig;

use crate::bad_input::BadInput;
use crate::cli::{Hypervisor, LogSyncArg, PagerMode, RunArgs, SharingArg, VictimArg};
use crate::guest_kit;

/// What `memvisor run` needs once its flags are checked.
pub struct RunPlan {
    pub args: RunArgs,
    pub kernel: Vec<u8>,
    pub disks: Vec<DiskConfig>,
    /// The whole guest command line.
    pub cmdline: String,
    /// `--restore DIR`: the snapshot, read and checked against the other flags; with
    /// `--incoming`, the migrated VM's state, its memory on the source.
    pub restore: Option<std::sync::Arc<memvisor_vmm::snapshot::Snapshot>>,
    /// `--incoming ADDR`: the migration's connection, switched once the VM is built.
    pub incoming: Option<std::sync::Arc<Incoming>>,
}

/// Checks `--incoming ADDR --migration-token T` and listens on ADDR; nothing is waited for yet.
fn listen(args: &RunArgs) -> Result<Option<(std::net::TcpListener, String)>, BadInput> {
    let bad = |m: &str| Err(BadInput(m.into()));
    let (addr, token) = match (&args.incoming, &args.migration_token) {
        (None, None) => return Ok(None),
        (None, Some(_)) => return bad("--migration-token goes with --incoming ADDR"),
        (Some(_), None) => {
            return bad(
                "--incoming needs --migration-token T, the one-time token the source presents",
            )
        }
        (Some(a), Some(t)) => (a, t),
    };
    if token.is_empty() {
        return bad("--migration-token must not be empty");
    }
    if args.restore.is_some() {
        return bad("--incoming and --restore both give the VM's state: give one");
    }
    if args.hypervisor == Hypervisor::Qemu || args.pager == PagerMode::Off {
        return bad("--incoming needs memvisor's pager (not --pager off or --hypervisor qemu)");
    }
    let listener = incoming::listen(addr).map_err(BadInput)?;
    Ok(Some((listener, token.clone())))
}

/// Waits on `listener` for the source with `token`, then makes the flags fit the VM's shape
/// as `--restore` does. Its state comes once the VM is built.
fn accept(
    args: &mut RunArgs,
    listener: &std::net::TcpListener,
    token: &str,
) -> Result<Incoming, BadInput> {
    let at = listener
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    eprintln!("memvisor: waiting for a migration on {at}");
    let swap_dir = args
        .swap
        .as_ref()
        .and_then(|s| s.parent())
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
    let inc = incoming::accept(listener, token, &swap_dir).map_err(BadInput)?;
    fit(args, inc.shape(), &format!("the VM migrating in on {at}"))?;
    Ok(inc)
}

/// Gives the VM the shape's size (at most `--mem`), vCPUs and balloon.
fn fit(args: &mut RunArgs, shape: &VmShape, what: &str) -> Result<(), BadInput> {
    let size = shape.mem_size;
    if size > args.mem {
        return Err(BadInput(format!(
            "{what} is a VM of {size} bytes, more than --mem {}",
            args.mem
        )));
    }
    args.mem = size;
    args.vcpus = shape.vcpus;
    args.balloon = shape.balloon;
    Ok(())
}

/// Reads `--restore DIR` and makes the flags fit it: the VM gets the snapshot's size (at most
/// `--mem`), vCPUs and balloon.
fn restore(args: &mut RunArgs) -> Result<Option<memvisor_vmm::snapshot::Snapshot>, BadInput> {
    let Some(dir) = &args.restore else {
        return Ok(None);
    };
    if args.hypervisor == Hypervisor::Qemu {
        return Err(BadInput(
            "--restore is memvisor's own snapshot format".into(),
        ));
    }
    let snap = memvisor_vmm::snapshot::load(dir).map_err(|e| BadInput(e.to_string()))?;
    let what = format!("the snapshot in {}", dir.display());
    fit(args, &snap.state.shape(), &what)?;
    Ok(Some(snap))
}

/// Checks `memvisor run`'s flags against each other and this host, and reads the kernel.
pub fn plan(mut args: RunArgs) -> Result<RunPlan, BadInput> {
    let bad = |m: String| Err(BadInput(m));
    let snapshot = restore(&mut args)?;
    let listening = listen(&args)?;
    if args.vcpu_cpus.is_some() || args.vmm_cpus.is_some() {
        let all = match CpuSet::available() {
            Ok(all) => all,
            Err(e) => return bad(format!("cannot read the CPUs this process may use: {e}")),
        };
        for (flag, cpus) in [
            ("--vcpu-cpus", &args.vcpu_cpus),
            ("--vmm-cpus", &args.vmm_cpus),
        ] {
            if let Some(cpus) = cpus.as_ref().filter(|c| !c.is_subset(&all)) {
                return bad(format!(
                    "{flag} {cpus}: this process may run on CPUs {all} only"
                ));
            }
        }
    }
    let kernel = match &args.kernel {
        Some(path) => {
            if args.workload.is_some() {
                return bad("--workload picks a guest kit workload; with --kernel give the guest's command line with --cmdline".into());
            }
            std::fs::read(path)
                .map_err(|e| BadInput(format!("cannot read kernel {}: {e}", path.display())))?
        }
        None => guest_kit::ELF.to_vec(),
    };
    if let Err(e) = memvisor_boot::PvhImage::parse(&kernel) {
        let name = args
            .kernel
            .as_ref()
            .map_or("the guest kit".into(), |p| p.display().to_string());
        return bad(format!("cannot boot {name}: {e}"));
    }
    let mut disks = Vec::new();
    for (i, d) in args.disks.iter().enumerate() {
        match std::fs::metadata(&d.path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return bad(format!("disk {} is not a regular file", d.path.display())),
            Err(e) => return bad(format!("disk {}: {e}", d.path.display())),
        }
        let id = d.id.clone().unwrap_or_else(|| format!("disk{i}"));
        if disks.iter().any(|x: &DiskConfig| x.id == id) {
            return bad(format!(
                "two disks have the id '{id}'; give each its own id=NAME"
            ));
        }
        disks.push(DiskConfig {
            path: d.path.clone(),
            read_only: d.read_only,
            id,
        });
    }
    if disks.len() > memvisor_vmm::MAX_DISKS {
        return bad(format!(
            "{} disks given; at most {} fit",
            disks.len(),
            memvisor_vmm::MAX_DISKS
        ));
    }
    let cmdline = if args.kernel.is_some() {
        args.cmdline.clone()
    } else {
        if args.mem < guest_kit::MIN_MEM {
            return bad(format!(
                "--mem {} is below the {} MiB the guest kit needs",
                args.mem,
                guest_kit::MIN_MEM >> 20
            ));
        }
        let workload = args.workload.as_deref().unwrap_or("boot");
        if !guest_kit::WORKLOADS.contains(&workload) {
            return bad(format!(
                "unknown workload '{workload}'; the guest kit runs: {}",
                guest_kit::WORKLOADS.join(", ")
            ));
        }
        let tsc_khz = memvisor_vmm::host_tsc_khz()
            .map_err(|e| {
                tracing::warn!("cannot read the TSC frequency, guest times will be in cycles: {e}")
            })
            .ok();
        guest_kit::cmdline(workload, args.vcpus, tsc_khz, &args.cmdline)
    };
    if memvisor_boot::RamLayout::new(args.mem).is_err()
        || (args.hypervisor == Hypervisor::Qemu && args.mem % (1 << 20) != 0)
    {
        return bad(format!(
            "--mem {} is not usable: give a whole number of MiB, at least 16M",
            args.mem
        ));
    }
    if let Some(limit) = args.mem_limit {
        if limit > args.mem {
            return bad(format!(
                "--mem-limit {limit} is above --mem {}: a limit caps the VM's own RAM",
                args.mem
            ));
        }
        if limit < memvisor_api::spec::MIN_LIMIT {
            return bad(format!(
                "--mem-limit {limit} is below {} MiB: the guest's own code, stacks and queues must stay resident",
                memvisor_api::spec::MIN_LIMIT >> 20
            ));
        }
    }
    if (args.mapper || args.preventer.is_some() || args.victim_cache > 0)
        && (args.pager != PagerMode::Full || args.hypervisor == Hypervisor::Qemu)
    {
        return bad(
            "--mapper, --preventer and --victim-cache are part of memvisor's full pager (--pager full)"
                .into(),
        );
    }
    if matches!(args.victims, VictimArg::Hd2 | VictimArg::Hd2Whole) && !args.mapper {
        return bad(
            "--victims hd2 orders the pages that mirror disk blocks: it needs the Swap Mapper (--mapper)"
                .into(),
        );
    }
    if let (Some(dir), Some(uid), Some(gid)) = (&args.jail, args.uid, args.gid) {
        if args.hypervisor == Hypervisor::Qemu {
            return bad("--jail jails memvisor's VMM; QEMU has its own sandboxing".into());
        }
        let jail = memvisor_vmm::jail::Jail {
            dir: dir.clone(),
            uid,
            gid,
            file_size: None,
            ksm: false,
            nice: 0,
            network: false,
            snapshots: args.snapshot_dir.clone(),
        };
        memvisor_vmm::jail::check(&jail).map_err(BadInput)?;
    }
    if args.tesseract && (args.pager != PagerMode::Full || args.hypervisor == Hypervisor::Qemu) {
        return bad("--tesseract is part of memvisor's full pager (--pager full)".into());
    }
    if (args.tesseract_max.is_some()
        || args.keep_indirections
        || args.tesseract_defrag.is_some()
        || args.tesseract_sync != LogSyncArg::Write)
        && !args.tesseract
    {
        return bad(
            "--tesseract-max, --tesseract-sync, --tesseract-defrag and --keep-indirections go with --tesseract".into(),
        );
    }
    if let Some(m) = args.tesseract_max {
        if m < 4096 || m > args.mem.saturating_mul(4) {
            return bad(format!(
                "--tesseract-max {m}: give 4K to 4 times the VM's memory ({} bytes)",
                args.mem.saturating_mul(4)
            ));
        }
    }
    if args.sharing == SharingArg::Host && !memvisor_host::ksm::available() {
        return bad(format!(
            "--sharing host needs the kernel's KSM, and this host has none ({} is missing: a kernel built with CONFIG_KSM)",
            memvisor_host::ksm::KSM_DIR
        ));
    }
    if args.qmp_sock.is_some() && args.hypervisor != Hypervisor::Qemu {
        return bad("--qmp-sock is for --hypervisor qemu".into());
    }
    if args.qemu_incoming.is_some() && args.hypervisor != Hypervisor::Qemu {
        return bad(
            "--qemu-incoming is for --hypervisor qemu; memvisor takes --restore or --incoming"
                .into(),
        );
    }
    if args.api_sock.is_some() && args.hypervisor == Hypervisor::Qemu {
        return bad("--api-sock is memvisor's API; QEMU is steered with --qmp-sock".into());
    }
    if args.stats_json.is_some() && args.hypervisor == Hypervisor::Qemu {
        return bad("--stats-json writes memvisor's own counters; QEMU has none".into());
    }
    if let Err(e) = memvisor_api::spec::check_release_cache(args.release_cache, args.mem) {
        return bad(format!("--release-cache {e}"));
    }
    if let Err(e) = memvisor_api::spec::check_release_ready(args.release_ready, args.mem) {
        return bad(format!("--release-ready {e}"));
    }
    if args.release_ready > 0 && !args.mapper {
        return bad(
            "--release-ready keeps pages that mirror disk blocks ready: it needs the Swap Mapper (--mapper)"
                .into(),
        );
    }
    if let Err(e) = memvisor_api::spec::check_chunk_size(args.pool_chunk) {
        return bad(format!("--pool-chunk {e}"));
    }
    if let Some(pool) = args.pool {
        if args.pager == PagerMode::Off || args.hypervisor == Hypervisor::Qemu {
            return bad("--pool is memvisor's pager's: it needs --pager full or baseline".into());
        }
        if pool < 4096 {
            return bad(format!("--pool {pool} is smaller than one page"));
        }
        if let Err(e) = memvisor_api::spec::check_chunk(args.pool_chunk, pool) {
            return bad(format!("--pool-chunk {e}"));
        }
        match memvisor_host::config::meminfo("MemAvailable") {
            Ok(avail) if pool > avail => {
                return bad(format!(
                    "--pool {pool} is more than the {avail} bytes of memory this host has available"
                ))
            }
            _ => {}
        }
    }
    // Every flag is checked: now the source may come.
    let incoming = match &listening {
        Some((listener, token)) => Some(std::sync::Arc::new(accept(&mut args, listener, token)?)),
        None => None,
    };
    if let Some(inc) = &incoming {
        let ids: Vec<&str> = disks.iter().map(|d| d.id.as_str()).collect();
        if ids != inc.shape().disks {
            return bad(format!(
                "the VM migrating in has disks {:?}; give the same --disk flags (got {ids:?})",
                inc.shape().disks
            ));
        }
    }
    if let Some(snap) = &snapshot {
        let specs: Vec<_> = disks
            .iter()
            .map(|d| (d.id.clone(), d.path.clone(), d.read_only))
            .collect();
        snap.check_disks(&specs, args.mapper && args.pager == PagerMode::Full)
            .map_err(|e| BadInput(e.to_string()))?;
    }
    Ok(RunPlan {
        args,
        kernel,
        disks,
        cmdline,
        restore: snapshot.map(std::sync::Arc::new),
        incoming,
    })
}
