//! How the host jails its VMMs (`[host] jail`, `uid_range`, `group`): each VM runs as a uid of
//! its own from the range (its gid the same number), so that no VMM can signal or trace another;
//! a range some process already runs in is refused at start, and each VM gets a uid no process
//! has.

use std::ops::RangeInclusive;

/// The uids VMMs run as when the config names none: far above the ones distributions give
/// people, services and systemd's dynamic users (below 65536), and above the first subordinate
/// ranges of `/etc/subuid` (100000 and up, 65536 a user).
pub const DEFAULT_UIDS: RangeInclusive<u32> = 900_000..=900_999;

/// `N-M`, 0 < N <= M: the uids the host's VMMs may run as.
pub fn parse_range(text: &str) -> Result<RangeInclusive<u32>, String> {
    let bad = || {
        format!("uid_range {text:?}: give N-M, two uids with 0 < N <= M, e.g. \"900000-900999\"")
    };
    let (a, b) = text.split_once('-').ok_or_else(bad)?;
    let a: u32 = a.trim().parse().map_err(|_| bad())?;
    let b: u32 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || a > b || b == u32::MAX {
        return Err(bad());
    }
    Ok(a..=b)
}

/// The gid of `group`: a number, or a name in the group database.
pub fn group_id(group: &str) -> Result<u32, String> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    let name =
        std::ffi::CString::new(group).map_err(|_| format!("group {group:?}: no such group"))?;
    // SAFETY: getgrnam reads a NUL-terminated name; the entry it returns is read at once, on
    // the one thread that reads the config.
    let entry = unsafe { libc::getgrnam(name.as_ptr()) };
    if entry.is_null() {
        return Err(format!("group {group:?}: no such group"));
    }
    // SAFETY: a non-null entry from getgrnam is a valid group struct.
    Ok(unsafe { (*entry).gr_gid })
}

/// Every process's real uid, as `(uid, pid)`, from `/proc/PID/status`.
fn process_uids() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((uid, pid))
        })
        .collect()
}

/// Refuses a range that a running process has a uid in (another host's VMs, or people):
/// one VMM could then signal or trace another, or them.
pub fn check_free(range: &RangeInclusive<u32>) -> Result<(), String> {
    match process_uids().into_iter().find(|(uid, _)| range.contains(uid)) {
        Some((uid, pid)) => Err(format!(
            "[host] uid_range {}-{} holds uid {uid}, which process {pid} runs as (a VM of another host?): give a range no process uses",
            range.start(),
            range.end()
        )),
        None => Ok(()),
    }
}

/// The first uid of `range` that neither `taken` (this host's VMMs) nor any process has.
pub fn free_uid(range: &RangeInclusive<u32>, taken: &[u32]) -> Option<u32> {
    let running = process_uids();
    range
        .clone()
        .find(|u| !taken.contains(u) && !running.iter().any(|(r, _)| r == u))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_or_say_what_is_wrong() {
        assert_eq!(parse_range("900000-900999"), Ok(900_000..=900_999));
        assert_eq!(parse_range(" 5 - 5 "), Ok(5..=5));
        for bad in ["", "5", "0-10", "10-5", "a-b", "5-4294967295", "-5"] {
            let e = parse_range(bad).unwrap_err();
            assert!(e.contains("N-M"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_range_with_a_running_process_in_it_is_refused() {
        // This test runs as some uid: a range holding it is taken.
        // SAFETY: getuid has no memory effects.
        let me = unsafe { libc::getuid() };
        let e = check_free(&(me..=me)).unwrap_err();
        assert!(e.contains(&format!("uid {me}")), "{e}");
        assert_ne!(free_uid(&(me..=me.saturating_add(1)), &[]), Some(me));
    }

    #[test]
    fn a_uid_taken_by_this_host_is_not_given_twice() {
        let r = 3_999_000_000..=3_999_000_002;
        assert_eq!(free_uid(&r, &[]), Some(3_999_000_000));
        assert_eq!(free_uid(&r, &[3_999_000_000]), Some(3_999_000_001));
        assert_eq!(
            free_uid(&r, &[3_999_000_000, 3_999_000_001, 3_999_000_002]),
            None
        );
    }

    #[test]
    fn groups_are_numbers_or_names() {
        assert_eq!(group_id("1234"), Ok(1234));
        assert_eq!(group_id("root"), Ok(0));
        assert!(group_id("no-such-group-here").is_err());
    }
}
