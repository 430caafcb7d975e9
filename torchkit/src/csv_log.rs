//! CSV logs under a fixed header: rows before the first update keep every column, a resumed
//! run appends under the header the file already has, and rows written after the checkpoint a
//! run resumes from are dropped (the resumed run writes them again).

use anyhow::Context;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// One CSV cell.
#[derive(Debug, Clone)]
pub enum CsvValue {
    Num(f64),
    Text(String),
}

/// Appends a row of numbers (see [`append_csv_values`]).
pub fn append_csv(path: &Path, columns: &[String], row: &BTreeMap<String, f64>) -> anyhow::Result<()> {
    let values: BTreeMap<String, CsvValue> = row.iter().map(|(k, v)| (k.clone(), CsvValue::Num(*v))).collect();
    append_csv_values(path, columns, &values)
}

/// Appends a row under a fixed header (written with the first row; an existing file keeps its
/// own, e.g. a resumed run's); cells the row lacks stay empty.
pub fn append_csv_values(path: &Path, columns: &[String], row: &BTreeMap<String, CsvValue>) -> anyhow::Result<()> {
    let header: Vec<String> = if path.exists() {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        text.lines()
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::to_string)
            .collect()
    } else {
        let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(f, "{}", columns.join(","))?;
        columns.to_vec()
    };
    let cells: Vec<String> = header
        .iter()
        .map(|k| match row.get(k) {
            Some(CsvValue::Num(v)) => format!("{v}"),
            Some(CsvValue::Text(s)) => s.replace(',', ";"),
            None => String::new(),
        })
        .collect();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{}", cells.join(","))?;
    Ok(())
}

/// Keeps the header and the rows whose first cell (the timestep) satisfies `keep`.
pub fn truncate_log(path: &Path, keep: impl Fn(f64) -> bool) -> anyhow::Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let mut lines = text.lines();
    let mut out: Vec<&str> = lines.next().into_iter().collect();
    out.extend(lines.filter(|l| {
        l.split(',')
            .next()
            .and_then(|c| c.parse::<f64>().ok())
            .is_some_and(&keep)
    }));
    std::fs::write(path, out.join("\n") + "\n").with_context(|| format!("rewriting {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_header_and_truncate_by_timestep() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let cols = ["timestep".to_string(), "a".into(), "b".into()];
        for t in 1..=3 {
            let row = BTreeMap::from([("timestep".to_string(), t as f64), ("b".to_string(), 0.5)]);
            append_csv(&path, &cols, &row).unwrap();
        }
        truncate_log(&path, |t| t <= 2.0).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "timestep,a,b\n1,,0.5\n2,,0.5\n"
        );
    }
}
