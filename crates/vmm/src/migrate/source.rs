//! A migration's source (`PUT /vm/migrate`): connects to the destination, proves the token,
//! pauses the VM and sends its state (the snapshot's, `snapshot.rs`), lets the destination go,
//! then serves the pages its faults ask for and pushes the rest, the working set first, until
//! every page is acknowledged; the VM then ends here.
//!
//! Threads: `migrate` does all of it and writes to the connection; `migrate-rx` reads the
//! destination's requests and acknowledgements and hands them over a channel. Neither touches
//! guest memory but through the pager's `read_in_place`, under its page lock.
//!
//! Before the go-ahead is sent, any failure resumes the VM here as it was; once it is sent,
//! the VM is never resumed here (the destination may run it): a failure then leaves it paused
//! with every page, and says so.

use std::io::BufWriter;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memvisor_api::{MigrateRequest, MigrateResult};
use memvisor_pager::{Pager, SavedKind, SavedPages};

use super::wire::{self, Msg};
use crate::lifecycle::Lifecycle;
use crate::snapshot::{self, Snapshotter};

/// How long the destination may take to answer the greeting, and to build the VM.
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

/// Moves the VM to `req.to` (module doc) on a thread of its own; returns once every page is
/// acknowledged (the VM then ends here) or why not.
pub(crate) fn migrate(
    snap: &Arc<Snapshotter>,
    life: &Arc<Lifecycle>,
    req: &MigrateRequest,
) -> Result<MigrateResult, String> {
    let (snap, life, req) = (snap.clone(), life.clone(), req.clone());
    std::thread::Builder::new()
        .name("migrate".into())
        .spawn(move || run(&snap, &life, &req))
        .map_err(|e| format!("cannot start the migration thread: {e}"))?
        .join()
        .map_err(|_| "the migration thread panicked".to_owned())?
}

fn run(
    snap: &Snapshotter,
    life: &Lifecycle,
    req: &MigrateRequest,
) -> Result<MigrateResult, String> {
    let Some(pager) = &life.pager else {
        return Err("a VM without memvisor's pager (--pager off) cannot migrate".into());
    };
    snapshot::check_pausable(life)?;
    let to = &req.to;
    let addr = to
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("'{to}' is not a TCP address: give host:port"))?;
    let stream = TcpStream::connect_timeout(&addr, GREETING)
        .map_err(|e| format!("cannot reach the destination {to}: {e}; the VM runs on here"))?;
    let io = |e: std::io::Error| format!("the connection to {to}: {e}; the VM runs on here");
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(GREETING)).map_err(io)?;
    let mut r = stream.try_clone().map_err(io)?;
    let mut w = BufWriter::with_capacity(1 << 20, stream.try_clone().map_err(io)?);
    let mut sent = wire::send(
        &mut w,
        &Msg::Hello {
            version: wire::VERSION,
            token: req.token.as_bytes().to_vec(),
        },
    )
    .map_err(io)?;
    match wire::recv(&mut r) {
        Ok(Msg::Accepted) => {}
        Ok(Msg::Refused) => {
            return Err(format!(
                "the destination {to} refused the token: nothing moved, the VM runs on here"
            ))
        }
        Ok(m) => return Err(io(std::io::Error::other(format!("unexpected {m:?}")))),
        Err(e) => return Err(io(e)),
    }

    // The switch: paused, the state sent, the destination's VM built, the go-ahead.
    let t0 = Instant::now();
    let was_running = life.pause();
    let switched = (|| {
        let (held, state) = snap.capture(life, || {
            pager
                .migration_pages()
                .map_err(|e| snapshot::error_line(&e))
        })?;
        let bytes = snapshot::encode_state(&state).map_err(|e| e.to_string())?;
        sent += wire::send(&mut w, &Msg::State(bytes)).map_err(io)?;
        stream.set_read_timeout(Some(BUILD)).map_err(io)?;
        match wire::recv(&mut r).map_err(io)? {
            Msg::Ready => Ok((held, state.pages)),
            m => Err(io(std::io::Error::other(format!("unexpected {m:?}")))),
        }
    })();
    let (held, pages) = match switched {
        Ok(s) => s,
        Err(e) => {
            if was_running {
                life.resume();
            }
            return Err(e);
        }
    };
    // From here on the VM is the destination's: it is never resumed here.
    let go = wire::send(&mut w, &Msg::Go);
    let downtime_ms = millis(t0);
    sent += go.map_err(|e| {
        format!("sending the go-ahead to {to} failed ({e}): the VM stays paused here with every page; resume it here only if the destination does not run it")
    })?;
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("migrate-rx".into())
        .spawn(move || receive(&mut r, &tx))
        .map_err(|e| format!("cannot start the migration reader: {e}"))?;
    let mut post = PostCopy::new(pager, &pages);
    let copied = post.copied;
    let served = post.serve(&mut w, &rx);
    drop(held);
    let sent = sent + served.map_err(|e| {
        format!(
            "{e}, after the switch with {} of {copied} pages acknowledged: the VM stays paused here and keeps every page; the destination pauses at its first fault on a page it lacks",
            post.acked_count
        )
    })?;
    (snap.stop)();
    let (c, z, d, rel) = pages.census();
    let result = MigrateResult {
        to: to.clone(),
        copied_pages: c,
        requested_pages: post.requested,
        resent_pages: post.resent,
        recorded_pages: z + d + rel,
        sent_bytes: sent,
        downtime_ms,
        total_ms: millis(t0),
    };
    tracing::info!(
        "migrated to {to}: {c} pages sent ({} asked for by faults), vCPUs stopped {downtime_ms} ms, {} ms in all",
        post.requested,
        result.total_ms
    );
    Ok(result)
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

