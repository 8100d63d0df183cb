//! `memvisor bench reclaimdelay` (HyperDealer2 §6.2, Table 2, Figs. 11–12): the time the host
//! takes to obtain pages from victim VMs, by the balloon and by instant release.
//!
//! One group is one method, one victim state and one number of victims with a number of vCPUs
//! each ([`Sizes::groups`]), in one repetition:
//! 1. Each victim boots (`memvisor run --mapper --balloon --mem-limit MEM`, the pager holding
//!    guest RAM with the Swap Mapper on, nothing reclaimed; or QEMU microvm with its balloon)
//!    with `seqread file=seq passes=1 then=STATE`: it reads a file bigger than its memory, so
//!    its page cache fills guest RAM with clean pages that mirror disk blocks, then stays in the
//!    state (`then=idle|spin|write`, every vCPU computing in the busy ones) until it is stopped.
//! 2. Once every victim's `pass1` line is in, the harness waits [`SETTLE`] and takes each
//!    amount of [`Sizes::pages`] in turn (the total split over the victims), [`BETWEEN`] apart:
//!    - balloon: `PUT /balloon` (QMP `balloon`) to what each balloon holds + its share, on every
//!      victim at once (one thread each), then `GET /stats` (QMP `query-balloon`) every
//!      [`POLL`] until the driver holds it; the time is from the first request to the last
//!      victim's answer that shows its share;
//!    - hd2: `PUT /memory/release` of its share on each victim, one after another, as a host
//!      balancing does; the time is the calls' wall time, and the VMM's own `micros` summed.
//! 3. The victims are stopped.
//!
//! A VMM without the endpoint answers 501: the hd2 rows are then "not available", not failures.

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use memvisor_api::{ClientError, VmClient};

use super::experiment::{Method, ReclaimPlan, Sizes, State, BETWEEN, POLL, SETTLE, STEP_TIMEOUT};
use crate::harness::order::interleave;
use crate::harness::qmp::Qmp;
use crate::harness::vm::Vm;
use crate::harness::{teardown, Bench, MeasureStatus};

const PAGE: u64 = 4096;

/// One amount of pages taken from a group of victims.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reclaim {
    pub method: &'static str,
    pub state: &'static str,
    pub victims: u32,
    /// vCPUs of each victim.
    pub vcpus: u32,
    pub pages: u64,
    pub rep: u32,
    pub status: MeasureStatus,
    /// Why the status is not ok.
    pub error: String,
    /// Milliseconds from the (first) request to having every page (host clock).
    pub ms: f64,
    /// hd2: the VMMs' own time for their releases (`micros`, summed over the victims).
    pub vmm_us: Option<u64>,
    /// Pages obtained: the balloons' growth, or the pages released.
    pub obtained: u64,
    /// hd2: candidates found changed by the guest, so kept.
    pub changed: u64,
    /// Answers asked for while waiting (balloon).
    pub polls: u64,
}

impl Reclaim {
    pub fn ok(&self) -> bool {
        self.status == MeasureStatus::Ok
    }
}

fn start(
    bench: &Bench,
    setup: &ReclaimPlan,
    m: &Method,
    st: &State,
    slot: u32,
    rep: u32,
    (n, vcpus): (u32, u32),
) -> Result<Vm, String> {
    let disk = bench.work.join(format!("victim{slot}.img"));
    let mem = setup.sizes.mem.to_string();
    let log = format!(
        "{}-{}-{n}vm-{vcpus}cpu-rep{rep}-victim{slot}",
        m.name, st.name
    );
    Vm::start(bench, &format!("victim{slot}"), &log, |cmd, sock, _| {
        cmd.args(["--mem", &mem, "--vcpus", &vcpus.to_string()]);
        if m.qemu {
            cmd.args(["--hypervisor", "qemu", "--balloon", "--qmp-sock"])
                .arg(sock);
        } else {
            // HyperDealer2's victim order: a sequence is taken from its start, so its pages
            // are released in runs (random mirrored pages cost a protection and a drop each).
            cmd.args(["--mem-limit", &mem, "--mapper", "--balloon"])
                .args(["--victims", "hd2", "--sample-pages", "0"])
                .arg("--api-sock")
                .arg(sock);
            if m.ready {
                let most = setup.sizes.pages.iter().copied().max().unwrap_or(0);
                cmd.args(["--release-ready", &(most * 4096).to_string()]);
            }
        }
        cmd.args(["--disk", &format!("{},id=data", disk.display())])
            .args(["--workload", "seqread"])
            .args(["--cmdline", &setup.sizes.cmdline(st)]);
    })
}

