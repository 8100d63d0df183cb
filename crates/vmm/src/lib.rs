//! One KVM virtual machine: its guest memory, vCPUs, device buses and lifetime, from boot to exit.
//!
//! A [`Vm`] is built from a [`VmConfig`] ([`Vm::build`]), started ([`Vm::start`]), paused and
//! resumed, and waited for ([`Vm::wait`]) until the guest ends: through the debug-exit port, a
//! shutdown, a crash, a signal, or [`VmStopper::stop`]; [`run`] does all of it. Each vCPU runs
//! on its own thread and serves its own exits: a port or MMIO access is routed to the device
//! that owns the address on the [`Bus`], synchronously. Virtio queue
//! notifications do not exit: KVM signals an ioeventfd and the device's own thread processes
//! the queue.
//!
//! | file | owns |
//! |---|---|
//! | `config.rs` | what a VM is built from: [`VmConfig`], [`DiskConfig`] and the limits on them (a leaf) |
//! | `error.rs` | why a VM cannot be built or run: [`VmmError`] (a leaf) |
//! | `error_line.rs` | an error and its sources on one line, as the VMM and `memvisor run` report them (a leaf) |
//! | `lifecycle.rs` | a VM's state ([`VmState`]) and the pausing and resuming the VM and its API server share |
//! | `report.rs` | how a VM ended ([`VmExit`]) and what it reports at the end ([`VmReport`], [`ExitCounters`]) (a leaf) |
//! | `lib.rs` | the [`Vm`]: building it, its devices' wiring, starting, waiting, stopping, the flush of its disks at the end, and [`run`] |
//! | `opened.rs` | what a VM opens by path or with privileges, opened before its jail and its threads |
//! | `memory.rs` | guest RAM mappings on transparent huge pages and their KVM memory slots, mergeable by KSM with `--sharing host` |
//! | `sharing.rs` | what KSM merged of this process's memory, from `/proc/self/ksm_stat` |
//! | `vcpu.rs` | vCPU set-up for PVH entry and the exit loop that routes port and MMIO accesses to devices |
//! | `control.rs` | pausing, parking, kicking and ending vCPUs, with a [`PauseReason`] |
//! | `affinity.rs` | host CPU sets for `--vcpu-cpus` and `--vmm-cpus` |
//! | `jail.rs` | the jail a VMM enters once its files are open: namespaces, a root of its own (with `--snapshot-dir` bound in), no capabilities, an unprivileged uid |
//! | `ioevents.rs` | `KVM_IOEVENTFD` for the devices' queue notifications |
//! | `api.rs` | the VM's API server on a Unix socket |
//! | `signals.rs` | termination signals handled by a thread, and the signal that kicks a vCPU |
//! | `cpu_state.rs` | the KVM state of a vCPU and of the in-kernel PIC, IOAPIC and clock, read for a snapshot and written back on restore |
//! | `snapshot.rs` | snapshots: the format, where a VMM may write one (jailed: one name in its snapshot directory), taking one from a running VM, and reading one back, checked and without following links |
//! | `migrate/` | live migration, post-copy after optional pre-copy rounds (docs/migration.md): the messages (`wire.rs`), the source (`source.rs`, `PUT /vm/migrate`), its pre-copy rounds and the record of what was written (`precopy.rs`: KVM's dirty log and the pager's note), the destination and its page store of pages still on the source (`incoming.rs`, `memvisor run --incoming`) |

pub mod affinity;
mod api;
mod config;
mod control;
mod cpu_state;
mod error;
mod error_line;
mod ioevents;
pub mod jail;
mod lifecycle;
mod memory;
pub mod migrate;
mod opened;
mod report;
mod sharing;
pub mod signals;
pub mod snapshot;
mod vcpu;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use memvisor_boot::{PvhImage, RamLayout};
use memvisor_devices::debug_exit::{DebugExit, DEBUG_EXIT_LEN, DEBUG_EXIT_PORT};
use memvisor_devices::ram::{GuestRam, PlainRam};
use memvisor_devices::serial::{Serial, COM1_LEN, COM1_PORT};
use memvisor_devices::virtio::balloon::{Balloon, BalloonControl};
use memvisor_devices::virtio::block::{Block, BlockMetrics};
use memvisor_devices::virtio::ioevents::IoEvents;
use memvisor_devices::virtio::mmio::{
    MmioTransport, TransportMetrics, IRQ_BASE, MMIO_BASE, MMIO_SLOTS, MMIO_SLOT_SIZE,
    QUEUE_NOTIFY_OFFSET,
};
use memvisor_devices::virtio::notify::NotifyThread;
use memvisor_devices::Bus;
use memvisor_pager::{Pager, PagerStats};
use vmm_sys_util::eventfd::EventFd;

