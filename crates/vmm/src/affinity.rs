//! Which host CPUs a VM's threads may run on (`--vcpu-cpus`, `--vmm-cpus`): a [`CpuSet`] parsed
//! from a list like `0-3,6`, checked against the CPUs this process may use, and applied to a
//! thread with `sched_setaffinity`.
//!
//! Where the scheduler happens to put a busy vCPU decides how fast a VM's disk is: a vCPU that
//! lands on the CPU that takes the host disk's interrupts is interrupted by every completion,
//! and the device thread waiting for that completion is woken across CPUs (docs/bench.md,
//! "What `overhead` shows"). Pinning is how an operator, and `memvisor bench`, decide it.

use std::fmt;

/// A set of host CPUs, sorted, without repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSet(Vec<usize>);

/// CPU numbers above this are refused (the kernel's `cpu_set_t` holds 1024).
const MAX_CPU: usize = 1023;

impl CpuSet {
    /// Parses `0`, `0-3`, `0,2-3`: CPU numbers and inclusive ranges, comma-separated.
    pub fn parse(s: &str) -> Result<CpuSet, String> {
        let bad = |why: &str| format!("'{s}' is not a CPU list ({why}); give e.g. 0 or 0-3,6");
        let mut cpus = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let num = |x: &str| {
                x.trim()
                    .parse::<usize>()
                    .map_err(|_| bad(&format!("'{x}' is not a CPU number")))
            };
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(bad(&format!("{lo}-{hi} runs backwards")));
            }
            if hi > MAX_CPU {
                return Err(bad(&format!("CPU {hi} is above {MAX_CPU}")));
            }
            cpus.extend(lo..=hi);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuSet(cpus))
    }

    /// The CPUs this thread may run on now.
    pub fn available() -> std::io::Result<CpuSet> {
        // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live cpu_set_t of the size given; the call only writes to it.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
            != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: CPU_ISSET only reads `set`, and every index is below its capacity.
        Ok(CpuSet(
            (0..=MAX_CPU)
                .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
                .collect(),
        ))
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.iter().all(|c| other.0.binary_search(c).is_ok())
    }

    /// Restricts thread `tid` (0: the calling thread) to these CPUs. Threads it creates from
    /// then on start with the same set.
    pub fn apply(&self, tid: libc::pid_t) -> std::io::Result<()> {
        // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &self.0 {
            // SAFETY: `c` is at most MAX_CPU, within the set's capacity.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        // SAFETY: `set` is a live cpu_set_t of the size given; the call only reads it.
        if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) }
            != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// As a list with ranges: `0-3,6`.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if i == j {
                write!(f, "{}", self.0[i])?;
            } else {
                write!(f, "{}-{}", self.0[i], self.0[j])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        for (s, cpus, shown) in [
            ("0", vec![0], "0"),
            ("0-3,6", vec![0, 1, 2, 3, 6], "0-3,6"),
            ("3,1,2,1", vec![1, 2, 3], "1-3"),
            (" 2 - 2 ", vec![2], "2"),
        ] {
            let set = CpuSet::parse(s).unwrap();
            assert_eq!(set, CpuSet(cpus), "{s}");
            assert_eq!(set.to_string(), shown);
        }
    }

    #[test]
    fn bad_lists_are_refused_clearly() {
        for (s, why) in [
            ("", "'' is not a CPU number"),
            ("a", "'a' is not a CPU number"),
            ("3-1", "3-1 runs backwards"),
            ("0-5000", "CPU 5000 is above 1023"),
            ("1,,2", "'' is not a CPU number"),
            ("-1", "'' is not a CPU number"),
        ] {
            let e = CpuSet::parse(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn the_calling_thread_can_be_pinned_and_unpinned() {
        let all = CpuSet::available().unwrap();
        let first = CpuSet(vec![all.0[0]]);
        std::thread::spawn(move || {
            first.apply(0).unwrap();
            assert_eq!(CpuSet::available().unwrap(), first);
            all.apply(0).unwrap();
            assert_eq!(CpuSet::available().unwrap(), all);
        })
        .join()
        .unwrap();
    }
}
