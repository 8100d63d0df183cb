//! The virtio-mmio transport (virtio 1.2 §4.2, version 2 "modern" register layout).
//!
//! memvisor lays out its transports like QEMU microvm: [`MMIO_BASE`] + slot × [`MMIO_SLOT_SIZE`],
//! [`MMIO_SLOTS`] slots, interrupt GSI [`IRQ_BASE`] + slot. An empty slot answers with the magic
//! value, version 2 and device ID 0, so a driver probes memvisor and QEMU the same way.
//!
//! Register protocol the driver follows (and this transport enforces):
//! 1. write 0 to Status (reset), then ACKNOWLEDGE, then DRIVER;
//! 2. read DeviceFeatures (two 32-bit halves chosen by DeviceFeaturesSel), write the accepted
//!    subset to DriverFeatures, set FEATURES_OK and read Status back: the bit stays only if the
//!    subset was acceptable (offered features only, VERSION_1 included);
//! 3. per queue: QueueSel, read QueueNumMax, write QueueNum and the three ring addresses, then
//!    QueueReady = 1 (queue registers are ignored while the queue is ready);
//! 4. set DRIVER_OK; from then on a write to QueueNotify processes that queue.
//!
//! A driver that breaks the protocol (a refused FEATURES_OK or DRIVER_OK, a write to a register
//! that takes none now) is counted and logged through [`crate::guest_log`], at a rate it cannot
//! raise however often it tries.
//!
//! A QueueNotify write reaches the transport in one of two ways. With a [`NotifyThread`]
//! attached, the hypervisor signals the queue's eventfd and the device thread calls
//! [`MmioTransport::kernel_notify`] (see [`super::notify`] for the protocol); otherwise, and for
//! any queue whose eventfd the hypervisor refused, the write is an MMIO exit and the vCPU thread
//! processes the queue through [`BusDevice::write`]. Both end in the same code under the same
//! mutex.
//!
//! [`NotifyThread`]: super::notify::NotifyThread

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use super::ioevents::IoEvents;
use super::{status, VirtioDevice, VIRTIO_F_VERSION_1};
use crate::{BusDevice, GuestMem};

pub const MMIO_BASE: u64 = 0xfeb0_0000;
pub const MMIO_SLOT_SIZE: u64 = 0x200;
pub const MMIO_SLOTS: usize = 8;
pub const IRQ_BASE: u32 = 5;

/// What the MagicValue register reads: "virt".
pub const MAGIC: u32 = 0x7472_6976;
const VERSION: u32 = 2;
const VENDOR_ID: u32 = 0x4d56_4d56; // "VMVM"
/// Offset of the QueueNotify register in a slot: the address a device thread's eventfds watch.
pub const QUEUE_NOTIFY_OFFSET: u64 = reg::QUEUE_NOTIFY;

/// Register offsets in a slot (virtio 1.2 §4.2.2).
pub mod reg {
    pub const MAGIC: u64 = 0x000;
    pub const VERSION: u64 = 0x004;
    pub const DEVICE_ID: u64 = 0x008;
    pub const VENDOR_ID: u64 = 0x00c;
    pub const DEVICE_FEATURES: u64 = 0x010;
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    pub const DRIVER_FEATURES: u64 = 0x020;
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    pub const QUEUE_SEL: u64 = 0x030;
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    pub const QUEUE_NUM: u64 = 0x038;
    pub const QUEUE_READY: u64 = 0x044;
    pub const QUEUE_NOTIFY: u64 = 0x050;
    pub const INTERRUPT_STATUS: u64 = 0x060;
    pub const INTERRUPT_ACK: u64 = 0x064;
    pub const STATUS: u64 = 0x070;
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    pub const QUEUE_DRIVER_HIGH: u64 = 0x094;
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    pub const QUEUE_DEVICE_HIGH: u64 = 0x0a4;
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    /// Where the device's configuration space starts.
    pub const CONFIG: u64 = 0x100;
}