pub use config::{DiskConfig, VmConfig, MAX_DISKS, MAX_VCPUS};
pub use control::{PauseReason, Vcpus};
use error::kvm_err;
pub use error::VmmError;
pub use error_line::error_line;
use lifecycle::Lifecycle;
pub use lifecycle::VmState;
use opened::{Opened, OpenedDisk};
pub use report::{ExitCounters, VmExit, VmReport};

/// GSI of the serial port's interrupt (COM1 = IRQ 4).
const SERIAL_GSI: u32 = 4;

/// Events from vCPU threads and devices to the thread that waits for the VM to end.
enum VmEvent {
    Exit(VmExit),
    PagerFailed(String),
    Crash { vcpu: u8, reason: String, rip: u64 },
}

/// Returns the TSC frequency KVM gives guests on this host, in kHz.
pub fn host_tsc_khz() -> Result<u32, VmmError> {
    let kvm = Kvm::new().map_err(VmmError::OpenKvm)?;
    let vm = kvm.create_vm().map_err(kvm_err("KVM_CREATE_VM"))?;
    let vcpu = vm.create_vcpu(0).map_err(kvm_err("KVM_CREATE_VCPU"))?;
    vcpu.get_tsc_khz().map_err(kvm_err("KVM_GET_TSC_KHZ"))
}

/// One VM: built from a [`VmConfig`] by [`Vm::build`], started by [`Vm::start`], waited for by
/// [`Vm::wait`], which stops its vCPUs and flushes its disks however the guest ended.
pub struct Vm {
    // vCPU and device state refers to the VM and its memory: the fds go last.
    lifecycle: Arc<Lifecycle>,
    /// What [`Vm::start`] hands to the vCPU threads; `None` once they run.
    unstarted_vcpus: Option<UnstartedVcpus>,
    /// The API socket, bound, and what it serves, until [`Vm::start`] serves it.
    unserved_api: Option<(std::os::unix::net::UnixListener, api::Control)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    events_tx: mpsc::Sender<VmEvent>,
    events: mpsc::Receiver<VmEvent>,
    /// The virtio devices' threads; dropping one stops it and unregisters its ioeventfds.
    notifiers: Vec<NotifyThread>,
    disks: Vec<(DiskConfig, Mutex<AttachedDisk>)>,
    balloon: Option<Arc<memvisor_devices::virtio::balloon::BalloonState>>,
    exits: Arc<ExitCounters>,
    /// The API socket's file, removed as soon as the VM ends ([`Vm::wait`]).
    _socket_file: Option<memvisor_api::server::SocketFile>,
    mem: Arc<memvisor_devices::GuestMem>,
    /// Guest RAM is mergeable by KSM (`--sharing host`).
    sharing: bool,
    /// The writable images' locks, held for the VM's life.
    _image_locks: Vec<std::fs::File>,
    _vm: Arc<VmFd>,
}

/// A built VM's vCPUs and buses, until their threads start.
struct UnstartedVcpus {
    fds: Vec<VcpuFd>,
    pio: Bus,
    mmio: Bus,
    /// Where the vCPU threads run (`VmConfig::vcpu_cpus`).
    cpus: Option<affinity::CpuSet>,
    /// The MSRs a snapshot saves of each vCPU.
    msrs: Arc<Vec<u32>>,
}

/// Before a VM starts, on any hypervisor: a disk whose image has an indirection log (memvisor
/// stopped without disentangling it, e.g. it was killed) gets the logged blocks back from the
/// swap file the log names. That swap file is then deleted unless it is `swap` (this run's): it
/// belonged to this VM's last run, whose disks are all recovered now.
pub fn recover_indirections(
    disks: &[DiskConfig],
    swap: Option<&Path>,
) -> Result<(), memvisor_pager::indirect::IndirectError> {
    let mut stores = Vec::new();
    for disk in disks {
        if let Some(r) = memvisor_pager::indirect::recover(&disk.path)? {
            tracing::warn!(
                "disk {}: {} blocks put back from {} ({} log records): memvisor had left it indirected (killed, or --keep-indirections)",
                disk.id,
                r.blocks,
                r.store.display(),
                r.records
            );
            stores.push(r.store);
        }
    }
    let current = swap.and_then(|p| std::path::absolute(p).ok());
    stores.sort();
    stores.dedup();
    for store in stores.iter().filter(|s| Some(*s) != current.as_ref()) {
        if let Err(e) = std::fs::remove_file(store) {
            tracing::warn!("cannot delete the old swap file {}: {e}", store.display());
        }
    }
    Ok(())
}

