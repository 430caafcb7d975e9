//! What `arena audit` checks besides the physics: that the results the server publishes are the
//! results of the stored trajectory file. Each episode's row (status, seed, metrics: what the
//! results API, the pages and the datasets show), the report, and the leaderboard's summary are
//! compared with the file and with each other, bit for bit. None of it depends on the backend
//! that re-runs the episodes: a disagreement means the database, the report or the file was
//! changed after the run (or an older arena scored it), never a physics difference.

use crate::leaderboard::ReportSummary;
use crate::results::{episode_status, stored_a_run};
use crate::storage::{EpisodeRow, Submission, SubmissionStatus};
use arena_bench::aggregate::{MetricsAggregator, REPORT_FORMAT_VERSION, Report};
use arena_data::trajectory_file::EpisodeRecord;
use arena_runner::audit::EpisodeAudit;
use std::collections::BTreeMap;

/// How far two published numbers may differ and still be the same result: scoring on a machine
/// whose maths library rounds otherwise than the server's differs in the last bits, an edited
/// number by far more.
pub const SAME_WITHIN: f64 = 1e-9;

/// Two metric values the same: within [`SAME_WITHIN`] (relative to the larger, at least 1), or
/// both undefined (absent or NaN).
fn same_value(a: Option<f64>, b: Option<f64>) -> bool {
    let defined = |v: Option<f64>| v.filter(|x| !x.is_nan());
    match (defined(a), defined(b)) {
        (Some(x), Some(y)) => x == y || (x - y).abs() <= SAME_WITHIN * x.abs().max(y.abs()).max(1.0),
        (None, None) => true,
        _ => false,
    }
}

fn shown(v: Option<f64>) -> String {
    v.filter(|x| !x.is_nan()).map_or("none".into(), |x| format!("{x}"))
}

/// Where the metrics `names` of `a` and `b` differ: "emd 0.43 (database) vs 0.01 (…)".
fn metric_differences(
    names: &[String],
    a: &BTreeMap<String, f64>,
    b: &BTreeMap<String, f64>,
    (a_is, b_is): (&str, &str),
) -> Vec<String> {
    names
        .iter()
        .filter(|n| !same_value(a.get(*n).copied(), b.get(*n).copied()))
        .map(|n| {
            format!(
                "{n} {} ({a_is}) vs {} ({b_is})",
                shown(a.get(n).copied()),
                shown(b.get(n).copied())
            )
        })
        .collect()
}

/// The file's episodes against the database's rows: every stored run in both, with the same
/// seed and status. `only`: the episodes asked for (`--episodes`), or all.
pub fn file_against_rows(records: &[EpisodeRecord], rows: &[EpisodeRow], only: &[u32]) -> Vec<String> {
    let asked = |idx: i64| only.is_empty() || only.iter().any(|e| i64::from(*e) == idx);
    let by_idx: BTreeMap<i64, &EpisodeRow> = rows.iter().map(|r| (r.idx, r)).collect();
    let mut out = Vec::new();
    for r in records {
        let Some(row) = by_idx.get(&i64::from(r.episode)) else {
            out.push(format!(
                "episode {}: in the trajectory file, not among the submission's episodes in the database",
                r.episode
            ));
            continue;
        };
        if row.seed != r.seed {
            out.push(format!(
                "episode {}: seed {} in the trajectory file, {} in the database",
                r.episode, r.seed, row.seed
            ));
        }
        // An episode given up on before its first step has an empty group and a FAILED row.
        let stored = row.status.as_str().to_lowercase();
        if r.num_rows() > 0 && stored != r.status {
            out.push(format!(
                "episode {}: {} in the trajectory file, {} in the database",
                r.episode, r.status, stored
            ));
        }
    }
    for row in rows.iter().filter(|row| stored_a_run(row) && asked(row.idx)) {
        if !records.iter().any(|r| i64::from(r.episode) == row.idx) {
            out.push(format!(
                "episode {}: the database holds its result ({}), the trajectory file has no run of it",
                row.idx,
                row.status.as_str()
            ));
        }
    }
    out
}

/// Each audited episode's metrics as scored from its stored rows (`metrics[m].0`) against the
/// database's, when `compare` (the benchmark's rules are those it was scored under); then
/// `metrics[m].0` becomes the database's value, so that the audit's Δ is the re-run against what
/// is published. Only the metrics the database holds are compared: one the benchmark lists now
/// and the row lacks was added to the file after the scoring (a rescore adds it), said in the
/// second list, as notes.
pub fn scored_file_against_rows(
    audits: &mut [EpisodeAudit],
    rows: &[EpisodeRow],
    names: &[String],
    compare: bool,
) -> (Vec<String>, Vec<String>) {
    let by_idx: BTreeMap<i64, &EpisodeRow> = rows.iter().map(|r| (r.idx, r)).collect();
    let (mut out, mut added) = (Vec::new(), std::collections::BTreeSet::new());
    for a in audits.iter_mut().filter(|a| a.error.is_none()) {
        let Some(row) = by_idx.get(&i64::from(a.episode)) else {
            continue; // said by `file_against_rows`
        };
        let from_file: BTreeMap<String, f64> = a.metrics.iter().map(|(m, (v, _))| (m.clone(), *v)).collect();
        // A scored row holds every metric it was scored with (an unscored one holds none).
        let held: Vec<String> = names.iter().filter(|n| row.metrics.contains_key(*n)).cloned().collect();
        if !row.metrics.is_empty() {
            added.extend(names.iter().filter(|n| !row.metrics.contains_key(*n)).cloned());
        }
        let differences = metric_differences(
            &held,
            &row.metrics,
            &from_file,
            ("database", "scored from its trajectory file"),
        );
        if compare && !differences.is_empty() {
            out.push(format!(
                "episode {}: {} (or the benchmark's success rule changed since it was scored: a rescore scores it by today's)",
                a.episode,
                differences.join(", ")
            ));
        }
        for (m, (stored, _)) in a.metrics.iter_mut() {
            *stored = row.metrics.get(m).copied().unwrap_or(f64::NAN);
        }
    }
    let notes = match added.is_empty() {
        true => Vec::new(),
        false => vec![format!(
            "scored before the benchmark listed {}: not compared (`arena admin submissions rescore` adds them)",
            added.into_iter().collect::<Vec<_>>().join(", ")
        )],
    };
    (out, notes)
}