/// Interrupt-status bit: a used buffer was added.
const INT_VRING: u32 = 1;
/// Interrupt-status bit: the configuration space changed.
const INT_CONFIG: u32 = 2;
/// `VIRTQ_AVAIL_F_NO_INTERRUPT`: the driver polls and wants no interrupt for used buffers.
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Whether the driver asked for an interrupt after new used buffers (virtio 1.2 §2.7.7: without
/// VIRTIO_F_EVENT_IDX, which memvisor does not offer, it says so with the avail ring's flags).
/// `virtio-queue` leaves this flag to the device. A polling driver (the guest kit) sets it, and
/// then no interrupt is raised at all.
fn driver_wants_interrupt(queue: &mut Queue, mem: &GuestMem) -> bool {
    if queue.event_idx_enabled() {
        return queue.needs_notification(mem).unwrap_or(true);
    }
    // Order the used-ring writes before reading the driver's flags.
    std::sync::atomic::fence(Ordering::SeqCst);
    mem.read_obj::<u16>(GuestAddress(queue.avail_ring()))
        .map_or(true, |flags| flags & AVAIL_F_NO_INTERRUPT == 0)
}

/// One queue of a transport in a snapshot (`virtio_queue::QueueState`'s fields).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueSnapshot {
    pub size: u16,
    pub ready: bool,
    pub desc_table: u64,
    pub avail_ring: u64,
    pub used_ring: u64,
    pub next_avail: u16,
    pub next_used: u16,
    pub event_idx_enabled: bool,
}

/// A transport's registers, its queues and its device's own state, in a snapshot.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TransportSnapshot {
    pub device_type: u32,
    pub status: u32,
    pub device_features_sel: u32,
    pub driver_features_sel: u32,
    pub driver_features: u64,
    pub queue_sel: u32,
    pub interrupt_status: u32,
    pub queues: Vec<QueueSnapshot>,
    pub device: serde_json::Value,
}

/// Counters of one transport.
#[derive(Debug, Default)]
pub struct TransportMetrics {
    /// Queue notifications processed, by either path.
    pub notifies: AtomicU32,
    /// Of those, the ones the device thread took from an eventfd (several guest writes between
    /// two reads of the eventfd count once).
    pub kernel_notifies: AtomicU32,
    /// Queue eventfds the hypervisor refused to register: those queues stay on the
    /// synchronous path.
    pub ioevent_refusals: AtomicU32,
    pub interrupts: AtomicU32,
}

/// The queue eventfds of a transport served by a device thread.
struct QueueEvents {
    events: Arc<dyn IoEvents>,
    /// Guest-physical address of this slot's QueueNotify register.
    addr: u64,
    /// One per queue; the device thread holds the other handles.
    fds: Vec<EventFd>,
    /// Which of `fds` are registered now.
    registered: Vec<bool>,
    /// Whether a refusal has been logged (once per transport).
    refusal_logged: bool,
}

impl QueueEvents {
    /// Registers the eventfd of each ready queue; a refused one stays on the synchronous path.
    fn register(&mut self, queues: &[Queue], metrics: &TransportMetrics) {
        for (index, q) in queues.iter().enumerate() {
            let (Some(fd), Ok(value)) = (self.fds.get(index), u32::try_from(index)) else {
                continue;
            };
            if !q.ready() || self.registered[index] {
                continue;
            }
            match self.events.register(self.addr, value, fd) {
                Ok(()) => self.registered[index] = true,
                Err(e) => {
                    metrics.ioevent_refusals.fetch_add(1, Ordering::Relaxed);
                    if !self.refusal_logged {
                        self.refusal_logged = true;
                        tracing::warn!(
                            "virtio-mmio at {:#x}: the hypervisor refused a queue eventfd, so \
                             notifications return to user space (logged once): {e}",
                            self.addr
                        );
                    }
                }
            }
        }
    }

    fn unregister(&mut self) {
        for (index, fd) in self.fds.iter().enumerate() {
            if !std::mem::take(&mut self.registered[index]) {
                continue;
            }
            let Ok(value) = u32::try_from(index) else {
                continue;
            };
            if let Err(e) = self.events.unregister(self.addr, value, fd) {
                tracing::warn!(
                    "virtio-mmio at {:#x}: unregistering the eventfd of queue {index} failed: {e}",
                    self.addr
                );
            }
        }
    }
}

/// One virtio-mmio slot, empty or holding a device.
pub struct MmioTransport {
    device: Option<Box<dyn VirtioDevice>>,
    mem: Arc<GuestMem>,
    irq: Option<EventFd>,
    queues: Vec<Queue>,
    status: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    queue_sel: u32,
    interrupt_status: AtomicU32,
    metrics: Arc<TransportMetrics>,
    /// Set while a device thread serves this transport's notifications.
    queue_events: Option<QueueEvents>,
}

