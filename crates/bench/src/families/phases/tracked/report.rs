//! The outputs of `memvisor bench tracked` (VSwapper Fig. 15): `results.csv` (one row per
//! answer to `GET /stats`), the report's section on what the Swap Mapper tracked against the
//! guest's page cache, and the figure.

use std::fmt::Write as _;
use std::path::Path;

use super::EVERY;
use crate::families::phases::configs::Config;
use crate::families::phases::experiment::Experiment;
use crate::families::phases::report::Record;
use crate::report::figure::{color, xs, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::{median, or_dash, MIB};
use crate::report::table::Table;

/// Page-cache sizes below this are left out of the ratio (a handful of pages would make it
/// anything).
const LEAST_CACHE: u64 = 16 << 20;

/// One answer to `GET /stats`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds since the run started.
    pub t_s: f64,
    /// The guest's page cache, as its driver last sent it, and how old that was (ms).
    pub cache: Option<(u64, u64)>,
    /// Bytes resident and identical to the image block they were read from.
    pub mirrored: u64,
    /// Bytes dropped while mirroring a block; they refault from the image.
    pub on_disk: u64,
    pub resident: u64,
}

impl Sample {
    /// What the Mapper tracks: pages it associates with a disk block, in guest memory or not.
    pub fn tracked(&self) -> u64 {
        self.mirrored + self.on_disk
    }

    /// The guest's page cache when the driver sent it (seconds since the run started).
    fn cache_at(&self) -> Option<(f64, u64)> {
        self.cache
            .map(|(bytes, age)| (self.t_s - age as f64 / 1e3, bytes))
    }
}

/// The answers a run kept, in order; those without a pager are skipped.
pub fn samples(r: &Record) -> Vec<Sample> {
    let one = |(at_ms, st): &(f64, memvisor_api::VmStats)| {
        let census = &st.pager.as_ref()?.pages;
        let guest = st.balloon.as_ref().and_then(|b| b.guest.as_ref());
        let cache = guest.and_then(|g| Some((g.disk_caches_bytes?, g.age_ms)));
        Some(Sample {
            t_s: at_ms / 1e3,
            cache,
            mirrored: census.mirrored_pages << 12,
            on_disk: census.on_disk_pages << 12,
            resident: census.resident_pages << 12,
        })
    };
    r.result.stats.iter().filter_map(one).collect()
}

/// How close the tracked size kept to the page cache in one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Closeness {
    /// Answers with a page cache of at least [`LEAST_CACHE`].
    pub n: usize,
    /// Tracked over page cache: median, least, most.
    pub ratio: (f64, f64, f64),
    /// Page cache less tracked, MiB, median.
    pub gap_mib: f64,
    pub peak_cache_mib: f64,
    pub peak_tracked_mib: f64,
}

/// [`Closeness`] of `samples`, `None` when the guest never had [`LEAST_CACHE`] cached.
pub fn closeness(samples: &[Sample]) -> Option<Closeness> {
    let pairs: Vec<(u64, u64)> = samples
        .iter()
        .filter_map(|s| Some((s.cache?.0, s.tracked())))
        .filter(|&(c, _)| c >= LEAST_CACHE)
        .collect();
    let ratios: Vec<f64> = pairs.iter().map(|&(c, t)| t as f64 / c as f64).collect();
    let gaps = pairs.iter().map(|&(c, t)| (c as f64 - t as f64) / MIB);
    let least = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let most = ratios.iter().copied().fold(0.0, f64::max);
    let peak = |f: &dyn Fn(&Sample) -> Option<u64>| {
        samples.iter().filter_map(f).max().unwrap_or(0) as f64 / MIB
    };
    Some(Closeness {
        n: pairs.len(),
        ratio: (median(ratios)?, least, most),
        gap_mib: median(gaps.collect())?,
        peak_cache_mib: peak(&|s| s.cache.map(|c| c.0)),
        peak_tracked_mib: peak(&|s| Some(s.tracked())),
    })
}

/// The report's section: for each run that kept answers, how close the tracked size kept to the
/// page cache; then per configuration the median over its runs (the row a published value
/// reads). Nothing when no run kept any.
pub fn section(s: &mut String, configs: &[&Config], records: &[Record], si: usize) {
    let runs: Vec<(&Record, Closeness)> = records
        .iter()
        .filter(|r| r.step == si)
        .filter_map(|r| Some((r, closeness(&samples(r))?)))
        .collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## What the Swap Mapper tracked\n\nEvery {} ms the harness asked for `GET /stats`: the pages the Mapper tracks (mirrored, resident or dropped to the image) and the guest's page cache as its balloon driver last sent it. Over the answers with at least {} MiB cached:\n",
        EVERY.as_millis(),
        LEAST_CACHE >> 20
    );
    let mut t = Table::new(
        "configuration | rep | answers | tracked / page cache (median) | least–most | page cache less tracked, MiB (median) | most cached MiB | most tracked MiB"
            .split(" | "),
    );
    for (r, c) in &runs {
        t.row(vec![
            r.config.name.to_owned(),
            r.rep.to_string(),
            c.n.to_string(),
            format!("{:.2}", c.ratio.0),
            format!("{:.2}–{:.2}", c.ratio.1, c.ratio.2),
            format!("{:.1}", c.gap_mib),
            format!("{:.0}", c.peak_cache_mib),
            format!("{:.0}", c.peak_tracked_mib),
        ]);
    }
    s.push_str(&t.markdown());
    let _ = writeln!(
        s,
        "\nThe page cache counts dirty pages the Mapper does not track (they hold no disk block's content until written back); pages the guest freed from its cache stay tracked until it writes them. The guest's figure is as old as its driver's last statistics (about one poll)."
    );
    let mut t = Table::new("configuration | tracked / page cache".split(" | "));
    for c in configs {
        let mine: Vec<f64> = runs
            .iter()
            .filter(|(r, _)| r.config.name == c.name)
            .map(|(_, x)| x.ratio.0)
            .collect();
        if !mine.is_empty() {
            t.row(vec![c.name.to_owned(), or_dash(median(mine), 2)]);
        }
    }
    let _ = writeln!(
        s,
        "\n## Tracked over the page cache per configuration\n\nThe median over its runs of each run's median above:\n"
    );
    s.push_str(&t.markdown());
}

