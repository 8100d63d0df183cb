//! What the pager's integration tests share (each test crate uses part of it).
#![allow(dead_code)]

pub mod flaky_disk;

use std::path::Path;
use std::time::Duration;

use memvisor_pager::{Mechanisms, PagerConfig, VictimPolicy};

/// A pager with a temporary swap file in `swap_dir`, no limit yet, random victims, no sampling
/// and no pool; the Swap Mapper on if `mapper`.
pub fn config(swap_dir: &Path, mapper: bool) -> PagerConfig {
    PagerConfig {
        mech: Mechanisms {
            mapper,
            ..Mechanisms::DEFAULT
        },
        policy: VictimPolicy::Random,
        limit: None,
        swap_path: swap_dir.join("swap"),
        temporary_swap: true,
        batch: 256,
        sample_pages: 0,
        sample_period: Duration::from_secs(30),
        pool: None,
        proactive: false,
    }
}
