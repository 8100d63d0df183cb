//! End-to-end tests of `memvisor run`: boot the guest kit on memvisor and on QEMU microvm, check
//! what it prints, then check the data disk byte for byte from the host.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{memvisor, memvisor_line, Proc, ResultLine, MEMVISOR};

/// The word the guest kit's selftest writes at byte offset `o` of the disk.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn disk(size: u64) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(size).unwrap();
    f
}

/// Checks that the first `mib` MiB of the image hold the selftest pattern for `seed` and the rest is zero.
fn check_pattern(path: &Path, mib: u64, seed: u64) {
    let data = std::fs::read(path).unwrap();
    let written = usize::try_from(mib << 20).unwrap();
    let mut bad = 0usize;
    for (i, w) in data[..written].chunks_exact(8).enumerate() {
        let o = i as u64 * 8;
        if u64::from_le_bytes(w.try_into().unwrap()) != splitmix64(seed ^ o) {
            bad += 1;
        }
    }
    assert_eq!(
        bad, 0,
        "{bad} words of the written range differ from the pattern"
    );
    assert!(
        data[written..].iter().all(|&b| b == 0),
        "bytes past the written range changed"
    );
}

fn selftest(hypervisor: &str, vcpus: &str, extra: &str) {
    let img = disk(64 << 20);
    let spec = format!("{},id=data", img.path().display());
    let cmdline = format!("selftest_mb=8 seed=42 {extra}");
    let out = memvisor(&[
        "run",
        "--hypervisor",
        hypervisor,
        "--mem",
        "128M",
        "--vcpus",
        vcpus,
        "--disk",
        &spec,
        "--workload",
        "selftest",
        "--cmdline",
        &cmdline,
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "debug-exit value 0 gives status 1"
    );
    let line = ResultLine::first(&common::stdout(&out));
    assert_eq!(line.str("ok"), "1", "{line}");
    assert_eq!(line.str("mismatches"), "0", "{line}");
    assert_eq!(line.str("disk"), "data", "{line}");
    assert_eq!(line.str("bytes"), (8u64 << 20).to_string(), "{line}");
    assert_eq!(line.str("cpus"), vcpus, "{line}");
    check_pattern(img.path(), 8, 42);
}

#[test]
fn selftest_on_memvisor() {
    selftest("memvisor", "1", "");
}

#[test]
fn selftest_on_memvisor_with_page_sized_requests_and_two_vcpus() {
    selftest("memvisor", "2", "req_kb=4");
}

#[test]
fn selftest_on_qemu() {
    selftest("qemu", "1", "");
}

#[test]
fn selftest_on_qemu_with_two_vcpus() {
    selftest("qemu", "2", "req_kb=4");
}

/// A queue notification completes in KVM (an ioeventfd) and the disk's thread serves it: the
/// guest's disk requests cost no MMIO exit each, and the data is exactly the selftest's.
#[test]
fn disk_requests_do_not_exit_to_user_space() {
    let img = disk(64 << 20);
    let spec = format!("{},id=data", img.path().display());
    let dir = tempfile::tempdir().unwrap();
    let stats_path = dir.path().join("stats.json");
    let args = [
        "run",
        "--mem",
        "128M",
        "--disk",
        &spec,
        "--workload",
        "selftest",
        "--cmdline",
        "selftest_mb=8 seed=9 req_kb=4",
        "--stats-json",
        stats_path.to_str().unwrap(),
    ];
    let out = memvisor(&args);
    assert_eq!(out.status.code(), Some(1), "the selftest passes");
    let line = ResultLine::first(&common::stdout(&out));
    assert_eq!(line.str("ok"), "1", "{line}");
    assert_eq!(line.str("mismatches"), "0", "{line}");
    check_pattern(img.path(), 8, 9);
    let requests = line.u64("requests");
    assert!(
        requests >= 4096,
        "8 MiB written and read in 4 KiB requests: {line}"
    );
    let stats: memvisor_api::VmStats =
        serde_json::from_str(&std::fs::read_to_string(&stats_path).unwrap()).unwrap();
    let mmio_exits = stats.exits.mmio;
    assert!(
        mmio_exits < requests / 4,
        "{mmio_exits} MMIO exits for {requests} disk requests: notifications still exit"
    );
    let data = &stats.disks["data"];
    assert!(
        data.kernel_notifies > requests / 2,
        "{} notifications reached the disk's thread for {requests} requests",
        data.kernel_notifies
    );
    assert_eq!(data.ioevent_refusals, 0);
}

#[test]
fn read_only_disk_is_read_and_left_unchanged() {
    let img = disk(16 << 20);
    std::fs::write(img.path(), vec![0x5a; 16 << 20]).unwrap();
    let spec = format!("{},ro,id=data", img.path().display());
    let out = memvisor(&[
        "run",
        "--mem",
        "64M",
        "--disk",
        &spec,
        "--workload",
        "selftest",
        "--cmdline",
        "selftest_mb=4",
    ]);
    let line = ResultLine::first(&common::stdout(&out));
    assert_eq!(line.str("ro"), "1", "{line}");
    assert_eq!(out.status.code(), Some(1));
    assert!(std::fs::read(img.path())
        .unwrap()
        .iter()
        .all(|&b| b == 0x5a));
}

#[test]
fn boot_workload_prints_first_line_and_exits() {
    let out = memvisor(&["run", "--mem", "64M", "--workload", "boot"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("memvisor guest kit: booting"),
        "{stdout}"
    );
    assert_eq!(ResultLine::first(&common::stdout(&out)).str("ok"), "1");
}

/// A PVH ELF that is not the guest kit: prints "hi" and exits with 0x21.
fn tiny_kernel() -> tempfile::NamedTempFile {
    #[rustfmt::skip]
    let code: &[u8] = &[
        0x66, 0xba, 0xf8, 0x03, 0xb0, 0x68, 0xee, 0xb0, 0x69, 0xee, 0xb0, 0x0a, 0xee, // "hi\n" to COM1
        0x66, 0xba, 0xf4, 0x00, 0xb8, 0x21, 0x00, 0x00, 0x00, 0xef, // out 0xf4, 0x21
        0xf4, // hlt
    ];
    common::pvh_kernel(0x10_0000, code)
}

#[test]
fn another_pvh_kernel_boots_on_both_hypervisors() {
    let k = tiny_kernel();
    for hv in ["memvisor", "qemu"] {
        let out = common::run_kernel(hv, &k);
        assert_eq!(out.status.code(), Some((0x21 << 1) | 1), "on {hv}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n", "on {hv}");
    }
}

/// Bad input: one clear line naming the value, exit status 2, and no VM.
#[test]
fn bad_input_gets_one_line_and_status_2() {
    let img = disk(1 << 20);
    let no_note = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        no_note.path(),
        memvisor_boot::test_utils::make_elf(0x10_0000, &[0xf4], None),
    )
    .unwrap();
    let (spec, k) = (img.path().display(), no_note.path().display());
    for (line, needle) in [
        (
            "run --kernel /nonexistent/vmlinux".into(),
            "/nonexistent/vmlinux",
        ),
        (format!("run --kernel {k}"), "PVH"),
        ("run --mem 12X".into(), "12X"),
        ("run --mem 8M".into(), "MiB"),
        ("run --vcpus 0".into(), "'0'"),
        ("run --prefetch 5000000000".into(), "5000000000"),
        (
            "run --disk /nonexistent/data.img".into(),
            "/nonexistent/data.img",
        ),
        (format!("run --disk {spec},bogus"), "bogus"),
        ("run --workload nosuch".into(), "nosuch"),
        (format!("run --disk {spec},id=a --disk {spec},id=a"), "id"),
    ] {
        let out = memvisor_line(&line);
        assert_eq!(out.status.code(), Some(2), "{line}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{line}: {err}");
        assert!(out.stdout.is_empty(), "{line} started a guest");
    }
}

/// What `read` finds in the `/proc` directory of every thread of `pid` and of its children, by
/// thread name (threads it finds nothing for are left out).
fn per_thread<T>(pid: u32, read: impl Fn(&Path) -> Option<T>) -> Vec<(String, T)> {
    let mut pids = vec![pid.to_string()];
    let children = format!("/proc/{pid}/task/{pid}/children");
    pids.extend(
        std::fs::read_to_string(children)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned),
    );
    let mut out = Vec::new();
    for p in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if let Some(v) = read(&t.path()) {
                out.push((comm.trim().to_owned(), v));
            }
        }
    }
    out
}

