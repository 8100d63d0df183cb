//! The migration stream's messages (docs/migration.md): the source's greeting with the token,
//! the destination's answer, the VM's shape and the destination's word that it is built,
//! pre-copy's pages and the runs of them written since, the VM's state, the switch, and in post-copy page requests,
//! pages and acknowledgements. Every message is a one-byte tag and two little-endian u32s;
//! a state and a run of pages carry their bytes after that.

use std::io::{Read, Write};

/// The first bytes the source sends.
pub const MAGIC: &[u8; 8] = b"MVMIGRAT";
/// The protocol version both ends must speak (4: the state's page runs in binary).
pub const VERSION: u32 = 4;
/// The longest token accepted, and the largest state (bytes).
pub const MAX_TOKEN: u32 = 4096;
pub const MAX_STATE: u32 = 256 << 20;
/// The largest shape (bytes).
pub const MAX_SHAPE: u32 = 1 << 20;
/// The most pages one message carries.
pub const MAX_RUN: u32 = 256;
const PAGE: u32 = 4096;

/// One message.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg {
    /// Source → destination, first: the protocol version and the token.
    Hello { version: u32, token: Vec<u8> },
    /// Source → destination, first on a new connection after a break in post-copy
    /// (`migrate-recover`): the version and the token; the pages not acknowledged follow.
    Rejoin { version: u32, token: Vec<u8> },
    /// Destination → source: the token is right; send the state (or, after `Rejoin`, the pages).
    Accepted,
    /// Destination → source: the token (or version) is wrong; the connection closes.
    Refused,
    /// Source → destination, right after `Accepted`: what the VM is made of apart from its
    /// state (`snapshot::VmShape`, JSON), so that the destination builds it while it runs here.
    Shape(Vec<u8>),
    /// Destination → source: the VM is built but for its state; pre-copy and the pause may
    /// begin.
    Built,
    /// Source → destination, before the state: pages `first..first + count` sent in a
    /// pre-copy round have been written since; the destination waits for them again.
    Stale { first: u32, count: u32 },
    /// Source → destination: the VM's state, `vm.state`'s bytes (`snapshot.rs`).
    State(Vec<u8>),
    /// Destination → source: the VM is built from the state, its vCPUs not started.
    Ready,
    /// Source → destination: the switch; the source will not run the VM again.
    Go,
    /// Destination → source: send pages `first..first + count` (a fault waits for them).
    Request { first: u32, count: u32 },
    /// Source → destination: pages from `first` on, 4096 bytes each.
    Pages { first: u32, data: Vec<u8> },
    /// Destination → source: `count` pages from `first` on are written on this side.
    Ack { first: u32, count: u32 },
    /// Source → destination: every page is acknowledged; the connection closes.
    Done,
}

fn tag(m: &Msg) -> u8 {
    match m {
        Msg::Hello { .. } => b'H',
        Msg::Rejoin { .. } => b'J',
        Msg::Accepted => b'K',
        Msg::Refused => b'X',
        Msg::Shape(_) => b'V',
        Msg::Built => b'B',
        Msg::Stale { .. } => b'W',
        Msg::State(_) => b'S',
        Msg::Ready => b'Y',
        Msg::Go => b'G',
        Msg::Request { .. } => b'Q',
        Msg::Pages { .. } => b'P',
        Msg::Ack { .. } => b'A',
        Msg::Done => b'D',
    }
}