impl MmioTransport {
    /// A slot with `device` in it, or an empty slot when `device` is `None`.
    pub fn new(
        device: Option<Box<dyn VirtioDevice>>,
        mem: Arc<GuestMem>,
        irq: Option<EventFd>,
    ) -> Self {
        let queues = device
            .as_ref()
            .map(|d| {
                d.queue_max_sizes()
                    .iter()
                    .map(|&max| Queue::new(max).expect("queue sizes are powers of two"))
                    .collect()
            })
            .unwrap_or_default();
        MmioTransport {
            device,
            mem,
            irq,
            queues,
            status: 0,
            device_features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
            queue_sel: 0,
            interrupt_status: AtomicU32::new(0),
            metrics: Arc::default(),
            queue_events: None,
        }
    }

    /// Creates one eventfd per queue, to be registered with `events` for writes of the queue's
    /// index to `notify_addr` while the driver is ready, and returns the device thread's handles.
    pub(crate) fn attach_ioevents(
        &mut self,
        events: Arc<dyn IoEvents>,
        notify_addr: u64,
    ) -> std::io::Result<Vec<EventFd>> {
        self.detach_ioevents();
        let fds = (0..self.queues.len())
            .map(|_| EventFd::new(libc::EFD_NONBLOCK))
            .collect::<std::io::Result<Vec<_>>>()?;
        let theirs = fds
            .iter()
            .map(EventFd::try_clone)
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut qe = QueueEvents {
            events,
            addr: notify_addr,
            registered: vec![false; fds.len()],
            fds,
            refusal_logged: false,
        };
        if self.driver_ready() {
            qe.register(&self.queues, &self.metrics);
        }
        self.queue_events = Some(qe);
        Ok(theirs)
    }

    /// Unregisters and forgets the queue eventfds: notifications go back to the vCPU threads.
    pub(crate) fn detach_ioevents(&mut self) {
        if let Some(mut qe) = self.queue_events.take() {
            qe.unregister();
        }
    }

    /// How many queues the device has.
    pub(crate) fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// A notification of queue `index` the device thread took from its eventfd.
    pub(crate) fn kernel_notify(&mut self, index: u32) {
        self.metrics.kernel_notifies.fetch_add(1, Ordering::Relaxed);
        self.notify(index);
    }

    /// DRIVER_OK is set and the device does not need a reset.
    fn driver_ready(&self) -> bool {
        self.status & status::DRIVER_OK != 0 && self.status & status::DEVICE_NEEDS_RESET == 0
    }

    pub fn metrics(&self) -> Arc<TransportMetrics> {
        self.metrics.clone()
    }

    fn reset(&mut self) {
        if let Some(qe) = self.queue_events.as_mut() {
            qe.unregister();
        }
        if let Some(d) = self.device.as_mut() {
            d.reset();
        }
        self.queues.iter_mut().for_each(QueueT::reset);
        self.status = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.driver_features = 0;
        self.queue_sel = 0;
        self.interrupt_status.store(0, Ordering::SeqCst);
    }

    fn selected_queue(&mut self) -> Option<&mut Queue> {
        self.queues.get_mut(self.queue_sel as usize)
    }

    /// Queue registers may change only between FEATURES_OK and DRIVER_OK, on a queue that is not ready.
    fn queue_config_allowed(&self) -> bool {
        self.status & status::FEATURES_OK != 0 && self.status & status::DRIVER_OK == 0
    }

    fn read_reg(&self, offset: u64) -> u32 {
        let Some(dev) = self.device.as_ref() else {
            return match offset {
                reg::MAGIC => MAGIC,
                reg::VERSION => VERSION,
                reg::VENDOR_ID => VENDOR_ID,
                _ => 0,
            };
        };
        let q = self.queues.get(self.queue_sel as usize);
        match offset {
            reg::MAGIC => MAGIC,
            reg::VERSION => VERSION,
            reg::DEVICE_ID => dev.device_type(),
            reg::VENDOR_ID => VENDOR_ID,
            reg::DEVICE_FEATURES => match self.device_features_sel {
                0 => u32::try_from(dev.features() & 0xffff_ffff).unwrap_or(0),
                1 => u32::try_from(dev.features() >> 32).unwrap_or(0),
                _ => 0,
            },
            reg::QUEUE_NUM_MAX => q.map_or(0, |q| u32::from(q.max_size())),
            reg::QUEUE_READY => q.map_or(0, |q| u32::from(q.ready())),
            reg::INTERRUPT_STATUS => self.interrupt_status.load(Ordering::SeqCst),
            reg::STATUS => self.status,
            reg::CONFIG_GENERATION => 0,
            _ => 0,
        }
    }

