//! Moving a VM from one host to another (docs/migration.md, "Between hosts"), in two calls
//! that an orchestrator may also make itself:
//!
//! 1. `POST /vms/incoming` on the destination ([`incoming`]): admission decides, as for
//!    `POST /vms`, before anything moves; admitted, the VM waits for room for its `min` like
//!    any VM, then its VMM starts (jailed as every VMM) waiting for the source
//!    (`memvisor run --incoming LISTEN`, a fresh random token in its environment), and the
//!    answer gives the address it listens on and the token.
//! 2. `PUT /vm/migrate` on the source's VMM with that address and token. `memvisor host` does
//!    both for `POST /vms/NAME/migrate` ([`migrate`]): it asks the destination host, answers
//!    once the move has begun (state `migrating`), and makes the second call on a thread of
//!    its own, so its API answers meanwhile; [`finish`] records the outcome.
//!
//! A move that fails before the switch leaves the VM running on the source, and the source
//! host calls the destination's VM off (`DELETE /vms/NAME` on an incoming VM that has not
//! switched: [`cancel`]), which gives its reservation back. A break during post-copy leaves
//! both VMMs as the VMM-level protocol does (the source keeps every page not acknowledged,
//! the destination waits paused for `migrate-recover`), and the source's state says so.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memvisor_api::{
    ClientError, ErrorBody, HostClient, HostEventKind, HostMigrateRequest, HostVm, HostVmState,
    IncomingRequest, IncomingVm, MigrateRequest, MigrateResult, VmClient, VmState,
};

use crate::manager::{lock, Shared};
use crate::registry::{Incoming, Outgoing, Refused};

/// Where a destination's VMM listens unless told: a source on this machine.
const DEFAULT_LISTEN: &str = "127.0.0.1:0";
/// How long the destination waits for its VMM to listen (room in the budget for its `min`
/// included) before it calls the move off.
const LISTEN_WITHIN: Duration = Duration::from_secs(30);
/// How long the source host waits for the destination host to answer `POST /vms/incoming`.
const INCOMING_WITHIN: Duration = Duration::from_secs(45);
/// How long the source's VMM may take to move the VM (its answer comes when the destination
/// holds every page).
const MIGRATE_WITHIN: Duration = Duration::from_secs(3600);
/// What a VMM waiting for a migration writes to its log, the address after it.
const WAITING_ON: &str = "memvisor: waiting for a migration on ";

/// A fresh one-time token: 128 random bits in hex.
fn token() -> Result<String, Refused> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Refused(500, format!("cannot make a migration token: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The address a VMM whose log is `log` (from byte `start`) says it waits on, once it says so.
fn waiting_on(log: &Path, start: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).ok()?;
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut text = Vec::new();
    f.take(1 << 20).read_to_end(&mut text).ok()?;
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(WAITING_ON))
        .map(|a| a.trim().to_owned())
}

/// `POST /vms/incoming`: admits the VM (or refuses it, and nothing changes), waits until its
/// VMM listens, and answers with where and the token; a VMM that does not listen within
/// [`LISTEN_WITHIN`] (no room for its `min`, or it failed) calls the move off.
pub fn incoming(host: &Shared, req: IncomingRequest) -> Result<IncomingVm, Refused> {
    let listen = req.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    if listen.parse::<std::net::SocketAddr>().is_err() {
        return Err(Refused(
            400,
            format!("listen '{listen}' is not an ip:port (e.g. 127.0.0.1:0 or 10.0.0.2:0)"),
        ));
    }
    let token = token()?;
    let name = req.vm.name.clone();
    {
        let mut h = lock(host);
        let spec = h.resolve(req.vm)?;
        let inc = Incoming {
            listen,
            token: token.clone(),
        };
        h.add_as(spec, Some(inc))?;
    }
    let deadline = Instant::now() + LISTEN_WITHIN;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let mut h = lock(host);
        let registry = h.registry_mut();
        let i = registry.find(&name)?;
        let v = &mut registry.vms[i];
        let why = v.why.clone().unwrap_or_default();
        if v.ended.is_some() {
            let log = v.files.log.display().to_string();
            registry.vms.remove(i);
            return Err(Refused(
                409,
                format!("vm '{name}' cannot be taken: {why} (its log: {log}); nothing is left of it here"),
            ));
        }
        let said = v
            .vmm
            .as_ref()
            .and_then(|vmm| waiting_on(&v.files.log, vmm.log_start()));
        if let Some(addr) = said {
            v.why = Some(format!("its VMM waits for the source on {addr}"));
            return Ok(IncomingVm {
                vm: v.status(),
                addr,
                token,
            });
        }
        if Instant::now() >= deadline {
            h.call_off(&name);
            return Err(Refused(
                409,
                format!(
                    "vm '{name}' was admitted but its VMM did not wait for the source within {} s ({why}); called off",
                    LISTEN_WITHIN.as_secs()
                ),
            ));
        }
    }
}