/// Writes `m` whole; returns the bytes written.
pub fn send(w: &mut impl Write, m: &Msg) -> std::io::Result<u64> {
    let len = |b: &[u8]| u32::try_from(b.len()).map_err(std::io::Error::other);
    let (a, b, body): (u32, u32, &[u8]) = match m {
        Msg::Hello { version, token } | Msg::Rejoin { version, token } => {
            (*version, len(token)?, token)
        }
        Msg::State(s) | Msg::Shape(s) => (len(s)?, 0, s),
        Msg::Request { first, count } | Msg::Ack { first, count } | Msg::Stale { first, count } => {
            (*first, *count, &[])
        }
        Msg::Pages { first, data } => (*first, len(data)? / PAGE, data),
        _ => (0, 0, &[]),
    };
    let mut head = [0u8; 9];
    head[0] = tag(m);
    head[1..5].copy_from_slice(&a.to_le_bytes());
    head[5..9].copy_from_slice(&b.to_le_bytes());
    w.write_all(&head)?;
    w.write_all(body)?;
    w.flush()?;
    Ok(9 + body.len() as u64)
}

fn bad(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

fn body(r: &mut impl Read, len: u32, max: u32, what: &str) -> std::io::Result<Vec<u8>> {
    if len > max {
        return Err(bad(format!("{what} of {len} bytes is larger than {max}")));
    }
    let mut v = vec![0u8; len as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// Reads one message; malformed input is `InvalidData`, a closed connection `UnexpectedEof`.
pub fn recv(r: &mut impl Read) -> std::io::Result<Msg> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head)?;
    let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let (a, b) = (word(1), word(5));
    Ok(match head[0] {
        b'H' => Msg::Hello {
            version: a,
            token: body(r, b, MAX_TOKEN, "a token")?,
        },
        b'J' => Msg::Rejoin {
            version: a,
            token: body(r, b, MAX_TOKEN, "a token")?,
        },
        b'K' => Msg::Accepted,
        b'X' => Msg::Refused,
        b'S' => Msg::State(body(r, a, MAX_STATE, "a state")?),
        b'V' => Msg::Shape(body(r, a, MAX_SHAPE, "a shape")?),
        b'B' => Msg::Built,
        b'Y' => Msg::Ready,
        b'G' => Msg::Go,
        b'Q' => Msg::Request { first: a, count: b },
        b'A' => Msg::Ack { first: a, count: b },
        b'W' => Msg::Stale { first: a, count: b },
        b'P' => {
            if b == 0 || b > MAX_RUN {
                return Err(bad(format!("a run of {b} pages")));
            }
            Msg::Pages {
                first: a,
                data: body(r, b * PAGE, MAX_RUN * PAGE, "a run")?,
            }
        }
        b'D' => Msg::Done,
        t => return Err(bad(format!("unknown message tag {t:#04x}"))),
    })
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only (a token guessed
/// byte by byte learns nothing from how long a refusal takes).
pub fn same_token(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_written() {
        for m in [
            Msg::Hello {
                version: VERSION,
                token: b"secret".to_vec(),
            },
            Msg::Rejoin {
                version: VERSION,
                token: b"secret".to_vec(),
            },
            Msg::Accepted,
            Msg::Refused,
            Msg::Shape(b"{}".to_vec()),
            Msg::Built,
            Msg::State(vec![1, 2, 3]),
            Msg::Ready,
            Msg::Go,
            Msg::Request { first: 7, count: 3 },
            Msg::Pages {
                first: 9,
                data: vec![0xab; 2 * PAGE as usize],
            },
            Msg::Ack { first: 1, count: 2 },
            Msg::Stale { first: 3, count: 4 },
            Msg::Done,
        ] {
            let mut buf = Vec::new();
            send(&mut buf, &m).unwrap();
            assert_eq!(recv(&mut buf.as_slice()).unwrap(), m);
        }
    }

    #[test]
    fn hostile_input_is_refused_not_allocated() {
        let mut head = vec![b'S'];
        head.extend_from_slice(&u32::MAX.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        let e = recv(&mut head.as_slice()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let e = recv(&mut [b'Z'; 9].as_slice()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let e = recv(&mut [b'P', 0, 0, 0, 0].as_slice()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abc", b"abd"));
        assert!(!same_token(b"abc", b"ab"));
        assert!(!same_token(b"", b"a"));
    }
}