/// A migration's state, once the VM is built from its shape, checked against the disks as a
/// snapshot's is.
fn receive_state(
    inc: &migrate::incoming::Incoming,
    config: &VmConfig,
    images: &[std::fs::File],
) -> Result<snapshot::Snapshot, VmmError> {
    let snap = inc.receive_state().map_err(VmmError::Migration)?;
    let specs: Vec<_> = config
        .disks
        .iter()
        .map(|d| (d.id.clone(), d.path.clone(), d.read_only))
        .collect();
    let mapper = config.pager.as_ref().is_some_and(|p| p.mech.mapper);
    snap.check_images(&specs, images, mapper)
        .map_err(|e| VmmError::MigrationMismatch(e.to_string()))?;
    Ok(snap)
}

/// Builds the VM described by `config`, runs it until the guest ends, and flushes its disks.
pub fn run(config: &VmConfig) -> Result<VmReport, VmmError> {
    let mut vm = Vm::build(config)?;
    if let Some(incoming) = &config.incoming {
        vm.lifecycle.vcpus.pause_for(control::PauseReason::Incoming);
        vm.start_vcpus()?;
        let vcpus = vm.lifecycle.vcpus.clone();
        let life = vm.lifecycle.clone();
        incoming
            .switch(
                || {
                    vm.lifecycle.vcpus.resume();
                },
                move |why| {
                    vcpus.pause_for(control::PauseReason::Migration(why));
                },
                move || {
                    life.resume();
                },
            )
            .map_err(VmmError::Migration)?;
    }
    vm.start()?;
    vm.wait()
}

