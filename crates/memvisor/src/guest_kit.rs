//! The guest kit that memvisor carries: its ELF, embedded at build time, and its command line.

use std::path::PathBuf;

/// The guest kit ELF built from `guest/` by `build.rs`.
pub const ELF: &[u8] = include_bytes!(env!("MEMVISOR_GUEST_KIT"));

/// Smallest VM the guest kit runs in (its image, page tables, stacks and queues, with room to spare).
pub const MIN_MEM: u64 = 32 << 20;

/// The guest kit's workloads, as its command line names them.
pub const WORKLOADS: &[&str] = &[
    "boot",
    "selftest",
    "seqread",
    "alloc",
    "compile",
    "mapreduce",
    "kv",
    "gcchurn",
    "memhog",
    "toucher",
    "integrity",
    "crashwrite",
    "probe",
    "compress",
    "exits",
];

/// The guest kit's command line: the workload and facts about the VM, then the user's extra words.
pub fn cmdline(workload: &str, vcpus: u8, tsc_khz: Option<u32>, extra: &str) -> String {
    let mut s = format!("workload={workload} cpus={vcpus}");
    if let Some(khz) = tsc_khz {
        s.push_str(&format!(" tsc_khz={khz}"));
    }
    if !extra.is_empty() {
        s.push(' ');
        s.push_str(extra);
    }
    s
}

/// Writes the embedded ELF to a file (once per content) for hypervisors that need a path.
pub fn as_file() -> std::io::Result<PathBuf> {
    // FNV-1a of the image names the file, so a rebuilt guest kit never reuses a stale copy.
    let hash = ELF.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = std::env::temp_dir().join(format!("memvisor-guest-kit-{hash:016x}.elf"));
    if std::fs::read(&path).is_ok_and(|c| c == ELF) {
        return Ok(path);
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, ELF)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_orders_generated_words_first() {
        assert_eq!(
            cmdline("selftest", 2, Some(2_000_000), "seed=7"),
            "workload=selftest cpus=2 tsc_khz=2000000 seed=7"
        );
        assert_eq!(cmdline("boot", 1, None, ""), "workload=boot cpus=1");
    }

    #[test]
    fn embedded_image_is_a_pvh_elf() {
        assert_eq!(&ELF[..4], b"\x7fELF");
        let written = as_file().unwrap();
        assert_eq!(std::fs::read(written).unwrap(), ELF);
    }
}
