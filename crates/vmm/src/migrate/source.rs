//! A migration's source (`PUT /vm/migrate`): connects to the destination, proves the token,
//! sends the VM's shape and waits while the destination builds it, runs the pre-copy rounds
//! asked for with the VM running (`precopy.rs`), pauses the VM and
//! sends its state (the snapshot's, `snapshot.rs`), lets the destination go, then serves the
//! pages its faults ask for and pushes the rest, the working set first, until every page is
//! acknowledged, freeing each page here once it is; the VM then ends here.
//!
//! Threads: `migrate` does all of it and writes to the connection; `migrate-rx` reads the
//! destination's requests and acknowledgements and hands them over a channel. Both start with
//! the VM and wait for work ([`Migrator`]). Neither touches guest memory but through the
//! pager (`read_in_place`, `free_sent`), under its page lock.
//!
//! Before the go-ahead is sent, any failure resumes the VM here as it was; once it is sent,
//! the VM is never resumed here (the destination may run it): a failure then leaves it paused
//! with every page not acknowledged and keeps what was sent and acknowledged ([`Broken`],
//! shown in `GET /vm`), and `migrate-recover` (`"recover": true`) connects again and sends
//! every page not acknowledged.

use std::io::BufWriter;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memvisor_api::{MigrateRequest, MigrateResult, PrecopyEnd, MAX_PRECOPY_ROUNDS};
use memvisor_pager::{Pager, SavedKind, SavedPages};

use super::precopy::{DirtyLog, PreCopy};
use super::wire::{self, Msg};
use crate::lifecycle::Lifecycle;
use crate::snapshot::{self, Snapshotter};

/// How long the destination may take to answer the greeting, to build the VM from its shape,
/// and to take its state.
const GREETING: Duration = Duration::from_secs(30);
const BUILD: Duration = Duration::from_secs(120);
/// Pages pushed per message.
const PUSH_RUN: u32 = 64;

/// What the destination said, as `migrate-rx` reads it.
enum FromDest {
    Request { first: u32, count: u32 },
    Ack { first: u32, count: u32 },
    Broken(String),
}

/// A migration whose connection broke after the switch: what was sent and acknowledged, kept
/// for `migrate-recover` (the VM stays paused here meanwhile).
type Broken = Mutex<Option<Box<PostCopy>>>;

/// A migration asked for, and where its outcome goes.
type Job = (MigrateRequest, mpsc::Sender<Result<MigrateResult, String>>);
/// A connection for `migrate-rx` to read, and where what it reads goes.
type Reader = mpsc::Sender<(TcpStream, mpsc::Sender<FromDest>)>;

/// The door to the `migrate` thread. It and `migrate-rx` are started with the VM, from the
/// thread that starts it and before that one is filtered, because filters only stack: a
/// thread the API thread started could never open a socket, and one `migrate` started could
/// not narrow its filter to its own. Each installs its own filter and waits, `migrate` for
/// migrations (one at a time) and `migrate-rx` for their connections, until the VM ends.
pub(crate) struct Migrator {
    jobs: Mutex<mpsc::Sender<Job>>,
    waiting: Mutex<Option<mpsc::Receiver<Job>>>,
    broken: Arc<Broken>,
    /// The go-ahead was sent: the VM is the destination's, and nothing here may write its
    /// memory (not even a device asked for by the API).
    switched: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Migrator {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel();
        Migrator {
            jobs: Mutex::new(tx),
            waiting: Mutex::new(Some(rx)),
            broken: Arc::default(),
            switched: Arc::default(),
        }
    }
}