    fn write_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let Some(dev) = self.device.as_mut() else {
            return;
        };
        let newly = value & !self.status;
        let mut value = value;
        if newly & status::FEATURES_OK != 0 {
            let ok = self.driver_features & !dev.features() == 0
                && self.driver_features & VIRTIO_F_VERSION_1 != 0;
            if !ok {
                crate::guest_error!(
                    RefusedFeatures,
                    "virtio driver accepted features {:#x} of {:#x}: refusing FEATURES_OK",
                    self.driver_features,
                    dev.features()
                );
                value &= !status::FEATURES_OK;
            }
        }
        if newly & status::DRIVER_OK != 0 {
            let valid = self
                .queues
                .iter()
                .filter(|q| q.ready())
                .all(|q| q.is_valid(self.mem.as_ref()));
            if value & status::FEATURES_OK == 0 || !valid {
                crate::guest_error!(
                    RefusedDriverOk,
                    "virtio driver set DRIVER_OK without valid features and queues"
                );
                value |= status::DEVICE_NEEDS_RESET;
            } else {
                dev.activate(self.driver_features);
            }
        }
        self.status = value;
        if newly & status::DRIVER_OK != 0 && self.driver_ready() {
            if let Some(qe) = self.queue_events.as_mut() {
                qe.register(&self.queues, &self.metrics);
            }
        }
    }

    fn notify(&mut self, index: u32) {
        self.metrics.notifies.fetch_add(1, Ordering::Relaxed);
        if !self.driver_ready() {
            return;
        }
        let (Some(dev), Some(queue)) = (self.device.as_mut(), self.queues.get_mut(index as usize))
        else {
            return;
        };
        if !queue.ready() {
            return;
        }
        let used = dev.process_queue(index as usize, queue, &self.mem);
        if used && driver_wants_interrupt(queue, &self.mem) {
            self.interrupt(INT_VRING);
        }
    }

    fn interrupt(&self, why: u32) {
        self.interrupt_status.fetch_or(why, Ordering::SeqCst);
        if let Some(irq) = &self.irq {
            self.metrics.interrupts.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = irq.write(1) {
                tracing::warn!("virtio interrupt failed: {e}");
            }
        }
    }

    /// Serves every ready queue's pending buffers: at a snapshot, so that no request the driver
    /// made is left half-seen (the VM is paused; the caller holds the transport's lock, so the
    /// device thread is between requests), and at a restore, for buffers the driver made
    /// available after the last notification was served.
    pub fn serve_pending(&mut self) {
        for index in 0..self.queues.len() {
            if self.queues[index].ready() {
                self.notify(u32::try_from(index).unwrap_or(u32::MAX));
            }
        }
    }

    /// The transport's state for a snapshot, once every request made is served
    /// ([`Self::serve_pending`]).
    pub fn save(&mut self) -> TransportSnapshot {
        if self.driver_ready() {
            self.serve_pending();
        }
        TransportSnapshot {
            device_type: self.device.as_ref().map_or(0, |d| d.device_type()),
            status: self.status,
            device_features_sel: self.device_features_sel,
            driver_features_sel: self.driver_features_sel,
            driver_features: self.driver_features,
            queue_sel: self.queue_sel,
            interrupt_status: self.interrupt_status.load(Ordering::SeqCst),
            queues: self
                .queues
                .iter()
                .map(|q| {
                    let s = q.state();
                    QueueSnapshot {
                        size: s.size,
                        ready: s.ready,
                        desc_table: s.desc_table,
                        avail_ring: s.avail_ring,
                        used_ring: s.used_ring,
                        next_avail: s.next_avail,
                        next_used: s.next_used,
                        event_idx_enabled: s.event_idx_enabled,
                    }
                })
                .collect(),
            device: self
                .device
                .as_ref()
                .map_or(serde_json::Value::Null, |d| d.save_state()),
        }
    }

    /// Takes back a state [`Self::save`] gave, on a transport built with the same device and
    /// not yet served by a device thread; checked, so a snapshot of another device, or with
    /// queues outside guest memory, is refused rather than run.
    pub fn load(&mut self, s: &TransportSnapshot) -> Result<(), String> {
        let ty = self.device.as_ref().map_or(0, |d| d.device_type());
        if s.device_type != ty || s.queues.len() != self.queues.len() {
            return Err(format!(
                "the snapshot has device type {} with {} queues where this VM has {ty} with {}",
                s.device_type,
                s.queues.len(),
                self.queues.len()
            ));
        }
        for (q, qs) in self.queues.iter_mut().zip(&s.queues) {
            q.set_size(qs.size);
            q.set_desc_table_address(Some(lo(qs.desc_table)), Some(hi(qs.desc_table)));
            q.set_avail_ring_address(Some(lo(qs.avail_ring)), Some(hi(qs.avail_ring)));
            q.set_used_ring_address(Some(lo(qs.used_ring)), Some(hi(qs.used_ring)));
            q.set_next_avail(qs.next_avail);
            q.set_next_used(qs.next_used);
            q.set_event_idx(qs.event_idx_enabled);
            q.set_ready(qs.ready);
            if q.ready() && (q.size() != qs.size || !q.is_valid(self.mem.as_ref())) {
                return Err("the snapshot has a virtio queue this VM cannot use".into());
            }
        }
        self.status = s.status;
        self.device_features_sel = s.device_features_sel;
        self.driver_features_sel = s.driver_features_sel;
        self.driver_features = s.driver_features;
        self.queue_sel = s.queue_sel;
        self.interrupt_status
            .store(s.interrupt_status, Ordering::SeqCst);
        if let Some(dev) = self.device.as_mut() {
            if self.status & status::DRIVER_OK != 0 {
                dev.activate(self.driver_features);
            }
            dev.load_state(&s.device)?;
        }
        Ok(())
    }

    /// Runs the device's [`VirtioDevice::on_request`] (for the VMM, outside guest notifications)
    /// and interrupts the driver if it returned buffers.
    pub fn device_request(&mut self) {
        if self.status & status::DRIVER_OK == 0 {
            return;
        }
        let Some(dev) = self.device.as_mut() else {
            return;
        };
        if dev.on_request(&mut self.queues, &self.mem) {
            self.interrupt(INT_VRING);
        }
    }

    /// Tells the driver the configuration space changed.
    pub fn config_changed(&self) {
        if self.status & status::DRIVER_OK != 0 {
            self.interrupt(INT_CONFIG);
        }
    }

    fn write_reg(&mut self, offset: u64, value: u32) {
        if self.device.is_none() {
            return;
        }
        let queue_ok = self.queue_config_allowed();
        match offset {
            reg::DEVICE_FEATURES_SEL => self.device_features_sel = value,
            reg::DRIVER_FEATURES_SEL => self.driver_features_sel = value,
            reg::DRIVER_FEATURES
                if self.status & status::DRIVER != 0 && self.status & status::FEATURES_OK == 0 =>
            {
                match self.driver_features_sel {
                    0 => {
                        self.driver_features =
                            (self.driver_features & !0xffff_ffff) | u64::from(value)
                    }
                    1 => {
                        self.driver_features =
                            (self.driver_features & 0xffff_ffff) | (u64::from(value) << 32)
                    }
                    _ => {}
                }
            }
            reg::QUEUE_SEL => self.queue_sel = value,
            reg::QUEUE_NOTIFY => self.notify(value),
            reg::INTERRUPT_ACK => {
                self.interrupt_status.fetch_and(!value, Ordering::SeqCst);
            }
            reg::STATUS => self.write_status(value),
            reg::QUEUE_NUM | reg::QUEUE_READY | reg::QUEUE_DESC_LOW..=reg::QUEUE_DEVICE_HIGH
                if queue_ok =>
            {
                let Some(q) = self.selected_queue() else {
                    return;
                };
                if q.ready() && offset != reg::QUEUE_READY {
                    return;
                }
                match offset {
                    reg::QUEUE_NUM => q.set_size(u16::try_from(value).unwrap_or(0)),
                    reg::QUEUE_READY => q.set_ready(value == 1),
                    reg::QUEUE_DESC_LOW => q.set_desc_table_address(Some(value), None),
                    reg::QUEUE_DESC_HIGH => q.set_desc_table_address(None, Some(value)),
                    reg::QUEUE_DRIVER_LOW => q.set_avail_ring_address(Some(value), None),
                    reg::QUEUE_DRIVER_HIGH => q.set_avail_ring_address(None, Some(value)),
                    reg::QUEUE_DEVICE_LOW => q.set_used_ring_address(Some(value), None),
                    reg::QUEUE_DEVICE_HIGH => q.set_used_ring_address(None, Some(value)),
                    _ => {}
                }
            }
            _ => crate::guest_error!(
                IgnoredRegisterWrite,
                "virtio-mmio: ignored write of {value:#x} to {offset:#x}"
            ),
        }
    }
}

