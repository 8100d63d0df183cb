//! The command line: every command and its flags, with the parsers of their values, and
//! `memvisor host`. `memvisor run` itself is `run.rs`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use memvisor_api::exit::status;
use memvisor_api::parse_size;
use memvisor_vmm::affinity::CpuSet;

#[derive(Parser)]
#[command(
    name = "memvisor",
    version,
    about = "A KVM virtual machine monitor built for memory overcommitment"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Boot a VM and run it until the guest exits.
    ///
    /// Exit status: the guest's debug-exit status `(value << 1) | 1` (as QEMU's isa-debug-exit),
    /// 0 when the guest shuts down, 2 for bad input, 4 when the guest crashes, 5 when memvisor fails.
    Run(Box<RunArgs>),
    /// Build a data disk (files with deterministic content) or a swap disk for the guest kit.
    ///
    /// Exit status: 0 on success, 2 for bad input.
    Mkdisk(crate::disks::MkdiskArgs),
    /// Work on a disk image memvisor used: `disentangle` puts the blocks its indirection log
    /// (IMAGE.indirections, from `--tesseract`) lists back into it, so it stands alone.
    ///
    /// Exit status: 0 when every image stands alone, 2 when one has no readable image or log,
    /// 5 when one cannot be put back (its log stays, nothing is lost).
    Disk(crate::disks::DiskArgs),
    /// Run a host: the VMs of a config file under one memory budget, ESX's allocation policy,
    /// an API socket (docs/host.md).
    ///
    /// Exit status: 0 once stopped by SIGTERM, SIGINT or SIGHUP (every VM stopped first), 2 for
    /// a bad config, 5 when the host cannot run.
    Host(HostArgs),
    /// Talk to a running VM's API socket (`memvisor run --api-sock PATH`) or a host's
    /// (`--host-sock PATH`).
    ///
    /// Exit status: 0 when the VM answered 200, 1 when it refused the request, 2 for bad input.
    Ctl(crate::ctl::CtlArgs),
    /// Watch a host (`--host-sock PATH`): budget, free memory and its state, and per VM its
    /// state, allocation, target, active memory, balloon, swapped memory and fault rate,
    /// redrawn every second. q or Ctrl-C quits.
    ///
    /// Exit status: 0 when quit, 1 when the host answers outside its API, 2 when it cannot be
    /// reached, 5 when the terminal cannot be set up.
    Top(crate::top::TopArgs),
    /// Run a paper's experiment on memvisor and QEMU side by side: results.csv, report.md, a plot.
    ///
    /// Exit status: 0 when the benchmark ran (runs killed by the host are recorded, not errors),
    /// 2 for bad input, 5 when it could not run, 130 on Ctrl-C (after cleaning up).
    Bench(Box<memvisor_bench::BenchArgs>),
    /// Simulate a host of many VMs under the policy: a scenario in; CSVs, a summary and plots
    /// out (docs/sim.md).
    ///
    /// Exit status: 0 when the run was written, 2 for bad input, 5 when it cannot be written.
    Sim(memvisor_sim::cli::SimArgs),
}

#[derive(Args, Debug)]
pub struct HostArgs {
    /// The host's config file (TOML: `[host]` and `[[vm]]` tables).
    #[arg(long)]
    pub config: PathBuf,
}

