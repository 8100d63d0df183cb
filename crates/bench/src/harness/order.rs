//! The order the configurations of a benchmark run in, repetition by repetition, and the one
//! loop every family runs its plan in ([`interleave`]).
//!
//! A run leaves the host in a state the next run meets: memory freed on 4 KiB pages or in 2 MiB
//! blocks, memory the machine has reported free to a hypervisor below it (whose first touch
//! faults there), a page cache warm or cold. A plain rotation gives every configuration the same
//! predecessor in every repetition, so whatever one configuration leaves behind is always paid
//! by the same other one (`docs/bench.md`, "First touches of memory this machine has reported
//! free"). The order here is a Williams design, the crossover design of clinical trials that
//! balances first-order carry-over: over one cycle of repetitions (k of them for k
//! configurations when k is even, 2k when it is odd) every configuration runs once in every
//! position, and follows every other configuration equally often. Repetition 1 runs the
//! configurations in the order given.

use std::time::Instant;

use indicatif::ProgressBar;

use super::teardown;

/// One run of a family's plan, as [`interleave`] hands it over: its repetition, cell and
/// configuration, and the label its progress lines start with
/// (`[NAME k/total rep r/reps WHAT]`).
pub struct Turn<'a, C, K> {
    pub rep: u32,
    pub cell: &'a C,
    pub config: &'a K,
    pub label: String,
    bar: &'a ProgressBar,
}

impl<C, K> Turn<'_, C, K> {
    /// Prints `line` after the run's label, above the progress bar.
    pub fn say(&self, line: &str) {
        crate::progress::say(self.bar, &format!("{} {line}", self.label));
    }
}

/// Runs a family's plan repetition by repetition: in each, every cell of `cells(rep)` (the
/// sizes, scenarios, numbers of VMs that repetition runs) with every configuration once, the
/// configurations in [`of_rep`]'s order, until all ran or the bench is interrupted. `what`
/// names a cell and configuration in the label; a progress bar counts the runs; what `run`
/// returns is gathered in run order.
pub fn interleave<C, K, T>(
    name: &str,
    reps: u32,
    cells: impl Fn(u32) -> Vec<C>,
    configs: &[K],
    what: impl Fn(&C, &K) -> String,
    mut run: impl FnMut(&Turn<'_, C, K>) -> Result<Vec<T>, String>,
) -> Result<Vec<T>, String> {
    let total: usize = (1..=reps).map(|r| cells(r).len() * configs.len()).sum();
    let bar = crate::progress::bar(total as u64, "runs");
    bar.set_message(name.to_owned());
    let (started, mut out, mut k) = (Instant::now(), Vec::new(), 0);
    'reps: for rep in 1..=reps {
        for cell in &cells(rep) {
            for j in of_rep(configs.len(), rep) {
                if teardown::interrupted() {
                    break 'reps;
                }
                k += 1;
                let config = &configs[j];
                let label = format!(
                    "[{name} {k}/{total} rep {rep}/{reps} {}]",
                    what(cell, config)
                );
                let turn = Turn {
                    rep,
                    cell,
                    config,
                    label,
                    bar: &bar,
                };
                let since = started.elapsed().as_secs_f64();
                turn.say(&format!("starting ({since:.0} s since the bench started)"));
                out.extend(run(&turn)?);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(out)
}

/// The order of `k` configurations in repetition `rep` (from 1): indices into the given list.
pub fn of_rep(k: usize, rep: u32) -> Vec<usize> {
    if k == 0 {
        return Vec::new();
    }
    let first = williams_row(k, 0);
    // `first` renamed to 0, 1, …, k-1, so repetition 1 keeps the given order; renaming the
    // configurations keeps the design's balance.
    let mut name = vec![0; k];
    for (pos, &c) in first.iter().enumerate() {
        name[c] = pos;
    }
    let row = (rep.max(1) as usize - 1) % cycle(k);
    williams_row(k, row).into_iter().map(|c| name[c]).collect()
}

/// The repetitions after which the order repeats: k for an even number of configurations, 2k
/// for an odd one.
fn cycle(k: usize) -> usize {
    if k % 2 == 0 {
        k
    } else {
        2 * k
    }
}

/// Row `row` of the Williams design for `k` treatments: row 0 is 0, 1, k-1, 2, k-2, …; row i
/// (i < k) adds i to every entry, modulo k; for odd k, rows k to 2k-1 are rows 0 to k-1
/// reversed.
fn williams_row(k: usize, row: usize) -> Vec<usize> {
    let shift = row % k;
    let base = |j: usize| {
        if j % 2 == 1 {
            j.div_ceil(2)
        } else {
            (k - j / 2) % k
        }
    };
    let mut out: Vec<usize> = (0..k).map(|j| (base(j) + shift) % k).collect();
    if row >= k {
        out.reverse();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_repetition_keeps_the_given_order() {
        for k in 0..=9 {
            assert_eq!(of_rep(k, 1), (0..k).collect::<Vec<_>>(), "k={k}");
        }
    }

    #[test]
    fn over_a_cycle_every_configuration_runs_once_in_every_position_and_after_every_other_equally_often(
    ) {
        for k in 1..=9usize {
            let p = u32::try_from(cycle(k)).unwrap();
            let mut at = vec![vec![0u32; k]; k];
            let mut after = vec![vec![0u32; k]; k];
            for rep in 1..=p {
                let o = of_rep(k, rep);
                let mut seen = o.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..k).collect::<Vec<_>>(), "k={k} rep={rep}: {o:?}");
                for (pos, &c) in o.iter().enumerate() {
                    at[c][pos] += 1;
                }
                for w in o.windows(2) {
                    after[w[0]][w[1]] += 1;
                }
            }
            let each = p / u32::try_from(k).unwrap();
            for c in 0..k {
                assert!(at[c].iter().all(|&n| n == each), "k={k}: positions {at:?}");
                for d in 0..k {
                    if c != d {
                        assert_eq!(after[c][d], each, "k={k}: {c} before {d}: {after:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_cycle_repeats_and_a_plain_rotation_is_not_what_runs() {
        assert_eq!(of_rep(6, 7), of_rep(6, 1));
        assert_eq!(of_rep(5, 11), of_rep(5, 1));
        // With 6 configurations, a rotation would always put 5 before 0; here 0 has 5
        // predecessors over a cycle.
        let before_0: std::collections::BTreeSet<usize> = (1..=6)
            .filter_map(|rep| {
                let o = of_rep(6, rep);
                let i = o.iter().position(|&c| c == 0).unwrap();
                (i > 0).then(|| o[i - 1])
            })
            .collect();
        assert_eq!(before_0.len(), 5, "{before_0:?}");
    }
}
