//! `memvisor ctl`: a client of a VM's API socket (`--api-sock`) or of a host manager's
//! (`--host-sock`), through `memvisor_api`'s typed clients.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use memvisor_api::exit::status;
use memvisor_api::{
    parse_size, ClientError, HostClient, HostUpdate, PolicyUpdate, VmClient, VmSpec,
};

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The VM's API socket (`memvisor run --api-sock`), for the VM's requests.
    #[arg(
        long,
        required_unless_present = "host_sock",
        conflicts_with = "host_sock"
    )]
    pub api_sock: Option<PathBuf>,
    /// The host manager's API socket (`api_sock` of `memvisor host`), for the host's requests.
    #[arg(long)]
    pub host_sock: Option<PathBuf>,
    #[command(subcommand)]
    pub request: CtlRequest,
}

#[derive(Subcommand, Debug)]
pub enum CtlRequest {
    /// Show the VM's configuration and state (GET /vm).
    Vm,
    /// Show every counter (GET /stats).
    Stats,
    /// Set the resident-memory limit, e.g. 100M, or `none` (PUT /memory).
    Limit {
        #[arg(value_parser = parse_limit)]
        limit: Limit,
    },
    /// Release up to PAGES pages that mirror disk blocks now, without the vCPUs (PUT
    /// /memory/release; HyperDealer2's instant reclamation, with `--mapper`): prints how many
    /// were released and kept as changed, how long it took and the new limit.
    Release {
        pages: u64,
        /// Only pages of sequential streams the guest has left cold (behind a stream still being
        /// read, or untouched since a probe), and a probe of each other stream (with `--victims
        /// hd2` or `hd2-whole`), as the host releases while memory is plentiful.
        #[arg(long)]
        cold_only: bool,
    },
    /// Resize the host-memory pool, e.g. 256M (PUT /pool; the VM must have `--pool`).
    Pool {
        #[arg(value_parser = parse_size)]
        bytes: u64,
    },
    /// Set the balloon size, e.g. 256M (PUT /balloon).
    Balloon {
        #[arg(value_parser = parse_size)]
        target: u64,
    },
    /// Park every vCPU outside the guest until `resume` (PUT /vm/pause).
    Pause,
    /// Resume a paused VM: one paused with `pause`, or by the pager because swap or image I/O
    /// failed (PUT /vm/resume).
    Resume,
    /// Write the VM to a snapshot directory, then let it run on, or end it with --stop
    /// (PUT /vm/snapshot); `memvisor run --restore DIR` starts it again. A jailed VMM writes
    /// into its --snapshot-dir: give a name there. Prints where it landed (`dir`).
    Snapshot {
        dir: PathBuf,
        /// End the VM once it is written.
        #[arg(long)]
        stop: bool,
        /// With --host-sock: the host's VM to write (PUT /vms/NAME/snapshot); DIR is then one
        /// name, written to STATE/NAME/snapshots/DIR.
        #[arg(long, value_name = "NAME")]
        vm: Option<String>,
    },
    /// Move the VM to the memvisor started with `run --incoming ADDR --migration-token T`,
    /// post-copy (PUT /vm/migrate): the VM runs there at once, its pages follow; answers once
    /// every page is there, and the VM ends here.
    Migrate {
        /// The destination's TCP address, host:port.
        #[arg(long, value_name = "ADDR")]
        to: Option<String>,
        /// The token the destination was started with.
        #[arg(long, value_name = "T")]
        token: Option<String>,
        /// Rounds of pre-copy before the switch, while the VM runs here: the first sends every
        /// page with content, each next one the pages written since (0: post-copy only).
        #[arg(long, value_name = "N", default_value_t = 0)]
        precopy_rounds: u32,
    },
    /// Resume a migration whose connection broke in post-copy (PUT /vm/migrate with
    /// "recover"): connect to the destination again and send the pages it has not
    /// acknowledged; the destination's paused VM then runs on.
    MigrateRecover {
        /// The destination's TCP address, host:port (the one it was started with).
        #[arg(long, value_name = "ADDR")]
        to: Option<String>,
        /// The token the destination was started with.
        #[arg(long, value_name = "T")]
        token: Option<String>,
    },
    /// Host: the budget, free memory and its state, reservations (GET /host).
    Host,
    /// Host: every VM with its policy, target, allocation and state (GET /vms).
    Vms,
    /// Host: one VM (GET /vms/NAME).
    Show { name: String },
    /// Host: add a VM described by a TOML file with the keys of a `[[vm]]` table (POST /vms).
    Add { spec: PathBuf },
    /// Host: change a VM's min, max or shares (PATCH /vms/NAME).
    Set {
        name: String,
        #[arg(long, value_parser = parse_size)]
        min: Option<u64>,
        #[arg(long, value_parser = parse_size)]
        max: Option<u64>,
        #[arg(long)]
        shares: Option<u64>,
    },
    /// Host: move a VM to another host (POST /vms/NAME/migrate): the destination host admits it
    /// or refuses it before anything moves; then its VMM there takes the VM, post-copy. Waits
    /// for the end of the move and prints the VM as this host lists it then (`migrated`).
    Move {
        name: String,
        /// The destination host's API socket.
        #[arg(long, value_name = "SOCK")]
        to: PathBuf,
        /// The TCP address the destination's VMM listens on, ip:port (default 127.0.0.1:0, for
        /// two hosts on one machine).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Rounds of pre-copy before the switch (as `migrate --precopy-rounds`).
        #[arg(long, value_name = "N", default_value_t = 0)]
        precopy_rounds: u32,
    },
    /// Host: stop a VM (PUT /vms/NAME/stop).
    Stop { name: String },
    /// Host: forget a VM that ended or was refused (DELETE /vms/NAME).
    Remove { name: String },
    /// Host: set the idle memory tax, from 0 up to (not including) 1 (PATCH /host).
    IdleTax {
        #[arg(value_parser = parse_tax)]
        tax: f64,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct Limit(Option<u64>);

fn parse_limit(s: &str) -> Result<Limit, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    parse_size(s).map(|b| Limit(Some(b)))
}

/// Sends request `r` to `sock` through the typed client of its API and returns the answer as
/// indented JSON; the outer error is for a request sent to the wrong kind of socket or a spec
/// file that cannot be read.
fn call(r: CtlRequest, sock: &Path, host: bool) -> Result<Result<String, ClientError>, String> {
    let vm = |what: &str| {
        if host {
            Err(format!("`{what}` is a VM's request: give --api-sock"))
        } else {
            Ok(VmClient::new(sock))
        }
    };
    let host = |what: &str| {
        if host {
            Ok(HostClient::new(sock))
        } else {
            Err(format!("`{what}` is a host's request: give --host-sock"))
        }
    };
    Ok(match r {
        CtlRequest::Vm => show(vm("vm")?.info()),
        CtlRequest::Stats => show(vm("stats")?.stats()),
        CtlRequest::Pause => show(vm("pause")?.pause()),
        CtlRequest::Resume => show(vm("resume")?.resume()),
        CtlRequest::Snapshot {
            dir,
            stop,
            vm: Some(name),
        } => show(host("snapshot --vm")?.snapshot(&name, &dir.to_string_lossy(), stop)),
        CtlRequest::Snapshot { dir, stop, vm: _ } => {
            let client = vm("snapshot")?;
            // A jailed VMM takes a name in its snapshot directory as it is; any other may run
            // elsewhere in the file system tree: it gets an absolute path.
            let jailed = dir.is_relative()
                && client
                    .info()
                    .is_ok_and(|i: memvisor_api::VmInfo| i.snapshot_dir.is_some());
            let dir = if jailed {
                dir
            } else {
                std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?
            };
            show(client.snapshot(&dir.to_string_lossy(), stop))
        }
        CtlRequest::Migrate {
            to,
            token,
            precopy_rounds,
        } => migrate(
            vm("migrate")?,
            "migrate",
            to,
            token,
            (false, precopy_rounds),
        )?,
        CtlRequest::MigrateRecover { to, token } => migrate(
            vm("migrate-recover")?,
            "migrate-recover",
            to,
            token,
            (true, 0),
        )?,
        CtlRequest::Limit { limit } => show(vm("limit")?.set_limit(limit.0)),
        CtlRequest::Release { pages, cold_only } => {
            show(vm("release")?.release_with(memvisor_api::ReleaseRequest { pages, cold_only }))
        }
        CtlRequest::Pool { bytes } => show(vm("pool")?.set_pool(bytes)),
        CtlRequest::Balloon { target } => show(vm("balloon")?.set_balloon(target)),
        CtlRequest::Host => show(host("host")?.info()),
        CtlRequest::Vms => show(host("vms")?.vms()),
        CtlRequest::Show { name } => show(host("show")?.vm(&name)),
        CtlRequest::Add { spec } => {
            let client = host("add")?;
            let text = std::fs::read_to_string(&spec)
                .map_err(|e| format!("cannot read {}: {e}", spec.display()))?;
            let vm: VmSpec = toml::from_str(&text)
                .map_err(|e| format!("{}: {}", spec.display(), e.to_string().trim_end()))?;
            show(client.add(&vm))
        }
        CtlRequest::Set {
            name,
            min,
            max,
            shares,
        } => show(host("set")?.update_vm(&name, PolicyUpdate { min, max, shares })),
        CtlRequest::Move {
            name,
            to,
            listen,
            precopy_rounds,
        } => {
            let to = std::path::absolute(&to).map_err(|e| format!("{}: {e}", to.display()))?;
            let request = memvisor_api::HostMigrateRequest {
                to: Some(to.to_string_lossy().into_owned()),
                listen,
                precopy_rounds,
                ..memvisor_api::HostMigrateRequest::default()
            };
            move_vm(&host("move")?, &name, request)
        }
        CtlRequest::Stop { name } => show(host("stop")?.stop(&name)),
        CtlRequest::Remove { name } => show(host("remove")?.remove(&name)),
        CtlRequest::IdleTax { tax } => show(host("idle-tax")?.update(HostUpdate {
            idle_tax: Some(tax),
            ..HostUpdate::default()
        })),
    })
}

/// `migrate` and `migrate-recover`: the flags checked, then `PUT /vm/migrate`.
fn migrate(
    client: VmClient,
    what: &str,
    to: Option<String>,
    token: Option<String>,
    (recover, precopy_rounds): (bool, u32),
) -> Result<Result<String, ClientError>, String> {
    let to = to.ok_or(format!(
        "{what} needs --to ADDR, the destination's host:port"
    ))?;
    let token = token.ok_or(format!(
        "{what} needs --token T, the token the destination was started with"
    ))?;
    let most = memvisor_api::MAX_PRECOPY_ROUNDS;
    if precopy_rounds > most {
        return Err(format!("--precopy-rounds {precopy_rounds}: at most {most}"));
    }
    // The VMM's migration thread resolves no names (its seccomp filter lets it open no files
    // and no sockets but TCP ones): a host name is resolved here.
    let resolved = std::net::ToSocketAddrs::to_socket_addrs(to.as_str())
        .ok()
        .and_then(|mut a| a.next());
    let Some(to) = resolved.map(|a| a.to_string()) else {
        return Err(format!("--to '{to}' is not a TCP address: give host:port"));
    };
    // Answered once every page is on the destination: no limit but the connection's.
    let client = client.with_timeout(std::time::Duration::from_secs(24 * 3600));
    Ok(show(client.migrate(memvisor_api::MigrateRequest {
        to,
        token,
        recover,
        precopy_rounds,
    })))
}

/// `move`: `POST /vms/NAME/migrate`, then the host's events until the move has ended: the VM
/// as the host lists it then, or the failure's words (a [`ClientError::Refused`], exit 1).
fn move_vm(
    client: &HostClient,
    name: &str,
    request: memvisor_api::HostMigrateRequest,
) -> Result<String, ClientError> {
    use memvisor_api::HostEventKind as K;
    client.migrate(name, request)?;
    let mine = |kinds: &[K], since: f64| -> Result<Option<memvisor_api::HostEvent>, ClientError> {
        Ok(client.events(since)?.into_iter().rev().find(|e| {
            e.vm.as_deref() == Some(name) && kinds.contains(&e.kind) && e.seconds >= since
        }))
    };
    let began = mine(&[K::Migrating], 0.0)?.map_or(0.0, |e| e.seconds);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        match mine(&[K::MigratedOut, K::MigrationFailed], began)? {
            Some(e) if e.kind == K::MigratedOut => return show(client.vm(name)),
            Some(e) => {
                return Err(ClientError::Refused {
                    request: format!("POST /vms/{name}/migrate"),
                    status: 409,
                    body: e.message,
                })
            }
            None => {}
        }
    }
}

