//! Text layout for the admin client: tables whose columns line up, labelled
//! fields, and the API's JSON indented without reordering it.

/// Which side of its column a cell keeps to.
#[derive(Clone, Copy)]
pub(crate) enum Align {
    /// Names, read left to right.
    Left,
    /// Amounts and counts, lined up on their units.
    Right,
}

/// Columns with a header line, two spaces apart: names read left to right,
/// amounts line up on their units.
pub(crate) struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&'static str, Align)]) -> Self {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let header: Vec<String> = self.columns.iter().map(|(n, _)| (*n).to_owned()).collect();
        let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let mut text = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (at, ((cell, w), (_, align))) in
                row.iter().zip(&widths).zip(&self.columns).enumerate()
            {
                if at > 0 {
                    line.push_str("  ");
                }
                let pad = " ".repeat(w - width(cell));
                match align {
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&pad);
                    }
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(cell);
                    }
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

/// Labelled values, one per line, values aligned.
#[derive(Default)]
pub(crate) struct Fields(Vec<(String, String)>);

impl Fields {
    pub fn add(&mut self, label: &str, value: String) {
        self.0.push((label.to_owned(), value));
    }

    pub fn render(&self) -> String {
        let w = self
            .0
            .iter()
            .map(|(label, _)| width(label))
            .max()
            .unwrap_or(0);
        self.0
            .iter()
            .map(|(label, value)| format!("{label:<w$}  {value}\n"))
            .collect()
    }
}

/// Characters, not bytes: ids and metadata may be any Unicode.
fn width(text: &str) -> usize {
    text.chars().count()
}

// === --json ===

/// The API's JSON as it came, indented two spaces per level, fields in the
/// order the server sent them; a body that is not JSON is shown as it is.
pub(crate) fn json(body: &[u8]) -> String {
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        let mut text = String::from_utf8_lossy(body).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        return text;
    }
    let text = String::from_utf8_lossy(body);
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped, mut just_opened) = (false, false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    for c in text.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if c.is_whitespace() {
            continue;
        }
        if just_opened {
            just_opened = false;
            if matches!(c, '}' | ']') {
                // `{}` and `[]` stay on one line.
                depth -= 1;
                out.push(c);
                continue;
            }
            newline(&mut out, depth);
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                depth += 1;
                just_opened = true;
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            _ => out.push(c),
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::Align::{Left, Right};
    use super::*;

    #[test]
    fn a_table_aligns_names_left_and_amounts_right() {
        let mut table = Table::new(&[("id", Left), ("cost_usd", Right), ("note", Left)]);
        table.row(vec!["alice".into(), "1.500000".into(), "-".into()]);
        table.row(vec!["bo".into(), "12.000000".into(), "é".into()]);
        assert_eq!(
            table.render(),
            "id      cost_usd  note\n\
             alice   1.500000  -\n\
             bo     12.000000  é\n"
        );
    }

    #[test]
    fn json_is_indented_in_the_order_it_came() {
        let body = br#"{"keys":[{"id":"b","models":null,"metadata":{},"alert_at":[]},{"id":"a, \"q\" {x}"}],"next":null}"#;
        assert_eq!(
            json(body),
            r#"{
  "keys": [
    {
      "id": "b",
      "models": null,
      "metadata": {},
      "alert_at": []
    },
    {
      "id": "a, \"q\" {x}"
    }
  ],
  "next": null
}
"#
        );
        assert_eq!(json(b"plain,text"), "plain,text\n");
        assert_eq!(json(b""), "");
    }
}
