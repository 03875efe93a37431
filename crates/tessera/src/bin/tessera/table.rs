//! Plain-text tables with aligned columns: text left, numbers right.

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.header.len();
        let width = |c: usize| {
            std::iter::once(&self.header)
                .chain(&self.rows)
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..columns).map(width).collect();
        let numeric = |c: usize| {
            !self.rows.is_empty()
                && self.rows.iter().all(|r| {
                    r.get(c)
                        .is_some_and(|s| s.replace([',', '.', '%'], "").parse::<f64>().is_ok())
                })
        };
        let line = |cells: &Vec<String>| {
            let text: Vec<String> = (0..columns)
                .map(|c| {
                    let cell = cells.get(c).map_or("", |s| s.as_str());
                    if numeric(c) {
                        format!("{cell:>w$}", w = widths[c])
                    } else {
                        format!("{cell:<w$}", w = widths[c])
                    }
                })
                .collect();
            text.join("  ").trim_end().to_string()
        };
        let rule = "-".repeat(widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1));
        let mut out = vec![line(&self.header), rule];
        out.extend(self.rows.iter().map(line));
        out.join("\n") + "\n"
    }
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `[1, 3, 32, 32]`.
pub fn shape_text(shape: &[usize]) -> String {
    format!("{shape:?}")
}
