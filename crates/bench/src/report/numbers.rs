//! The numbers every report computes: bytes in MiB, means, medians and spreads.

/// One MiB in bytes, as a float for the reports' arithmetic.
pub const MIB: f64 = 1_048_576.0;

/// `bytes` in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB
}

/// A number of bytes, counted (`u64`) or computed (`f64`, e.g. a median).
pub trait Bytes {
    fn in_f64(self) -> f64;
}

impl Bytes for u64 {
    fn in_f64(self) -> f64 {
        self as f64
    }
}

impl Bytes for f64 {
    fn in_f64(self) -> f64 {
        self
    }
}

/// `bytes` in MiB, as text with `decimals` decimals.
pub fn mib_text(bytes: impl Bytes, decimals: usize) -> String {
    format!("{:.decimals$}", bytes.in_f64() / MIB)
}

/// `v` with `decimals` decimals, empty when there is none (a CSV cell).
pub fn fixed(v: Option<f64>, decimals: usize) -> String {
    v.map_or(String::new(), |v| format!("{v:.decimals$}"))
}

/// `v` with `decimals` decimals, `-` when there is none (a report's cell).
pub fn or_dash(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// The mean of `v` (`None` when empty).
pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Median, minimum, maximum and count of `v` (`None` when empty); sorts `v`.
pub fn summary(v: &mut [f64]) -> Option<(f64, f64, f64, usize)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((med, v[0], v[n - 1], n))
}

/// Median, minimum and maximum of `v` (`None` when empty).
pub fn spread(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    summary(&mut v).map(|(m, lo, hi, _)| (m, lo, hi))
}

/// `median (min–max)` of `v`, each formatted by `f`: the median alone when all are the same,
/// `–` when there is none.
pub fn spread_text(v: Vec<f64>, f: &dyn Fn(f64) -> String) -> String {
    match spread(v) {
        None => "–".into(),
        Some((m, lo, hi)) if (hi - lo).abs() < f64::EPSILON => f(m),
        Some((m, lo, hi)) => format!("{} ({}–{})", f(m), f(lo), f(hi)),
    }
}

/// [`spread_text`] of `v`, each number with `decimals` decimals and then `unit`.
pub fn spread_in(v: Vec<f64>, decimals: usize, unit: &str) -> String {
    spread_text(v, &|x| format!("{x:.decimals$}{unit}"))
}

/// `v` to three significant digits, or three decimals below 1 (`24262`, `6.93`, `0.124`).
pub fn sig(v: f64) -> String {
    let decimals = [100.0, 10.0, 1.0]
        .iter()
        .position(|&t| v.abs() >= t)
        .unwrap_or(3);
    if v == 0.0 {
        "0".into()
    } else {
        format!("{v:.decimals$}")
    }
}

/// The median of `v` (`None` when empty).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    summary(&mut v).map(|s| s.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_means_and_spreads() {
        assert_eq!(spread(vec![3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(vec![4.0, 1.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(vec![]), None);
        let f = |v: f64| format!("{v:.1}");
        assert_eq!(spread_text(vec![2.0, 1.0, 4.0], &f), "2.0 (1.0–4.0)");
        assert_eq!(spread_text(vec![3.0, 3.0], &f), "3.0");
        assert_eq!(spread_text(vec![], &f), "–");
        assert_eq!(spread_in(vec![1.0, 3.0], 0, " s"), "2 s (1 s–3 s)");
        assert_eq!(median(vec![4.0, 1.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
        assert_eq!(summary(&mut [5.0]), Some((5.0, 5.0, 5.0, 1)));
        assert_eq!(mean(&[1.0, 2.0]), Some(1.5));
        assert_eq!(mean(&[]), None);
        assert!((mib(3 << 20) - 3.0).abs() < 1e-12);
        assert_eq!(fixed(Some(1.25), 1), "1.2");
        assert_eq!(fixed(None, 1), "");
        assert_eq!(or_dash(Some(2.0), 0), "2");
        assert_eq!(or_dash(None, 0), "-");
        let sigs = [24262.4, 6.934, 0.1244, 0.0, -12.34].map(sig);
        assert_eq!(sigs, ["24262", "6.93", "0.124", "0", "-12.3"]);
    }
}
