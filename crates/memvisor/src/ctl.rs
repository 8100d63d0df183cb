//! `memvisor ctl`: a client of a VM's API socket.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use memvisor_api::{call, BalloonUpdate, MemoryUpdate};

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
    /// Resume a VM the pager paused because swap or image I/O failed (PUT /vm/resume).
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
            println!("{out}");
            ExitCode::SUCCESS
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