impl Migrator {
    /// Starts the `migrate` and `migrate-rx` threads (once).
    pub(crate) fn start(
        &self,
        snap: &Arc<Snapshotter>,
        life: &Arc<Lifecycle>,
    ) -> std::io::Result<()> {
        let Some(jobs) = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return Ok(());
        };
        let (reader, connections) = mpsc::channel::<(TcpStream, mpsc::Sender<FromDest>)>();
        std::thread::Builder::new()
            .name("migrate-rx".into())
            .spawn(move || {
                memvisor_seccomp::confine(memvisor_seccomp::Thread::MigrateRx);
                for (mut r, tx) in connections {
                    receive(&mut r, &tx);
                }
            })?;
        let (snap, life, broken) = (snap.clone(), life.clone(), self.broken.clone());
        let switched = self.switched.clone();
        std::thread::Builder::new()
            .name("migrate".into())
            .spawn(move || {
                memvisor_seccomp::confine(memvisor_seccomp::Thread::Migrate);
                for (req, reply) in jobs {
                    let post = match req.recover {
                        true => recover(&req, &broken, &reader),
                        false => run(&snap, &life, &req, &reader, &switched),
                    };
                    let done = post.and_then(|post| finish(&req, post, &broken));
                    let _ = reply.send(done);
                }
            })
            .map(drop)
    }

    /// Whether this VM has switched to a destination: from then on no device here may write
    /// guest memory, since a page not yet sent would carry the write there.
    pub(crate) fn switched(&self) -> bool {
        self.switched.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The migration that broke off after the switch, kept for `migrate-recover`: what it
    /// sent, what was acknowledged and freed (`GET /vm`).
    pub(crate) fn broken(&self) -> Option<MigrateResult> {
        let broken = self.broken.lock().unwrap_or_else(|e| e.into_inner());
        broken.as_ref().map(|post| post.result(&post.to))
    }

    /// Moves the VM to `req.to` (module doc), or with `req.recover` resumes the migration that
    /// broke, on the `migrate` thread; returns once every page is acknowledged (the VM then
    /// ends here) or why not.
    pub(crate) fn migrate(&self, req: &MigrateRequest) -> Result<MigrateResult, String> {
        let (tx, rx) = mpsc::channel();
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((req.clone(), tx));
        sent.map_err(|_| "the migration thread has ended".to_owned())?;
        rx.recv()
            .map_err(|_| "the migration thread panicked".to_owned())?
    }
}

/// Connects to `to` and greets with `hello`; the reading and writing halves once accepted.
fn connect(to: &str, hello: &Msg) -> Result<(TcpStream, BufWriter<TcpStream>, u64), String> {
    // No name is resolved here: that would open files and a Unix socket, which this thread's
    // filter forbids (`memvisor ctl migrate` resolves them).
    let addr: SocketAddr = to.parse().map_err(|_| {
        format!("'{to}' is not a TCP address: give ip:port (the API resolves no host names)")
    })?;
    let stream = TcpStream::connect_timeout(&addr, GREETING)
        .map_err(|e| format!("cannot reach the destination {to}: {e}"))?;
    let io = |e: std::io::Error| format!("the connection to {to}: {e}");
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(GREETING)).map_err(io)?;
    let mut r = stream.try_clone().map_err(io)?;
    let mut w = BufWriter::with_capacity(1 << 20, stream);
    let sent = wire::send(&mut w, hello).map_err(io)?;
    match wire::recv(&mut r) {
        Ok(Msg::Accepted) => Ok((r, w, sent)),
        Ok(Msg::Refused) => Err(format!("the destination {to} refused the token")),
        Ok(m) => Err(io(std::io::Error::other(format!("unexpected {m:?}")))),
        Err(e) => Err(io(e)),
    }
}

/// Hands `r` to `migrate-rx` and serves `post` on `w` until every page is acknowledged.
fn post_copy(
    post: &mut PostCopy,
    r: TcpStream,
    w: &mut BufWriter<TcpStream>,
    reader: &Reader,
) -> Result<(), String> {
    r.set_read_timeout(None).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    reader
        .send((r, tx))
        .map_err(|_| "the migration reader has ended".to_owned())?;
    let served = post.serve(w, &rx);
    if served.is_err() {
        // `migrate-rx` stops reading this connection, and is free for the next.
        let _ = w.get_ref().shutdown(std::net::Shutdown::Both);
    }
    served
}

