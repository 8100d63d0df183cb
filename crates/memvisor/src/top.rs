//! `memvisor top --host-sock PATH`: a terminal view of a host, redrawn every second. A header
//! line with the budget, free memory and the free-memory state; one row per VM with its state,
//! allocation (resident), target, active memory, balloon, swapped memory, memory its page
//! sharing saves and fault rate; with a VM sharing, a line for KSM (scan rate, saved, ksmd CPU).
//!
//! Lines longer than the terminal is wide are cut.
//!
//! Each refresh reads the host's `GET /host` and `GET /vms`, and every running VM's own
//! `GET /stats` (its `api_sock`) for the pager's fault counters; the fault rate is the
//! difference between two readings over the time between them. On a terminal the view takes
//! the alternate screen and reads keys one by one (no echo); `q` or Ctrl-C quits, as do SIGINT,
//! SIGTERM and SIGHUP, and the terminal is put back as it was. `--once` prints one frame
//! (after two readings a second apart) and exits.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use memvisor_api::exit::status;
use memvisor_api::{ClientError, HostClient, HostInfo, HostVm, VmClient};

/// Time between two frames.
const REFRESH: Duration = Duration::from_secs(1);
/// How long a reading waits for the host, and for each VMM.
const HOST_TIMEOUT: Duration = Duration::from_secs(3);
const VMM_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Args, Debug)]
pub struct TopArgs {
    /// The host manager's API socket (`api_sock` of `memvisor host`).
    #[arg(long)]
    pub host_sock: PathBuf,
    /// Print one frame and exit (it takes two readings a second apart, for the fault rate).
    #[arg(long)]
    pub once: bool,
}

/// What one refresh read.
#[derive(Clone)]
struct Reading {
    at: Instant,
    host: HostInfo,
    vms: Vec<HostVm>,
    /// Faults each running VM's pager has served so far, by VM name.
    faults: HashMap<String, u64>,
}

/// Why a reading failed: the host cannot be reached (exit status 2), or it refused a request
/// or answered with something else than its API's types (1). Either way the message is one line.
struct ReadError(ClientError);

impl ReadError {
    fn message(&self) -> String {
        self.0.to_string()
    }
}

fn read(sock: &Path) -> Result<Reading, ReadError> {
    let client = HostClient::new(sock).with_timeout(HOST_TIMEOUT);
    let host = client.info().map_err(ReadError)?;
    let vms = client.vms().map_err(ReadError)?;
    let faults = vms
        .iter()
        .filter(|v| v.pid.is_some())
        .filter_map(|v| {
            // A VMM that is starting, stopping or slow only loses its fault rate this time.
            let vmm = VmClient::new(&v.api_sock).with_timeout(VMM_TIMEOUT);
            let stats = vmm.stats().ok()?;
            Some((v.name.clone(), stats.pager?.counters.faults()))
        })
        .collect();
    Ok(Reading {
        at: Instant::now(),
        host,
        vms,
        faults,
    })
}