/// `DELETE /vms/NAME` on a VM moving here that has not switched over: its VMM stops, its
/// reservation goes back, and the host forgets it. One that runs here already is refused
/// (409): stop it as any VM.
pub fn cancel(host: &Shared, name: &str) -> Result<HostVm, Refused> {
    let sock = {
        let mut h = lock(host);
        let i = h.registry_mut().find(name)?;
        h.registry_mut().vms[i].files.sock.clone()
    };
    // Without the lock: a VMM that answers has the VM; one that has switched runs it.
    if let Ok(info) = crate::process::client(&sock).info() {
        if info.state != VmState::Created {
            return Err(Refused(
                409,
                format!(
                    "vm '{name}' has switched over and runs here: stop it (PUT /vms/{name}/stop)"
                ),
            ));
        }
    }
    let mut h = lock(host);
    h.call_off(name)
        .ok_or_else(|| Refused(404, format!("no VM named '{name}' on this host")))
}

/// The error a host's answer carries, in its words.
fn said(e: &ClientError) -> (u16, String) {
    match e {
        ClientError::Refused { status, body, .. } => {
            let why =
                serde_json::from_str::<ErrorBody>(body).map_or_else(|_| body.clone(), |b| b.error);
            (*status, why)
        }
        e => (400, e.to_string()),
    }
}

/// `POST /vms/NAME/migrate`: asks the destination host to take the VM; refused there, nothing
/// changes here (the answer says why); admitted, the move begins on a thread of its own and
/// the VM is answered as it is then (`migrating`).
pub fn migrate(host: &Shared, name: &str, req: HostMigrateRequest) -> Result<HostVm, Refused> {
    let (to, prepared) = match (&req.to, &req.addr, &req.token) {
        (Some(to), None, None) => (to.clone(), None),
        (None, Some(addr), Some(token)) => {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(Refused(400, format!("addr '{addr}' is not an ip:port")));
            }
            (addr.clone(), Some((addr.clone(), token.clone())))
        }
        _ => {
            return Err(Refused(
                400,
                "give either to (the destination host's socket) or addr and token (the answer of the destination host's POST /vms/incoming)".into(),
            ))
        }
    };
    let most = memvisor_api::MAX_PRECOPY_ROUNDS;
    if req.precopy_rounds > most {
        let n = req.precopy_rounds;
        return Err(Refused(400, format!("precopy_rounds {n}: at most {most}")));
    }
    let (spec, sock) = {
        let mut h = lock(host);
        let own = h.config().api_sock.clone();
        if prepared.is_none() && same_file(Path::new(&to), &own) {
            return Err(Refused(
                400,
                format!("{to} is this host's own socket: give another host's"),
            ));
        }
        let i = h.registry_mut().find(name)?;
        let v = &mut h.registry_mut().vms[i];
        let busy = if v.outgoing.is_some() {
            Some("it is moving already")
        } else if v.incoming.is_some() {
            Some("it is still moving here")
        } else if !v.live() || v.stop_asked || v.migrated {
            Some("it is not running")
        } else if v.info.is_none() {
            Some("its VMM has not answered yet")
        } else {
            None
        };
        if let Some(why) = busy {
            return Err(Refused(409, format!("vm '{name}' cannot move: {why}")));
        }
        // The tick leaves it alone from now on: no observation, no orders.
        v.outgoing = Some(Outgoing {
            to: to.clone(),
            host: req.to.clone(),
            addr: String::new(),
            token: String::new(),
            broken: false,
        });
        v.state = HostVmState::Migrating;
        v.why = Some(format!("asking {to} to take it"));
        (v.spec.clone(), v.files.sock.clone())
    };
    let taken = match prepared {
        Some((addr, token)) => Ok((addr, token)),
        None => {
            let dest = HostClient::new(&to).with_timeout(INCOMING_WITHIN);
            let taken = dest.incoming(IncomingRequest {
                vm: spec,
                listen: req.listen.clone(),
            });
            taken.map(|t| (t.addr, t.token))
        }
    };
    let mut h = lock(host);
    let (addr, token) = match taken {
        Ok(t) => t,
        Err(e) => {
            let (status, why) = said(&e);
            let msg = format!("{to} did not take vm '{name}': {why}");
            h.move_failed(name, &msg);
            let status = if (400..500).contains(&status) {
                status
            } else {
                400
            };
            return Err(Refused(status, msg));
        }
    };
    let i = h.registry_mut().find(name)?;
    let v = &mut h.registry_mut().vms[i];
    v.outgoing = Some(Outgoing {
        to: to.clone(),
        host: req.to.clone(),
        addr: addr.clone(),
        token: token.clone(),
        broken: false,
    });
    v.why = Some(format!("moving to {to}, its VMM there listening on {addr}"));
    let status = v.status();
    h.journal_event(
        HostEventKind::Migrating,
        name,
        format!("moving to {to}: admitted there, its VMM listening on {addr}"),
    );
    drop(h);
    let ask = MigrateRequest {
        to: addr,
        token,
        recover: false,
        precopy_rounds: req.precopy_rounds,
    };
    let (shared, owned) = (host.clone(), name.to_owned());
    let spawned = std::thread::Builder::new()
        .name("host-migrate".into())
        .spawn(move || {
            let result = VmClient::new(&sock)
                .with_timeout(MIGRATE_WITHIN)
                .migrate(ask);
            finish(&shared, &owned, &sock, result);
        });
    if let Err(e) = spawned {
        let msg = format!("cannot start a thread for the move: {e}");
        lock(host).move_failed(name, &msg);
        if let Some(h) = &req.to {
            let _ = HostClient::new(h).remove(name);
        }
        return Err(Refused(500, msg));
    }
    Ok(status)
}

