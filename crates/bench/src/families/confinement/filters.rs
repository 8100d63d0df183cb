//! `filter-calls`: what a thread's filter adds to each call of a guest exit and of a pager
//! fault ([`CALLS`]), timed in a thread of the bench. Each call is made on `/dev/null`, which
//! answers it at once (`poll` ready, `read` at its end, both `ioctl`s refused with `ENOTTY`), so
//! what is timed is the kernel's way in and out, the filters, and little else: first without a
//! filter, then after the thread has installed the filters of the VMM thread that makes the
//! call ([`memvisor_seccomp::install`] with [`Mode::Log`]: the programs of `--seccomp on`, but
//! a call outside them is logged instead of killing the bench). A call's time is its fastest
//! batch's mean, the least the host's scheduling added; the filter's cost is the difference.

use std::os::fd::AsRawFd;
use std::time::Instant;

use memvisor_seccomp::Mode;

use super::experiment::{Call, Sizes, Syscall, CALLS};

/// One call's time per call, without and with its thread's filters (ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallTimes {
    pub call: &'static Call,
    pub unfiltered_ns: f64,
    pub filtered_ns: f64,
}

impl CallTimes {
    /// What the filters add to one call (ns).
    pub fn cost_ns(&self) -> f64 {
        self.filtered_ns - self.unfiltered_ns
    }
}

/// Every call of [`CALLS`], each in a thread of its own (a filter cannot be taken off again).
pub fn measure(sizes: &Sizes) -> Result<Vec<CallTimes>, String> {
    let (batches, n) = (sizes.call_batches, sizes.calls_per_batch);
    CALLS
        .iter()
        .map(|call| {
            std::thread::spawn(move || time_call(call, batches, n))
                .join()
                .map_err(|_| format!("timing {} panicked", call.syscall.name()))?
        })
        .collect()
}

fn time_call(call: &'static Call, batches: u32, n: u32) -> Result<CallTimes, String> {
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    let fd = null.as_raw_fd();
    let fastest = || {
        (0..batches)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    make(call.syscall, fd);
                }
                t.elapsed().as_nanos() as f64 / f64::from(n)
            })
            .fold(f64::INFINITY, f64::min)
    };
    let expect = answer(call.syscall);
    let got = make(call.syscall, fd);
    if got != expect {
        return Err(format!(
            "{} on /dev/null answered {got}, not {expect}",
            call.syscall.name()
        ));
    }
    let unfiltered_ns = fastest();
    memvisor_seccomp::install(call.thread, Mode::Log)
        .map_err(|e| format!("{}: {e}", call.thread.name()))?;
    let filtered_ns = fastest();
    Ok(CallTimes {
        call,
        unfiltered_ns,
        filtered_ns,
    })
}

/// What `/dev/null` answers `syscall` with: a result, or minus an errno.
fn answer(syscall: Syscall) -> i64 {
    match syscall {
        Syscall::Poll => 1,
        Syscall::Read => 0,
        Syscall::KvmRun | Syscall::UffdioCopy => -i64::from(libc::ENOTTY),
    }
}

/// Makes `syscall` on `fd` once: its result, or minus its errno.
fn make(syscall: Syscall, fd: i32) -> i64 {
    let mut buf = [0u64; 8];
    // SAFETY: every pointer passed is to `buf` or `pfd`, which live across the call and are
    // large enough for what the kernel may write (`uffdio_copy` is 40 bytes; the reads take
    // at most 64).
    let rc = unsafe {
        match syscall {
            Syscall::KvmRun => i64::from(libc::ioctl(fd, memvisor_seccomp::KVM_RUN as _, 0)),
            Syscall::Poll => {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                i64::from(libc::poll(&mut pfd, 1, 0))
            }
            Syscall::Read => libc::read(fd, buf.as_mut_ptr().cast(), 64) as i64,
            Syscall::UffdioCopy => i64::from(libc::ioctl(
                fd,
                memvisor_seccomp::UFFDIO_COPY as _,
                buf.as_mut_ptr(),
            )),
        }
    };
    if rc < 0 {
        -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        rc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every call gets the answer it is timed with, so what is timed is the call and not an
    /// error path of its own.
    #[test]
    fn dev_null_answers_every_call_at_once() {
        let null = std::fs::File::open("/dev/null").unwrap();
        for c in &CALLS {
            assert_eq!(
                make(c.syscall, null.as_raw_fd()),
                answer(c.syscall),
                "{c:?}"
            );
        }
    }
}
