//! What a row of a metrics table is: one field of an API type, named by its path in the type's
//! JSON, and how it is exported (a counter or a gauge with its name, unit, scale and help, an
//! enum as one 0/1 gauge per variant, or not at all); the builders the tables are written
//! with; and how a serialized value's fields find their rows.

use serde_json::Value;

/// Counter or gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows (restarts at 0 with a new VMM); exported with the suffix `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// The unit a metric's name ends in (OpenMetrics `# UNIT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A count of things.
    None,
    /// Bytes.
    Bytes,
    /// Seconds.
    Seconds,
    /// A fraction, 0 to 1.
    Ratio,
}

impl Unit {
    pub(super) fn suffix(self) -> Option<&'static str> {
        match self {
            Unit::None => None,
            Unit::Bytes => Some("bytes"),
            Unit::Seconds => Some("seconds"),
            Unit::Ratio => Some("ratio"),
        }
    }
}

/// What a field's value is multiplied by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Scale {
    One,
    /// Pages to bytes.
    Pages,
    /// Microseconds or milliseconds to seconds.
    By(f64),
}

/// How a field is exported.
#[derive(Clone, Copy, Debug)]
pub(super) enum Export {
    /// A number (a boolean as 0 or 1).
    Number {
        name: &'static str,
        kind: MetricKind,
        unit: Unit,
        scale: Scale,
        /// A label that tells apart fields exported under the same name.
        label: Option<(&'static str, &'static str)>,
        help: &'static str,
    },
    /// An enum: one gauge per variant, labelled `state`, 1 for the current one.
    State {
        name: &'static str,
        variants: fn() -> Vec<String>,
        help: &'static str,
    },
    /// Not a metric: the field (or every field under it) is text, a label, or exported under
    /// another name; the reason is documentation.
    Not(#[allow(dead_code)] &'static str),
}

/// One field of a type and how it is exported.
#[derive(Clone, Copy, Debug)]
pub(super) struct Row {
    pub(super) path: &'static str,
    pub(super) export: Export,
}

pub(super) const fn number(
    path: &'static str,
    name: &'static str,
    kind: MetricKind,
    unit: Unit,
    help: &'static str,
) -> Row {
    Row {
        path,
        export: Export::Number {
            name,
            kind,
            unit,
            scale: Scale::One,
            label: None,
            help,
        },
    }
}

pub(super) const fn gauge(
    path: &'static str,
    name: &'static str,
    unit: Unit,
    help: &'static str,
) -> Row {
    number(path, name, MetricKind::Gauge, unit, help)
}

pub(super) const fn counter(
    path: &'static str,
    name: &'static str,
    unit: Unit,
    help: &'static str,
) -> Row {
    number(path, name, MetricKind::Counter, unit, help)
}

/// A count of pages, exported as bytes.
pub(super) const fn page_gauge(path: &'static str, name: &'static str, help: &'static str) -> Row {
    gauge(path, name, Unit::Bytes, help).scaled(Scale::Pages)
}

pub(super) const fn page_counter(
    path: &'static str,
    name: &'static str,
    help: &'static str,
) -> Row {
    counter(path, name, Unit::Bytes, help).scaled(Scale::Pages)
}

pub(super) const fn state(
    path: &'static str,
    name: &'static str,
    variants: fn() -> Vec<String>,
    help: &'static str,
) -> Row {
    Row {
        path,
        export: Export::State {
            name,
            variants,
            help,
        },
    }
}

pub(super) const fn not(path: &'static str, why: &'static str) -> Row {
    Row {
        path,
        export: Export::Not(why),
    }
}

impl Row {
    pub(super) const fn scaled(self, s: Scale) -> Row {
        match self.export {
            Export::Number {
                name,
                kind,
                unit,
                label,
                help,
                ..
            } => Row {
                path: self.path,
                export: Export::Number {
                    name,
                    kind,
                    unit,
                    scale: s,
                    label,
                    help,
                },
            },
            _ => self,
        }
    }

    pub(super) const fn labelled(self, key: &'static str, value: &'static str) -> Row {
        match self.export {
            Export::Number {
                name,
                kind,
                unit,
                scale,
                help,
                ..
            } => Row {
                path: self.path,
                export: Export::Number {
                    name,
                    kind,
                    unit,
                    scale,
                    label: Some((key, value)),
                    help,
                },
            },
            _ => self,
        }
    }
}

pub(super) const US: Scale = Scale::By(1e-6);
pub(super) const MS: Scale = Scale::By(1e-3);

/// A field of a serialized value: its path (map keys as `*`), the labels its map keys give,
/// and its value.
pub(super) struct Leaf<'a> {
    pub(super) path: String,
    pub(super) labels: Vec<(String, String)>,
    pub(super) value: &'a Value,
}

pub(super) fn leaves<'a>(
    v: &'a Value,
    path: &str,
    labels: &[(String, String)],
    maps: &[(&str, &str)],
    out: &mut Vec<Leaf<'a>>,
) {
    match v {
        Value::Object(obj) => {
            let map_label = maps.iter().find(|(p, _)| *p == path).map(|(_, l)| *l);
            for (k, child) in obj {
                let (sub, l) = match map_label {
                    Some(label) => (
                        format!("{path}.*"),
                        [labels, &[(label.to_owned(), k.clone())]].concat(),
                    ),
                    None if path.is_empty() => (k.clone(), labels.to_vec()),
                    None => (format!("{path}.{k}"), labels.to_vec()),
                };
                leaves(child, &sub, &l, maps, out);
            }
        }
        // An absent optional part is no point.
        Value::Null => {}
        _ => out.push(Leaf {
            path: path.to_owned(),
            labels: labels.to_vec(),
            value: v,
        }),
    }
}

/// Whether `row` is the row of the field at `path`: it names that field, or it is a `Not` row
/// naming a part that holds it.
pub(super) fn is_row_of(row: &Row, path: &str) -> bool {
    row.path == path
        || (matches!(row.export, Export::Not(_))
            && path
                .strip_prefix(row.path)
                .is_some_and(|rest| rest.starts_with('.')))
}

/// The row of the field at `path`, and its place in `rows`.
pub(super) fn row_of<'r>(rows: &'r [Row], path: &str) -> Option<(usize, &'r Row)> {
    rows.iter().enumerate().find(|(_, r)| is_row_of(r, path))
}

/// `v` serialized, to walk through a table.
pub(super) fn json(v: &impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap_or_else(|e| {
        tracing::warn!("metrics: cannot serialize: {e}");
        Value::Null
    })
}
