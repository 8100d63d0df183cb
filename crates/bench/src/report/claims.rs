//! A paper's published value set beside ours: a [`Claim`] names the figure, the value the
//! paper's text gives (and where), and the cell of an experiment's `report.md` that holds our
//! counterpart; [`Claim::judge`] reads it and gives the one-line verdict.

use crate::report::numbers::sig;

/// A cell of a table in an experiment's `report.md`: the table under the first heading that
/// starts with `section`, the last row whose first cells are `row` (`*` matches any: with
/// rows in ascending order, `["*", "pool-faults"]` is the largest size's), the column headed
/// `column`.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub experiment: &'static str,
    pub section: &'static str,
    pub row: &'static [&'static str],
    pub column: &'static str,
}

/// Our number: one cell, or one cell over another (a ratio the paper states).
#[derive(Clone, Copy, Debug)]
pub enum Ours {
    Cell(Cell),
    Ratio(Cell, Cell),
}

/// What the paper's text states: a value, or a bound its words give ("more than doubles").
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Paper {
    Value(f64),
    Above(f64),
    Below(f64),
}

/// One published number and ours beside it.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// The figure or table, as the paper numbers it (`Table 2`).
    pub figure: &'static str,
    /// What the number is, with its unit.
    pub measures: &'static str,
    pub paper: Paper,
    /// Where the paper states it (`§6.2.1`).
    pub source: &'static str,
    pub ours: Ours,
    /// Why ours differs from the paper's, where that is known; said when the verdict is not
    /// "same".
    pub why: &'static str,
}

/// A claim read against the experiments' reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    pub ours: Option<f64>,
    pub verdict: String,
    /// Whether the verdict is "same" (or the bound holds).
    pub same: bool,
}

/// Two numbers are "about the same" within this factor of each other.
const SAME_FACTOR: f64 = 2.0;

impl Paper {
    pub fn text(&self) -> String {
        match self {
            Paper::Value(v) => sig(*v),
            Paper::Above(v) => format!("> {}", sig(*v)),
            Paper::Below(v) => format!("< {}", sig(*v)),
        }
    }
}

impl Claim {
    /// Reads our number from the reports `report_of(experiment)` gives, and judges it.
    pub fn judge(&self, report_of: &dyn Fn(&str) -> Option<String>) -> Judged {
        let read = |c: &Cell| -> Result<f64, String> {
            let report =
                report_of(c.experiment).ok_or_else(|| format!("no report of {}", c.experiment))?;
            cell(&report, c)
        };
        let ours = match &self.ours {
            Ours::Cell(c) => read(c),
            Ours::Ratio(a, b) => match (read(a), read(b)) {
                (Ok(_), Ok(0.0)) => Err(format!("{} is 0", b.row.join(" "))),
                (Ok(n), Ok(d)) => Ok(n / d),
                (Err(e), _) | (_, Err(e)) => Err(e),
            },
        };
        match ours {
            Ok(v) => self.verdict(v),
            Err(e) => Judged {
                ours: None,
                verdict: format!("not measured: {e}"),
                same: false,
            },
        }
    }