/// The pages the balloon holds on a memvisor victim (`GET /stats`).
fn held(c: &VmClient) -> Result<u64, String> {
    let balloon = c.stats().map_err(|e| e.to_string())?.balloon;
    balloon
        .map(|b| b.actual_pages)
        .ok_or_else(|| "the VM has no balloon".to_owned())
}

/// What one victim's balloon did for one amount: when it was asked, when it had the pages,
/// pages obtained, polls.
struct Inflated {
    asked: Instant,
    done: Instant,
    obtained: u64,
    polls: u64,
}

/// Inflates one victim's balloon by `n` pages once `start` lets every victim go, and waits
/// until it holds them. Every caller passes `start` once, also when it failed before.
fn inflate(sock: &Path, qemu: bool, n: u64, start: &Barrier) -> Result<Inflated, String> {
    // QEMU's balloon is asked for the guest RAM it leaves (bytes, QMP), memvisor's for what it
    // holds (`PUT /balloon`, its pages in `GET /stats`); `obtained_now` counts pages either way.
    let (mut qmp, c) = (None, VmClient::new(sock));
    let prepared = if qemu {
        Qmp::connect(sock).and_then(|q| qmp.insert(q).actual())
    } else {
        held(&c)
    };
    start.wait();
    let before = prepared?;
    let asked = Instant::now();
    let obtained_now = |qmp: &mut Option<Qmp>| match qmp {
        Some(q) => q.actual().map(|a| before.saturating_sub(a) / PAGE),
        None => held(&c).map(|h| h.saturating_sub(before)),
    };
    match qmp.as_mut() {
        Some(q) => q.balloon(before.saturating_sub(n * PAGE))?,
        None => c
            .set_balloon((before + n) * PAGE)
            .map(|_| ())
            .map_err(|e| e.to_string())?,
    }
    let mut polls = 0;
    loop {
        let obtained = obtained_now(&mut qmp)?;
        polls += 1;
        if obtained >= n {
            let done = Instant::now();
            return Ok(Inflated {
                asked,
                done,
                obtained,
                polls,
            });
        }
        if asked.elapsed() > STEP_TIMEOUT {
            let whose = if qemu {
                "QEMU's balloon"
            } else {
                "the balloon"
            };
            let secs = STEP_TIMEOUT.as_secs();
            return Err(format!("{whose} at {obtained} of {n} pages after {secs} s"));
        }
        std::thread::sleep(POLL);
    }
}

