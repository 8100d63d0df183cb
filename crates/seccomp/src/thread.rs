//! The kinds of VMM thread, each with its own filter.

/// A kind of VMM thread; each has its own filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Thread {
    /// The main thread, once the VM runs: waits for it to end, stops it, flushes the disks,
    /// puts Tesseract's indirected blocks back, writes `--stats-json`.
    Main,
    /// Takes the termination signals (`signals`).
    Signals,
    /// Runs `KVM_RUN` and serves port and MMIO exits (`vcpuN`), devices included.
    Vcpu,
    /// A virtio-blk device's queue thread (`blk-ID`).
    Block,
    /// The virtio-balloon device's queue thread (`balloon`).
    Balloon,
    /// The pager's fault thread (`pager`): userfaultfd events, sampling, the Preventer.
    Pager,
    /// The pager's reclaim thread (`reclaim`), with proactive swap-in and its read-ahead.
    Reclaim,
    /// The pool's flusher (`pool-flush`): spills pool pages to the swap file.
    PoolFlush,
    /// Tesseract's defragmentation (`defrag`).
    Defrag,
    /// Release readiness (`release-ready`).
    ReleaseReady,
    /// A restored VM's prefetch of the pages it had in RAM from its snapshot (`prefetch`).
    Prefetch,
    /// The VM's API server (`api`).
    Api,
    /// A migration's source (`migrate`), started with the VM and idle until `PUT /vm/migrate`:
    /// connects to the destination, sends the state and the pages.
    Migrate,
    /// A migration's reader on either end (`migrate-rx`); on the destination it writes the
    /// pages that arrive to a local file and acknowledges them.
    MigrateRx,
    /// A migration's destination, once its source is back (`migrate-resume`): lets the VM run
    /// again and retries the faults that failed.
    MigrateResume,
}

impl Thread {
    /// Every kind of thread.
    pub const ALL: [Thread; 15] = [
        Thread::Main,
        Thread::Signals,
        Thread::Vcpu,
        Thread::Block,
        Thread::Balloon,
        Thread::Pager,
        Thread::Reclaim,
        Thread::PoolFlush,
        Thread::Defrag,
        Thread::ReleaseReady,
        Thread::Prefetch,
        Thread::Api,
        Thread::Migrate,
        Thread::MigrateRx,
        Thread::MigrateResume,
    ];

    /// The kind's name, as `MEMVISOR_SECCOMP_TEST_CALL` and the docs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Thread::Main => "main",
            Thread::Signals => "signals",
            Thread::Vcpu => "vcpu",
            Thread::Block => "block",
            Thread::Balloon => "balloon",
            Thread::Pager => "pager",
            Thread::Reclaim => "reclaim",
            Thread::PoolFlush => "pool-flush",
            Thread::Defrag => "defrag",
            Thread::ReleaseReady => "release-ready",
            Thread::Prefetch => "prefetch",
            Thread::Api => "api",
            Thread::Migrate => "migrate",
            Thread::MigrateRx => "migrate-rx",
            Thread::MigrateResume => "migrate-resume",
        }
    }
}
