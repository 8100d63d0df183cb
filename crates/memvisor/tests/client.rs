//! `memvisor ctl` and `memvisor top` against a socket they cannot use: no such file, a socket
//! file nobody listens on, one this user may not open. Each prints one line saying what to
//! check, and exits with status 2. No VM is started.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::MEMVISOR;

/// `memvisor ARGS... SOCK REST...`, run as `nobody` when `as_nobody`.
fn memvisor(args: &[&str], sock: &Path, rest: &[&str], as_nobody: bool) -> Output {
    let mut c = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
            MEMVISOR,
        ]);
        c
    } else {
        Command::new(MEMVISOR)
    };
    c.args(args).arg(sock).args(rest).output().unwrap()
}

/// The one line `out` printed on stderr, after checking it failed with status 2.
fn one_line(out: &Output) -> String {
    let err = common::stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Each client command: the VM's `ctl`, the host's `ctl`, and `top`.
fn each_client(sock: &Path, as_nobody: bool) -> [(String, &'static str); 3] {
    [
        (
            one_line(&memvisor(&["ctl", "--api-sock"], sock, &["vm"], as_nobody)),
            "memvisor run --api-sock PATH",
        ),
        (
            one_line(&memvisor(
                &["ctl", "--host-sock"],
                sock,
                &["vms"],
                as_nobody,
            )),
            "memvisor host --config FILE",
        ),
        (
            one_line(&memvisor(
                &["top", "--once", "--host-sock"],
                sock,
                &[],
                as_nobody,
            )),
            "memvisor host --config FILE",
        ),
    ]
}

#[test]
fn no_such_socket_file() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("host.sock");
    for (err, start) in each_client(&sock, false) {
        assert!(
            err.contains("is listening at") && err.contains("no such file"),
            "{err}"
        );
        assert!(err.contains(start), "{err}");
        assert!(err.contains(&sock.display().to_string()), "{err}");
    }
}

#[test]
fn a_socket_file_nobody_listens_on() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("host.sock");
    drop(UnixListener::bind(&sock).unwrap());
    for (err, start) in each_client(&sock, false) {
        assert!(err.contains("nothing answers"), "{err}");
        assert!(err.contains("exited leaves it behind"), "{err}");
        assert!(err.contains(start), "{err}");
    }
}

#[test]
fn a_socket_this_user_may_not_open() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.path().join("host.sock");
    let _listener = UnixListener::bind(&sock).unwrap();
    // No one may write to it, its owner included (unless root).
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o000)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // Root opens the socket whatever its mode: the clients run as `nobody` then.
    for (err, _) in each_client(&sock, root) {
        assert!(
            err.contains("permission denied: run as a user who may open it"),
            "{err}"
        );
        assert!(err.contains(&sock.display().to_string()), "{err}");
    }
}
