//! Queue notifications that do not return to user space: ioeventfds and the device thread.
//!
//! Without this, a driver's write to `QueueNotify` is an MMIO exit: the vCPU thread leaves
//! `KVM_RUN`, finds the transport on the bus and processes the queue before the guest runs on.
//! With it, the hypervisor completes the write itself and signals an eventfd, and the device's
//! own thread processes the queue while the vCPU keeps running. The protocol, step by step:
//!
//! 1. The VMM starts a [`NotifyThread`] for each virtio-mmio slot that holds a device with
//!    queues. [`NotifyThread::start`] creates one eventfd per queue, hands the transport its
//!    copies and the VMM's [`IoEvents`] (the transport never sees KVM), and starts the thread,
//!    named after the device, which waits on those eventfds and a stop eventfd with `poll`. It
//!    returns once the thread says it is ready.
//! 2. When the driver sets DRIVER_OK and the transport accepts it, the transport registers the
//!    eventfd of each ready queue for a 4-byte write of that queue's index to its `QueueNotify`
//!    address (a datamatch per queue, so the thread knows which queue, and a write of any other
//!    value still exits to user space and is ignored there as before). A queue whose
//!    registration the hypervisor refuses stays on the synchronous path: the refusal is logged
//!    once per transport and counted in [`super::mmio::TransportMetrics::ioevent_refusals`].
//! 3. The thread wakes, reads the eventfd (several writes since its last read count as one
//!    notification), locks the transport — the same mutex the vCPUs take for register
//!    accesses — and processes the queue exactly as the synchronous path does, interrupt
//!    included (the device's irqfd). The device reaches guest RAM through its `GuestRam`, which
//!    may block while the pager serves faults: that stalls this thread, not a vCPU.
//! 4. A reset (Status written with 0) unregisters the eventfds before the device forgets its
//!    queues; the next DRIVER_OK registers them again. A notification the thread picks up after
//!    the reset finds the transport without DRIVER_OK and does nothing.
//! 5. Dropping the [`NotifyThread`] (the VM ended) signals the stop eventfd and joins the thread
//!    once it has finished the queue it was processing, then unregisters the eventfds and takes
//!    them from the transport, so a late guest write goes back to the synchronous path. A thread
//!    that does not finish within [`STOP_WAIT`] (its device blocked in guest memory the pager
//!    cannot serve, say) is left behind with a warning rather than hang the VM's end.
//! 6. Should the thread fail (`poll` or an eventfd returns an error), it unregisters the
//!    eventfds itself and processes every queue once, in case it took a notification it could
//!    not act on; the vCPU threads serve the queues from then on.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::EventFd;

use super::ioevents::IoEvents;
use super::mmio::MmioTransport;

fn lock(t: &Mutex<MmioTransport>) -> std::sync::MutexGuard<'_, MmioTransport> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long dropping a [`NotifyThread`] waits for the thread and for the transport's mutex.
pub const STOP_WAIT: Duration = Duration::from_secs(2);

/// The thread that serves one transport's kernel-delivered queue notifications.
pub struct NotifyThread {
    name: String,
    transport: Arc<Mutex<MmioTransport>>,
    stop: EventFd,
    /// Disconnected when the thread has returned (it holds the sender).
    ended: mpsc::Receiver<()>,
    handle: Option<JoinHandle<()>>,
}

impl NotifyThread {
    /// Starts the thread `name` for `transport`, whose `QueueNotify` register is at the
    /// guest-physical address `notify_addr`, and gives the transport `events` to register its
    /// eventfds with once the driver is ready. Returns after the thread is ready. The thread
    /// runs at `nice` (0: the VMM's own priority; [`crate::priority`]) and installs the seccomp
    /// filter of `kind` before it serves the queues.
    pub fn start(
        name: &str,
        kind: memvisor_seccomp::Thread,
        transport: Arc<Mutex<MmioTransport>>,
        events: Arc<dyn IoEvents>,
        notify_addr: u64,
        nice: i32,
    ) -> io::Result<Self> {
        let stop = EventFd::new(libc::EFD_NONBLOCK)?;
        let thread_stop = stop.try_clone()?;
        let queues = lock(&transport).attach_ioevents(events, notify_addr)?;
        let (ready_tx, ended) = mpsc::sync_channel(1);
        let thread_transport = transport.clone();
        let spawned = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                crate::priority::serve_at(nice);
                memvisor_seccomp::confine(kind);
                let _ = ready_tx.send(());
                if let Err(why) = serve(&thread_transport, &queues, &thread_stop) {
                    fall_back(&thread_transport, &why);
                }
                drop(ready_tx);
            });
        let handle = match spawned {
            Ok(h) => h,
            Err(e) => {
                lock(&transport).detach_ioevents();
                return Err(e);
            }
        };
        let thread = NotifyThread {
            name: name.to_owned(),
            transport,
            stop,
            ended,
            handle: Some(handle),
        };
        // A thread that died before saying so dropped its sender: report that as an error
        // (dropping `thread` takes the eventfds back from the transport).
        thread
            .ended
            .recv()
            .map_err(|_| io::Error::other("the device thread ended before it was ready"))?;
        Ok(thread)
    }
}

