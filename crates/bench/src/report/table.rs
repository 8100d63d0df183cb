//! Tables: a [`Table`] rendered as Markdown (for `report.md`) or as CSV, the one quoting rule
//! every `results.csv` follows ([`field`]), and [`cells!`](crate::cells) for a row of values.

/// A table row from values that display: `cells![a, b, format!("{c:.1}")]`.
#[macro_export]
macro_rules! cells {
    ($($c:expr),* $(,)?) => {
        vec![$($c.to_string()),*]
    };
}

/// A table: a header and rows of cells, rendered as Markdown or as CSV.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names and no rows.
    pub fn new(head: impl IntoIterator<Item = impl ToString>) -> Table {
        Table {
            head: head.into_iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table in Markdown: the header, its rule and one line per row.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut s = line(&self.head);
        s.push('|');
        s.push_str(&"---|".repeat(self.head.len()));
        s.push('\n');
        for r in &self.rows {
            s.push_str(&line(r));
        }
        s
    }

    /// The table as CSV: the header, then each row with each cell as [`field`] writes it.
    pub fn csv(&self) -> String {
        let mut s = self.head.join(",");
        s.push('\n');
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|c| field(c)).collect();
            s.push_str(&cells.join(","));
            s.push('\n');
        }
        s
    }
}

/// `s` as one Markdown cell: `-` when empty, its `|` (which would split the cell) as `/`.
pub fn text(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.replace('|', "/")
    }
}

/// `s` as one CSV field: quoted when it holds a comma, a quote or a line break (quotes
/// doubled, line breaks turned into spaces, so a row stays one line), as it is otherwise.
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\"").replace('\n', " "))
    } else {
        s.to_owned()
    }
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
        assert_eq!((text(""), text("a|b")), ("-".into(), "a/b".into()));
    }

    #[test]
    fn tables_render_as_markdown_and_csv() {
        let mut t = Table::new(["a", "b"]);
        t.row(crate::cells![1, "x,y"]);
        assert_eq!(t.markdown(), "| a | b |\n|---|---|\n| 1 | x,y |\n");
        assert_eq!(t.csv(), "a,b\n1,\"x,y\"\n");
    }
}
