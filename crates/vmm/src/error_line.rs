//! An error and its sources on one line: a leaf, so that every module may report errors so.

/// An error and every error it came from, on one line (`a: b: c`), as the VMM reports them.
pub fn error_line(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        line.push_str(": ");
        line.push_str(&s.to_string());
        src = s.source();
    }
    line
}