impl Vm {
    /// Creates the VM: KVM VM and irqchip, guest RAM (under the pager if configured), boot data,
    /// devices, vCPUs set up for PVH entry, and the API socket if configured. Nothing runs yet.
    pub fn build(config: &VmConfig) -> Result<Vm, VmmError> {
        if config.vcpus == 0 || config.vcpus > MAX_VCPUS {
            return Err(VmmError::BadVcpuCount(config.vcpus));
        }
        if config.disks.len() > MMIO_SLOTS {
            return Err(VmmError::TooManyDevices(config.disks.len()));
        }
        memvisor_seccomp::check_kernel(config.seccomp).map_err(VmmError::Seccomp)?;
        memvisor_seccomp::set_mode(config.seccomp);
        let image = PvhImage::parse(&config.kernel)?;
        let layout = RamLayout::new(config.mem_size)?;

        // Everything opened by path or with privileges is opened first; then the jail, if any;
        // then the rest, which needs neither (the threads start after the jail, every one in it).
        // Blocked before the API socket appears, so a stop asked as soon as it does is taken
        // by the signal thread; every thread started from here on inherits the mask.
        signals::block().map_err(VmmError::Thread)?;
        signals::install_kick_handler().map_err(VmmError::Thread)?;
        let kvm = Kvm::new().map_err(VmmError::OpenKvm)?;
        // A migration's destination writes its images once the source has let go of the VM,
        // and the source, which may be on this machine, holds their locks until it ends.
        let image_locks = match config.incoming {
            Some(_) => Vec::new(),
            None => opened::lock_images(&config.disks)?,
        };
        recover_indirections(
            &config.disks,
            config.pager.as_ref().map(|p| p.swap_path.as_path()),
        )?;
        let mut opened = Opened::open(config)?;
        // What a snapshot or a migration records of each image: its path made absolute now,
        // before the jail changes what a relative one means and while `getcwd` is allowed.
        let disk_paths: Vec<std::path::PathBuf> = config
            .disks
            .iter()
            .map(|d| std::path::absolute(&d.path).unwrap_or_else(|_| d.path.clone()))
            .collect();
        if let Some(jail) = &config.jail {
            jail::enter(jail)?;
        }
        let vm = kvm.create_vm().map_err(kvm_err("KVM_CREATE_VM"))?;
        // Needed by Intel's real-mode emulation for APs started by SIPI; harmless elsewhere.
        if let Err(e) = vm.set_tss_address(0xfffb_d000) {
            tracing::debug!("KVM_SET_TSS_ADDR failed: {e}");
        }
        vm.create_irq_chip()
            .map_err(kvm_err("KVM_CREATE_IRQCHIP"))?;
        let mem = Arc::new(memory::create(&vm, &layout, config.sharing)?);
        let (events_tx, events) = mpsc::channel();
        let tx = events_tx.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                memvisor_devices::priority::background();
                memvisor_seccomp::confine(memvisor_seccomp::Thread::Signals);
                let sig = signals::wait();
                let _ = tx.send(VmEvent::Exit(VmExit::Signal(sig)));
            })
            .map_err(VmmError::Thread)?;
        let vcpus = Arc::new(Vcpus::default());
        let restore_from = |r: &snapshot::Snapshot| memvisor_pager::RestoreFrom {
            memory: r.memory.clone(),
            pages: Arc::new(r.state.pages.clone()),
        };
        let pager_config = config.pager.clone().map(|mut c| {
            c.restore = config.restore.as_deref().map(restore_from);
            c
        });
        // The pager must own guest RAM before anything touches it, the boot data included.
        let pager = match (&pager_config, opened.pager.take()) {
            (Some(c), Some(files)) => {
                let tx = Mutex::new(events_tx.clone());
                Some(Pager::start_with(
                    mem.clone(),
                    c,
                    files,
                    vcpus.clone(),
                    move |why| {
                        let _ = lock(&tx).send(VmEvent::PagerFailed(why));
                    },
                )?)
            }
            _ => None,
        };
        // A migration's state comes now, the VM built as far as it can be without it: what
        // took until here (the memory slot and the pager's tables, milliseconds per GiB each)
        // ran while the source still ran the VM.
        let received = match (&config.incoming, &pager) {
            (Some(inc), Some(p)) => {
                let snap = receive_state(inc, config, &opened.identities)?;
                p.restore(&restore_from(&snap))?;
                Some(snap)
            }
            (Some(_), None) => {
                return Err(VmmError::Migration(
                    "a migration's destination needs memvisor's pager".into(),
                ))
            }
            (None, _) => None,
        };
        let restore = received.as_ref().or(config.restore.as_deref());
        let ram: Arc<dyn GuestRam> = match &pager {
            Some(p) => Arc::new(p.clone()),
            None => Arc::new(PlainRam::new(mem.clone())),
        };
        let boot = match restore {
            // A restored guest's memory holds its kernel and boot data already.
            Some(r) => {
                if pager.is_none() {
                    r.fill(&mem).map_err(VmmError::Restore)?;
                }
                None
            }
            None => Some(memvisor_boot::write_boot_data(
                mem.as_ref(),
                &layout,
                &image,
                &config.kernel,
                &config.cmdline,
            )?),
        };

        let Devices {
            pio,
            mmio,
            disks,
            balloon,
            notifiers,
            serial,
            transports,
        } = build_devices(
            &kvm,
            &vm,
            &mem,
            &ram,
            pager.as_ref(),
            config,
            restore,
            std::mem::take(&mut opened.disks),
            events_tx.clone(),
            vcpus.clone(),
        )?;
        let exits = Arc::new(ExitCounters::default());
        let balloon_state = balloon.as_ref().map(|b| b.state.clone());
        let lifecycle = Arc::new(Lifecycle {
            vcpus,
            pager,
            started: AtomicBool::new(false),
        });
        let vm = Arc::new(vm);
        let snapshotter = Arc::new(snapshot::Snapshotter {
            mem_size: config.mem_size,
            vcpus: config.vcpus,
            disks: config
                .disks
                .iter()
                .zip(disk_paths)
                .map(|(d, path)| (d.id.clone(), path, d.read_only))
                .zip(std::mem::take(&mut opened.identities))
                .collect(),
            balloon: config.balloon,
            vm: vm.clone(),
            mem: mem.clone(),
            serial,
            transports,
            stop: {
                let stopper = VmStopper(Mutex::new(events_tx.clone()));
                Box::new(move || stopper.stop())
            },
            place: match &config.jail {
                None => snapshot::SnapshotPlace::Anywhere,
                Some(j) => snapshot::SnapshotPlace::Jailed(j.snapshots.clone()),
            },
        });
        let (api, socket_file) = match opened.api.take() {
            Some((listener, file)) => (
                Some((
                    listener,
                    api::Control {
                        mem_size: config.mem_size,
                        vcpus: config.vcpus,
                        pager_mode: match &config.pager {
                            None => "off",
                            Some(p) if p.mech == memvisor_pager::Mechanisms::BASELINE => "baseline",
                            Some(_) => "full",
                        },
                        disks: disks
                            .iter()
                            .map(|(d, a)| {
                                let a = lock(a);
                                (
                                    d.clone(),
                                    a.block_metrics.clone(),
                                    a.transport_metrics.clone(),
                                )
                            })
                            .collect(),
                        lifecycle: lifecycle.clone(),
                        balloon,
                        exits: exits.clone(),
                        sharing: config.sharing,
                        snapshot: snapshotter,
                        migration: Default::default(),
                    },
                )),
                Some(file),
            ),
            None => (None, None),
        };
        let supported_cpuid = kvm
            .get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
            .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
        let mut vcpu_fds = Vec::new();
        for id in 0..config.vcpus {
            let fd = vm
                .create_vcpu(u64::from(id))
                .map_err(kvm_err("KVM_CREATE_VCPU"))?;
            vcpu::configure(
                &fd,
                id,
                config.vcpus,
                &supported_cpuid,
                boot.filter(|_| id == 0),
            )?;
            if let Some(r) = restore {
                let saved = r.state.cpus.get(usize::from(id)).ok_or_else(|| {
                    VmmError::Restore(format!("the snapshot has no state for vCPU {id}"))
                })?;
                cpu_state::restore(&fd, saved)
                    .map_err(|e| VmmError::Restore(format!("vCPU {id}: {e}")))?;
            }
            vcpu_fds.push(fd);
        }
        if let Some(r) = restore {
            cpu_state::restore_vm(&vm, &r.state.vm).map_err(VmmError::Restore)?;
        }
        let msrs = Arc::new(cpu_state::msr_list(&kvm).unwrap_or_else(|e| {
            tracing::warn!("snapshots of this VM will hold no MSRs: {e}");
            Vec::new()
        }));
        // The serving threads are started: the vCPUs and the API inherit the VMM's own value.
        memvisor_devices::priority::background();
        Ok(Vm {
            lifecycle,
            unstarted_vcpus: Some(UnstartedVcpus {
                fds: vcpu_fds,
                pio,
                mmio,
                cpus: config.vcpu_cpus.clone(),
                msrs,
            }),
            unserved_api: api,
            threads: Vec::new(),
            events_tx,
            events,
            notifiers,
            disks,
            balloon: balloon_state,
            exits,
            _socket_file: socket_file,
            mem,
            sharing: config.sharing,
            _image_locks: image_locks,
            _vm: vm,
        })
    }

    /// Starts the vCPU threads and the API server; then the calling thread installs the main
    /// thread's seccomp filter ([`VmConfig::seccomp`]): from here on it only waits for the VM,
    /// ends it and cleans up after it ([`Vm::wait`]).
    pub fn start(&mut self) -> Result<(), VmmError> {
        self.start_vcpus()?;
        let Some((listener, control)) = self.unserved_api.take() else {
            return Ok(());
        };
        // Before this thread is filtered: the migration thread opens sockets.
        control
            .migration
            .start(&control.snapshot, &control.lifecycle)
            .map_err(VmmError::Thread)?;
        api::serve(listener, Arc::new(control)).map_err(VmmError::Api)?;
        // Every other thread runs now: the caller's goes last, as it starts no more.
        memvisor_seccomp::confine(memvisor_seccomp::Thread::Main);
        Ok(())
    }

    /// Starts the vCPU threads (once): each enters the guest unless the VM is paused, which a
    /// migration's destination is until the source lets the VM go, so that starting them
    /// stays out of the downtime.
    fn start_vcpus(&mut self) -> Result<(), VmmError> {
        let Some(UnstartedVcpus {
            fds,
            pio,
            mmio,
            cpus,
            msrs,
        }) = self.unstarted_vcpus.take()
        else {
            return Ok(());
        };
        self.lifecycle.started.store(true, Ordering::SeqCst);
        let (pio, mmio) = (Arc::new(pio), Arc::new(mmio));
        for (fd, id) in fds.into_iter().zip(0u8..) {
            let ctx = vcpu::VcpuContext {
                id,
                pio: pio.clone(),
                mmio: mmio.clone(),
                exits: self.exits.clone(),
                vcpus: self.lifecycle.vcpus.clone(),
                pager: self.lifecycle.pager.clone(),
                _mem: self.mem.clone(),
                msrs: msrs.clone(),
            };
            let tx = self.events_tx.clone();
            let cpus = cpus.clone();
            let thread = std::thread::Builder::new()
                .name(format!("vcpu{id}"))
                .spawn(move || {
                    if let Some(cpus) = cpus {
                        // Checked against the CPUs this process may use before the VM was
                        // built, so a failure here is the host's doing: run unpinned.
                        if let Err(e) = cpus.apply(0) {
                            tracing::warn!("vcpu{id}: cannot pin to CPUs {cpus}: {e}");
                        }
                    }
                    memvisor_seccomp::confine(memvisor_seccomp::Thread::Vcpu);
                    let (reason, rip) = vcpu::run_loop(fd, &ctx);
                    let _ = tx.send(match reason {
                        // Whoever ended the VM has sent the event already.
                        vcpu::Stop::Ended => return,
                        vcpu::Stop::Shutdown => VmEvent::Exit(VmExit::Shutdown),
                        vcpu::Stop::Crash(reason) => VmEvent::Crash {
                            vcpu: id,
                            reason,
                            rip,
                        },
                    });
                })
                .map_err(VmmError::Thread)?;
            self.threads.push(thread);
        }
        Ok(())
    }

    pub fn state(&self) -> VmState {
        self.lifecycle.state()
    }

    /// Holds every vCPU outside the guest until [`Vm::resume`]; returns whether it was running.
    pub fn pause(&self) -> bool {
        self.lifecycle.pause()
    }

    /// Lets a paused VM run again; returns whether it was paused.
    pub fn resume(&self) -> bool {
        self.lifecycle.resume()
    }

    /// A handle that stops the VM from another thread ([`Vm::wait`] then returns
    /// [`VmExit::Stopped`]).
    pub fn stopper(&self) -> VmStopper {
        VmStopper(Mutex::new(self.events_tx.clone()))
    }

    /// The pager's counters now, if a pager runs.
    pub fn pager_stats(&self) -> Option<PagerStats> {
        self.lifecycle.pager.as_ref().map(Pager::stats)
    }

    /// Waits until the guest ends (or the VM is stopped), stops every vCPU, and flushes what
    /// the guest wrote to its disks whatever ended it.
    pub fn wait(self) -> Result<VmReport, VmmError> {
        let Vm {
            lifecycle,
            threads,
            events_tx,
            events,
            notifiers,
            disks,
            balloon,
            exits,
            _socket_file: socket_file,
            ..
        } = self;
        drop(events_tx);
        let outcome = match events.recv() {
            Ok(VmEvent::Exit(e)) => Ok(e),
            Ok(VmEvent::Crash { vcpu, reason, rip }) => {
                Err(VmmError::GuestCrash { vcpu, reason, rip })
            }
            Ok(VmEvent::PagerFailed(why)) => Err(VmmError::PagerFailed(why)),
            Err(_) => unreachable!("the signal thread holds a sender for the life of the process"),
        };
        // The API socket goes first: a VM that has ended takes no more requests, so the final
        // counters (the report, `--stats-json`) hold every request it answered, and a client
        // refused a connection knows the VM is on its way out.
        drop(socket_file);
        lifecycle.vcpus.end();
        // With the pager gone, a vCPU may wait forever in a fault nobody serves: leave it.
        if !matches!(outcome, Err(VmmError::PagerFailed(_))) {
            for t in threads {
                let _ = t.join();
            }
        }
        // The device threads finish their requests and give the notifications back first.
        drop(notifiers);
        // However the VM ended, what the guest wrote reaches its disks.
        for (disk, dev) in &disks {
            if let Err(source) = lock(dev).sync() {
                if outcome.is_err() {
                    tracing::error!("flushing disk {} after the VM failed: {source}", disk.id);
                    continue;
                }
                return Err(VmmError::DiskSync {
                    id: disk.id.clone(),
                    source,
                });
            }
        }
        // Then the indirected blocks go back into the images (Tesseract), unless kept.
        if let Some(p) = &lifecycle.pager {
            match p.end_indirections() {
                Ok((0, 0)) => {}
                Ok((copied, 0)) => tracing::info!("disks: {copied} indirected blocks copied back into their images"),
                Ok((_, kept)) => tracing::warn!("disks: {kept} indirections kept in their logs; the next start (or `memvisor disk disentangle`) puts them back"),
                Err(e) => {
                    tracing::error!("disks: putting indirected blocks back failed ({e}); their logs stay, and the next start puts them back");
                }
            }
        }
        // One line for what the rate limits kept out of the log since each kind's last line.
        memvisor_devices::guest_log::guest_log().finish();
        let exit = outcome?;
        let disks = disks
            .iter()
            .map(|(disk, dev)| {
                let d = lock(dev);
                (
                    disk.id.clone(),
                    d.block_metrics.clone(),
                    d.transport_metrics.clone(),
                )
            })
            .collect();
        Ok(VmReport {
            exit,
            pager: lifecycle.pager.as_ref().map(Pager::stats),
            balloon: balloon.as_deref().map(api::balloon_stats),
            exits,
            disks,
            guest_errors: api::guest_errors(memvisor_devices::guest_log::guest_log()),
            sharing: self
                .sharing
                .then(|| {
                    let attached = lifecycle.pager.as_ref().is_some_and(|p| p.stats().attached);
                    sharing::stats(attached)
                })
                .flatten(),
        })
    }
}

