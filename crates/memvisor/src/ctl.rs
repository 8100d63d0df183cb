//! `memvisor ctl`: a client of a VM's API socket (`--api-sock`) or of a host manager's
//! (`--host-sock`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use memvisor_api::{
    call, BalloonUpdate, HostInfo, HostUpdate, HostVm, MemoryUpdate, PolicyUpdate, PoolUpdate,
    VmInfo, VmSpec, VmStats,
};

use crate::cli::parse_size;
use crate::status;

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

/// What a request's answer is, to read it back into its type.
#[derive(Clone, Copy)]
enum Answer {
    Vm,
    Stats,
    Host,
    HostVm,
    HostVms,
}

#[derive(Clone, Copy, Debug)]
pub struct Limit(Option<u64>);

fn parse_limit(s: &str) -> Result<Limit, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    parse_size(s).map(|b| Limit(Some(b)))
}

/// The method, path, body and answer type of a request; an error for a request sent to the
/// wrong kind of socket or a spec file that cannot be read.
fn request(
    r: CtlRequest,
    host: bool,
) -> Result<(&'static str, String, Option<String>, Answer), String> {
    let vm_only = |what: &str| {
        if host {
            Err(format!("`{what}` is a VM's request: give --api-sock"))
        } else {
            Ok(())
        }
    };
    let host_only = |what: &str| {
        if host {
            Ok(())
        } else {
            Err(format!("`{what}` is a host's request: give --host-sock"))
        }
    };
    Ok(match r {
        CtlRequest::Vm => {
            vm_only("vm")?;
            ("GET", "/vm".into(), None, Answer::Vm)
        }
        CtlRequest::Stats => {
            vm_only("stats")?;
            ("GET", "/stats".into(), None, Answer::Stats)
        }
        CtlRequest::Pause => {
            vm_only("pause")?;
            ("PUT", "/vm/pause".into(), None, Answer::Vm)
        }
        CtlRequest::Resume => {
            vm_only("resume")?;
            ("PUT", "/vm/resume".into(), None, Answer::Vm)
        }
        CtlRequest::Limit { limit } => {
            vm_only("limit")?;
            let body = json(&MemoryUpdate { limit: limit.0 });
            ("PUT", "/memory".into(), Some(body), Answer::Vm)
        }
        CtlRequest::Pool { bytes } => {
            vm_only("pool")?;
            let body = json(&PoolUpdate { bytes });
            ("PUT", "/pool".into(), Some(body), Answer::Vm)
        }
        CtlRequest::Balloon { target } => {
            vm_only("balloon")?;
            let body = json(&BalloonUpdate { target });
            ("PUT", "/balloon".into(), Some(body), Answer::Vm)
        }
        CtlRequest::Host => {
            host_only("host")?;
            ("GET", "/host".into(), None, Answer::Host)
        }
        CtlRequest::Vms => {
            host_only("vms")?;
            ("GET", "/vms".into(), None, Answer::HostVms)
        }
        CtlRequest::Show { name } => {
            host_only("show")?;
            ("GET", format!("/vms/{name}"), None, Answer::HostVm)
        }
        CtlRequest::Add { spec } => {
            host_only("add")?;
            let text = std::fs::read_to_string(&spec)
                .map_err(|e| format!("cannot read {}: {e}", spec.display()))?;
            let vm: VmSpec = toml::from_str(&text)
                .map_err(|e| format!("{}: {}", spec.display(), e.to_string().trim_end()))?;
            ("POST", "/vms".into(), Some(json(&vm)), Answer::HostVm)
        }
        CtlRequest::Set {
            name,
            min,
            max,
            shares,
        } => {
            host_only("set")?;
            let body = json(&PolicyUpdate { min, max, shares });
            ("PATCH", format!("/vms/{name}"), Some(body), Answer::HostVm)
        }
        CtlRequest::Stop { name } => {
            host_only("stop")?;
            ("PUT", format!("/vms/{name}/stop"), None, Answer::HostVm)
        }
        CtlRequest::Remove { name } => {
            host_only("remove")?;
            ("DELETE", format!("/vms/{name}"), None, Answer::HostVm)
        }
        CtlRequest::IdleTax { tax } => {
            host_only("idle-tax")?;
            let body = json(&HostUpdate {
                idle_tax: Some(tax),
            });
            ("PATCH", "/host".into(), Some(body), Answer::Host)
        }
    })
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

/// A request type as JSON (they always serialize).
fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).expect("request types serialize")
}

pub fn run(args: CtlArgs) -> ExitCode {
    let (sock, host) = match (&args.api_sock, &args.host_sock) {
        (Some(s), _) => (s.clone(), false),
        (None, Some(s)) => (s.clone(), true),
        (None, None) => unreachable!("clap requires one of the sockets"),
    };
    let (method, path, body, answer) = match request(args.request, host) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("memvisor: {e}");
            return ExitCode::from(status::BAD_INPUT);
        }
    };
    match call(&sock, method, &path, body.as_deref()) {
        Ok((200, out)) => {
            // Read into the API's own types, so an answer that does not follow the schema is
            // an error here rather than a surprise to whoever reads the output.
            let typed = match answer {
                Answer::Vm => pretty::<VmInfo>(&out),
                Answer::Stats => pretty::<VmStats>(&out),
                Answer::Host => pretty::<HostInfo>(&out),
                Answer::HostVm => pretty::<HostVm>(&out),
                Answer::HostVms => pretty::<Vec<HostVm>>(&out),
            };
            match typed {
                Ok(text) => {
                    // A reader that goes away early (`| head`) is not an error.
                    let _ = writeln!(std::io::stdout(), "{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("memvisor: the answer to {method} {path} does not follow the API schema ({e}): {out}");
                    ExitCode::from(1)
                }
            }
        }
        Ok((code, out)) => {
            eprintln!("memvisor: {method} {path} refused ({code}): {out}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("memvisor: cannot reach {}: {e}", sock.display());
            ExitCode::from(status::BAD_INPUT)
        }
    }
}

/// `body` read as a `T` and written back as indented JSON.
fn pretty<T: serde::Serialize + serde::de::DeserializeOwned>(
    body: &str,
) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(&serde_json::from_str::<T>(body)?)
}
