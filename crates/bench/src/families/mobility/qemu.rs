//! `memvisor bench mobility` on QEMU microvm, the same guest and the same moments as memvisor's
//! runs (`run`), each QEMU started by `memvisor run --hypervisor qemu` with its QMP socket:
//!
//! - `qemu-start`: the guest runs to its end; the host time from its first round's line to
//!   `done`. QEMU has no line for its first instruction, so no start time.
//! - `qemu-restore`: at the first round's line QMP `stop`, then `migrate` to `exec:cat > FILE`
//!   (QEMU's way to save a VM to a file), polled with `query-migrate` until `completed` (its
//!   `total-time` is the save); the source ended. Then `memvisor run --hypervisor qemu
//!   --qemu-incoming "exec:cat FILE"`: QMP `query-status` is polled every millisecond until
//!   the load is over, then `cont`; the time to first instruction is from starting the process
//!   to `cont`'s answer (QEMU reads every page of the file before that), the work from starting
//!   it to `done`.
//! - `qemu-precopy`, `qemu-postcopy`: the destination waits with `--qemu-incoming
//!   tcp:127.0.0.1:PORT`; at the first round's line the source `migrate`s there (bandwidth
//!   unlimited; for post-copy `postcopy-ram` on both ends and `migrate-start-postcopy` at once),
//!   polled until `completed`: `downtime`, `total-time` and `ram.transferred` from
//!   `query-migrate`; the work from the first round's line to `done` on the destination.

use std::path::Path;
use std::time::{Duration, Instant};

use super::experiment::{Action, Cell, Config};
use super::run::{end, finish, free_port, ms, on_disk, start, Guest, MobRun};
use crate::harness::qmp::Qmp;
use crate::harness::vm::Vm;
use crate::harness::{Bench, MeasureStatus};

/// One QEMU run (see the module doc).
pub fn measure(bench: &Bench, config: &'static Config, cell: Cell, rep: u32) -> MobRun {
    let mut r = MobRun::new(config, cell, rep);
    let deadline = Instant::now() + bench.timeout;
    let result = match config.action {
        Action::Start => fresh(bench, cell, rep, deadline, &mut r),
        Action::Restore => restore(bench, cell, rep, deadline, &mut r),
        Action::Migrate { postcopy, .. } => migrate(bench, cell, rep, postcopy, deadline, &mut r),
    };
    if let Err(e) = result {
        r.status = MeasureStatus::Failed;
        r.error = e;
    }
    r
}

/// `memvisor run --hypervisor qemu` of `cell`'s guest with its QMP socket (`incoming`: QEMU's
/// `-incoming`).
fn start_qemu(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    name: &str,
    incoming: Option<&str>,
) -> Result<Vm, String> {
    start(bench, cell, rep, name, |cmd, sock| {
        cmd.args(["--hypervisor", "qemu", "--qmp-sock"]).arg(sock);
        if let Some(uri) = incoming {
            cmd.args(["--qemu-incoming", uri]);
        }
    })
}

