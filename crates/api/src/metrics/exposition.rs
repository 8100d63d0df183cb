//! The exposition: an API value walked through its table into metric families, written in the
//! OpenMetrics 1.0 text format (`# HELP`, `# TYPE`, `# UNIT`, `# EOF`) by the
//! `prometheus-client` crate. Prometheus reads it by its content type, [`CONTENT_TYPE`].

use std::collections::HashMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::host::{HostInfo, HostVm};
use crate::metrics::rows::{json, leaves, row_of, Export, MetricKind, Row, Scale, Unit};
use crate::metrics::tables::{HOST_ROWS, HOST_VM_ROWS, VM_MAPS, VM_ROWS};
use crate::stats::VmStats;

/// The media type of a `GET /metrics` answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bytes in a guest page: census and balloon fields count pages, metrics count bytes.
const PAGE: f64 = 4096.0;

/// A number as the format writes it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Number {
    U(u64),
    I(i64),
    F(f64),
}

/// One labelled value of a metric (a line of the text format).
#[derive(Debug)]
struct MetricPoint {
    labels: Vec<(String, String)>,
    value: Number,
}

/// One metric: its name without unit or `_total`, and its points.
#[derive(Debug)]
struct Family {
    /// Where its first row is: the table's place in the answer, then the row's in the table.
    order: (usize, usize),
    name: String,
    kind: MetricKind,
    unit: Unit,
    help: &'static str,
    points: Vec<MetricPoint>,
}

/// Families in the order they first appear.
#[derive(Debug, Default)]
struct Families {
    list: Vec<Family>,
    index: HashMap<String, usize>,
}

fn number_of(v: &Value) -> Option<Number> {
    match v {
        Value::Bool(b) => Some(Number::U(u64::from(*b))),
        Value::Number(n) => n
            .as_u64()
            .map(Number::U)
            .or_else(|| n.as_i64().map(Number::I))
            .or_else(|| n.as_f64().map(Number::F)),
        _ => None,
    }
}

#[allow(clippy::cast_precision_loss)]
fn scale(n: Number, s: Scale) -> Number {
    let f = match n {
        Number::U(v) => v as f64,
        Number::I(v) => v as f64,
        Number::F(v) => v,
    };
    match (s, n) {
        (Scale::One, _) => n,
        (Scale::Pages, Number::U(v)) => Number::U(v.saturating_mul(4096)),
        (Scale::Pages, _) => Number::F(f * PAGE),
        (Scale::By(k), _) => Number::F(f * k),
    }
}

impl Families {
    fn push(
        &mut self,
        order: (usize, usize),
        name: String,
        kind: MetricKind,
        unit: Unit,
        help: &'static str,
        point: MetricPoint,
    ) {
        let key = match unit.suffix() {
            Some(u) => format!("{name}_{u}"),
            None => name.clone(),
        };
        let i = *self.index.entry(key).or_insert_with(|| {
            self.list.push(Family {
                order,
                name,
                kind,
                unit,
                help,
                points: Vec::new(),
            });
            self.list.len() - 1
        });
        self.list[i].points.push(point);
    }

    /// Adds every field of `value` (a serialized API type) that `rows` exports, with `labels`
    /// first on every point. `table` orders the tables of one answer.
    fn add(
        &mut self,
        table: usize,
        prefix: &str,
        rows: &[Row],
        maps: &[(&str, &str)],
        value: &Value,
        labels: &[(String, String)],
    ) {
        let mut found = Vec::new();
        leaves(value, "", labels, maps, &mut found);
        for leaf in found {
            let Some((i, row)) = row_of(rows, &leaf.path) else {
                tracing::debug!("metrics: no metric for field {prefix}{}", leaf.path);
                continue;
            };
            match row.export {
                Export::Number {
                    name,
                    kind,
                    unit,
                    scale: s,
                    label,
                    help,
                } => {
                    let Some(n) = number_of(leaf.value) else {
                        continue;
                    };
                    let mut labels = leaf.labels;
                    if let Some((k, v)) = label {
                        labels.push((k.to_owned(), v.to_owned()));
                    }
                    let point = MetricPoint {
                        labels,
                        value: scale(n, s),
                    };
                    self.push(
                        (table, i),
                        format!("{prefix}{name}"),
                        kind,
                        unit,
                        help,
                        point,
                    );
                }
                Export::State {
                    name,
                    variants,
                    help,
                } => {
                    let Some(current) = leaf.value.as_str() else {
                        continue;
                    };
                    for v in variants() {
                        let mut labels = leaf.labels.clone();
                        labels.push(("state".to_owned(), v.clone()));
                        let point = MetricPoint {
                            labels,
                            value: Number::U(u64::from(v == current)),
                        };
                        self.push(
                            (table, i),
                            format!("{prefix}{name}"),
                            MetricKind::Gauge,
                            Unit::None,
                            help,
                            point,
                        );
                    }
                }
                Export::Not(_) => {}
            }
        }
    }