/// An answer, already read into its API type (so one off the schema is an error rather than a
/// surprise to whoever reads the output), written back as indented JSON.
fn show<T: serde::Serialize>(answer: Result<T, ClientError>) -> Result<String, ClientError> {
    answer.map(|v| serde_json::to_string_pretty(&v).expect("API types serialize"))
}

/// An idle memory tax: a fraction from 0 up to (not including) 1.
fn parse_tax(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|t| (0.0..1.0).contains(t))
        .ok_or_else(|| {
            format!("'{s}' is not a tax: give a fraction from 0 up to (not including) 1, e.g. 0.75")
        })
}

pub fn run(args: CtlArgs) -> ExitCode {
    let (sock, host) = match (&args.api_sock, &args.host_sock) {
        (Some(s), _) => (s.clone(), false),
        (None, Some(s)) => (s.clone(), true),
        (None, None) => unreachable!("clap requires one of the sockets"),
    };
    let answer = match call(args.request, &sock, host) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("memvisor: {e}");
            return ExitCode::from(status::BAD_INPUT);
        }
    };
    match answer {
        Ok(text) => {
            // A reader that goes away early (`| head`) is not an error.
            let _ = writeln!(std::io::stdout(), "{text}");
            ExitCode::SUCCESS
        }
        // One line saying what to check; a socket that cannot be reached is bad input.
        Err(e) if e.is_unreachable() => {
            eprintln!("memvisor: {e}");
            ExitCode::from(status::BAD_INPUT)
        }
        Err(e) => {
            eprintln!("memvisor: {e}");
            ExitCode::from(1)
        }
    }
}