/// Bytes as a person reads them: `512 B`, `1.5 KiB`, `70.1 MiB`, `2.00 GiB`.
#[allow(clippy::cast_precision_loss)]
fn size(b: u64) -> String {
    let f = b as f64;
    match b {
        0..1024 => format!("{b} B"),
        1024..1_048_576 => format!("{:.1} KiB", f / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", f / 1_048_576.0),
        _ => format!("{:.2} GiB", f / 1_073_741_824.0),
    }
}

/// Faults per second between two readings, or `-` when a reading lacks the VM (or the counter
/// went back, as with a new VMM of the same name).
fn rate(name: &str, now: &Reading, before: Option<&Reading>) -> String {
    let Some(before) = before else {
        return "-".into();
    };
    let secs = now.at.duration_since(before.at).as_secs_f64();
    match (now.faults.get(name), before.faults.get(name)) {
        (Some(&n), Some(&b)) if n >= b && secs > 0.0 => {
            #[allow(clippy::cast_precision_loss)]
            let r = (n - b) as f64 / secs;
            format!("{r:.0}")
        }
        _ => "-".into(),
    }
}

fn serde_name(v: &impl serde::Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

/// One frame: the header, the column titles and a row per VM, each line ending in `\n`.
fn frame(now: &Reading, before: Option<&Reading>) -> String {
    let h = &now.host;
    #[allow(clippy::cast_precision_loss)]
    let free_pct = if h.budget_bytes == 0 {
        0.0
    } else {
        h.free_bytes as f64 * 100.0 / h.budget_bytes as f64
    };
    let running = now.vms.iter().filter(|v| v.pid.is_some()).count();
    let mut out = format!(
        "memvisor host  budget {}  free {} ({free_pct:.1} %)  state {}\n\
         reserved {}  VMs {running} running of {}  tick {}\n\n",
        size(h.budget_bytes),
        size(h.free_bytes),
        serde_name(&h.free_state),
        size(h.memory_reserved_bytes),
        now.vms.len(),
        h.ticks,
    );
    if let Some(k) = &h.ksm {
        // Page sharing (KSM), as the host drives it: what it saves and what it costs.
        out.insert_str(
            out.len() - 1,
            &format!(
                "KSM {}  scan {} pages / {} ms  saved {}  ksmd CPU {:.1} %\n",
                if k.running { "on" } else { "off" },
                k.pages_to_scan,
                k.sleep_ms,
                size((k.sharing_pages + k.zero_pages) * 4096),
                k.cpu_fraction * 100.0
            ),
        );
    }
    let name_w = now
        .vms
        .iter()
        .map(|v| v.name.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let titles = [
        "STATE", "RESIDENT", "TARGET", "ACTIVE", "BALLOON", "SWAPPED", "SHARED", "FAULTS/S",
    ];
    let mut line = format!("{:<name_w$}  {:<9}", "VM", titles[0]);
    for t in &titles[1..] {
        line.push_str(&format!(" {t:>10}"));
    }
    out.push_str(line.trim_end());
    out.push('\n');
    for v in &now.vms {
        let cells = [
            size(v.resident_bytes),
            size(v.target_bytes),
            size(v.active_bytes),
            v.balloon_bytes.map_or_else(|| "-".into(), size),
            size(v.swapped_bytes),
            size(v.shared_saved_bytes),
            rate(&v.name, now, before),
        ];
        let mut line = format!("{:<name_w$}  {:<9}", v.name, serde_name(&v.state));
        for c in &cells {
            line.push_str(&format!(" {c:>10}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    // Why a VM is paused, exited or refused, in words ("the guest reported success").
    let whys: Vec<String> = now
        .vms
        .iter()
        .filter_map(|v| Some(format!("{}: {}\n", v.name, v.why.as_deref()?)))
        .collect();
    if !whys.is_empty() {
        out.push('\n');
        whys.iter().for_each(|w| out.push_str(w));
    }
    out
}

pub fn run(args: TopArgs) -> ExitCode {
    if args.once {
        return once(&args.host_sock);
    }
    // The first reading before the screen changes: a wrong socket is one plain error line.
    let first = match read(&args.host_sock) {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    match interactive(&args.host_sock, first) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memvisor: top: {e}");
            ExitCode::from(status::VMM_FAILURE)
        }
    }
}

fn failed(e: &ReadError) -> ExitCode {
    eprintln!("memvisor: {}", e.message());
    match e.0.is_unreachable() {
        true => ExitCode::from(status::BAD_INPUT),
        false => ExitCode::from(1),
    }
}

fn once(sock: &Path) -> ExitCode {
    let first = match read(sock) {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    std::thread::sleep(REFRESH);
    let second = match read(sock) {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    // A reader that goes away early (`| head`) is not an error.
    let _ = std::io::stdout().write_all(frame(&second, Some(&first)).as_bytes());
    ExitCode::SUCCESS
}

fn is_tty(fd: libc::c_int) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// The terminal in the view's mode; put back as it was when dropped (a panic included).
struct Screen {
    /// Standard input's settings before, when it is a terminal.
    saved: Option<libc::termios>,
    alternate: bool,
}

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        let mut saved = None;
        if is_tty(libc::STDIN_FILENO) {
            // SAFETY: tcgetattr writes the zeroed struct we own.
            let mut t: libc::termios = unsafe { std::mem::zeroed() };
            // SAFETY: as above; stdin is a terminal.
            if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut raw = t;
            // Keys one at a time, not echoed; Ctrl-C arrives as a byte, not a signal.
            raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
            raw.c_cc[libc::VMIN] = 0;
            raw.c_cc[libc::VTIME] = 0;
            // SAFETY: `raw` is a full termios read from this terminal.
            if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            saved = Some(t);
        }
        let alternate = is_tty(libc::STDOUT_FILENO);
        if alternate {
            // The alternate screen, cursor hidden.
            print!("\x1b[?1049h\x1b[?25l");
            std::io::stdout().flush()?;
        }
        Ok(Screen { saved, alternate })
    }

    fn draw(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let r = if self.alternate {
            let width = columns();
            let text: String = text
                .lines()
                .map(|l| {
                    let cut: String = l.chars().take(width).collect();
                    // The rest of each line cleared: an older frame may have been longer.
                    format!("{cut}\x1b[K\n")
                })
                .collect();
            // Home, the frame, then clear whatever an older, longer frame left below it.
            write!(out, "\x1b[H{text}\x1b[J")
        } else {
            writeln!(out, "{text}")
        };
        let _ = r.and_then(|()| out.flush());
    }
}

/// The terminal's width in columns (80 when it does not say).
fn columns() -> usize {
    // SAFETY: TIOCGWINSZ writes a winsize into the zeroed struct we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; stdout is a terminal when this is called.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if self.alternate {
            print!("\x1b[?25h\x1b[?1049l");
            let _ = std::io::stdout().flush();
        }
        if let Some(t) = &self.saved {
            // SAFETY: `t` is the terminal's own earlier state.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, t) };
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, blocked and read from a descriptor, so the view ends through
/// its own loop (and [`Screen`]'s drop) rather than dying with the terminal left raw.
fn signal_fd() -> std::io::Result<libc::c_int> {
    memvisor_host::signals::block()?;
    // SAFETY: sigemptyset initialises the set we pass; sigaddset adds valid signal numbers.
    let set = unsafe {
        let mut s: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut s);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut s, sig);
        }
        s
    };
    // SAFETY: -1 asks for a new descriptor; `set` is initialised.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// Waits up to `timeout` for a key or a signal; true when the view should end.
fn wait_for_quit(sig_fd: libc::c_int, keys: bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds = [
            libc::pollfd {
                fd: sig_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: libc::STDIN_FILENO,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let n: libc::nfds_t = if keys { 2 } else { 1 };
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` holds at least `n` initialised entries and outlives the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), n, ms) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return true;
        }
        if fds[0].revents != 0 {
            return true;
        }
        if keys && fds[1].revents != 0 {
            let mut buf = [0u8; 64];
            // SAFETY: reads at most `buf.len()` bytes into `buf`.
            let got = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
            match usize::try_from(got) {
                // End of input: nothing more will say quit, and polling it would spin.
                Ok(0) => return true,
                Ok(n) => {
                    if buf[..n].iter().any(|&b| matches!(b, b'q' | b'Q' | 0x03)) {
                        return true;
                    }
                }
                Err(_) => return true,
            }
        }
    }
}

fn interactive(sock: &Path, mut before: Reading) -> std::io::Result<()> {
    let sig_fd = signal_fd()?;
    let screen = Screen::enter()?;
    let keys = screen.saved.is_some();
    let hint = if keys { "q: quit" } else { "Ctrl-C: quit" };
    screen.draw(&format!("{}\n{hint}\n", frame(&before, None)));
    while !wait_for_quit(sig_fd, keys, REFRESH) {
        match read(sock) {
            Ok(now) => {
                screen.draw(&format!("{}\n{hint}\n", frame(&now, Some(&before))));
                before = now;
            }
            Err(e) => screen.draw(&format!(
                "{}\n{}\n{hint}\n",
                frame(&before, None),
                e.message()
            )),
        }
    }
    drop(screen);
    // SAFETY: closing the descriptor signal_fd opened.
    unsafe { libc::close(sig_fd) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_api::{ActiveMemory, FreeStateName, HostVmState};

    fn vm(name: &str, state: HostVmState, balloon: Option<u64>) -> HostVm {
        HostVm {
            name: name.into(),
            state,
            why: None,
            pid: (state == HostVmState::Running).then_some(1),
            exit_status: None,
            exit: None,
            mem_bytes: 256 << 20,
            min_bytes: 0,
            max_bytes: 256 << 20,
            shares: 1000,
            target_bytes: 200 << 20,
            resident_bytes: 70 << 20,
            active_bytes: 35 << 20,
            active_fraction: 0.5,
            active: ActiveMemory::default(),
            balloon_bytes: balloon,
            balloon_target_bytes: balloon,
            balloon_usable: balloon.map(|_| true),
            balloon_step_bytes: balloon,
            balloon_reread_cap_bytes: None,
            swapped_bytes: 0,
            on_disk_bytes: 0,
            limit_bytes: 256 << 20,
            paused_by_host: false,
            pool_bytes: 0,
            pooled_bytes: 0,
            oom_deflated_pages: 0,
            shared_saved_bytes: 0,
            overhead_bytes: 0,
            api_sock: "/x".into(),
            snapshot_dir: None,
            log: "/y".into(),
        }
    }

    fn reading(at: Instant, faults: &[(&str, u64)]) -> Reading {
        Reading {
            at,
            host: HostInfo {
                budget_bytes: 1 << 30,
                free_bytes: 512 << 20,
                free_state: FreeStateName::Soft,
                idle_tax: 0.75,
                vm_overhead_bytes: 24 << 20,
                pool_max_bytes: 0,
                pool_bytes: 0,
                memory_reserved_bytes: 48 << 20,
                swap_bytes: 0,
                swap_reserved_bytes: 0,
                ticks: 42,
                tick_seconds: 1.0,
                ksm: None,
                balancing: memvisor_api::Balancing::Hd2,
                released_pages: 1,
                reallocations: 1,
                gap_closed_pages: 1,
                own_bytes: 1,
                committed_bytes: 1,
                migrated_in: 0,
                migrated_out: 0,
                migrations_failed: 0,
            },
            vms: vec![
                vm("web", HostVmState::Running, Some(4 << 20)),
                vm("b", HostVmState::Exited, None),
            ],
            faults: faults.iter().map(|&(n, f)| (n.to_owned(), f)).collect(),
        }
    }

    #[test]
    fn a_frame() {
        let t = Instant::now();
        let before = reading(t, &[("web", 100)]);
        let now = reading(t + Duration::from_secs(2), &[("web", 300)]);
        let f = frame(&now, Some(&before));
        let lines: Vec<&str> = f.lines().collect();
        assert_eq!(
            lines[0],
            "memvisor host  budget 1.00 GiB  free 512.0 MiB (50.0 %)  state soft"
        );
        assert_eq!(lines[1], "reserved 48.0 MiB  VMs 1 running of 2  tick 42");
        let cols = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            cols(lines[3]),
            [
                "VM", "STATE", "RESIDENT", "TARGET", "ACTIVE", "BALLOON", "SWAPPED", "SHARED",
                "FAULTS/S"
            ]
        );
        assert_eq!(
            lines[4],
            "web  running     70.0 MiB  200.0 MiB   35.0 MiB    4.0 MiB        0 B        0 B        100"
        );
        assert!(lines[5].starts_with("b    exited "), "{}", lines[5]);
        // The longest state, `migrating`, keeps the columns in line.
        let mut moving = now.clone();
        moving.vms[1].state = HostVmState::Migrating;
        let f = frame(&moving, Some(&before));
        let row = f.lines().nth(5).unwrap();
        assert_eq!(row.len(), lines[4].len(), "{row}");
        assert!(
            lines[5].ends_with("   -        0 B        0 B          -"),
            "{}",
            lines[5]
        );
        assert_eq!(lines.len(), 6);
        // Why a VM is not running, in words, under the table.
        let mut exited = now.clone();
        exited.vms[1].why = Some("the guest reported success".into());
        let f = frame(&exited, Some(&before));
        let lines: Vec<&str> = f.lines().collect();
        assert_eq!(lines[6..], ["", "b: the guest reported success"]);
        // Without an earlier reading there is no rate yet.
        assert!(frame(&now, None).lines().nth(4).unwrap().ends_with(" -"));
    }

    #[test]
    fn sizes() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(70 << 20), "70.0 MiB");
        assert_eq!(size(3 << 30), "3.00 GiB");
    }
}
