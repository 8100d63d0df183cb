//! Unix socket paths longer than `sun_path` holds (108 bytes with its NUL, on Linux): bound and
//! connected through their directory, as `/proc/self/fd/N/NAME`, with the directory held open
//! meanwhile. A VM's files live where its operator puts them (a bench's `--out`, a host's
//! `state_dir`), so their sockets' paths are as long as those directories are deep.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The bytes of `sun_path`, its closing NUL included.
const SUN_PATH: usize = 108;

/// A socket path short enough to bind or connect, valid while this lives.
pub struct SocketPath {
    /// The socket's directory, when the path goes through it.
    _dir: Option<File>,
    pub path: PathBuf,
}

/// `path`, or when it is too long for `sun_path`, the same socket reached through its
/// directory (opened here and held by the answer).
pub fn reachable(path: &Path) -> std::io::Result<SocketPath> {
    if path.as_os_str().len() < SUN_PATH {
        return Ok(SocketPath {
            _dir: None,
            path: path.to_owned(),
        });
    }
    let too_long = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{}: a socket's name must be shorter than {SUN_PATH} bytes",
                path.display()
            ),
        )
    };
    let name = path.file_name().ok_or_else(too_long)?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = File::open(parent.unwrap_or(Path::new(".")))?;
    let short = Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    if short.as_os_str().len() >= SUN_PATH {
        return Err(too_long());
    }
    Ok(SocketPath {
        _dir: Some(dir),
        path: short,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};

    /// A socket 200 bytes deep is bound and connected through its directory; a short one is
    /// used as it is.
    #[test]
    fn long_socket_paths_are_reached_through_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("d".repeat(120));
        std::fs::create_dir(&deep).unwrap();
        let sock = deep.join("api.sock");
        assert!(
            UnixListener::bind(&sock).is_err(),
            "too long to bind as it is"
        );
        let at = reachable(&sock).unwrap();
        assert!(at.path.starts_with("/proc/self/fd/"));
        let listener = UnixListener::bind(&at.path).unwrap();
        drop(at);
        assert!(sock.exists(), "the socket file is where it was asked for");
        let at = reachable(&sock).unwrap();
        let mut c = UnixStream::connect(&at.path).unwrap();
        c.write_all(b"hi").unwrap();
        let (mut s, _) = listener.accept().unwrap();
        let mut got = [0u8; 2];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        let short = dir.path().join("s.sock");
        assert_eq!(reachable(&short).unwrap().path, short);
    }
}
