//! memvisor guest kit: a PVH-bootable x86-64 guest that does a few dozen
//! instructions of ring-0 set-up and runs everything else in ring 3.
//!
//! | file | owns |
//! |---|---|
//! | `boot.rs` | the PVH entry and the whole ring-0 boot path, down to the `iretq` into `kmain` |
//! | `cpu.rs` | wrappers of the instructions used from ring 3: port I/O, TSC, CPUID, `pause`, `park` (a leaf) |
//! | `serial.rs` | the UART console and the `print!`/`println!` macros |
//! | `time.rs` | the TSC's frequency and cycle conversions |
//! | `debug_exit.rs` | the isa-debug-exit port that ends the VM: `ExitCode` and `exit` |
//! | `trap.rs` | the IDT, the exception stubs and their fatal handler, and the park gate |
//! | `smp.rs` | starting the APs and running a job on every CPU |
//! | `sync.rs` | a spinlock and a write-once cell |
//! | `rt.rs` | `memcpy` and the other symbols compiled code calls |
//! | `bootinfo.rs` | parsing `hvm_start_info` |
//! | `cmdline.rs` | the kernel command line: the workload and its `key=value` options |
//! | `early_alloc.rs` | the bump allocator of early boot |
//! | `heap.rs` | the global allocator: a heap a workload sets aside at its start (`compress`) |
//! | `paging.rs` | the identity map extended to RAM above 4 GiB |
//! | `virtio/` | virtio-mmio discovery (`mod.rs`), register access (`mmio.rs`), the split virtqueue (`queue.rs`) and the drivers: virtio-blk (`blk.rs`) and virtio-balloon (`balloon.rs`), which import neither `mm` nor `cmdline` |
//! | `mm.rs` | the `memvisor-guest-mm` core over real RAM and the disks, behind one lock, with the balloon driver's tick |
//! | `workloads/` | the workloads `workload=` selects, each in its own file, their shared helpers (`common.rs`) and the disk test pattern (`pattern.rs`) |
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;

#[macro_use]
mod serial;

mod boot;
mod bootinfo;
mod cmdline;
mod cpu;
mod debug_exit;
mod early_alloc;
mod heap;
mod mm;
mod paging;
mod rt;
mod smp;
mod sync;
mod time;
mod trap;
mod virtio;
mod workloads;

use core::panic::PanicInfo;

use bootinfo::BootInfo;
use cmdline::Config;
use debug_exit::ExitCode;
use sync::Once;

/// Boot information and configuration, set once by the BSP.
static BOOT_INFO: Once<BootInfo> = Once::new();
static CONFIG: Once<Config> = Once::new();

/// First Rust code, entered from `boot.rs` via `iretq` in ring 3 (BSP only). The boot path
/// names it by its symbol, as an entry point is named, so that `boot.rs`, which the rest of
/// the kit builds on, imports nothing from the crate root.
#[unsafe(no_mangle)]
extern "C" fn kmain(start_info_paddr: u64) -> ! {
    trap::init();
    serial::init();
    println!("memvisor guest kit: booting");
    let code = run(start_info_paddr);
    debug_exit::exit(code)
}

fn run(start_info_paddr: u64) -> ExitCode {
    let boot = match bootinfo::parse(start_info_paddr) {
        Ok(info) => BOOT_INFO.set(info).ok().expect("boot info set twice"),
        Err(e) => {
            println!("boot: bad start_info at {start_info_paddr:#x}: {e}");
            return ExitCode::Failure;
        }
    };
    println!("cmdline: {}", boot.cmdline());
    let cfg = match cmdline::parse(boot.cmdline()) {
        Ok(cfg) => CONFIG.set(cfg).ok().expect("config set twice"),
        Err(e) => {
            println!("cmdline: {e}");
            return ExitCode::Failure;
        }
    };

    let ram_regions = boot.regions().iter().filter(|r| r.is_ram()).count();
    println!(
        "memory: {} MiB RAM in {} regions (start_info v{}{})",
        boot.total_ram() >> 20,
        ram_regions,
        boot.version,
        if boot.regions_truncated {
            ", map truncated"
        } else {
            ""
        }
    );
    match time::init(cfg.tsc_khz) {
        Some((khz, source)) => println!("tsc: {khz} kHz ({source})"),
        None => println!("tsc: frequency unknown, reporting cycles"),
    }
    if let Err(e) = early_alloc::init(boot) {
        println!("memory: {e}");
        return ExitCode::Failure;
    }
    match paging::map_high_ram(boot) {
        Ok(0) => {}
        Ok(bytes) => println!("memory: mapped {} MiB above 4 GiB", bytes >> 20),
        Err(e) => println!("memory: mapping RAM above 4 GiB failed: {e}"),
    }

    smp::set_workers(workloads::uses_workers(cfg));
    if let Some(bytes) = workloads::ap_stack_bytes(cfg.workload) {
        smp::set_ap_stack_bytes(bytes);
    }
    let cpus = smp::start_aps(cfg.cpus);
    workloads::run(cfg, cpus)
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    serial::emergency_unlock();
    match info.location() {
        Some(loc) => println!("PANIC at {}:{}: {}", loc.file(), loc.line(), info.message()),
        None => println!("PANIC: {}", info.message()),
    }
    debug_exit::exit(ExitCode::Panic)
}