/// The `format_version` of the submission's stored report, if it has one that reads.
pub fn report_format(submission: &Submission) -> Option<u32> {
    let text = submission.report_json.as_deref()?;
    serde_json::from_str::<Report>(text).ok().map(|r| r.format_version)
}

/// The report and the leaderboard's summary against the database's rows: the report's episodes
/// are the rows (status, seed, steps, metrics), its statistics are those of its episodes, and
/// the summary the leaderboard ranks is the report's.
pub fn report_against_rows(submission: &Submission, rows: &[EpisodeRow], names: &[String]) -> Vec<String> {
    let Some(text) = &submission.report_json else {
        return Vec::new(); // not finished: its report is made from the rows when asked for
    };
    let report: Report = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(e) => return vec![format!("the stored report does not read: {e}")],
    };
    let mut out = Vec::new();
    if report.format_version < REPORT_FORMAT_VERSION {
        out.push(format!(
            "the report is of format {} (this arena's is {REPORT_FORMAT_VERSION}): an older arena scored it by older \
             rules, so today's scoring of its file differs; `arena admin submissions rescore {}` scores it again",
            report.format_version, submission.id
        ));
    }
    let by_idx: BTreeMap<i64, &EpisodeRow> = rows.iter().map(|r| (r.idx, r)).collect();
    let mut reported = std::collections::BTreeSet::new();
    for e in &report.episodes {
        let idx = e.episode_id.trim_start_matches("ep").parse::<i64>().ok();
        let Some(row) = idx.and_then(|i| by_idx.get(&i)) else {
            out.push(format!("the report's episode {} is not in the database", e.episode_id));
            continue;
        };
        reported.insert(row.idx);
        let mut differences = Vec::new();
        if episode_status(row.status) != Some(e.status) {
            differences.push(format!(
                "status {:?} (report) vs {} (database)",
                e.status,
                row.status.as_str()
            ));
        }
        if e.seed != row.seed {
            differences.push(format!("seed {} (report) vs {} (database)", e.seed, row.seed));
        }
        if e.num_steps as i64 != row.steps {
            differences.push(format!("{} steps (report) vs {} (database)", e.num_steps, row.steps));
        }
        differences.extend(metric_differences(
            names,
            &e.metrics,
            &row.metrics,
            ("report", "database"),
        ));
        if !differences.is_empty() {
            out.push(format!(
                "the report's episode {}: {}",
                e.episode_id,
                differences.join(", ")
            ));
        }
    }
    for row in rows
        .iter()
        .filter(|r| episode_status(r.status).is_some() && !reported.contains(&r.idx))
    {
        out.push(format!(
            "episode {}: ended in the database, missing from the report",
            row.idx
        ));
    }
    let mut again = MetricsAggregator::new();
    for e in &report.episodes {
        again.add_episode(e.clone());
    }
    let aggregated = again.aggregated();
    let differ: std::collections::BTreeSet<&str> = report
        .aggregated
        .keys()
        .chain(aggregated.keys())
        .filter(|m| json(&report.aggregated.get(*m)) != json(&aggregated.get(*m)))
        .map(String::as_str)
        .collect();
    if !differ.is_empty() {
        out.push(format!(
            "the report's statistics are not those of its episodes ({})",
            differ.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    // Only a completed submission ranks, and so has a summary.
    if submission.status != SubmissionStatus::Completed {
        return out;
    }
    match submission
        .summary_json
        .as_deref()
        .map(serde_json::from_str::<ReportSummary>)
    {
        Some(Ok(mut stored)) => {
            let of_report = ReportSummary::of(&report);
            // Kept only since summaries record it.
            stored.format_version = stored.format_version.or(of_report.format_version);
            if json(&stored) != json(&of_report) {
                out.push("the leaderboard's summary is not the report's (the board ranks other numbers than the report gives)".into());
            }
        }
        Some(Err(e)) => out.push(format!("the leaderboard's summary does not read: {e}")),
        None => out.push("the completed submission has no leaderboard summary".into()),
    }
    out
}

/// The report the object store keeps (`reports/ID.json`, what backups and the object store's
/// readers get) against the database's (what the API serves): the same JSON.
pub fn report_copy_against_database(submission: &Submission, copy: Option<&[u8]>) -> Vec<String> {
    let (Some(copy), Some(stored)) = (copy, &submission.report_json) else {
        return Vec::new();
    };
    let read = |bytes: &[u8]| serde_json::from_slice::<serde_json::Value>(bytes).ok();
    match (read(copy), read(stored.as_bytes())) {
        (Some(a), Some(b)) if a == b => Vec::new(),
        _ => vec![format!(
            "the report in the object store ({}) is not the database's, which the API serves",
            crate::objects::report_key(&submission.id)
        )],
    }
}

/// A value as JSON, for comparisons where a NaN mean (`null`) equals a NaN.
fn json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}
