//! `memvisor host`: the host manager. It reads a config file, admits and starts one VMM process
//! per VM (`memvisor run`, so a crash stays in one VM), ticks ESX's allocation policy
//! (`memvisor-policy`) over what the VMMs report, drives each VMM through its API socket, and
//! serves its own API. See docs/host.md.
//!
//! | file | owns |
//! |---|---|
//! | `config.rs` | the TOML config: `[host]`, `[[vm]]`, defaults, errors with file, line and key |
//! | `config_tests.rs` | (tests) `config.rs`: a full config, defaults, each key's checks, errors with file, line and key |
//! | `privileges.rs` | the capabilities the host keeps to start jailed VMMs, every other one dropped at start |
//! | `process.rs` | one VMM process: its flags (`--seccomp`, jailed `--jail` and `--snapshot-dir` among them), files, log, API calls, exit; a process's PSS (a VMM's, the host's own) |
//! | `kmsg.rs` | which call and thread a VMM's seccomp filter killed it for, from the kernel log's audit record |
//! | `jailing.rs` | the VMMs' uids (`uid_range`): parsed, checked free, one per VM; the API socket's `group` |
//! | `journal.rs` | the events and the ticks the host remembers, forgotten after `keep` |
//! | `registry.rs` | the VMs: each one's entry (spec, VMM, last observation, its VMM's measured overhead), the reservations, starting a VM that waited for room, stopping and reaping |
//! | `balancing.rs` | HyperDealer2's balancing on the host: what it remembers of each VM, the releases, their answers, its counters |
//! | `tick.rs` | a tick's decisions: the observations, the plan, the orders; KSM's scan rate; the trace |
//! | `moving.rs` | a VM moving between hosts: the destination's `POST /vms/incoming`, the source's `POST /vms/NAME/migrate` and how it ended |
//! | `manager.rs` | the `Host` behind one lock, made of those parts; the API's requests; the tick's calls to the VMMs |
//! | `server.rs` | the host API on a Unix socket, and `GET /metrics` on the TCP `metrics_addr` |
//! | `signals.rs` | the termination signals, taken by a thread |
//! | `web.rs` | the live web page (`web_addr`), with its script and chart library built in |
//! | `ksm.rs` | the kernel's KSM while a VM shares: the scan rate from free memory, ksmd's CPU, the knobs put back |

mod balancing;
pub mod config;
pub mod jailing;
mod journal;
pub mod kmsg;
pub mod ksm;
mod manager;
mod moving;
mod privileges;
mod process;
mod registry;
mod server;
pub mod signals;
mod tick;
mod web;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use config::HostConfig;
pub use manager::Host;
pub use process::{pss, smaps_beside_ram, Launch, VmmFiles};

/// How long the VMs get to stop when the host stops, before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Runs the host of `config` until SIGTERM, SIGINT or SIGHUP; then stops every VM.
/// `exe` is the memvisor binary that runs each VMM.
pub fn run(mut config: HostConfig, exe: PathBuf) -> Result<(), String> {
    signals::block().map_err(|e| format!("cannot block signals: {e}"))?;
    privileges::keep_needed().map_err(|e| format!("cannot drop capabilities: {e}"))?;
    config.prepare_state_dir()?;
    let listener = memvisor_api::server::bind(&config.api_sock)
        .map_err(|e| format!("cannot serve {}: {e}", config.api_sock.display()))?;
    // Its owner's and, with `group`, that group's: `memvisor ctl` and `top` for operators
    // who are not root. Before the socket's identity is taken, which a change of mode changes.
    open_to_group(&config.api_sock, config.group).map_err(|e| {
        format!(
            "cannot open {} to its group: {e}",
            config.api_sock.display()
        )
    })?;
    let _socket = memvisor_api::server::SocketFile::new(config.api_sock.clone());
    let metrics = match config.metrics_addr {
        None => None,
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| format!("cannot serve metrics on {addr} (metrics_addr): {e}"))?;
            let bound = l
                .local_addr()
                .map_err(|e| format!("cannot serve metrics on {addr} (metrics_addr): {e}"))?;
            Some((l, bound))
        }
    };
    let launch = Launch {
        exe,
        sample_pages: config.sample_pages,
        sample_period: config.sample_period,
        pool_compress: config.pool_compress,
        pool_chunk: config.pool_chunk,
        seccomp: config.seccomp,
        release_ready: Launch::release_ready_for(config.balancing),
    };
    let tick = config.tick;
    let web_addr = config.web_addr;
    eprintln!(
        "memvisor host: budget {} MiB, {} VMs in {}, API on {}",
        config.memory >> 20,
        config.vms.len(),
        config.path.display(),
        config.api_sock.display()
    );
    if let Some((_, bound)) = &metrics {
        let reach = if bound.ip().is_loopback() {
            "this machine only"
        } else {
            "reachable from other machines, without authentication"
        };
        eprintln!("memvisor host: metrics on http://{bound}/metrics ({reach})");
    }
    let trace = match &config.trace {
        None => None,
        Some(path) => {
            let f = std::fs::File::create(path).map_err(|e| {
                format!(
                    "cannot write the trace {} ([host] trace): {e}",
                    path.display()
                )
            })?;
            eprintln!(
                "memvisor host: every tick's observations and plan go to {}",
                path.display()
            );
            Some(std::io::BufWriter::new(f))
        }
    };
    let host = Arc::new(Mutex::new(Host::new(config, launch, trace)));
    for problem in manager::lock(&host).start_config() {
        eprintln!("memvisor host: {problem}");
    }
    server::serve(listener, host.clone()).map_err(|e| format!("cannot start the API: {e}"))?;
    if let Some(addr) = web_addr {
        let bound = web::serve(addr, host.clone())
            .map_err(|e| format!("cannot serve the web page on {addr}: {e}"))?;
        eprintln!("memvisor host: live page on http://{bound}/");
    }
    if let Some((l, _)) = metrics {
        server::serve_metrics(l, host.clone())
            .map_err(|e| format!("cannot start the metrics server: {e}"))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let sig = signals::wait();
                tracing::info!("signal {sig}: stopping every VM");
                stop.store(true, Ordering::SeqCst);
            })
            .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    }
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        if Instant::now() >= next {
            manager::tick(&host);
            next += tick;
            if next < Instant::now() {
                next = Instant::now() + tick;
            }
        }
        std::thread::sleep(Duration::from_millis(20).min(tick));
    }
    let deadline = Instant::now() + STOP_GRACE;
    let mut left = manager::lock(&host).stop_all();
    while left > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let mut h = manager::lock(&host);
        h.reap();
        left = h.vms().iter().filter(|v| v.pid.is_some()).count();
    }
    manager::lock(&host).kill_all();
    // KSM's knobs go back as the host found them.
    manager::lock(&host).let_ksm_go();
    let trash = manager::lock(&host).take_trash();
    trash.iter().for_each(process::VmmFiles::clean);
    eprintln!("memvisor host: every VM stopped");
    Ok(())
}

/// Makes the host's socket 0660 and, given `group`, that group's.
fn open_to_group(sock: &std::path::Path, group: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(gid) = group {
        std::os::unix::fs::chown(sock, None, Some(gid))?;
    }
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o660))
}