    /// The verdict on `ours`: for a ratio, the same shape (the same side of 1) and the same
    /// ratio (within a factor of [`SAME_FACTOR`]); for a level, the same within that factor;
    /// for a bound, whether it holds.
    fn verdict(&self, ours: f64) -> Judged {
        let ratio = matches!(self.ours, Ours::Ratio(..));
        let near =
            |a: f64, b: f64| a > 0.0 && b > 0.0 && a / b <= SAME_FACTOR && b / a <= SAME_FACTOR;
        let (same, text) = match self.paper {
            Paper::Above(t) => (
                ours > t,
                if ours > t {
                    "holds".to_owned()
                } else {
                    "does not hold".to_owned()
                },
            ),
            Paper::Below(t) => (
                ours < t,
                if ours < t {
                    "holds".to_owned()
                } else {
                    "does not hold".to_owned()
                },
            ),
            Paper::Value(0.0) => (
                ours == 0.0,
                if ours == 0.0 {
                    "the same: none".to_owned()
                } else {
                    "different: the paper's is none".to_owned()
                },
            ),
            Paper::Value(p) if ratio => {
                let side = |x: f64| {
                    if (x - 1.0).abs() < 0.05 {
                        0
                    } else if x > 1.0 {
                        1
                    } else {
                        -1
                    }
                };
                match (side(ours) == side(p), near(ours, p)) {
                    (true, true) => (true, "the same shape and ratio".to_owned()),
                    (true, false) => (
                        false,
                        format!(
                            "the same shape, {} ratio",
                            if (ours - 1.0).abs() < (p - 1.0).abs() {
                                "a smaller"
                            } else {
                                "a larger"
                            }
                        ),
                    ),
                    (false, _) if side(ours) == 0 => {
                        (false, "a different shape: no difference here".to_owned())
                    }
                    (false, _) => (false, "a different shape: the other side of 1".to_owned()),
                }
            }
            Paper::Value(p) => match near(ours, p) {
                true => (
                    true,
                    format!("the same level ({}x the paper's)", sig(ours / p)),
                ),
                false => (
                    false,
                    format!("a different level ({}x the paper's)", sig(ours / p)),
                ),
            },
        };
        let verdict = if same || self.why.is_empty() {
            text
        } else {
            format!("{text}: {}", self.why)
        };
        Judged {
            ours: Some(ours),
            verdict,
            same,
        }
    }
}

/// The number at the start of `c`'s cell in `report`, or why there is none.
pub fn cell(report: &str, c: &Cell) -> Result<f64, String> {
    let mut lines = report.lines();
    lines
        .find(|l| {
            l.starts_with('#')
                && l.trim_start_matches('#')
                    .trim_start()
                    .starts_with(c.section)
        })
        .ok_or_else(|| format!("{}: no section '{}'", c.experiment, c.section))?;
    let split = |l: &str| -> Vec<String> {
        let l = l.trim();
        let inner = l.strip_prefix('|').unwrap_or(l);
        let inner = inner.strip_suffix('|').unwrap_or(inner);
        inner.split('|').map(|x| x.trim().to_owned()).collect()
    };
    let mut table = lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    let head = split(
        table
            .next()
            .ok_or_else(|| format!("{}: no table under '{}'", c.experiment, c.section))?,
    );
    let col = head.iter().position(|h| h == c.column).ok_or_else(|| {
        format!(
            "{}: no column '{}' under '{}'",
            c.experiment, c.column, c.section
        )
    })?;
    let row = table
        .map(split)
        .filter(|r| {
            r.len() > col
                && r.len() >= c.row.len()
                && r.iter().zip(c.row).all(|(a, b)| *b == "*" || a == b)
        })
        .last()
        .ok_or_else(|| {
            format!(
                "{}: no row '{}' under '{}'",
                c.experiment,
                c.row.join(" | "),
                c.section
            )
        })?;
    leading_number(&row[col]).ok_or_else(|| {
        format!(
            "{}: '{}' at {} / {} is not a number",
            c.experiment,
            row[col],
            c.row.join(" "),
            c.column
        )
    })
}

