//! `GET /vm`: the VM's configuration and state.

#![deny(missing_docs)]

use serde::{Deserialize, Serialize};

/// Whether the guest's vCPUs run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmState {
    /// Built; the vCPUs have not started yet.
    Created,
    /// The vCPUs run.
    Running,
    /// The vCPUs are parked until `PUT /vm/resume`: the pager could not write a page to its
    /// swap file or read one back, or a pause was asked for (`paused_because` says which).
    Paused,
}

/// Who manages guest memory (`memvisor run --pager`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PagerMode {
    /// memvisor's pager with every mechanism.
    Full,
    /// memvisor's pager writing every victim, nothing else.
    Baseline,
    /// No pager: plain anonymous memory, the host kernel.
    Off,
}

impl PagerMode {
    /// The name on the wire and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PagerMode::Full => "full",
            PagerMode::Baseline => "baseline",
            PagerMode::Off => "off",
        }
    }
}

/// A disk as the VM was given it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskInfo {
    /// The serial the guest reads (`--disk PATH,id=NAME`).
    pub id: String,
    /// The image file on the host.
    pub path: String,
    /// The guest cannot write it.
    pub read_only: bool,
}

/// `GET /vm` (and the answer to every successful `PUT`): the VM's configuration and state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmInfo {
    /// Running, or paused because swap or image I/O failed.
    pub state: VmState,
    /// Why the VM is paused; `null` while it runs.
    pub paused_because: Option<String>,
    /// Guest RAM.
    pub mem_bytes: u64,
    /// Number of vCPUs.
    pub vcpus: u32,
    /// Who manages guest memory.
    pub pager: PagerMode,
    /// Most guest RAM resident on the host; `null`: no limit (or no pager).
    pub limit_bytes: Option<u64>,
    /// Memory the balloon is asked to take from the guest; `null` without a balloon device.
    pub balloon_target_bytes: Option<u64>,
    /// The disks, in the order given.
    pub disks: Vec<DiskInfo>,
    /// A migration that broke off after the switch, kept for `migrate-recover`: what it sent,
    /// what the destination acknowledged and what was freed here so far; `null` otherwise.
    #[serde(default)]
    pub migration: Option<crate::MigrateResult>,
    /// A jailed VMM's snapshot directory (`memvisor run --snapshot-dir`), as the host sees it:
    /// `PUT /vm/snapshot` takes a name there; `null` unjailed (any path).
    #[serde(default)]
    pub snapshot_dir: Option<String>,
}
