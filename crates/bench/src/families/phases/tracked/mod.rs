//! `memvisor bench tracked`: VSwapper §5.3, Fig. 15: the guest memory the Swap Mapper tracks
//! (pages that hold a disk block's content, resident or dropped to refault from the image)
//! beside the guest's page cache, over a run. The paper ran Eclipse; here the guest kit's build
//! reads sources and writes objects, so its page cache holds clean pages the Mapper should track
//! and dirty ones it should not. The guest's page cache comes from its balloon driver's
//! statistics (`VIRTIO_BALLOON_S_CACHES`), so the VM has a balloon device, never inflated.

pub mod report;

use std::time::Duration;

use super::compile;
use super::experiment::{Experiment, Measure, Tracked};
use crate::args::Scale;

/// How often the harness asks for `GET /stats`.
pub const EVERY: Duration = Duration::from_millis(100);

/// `memvisor bench tracked` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    // A build as `compile`'s, under a limit a quarter below the guest's RAM, so the pager both
    // keeps mirrored pages and drops some to the image: the Mapper tracks both.
    // The compiler's work (`work`) spreads the build over seconds, so the answers draw it.
    let (mem, limit, src, jobs, task_kb, work): (u64, u64, u64, u64, u64, u64) = match scale {
        Scale::Full => (512, 384, 384, 8000, 2048, 25),
        Scale::Quick => (128, 96, 64, 2000, 512, 10),
    };
    Experiment {
        name: "tracked",
        about: "VSwapper §5.3 / Fig. 15: the memory the Swap Mapper tracks beside the guest's page cache over a build",
        mem: mem << 20,
        limit: Some(limit << 20),
        steps: vec![compile::step(jobs, src, task_kb, work)],
        configs: &["memvisor-vswapper-fpr"],
        reference: "memvisor-vswapper-fpr",
        measure: Measure::Tracked(Tracked { every: EVERY }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_runs_under_a_limit_with_a_balloon_device_to_report_its_cache() {
        for scale in [Scale::Full, Scale::Quick] {
            let e = experiment(scale);
            let c = crate::families::phases::configs::CONFIGS
                .iter()
                .find(|c| c.name == e.configs[0])
                .unwrap();
            assert!(c.balloon_device() && !c.balloon && c.limits_ram());
            assert!(c.mechanisms.contains(&"--mapper"));
            assert!(e.limit.unwrap() < e.mem);
            assert_eq!(e.default_reps(), 1);
            assert_eq!(e.measure.polls_stats(), Some((EVERY, true)));
        }
    }
}