/// `memvisor host`: loads the config and runs the host until it is told to stop.
pub fn host(args: HostArgs) -> ExitCode {
    let config = match memvisor_host::HostConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            for problem in e.lines() {
                eprintln!("memvisor: {problem}");
            }
            eprintln!("memvisor: nothing was started");
            return ExitCode::from(status::BAD_INPUT);
        }
    };
    if let Some(uids) = &config.jail {
        if let Err(e) = memvisor_host::jailing::check_free(uids) {
            eprintln!("memvisor: {}: {e}", config.path.display());
            eprintln!("memvisor: nothing was started");
            return ExitCode::from(status::BAD_INPUT);
        }
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("memvisor: cannot find my own binary to run the VMMs: {e}");
            return ExitCode::from(status::VMM_FAILURE);
        }
    };
    match memvisor_host::run(config, exe) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memvisor: {e}");
            ExitCode::from(status::VMM_FAILURE)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Hypervisor {
    /// memvisor's own VMM.
    Memvisor,
    /// QEMU microvm with KVM, for side-by-side comparison on the same guest.
    Qemu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PagerMode {
    Full,
    Baseline,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PreventerArg {
    /// While a prevention costs less per page than a read, as measured.
    Measured,
    /// On every write to a swapped or on-disk page.
    Always,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VictimArg {
    /// Uniformly random resident pages (ESX §3.3).
    Random,
    /// Second chance, with reference bits from the faults the pager sees.
    Clock,
    /// HyperDealer2 (§4.5; needs --mapper): pages that mirror disk blocks by the reference
    /// pattern of the guest's disk reads (sequential runs most recent first, then loops least
    /// recent first, then the rest least recent first), then the others by clock.
    Hd2,
    /// `hd2`, taking a sequence whole (up to 64 pages more than asked) once one of its pages
    /// is taken (the paper's WHOLE_SEQ).
    Hd2Whole,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SharingArg {
    /// Never merged with anything: no other VM can time its writes against pages it shares.
    Off,
    /// Identical pages merged with every other process that shares (the host's KSM), zero
    /// pages with the kernel's zero page; QEMU: `-machine mem-merge=on`.
    Host,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SeccompArg {
    /// A call outside a thread's filter kills the VMM (SIGSYS).
    On,
    /// A call outside a thread's filter goes through, and the kernel logs it (an audit line in
    /// the kernel log naming the thread and the call): for finding what a new code path needs.
    Log,
    /// No filters.
    Off,
}

impl From<SeccompArg> for memvisor_seccomp::Mode {
    fn from(a: SeccompArg) -> Self {
        match a {
            SeccompArg::On => memvisor_seccomp::Mode::On,
            SeccompArg::Log => memvisor_seccomp::Mode::Log,
            SeccompArg::Off => memvisor_seccomp::Mode::Off,
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Guest RAM: a size like 512M, 2G or 1048576 (bytes).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub mem: u64,
    /// Number of vCPUs (1 to 64).
    #[arg(long, default_value_t = 1, value_parser = parse_vcpus)]
    pub vcpus: u8,
    /// A disk image: PATH[,ro][,id=NAME] (repeatable). NAME is the serial the guest reads (default diskN).
    #[arg(long = "disk", value_parser = parse_disk)]
    pub disks: Vec<DiskArg>,
    /// A PVH kernel ELF to boot instead of the built-in guest kit.
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Extra words for the guest's command line.
    #[arg(long, default_value = "")]
    pub cmdline: String,
    /// The guest kit workload to run (boot, selftest).
    #[arg(long)]
    pub workload: Option<String>,
    /// Which hypervisor runs the VM.
    #[arg(long, value_enum, default_value_t = Hypervisor::Memvisor)]
    pub hypervisor: Hypervisor,
    /// Give the VM a virtio-balloon device (deflate-on-OOM, statistics and free page reporting).
    #[arg(long)]
    pub balloon: bool,
    /// Serve the VM's HTTP/JSON API on this Unix socket (see `memvisor ctl`).
    #[arg(long)]
    pub api_sock: Option<PathBuf>,
    /// With --hypervisor qemu: serve QEMU's QMP monitor on this Unix socket (e.g. to move the balloon).
    #[arg(long)]
    pub qmp_sock: Option<PathBuf>,
    /// With --hypervisor qemu: start QEMU waiting for its VM with `-incoming URI` (e.g.
    /// `exec:cat FILE` to load a saved VM, `tcp:127.0.0.1:4444` for a migration).
    #[arg(long)]
    pub qemu_incoming: Option<String>,
    /// Run the vCPU threads on these host CPUs only, e.g. 0 or 2-3 (on QEMU too).
    #[arg(long, value_parser = CpuSet::parse)]
    pub vcpu_cpus: Option<CpuSet>,
    /// Run the VMM's other threads (devices, pager, API; QEMU's main loop and I/O workers) on
    /// these host CPUs only.
    #[arg(long, value_parser = CpuSet::parse)]
    pub vmm_cpus: Option<CpuSet>,
    /// The nice value (-20 to 19) of the threads the guest waits on: its virtio devices' threads
    /// and the pager's fault thread, so that on CPUs shared by more vCPUs than they are a
    /// request's answer does not queue behind busy vCPUs; 0 leaves them at the VMM's own
    /// priority. A value below the VMM's needs CAP_SYS_NICE (without it, a warning). memvisor only.
    #[arg(long, default_value_t = memvisor_devices::priority::SERVING_NICE, value_parser = parse_nice, allow_hyphen_values = true)]
    pub serving_nice: i32,
    /// Most guest RAM resident on the host at once, e.g. 100M. With --pager off (and on QEMU) a
    /// cgroup v1 memory limit with host swap enforces it instead of memvisor's pager.
    #[arg(long, value_parser = parse_size)]
    pub mem_limit: Option<u64>,
    /// Who manages guest memory: `full` (memvisor's pager with every mechanism), `baseline` (the
    /// pager writing every victim, no zero detection, no prefetch), `off` (plain memory, the host kernel).
    #[arg(long, value_enum, default_value_t = PagerMode::Full)]
    pub pager: PagerMode,
    /// How the pager picks victims.
    #[arg(long, value_enum, default_value_t = VictimArg::Random)]
    pub victims: VictimArg,
    /// Content-based page sharing through the host kernel's KSM (ESX §4; docs/sharing.md).
    /// `off` by default: pages shared between VMs let one VM time another's memory (the
    /// cache-timing attack that made VMware turn sharing across VMs off).
    #[arg(long, value_enum, default_value_t = SharingArg::Off)]
    pub sharing: SharingArg,
    /// Seccomp filters, one per kind of VMM thread, each installed by the thread before it
    /// serves the guest (docs/security.md): `on` (a call outside a thread's filter kills the
    /// VMM), `log` (it goes through and the kernel logs it), `off`.
    #[arg(long, value_enum, default_value_t = SeccompArg::On)]
    pub seccomp: SeccompArg,
    /// The victim cache (Tesseract §4.3), in percent of the VM's limit (0 to 50): chosen
    /// victims stay resident and write-protected while this many cool down, and reclaim writes
    /// out the oldest; one the guest writes meanwhile stays. Tesseract used 10.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=50))]
    pub victim_cache: u8,
    /// VSwapper's Swap Mapper (with `--pager full`): guest pages read from a disk mirror its
    /// blocks, are dropped without a write and refault from the image.
    #[arg(long)]
    pub mapper: bool,
    /// VSwapper's False Reads Preventer (with `--pager full`): a vCPU's write to a swapped page is
    /// looked at first, and a `rep stos`/`rep movs` over the whole page installs it without a read.
    /// `--preventer` (`=measured`) does so while a prevention has cost less per page than a read
    /// on this host, as the pager measures them; `--preventer=always` on every such write, as
    /// VSwapper does.
    #[arg(
        long,
        value_enum,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "measured"
    )]
    pub preventer: Option<PreventerArg>,
    /// Tesseract's indirections (with `--pager full`): a guest disk write of pages the pager holds
    /// in its swap file does not read them back; the disk blocks refer to the swap file's blocks,
    /// logged in IMAGE.indirections beside each writable image and copied back into the image
    /// when the VM ends. The swap file is then kept on disk until the end (a crash leaves it for
    /// the next start, which puts the blocks back).
    #[arg(long)]
    pub tesseract: bool,
    /// With --tesseract: most indirections live at once (the swap file grows by as many
    /// blocks), e.g. 256M; default: the VM's memory size.
    #[arg(long, value_parser = parse_size)]
    pub tesseract_max: Option<u64>,
    /// With --tesseract: when the indirection logs (and the swap file they refer to) are synced:
    /// before each guest write that adds or ends indirections is acknowledged (`write`), or when
    /// the guest flushes the disk (`flush`, as virtio-blk's write cache has it for the image's
    /// own data). Either way a write's log records are written before it is acknowledged, so
    /// killing memvisor loses none; `flush` leaves a power loss to lose what the guest did not
    /// flush, as its image data.
    #[arg(long, value_enum, default_value_t = LogSyncArg::Write)]
    pub tesseract_sync: LogSyncArg,
    /// With --tesseract: defragmentation in the background (Tesseract §5). `guest` (the
    /// default when no value is given, §5.2): indirected blocks are copied back into the
    /// images, first those guest reads needed, so reads stop being split between the image and
    /// the swap file. `store` (§5.1): the blocks each guest write made indirections of are
    /// moved next to each other in the swap file, so a split read takes them in one read.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "guest")]
    pub tesseract_defrag: Option<DefragArg>,
    /// With --tesseract: at the end, leave the indirections in their logs (and the swap file)
    /// instead of copying them back; the next start, or `memvisor disk disentangle`, does it.
    #[arg(long)]
    pub keep_indirections: bool,
    /// Pages brought in around a swap fault by the full pager (0 to 1024).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub prefetch: u32,
    /// The pager's swap file (default: an unnamed file in $TMPDIR, unlinked as soon as it is created).
    #[arg(long)]
    pub swap: Option<PathBuf>,
    /// Resident pages the pager samples each period to estimate the working set (ESX §5.3;
    /// 0 to 10000, 0: no sampling).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub sample_pages: u32,
    /// Length of a working-set sampling period, in seconds (0.1 to 3600).
    #[arg(long, default_value_t = 30.0, value_parser = parse_period)]
    pub sample_period: f64,
    /// A host-memory pool in front of the pager's swap file (MemFlex), e.g. 256M: swapped pages
    /// stay in host memory until the pool is --pool-spill-at full, then the least recent go to
    /// the swap file. Resized at run time with `memvisor ctl pool SIZE`.
    #[arg(long, value_parser = parse_size)]
    pub pool: Option<u64>,
    /// Fraction of the pool above which its least recent pages spill to the swap file (0.1 to 1).
    #[arg(long, default_value_t = 0.8, value_parser = parse_fraction)]
    pub pool_spill_at: f64,
    /// How the pool keeps pages: whole, or each compressed (zswap-like), kept at its compressed
    /// size; a page that does not compress to 3/4 of a page is kept whole. The pool's size
    /// counts the memory its pages occupy, so compression lets it hold more of them.
    #[arg(long, value_enum, default_value_t = PoolCompressArg::None)]
    pub pool_compress: PoolCompressArg,
    /// Size of one chunk of pool memory, mapped when needed and unmapped when empty: a multiple
    /// of 4K, at most the pool's size.
    #[arg(long, default_value = "2M", value_parser = parse_size)]
    pub pool_chunk: u64,
    /// The reclamation cache of instant release (HyperDealer2 §4.2, `memvisor ctl release`):
    /// the contents of the pages released most recently, kept in host memory (and counted in
    /// the VMM's own) so a refault of one is a copy, not a disk read. Whole 4K pages, at most
    /// --mem; 0: none.
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub release_cache: u64,
    /// Keep this much of the first release candidates (in --victims order) write-protected and
    /// checked in the background, so an instant release only drops them (needs --mapper). A
    /// guest write to such a page costs one fault. Whole 4K pages, at most --mem; 0: none.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub release_ready: u64,
    /// When the limit rises, bring swapped pages back `proactive`ly in batches (pooled first,
    /// most recent first, then the swap file's in block order), or only as the guest `faults`
    /// on them (default: proactive with a pool, faults without).
    #[arg(long, value_enum)]
    pub swap_in: Option<SwapIn>,
    /// The QEMU binary for --hypervisor qemu.
    #[arg(long, default_value = "qemu-system-x86_64")]
    pub qemu: PathBuf,
    /// When the VM ends, write its counters to this file as one line of JSON: the schema of the
    /// API's GET /stats (the `VmStats` type).
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Start the VM from the snapshot in this directory (`memvisor ctl snapshot`), its memory
    /// brought in as the guest touches it; give the same --disk flags, unchanged images.
    #[arg(long)]
    pub restore: Option<PathBuf>,
    /// Take a VM migrating in (`memvisor ctl migrate`) on this TCP address, host:port (port 0:
    /// any, printed): the VM runs here as soon as its state has arrived, its memory following
    /// from the source; give the source's --mem, --disk and --mapper flags.
    #[arg(long, value_name = "ADDR")]
    pub incoming: Option<String>,
    /// The one-time token a migration coming in (`--incoming`) must present; any other
    /// connection is refused and nothing is read from it. Also read from the environment
    /// (`MEMVISOR_MIGRATION_TOKEN`), which, unlike the command line, other users cannot read.
    #[arg(
        long,
        value_name = "T",
        env = "MEMVISOR_MIGRATION_TOKEN",
        hide_env_values = true
    )]
    pub migration_token: Option<String>,
    /// Run the VMM jailed once it has opened its files: in new mount, PID, IPC and UTS
    /// namespaces (and network, without --api-sock), with this empty directory as its root, no
    /// capabilities, no new privileges, as --uid and --gid, and resource limits
    /// (docs/security.md). memvisor only.
    #[arg(long, requires_all = ["uid", "gid"])]
    pub jail: Option<PathBuf>,
    /// With --jail: the uid the VMM runs as (not 0).
    #[arg(long, requires = "jail")]
    pub uid: Option<u32>,
    /// With --jail: the gid the VMM runs as (not 0).
    #[arg(long, requires = "jail")]
    pub gid: Option<u32>,
    /// With --jail: a directory --uid may write, bound into the jail: a snapshot the jailed
    /// VMM is asked for by name (`ctl snapshot NAME` or `DIR/NAME`) lands in DIR/NAME.
    #[arg(long, requires = "jail", value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogSyncArg {
    /// Before each write that changes the indirections is acknowledged.
    Write,
    /// When the guest flushes the disk.
    Flush,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DefragArg {
    /// Indirected blocks copied back into the guest's images.
    Guest,
    /// Each write's indirected blocks grouped in the swap file.
    Store,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PoolCompressArg {
    /// Whole pages.
    None,
    /// LZ4: the fastest.
    Lz4,
    /// Zstandard, level 1: smaller, slower.
    Zstd,
}

impl From<PoolCompressArg> for memvisor_api::PoolCompress {
    fn from(a: PoolCompressArg) -> Self {
        match a {
            PoolCompressArg::None => memvisor_api::PoolCompress::None,
            PoolCompressArg::Lz4 => memvisor_api::PoolCompress::Lz4,
            PoolCompressArg::Zstd => memvisor_api::PoolCompress::Zstd,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SwapIn {
    /// In batches as soon as the limit leaves room (MemFlex §3.4).
    Proactive,
    /// Only when the guest faults on them.
    Faults,
}

/// A fraction from 0.1 to 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a fraction from 0.1 to 1, e.g. 0.8")),
    }
}

/// A sampling period in seconds: a number from 0.1 to 3600.
fn parse_period(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a period: give seconds from 0.1 to 3600, e.g. 30 or 0.5"
        )),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskArg {
    pub path: PathBuf,
    pub read_only: bool,
    pub id: Option<String>,
}

fn parse_nice(s: &str) -> Result<i32, String> {
    let range = memvisor_devices::priority::NICE_RANGE;
    s.trim()
        .parse::<i32>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            format!(
                "'{s}' is not a nice value: give a whole number from {} to {}",
                range.start(),
                range.end()
            )
        })
}

fn parse_vcpus(s: &str) -> Result<u8, String> {
    match s.parse::<u8>() {
        Ok(n) if (1..=memvisor_vmm::MAX_VCPUS).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' vCPUs: a VM has 1 to {} vCPUs",
            memvisor_vmm::MAX_VCPUS
        )),
    }
}

fn parse_disk(s: &str) -> Result<DiskArg, String> {
    let d = memvisor_api::DiskSpec::parse(s)?;
    Ok(DiskArg {
        path: PathBuf::from(d.path),
        read_only: d.read_only,
        id: d.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host's VM spec, spelled as `memvisor run` flags, means the same to `run`.
    #[test]
    fn a_vm_spec_spelled_as_run_flags_means_the_same() {
        let spec = memvisor_api::VmSpec {
            name: "a".into(),
            mem: 256 << 20,
            min: 0,
            shares: 1000,
            vcpus: 2,
            workload: Some("kv".into()),
            kernel: None,
            cmdline: "records=10 ops=20".into(),
            disks: vec!["/x/d.img,ro,id=data".into(), "/x/s.img".into()],
            balloon: true,
            mapper: true,
            preventer: false,
            tesseract: true,
            tesseract_max: Some(64 << 20),
            tesseract_sync: Some("flush".into()),
            tesseract_defrag: Some("store".into()),
            victim_cache: 10,
            victims: Some("clock".into()),
            release_cache: Some(8 << 20),
            release_ready: Some(40 << 20),
            pager: Some("full".into()),
            sharing: Some("host".into()),
        };
        let argv = std::iter::once("memvisor".to_owned())
            .chain(std::iter::once("run".to_owned()))
            .chain(spec.run_args());
        let Command::Run(r) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not run");
        };
        assert_eq!((r.mem, r.vcpus), (spec.mem, spec.vcpus));
        assert_eq!(r.workload, spec.workload);
        assert_eq!(r.cmdline, spec.cmdline);
        assert_eq!(r.disks.len(), 2);
        assert!(r.disks[0].read_only && r.disks[0].id.as_deref() == Some("data"));
        assert_eq!(r.disks[1].path, PathBuf::from("/x/s.img"));
        assert!(r.balloon && r.mapper && r.preventer.is_none() && r.tesseract);
        assert_eq!(r.tesseract_max, Some(64 << 20));
        assert_eq!(r.tesseract_sync, LogSyncArg::Flush);
        assert_eq!(r.tesseract_defrag, Some(DefragArg::Store));
        assert_eq!(r.victim_cache, 10);
        assert_eq!(r.victims, VictimArg::Clock);
        assert_eq!(r.release_cache, 8 << 20);
        assert_eq!(r.release_ready, 40 << 20);
        assert_eq!(r.pager, PagerMode::Full);
        assert_eq!(r.sharing, SharingArg::Host);
    }

    #[test]
    fn the_preventer_is_measured_unless_told_always() {
        let parse = |extra: &[&str]| {
            let argv = ["memvisor", "run", "--pager", "full", "--mapper"]
                .iter()
                .chain(extra);
            match Cli::try_parse_from(argv).map(|c| c.command) {
                Ok(Command::Run(r)) => Ok(r.preventer),
                Ok(_) => panic!("not run"),
                Err(e) => Err(e.to_string()),
            }
        };
        assert_eq!(parse(&[]), Ok(None));
        assert_eq!(parse(&["--preventer"]), Ok(Some(PreventerArg::Measured)));
        assert_eq!(
            parse(&["--preventer", "--prefetch", "0"]),
            Ok(Some(PreventerArg::Measured))
        );
        assert_eq!(
            parse(&["--preventer=always"]),
            Ok(Some(PreventerArg::Always))
        );
        let bad = parse(&["--preventer=sometimes"]).unwrap_err();
        assert!(bad.contains("measured, always"), "{bad}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn disks() {
        assert_eq!(
            parse_disk("a.img,ro,id=data"),
            Ok(DiskArg {
                path: "a.img".into(),
                read_only: true,
                id: Some("data".into())
            })
        );
        assert_eq!(
            parse_disk("a.img"),
            Ok(DiskArg {
                path: "a.img".into(),
                read_only: false,
                id: None
            })
        );
        assert!(parse_disk("").is_err());
        assert!(parse_disk("a.img,rw").is_err());
        assert!(parse_disk("a.img,id=").is_err());
        assert!(parse_disk("a.img,id=abcdefghijklmnopqrstuvwxyz").is_err());
    }

    #[test]
    fn nice_values() {
        assert_eq!(parse_nice("-10"), Ok(-10));
        assert_eq!(parse_nice("19"), Ok(19));
        for bad in ["-21", "20", "", "x", "1.5"] {
            assert!(parse_nice(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn vcpus() {
        assert_eq!(parse_vcpus("2"), Ok(2));
        assert!(parse_vcpus("0").is_err());
        assert!(parse_vcpus("65").is_err());
        assert!(parse_vcpus("x").is_err());
    }
}
