//! A migration's destination (`memvisor run --incoming ADDR --migration-token T`): listens,
//! takes the one connection whose greeting carries the token and the VM's shape, builds the
//! VM from the shape while the source runs it (everything that does not need its state: KVM,
//! the memory slot, the files), tells the source, receives pre-copy's pages and the VM's
//! state, and, once the state is in the VM, tells the source, waits for the go-ahead and lets
//! the vCPUs run. Guest memory is then a page store ([`RemotePages`]): a fault on a page that has not
//! arrived asks the source for it and waits; pages the source pushes are written to a local
//! file by the `migrate-rx` thread, which acknowledges them.
//!
//! A connection with a wrong token (or that is not a migration at all) is refused, nothing is
//! read from it beyond the greeting, and the destination keeps waiting for the right one.
//! If the connection breaks after the switch with pages still missing, the VM is paused and
//! a fault on a missing page fails (the pager pauses the VM again): no page is invented.

use std::fs::File;
use std::io::BufWriter;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use memvisor_pager::store::{PageStore, StoreCounters};
use memvisor_pager::SavedKind;

use super::wire::{self, Msg};
use crate::snapshot::{self, Snapshot, VmShape};

/// How long a connecting peer may take to greet, and the source to send the state.
const GREETING: Duration = Duration::from_secs(10);
const STATE: Duration = Duration::from_secs(120);
const PAGE: usize = 4096;
/// The most pages pre-copy may send before the state says how many the VM has (256 GiB).
const MAX_PAGES: u64 = 1 << 26;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Binds `addr` (`host:port`; port 0 picks one): a bad address or a port in use is the
/// caller's bad input.
pub fn listen(addr: &str) -> Result<TcpListener, String> {
    let at = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("--incoming '{addr}' is not a TCP address: give host:port"))?;
    TcpListener::bind(at).map_err(|e| format!("--incoming {addr}: cannot listen there: {e}"))
}

/// A migration taken in, before the switch: the connection to its source.
pub struct Incoming {
    conn: Mutex<Conn>,
    /// What the source says the VM is made of.
    shape: VmShape,
    /// The file for the pages that arrive (unlinked: a jailed VMM sees no path to make
    /// another one for a next source).
    local: File,
    /// Guest memory, once the state has come.
    remote: OnceLock<Arc<RemotePages>>,
    /// Where and with what token a source may come (again): another one while the state has
    /// not come, the same one after a break in post-copy (`migrate-recover`).
    rejoin: Option<(TcpListener, String)>,
}

/// The connection to the source.
struct Conn {
    peer: String,
    stream: TcpStream,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("peer", &lock(&self.conn).peer)
            .finish()
    }
}

/// Waits on `listener` for the source with `token`, and takes the VM's shape; the local file
/// for the pages that will arrive is made (and unlinked at once) in `dir`. Connections that
/// fail before the shape is whole are refused or dropped, and waiting goes on.
pub fn accept(listener: &TcpListener, token: &str, dir: &Path) -> Result<Incoming, String> {
    let local = local_file(dir).map_err(|e| {
        format!(
            "cannot make a file for guest pages in {}: {e}",
            dir.display()
        )
    })?;
    let (conn, shape) = next_source(listener, token, None)?;
    Ok(Incoming {
        conn: Mutex::new(conn),
        shape,
        local,
        remote: OnceLock::new(),
        rejoin: listener.try_clone().ok().map(|l| (l, token.to_owned())),
    })
}

/// The next source on `listener` that greets with `token` (and, when `shape` is given, has a
/// VM of that shape), and its VM's shape.
fn next_source(
    listener: &TcpListener,
    token: &str,
    shape: Option<&VmShape>,
) -> Result<(Conn, VmShape), String> {
    loop {
        let (stream, peer) = listener
            .accept()
            .map_err(|e| format!("waiting for a migration failed: {e}"))?;
        match take(stream, &peer.to_string(), token, shape) {
            Ok(c) => return Ok(c),
            Err(why) => eprintln!("memvisor: migration from {peer} refused: {why}; still waiting"),
        }
    }
}