fn lo(v: u64) -> u32 {
    u32::try_from(v & 0xffff_ffff).unwrap_or(0)
}

fn hi(v: u64) -> u32 {
    u32::try_from(v >> 32).unwrap_or(0)
}

impl BusDevice for MmioTransport {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset >= reg::CONFIG {
            match self.device.as_ref() {
                Some(d) => d.read_config(offset - reg::CONFIG, data),
                None => data.fill(0),
            }
            return;
        }
        if data.len() != 4 || offset % 4 != 0 {
            data.fill(0);
            return;
        }
        data.copy_from_slice(&self.read_reg(offset).to_le_bytes());
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset >= reg::CONFIG {
            if let Some(d) = self.device.as_mut() {
                d.write_config(offset - reg::CONFIG, data);
            }
            return;
        }
        match <[u8; 4]>::try_from(data) {
            Ok(bytes) if offset % 4 == 0 => self.write_reg(offset, u32::from_le_bytes(bytes)),
            _ if self.device.is_none() => {}
            _ => crate::guest_error!(
                IgnoredRegisterWrite,
                "virtio-mmio: ignored {}-byte write to {offset:#x}",
                data.len()
            ),
        }
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test values are small by construction
pub(crate) mod tests {
    use super::*;
    use vm_memory::GuestAddress;