/// The number a cell starts with (`6.93 (5.02–53.2)`, `1,601`, `**0.86x**`), if any.
fn leading_number(s: &str) -> Option<f64> {
    let s = s.trim_start_matches(['*', ' ', '×']);
    let end = s
        .char_indices()
        .find(|(i, ch)| {
            !(ch.is_ascii_digit() || *ch == '.' || *ch == ',' || (*i == 0 && *ch == '-'))
        })
        .map_or(s.len(), |(i, _)| i);
    s[..end].replace(',', "").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "# x\n\n## Whole run (`seqread`)\n\n| configuration | ok | wall s median |\n|---|---|---|\n| qemu | 1/1 | 0.45 |\n| memvisor-baseline | 1/1 | 3.59 |\n| memvisor-vswapper | 1/1 | **0.37 (0.3–0.5)** |\n| memvisor-none | 0/1 | - |\n\n## Other\n\n| configuration | wall s median |\n|---|---|\n| qemu | 9 |\n";

    fn at(row: &'static [&'static str]) -> Cell {
        Cell {
            experiment: "seqread",
            section: "Whole run",
            row,
            column: "wall s median",
        }
    }

    fn claim(paper: Paper, ours: Ours) -> Claim {
        Claim {
            figure: "Fig. 3",
            measures: "m",
            paper,
            source: "§2.2",
            ours,
            why: "the disk is fast",
        }
    }

    fn judge(c: &Claim) -> Judged {
        c.judge(&|e| (e == "seqread").then(|| REPORT.to_owned()))
    }

    #[test]
    fn cells_are_read_by_section_row_and_column() {
        assert_eq!(cell(REPORT, &at(&["memvisor-baseline"])), Ok(3.59));
        assert_eq!(cell(REPORT, &at(&["memvisor-vswapper"])), Ok(0.37));
        assert_eq!(
            cell(REPORT, &at(&["qemu"])),
            Ok(0.45),
            "the first section that matches"
        );
        assert_eq!(
            cell(REPORT, &at(&["*", "1/1"])),
            Ok(0.37),
            "the last row that matches"
        );
        assert!(cell(REPORT, &at(&["memvisor-none"]))
            .unwrap_err()
            .contains("not a number"));
        assert!(cell(REPORT, &at(&["nope"])).unwrap_err().contains("no row"));
        let no_col = Cell {
            column: "nope",
            ..at(&["qemu"])
        };
        assert!(cell(REPORT, &no_col).unwrap_err().contains("no column"));
        let no_sec = Cell {
            section: "Nope",
            ..at(&["qemu"])
        };
        assert!(cell(REPORT, &no_sec).unwrap_err().contains("no section"));
        assert_eq!(leading_number("1,601.2 ms"), Some(1601.2));
        assert_eq!(leading_number("×8.61"), Some(8.61));
        assert_eq!(leading_number("-"), None);
    }

    #[test]
    fn verdicts_say_shape_ratio_level_and_bounds() {
        let ratio = Ours::Ratio(at(&["memvisor-baseline"]), at(&["qemu"]));
        // 3.59 / 0.45 = 7.98
        let j = judge(&claim(Paper::Value(12.5), ratio));
        assert!(j.same && j.verdict == "the same shape and ratio", "{j:?}");
        let j = judge(&claim(Paper::Value(110.0), ratio));
        assert!(
            !j.same && j.verdict == "the same shape, a smaller ratio: the disk is fast",
            "{j:?}"
        );
        let j = judge(&claim(Paper::Value(0.5), ratio));
        assert!(
            !j.same
                && j.verdict
                    .starts_with("a different shape: the other side of 1"),
            "{j:?}"
        );
        let even = Ours::Ratio(at(&["qemu"]), at(&["qemu"]));
        let j = judge(&claim(Paper::Value(4.0), even));
        assert!(
            !j.same
                && j.verdict
                    .starts_with("a different shape: no difference here"),
            "{j:?}"
        );
        assert!(judge(&claim(Paper::Value(1.02), even)).same, "both about 1");
        let level = Ours::Cell(at(&["memvisor-baseline"]));
        assert!(judge(&claim(Paper::Value(2.0), level)).same);
        assert!(!judge(&claim(Paper::Value(10.0), level)).same);
        assert!(judge(&claim(Paper::Above(2.0), level)).same);
        assert!(!judge(&claim(Paper::Below(2.0), level)).same);
        let none = Ours::Cell(at(&["memvisor-none"]));
        let j = judge(&claim(Paper::Value(1.0), none));
        assert!(
            j.ours.is_none() && j.verdict.starts_with("not measured"),
            "{j:?}"
        );
        let missing = Ours::Cell(Cell {
            experiment: "alloc",
            ..at(&["qemu"])
        });
        assert_eq!(
            judge(&claim(Paper::Value(1.0), missing)).verdict,
            "not measured: no report of alloc"
        );
    }
}