/// Takes `pages` from `victims` by their balloons, all at once.
fn by_balloon(p: &mut Reclaim, socks: &[PathBuf], qemu: bool) {
    let n = u32::try_from(socks.len()).unwrap_or(u32::MAX);
    let start = Barrier::new(socks.len());
    let pages = p.pages;
    let results: Vec<Result<Inflated, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = socks
            .iter()
            .enumerate()
            .map(|(i, sock)| {
                let share = Sizes::share(pages, n, u32::try_from(i).unwrap_or(0));
                let start = &start;
                s.spawn(move || inflate(sock, qemu, share, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a poller panicked".into())))
            .collect()
    });
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    for r in results {
        match r {
            Ok(i) => {
                first = Some(first.map_or(i.asked, |f| f.min(i.asked)));
                last = Some(last.map_or(i.done, |l| l.max(i.done)));
                p.obtained += i.obtained;
                p.polls += i.polls;
            }
            Err(e) => {
                p.status = MeasureStatus::Failed;
                if p.error.is_empty() {
                    p.error = e;
                }
            }
        }
    }
    if let (Some(f), Some(l)) = (first, last) {
        p.ms = l.duration_since(f).as_secs_f64() * 1e3;
    }
}

/// Takes `pages` from `victims` by instant release, one after another.
fn by_release(p: &mut Reclaim, socks: &[PathBuf]) {
    let n = u32::try_from(socks.len()).unwrap_or(u32::MAX);
    let clients: Vec<VmClient> = socks.iter().map(VmClient::new).collect();
    let mut us = 0;
    let t = Instant::now();
    for (i, c) in clients.iter().enumerate() {
        let share = Sizes::share(p.pages, n, u32::try_from(i).unwrap_or(0));
        match c.release(share) {
            Ok(r) => {
                p.obtained += r.released_pages;
                p.changed += r.changed_pages;
                us += r.micros;
            }
            Err(ClientError::Refused {
                status: 501, body, ..
            }) => {
                p.status = MeasureStatus::NotAvailable;
                p.error = format!("the VMM has no instant release (501): {}", body.trim());
                return;
            }
            Err(e) => {
                p.status = MeasureStatus::Failed;
                p.error = e.to_string();
                return;
            }
        }
    }
    p.ms = t.elapsed().as_secs_f64() * 1e3;
    p.vmm_us = Some(us);
}

/// One group (see the module doc): its points, one per amount.
fn group(
    bench: &Bench,
    setup: &ReclaimPlan,
    m: &'static Method,
    st: &'static State,
    (n, vcpus): (u32, u32),
    rep: u32,
) -> Vec<Reclaim> {
    let point = |&pages: &u64| Reclaim {
        method: m.name,
        state: st.name,
        victims: n,
        vcpus,
        pages,
        rep,
        ..Reclaim::default()
    };
    let mut points: Vec<Reclaim> = setup.sizes.pages.iter().map(point).collect();
    let fail_all = |points: &mut [Reclaim], e: String| {
        for p in points.iter_mut() {
            p.status = MeasureStatus::Failed;
            p.error.clone_from(&e);
        }
    };
    let mut victims = Vec::new();
    for slot in 0..n {
        match start(bench, setup, m, st, slot, rep, (n, vcpus)) {
            Ok(v) => victims.push(v),
            Err(e) => {
                fail_all(&mut points, e);
                break;
            }
        }
    }
    if victims.len() == n as usize {
        let deadline = Instant::now() + bench.timeout;
        // The guest's pass1: its cache warm, the state starting.
        let pass1 = |v: &Vm| v.wait_phase("pass1", deadline).map(|_| ());
        let warm = victims.iter().try_for_each(pass1);
        match warm {
            Err(e) => fail_all(&mut points, e),
            Ok(()) => {
                std::thread::sleep(SETTLE);
                let socks: Vec<PathBuf> = victims.iter().map(|v| v.sock.clone()).collect();
                for (i, p) in points.iter_mut().enumerate() {
                    if teardown::interrupted() {
                        p.status = MeasureStatus::Failed;
                        p.error = "interrupted".into();
                        continue;
                    }
                    if i > 0 {
                        std::thread::sleep(BETWEEN);
                    }
                    if m.release {
                        by_release(p, &socks);
                    } else {
                        by_balloon(p, &socks, m.qemu);
                    }
                }
            }
        }
    }
    for v in victims {
        v.stop();
    }
    points
}

/// Makes each victim slot's data disk (`memvisor mkdisk data`), once for the whole benchmark.
fn disks(bench: &Bench, setup: &ReclaimPlan) -> Result<(), String> {
    let most = setup.sizes.victims.iter().copied().max().unwrap_or(1);
    for slot in 0..most {
        let path = bench.work.join(format!("victim{slot}.img"));
        let (mb, files) = (setup.sizes.disk_mb(), setup.sizes.files());
        crate::harness::setup::mkdisk(&bench.exe, &path, mb, Some(&files))?;
    }
    Ok(())
}

/// Runs every group, repetition by repetition (the methods in `order::of_rep`'s order); returns
/// the points.
pub fn run(bench: &Bench, setup: &ReclaimPlan) -> Result<Vec<Reclaim>, String> {
    disks(bench, setup)?;
    let sizes = &setup.sizes;
    let cells = |_| {
        let each = sizes
            .groups()
            .into_iter()
            .map(|g| setup.states.iter().map(move |&st| (g, st)));
        each.flatten().collect::<Vec<_>>()
    };
    let what = |&((n, c), st): &((u32, u32), &State), m: &&Method| {
        format!("{} {} {n} victim(s) of {c} vCPU(s)", m.name, st.name)
    };
    let (name, reps) = ("reclaimdelay", setup.reps);
    interleave(name, reps, cells, &setup.methods, what, |t| {
        let (g, st) = *t.cell;
        let points = group(bench, setup, t.config, st, g, t.rep);
        for p in &points {
            t.say(&if p.ok() {
                format!(
                    "{} pages in {:.2} ms ({} obtained)",
                    p.pages, p.ms, p.obtained
                )
            } else {
                format!("{} pages: {}: {}", p.pages, p.status.name(), p.error)
            });
        }
        Ok(points)
    })
}
