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
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text.lines().next().unwrap_or_default().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    // An empty file (a stop between its creation and its header) is a new log, not one whose
    // header has no columns.
    let header: Vec<String> = if existing.is_empty() {
        let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(f, "{}", columns.join(","))?;
        columns.to_vec()
    } else {
        existing.split(',').map(str::to_string).collect()
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

/// Keeps the header and the rows whose first cell (the timestep) satisfies `keep`. The kept
/// rows are written beside the log and renamed over it, so a stop during the rewrite leaves the
/// log as it was.
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
    let mut staged = path.as_os_str().to_owned();
    staged.push(".tmp");
    let staged = std::path::PathBuf::from(staged);
    std::fs::write(&staged, out.join("\n") + "\n").with_context(|| format!("writing {}", staged.display()))?;
    std::fs::rename(&staged, path).with_context(|| format!("replacing {}", path.display()))
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
        assert!(!dir.path().join("log.csv.tmp").exists());
    }

    /// A log created and stopped before its header was written gets the header with its first
    /// row, not rows of empty cells under an empty header.
    #[test]
    fn an_empty_log_file_gets_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        std::fs::write(&path, "").unwrap();
        let cols = ["timestep".to_string(), "a".into()];
        let row = BTreeMap::from([("timestep".to_string(), 1.0), ("a".to_string(), 2.0)]);
        append_csv(&path, &cols, &row).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "timestep,a\n1,2\n");
    }
}
