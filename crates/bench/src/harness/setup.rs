//! The host set-up a family does before its runs: guest kit disks (`memvisor mkdisk`), the
//! host swap file and `vm.swappiness`, and QEMU's overhead measured by a calibration run.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::args::BenchArgs;
use crate::harness::child::TICK;
use crate::harness::child::{exit_text, exited};
use crate::harness::{readings, teardown};

/// Takes the host for this bench: the lock no other bench may hold meanwhile (held until the
/// returned lock drops: another benchmark on the same machine would skew this one), then what
/// an earlier run left cleaned, said line by line.
pub fn take_host(swap_file: &Path) -> Result<teardown::BenchLock, String> {
    let lock = teardown::lock(swap_file)?;
    for line in teardown::preflight(swap_file)? {
        eprintln!("memvisor bench: {line} (left by an earlier run)");
    }
    Ok(lock)
}

/// The host swap file and `vm.swappiness` for the runs; what the report says about them.
pub fn host_swap(args: &BenchArgs) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    let others = readings::swap_areas();
    if !others.is_empty() {
        let others = others.join(", ");
        notes.push(format!(
            "swap already enabled on the host before the run, also usable: {others}"
        ));
    }
    teardown::enable_swap_file(&args.swap_file, args.swap_size)?;
    teardown::set_swappiness(args.swappiness)?;
    let (file, mib, swappiness) = (
        args.swap_file.display(),
        args.swap_size >> 20,
        args.swappiness,
    );
    notes.push(format!("host swap: {file} ({mib} MiB) created, enabled and removed by the harness; vm.swappiness={swappiness} during the run (each run's memory cgroup inherits it as memory.swappiness; the kernel default is 60)"));
    Ok(notes)
}

/// QEMU's overhead (RSS outside guest RAM) from a calibration run, and the report's note.
pub fn qemu_overhead(exe: &Path, mem: u64) -> Result<(u64, String), String> {
    eprintln!("memvisor bench: measuring QEMU's overhead (RSS outside guest RAM)");
    let o = measure_qemu_overhead(exe, mem)?;
    let mib = o as f64 / f64::from(1u32 << 20);
    eprintln!("memvisor bench: QEMU overhead measured: {mib:.1} MiB; QEMU cgroups get limit + this + memvisor's RSS + 16 MiB slack");
    let note = format!("QEMU's overhead, measured in this run (RSS outside the guest RAM mapping, from smaps, peak over a short guest kit run): {mib:.1} MiB; the QEMU cgroup limit is the guest limit + this + the memvisor launcher's RSS + 16 MiB slack");
    Ok((o, note))
}

/// Makes a guest kit disk of `size_mb` MiB at `path` with `memvisor mkdisk`, replacing what is
/// there: a data disk holding `files` (as `--files` takes them), or without them a swap disk.
pub fn mkdisk(exe: &Path, path: &Path, size_mb: u64, files: Option<&str>) -> Result<(), String> {
    let kind = if files.is_some() { "data" } else { "swap" };
    let mut cmd = Command::new(exe);
    cmd.args(["mkdisk", kind, "--force", "--out"])
        .arg(path)
        .args(["--size", &format!("{size_mb}M")]);
    if let Some(f) = files {
        cmd.args(["--files", f]);
    }
    let st = cmd
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run mkdisk: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("mkdisk {kind} {} failed ({st})", path.display()))
    }
}

/// QEMU's own resident memory besides guest RAM: a short QEMU run of the guest kit, its RSS
/// outside the guest RAM mapping sampled from `/proc/PID/smaps`, the largest value seen.
fn measure_qemu_overhead(exe: &Path, mem: u64) -> Result<u64, String> {
    let mut child = Command::new(exe)
        .args(["run", "--hypervisor", "qemu", "--mem", &mem.to_string()])
        .args(["--workload", "memhog", "--cmdline", "mb=8 secs=2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let pid = child.id();
    teardown::track_pid(pid);
    let mut qemu = None;
    let mut most = 0u64;
    while !exited(pid) && !teardown::interrupted() {
        if qemu.is_none() {
            qemu = readings::child_named(pid, "qemu");
            if let Some(q) = qemu {
                teardown::track_pid(q);
            }
        }
        if let Some(o) = qemu.and_then(|q| readings::rss_outside_guest(q, mem)) {
            most = most.max(o);
        }
        std::thread::sleep(TICK);
    }
    if teardown::interrupted() {
        teardown::kill(pid);
    }
    let st = child.wait().map_err(|e| e.to_string())?;
    teardown::forget_pid(pid);
    if let Some(q) = qemu {
        teardown::forget_pid(q);
    }
    if st.code() != Some(1) || most == 0 {
        return Err(format!(
            "the QEMU calibration run exited {} with {most} bytes measured",
            exit_text(st)
        ));
    }
    Ok(most)
}

/// A VM of `memvisor host` with `mem_mb` MiB, `shares` and the guest kit's `workload`, and
/// none of memvisor's mechanisms: what a family's VMs start from.
pub fn host_vm(
    name: &str,
    mem_mb: u64,
    shares: u64,
    workload: &str,
    cmdline: String,
) -> memvisor_api::VmSpec {
    memvisor_api::VmSpec {
        name: name.into(),
        mem: mem_mb << 20,
        min: 0,
        shares,
        vcpus: 1,
        workload: Some(workload.into()),
        kernel: None,
        cmdline,
        disks: Vec::new(),
        balloon: false,
        mapper: false,
        preventer: false,
        tesseract: false,
        tesseract_max: None,
        tesseract_sync: None,
        tesseract_defrag: None,
        victim_cache: 0,
        release_cache: None,
        release_ready: None,
        victims: None,
        pager: None,
        sharing: None,
    }
}