/// The CSV header of `results.csv`.
const CSV_HEADER: &str = "experiment,config,rep,t_s,guest_cache_bytes,guest_stats_age_ms,tracked_bytes,mirrored_bytes,on_disk_bytes,resident_bytes";

/// `results.csv`: one row per answer of every run.
pub fn csv(name: &str, records: &[Record]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for r in records {
        for x in samples(r) {
            let cache =
                |f: fn((u64, u64)) -> u64| x.cache.map_or(String::new(), |c| f(c).to_string());
            t.row(crate::cells![
                name,
                r.config.name,
                r.rep,
                format!("{:.3}", x.t_s),
                cache(|c| c.0),
                cache(|c| c.1),
                x.tracked(),
                x.mirrored,
                x.on_disk,
                x.resident,
            ]);
        }
    }
    t.csv()
}

/// The figure: for each run, the page cache and what the Mapper tracked over time.
pub fn plot(path: &Path, exp: &Experiment, records: &[Record]) -> Result<(), String> {
    let panels: Vec<Panel> = records
        .iter()
        .filter(|r| !r.result.stats.is_empty())
        .map(|r| run_panel(exp, r))
        .collect();
    if panels.is_empty() {
        return Err("no run kept an answer to GET /stats".into());
    }
    let rows = u32::try_from(panels.len()).unwrap_or(1).min(64);
    let height = 80 + 520 * rows;
    Figure::column((1300, height), panels).write(path)
}

fn run_panel(exp: &Experiment, r: &Record) -> Panel {
    let xs_of = samples(r);
    let mib = |b: u64| b as f64 / MIB;
    let cache = xs_of.iter().filter_map(Sample::cache_at);
    let lines = vec![
        Line::new(
            "guest page cache (balloon statistics)",
            color(0),
            3,
            cache.map(|(t, b)| (t, mib(b))).collect(),
        ),
        Line::new(
            "tracked by the Swap Mapper",
            color(1),
            2,
            xs_of.iter().map(|x| (x.t_s, mib(x.tracked()))).collect(),
        ),
        Line::new(
            "of it dropped to the image",
            color(2),
            1,
            xs_of.iter().map(|x| (x.t_s, mib(x.on_disk))).collect(),
        )
        .dashed(),
    ];
    let xmax = xs(&lines).fold(1.0, f64::max);
    let ymax = ys(&lines).fold(1.0, f64::max) * 1.1;
    let title = format!(
        "{}: {} rep {} (guest {} MiB, limit {} MiB)",
        exp.name,
        r.config.name,
        r.rep,
        exp.mem >> 20,
        exp.limit.unwrap_or(exp.mem) >> 20
    );
    Panel {
        lines,
        legend: Legend::Margin(300),
        y_decimals: Some(0),
        ..Panel::new(
            title,
            "seconds since the VM started",
            "MiB",
            Axis::linear(0.0, xmax),
            Axis::linear(0.0, ymax),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_s: f64, cache_mib: u64, mirrored_mib: u64, on_disk_mib: u64) -> Sample {
        Sample {
            t_s,
            cache: Some((cache_mib << 20, 250)),
            mirrored: mirrored_mib << 20,
            on_disk: on_disk_mib << 20,
            resident: 0,
        }
    }

    #[test]
    fn closeness_counts_only_a_cache_worth_comparing() {
        let s = [
            // Too little cached to count.
            at(0.5, 4, 8, 0),
            at(1.0, 100, 80, 10),
            at(1.5, 200, 150, 50),
            at(2.0, 100, 120, 0),
        ];
        let c = closeness(&s).unwrap();
        assert_eq!(c.n, 3);
        assert_eq!(c.ratio, (1.0, 0.9, 1.2));
        assert_eq!(c.gap_mib, 0.0);
        assert_eq!((c.peak_cache_mib, c.peak_tracked_mib), (200.0, 200.0));
        assert_eq!(s[1].tracked(), 90 << 20);
        assert_eq!(s[1].cache_at(), Some((0.75, 100 << 20)));
        // No guest statistics, or never enough cached: nothing to say.
        let none = Sample {
            cache: None,
            ..s[1]
        };
        assert_eq!(closeness(&[none]), None);
        assert_eq!(closeness(&s[..1]), None);
    }
}