/// Either every page acknowledged (the VM ends here, once the API has answered: `api.rs`) or
/// the migration kept for recovery.
fn finish(
    req: &MigrateRequest,
    post: Result<Box<PostCopy>, (Box<PostCopy>, String)>,
    broken: &Broken,
) -> Result<MigrateResult, String> {
    let to = &req.to;
    let post = match post {
        Ok(p) => p,
        Err((post, e)) => {
            let line = format!(
                "{e}, after the switch with {} of {} pages acknowledged: the VM stays paused here and keeps every page not acknowledged, the destination pauses; `memvisor ctl migrate-recover --to ADDR --token T` resumes it",
                post.acked_count, post.copied
            );
            *broken.lock().unwrap_or_else(|e| e.into_inner()) = Some(post);
            return Err(line);
        }
    };
    let result = post.result(to);
    tracing::info!(
        "migrated to {to}: {} pages sent ({} asked for by faults, {} before the switch), vCPUs stopped {} ms, {} ms in all",
        result.copied_pages,
        post.requested,
        result.precopied_pages,
        post.downtime_ms,
        result.total_ms
    );
    Ok(result)
}

type Outcome = Result<Result<Box<PostCopy>, (Box<PostCopy>, String)>, String>;

/// `migrate-recover`: the broken migration, over a new connection; the destination is sent
/// every page it has not acknowledged.
fn recover(req: &MigrateRequest, broken: &Broken, reader: &Reader) -> Outcome {
    let mut post = broken
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or("no migration of this VM broke off: there is nothing to recover")?;
    let hello = Msg::Rejoin {
        version: wire::VERSION,
        token: req.token.as_bytes().to_vec(),
    };
    let (r, mut w, sent) = match connect(&req.to, &hello) {
        Ok(c) => c,
        Err(e) => {
            *broken.lock().unwrap_or_else(|e| e.into_inner()) = Some(post);
            return Err(format!("{e}; the migration is kept for another try"));
        }
    };
    post.bytes += sent;
    post.sent.clone_from(&post.acked);
    post.cursor = (0, 0);
    tracing::info!(
        "recovering the migration to {}: {} of {} pages to send again",
        req.to,
        post.copied - post.acked_count,
        post.copied
    );
    Ok(match post_copy(&mut post, r, &mut w, reader) {
        Ok(()) => Ok(post),
        Err(e) => Err((post, e)),
    })
}