    /// A device that records which queues were notified.
    pub(crate) struct Dummy {
        pub(crate) processed: Arc<AtomicU32>,
    }

    impl VirtioDevice for Dummy {
        fn device_type(&self) -> u32 {
            42
        }
        fn queue_max_sizes(&self) -> &[u16] {
            &[16]
        }
        fn features(&self) -> u64 {
            VIRTIO_F_VERSION_1 | 1
        }
        fn read_config(&self, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn process_queue(&mut self, _index: usize, _queue: &mut Queue, _mem: &GuestMem) -> bool {
            self.processed.fetch_add(1, Ordering::SeqCst);
            true
        }
    }

    pub(crate) fn mem() -> Arc<GuestMem> {
        Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap())
    }

    fn r(t: &mut MmioTransport, off: u64) -> u32 {
        let mut b = [0u8; 4];
        t.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    pub(crate) fn w(t: &mut MmioTransport, off: u64, v: u32) {
        t.write(off, &v.to_le_bytes());
    }

    fn set_up(t: &mut MmioTransport, features_hi: u32) {
        w(t, reg::STATUS, 0);
        w(t, reg::STATUS, status::ACKNOWLEDGE | status::DRIVER);
        w(t, reg::DRIVER_FEATURES_SEL, 1);
        w(t, reg::DRIVER_FEATURES, features_hi);
        w(t, reg::DRIVER_FEATURES_SEL, 0);
        w(t, reg::DRIVER_FEATURES, 1);
        w(
            t,
            reg::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
        );
    }

    #[test]
    fn empty_slot_probes_like_microvm() {
        let mut t = MmioTransport::new(None, mem(), None);
        assert_eq!(r(&mut t, reg::MAGIC), MAGIC);
        assert_eq!(r(&mut t, reg::VERSION), 2);
        assert_eq!(r(&mut t, reg::DEVICE_ID), 0);
        w(&mut t, reg::STATUS, status::ACKNOWLEDGE);
        assert_eq!(r(&mut t, reg::STATUS), 0);
    }

    #[test]
    fn full_handshake_then_notify() {
        let processed = Arc::new(AtomicU32::new(0));
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let dev = Dummy {
            processed: processed.clone(),
        };
        let mut t = MmioTransport::new(Some(Box::new(dev)), mem(), Some(irq.try_clone().unwrap()));
        assert_eq!(r(&mut t, reg::DEVICE_ID), 42);
        w(&mut t, reg::DEVICE_FEATURES_SEL, 1);
        assert_eq!(r(&mut t, reg::DEVICE_FEATURES), 1);
        set_up(&mut t, 1);
        assert_ne!(r(&mut t, reg::STATUS) & status::FEATURES_OK, 0);
        assert_eq!(r(&mut t, reg::QUEUE_NUM_MAX), 16);
        w(&mut t, reg::QUEUE_NUM, 16);
        w(&mut t, reg::QUEUE_DESC_LOW, 0x1000);
        w(&mut t, reg::QUEUE_DRIVER_LOW, 0x2000);
        w(&mut t, reg::QUEUE_DEVICE_LOW, 0x3000);
        w(&mut t, reg::QUEUE_READY, 1);
        // A notify before DRIVER_OK does nothing.
        w(&mut t, reg::QUEUE_NOTIFY, 0);
        assert_eq!(processed.load(Ordering::SeqCst), 0);
        w(
            &mut t,
            reg::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK,
        );
        assert_eq!(r(&mut t, reg::STATUS) & status::DEVICE_NEEDS_RESET, 0);
        // Queue registers are frozen now.
        w(&mut t, reg::QUEUE_DESC_LOW, 0x5000);
        w(&mut t, reg::QUEUE_NOTIFY, 0);
        w(&mut t, reg::QUEUE_NOTIFY, 7);
        assert_eq!(processed.load(Ordering::SeqCst), 1);
        assert_eq!(r(&mut t, reg::INTERRUPT_STATUS), INT_VRING);
        assert_eq!(irq.read().unwrap(), 1);
        // A polling driver suppresses interrupts through the avail ring's flags.
        w(&mut t, reg::INTERRUPT_ACK, INT_VRING);
        t.mem
            .write_obj(AVAIL_F_NO_INTERRUPT, GuestAddress(0x2000))
            .unwrap();
        w(&mut t, reg::QUEUE_NOTIFY, 0);
        assert_eq!(processed.load(Ordering::SeqCst), 2);
        assert_eq!(r(&mut t, reg::INTERRUPT_STATUS), 0);
        assert!(irq.read().is_err(), "no interrupt was signalled");
        t.mem.write_obj(0u16, GuestAddress(0x2000)).unwrap();
        w(&mut t, reg::QUEUE_NOTIFY, 0);
        w(&mut t, reg::INTERRUPT_ACK, INT_VRING);
        assert_eq!(r(&mut t, reg::INTERRUPT_STATUS), 0);
        assert_eq!(
            r(&mut t, 0x100 + 3),
            0x0303_0303,
            "config reads go to the device at any offset"
        );
        w(&mut t, reg::STATUS, 0);
        assert_eq!(r(&mut t, reg::STATUS), 0);
        assert_eq!(r(&mut t, reg::QUEUE_READY), 0);
    }

    #[test]
    fn refuses_features_it_did_not_offer_or_legacy_drivers() {
        let dev = Dummy {
            processed: Arc::default(),
        };
        let mut t = MmioTransport::new(Some(Box::new(dev)), mem(), None);
        set_up(&mut t, 1 | 2);
        assert_eq!(r(&mut t, reg::STATUS) & status::FEATURES_OK, 0);
        set_up(&mut t, 0);
        assert_eq!(r(&mut t, reg::STATUS) & status::FEATURES_OK, 0);
    }

    #[test]
    fn driver_ok_with_a_bad_queue_needs_reset() {
        let processed = Arc::new(AtomicU32::new(0));
        let dev = Dummy {
            processed: processed.clone(),
        };
        let mut t = MmioTransport::new(Some(Box::new(dev)), mem(), None);
        set_up(&mut t, 1);
        w(&mut t, reg::QUEUE_NUM, 16);
        w(&mut t, reg::QUEUE_DESC_LOW, 0xfff0_0000); // outside guest memory
        w(&mut t, reg::QUEUE_READY, 1);
        w(
            &mut t,
            reg::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK,
        );
        assert_ne!(r(&mut t, reg::STATUS) & status::DEVICE_NEEDS_RESET, 0);
        w(&mut t, reg::QUEUE_NOTIFY, 0);
        assert_eq!(processed.load(Ordering::SeqCst), 0);
    }

    proptest::proptest! {
        #[test]
        fn random_register_traffic_never_panics(ops in proptest::collection::vec((0u64..0x140, proptest::prelude::any::<u32>(), proptest::prelude::any::<bool>()), 0..200)) {
            let dev = Dummy { processed: Arc::default() };
            let mut t = MmioTransport::new(Some(Box::new(dev)), mem(), None);
            for (off, v, is_write) in ops {
                if is_write { w(&mut t, off, v) } else { r(&mut t, off); }
            }
        }
    }
}
