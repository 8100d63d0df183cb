//! What the integration tests share: the `memvisor` binary run to the end with its output
//! logged; a test VM (`memvisor run` with its API socket, a typed client and its console) and a
//! test host (`memvisor host` with its socket and client), both killed when dropped; the guest's
//! RESULT lines parsed; disk images made with `memvisor mkdisk`; and small PVH kernels written
//! by the tests themselves.

#![allow(dead_code)] // Each test binary uses a part.

pub mod openapi;

use std::fmt::{Debug, Display};
use std::io::{BufRead, BufReader, Read};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memvisor_api::{ClientError, HostClient, HostInfo, HostVm, VmClient, VmStats};

pub const MEMVISOR: &str = env!("CARGO_BIN_EXE_memvisor");
pub const MIB: u64 = 1 << 20;

/// Runs `memvisor ARGS` to the end; its status and output go to the test's log.
pub fn memvisor(args: &[&str]) -> Output {
    let out = Command::new(MEMVISOR)
        .args(args)
        .output()
        .expect("memvisor runs");
    log(args, &out);
    out
}

/// [`memvisor`] of a command line as a user types it: `line` split at whitespace (so no
/// argument in it holds a space).
pub fn memvisor_line(line: &str) -> Output {
    memvisor(&line.split_whitespace().collect::<Vec<_>>())
}

/// Writes what `memvisor ARGS` ended with to the test's log.
pub fn log(args: &[&str], out: &Output) {
    eprintln!(
        "--- memvisor {args:?}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What `out` wrote to stdout, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `out` wrote to stderr, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `kernel` in a 64 MiB VM on `hypervisor` (`memvisor` or `qemu`).
pub fn run_kernel(hypervisor: &str, kernel: &tempfile::NamedTempFile) -> Output {
    memvisor(&[
        "run",
        "--hypervisor",
        hypervisor,
        "--mem",
        "64M",
        "--kernel",
        kernel.path().to_str().unwrap(),
    ])
}

/// A PVH ELF file loading `image` at `base` and entering it there.
pub fn pvh_kernel(base: u64, image: &[u8]) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    write_kernel(f.path(), base, image);
    f
}

/// Writes a PVH ELF file at `path` loading `image` at `base` and entering it there.
pub fn write_kernel(path: &Path, base: u64, image: &[u8]) {
    let entry = u32::try_from(base).unwrap();
    std::fs::write(
        path,
        memvisor_boot::test_utils::make_elf(base, image, Some(entry)),
    )
    .unwrap();
}

/// `dir/spin.elf`, a PVH kernel that spins forever (`jmp $`): a VM that costs nothing and
/// never ends.
pub fn spin_kernel(dir: &Path) -> PathBuf {
    let path = dir.join("spin.elf");
    write_kernel(&path, 0x10_0000, &[0xeb, 0xfe]);
    path
}

/// `memvisor mkdisk data --size SIZE --out PATH EXTRA...`, which must succeed; returns PATH.
pub fn mkdisk_data(path: PathBuf, size: &str, extra: &[&str]) -> PathBuf {
    let p = path.to_str().unwrap();
    let mut args = vec!["mkdisk", "data", "--size", size, "--out", p];
    args.extend_from_slice(extra);
    assert!(memvisor(&args).status.success(), "mkdisk {p}");
    path
}

/// `memvisor mkdisk swap --size SIZE --out PATH`, which must succeed; returns PATH.
pub fn mkdisk_swap(path: PathBuf, size: &str) -> PathBuf {
    let p = path.to_str().unwrap();
    let args = ["mkdisk", "swap", "--size", size, "--out", p];
    assert!(memvisor(&args).status.success(), "mkdisk {p}");
    path
}

/// `PATH,id=ID`, a `--disk` argument.
pub fn disk_spec(path: &Path, id: &str) -> String {
    format!("{},id={id}", path.display())
}

/// The last `ACK gen=G page=I` line of `text` (the crash-consistency guest's), as its two
/// `key=value` words.
pub fn last_ack(text: &str) -> Option<String> {
    let ack = text.lines().rev().find(|l| l.starts_with("ACK "))?;
    Some(ack.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
}

/// `a` as string slices, for argument lists built of `String`s.
pub fn as_strs(a: &[String]) -> Vec<&str> {
    a.iter().map(String::as_str).collect()
}

/// The crash-consistency guest's VM on disks `data` and `swap` (`--disk` arguments): 48 MiB
/// under a 24 MiB limit, so that it swaps to its own disk, with Tesseract's indirections and the
/// Swap Mapper on; then `extra`.
pub fn crashwrite_vm(data: &str, swap: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "--mem",
        "48M",
        "--mem-limit",
        "24M",
        "--tesseract",
        "--mapper",
        "--disk",
        data,
        "--disk",
        swap,
    ]
    .map(String::from)
    .to_vec();
    a.extend(extra.iter().map(|s| (*s).to_owned()));
    a
}

/// A fresh boot of [`crashwrite_vm`]'s disks reads every page of the guest's file (written with
/// `seed`): each write up to `acked` (`gen=G page=I`) must be there, whole.
pub fn assert_acknowledged_on_disk(data: &str, swap: &str, seed: u32, acked: &str) {
    let cmdline = format!("mb=16 seed={seed} check=1 {acked}");
    let check: Vec<String> = crashwrite_vm(
        data,
        swap,
        &["--workload", "crashwrite", "--cmdline", &cmdline],
    )
    .into_iter()
    .filter(|a| a != "--tesseract")
    .collect();
    let out = memvisor(&[&["run"][..], &as_strs(&check)].concat());
    let line = ResultLine::find(&stdout(&out), "crashwrite", "check");
    assert_eq!(line.u64("ok"), 1, "{}", stdout(&out));
    assert_eq!(line.u64("lost"), 0);
}

/// The answer of a typed client, which must be a success (200 with the API's type).
pub fn ok<T>(answer: Result<T, ClientError>) -> T {
    answer.unwrap_or_else(|e| panic!("{e}"))
}

/// Sends signal `sig` to process `pid`.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) of a process this test started (or its child).
    unsafe { libc::kill(i32::try_from(pid).unwrap(), sig) };
}

