//! `memvisor ctl`: a client of a VM's API socket.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use memvisor_api::{call, BalloonUpdate, MemoryUpdate, VmInfo, VmStats};

use crate::cli::parse_size;
use crate::status;

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The VM's API socket.
    #[arg(long)]
    pub api_sock: PathBuf,
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
}

#[derive(Clone, Copy, Debug)]
pub struct Limit(Option<u64>);

fn parse_limit(s: &str) -> Result<Limit, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    parse_size(s).map(|b| Limit(Some(b)))
}

pub fn run(args: CtlArgs) -> ExitCode {
    let (method, path, body) = match args.request {
        CtlRequest::Vm => ("GET", "/vm", None),
        CtlRequest::Stats => ("GET", "/stats", None),
        CtlRequest::Pause => ("PUT", "/vm/pause", None),
        CtlRequest::Resume => ("PUT", "/vm/resume", None),
        CtlRequest::Limit { limit } => (
            "PUT",
            "/memory",
            Some(serde_json::to_string(&MemoryUpdate { limit: limit.0 })),
        ),
        CtlRequest::Balloon { target } => (
            "PUT",
            "/balloon",
            Some(serde_json::to_string(&BalloonUpdate { target })),
        ),
    };
    let body = body.transpose().expect("request types serialize");
    match call(&args.api_sock, method, path, body.as_deref()) {
        Ok((200, out)) => {
            // Read into the API's own types, so an answer that does not follow the schema is
            // an error here rather than a surprise to whoever reads the output.
            let typed = if path == "/stats" {
                pretty::<VmStats>(&out)
            } else {
                pretty::<VmInfo>(&out)
            };
            match typed {
                Ok(text) => {
                    println!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("memvisor: the VM's answer to {method} {path} does not follow the API schema ({e}): {out}");
                    ExitCode::from(1)
                }
            }
        }
        Ok((code, out)) => {
            eprintln!("memvisor: the VM refused {method} {path} ({code}): {out}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("memvisor: cannot reach {}: {e}", args.api_sock.display());
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