impl Drop for NotifyThread {
    fn drop(&mut self) {
        let deadline = Instant::now() + STOP_WAIT;
        let name = &self.name;
        match self.stop.write(1) {
            Err(e) => tracing::error!("cannot stop device thread {name}: {e}"),
            Ok(_) => match self.ended.recv_timeout(STOP_WAIT) {
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if self.handle.take().is_some_and(|h| h.join().is_err()) {
                        tracing::error!("device thread {name} panicked");
                    }
                }
                Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {
                    tracing::warn!(
                        "device thread {name} did not stop in {STOP_WAIT:?}: left behind"
                    );
                }
            },
        }
        loop {
            match self.transport.try_lock() {
                Ok(mut t) => return t.detach_ioevents(),
                Err(TryLockError::Poisoned(p)) => return p.into_inner().detach_ioevents(),
                Err(TryLockError::WouldBlock) if Instant::now() >= deadline => {
                    tracing::warn!(
                        "{name}: the transport stayed locked, its eventfds stay registered"
                    );
                    return;
                }
                Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

/// The device thread failed: hands the notifications back to the vCPUs (unregisters the
/// eventfds) and processes every queue once, for a notification it may have taken and dropped.
fn fall_back(transport: &Mutex<MmioTransport>, why: &str) {
    tracing::error!("virtio device thread: {why}; notifications return to the vCPU threads");
    let mut t = lock(transport);
    t.detach_ioevents();
    for index in 0..t.queue_count() {
        if let Ok(index) = u32::try_from(index) {
            t.kernel_notify(index);
        }
    }
}

/// The device thread's loop: waits for a queue's eventfd or the stop eventfd, processes each
/// signalled queue under the transport's mutex, and returns when stopped, or with why it
/// cannot go on.
fn serve(
    transport: &Mutex<MmioTransport>,
    queues: &[EventFd],
    stop: &EventFd,
) -> Result<(), String> {
    let mut fds: Vec<libc::pollfd> = std::iter::once(stop)
        .chain(queues)
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let nfds = libc::nfds_t::try_from(fds.len()).map_err(|_| "too many queues to poll")?;
    loop {
        // SAFETY: `fds` is a live, exclusively borrowed array of `nfds` pollfd structures, and
        // every descriptor in it stays open for this call (the eventfds are borrowed).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), nfds, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("poll failed: {e}"));
        }
        if fds[0].revents != 0 {
            return Ok(());
        }
        for (index, (pfd, fd)) in fds[1..].iter().zip(queues).enumerate() {
            if pfd.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
                // Not expected of an eventfd; giving up beats spinning on it.
                return Err(format!("the eventfd of queue {index} failed"));
            }
            if pfd.revents & libc::POLLIN == 0 {
                continue;
            }
            match fd.read() {
                Ok(_) => {}
                // Another wake-up already took the count.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(format!("reading the eventfd of queue {index} failed: {e}")),
            }
            let Ok(index) = u32::try_from(index) else {
                continue;
            };
            lock(transport).kernel_notify(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::mmio::tests::{mem, w, Dummy};
    use crate::virtio::status;
    use crate::BusDevice;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    /// Records registrations; refuses them all when `refuse` is set.
    #[derive(Default)]
    struct FakeEvents {
        refuse: bool,
        /// (addr, value, eventfd) of what is registered now.
        live: Mutex<Vec<(u64, u32, EventFd)>>,
        registrations: AtomicU32,
    }

    impl IoEvents for FakeEvents {
        fn register(&self, addr: u64, value: u32, fd: &EventFd) -> io::Result<()> {
            if self.refuse {
                return Err(io::Error::from_raw_os_error(libc::ENOSYS));
            }
            self.registrations.fetch_add(1, Ordering::SeqCst);
            self.live
                .lock()
                .unwrap()
                .push((addr, value, fd.try_clone()?));
            Ok(())
        }
        fn unregister(&self, addr: u64, value: u32, fd: &EventFd) -> io::Result<()> {
            let mut live = self.live.lock().unwrap();
            let before = live.len();
            live.retain(|(a, v, f)| !(*a == addr && *v == value && same_eventfd(f, fd)));
            if live.len() == before {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            }
            Ok(())
        }
    }

    /// Whether two eventfd handles are the same eventfd (one signalled, the other readable).
    fn same_eventfd(a: &EventFd, b: &EventFd) -> bool {
        // SAFETY: fstat on two open descriptors into live, owned stat buffers.
        unsafe {
            let mut sa: libc::stat = std::mem::zeroed();
            let mut sb: libc::stat = std::mem::zeroed();
            libc::fstat(a.as_raw_fd(), &mut sa) == 0
                && libc::fstat(b.as_raw_fd(), &mut sb) == 0
                && sa.st_ino == sb.st_ino
        }
    }

    impl FakeEvents {
        /// What the hypervisor does on a guest write of `value` to `addr`: signals the
        /// registered eventfd, or returns false (an exit to user space).
        fn guest_write(&self, addr: u64, value: u32) -> bool {
            let live = self.live.lock().unwrap();
            match live.iter().find(|(a, v, _)| *a == addr && *v == value) {
                Some((_, _, fd)) => {
                    fd.write(1).unwrap();
                    true
                }
                None => false,
            }
        }
    }

    const NOTIFY_ADDR: u64 = 0xfeb0_0050;

    fn driver_ok(t: &Mutex<MmioTransport>) {
        let mut t = t.lock().unwrap();
        let t: &mut MmioTransport = &mut t;
        w(t, 0x070, 0);
        w(t, 0x070, status::ACKNOWLEDGE | status::DRIVER);
        w(t, 0x024, 1);
        w(t, 0x020, 1);
        w(t, 0x024, 0);
        w(t, 0x020, 1);
        w(
            t,
            0x070,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
        );
        w(t, 0x038, 16);
        w(t, 0x080, 0x1000);
        w(t, 0x090, 0x2000);
        w(t, 0x0a0, 0x3000);
        w(t, 0x044, 1);
        w(
            t,
            0x070,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK,
        );
    }

    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn transport(processed: &Arc<AtomicU32>) -> Arc<Mutex<MmioTransport>> {
        let dev = Dummy {
            processed: processed.clone(),
        };
        Arc::new(Mutex::new(MmioTransport::new(
            Some(Box::new(dev)),
            mem(),
            None,
        )))
    }

    #[test]
    fn notifications_reach_the_device_thread_between_driver_ok_and_reset() {
        let processed = Arc::new(AtomicU32::new(0));
        let t = transport(&processed);
        let events = Arc::new(FakeEvents::default());
        let thread = NotifyThread::start(
            "test-dev",
            memvisor_seccomp::Thread::Block,
            t.clone(),
            events.clone(),
            NOTIFY_ADDR,
            0,
        )
        .expect("the device thread starts");
        assert!(
            !events.guest_write(NOTIFY_ADDR, 0),
            "nothing is registered before DRIVER_OK"
        );
        driver_ok(&t);
        assert_eq!(events.live.lock().unwrap().len(), 1, "one ready queue");
        assert!(
            !events.guest_write(NOTIFY_ADDR, 3),
            "another index still exits"
        );
        assert!(events.guest_write(NOTIFY_ADDR, 0));
        wait_for("the thread to process queue 0", || {
            processed.load(Ordering::SeqCst) == 1
        });
        let metrics = t.lock().unwrap().metrics();
        assert_eq!(metrics.kernel_notifies.load(Ordering::SeqCst), 1);
        // A reset unregisters; a driver that sets up again gets its eventfds back.
        w(&mut t.lock().unwrap(), 0x070, 0);
        assert!(events.live.lock().unwrap().is_empty());
        assert!(!events.guest_write(NOTIFY_ADDR, 0));
        driver_ok(&t);
        assert!(events.guest_write(NOTIFY_ADDR, 0));
        wait_for("the thread to process queue 0 again", || {
            processed.load(Ordering::SeqCst) == 2
        });
        assert_eq!(events.registrations.load(Ordering::SeqCst), 2);
        // The VM ends: the eventfds are unregistered and the synchronous path is back.
        drop(thread);
        assert!(events.live.lock().unwrap().is_empty());
        t.lock().unwrap().write(0x050, &0u32.to_le_bytes());
        assert_eq!(processed.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_refused_registration_keeps_the_synchronous_path() {
        let processed = Arc::new(AtomicU32::new(0));
        let t = transport(&processed);
        let events = Arc::new(FakeEvents {
            refuse: true,
            ..FakeEvents::default()
        });
        let _thread = NotifyThread::start(
            "test-dev",
            memvisor_seccomp::Thread::Block,
            t.clone(),
            events,
            NOTIFY_ADDR,
            0,
        )
        .expect("the device thread starts");
        driver_ok(&t);
        let metrics = t.lock().unwrap().metrics();
        assert_eq!(metrics.ioevent_refusals.load(Ordering::SeqCst), 1);
        t.lock().unwrap().write(0x050, &0u32.to_le_bytes());
        assert_eq!(processed.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.kernel_notifies.load(Ordering::SeqCst), 0);
        // A reset with nothing registered unregisters nothing.
        w(&mut t.lock().unwrap(), 0x070, 0);
    }
}