/// Whether `a` and `b` name the same file (a socket given two ways).
fn same_file(a: &Path, b: &PathBuf) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// Records how the move of `name` ended, by the answer of its VMM (`sock`) to
/// `PUT /vm/migrate`: moved, failed before the switch (the VM runs on here, the destination's
/// VM is called off), or broken after it (both VMMs kept for `migrate-recover`).
fn finish(host: &Shared, name: &str, sock: &Path, result: Result<MigrateResult, ClientError>) {
    let out = {
        let h = lock(host);
        h.vm_outgoing(name)
    };
    let Some(out) = out else { return };
    match result {
        Ok(r) => {
            let why = format!(
                "moved to {}: {} pages copied, {} MiB sent, the vCPUs stopped {} ms, {} ms in all",
                out.to,
                r.copied_pages,
                r.sent_bytes >> 20,
                r.downtime_ms,
                r.total_ms
            );
            lock(host).moved_out(name, why);
        }
        Err(e) => {
            let (_, error) = said(&e);
            // What is left decides what to say and do: the VMM answers while it lives.
            let now = crate::process::client(sock).info();
            let mut h = lock(host);
            match now {
                Ok(info) if info.migration.is_some() => {
                    let msg = format!(
                        "the move to {} broke off after the switch: {error}. The VM waits paused there; its VMM here keeps every page not acknowledged: `memvisor ctl --api-sock {} migrate-recover --to {} --token {}` finishes the move",
                        out.to,
                        sock.display(),
                        out.addr,
                        out.token
                    );
                    h.move_broken(name, msg);
                }
                // The VMM's own words: the go-ahead was lost at the switch, and the VM it
                // paused for it stays paused.
                Ok(info) if info.state == VmState::Paused && error.contains("go-ahead") => {
                    let msg = format!(
                        "the move to {} stopped at the switch: {error}. The VM is paused here with every page; resume it here (`memvisor ctl --api-sock {} resume`) only once the VM at {} is known not to run",
                        out.to,
                        sock.display(),
                        out.to
                    );
                    h.move_broken(name, msg);
                }
                _ => {
                    let there = if out.host.is_some() {
                        "the destination's VM is called off"
                    } else {
                        "call the destination's VM off (DELETE /vms/NAME on the destination host)"
                    };
                    let msg = format!(
                        "the move to {} failed before the switch: {error}; the VM runs on here; {there}",
                        out.to
                    );
                    h.move_failed(name, &msg);
                    drop(h);
                    if let Some(dest) = &out.host {
                        if let Err(e) = HostClient::new(dest).remove(name) {
                            tracing::warn!("vm {name}: {dest} kept its VM: {}", said(&e).1);
                        }
                    }
                }
            }
        }
    }
}