/// Calls `look` every `every` until `done` holds of what it found, for `within` at most: then
/// the test fails saying `what` and what `look` found last. Returns what it found that held.
pub fn poll<T: Debug>(
    what: impl Display,
    within: Duration,
    every: Duration,
    mut look: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let t = Instant::now();
    loop {
        let found = look();
        if done(&found) {
            return found;
        }
        assert!(
            t.elapsed() < within,
            "{what}: not within {within:?}: {found:?}"
        );
        std::thread::sleep(every);
    }
}

/// One output pipe of a [`Proc`], read by a thread as it comes: all of it so far, and each
/// line as it arrives.
struct Pipe {
    text: Arc<Mutex<Vec<u8>>>,
    lines: mpsc::Receiver<String>,
    thread: JoinHandle<()>,
}

impl Pipe {
    fn read(from: impl Read + Send + 'static) -> Pipe {
        let text = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = mpsc::channel();
        let all = Arc::clone(&text);
        let thread = std::thread::spawn(move || {
            let mut r = BufReader::new(from);
            let mut line = Vec::new();
            while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                all.lock().unwrap().extend_from_slice(&line);
                let _ = tx.send(String::from_utf8_lossy(&line).trim_end().to_owned());
                line.clear();
            }
        });
        Pipe {
            text,
            lines,
            thread,
        }
    }

    /// All of it, once the process has closed it.
    fn all(self) -> Vec<u8> {
        self.thread.join().unwrap();
        Arc::try_unwrap(self.text).unwrap().into_inner().unwrap()
    }

    /// The first line from now on that `want` takes (`within` at most).
    fn line(&self, within: Duration, mut want: impl FnMut(&str) -> bool) -> String {
        let t = Instant::now();
        loop {
            let left = within.saturating_sub(t.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) if want(&l) => return l,
                Ok(_) => {}
                Err(e) => panic!("no such line within {within:?} ({e}): {}", self.so_far()),
            }
        }
    }

    fn so_far(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }
}

/// A child process, killed and reaped when dropped, so a failing test leaves nothing running.
/// What it writes to a piped stdout or stderr is read as it comes.
pub struct Proc {
    child: Child,
    stdout: Option<Pipe>,
    stderr: Option<Pipe>,
}

