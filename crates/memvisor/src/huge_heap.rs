//! The process's heap on transparent huge pages.
//!
//! The pager's page table (per-page arrays, the image-block links, the ghost cache's index, the
//! reference patterns) takes a few MiB per VM, and the disk thread touches it at random, several
//! places for every page a guest disk read fills. On 4 KiB pages most of those touches miss the
//! TLB, and on a host that is itself virtualized a miss walks two levels of page tables: in
//! `bench seqread` with the Swap Mapper, the probes of the image-block links were a fifth of the
//! disk thread's bookkeeping. With the heap on 2 MiB pages that bookkeeping took a quarter less
//! CPU, for 0–2 MiB more resident memory per VMM.
//!
//! glibc puts its heaps on huge pages when its `glibc.malloc.hugetlb` tunable is 1 (glibc 2.35
//! on; older versions ignore it), and reads tunables only as the process starts. So the process
//! starts itself again, at once, with the tunable added to `GLIBC_TUNABLES`, keeping its pid,
//! arguments and descriptors. A `GLIBC_TUNABLES` that names `glibc.malloc.hugetlb` already is
//! left as it is (set it to 0 to keep the heap on 4 KiB pages). Only memvisor's own VMM does
//! this (`memvisor run` without `--hypervisor qemu`): a QEMU that `memvisor run` or `bench`
//! starts runs as its users run it, with the environment it was given.

use std::os::unix::process::CommandExt;

const VAR: &str = "GLIBC_TUNABLES";
const TUNABLE: &str = "glibc.malloc.hugetlb";

/// What `GLIBC_TUNABLES` should be for a process whose variable is `now`, or `None` when it is
/// right already.
fn tunables(now: Option<&str>) -> Option<String> {
    match now {
        Some(v) if v.split(':').any(|t| t.starts_with(TUNABLE)) => None,
        Some(v) if !v.is_empty() => Some(format!("{v}:{TUNABLE}=1")),
        _ => Some(format!("{TUNABLE}=1")),
    }
}

/// Starts the process again with its heap on huge pages, unless it is already; returns only
/// if it is, or if starting again failed (then the heap stays on 4 KiB pages). Call it in
/// `main` before any thread is started.
pub fn ensure() {
    if !cfg!(target_env = "gnu") {
        return;
    }
    let now = std::env::var_os(VAR);
    let now = match now.as_deref().map(std::ffi::OsStr::to_str) {
        Some(None) => return, // not text: left alone
        now => now.flatten(),
    };
    let Some(value) = tunables(now) else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_default();
    // `exec` returns only on failure, and then this process carries on as it is.
    let _ = std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env(VAR, value)
        .exec();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunable_is_added_once_and_a_choice_kept() {
        assert_eq!(tunables(None).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(
            tunables(Some("")).as_deref(),
            Some("glibc.malloc.hugetlb=1")
        );
        assert_eq!(
            tunables(Some("glibc.malloc.arena_max=2")).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        assert_eq!(tunables(Some("glibc.malloc.hugetlb=1")), None);
        assert_eq!(
            tunables(Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0")),
            None
        );
    }
}