/// The post-copy phase on the source.
struct PostCopy<'a> {
    pager: &'a Pager,
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
    requested: u64,
    resent: u64,
    buf: Vec<u8>,
}

impl<'a> PostCopy<'a> {
    fn new(pager: &'a Pager, saved: &SavedPages) -> Self {
        let n = saved.pages as usize;
        let mut wanted = vec![false; n];
        for r in saved.runs.iter().filter(|r| r.kind == SavedKind::Copied) {
            wanted[r.first as usize..(r.first + r.count) as usize].fill(true);
        }
        let mut order = saved.prefetch.clone();
        order.push((0, saved.pages));
        PostCopy {
            pager,
            pages: saved.pages,
            copied: wanted.iter().filter(|&&w| w).count() as u64,
            wanted,
            sent: vec![false; n],
            acked: vec![false; n],
            order,
            cursor: (0, 0),
            acked_count: 0,
            requested: 0,
            resent: 0,
            buf: vec![0u8; wire::MAX_RUN as usize * 4096],
        }
    }

    /// Sends pages `first..first + count` from where they are.
    fn send(&mut self, w: &mut impl std::io::Write, first: u32, count: u32) -> Result<u64, String> {
        let len = count as usize * 4096;
        self.pager
            .read_in_place(first, &mut self.buf[..len])
            .map_err(|e| format!("reading guest pages {first}..+{count} here failed ({e})"))?;
        for p in first..first + count {
            self.resent += u64::from(self.sent[p as usize]);
            self.sent[p as usize] = true;
        }
        let data = self.buf[..len].to_vec();
        wire::send(w, &Msg::Pages { first, data })
            .map_err(|e| format!("the connection broke ({e})"))
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
                for p in first..first.saturating_add(count).min(self.pages) {
                    if !self.acked[p as usize] && self.wanted[p as usize] {
                        self.acked[p as usize] = true;
                        self.acked_count += 1;
                    }
                }
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
    ) -> Result<u64, String> {
        let mut sent = 0;
        while self.acked_count < self.copied {
            while let Ok(e) = rx.try_recv() {
                sent += self.event(w, e)?;
            }
            match self.next_push() {
                Some((first, count)) => sent += self.send(w, first, count)?,
                None => {
                    let e = rx.recv().map_err(|_| "the connection broke".to_owned())?;
                    sent += self.event(w, e)?;
                }
            }
        }
        // Every page is acknowledged: a destination gone by now has them all.
        Ok(sent + wire::send(w, &Msg::Done).unwrap_or(0))
    }
}