/// Connects to QEMU's QMP socket, waiting up to 30 s for QEMU to open it.
fn qmp(sock: &Path) -> Result<Qmp, String> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match Qmp::connect(sock) {
            Ok(q) => return Ok(q),
            Err(e) if Instant::now() >= until => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// `query-migrate`'s answer, parsed.
fn query_migrate(q: &mut Qmp) -> Result<serde_json::Value, String> {
    let line = q.cmd(r#"{"execute":"query-migrate"}"#)?;
    let v: serde_json::Value = serde_json::from_str(line.trim()).map_err(|e| e.to_string())?;
    Ok(v["return"].clone())
}

/// Polls `query-migrate` until the migration completed (its last answer) or failed.
fn until_completed(q: &mut Qmp, deadline: Instant) -> Result<serde_json::Value, String> {
    loop {
        let m = query_migrate(q)?;
        match m["status"].as_str() {
            Some("completed") => return Ok(m),
            Some("failed" | "cancelled") => {
                let why = m["error-desc"].as_str().unwrap_or("no reason given");
                return Err(format!("QEMU's migration failed: {why}"));
            }
            _ => {}
        }
        if Instant::now() >= deadline || crate::harness::teardown::interrupted() {
            return Err(format!(
                "QEMU's migration did not complete in time (status {})",
                m["status"]
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn fresh(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    deadline: Instant,
    r: &mut MobRun,
) -> Result<(), String> {
    let vm = start_qemu(bench, cell, rep, "qemu-start", None)?;
    let mut g = Guest::default();
    let followed = g.follow(&vm, deadline, false);
    finish(vm, followed, "QEMU")?;
    let (Some(a), Some(b)) = (g.round1_at, g.done_at) else {
        return Err("the guest gave no first round".into());
    };
    r.set("work", ms(b.duration_since(a)));
    g.into_run(r);
    Ok(())
}

fn restore(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    deadline: Instant,
    r: &mut MobRun,
) -> Result<(), String> {
    let file = bench.work.join(format!("qemu-saved-{rep}"));
    let result = (|| {
        let src = start_qemu(bench, cell, rep, "qemu-restore-save", None)?;
        let mut g = Guest::default();
        let saved = g.follow(&src, deadline, true).and_then(|()| {
            let mut q = qmp(&src.sock)?;
            q.cmd(r#"{"execute":"stop"}"#)?;
            let uri = format!("exec:cat > {}", file.display());
            q.cmd(
                &serde_json::json!({"execute": "migrate", "arguments": {"uri": uri}}).to_string(),
            )?;
            until_completed(&mut q, deadline)
        });
        src.stop();
        let m = saved?;
        r.set("save", m["total-time"].as_f64().unwrap_or(0.0));
        r.set("saved MiB", on_disk(&file).unwrap_or(0.0) / 1048576.0);
        let uri = format!("exec:cat {}", file.display());
        let started = Instant::now();
        let vm = start_qemu(bench, cell, rep, "qemu-restore-load", Some(&uri))?;
        let mut g = Guest::default();
        let resumed = (|| {
            let mut q = qmp(&vm.sock)?;
            loop {
                let line = q.cmd(r#"{"execute":"query-status"}"#)?;
                if !line.contains("inmigrate") {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err("QEMU did not finish loading in time".to_owned());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            q.cmd(r#"{"execute":"cont"}"#)?;
            Ok(started.elapsed())
        })();
        let t = resumed.as_ref().map_err(String::clone).copied();
        let followed = t.clone().and_then(|_| g.follow(&vm, deadline, false));
        finish(vm, followed, "QEMU -incoming")?;
        let t = t?;
        r.set("first instruction", ms(t));
        let done = g.done_at.ok_or("no done")?;
        r.set("work", ms(done.duration_since(started)));
        g.into_run(r);
        Ok(())
    })();
    let _ = std::fs::remove_file(&file);
    result
}

fn migrate(
    bench: &Bench,
    cell: Cell,
    rep: u32,
    postcopy: bool,
    deadline: Instant,
    r: &mut MobRun,
) -> Result<(), String> {
    let port = free_port()?;
    let uri = format!("tcp:127.0.0.1:{port}");
    let dst = start_qemu(
        bench,
        cell,
        rep,
        if postcopy {
            "qemu-postcopy-dst"
        } else {
            "qemu-precopy-dst"
        },
        Some(&uri),
    )?;
    let mut src = match start_qemu(
        bench,
        cell,
        rep,
        if postcopy {
            "qemu-postcopy-src"
        } else {
            "qemu-precopy-src"
        },
        None,
    ) {
        Ok(s) => s,
        Err(e) => {
            dst.stop();
            return Err(e);
        }
    };
    let caps = serde_json::json!({"execute": "migrate-set-capabilities", "arguments":
        {"capabilities": [{"capability": "postcopy-ram", "state": true}]}})
    .to_string();
    let mut g = Guest::default();
    let moved = (|| {
        let mut qd = qmp(&dst.sock)?;
        let mut qs = qmp(&src.sock)?;
        if postcopy {
            qd.cmd(&caps)?;
            qs.cmd(&caps)?;
        }
        // QEMU 7.2 limits a migration to 128 MiB/s by default; memvisor's has no limit.
        qs.cmd(
            r#"{"execute":"migrate-set-parameters","arguments":{"max-bandwidth":107374182400}}"#,
        )?;
        g.follow(&src, deadline, true)?;
        qs.cmd(&serde_json::json!({"execute": "migrate", "arguments": {"uri": uri}}).to_string())?;
        if postcopy {
            qs.cmd(r#"{"execute":"migrate-start-postcopy"}"#)?;
        }
        until_completed(&mut qs, deadline)
    })();
    g.drain(&src);
    // A source whose guest ended its work (and so QEMU) before its pre-copy completed: the
    // migration never converged under QEMU's downtime limit while the guest wrote.
    let gone = matches!(src.child.try_wait(), Ok(Some(_))) || g.done_at.is_some();
    let moved = moved.map_err(|e| {
        if gone {
            format!("the guest ended its work on the source before QEMU's migration completed (it did not converge while the guest wrote; {e})")
        } else {
            e
        }
    });
    src.stop();
    let result = moved.and_then(|m| g.follow(&dst, deadline, false).map(|()| m));
    let dst_ended = match &result {
        Ok(_) => end(dst, "QEMU's destination"),
        Err(_) => {
            dst.stop();
            Ok(())
        }
    };
    let m = result?;
    dst_ended?;
    let total = m["total-time"].as_f64().unwrap_or(0.0);
    // QEMU 7.2's post-copy sometimes reports a downtime longer than the whole migration (e.g.
    // 34958786 ms, a time since an instant it never set): not a downtime, left out.
    match m["downtime"].as_f64() {
        Some(d) if d <= total => r.set("downtime", d),
        _ => r.set("downtime unknown", 1.0),
    }
    r.set("total", total);
    let sent = m["ram"]["transferred"].as_f64().unwrap_or(0.0);
    r.set("sent MiB", sent / 1048576.0);
    let (Some(a), Some(b)) = (g.round1_at, g.done_at) else {
        return Err("the guest gave no first round or no done".into());
    };
    r.set("work", ms(b.duration_since(a)));
    g.into_run(r);
    Ok(())
}