    fn encode(mut self) -> String {
        self.list.sort_by_key(|f| f.order);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exposition(self.list)));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            // Writing to a String does not fail; should it, the answer is what was written.
            tracing::warn!("metrics: cannot encode: {e}");
        }
        out
    }
}

/// The families of one answer, handed to `prometheus-client` to write.
#[derive(Debug)]
struct Exposition(Vec<Family>);

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let unit = match f.unit {
                Unit::None => None,
                Unit::Bytes => Some(prometheus_client::registry::Unit::Bytes),
                Unit::Seconds => Some(prometheus_client::registry::Unit::Seconds),
                Unit::Ratio => Some(prometheus_client::registry::Unit::Other("ratio".into())),
            };
            let kind = match f.kind {
                MetricKind::Counter => MetricType::Counter,
                MetricKind::Gauge => MetricType::Gauge,
            };
            let mut metric = encoder.encode_descriptor(&f.name, f.help, unit.as_ref(), kind)?;
            if let [only] = f.points.as_slice() {
                if only.labels.is_empty() {
                    encode_value(metric, f.kind, only.value)?;
                    continue;
                }
            }
            for s in &f.points {
                encode_value(metric.encode_family(&s.labels)?, f.kind, s.value)?;
            }
        }
        Ok(())
    }
}

fn encode_value(m: MetricEncoder, kind: MetricKind, value: Number) -> Result<(), std::fmt::Error> {
    match (kind, value) {
        (MetricKind::Counter, Number::U(v)) => ConstCounter::new(v).encode(m),
        // A counter below zero is no counter: 0.
        (MetricKind::Counter, Number::I(v)) => {
            ConstCounter::new(u64::try_from(v).unwrap_or(0)).encode(m)
        }
        (MetricKind::Counter, Number::F(v)) => ConstCounter::new(v.max(0.0)).encode(m),
        (MetricKind::Gauge, Number::U(v)) => ConstGauge::new(v).encode(m),
        (MetricKind::Gauge, Number::I(v)) => ConstGauge::new(v).encode(m),
        (MetricKind::Gauge, Number::F(v)) => ConstGauge::new(v).encode(m),
    }
}

/// A VMM's `GET /metrics`: every number of its stats, unlabelled.
pub fn vm(stats: &VmStats) -> String {
    let mut f = Families::default();
    f.add(0, "memvisor_vm_", VM_ROWS, VM_MAPS, &json(stats), &[]);
    f.encode()
}

/// One VM of the host: what the host says of it, and its VMM's last stats (`None` before the
/// first reading and once the VMM ended).
pub struct HostVmMetrics<'a> {
    /// The VM as `GET /vms` shows it.
    pub vm: &'a HostVm,
    /// Its VMM's last `GET /stats`.
    pub stats: Option<&'a VmStats>,
}

