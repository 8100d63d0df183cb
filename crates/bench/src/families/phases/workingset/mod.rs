//! `memvisor bench workingset`: ESX §5.3, Fig. 6: the working-set estimate from sampled pages
//! against a working set that grows and shrinks. The limit is the guest's size: the pager holds
//! guest RAM (sampling needs it to) and never reclaims, so nothing but the sampling moves pages.
//! The steps: first a step up onto memory the guest never touched, then down, then up again onto
//! memory already resident, then down again after a shorter busy spell.

pub mod report;

use std::time::Duration;

use crate::args::Scale;
use crate::families::phases::experiment::{phases, Experiment, Measure, Series, Step};

/// `memvisor bench workingset` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    let tiny = scale == Scale::Quick;
    let (mem, schedule, every, pages, period) = if tiny {
        (
            128,
            vec![(8, 2), (48, 3), (16, 3)],
            Duration::from_millis(250),
            200,
            Duration::from_millis(250),
        )
    } else {
        (
            1024,
            vec![(64, 30), (512, 60), (128, 80), (512, 30), (64, 60)],
            Duration::from_secs(1),
            400,
            Duration::from_secs(2),
        )
    };
    let spec: Vec<String> = schedule.iter().map(|(m, s)| format!("{m}:{s}")).collect();
    Experiment {
        name: "workingset",
        about: "ESX §5.3 / Fig. 6: the working-set estimate from sampled pages while the guest's working set grows and shrinks",
        mem: mem << 20,
        limit: Some(mem << 20),
        steps: vec![Step {
            workload: "toucher",
            cmdline: format!("schedule={}", spec.join(",")),
            phases: phases("step", schedule.len() as u64),
            guest_swap_mb: None,
            disk: None,
        }],
        configs: &["memvisor-pager"],
        reference: "memvisor-pager",
        measure: Measure::Series(Series {
            every,
            schedule,
            sample_pages: pages,
            sample_period: period,
        }),
    }
}