/// The `Cpus_allowed_list` of every thread of `pid` and of its children, by thread name.
fn thread_cpus(pid: u32) -> Vec<(String, String)> {
    per_thread(pid, |t| {
        let status = std::fs::read_to_string(t.join("status")).ok()?;
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
        Some(cpus.trim().to_owned())
    })
}

/// `--vcpu-cpus` and `--vmm-cpus` put the vCPU threads and every other thread where asked, on
/// memvisor and on QEMU (whose vCPU threads are found by name); bad lists are refused.
#[test]
fn vcpu_and_vmm_threads_run_on_the_cpus_asked_for() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    // The vCPU on the first CPU, the rest on the last (the same one on a 1-CPU host).
    let (vcpu, vmm) = ("0".to_owned(), (cpus - 1).to_string());
    for hv in ["memvisor", "qemu"] {
        let child = Proc::spawn(
            Command::new(MEMVISOR)
                .args(["run", "--hypervisor", hv, "--mem", "128M"])
                .args(["--vcpu-cpus", &vcpu, "--vmm-cpus", &vmm])
                .args(["--workload", "memhog", "--cmdline", "mb=16 secs=4"])
                .stdout(Stdio::null()),
        );
        let vcpu_name = if hv == "qemu" { "CPU 0/KVM" } else { "vcpu0" };
        let t0 = std::time::Instant::now();
        // QEMU's vCPU threads are pinned by the launcher as they appear, so wait for that too.
        let threads = loop {
            let threads = thread_cpus(child.pid());
            if threads.iter().any(|(n, c)| n == vcpu_name && *c == vcpu)
                || t0.elapsed() > Duration::from_secs(20)
            {
                break threads;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // 1: the guest's debug exit with 0, its success.
        assert_eq!(child.finish().status.code(), Some(1), "{hv} failed");
        eprintln!("{hv}: {threads:?}");
        for (name, allowed) in &threads {
            let want = if name == vcpu_name { &vcpu } else { &vmm };
            // KVM's own worker thread is the kernel's to place.
            if !name.starts_with("kvm-") {
                assert_eq!(allowed, want, "{hv}: thread {name}");
            }
        }
        assert!(
            threads.iter().any(|(n, _)| n == vcpu_name),
            "{hv}: no {vcpu_name} thread seen"
        );
    }
    for (list, why) in [
        ("0-x", "is not a CPU list"),
        ("1023", "this process may run on CPUs"),
    ] {
        let out = memvisor(&["run", "--vcpu-cpus", list]);
        assert_eq!(out.status.code(), Some(2), "{list}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{list}");
    }
}

/// The nice value of every thread of `pid` and of its children, by thread name.
fn thread_nice(pid: u32) -> Vec<(String, i32)> {
    per_thread(pid, |t| {
        let stat = std::fs::read_to_string(t.join("stat")).ok()?;
        // Fields after the name, which ends at the last ')': state is field 3, nice field 19.
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().nth(16)?.parse().ok()
    })
}

/// `--serving-nice` puts the threads a guest waits on (its devices' and the pager's fault
/// thread) at the value asked, and leaves the vCPU and the rest at the VMM's; a value outside
/// -20..19 is refused.
#[test]
fn the_threads_a_guest_waits_on_run_at_the_serving_nice_value() {
    let image = disk(16 << 20);
    let path = image.path().to_str().unwrap();
    let child = Proc::spawn(
        Command::new(MEMVISOR)
            .args(["run", "--mem", "128M", "--balloon", "--serving-nice", "-4"])
            .args(["--disk", &format!("{path},id=d")])
            .args(["--workload", "memhog", "--cmdline", "mb=16 secs=4"])
            .stdout(Stdio::null()),
    );
    let t0 = std::time::Instant::now();
    let wanted = ["blk-d", "balloon", "pager", "vcpu0"];
    let threads = loop {
        let threads = thread_nice(child.pid());
        if wanted.iter().all(|w| threads.iter().any(|(n, _)| n == w))
            || t0.elapsed() > Duration::from_secs(20)
        {
            break threads;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(child.finish().status.code(), Some(1), "the guest failed");
    eprintln!("{threads:?}");
    // SAFETY: no arguments.
    let root = unsafe { libc::geteuid() } == 0;
    for (name, nice) in &threads {
        let serving = ["blk-d", "balloon", "pager"].contains(&name.as_str());
        let want = if serving && root { -4 } else { 0 };
        if !name.starts_with("kvm-") {
            assert_eq!(*nice, want, "thread {name}");
        }
    }
    for w in wanted {
        assert!(threads.iter().any(|(n, _)| n == w), "no {w} thread seen");
    }
    for bad in ["-21", "20", "x"] {
        let out = memvisor(&["run", "--serving-nice", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is not a nice value"), "{bad}: {err}");
    }
}