impl Proc {
    /// Spawns `cmd`; its stdout and stderr, where `cmd` pipes them, are read as they come.
    pub fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd.spawn().expect("the process starts");
        let stdout = child.stdout.take().map(Pipe::read);
        let stderr = child.stderr.take().map(Pipe::read);
        Proc {
            child,
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends signal `sig` to it.
    pub fn signal(&self, sig: i32) {
        signal(self.pid(), sig);
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Whether it ends within `d`.
    pub fn ends_within(&mut self, d: Duration) -> bool {
        let t = Instant::now();
        while self.running() {
            if t.elapsed() > d {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Waits (20 s at most) until the file `path` exists; the process must run meanwhile.
    pub fn wait_for_file(&mut self, path: &Path) {
        let t = Instant::now();
        while !path.exists() {
            assert!(
                self.running(),
                "it ended before {} appeared",
                path.display()
            );
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{} never appeared",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What it wrote to its stdout so far.
    pub fn stdout_so_far(&self) -> String {
        self.stdout.as_ref().expect("stdout piped").so_far()
    }

    /// The first line it writes to stdout from now on that `want` takes (`within` at most).
    pub fn stdout_line(&self, within: Duration, want: impl FnMut(&str) -> bool) -> String {
        self.stdout
            .as_ref()
            .expect("stdout piped")
            .line(within, want)
    }

    /// Waits (2 minutes at most) for `n` more `ACK` lines of the crash-consistency guest.
    pub fn acks(&self, n: usize) {
        let mut seen = 0;
        self.stdout_line(Duration::from_secs(120), |l| {
            seen += usize::from(l.starts_with("ACK "));
            seen >= n
        });
    }

    /// The first line it writes to stderr from now on that `want` takes (`within` at most).
    pub fn stderr_line(&self, within: Duration, want: impl FnMut(&str) -> bool) -> String {
        self.stderr
            .as_ref()
            .expect("stderr piped")
            .line(within, want)
    }

    /// Waits for it to end: its status, and all it wrote to its pipes.
    pub fn finish(mut self) -> Output {
        let status = self.child.wait().unwrap();
        Output {
            status,
            stdout: self.stdout.take().map(Pipe::all).unwrap_or_default(),
            stderr: self.stderr.take().map(Pipe::all).unwrap_or_default(),
        }
    }

    /// Stops it: SIGTERM, and SIGKILL if it has not ended 60 s later. Returns its exit code
    /// (`None` if a signal ended it).
    pub fn stop(&mut self) -> Option<i32> {
        if let Ok(Some(s)) = self.child.try_wait() {
            return s.code();
        }
        self.signal(libc::SIGTERM);
        if !self.ends_within(Duration::from_secs(60)) {
            eprintln!("{} did not stop on SIGTERM: killed", self.pid());
            let _ = self.child.kill();
        }
        self.child.wait().ok().and_then(|s| s.code())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `memvisor run --api-sock SOCK ARGS`, with the guest's console (stdout) piped.
pub fn run_command(sock: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(MEMVISOR);
    cmd.arg("run")
        .arg("--api-sock")
        .arg(sock)
        .args(args)
        .stdout(Stdio::piped());
    cmd
}

/// A VM of `memvisor run` with its API socket: a typed client of it, and its console read as
/// it comes. Killed when dropped.
pub struct TestVm {
    proc: Proc,
    sock: PathBuf,
}

impl TestVm {
    /// A VM of `mem` whose guest (the alloc workload) has touched `mb` MiB and holds it, with
    /// `disk` if given: a VM to snapshot or move, once it says it holds.
    pub fn holding(sock: &Path, mem: &str, mb: &str, disk: Option<&str>) -> TestVm {
        let cmdline = format!("mb={mb} rounds=1 hold_secs=600");
        let mut args = vec!["--mem", mem, "--workload", "alloc", "--cmdline", &cmdline];
        if let Some(d) = disk {
            args.extend_from_slice(&["--disk", d]);
        }
        let vm = TestVm::start(sock, &args);
        vm.stdout_line(Duration::from_secs(120), |l| l.starts_with("hold:"));
        vm
    }

    /// `memvisor run --api-sock SOCK ARGS` ([`run_command`]), once its socket exists.
    pub fn start(sock: &Path, args: &[&str]) -> TestVm {
        TestVm::spawn(&mut run_command(sock, args), sock)
    }

    /// Spawns `cmd`, which runs a VM with its API socket at `sock`, once the socket exists.
    pub fn spawn(cmd: &mut Command, sock: &Path) -> TestVm {
        let mut proc = Proc::spawn(cmd);
        proc.wait_for_file(sock);
        TestVm {
            proc,
            sock: sock.to_owned(),
        }
    }

    pub fn sock(&self) -> &Path {
        &self.sock
    }

    /// A client of its API.
    pub fn client(&self) -> VmClient {
        VmClient::new(&self.sock)
    }

    /// `GET /stats`, which must answer.
    pub fn stats(&self) -> VmStats {
        ok(self.client().stats())
    }

    /// Polls `GET /stats` until `done` holds (`within` at most); returns the stats that held.
    pub fn stats_until(
        &self,
        what: &str,
        within: Duration,
        done: impl Fn(&VmStats) -> bool,
    ) -> VmStats {
        let every = Duration::from_millis(20);
        poll(what, within, every, || self.stats(), done)
    }

    /// `GET /stats` of a VM that may be ending: `None` if it no longer answers; an answer that
    /// does not match the API's types fails the test.
    pub fn stats_if_running(&self) -> Option<VmStats> {
        match self.client().stats() {
            Ok(s) => Some(s),
            Err(ClientError::Schema { error, body, .. }) => panic!("{error}: {body}"),
            Err(_) => None,
        }
    }

    /// Waits for it to end: its status, its console and what it wrote to a piped stderr.
    pub fn finish(self) -> Output {
        self.proc.finish()
    }

    /// Waits for the guest to end with success (status 1: its debug exit with 0); returns its
    /// console.
    pub fn succeeded(self) -> String {
        let out = self.proc.finish();
        let console = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{console}");
        console
    }

    /// [`TestVm::succeeded`], and its final RESULT line for `workload`, which must say ok with
    /// no mismatches ([`ResultLine::assert_intact`]).
    pub fn intact(self, workload: &str) -> ResultLine {
        let done = ResultLine::find(&self.succeeded(), workload, "done");
        done.assert_intact();
        done
    }
}

impl Deref for TestVm {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.proc
    }
}

impl DerefMut for TestVm {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

/// `memvisor host --config CONFIG`. A config with a `[host]` table and no `uid_range` gets one
/// of its own written in: hosts that run at once (the tests of one binary, the test binaries)
/// must not share their VMMs' uids, and a host refuses a range another's VMMs run in.
pub fn host_command(config: &Path) -> Command {
    own_uid_range(config);
    let mut cmd = Command::new(MEMVISOR);
    cmd.args(["host", "--config"]).arg(config);
    cmd
}

/// A `memvisor host` with its socket (`host.state/host.sock` beside its config), killed when
/// dropped (its VMs get SIGTERM when it dies).
pub struct TestHost {
    proc: Proc,
    sock: PathBuf,
}

impl TestHost {
    /// Writes `config` as `host.toml` in `dir` and starts a host on it (logging at `info`),
    /// once its socket exists.
    pub fn start(dir: &Path, config: &str) -> TestHost {
        let path = dir.join("host.toml");
        std::fs::write(&path, config).unwrap();
        TestHost::spawn(host_command(&path).env("MEMVISOR_LOG", "info"), dir)
    }

    /// Spawns `cmd`, a host whose config is in `dir`, once its socket exists.
    pub fn spawn(cmd: &mut Command, dir: &Path) -> TestHost {
        let sock = dir.join("host.state/host.sock");
        let mut proc = Proc::spawn(cmd);
        proc.wait_for_file(&sock);
        TestHost { proc, sock }
    }

    pub fn sock(&self) -> &Path {
        &self.sock
    }

    /// A client of its API.
    pub fn client(&self) -> HostClient {
        HostClient::new(&self.sock)
    }

    /// Waits for it to end: its status, and what it wrote to its pipes.
    pub fn finish(self) -> Output {
        self.proc.finish()
    }

    /// `GET /host`, which must answer.
    pub fn info(&self) -> HostInfo {
        ok(self.client().info())
    }

    /// `GET /vms/NAME`, which must answer.
    pub fn vm(&self, name: &str) -> HostVm {
        ok(self.client().vm(name))
    }

    /// Polls VM `name` until `done` holds (at most `secs` seconds).
    pub fn wait_vm(&self, name: &str, secs: u64, done: impl Fn(&HostVm) -> bool) -> HostVm {
        poll(
            format!("vm {name}"),
            Duration::from_secs(secs),
            Duration::from_millis(100),
            || self.vm(name),
            done,
        )
    }
}

impl Deref for TestHost {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.proc
    }
}

impl DerefMut for TestHost {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

/// One of the guest kit's result lines, `RESULT workload=NAME key=value ...`: the workload,
/// whether it says ok, and each field, typed on demand.
#[derive(Clone, Debug)]
pub struct ResultLine {
    line: String,
    fields: Vec<(String, String)>,
}

impl ResultLine {
    /// `line` read as a RESULT line; `None` if it is not one (no `RESULT ` and `workload=`).
    pub fn parse(line: &str) -> Option<ResultLine> {
        line.strip_prefix("RESULT ")?;
        Some(ResultLine::words(line)).filter(|r| r.get("workload").is_some())
    }

    /// The `key=value` words of any line the guest prints, a RESULT line or a workload's own
    /// (such as `kv: hog_start t_ms=1000 mb=8`).
    pub fn words(line: &str) -> ResultLine {
        let fields = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        ResultLine {
            line: line.to_owned(),
            fields,
        }
    }

    /// Every RESULT line in `text`, in order.
    pub fn all(text: &str) -> Vec<ResultLine> {
        text.lines().filter_map(ResultLine::parse).collect()
    }

    /// The first RESULT line in `text`, which must have one.
    pub fn first(text: &str) -> ResultLine {
        ResultLine::all(text)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no RESULT line in {text}"))
    }

    /// The first RESULT line of `workload` with `phase=PHASE` in `text`, which must have one.
    pub fn find(text: &str, workload: &str, phase: &str) -> ResultLine {
        ResultLine::all(text)
            .into_iter()
            .find(|r| r.workload() == workload && r.get("phase") == Some(phase))
            .unwrap_or_else(|| panic!("no RESULT line for {workload} phase={phase} in {text}"))
    }

    pub fn workload(&self) -> &str {
        self.str("workload")
    }

    /// Whether it says `ok=1`.
    pub fn ok(&self) -> bool {
        self.get("ok") == Some("1")
    }

    /// The value of `key`, if it has one.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, which it must have.
    pub fn str(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("no {key}= in {}", self.line))
    }

    /// The whole number `key` holds (the part before a decimal point).
    pub fn u64(&self, key: &str) -> u64 {
        let v = self.str(key);
        v.split('.')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v} is not a number in {}", self.line))
    }

    /// Checks that it says ok, with no mismatches (`ok=1 mismatches=0`).
    pub fn assert_intact(&self) {
        assert!(
            self.ok() && self.get("mismatches") == Some("0"),
            "{}",
            self.line
        );
    }

    /// The line as the guest wrote it.
    pub fn line(&self) -> &str {
        &self.line
    }
}

impl Display for ResultLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

/// Writes a `uid_range` of ten uids no other host of this test run gets into the `[host]`
/// table of the config at `path` (if it has one and no `uid_range`).
fn own_uid_range(path: &Path) {
    static HOSTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    if text.contains("uid_range") || !text.contains("[host]\n") {
        return;
    }
    let n = HOSTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 16;
    let first = 1_000_000 + ((std::process::id() % 100_000) * 16 + n) * 10;
    let range = format!("[host]\nuid_range = \"{first}-{}\"\n", first + 9);
    std::fs::write(path, text.replacen("[host]\n", &range, 1)).unwrap();
}

/// A TCP proxy to `to` for one connection, which it cuts (both ways) once `cut_after` bytes
/// have gone towards `to`; returns its address.
pub fn cutting_proxy(to: String, cut_after: usize) -> String {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (a, _) = listener.accept().unwrap();
        let b = std::net::TcpStream::connect(&to).unwrap();
        let (back_from, back_to) = (b.try_clone().unwrap(), a.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut &back_from, &mut &back_to);
        });
        let mut buf = vec![0u8; 64 << 10];
        let mut n = 0;
        while n < cut_after {
            let k = (&a).read(&mut buf).unwrap_or(0);
            if k == 0 || (&b).write_all(&buf[..k]).is_err() {
                break;
            }
            n += k;
        }
        let _ = a.shutdown(std::net::Shutdown::Both);
        let _ = b.shutdown(std::net::Shutdown::Both);
    });
    addr
}