fn take(
    stream: TcpStream,
    peer: &str,
    token: &str,
    want: Option<&VmShape>,
) -> Result<(Conn, VmShape), String> {
    let io = |e: std::io::Error| e.to_string();
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(GREETING)).map_err(io)?;
    let mut r = &stream;
    let mut w = &stream;
    let refuse = |mut w: &TcpStream, why: &str| {
        let _ = wire::send(&mut w, &Msg::Refused);
        Err(why.to_owned())
    };
    match wire::recv(&mut r) {
        Ok(Msg::Hello { version, token: t }) => {
            if !wire::same_token(&t, token.as_bytes()) {
                return refuse(w, "wrong token");
            }
            if version != wire::VERSION {
                return refuse(
                    w,
                    &format!("protocol version {version}, not {}", wire::VERSION),
                );
            }
        }
        Ok(_) => return refuse(w, "not a migration"),
        Err(e) => return Err(format!("not a migration ({e})")),
    }
    wire::send(&mut w, &Msg::Accepted).map_err(io)?;
    let shape: VmShape = match wire::recv(&mut r).map_err(io)? {
        Msg::Shape(b) => serde_json::from_slice(&b).map_err(|e| format!("its shape: {e}"))?,
        m => return Err(format!("expected the VM's shape, got {m:?}")),
    };
    if let Some(want) = want.filter(|&w| *w != shape) {
        return refuse(
            w,
            &format!("its VM is {shape:?}; the VM built here from an earlier source is {want:?}"),
        );
    }
    let conn = Conn {
        peer: peer.to_owned(),
        stream,
    };
    Ok((conn, shape))
}