fn run(
    snap: &Snapshotter,
    life: &Lifecycle,
    req: &MigrateRequest,
    reader: &Reader,
    moved: &std::sync::atomic::AtomicBool,
) -> Outcome {
    let Some(pager) = &life.pager else {
        return Err("a VM without memvisor's pager (--pager off) cannot migrate".into());
    };
    if req.precopy_rounds > MAX_PRECOPY_ROUNDS {
        return Err(format!(
            "precopy_rounds {} is more than {MAX_PRECOPY_ROUNDS}: nothing moved, the VM runs on here",
            req.precopy_rounds
        ));
    }
    snapshot::check_pausable(life)?;
    let to = &req.to;
    let hello = Msg::Hello {
        version: wire::VERSION,
        token: req.token.as_bytes().to_vec(),
    };
    let (mut r, mut w, mut sent) =
        connect(to, &hello).map_err(|e| format!("{e}: nothing moved, the VM runs on here"))?;
    let io = |e: std::io::Error| format!("the connection to {to}: {e}; the VM runs on here");

    // The destination builds the VM from its shape while it runs here: what building takes
    // (the memory slot alone is milliseconds per GiB) stays out of the downtime.
    let shape = serde_json::to_vec(&snap.shape()).map_err(|e| e.to_string())?;
    sent += wire::send(&mut w, &Msg::Shape(shape)).map_err(io)?;
    r.set_read_timeout(Some(BUILD)).map_err(io)?;
    match wire::recv(&mut r).map_err(io)? {
        Msg::Built => {}
        m => return Err(io(std::io::Error::other(format!("unexpected {m:?}")))),
    }
    r.set_read_timeout(None).map_err(io)?;

    // Pre-copy, the VM running here; a failure leaves it running, the destination waiting.
    let log = match req.precopy_rounds {
        0 => None,
        _ => Some(
            DirtyLog::start(&snap.vm, &snap.mem, pager)
                .map_err(|e| format!("{e}: nothing moved, the VM runs on here"))?,
        ),
    };
    let mut pre = match &log {
        Some(log) => Some(
            PreCopy::run(req.precopy_rounds, log, pager, &mut w)
                .map_err(|e| format!("pre-copy to {to}: {e}; the VM runs on here"))?,
        ),
        None => None,
    };

    // Mirrors of disk blocks the guest read lately are checked now, not in the pause.
    pager.protect_mirrors();
    // The switch: paused, the state sent, the destination's VM built, the go-ahead.
    let t0 = Instant::now();
    let stopped_at = crate::vcpu::monotonic_ns();
    let was_running = life.pause();
    let switched = (|| {
        let mut written = Vec::new();
        let (held, state) = snap.capture(life, || {
            let pages = pager
                .migration_pages()
                .map_err(|e| crate::error_line::error_line(&e))?;
            // The vCPUs parked and the devices held: nothing writes guest RAM from here on.
            if let Some(log) = &log {
                written = log.take()?;
            }
            Ok(pages)
        })?;
        if let (Some(pre), Some(log)) = (&mut pre, &log) {
            written.extend(log.used_rings(&state.transports));
            pre.switch(&written, &mut w).map_err(io)?;
        }
        let bytes = snapshot::encode_state(&state).map_err(|e| e.to_string())?;
        sent += wire::send(&mut w, &Msg::State(bytes)).map_err(io)?;
        r.set_read_timeout(Some(BUILD)).map_err(io)?;
        match wire::recv(&mut r).map_err(io)? {
            Msg::Ready => Ok((held, state.pages)),
            m => Err(io(std::io::Error::other(format!("unexpected {m:?}")))),
        }
    })();
    let (held, pages) = match switched {
        Ok(s) => s,
        Err(e) => {
            drop(log);
            if was_running {
                life.resume();
            }
            return Err(e);
        }
    };
    // From here on the VM is the destination's: it is never resumed here.
    moved.store(true, std::sync::atomic::Ordering::SeqCst);
    let go = wire::send(&mut w, &Msg::Go);
    let downtime_ms = millis(t0);
    // KVM stops logging only now, outside the vCPUs' downtime.
    drop(log);
    // With the destination's first `KVM_RUN` line, on the same clock: how long the guest did
    // not run, its wake-up on the destination included (`memvisor bench mobility`).
    tracing::info!("migration: the vCPUs stopped at monotonic_ns={stopped_at}");
    sent += go.map_err(|e| {
        format!("sending the go-ahead to {to} failed ({e}): the VM stays paused here with every page; resume it here only if the destination does not run it")
    })?;
    let mut post = Box::new(PostCopy::new(to, pager.clone(), pages));
    post.t0 = t0;
    post.downtime_ms = downtime_ms;
    post.bytes = sent;
    if let Some(pre) = pre {
        post.adopt(pre);
    }
    let served = post_copy(&mut post, r, &mut w, reader);
    drop(held);
    Ok(match served {
        Ok(()) => Ok(post),
        Err(e) => Err((post, e)),
    })
}

