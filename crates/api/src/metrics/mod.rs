//! `GET /metrics`: the APIs' numbers in the Prometheus/OpenMetrics text format. A VMM exposes
//! every number of its [`VmStats`](crate::VmStats); the host exposes its
//! [`HostInfo`](crate::HostInfo) and, per VM and labelled `vm="NAME"`, every number of the
//! VM's [`HostVm`](crate::HostVm) and of its VMM's last `VmStats`.
//!
//! The three tables of rows are the one place that names metrics. A row names one field by its
//! path in the type's JSON (the wire names of `docs/openapi.json` and `docs/host-openapi.json`;
//! `*` stands for a map key, which becomes a label) and says how it is exported: a counter or a
//! gauge with its name, unit, scale and help, an enum as one 0/1 gauge per variant, or not at
//! all (and why). The exposition serializes the typed value once and walks its fields through
//! the table; a test serializes every type with every optional part present and checks that
//! every field has a row and every row a field, so a field added to the schema cannot be left
//! out by accident. Names follow Prometheus's conventions: `memvisor_vm_` for what a VMM
//! reports, `memvisor_host_` and `memvisor_host_vm_` for the host's own view; base units
//! (bytes, seconds; page counts of memory are exported as bytes); counters end in `_total`.
//! `docs/metrics.md` lists them all.
//!
//! The format is OpenMetrics 1.0 (`# HELP`, `# TYPE`, `# UNIT`, `# EOF`), written by the
//! `prometheus-client` crate; Prometheus reads it by its content type, [`CONTENT_TYPE`].

#![deny(missing_docs)]

mod exposition;
mod rows;
mod tables;

pub use exposition::{host, vm, HostVmMetrics, CONTENT_TYPE};
pub use rows::{MetricKind, Unit};
pub use tables::catalogue;