/// The host's `GET /metrics`: its own numbers, then every VM's, labelled `vm`.
pub fn host(info: &HostInfo, vms: &[HostVmMetrics]) -> String {
    let mut f = Families::default();
    f.add(0, "memvisor_host_", HOST_ROWS, &[], &json(info), &[]);
    for v in vms {
        let labels = [("vm".to_owned(), v.vm.name.clone())];
        f.add(
            1,
            "memvisor_host_vm_",
            HOST_VM_ROWS,
            &[],
            &json(v.vm),
            &labels,
        );
    }
    for v in vms {
        if let Some(stats) = v.stats {
            let labels = [("vm".to_owned(), v.vm.name.clone())];
            f.add(2, "memvisor_vm_", VM_ROWS, VM_MAPS, &json(stats), &labels);
        }
    }
    f.encode()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::host::HostVmState;
    use crate::metrics::tables::catalogue;
    use crate::metrics::tables::tests::{full_host, full_stats, full_vm};

    /// The points of `text`: (name with labels, value).
    fn points(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    #[test]
    fn a_vm_exposition() {
        let mut s = full_stats();
        if let Some(p) = s.pager.as_mut() {
            p.pages.resident_pages = 10;
            p.counters.faults_zero = 5;
            p.counters.swap_bytes_read = 8192;
            p.fault_latency.p99_us = 1500;
        }
        s.exits.mmio = 4;
        let text = vm(&s);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# TYPE memvisor_vm_resident_bytes gauge\n"));
        assert!(text.contains("# HELP memvisor_vm_faults Faults the pager served"));
        assert!(text.contains("# TYPE memvisor_vm_faults counter\n"));
        let got = points(&text);
        let has = |k: &str, v: &str| got.contains(&(k.to_owned(), v.to_owned()));
        assert!(has("memvisor_vm_resident_bytes", "40960"), "{text}");
        assert!(has("memvisor_vm_faults_total{source=\"zero\"}", "5"));
        assert!(has("memvisor_vm_swap_read_bytes_total", "8192"));
        assert!(has("memvisor_vm_fault_latency_p99_seconds", "0.0015"));
        assert!(has("memvisor_vm_exits_total{kind=\"mmio\"}", "4"));
        assert!(has("memvisor_vm_disk_reads_total{disk=\"data\"}", "0"));
        assert!(has("memvisor_vm_pager_attached", "0"));
        assert!(has("memvisor_vm_balloon_bytes", "12288"));
        assert!(has("memvisor_vm_guest_stats_age_seconds", "0.0"));
        // Every point's name is in the catalogue.
        let cat: Vec<String> = catalogue().into_iter().map(|(n, _, _)| n).collect();
        for (k, _) in &got {
            let name = k.split('{').next().unwrap();
            assert!(
                cat.iter().any(|c| c == name),
                "{name} is not in the catalogue"
            );
        }
        // Without a pager or balloon, their metrics are absent, not zero.
        let text = vm(&VmStats::default());
        assert!(!text.contains("memvisor_vm_resident_bytes"));
        assert!(text.contains("memvisor_vm_exits_total{kind=\"io\"} 0"));
    }

    #[test]
    fn a_host_exposition() {
        let a = full_vm("a");
        let mut b = full_vm("b\"q");
        b.state = HostVmState::Exited;
        b.pid = None;
        let stats = full_stats();
        let text = host(
            &full_host(),
            &[
                HostVmMetrics {
                    vm: &a,
                    stats: Some(&stats),
                },
                HostVmMetrics {
                    vm: &b,
                    stats: None,
                },
            ],
        );
        let got = points(&text);
        let has = |k: &str, v: &str| got.contains(&(k.to_owned(), v.to_owned()));
        assert!(has("memvisor_host_budget_bytes", "1073741824"), "{text}");
        assert!(has("memvisor_host_free_state{state=\"soft\"}", "1"));
        assert!(has("memvisor_host_free_state{state=\"high\"}", "0"));
        assert!(has("memvisor_host_ticks_total", "7"));
        assert!(has("memvisor_host_idle_tax_ratio", "0.75"));
        assert!(has(
            "memvisor_host_vm_state{vm=\"a\",state=\"running\"}",
            "1"
        ));
        assert!(has(
            "memvisor_host_vm_state{vm=\"b\\\"q\",state=\"exited\"}",
            "1"
        ));
        assert!(has("memvisor_host_vm_pid{vm=\"a\"}", "10"));
        assert!(!text.contains("memvisor_host_vm_pid{vm=\"b"));
        assert!(has("memvisor_host_vm_exit_status{vm=\"a\"}", "-1"));
        assert!(has("memvisor_host_vm_active_ratio{vm=\"a\"}", "0.5"));
        assert!(has("memvisor_host_vm_paused_by_host{vm=\"a\"}", "1"));
        assert!(has(
            "memvisor_vm_disk_reads_total{vm=\"a\",disk=\"data\"}",
            "0"
        ));
        assert!(has(
            "memvisor_vm_faults_total{vm=\"a\",source=\"swap\"}",
            "0"
        ));
        assert!(!text.contains("memvisor_vm_resident_bytes{vm=\"b"));
        // One HELP and TYPE per metric, whatever the number of VMs.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let unique: BTreeSet<&&str> = types.iter().collect();
        assert_eq!(types.len(), unique.len());
    }
}