fn millis(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// `migrate-rx`: the destination's messages, until the connection closes.
fn receive(r: &mut TcpStream, tx: &mpsc::Sender<FromDest>) {
    loop {
        let m = match wire::recv(r) {
            Ok(Msg::Request { first, count }) => FromDest::Request { first, count },
            Ok(Msg::Ack { first, count }) => FromDest::Ack { first, count },
            Ok(m) => FromDest::Broken(format!("the destination sent {m:?}")),
            Err(e) => FromDest::Broken(format!("the connection broke ({e})")),
        };
        let end = matches!(m, FromDest::Broken(_));
        if tx.send(m).is_err() || end {
            return;
        }
    }
}

/// The post-copy phase on the source: what is sent and acknowledged.
pub(crate) struct PostCopy {
    /// The destination's address.
    to: String,
    pager: Pager,
    saved: SavedPages,
    t0: Instant,
    downtime_ms: u64,
    /// Bytes written to the connections.
    bytes: u64,
    pages: u32,
    /// Pages with content, to be sent (`Copied` in the state).
    wanted: Vec<bool>,
    sent: Vec<bool>,
    acked: Vec<bool>,
    /// The order pushes go in: the working set's runs, then every page in order.
    order: Vec<(u32, u32)>,
    cursor: (usize, u32),
    copied: u64,
    acked_count: u64,
    /// Acknowledged pages whose memory, pool slot or swap block was given back here.
    freed: u64,
    requested: u64,
    resent: u64,
    /// Pages written to the connection, resent ones each time.
    page_sends: u64,
    /// Pages sent in each pre-copy round (`precopy.rs`).
    rounds: Vec<u64>,
    /// Why the pre-copy rounds ended.
    precopy_end: Option<PrecopyEnd>,
    /// Copied pages the destination held, unwritten since, at the switch.
    precopied: u64,
    /// Pages a pre-copy round sent and post-copy has not sent again.
    pre_sent: Vec<bool>,
    buf: Vec<u8>,
}

impl PostCopy {
    fn new(to: &str, pager: Pager, saved: SavedPages) -> Self {
        let n = saved.pages as usize;
        let mut wanted = vec![false; n];
        for r in saved.runs.iter().filter(|r| r.kind == SavedKind::Copied) {
            wanted[r.first as usize..(r.first + r.count) as usize].fill(true);
        }
        let mut order = saved.prefetch.clone();
        order.push((0, saved.pages));
        PostCopy {
            to: to.to_owned(),
            pager,
            t0: Instant::now(),
            downtime_ms: 0,
            bytes: 0,
            pages: saved.pages,
            copied: wanted.iter().filter(|&&w| w).count() as u64,
            wanted,
            sent: vec![false; n],
            acked: vec![false; n],
            order,
            cursor: (0, 0),
            acked_count: 0,
            freed: 0,
            requested: 0,
            resent: 0,
            page_sends: 0,
            rounds: Vec::new(),
            precopy_end: None,
            precopied: 0,
            pre_sent: Vec::new(),
            buf: vec![0u8; wire::MAX_RUN as usize * 4096],
            saved,
        }
    }

    /// Sends pages `first..first + count` from where they are.
    fn send(&mut self, w: &mut impl std::io::Write, first: u32, count: u32) -> Result<u64, String> {
        let len = count as usize * 4096;
        self.pager
            .read_in_place(first, &mut self.buf[..len])
            .map_err(|e| format!("reading guest pages {first}..+{count} here failed ({e})"))?;
        self.page_sends += u64::from(count);
        for p in first..first + count {
            // A page a pre-copy round sent is sent again once.
            let again = self
                .pre_sent
                .get_mut(p as usize)
                .is_some_and(std::mem::take);
            self.resent += u64::from(self.sent[p as usize] || again);
            self.sent[p as usize] = true;
        }
        let data = self.buf[..len].to_vec();
        wire::send(w, &Msg::Pages { first, data })
            .map_err(|e| format!("the connection broke ({e})"))
    }

    /// Takes over what pre-copy sent: the copied pages the destination holds, unwritten since,
    /// are sent and acknowledged (the destination built the VM after writing them), and freed
    /// here at once.
    fn adopt(&mut self, pre: PreCopy) {
        let mut held = Vec::new();
        for p in 0..self.pages {
            let i = p as usize;
            if self.wanted[i] && pre.clean.get(i) == Some(&true) {
                self.sent[i] = true;
                self.acked[i] = true;
                held.push(p);
            }
        }
        self.precopied = held.len() as u64;
        self.acked_count += self.precopied;
        self.page_sends += pre.rounds.iter().sum::<u64>();
        self.resent += pre.resent;
        self.bytes += pre.bytes;
        self.rounds = pre.rounds;
        self.precopy_end = pre.end;
        self.pre_sent = pre.sent;
        self.free(&held);
    }

    /// Gives back what holds `pages` (sorted, acknowledged) here: the destination has them.
    /// A failure only leaves them held (they are never read again).
    fn free(&mut self, pages: &[u32]) {
        let mut rest = pages;
        while let Some(&first) = rest.first() {
            let mut k = 1u32;
            while rest.get(k as usize) == Some(&(first + k)) {
                k += 1;
            }
            match self.pager.free_sent(first, k) {
                Ok(n) => self.freed += n,
                Err(e) => tracing::warn!(
                    "migration: pages {first}..+{k}, acknowledged, stay held here: {e}"
                ),
            }
            rest = &rest[k as usize..];
        }
    }

    /// What was sent so far, as `PUT /vm/migrate` answers it.
    fn result(&self, to: &str) -> MigrateResult {
        let (c, z, d, rel) = self.saved.census();
        MigrateResult {
            to: to.to_owned(),
            copied_pages: c,
            requested_pages: self.requested,
            resent_pages: self.resent,
            recorded_pages: z + d + rel,
            sent_pages: self.page_sends,
            acked_pages: self.acked_count,
            freed_pages: self.freed,
            precopy_round_pages: self.rounds.clone(),
            precopy_end: self.precopy_end,
            precopied_pages: self.precopied,
            sent_bytes: self.bytes,
            downtime_ms: self.downtime_ms,
            total_ms: millis(self.t0),
        }
    }

    /// The next run of pages to push that are wanted and not yet sent.
    fn next_push(&mut self) -> Option<(u32, u32)> {
        while let Some(&(first, count)) = self.order.get(self.cursor.0) {
            let (i, mut at) = self.cursor;
            let end = first.saturating_add(count).min(self.pages);
            at = at.max(first);
            while at < end && (!self.wanted[at as usize] || self.sent[at as usize]) {
                at += 1;
            }
            if at >= end {
                self.cursor = (i + 1, 0);
                continue;
            }
            let mut k = 1;
            while k < PUSH_RUN
                && at + k < end
                && self.wanted[(at + k) as usize]
                && !self.sent[(at + k) as usize]
            {
                k += 1;
            }
            self.cursor = (i, at + k);
            return Some((at, k));
        }
        None
    }

    fn event(&mut self, w: &mut impl std::io::Write, e: FromDest) -> Result<u64, String> {
        match e {
            FromDest::Request { first, count } => {
                let count = count.min(wire::MAX_RUN);
                if first.checked_add(count).is_none_or(|end| end > self.pages) || count == 0 {
                    return Err(format!("the destination asked for pages {first}..+{count}"));
                }
                self.requested += u64::from(count);
                self.send(w, first, count)
            }
            FromDest::Ack { first, count } => {
                let mut newly = Vec::new();
                for p in first..first.saturating_add(count).min(self.pages) {
                    if !self.acked[p as usize] && self.wanted[p as usize] {
                        self.acked[p as usize] = true;
                        self.acked_count += 1;
                        newly.push(p);
                    }
                }
                self.free(&newly);
                Ok(0)
            }
            // Every page is there: the destination may end (its guest done) before `Done`.
            FromDest::Broken(_) if self.acked_count >= self.copied => Ok(0),
            FromDest::Broken(why) => Err(why),
        }
    }

    /// Serves requests first, pushes otherwise, until every page is acknowledged; returns the
    /// bytes sent.
    fn serve(
        &mut self,
        w: &mut BufWriter<TcpStream>,
        rx: &mpsc::Receiver<FromDest>,
    ) -> Result<(), String> {
        while self.acked_count < self.copied {
            while let Ok(e) = rx.try_recv() {
                self.bytes += self.event(w, e)?;
            }
            match self.next_push() {
                Some((first, count)) => self.bytes += self.send(w, first, count)?,
                // The last acknowledgements may have come in just now.
                None if self.acked_count >= self.copied => break,
                None => {
                    let e = rx.recv().map_err(|_| "the connection broke".to_owned())?;
                    self.bytes += self.event(w, e)?;
                }
            }
        }
        // Every page is acknowledged: a destination gone by now has them all.
        self.bytes += wire::send(w, &Msg::Done).unwrap_or(0);
        Ok(())
    }
}