/// Stops a VM from another thread.
pub struct VmStopper(Mutex<mpsc::Sender<VmEvent>>);

impl VmStopper {
    pub fn stop(&self) {
        let _ = lock(&self.0).send(VmEvent::Exit(VmExit::Stopped));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the VM keeps of each disk after the buses own the device.
struct AttachedDisk {
    block_metrics: Arc<BlockMetrics>,
    transport_metrics: Arc<TransportMetrics>,
    /// A handle on the image for the final flush; `None` for read-only disks.
    file: Option<std::fs::File>,
}

impl AttachedDisk {
    fn sync(&self) -> std::io::Result<()> {
        self.file.as_ref().map_or(Ok(()), std::fs::File::sync_data)
    }
}

struct Devices {
    pio: Bus,
    mmio: Bus,
    disks: Vec<(DiskConfig, Mutex<AttachedDisk>)>,
    balloon: Option<BalloonControl>,
    /// The virtio devices' threads; dropping one stops it and unregisters its ioeventfds.
    notifiers: Vec<NotifyThread>,
    serial: Arc<Mutex<Serial<std::io::Stdout>>>,
    /// The transports with a device, in slot order.
    transports: Vec<Arc<Mutex<MmioTransport>>>,
}

/// Starts the thread that serves the queue notifications of the virtio-mmio slot at `base`.
fn start_notifier(
    name: String,
    kind: memvisor_seccomp::Thread,
    transport: &Arc<Mutex<MmioTransport>>,
    ioevents: &Arc<dyn IoEvents>,
    base: u64,
    nice: i32,
) -> Result<NotifyThread, VmmError> {
    // Thread names are at most 15 bytes on Linux, printable here.
    let name: String = name
        .chars()
        .filter(char::is_ascii_graphic)
        .take(15)
        .collect();
    NotifyThread::start(
        &name,
        kind,
        transport.clone(),
        ioevents.clone(),
        base + QUEUE_NOTIFY_OFFSET,
        nice,
    )
    .map_err(|e| VmmError::DeviceThread(name, e))
}

#[allow(clippy::too_many_arguments)]
fn build_devices(
    kvm: &Kvm,
    vm: &VmFd,
    mem: &Arc<memvisor_devices::GuestMem>,
    ram: &Arc<dyn GuestRam>,
    pager: Option<&Pager>,
    config: &VmConfig,
    restore: Option<&snapshot::Snapshot>,
    images: Vec<OpenedDisk>,
    events: mpsc::Sender<VmEvent>,
    vcpus: Arc<Vcpus>,
) -> Result<Devices, VmmError> {
    let mut pio = Bus::new();
    let serial_irq = EventFd::new(libc::EFD_NONBLOCK).map_err(VmmError::EventFd)?;
    vm.register_irqfd(&serial_irq, SERIAL_GSI)
        .map_err(kvm_err("KVM_IRQFD"))?;
    let serial = Arc::new(Mutex::new(match restore {
        Some(r) => Serial::restored(serial_irq, std::io::stdout(), &r.state.serial)
            .map_err(VmmError::Restore)?,
        None => Serial::new(serial_irq, std::io::stdout()),
    }));
    pio.insert(COM1_PORT, COM1_LEN, serial.clone())?;
    let mut transports = Vec::new();
    let exit_events = Mutex::new(events);
    let pause: Arc<dyn memvisor_devices::PauseVm> = vcpus.clone();
    let debug_exit = DebugExit::new(move |v| {
        // Like QEMU, the guest does not run on after the write: every vCPU stops now.
        vcpus.end();
        let _ = lock(&exit_events).send(VmEvent::Exit(VmExit::DebugExit(v)));
    });
    pio.insert(
        DEBUG_EXIT_PORT,
        DEBUG_EXIT_LEN,
        Arc::new(Mutex::new(debug_exit)),
    )?;

    let mut mmio = Bus::new();
    let mut disks = Vec::new();
    let mut balloon = None;
    let mut notifiers = Vec::new();
    let ioevents: Arc<dyn IoEvents> = Arc::new(ioevents::KvmIoEvents::new(kvm, vm)?);
    let mut images = images.into_iter();
    let mut devices = config.disks.iter().map(Some).collect::<Vec<_>>();
    if config.balloon {
        devices.push(None);
    }
    if devices.len() > MMIO_SLOTS {
        return Err(VmmError::TooManyDevices(devices.len()));
    }
    for (slot, gsi) in (0..MMIO_SLOTS).zip(IRQ_BASE..) {
        let base = MMIO_BASE + slot as u64 * MMIO_SLOT_SIZE;
        let Some(device) = devices.get(slot) else {
            let empty = MmioTransport::new(None, mem.clone(), None);
            mmio.insert(base, MMIO_SLOT_SIZE, Arc::new(Mutex::new(empty)))?;
            continue;
        };
        let irq = EventFd::new(libc::EFD_NONBLOCK).map_err(VmmError::EventFd)?;
        vm.register_irqfd(&irq, gsi).map_err(kvm_err("KVM_IRQFD"))?;
        let (name, kind, transport) = match device {
            Some(disk) => {
                let index = u8::try_from(disks.len()).expect("at most 8 disks");
                let OpenedDisk { image, indirect } = images
                    .next()
                    .expect("Opened::open opens every disk of the config");
                let block = Block::with_image(image, &disk.id, ram.clone(), index)?
                    .pause_when_full(pause.clone());
                if let Some(p) = pager {
                    let reader = block.image_reader().map_err(VmmError::Memory)?;
                    p.attach_disk_with(index, reader, indirect)?;
                }
                let block_metrics = block.metrics();
                let file = block.sync_handle().map_err(VmmError::Memory)?;
                let transport = MmioTransport::new(Some(Box::new(block)), mem.clone(), Some(irq));
                let transport_metrics = transport.metrics();
                let transport = Arc::new(Mutex::new(transport));
                mmio.insert(base, MMIO_SLOT_SIZE, transport.clone())?;
                let attached = AttachedDisk {
                    block_metrics,
                    transport_metrics,
                    file,
                };
                disks.push(((*disk).clone(), Mutex::new(attached)));
                let name = format!("blk-{}", disk.id);
                (name, memvisor_seccomp::Thread::Block, transport)
            }
            None => {
                let device = Balloon::new(ram.clone());
                let state = device.state();
                let transport = Arc::new(Mutex::new(MmioTransport::new(
                    Some(Box::new(device)),
                    mem.clone(),
                    Some(irq),
                )));
                mmio.insert(base, MMIO_SLOT_SIZE, transport.clone())?;
                balloon = Some(BalloonControl {
                    state,
                    transport: transport.clone(),
                });
                let kind = memvisor_seccomp::Thread::Balloon;
                ("balloon".to_owned(), kind, transport)
            }
        };
        if let Some(r) = restore {
            // Before its thread starts: the eventfds of a ready driver are registered then.
            let saved = r.state.transports.get(transports.len()).ok_or_else(|| {
                VmmError::Restore(format!("the snapshot has no state for device {name}"))
            })?;
            lock(&transport)
                .load(saved)
                .map_err(|e| VmmError::Restore(format!("device {name}: {e}")))?;
        }
        transports.push(transport.clone());
        let nice = config.serving_nice;
        notifiers.push(start_notifier(
            name, kind, &transport, &ioevents, base, nice,
        )?);
    }
    Ok(Devices {
        pio,
        mmio,
        disks,
        balloon,
        notifiers,
        serial,
        transports,
    })
}