/// A new file in `dir`, unlinked at once: it lives as long as it is open.
fn local_file(dir: &Path) -> std::io::Result<File> {
    let path = dir.join(format!("memvisor-{}.incoming", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

impl Incoming {
    /// What the source says the VM is made of: the VM to build before its state comes.
    pub fn shape(&self) -> &VmShape {
        &self.shape
    }

    /// With the VM built from the shape: tells the source, takes pre-copy's pages into the
    /// local file until the state comes, and gives the state with guest memory as a page store
    /// of what has arrived and what is still on the source. A source whose connection fails
    /// before its state is whole is dropped with what it sent, and the next source with a VM of
    /// the same shape is waited for.
    pub fn receive_state(&self) -> Result<Snapshot, String> {
        let mut conn = lock(&self.conn);
        loop {
            match self.state_from(&mut conn) {
                Ok(snap) => return Ok(snap),
                Err(why) => {
                    let Some((listener, token)) = &self.rejoin else {
                        return Err(why);
                    };
                    eprintln!(
                        "memvisor: migration from {} dropped before its state: {why}; still waiting",
                        conn.peer
                    );
                    *conn = next_source(listener, token, Some(&self.shape))?.0;
                }
            }
        }
    }

    fn state_from(&self, conn: &mut Conn) -> Result<Snapshot, String> {
        let peer = conn.peer.clone();
        let io = |e: std::io::Error| format!("the migration from {peer}: {e}");
        if self.remote.get().is_some() {
            return Err(format!(
                "the migration from {peer}: its state was taken already"
            ));
        }
        // What an earlier source sent is not this one's.
        let local = &self.local;
        local.set_len(0).map_err(io)?;
        let (mut r, mut w) = (&conn.stream, &conn.stream);
        wire::send(&mut w, &Msg::Built).map_err(io)?;
        conn.stream.set_read_timeout(Some(STATE)).map_err(io)?;
        // Pre-copy's pages, until the state: written to the local file; `pre` says which are
        // here and not stale.
        let mut pre: Vec<bool> = Vec::new();
        let bytes = loop {
            match wire::recv(&mut r).map_err(io)? {
                Msg::State(b) => break b,
                Msg::Pages { first, data } => {
                    let count = u32::try_from(data.len() / PAGE).unwrap_or(u32::MAX);
                    let end = first
                        .checked_add(count)
                        .filter(|&e| u64::from(e) <= MAX_PAGES)
                        .ok_or(format!("pre-copy pages {first}..+{count} are out of range"))?;
                    local
                        .write_all_at(&data, u64::from(first) * PAGE as u64)
                        .map_err(|e| format!("writing pre-copy pages failed ({e})"))?;
                    if pre.len() < end as usize {
                        pre.resize(end as usize, false);
                    }
                    pre[first as usize..end as usize].fill(true);
                }
                Msg::Stale { first, count } => {
                    let end = (first.saturating_add(count) as usize).min(pre.len());
                    if let Some(stale) = pre.get_mut(first as usize..end) {
                        stale.fill(false);
                    }
                }
                m => return Err(format!("expected the state, got {m:?}")),
            }
        };
        let state = snapshot::decode_state(&bytes).map_err(|e| format!("its state: {e}"))?;
        if state.shape() != self.shape {
            return Err(format!(
                "its state is of a VM {:?}, not the {:?} its shape said",
                state.shape(),
                self.shape
            ));
        }
        if pre.len() > state.pages.pages as usize {
            return Err(format!(
                "pre-copy sent page {}, the VM has {} pages",
                pre.len() - 1,
                state.pages.pages
            ));
        }
        local.set_len(state.mem_size).map_err(io)?;
        // Run by run, not page by page: this is in the downtime.
        let mut got = vec![true; state.pages.pages as usize];
        let mut missing = 0;
        let mut held = 0u64;
        for run in state
            .pages
            .runs
            .iter()
            .filter(|r| r.kind == SavedKind::Copied)
        {
            let (first, end) = (run.first as usize, (run.first + run.count) as usize);
            got[first..end].fill(false);
            let here = pre.get(first..end.min(pre.len())).unwrap_or_default();
            got[first..first + here.len()].copy_from_slice(here);
            let n = u32::try_from(here.iter().filter(|&&h| h).count()).unwrap_or(run.count);
            held += u64::from(n);
            missing += run.count - n;
        }
        if !pre.is_empty() {
            tracing::info!("migration: {held} pages are here from pre-copy, {missing} to come");
        }
        let remote = Arc::new(RemotePages {
            peer: peer.clone(),
            file: local.try_clone().map_err(io)?,
            have: Mutex::new(Have {
                got,
                missing,
                live: false,
                broken: None,
                connection: 0,
            }),
            arrived: Condvar::new(),
            tx: Mutex::new(BufWriter::new(conn.stream.try_clone().map_err(io)?)),
            requested: std::sync::atomic::AtomicU64::new(0),
            counters: StoreCounters::default(),
        });
        let _ = self.remote.set(remote.clone());
        Ok(Snapshot {
            dir: format!("migration from {peer}").into(),
            state,
            memory: remote,
        })
    }

    /// With the VM built from its state and its vCPUs held outside the guest: tells the source,
    /// waits for the go-ahead, calls `go` (which lets the vCPUs run), and starts `migrate-rx`,
    /// which calls `pause` if the connection breaks with pages missing, waits for the source
    /// to come back (`migrate-recover`), and calls `resume` once it has. An error leaves the
    /// vCPUs held (the source then runs the VM on).
    pub fn switch(
        &self,
        go: impl FnOnce(),
        pause: impl Fn(String) + Send + 'static,
        resume: impl Fn() + Send + 'static,
    ) -> Result<(), String> {
        let conn = lock(&self.conn);
        let peer = &conn.peer;
        let io = |e: std::io::Error| format!("the migration from {peer}: {e}");
        let remote = self
            .remote
            .get()
            .ok_or_else(|| format!("the migration from {peer}: its state never came"))?
            .clone();
        wire::send(&mut *lock(&remote.tx), &Msg::Ready).map_err(io)?;
        match wire::recv(&mut &conn.stream).map_err(io)? {
            Msg::Go => go(),
            m => return Err(io(std::io::Error::other(format!("unexpected {m:?}")))),
        }
        conn.stream.set_read_timeout(None).map_err(io)?;
        let mut r = conn.stream.try_clone().map_err(io)?;
        let receiving = remote.clone();
        let rejoin = match &self.rejoin {
            Some((l, t)) => Some((l.try_clone().map_err(io)?, t.clone())),
            None => None,
        };
        // Resuming retries what the pager failed, which may wait on a fault that waits on
        // pages `migrate-rx` receives: it goes on a thread of its own, started here (not by
        // `migrate-rx`, whose filter it would inherit) and idle until the source is back.
        let (back, comes_back) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("migrate-resume".into())
            .spawn(move || {
                memvisor_seccomp::confine(memvisor_seccomp::Thread::MigrateResume);
                for () in comes_back {
                    resume();
                }
            })
            .map_err(|e| format!("cannot start the migration's resume thread: {e}"))?;
        std::thread::Builder::new()
            .name("migrate-rx".into())
            .spawn(move || {
                memvisor_seccomp::confine(memvisor_seccomp::Thread::MigrateRx);
                loop {
                    if !receiving.receive(&mut r, &pause) {
                        return;
                    }
                    let Some((listener, token)) = &rejoin else {
                        return;
                    };
                    match receiving.rejoin(listener, token) {
                        Ok(again) => {
                            r = again;
                            let _ = back.send(());
                        }
                        Err(e) => {
                            tracing::error!("the migration cannot be recovered: {e}");
                            return;
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the migration receiver: {e}"))?;
        lock(&remote.have).live = true;
        remote.arrived.notify_all();
        Ok(())
    }
}

struct Have {
    /// Pages here (or with no content to receive).
    got: Vec<bool>,
    missing: u32,
    /// The source has let the VM go: faults may ask for pages (before, the prefetch thread's
    /// wait for the switch).
    live: bool,
    /// Why the connection broke, once it has.
    broken: Option<String>,
    /// Counts the connections after the first (a request sent on a broken one is sent again).
    connection: u64,
}

/// Guest memory still partly on a migration's source, as a page store: page `p` is read from
/// the local file once it has arrived; before that a read asks the source for it and waits.
/// Read-only to the pager, like a snapshot's memory file (`store/saved.rs`): a page is clean
/// until the guest writes it.
pub struct RemotePages {
    peer: String,
    file: File,
    have: Mutex<Have>,
    arrived: Condvar,
    /// The connection's sending side: requests (faults) and acknowledgements (`migrate-rx`).
    tx: Mutex<BufWriter<TcpStream>>,
    requested: std::sync::atomic::AtomicU64,
    counters: StoreCounters,
}

impl RemotePages {
    /// `migrate-rx`: writes pushed and requested pages to the local file and acknowledges
    /// them, until the source is done or the connection breaks; true if it broke with pages
    /// missing (the VM is then paused).
    fn receive(&self, r: &mut TcpStream, pause: &dyn Fn(String)) -> bool {
        let peer = &self.peer;
        let why = loop {
            let (first, data) = match wire::recv(r) {
                Ok(Msg::Pages { first, data }) => (first, data),
                Ok(Msg::Done) => {
                    let asked = self.requested.load(std::sync::atomic::Ordering::Relaxed);
                    tracing::info!(
                        "migration: every page is here from {peer} ({asked} asked for by faults)"
                    );
                    return false;
                }
                Ok(m) => break format!("the source sent {m:?}"),
                Err(e) => break format!("the connection broke ({e})"),
            };
            let count = u32::try_from(data.len() / PAGE).unwrap_or(u32::MAX);
            let mut have = lock(&self.have);
            if first
                .checked_add(count)
                .is_none_or(|e| e as usize > have.got.len())
            {
                break format!("the source sent pages {first}..+{count}, outside guest RAM");
            }
            // Only pages not here yet: a page already here may have been read, and is the same.
            let mut wrote = Ok(());
            for (p, page) in (first..).zip(data.chunks_exact(PAGE)) {
                if !have.got[p as usize] {
                    wrote = wrote.and(self.file.write_all_at(page, u64::from(p) * PAGE as u64));
                    have.got[p as usize] = true;
                    have.missing -= 1;
                }
            }
            if let Err(e) = wrote {
                break format!("writing received pages failed ({e})");
            }
            drop(have);
            self.arrived.notify_all();
            let ack = Msg::Ack { first, count };
            if let Err(e) = wire::send(&mut *lock(&self.tx), &ack) {
                break format!("the connection broke ({e})");
            }
        };
        let mut have = lock(&self.have);
        let missing = have.missing;
        have.broken = Some(why.clone());
        drop(have);
        self.arrived.notify_all();
        if missing == 0 {
            return false;
        }
        let line = format!("the migration from {peer} broke with {missing} pages not yet here: {why}; the source keeps them (`memvisor ctl migrate-recover` there resumes it)");
        tracing::error!("{line}");
        pause(line);
        true
    }

    /// Waits on `listener` for the source to come back with `token` (`Rejoin`); the new
    /// connection then carries requests, pages and acknowledgements, and readers waiting on a
    /// page ask again. Other connections are refused.
    fn rejoin(&self, listener: &TcpListener, token: &str) -> std::io::Result<TcpStream> {
        loop {
            let (stream, peer) = listener.accept()?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(GREETING))?;
            let ok = match wire::recv(&mut &stream) {
                Ok(Msg::Rejoin { version, token: t }) => {
                    wire::same_token(&t, token.as_bytes()) && version == wire::VERSION
                }
                _ => false,
            };
            if !ok {
                let _ = wire::send(&mut &stream, &Msg::Refused);
                eprintln!("memvisor: refused {peer}: not the migration's source coming back");
                continue;
            }
            wire::send(&mut &stream, &Msg::Accepted)?;
            stream.set_read_timeout(None)?;
            *lock(&self.tx) = BufWriter::new(stream.try_clone()?);
            let mut have = lock(&self.have);
            have.broken = None;
            have.connection += 1;
            drop(have);
            self.arrived.notify_all();
            tracing::warn!("the migration's source is back from {peer}");
            return Ok(stream);
        }
    }
}

impl PageStore for RemotePages {
    fn describe(&self) -> String {
        format!("the migration source {}", self.peer)
    }

    fn read(&self, first: u32, buf: &mut [u8]) -> std::io::Result<()> {
        let n = u32::try_from(buf.len() / PAGE).unwrap_or(u32::MAX);
        let mut asked = None;
        let mut have = lock(&self.have);
        loop {
            let lacking = (first..first.saturating_add(n))
                .filter(|&p| !have.got.get(p as usize).copied().unwrap_or(true))
                .collect::<Vec<_>>();
            let (Some(&lo), Some(&hi)) = (lacking.first(), lacking.last()) else {
                break;
            };
            if let Some(why) = &have.broken {
                return Err(std::io::Error::other(format!(
                    "page {lo} never arrived: {why}"
                )));
            }
            if asked != Some(have.connection) && have.live {
                drop(have);
                let ask = Msg::Request {
                    first: lo,
                    count: hi - lo + 1,
                };
                let sent = wire::send(&mut *lock(&self.tx), &ask);
                self.requested
                    .fetch_add(u64::from(hi - lo + 1), std::sync::atomic::Ordering::Relaxed);
                have = lock(&self.have);
                asked = Some(have.connection);
                if let Err(e) = sent {
                    have.broken
                        .get_or_insert(format!("the connection broke ({e})"));
                }
                continue;
            }
            have = self.arrived.wait(have).unwrap_or_else(|e| e.into_inner());
        }
        drop(have);
        self.file.read_exact_at(buf, u64::from(first) * PAGE as u64)
    }

    fn write(&self, first: u32, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other(format!(
            "pages coming from a migration are read-only (a write of page {first})"
        )))
    }

    fn counters(&self) -> &StoreCounters {
        &self.counters
    }
}
