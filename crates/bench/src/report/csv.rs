//! CSV fields: the one quoting rule every `results.csv` follows.

/// `s` as one CSV field: quoted when it holds a comma, a quote or a line break, as it is
/// otherwise.
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        quoted(s)
    } else {
        s.to_owned()
    }
}

/// `s` as one quoted CSV field, for free text columns that are always quoted: quotes doubled,
/// line breaks turned into spaces, so a row stays one line.
pub fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\"").replace('\n', " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fields_that_need_it_are_quoted() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field(""), "");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two lines\"");
        assert_eq!(quoted(""), "\"\"");
        assert_eq!(quoted("plain"), "\"plain\"");
    }
}
