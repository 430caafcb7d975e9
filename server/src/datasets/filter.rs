//! Which episodes a trajectory dataset holds: the filters of `GET /api/v1/datasets/...` and of
//! `arena dataset export`, parsed from `key=value` pairs with errors that name the key.

use crate::access;
use crate::storage::{EpisodeRow, EpisodeState, Submission};
use serde::Serialize;

/// A comparison of a metric with a number: `emd<=0.9`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricBound {
    pub metric: String,
    /// One of `<`, `<=`, `>`, `>=`, `=`.
    pub op: String,
    pub value: f64,
}

impl MetricBound {
    /// Parses `NAME OP NUMBER` (`emd<=0.9`, `mpjpe_g > 120`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let at = text.find(['<', '>', '=']).ok_or_else(|| {
            format!("metric: expected NAME OP NUMBER such as emd<=0.9 (OP one of < <= > >= =), got {text:?}")
        })?;
        let metric = text[..at].trim();
        let rest = &text[at..];
        let op = ["<=", ">=", "<", ">", "="]
            .into_iter()
            .find(|op| rest.starts_with(op))
            .expect("starts with < > or =");
        let number = rest[op.len()..].trim();
        if metric.is_empty() {
            return Err(format!("metric: no metric name before {op:?} in {text:?}"));
        }
        let value: f64 = number
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| format!("metric: expected a finite number after {op:?} in {text:?}, got {number:?}"))?;
        Ok(Self {
            metric: metric.to_string(),
            op: op.to_string(),
            value,
        })
    }

    /// Whether `v` satisfies the bound; an absent or NaN metric never does.
    pub fn holds(&self, v: Option<f64>) -> bool {
        let Some(v) = v.filter(|v| !v.is_nan()) else {
            return false;
        };
        match self.op.as_str() {
            "<" => v < self.value,
            "<=" => v <= self.value,
            ">" => v > self.value,
            ">=" => v >= self.value,
            _ => v == self.value,
        }
    }
}

fn status_words<S: serde::Serializer>(status: &[EpisodeState], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(status.iter().map(EpisodeState::word))
}

/// The filters of one export. Every set filter must hold for an episode to be included.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatasetFilter {
    /// Episode states; default: the scored ones, COMPLETED and FELL. Written in the card as the
    /// filter takes them (`completed`), so that the card's filters can be pasted back.
    #[serde(serialize_with = "status_words")]
    pub status: Vec<EpisodeState>,
    /// Whether the episode succeeded by the benchmark's success metric (`ranking.success`, else
    /// `success`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricBound>,
    /// Team names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub team: Vec<String>,
    /// Submission ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub submission: Vec<String>,
    /// Motion names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub motion: Vec<String>,
    /// Submissions created at or after this time (unix milliseconds; RFC 3339 in the card).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_time")]
    pub since: Option<i64>,
    /// Submissions created before this time.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_time")]
    pub until: Option<i64>,
}

fn opt_time<S: serde::Serializer>(t: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(ms) => s.serialize_str(&access::rfc3339_exact(*ms)),
        None => s.serialize_none(),
    }
}

impl Default for DatasetFilter {
    fn default() -> Self {
        Self {
            status: vec![EpisodeState::Completed, EpisodeState::Fell],
            success: None,
            metrics: Vec::new(),
            team: Vec::new(),
            submission: Vec::new(),
            motion: Vec::new(),
            since: None,
            until: None,
        }
    }
}

/// Values a list filter (team, submission, motion) may hold.
pub const MAX_FILTER_VALUES: usize = 1000;

/// The filter keys, for errors and `--help`.
pub const FILTER_KEYS: [&str; 8] = [
    "status",
    "success",
    "metric",
    "team",
    "submission",
    "motion",
    "since",
    "until",
];

impl DatasetFilter {
    /// Builds a filter from `key=value` pairs (query parameters or command-line flags). List
    /// keys take comma-separated values and may repeat; `metric` repeats.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, String> {
        let mut f = Self::default();
        let mut status_given = false;
        // A key that takes one value, given twice, is an error rather than the last one silently.
        let mut single_seen: Vec<&str> = Vec::new();
        let list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        for (key, value) in pairs {
            // `team=` from a script whose variable was empty would select every team.
            if value.split(',').all(|v| v.trim().is_empty()) && FILTER_KEYS.contains(&key) {
                return Err(format!("{key}: empty; give a value, or leave the filter out"));
            }
            if matches!(key, "success" | "since" | "until") {
                if single_seen.contains(&key) {
                    return Err(format!("{key}: given twice; it takes one value"));
                }
                single_seen.push(key);
            }
            match key {
                "status" => {
                    if !status_given {
                        f.status.clear();
                        status_given = true;
                    }
                    for word in list(value) {
                        let state = parse_state(&word)?;
                        if !f.status.contains(&state) {
                            f.status.push(state);
                        }
                    }
                }
                "success" => {
                    f.success = Some(match value {
                        "true" | "1" | "yes" => true,
                        "false" | "0" | "no" => false,
                        other => return Err(format!("success: expected true or false, got {other:?}")),
                    })
                }
                "metric" => f.metrics.push(MetricBound::parse(value)?),
                "team" => f.team.extend(list(value)),
                "submission" => f.submission.extend(list(value)),
                "motion" => f.motion.extend(list(value)),
                "since" => f.since = Some(parse_time("since", value)?),
                "until" => f.until = Some(parse_time("until", value)?),
                other => {
                    return Err(format!(
                        "unknown filter {other:?}; filters are {}",
                        FILTER_KEYS.join(", ")
                    ));
                }
            }
        }
        if f.status.is_empty() {
            return Err("status: expected one or more of completed, fell, failed, timeout".into());
        }
        if let (Some(since), Some(until)) = (f.since, f.until)
            && since >= until
        {
            return Err("since: must be before until (the range would select nothing)".into());
        }
        // In one order whatever the request's: the same selection is the same export key.
        f.status.sort_by_key(|s| s.word());
        f.metrics.sort_by(|a, b| {
            (a.metric.as_str(), a.op.as_str(), a.value.to_bits()).cmp(&(
                b.metric.as_str(),
                b.op.as_str(),
                b.value.to_bits(),
            ))
        });
        f.metrics.dedup();
        // Sorted and without repeats: the same selection in another order is the same export
        // (and the same stored file), and the checks per episode are binary searches.
        for (key, values) in [
            ("team", &mut f.team),
            ("submission", &mut f.submission),
            ("motion", &mut f.motion),
        ] {
            values.sort_unstable();
            values.dedup();
            if values.len() > MAX_FILTER_VALUES {
                return Err(format!(
                    "{key}: {} values, more than the limit of {MAX_FILTER_VALUES}",
                    values.len()
                ));
            }
        }
        Ok(f)
    }

    /// Whether the submission can contribute episodes (team, id and date filters).
    pub fn admits_submission(&self, s: &Submission) -> bool {
        (self.team.is_empty() || self.team.binary_search(&s.team_name).is_ok())
            && (self.submission.is_empty() || self.submission.binary_search(&s.id).is_ok())
            && self.since.is_none_or(|t| s.created_at >= t)
            && self.until.is_none_or(|t| s.created_at < t)
    }

    /// Whether the episode is included (status, motion, success and metric filters).
    pub fn admits_episode(&self, e: &EpisodeRow, success_metric: &str) -> bool {
        self.status.contains(&e.status)
            && (self.motion.is_empty() || self.motion.binary_search(&e.motion).is_ok())
            && self
                .success
                .is_none_or(|want| e.metrics.get(success_metric).is_some_and(|v| *v >= 0.5) == want)
            && self.metrics.iter().all(|b| b.holds(e.metrics.get(&b.metric).copied()))
    }

    /// Metric names the filter uses, for checking them against the benchmark's list.
    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.metrics.iter().map(|b| b.metric.as_str())
    }
}

fn parse_state(word: &str) -> Result<EpisodeState, String> {
    match word.to_ascii_lowercase().as_str() {
        "completed" => Ok(EpisodeState::Completed),
        "fell" => Ok(EpisodeState::Fell),
        "failed" => Ok(EpisodeState::Failed),
        "timeout" => Ok(EpisodeState::Timeout),
        _ => Err(format!(
            "status: expected completed, fell, failed or timeout (finished episodes), got {word:?}"
        )),
    }
}

/// RFC 3339 (`2026-11-24T00:00:00Z`), a date (`2026-11-24`, midnight UTC) or unix milliseconds.
fn parse_time(key: &str, text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return access::check_given_ms(ms).map_err(|e| format!("{key}: {e}"));
    }
    let full = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    };
    access::parse_rfc3339(&full)
        .map_err(|e| format!("{key}: expected an RFC 3339 time, a date YYYY-MM-DD or unix milliseconds: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_into_filters() {
        let f = DatasetFilter::from_pairs([
            ("status", "completed"),
            ("status", "fell,completed"),
            ("success", "true"),
            ("metric", "emd<=0.9"),
            ("metric", "mpjpe_g > 120"),
            ("team", "a,b"),
            ("since", "2026-11-01"),
        ])
        .unwrap();
        assert_eq!(f.status, [EpisodeState::Completed, EpisodeState::Fell]);
        assert_eq!(f.success, Some(true));
        assert_eq!(
            f.metrics[1],
            MetricBound {
                metric: "mpjpe_g".into(),
                op: ">".into(),
                value: 120.0
            }
        );
        assert_eq!(f.team, ["a", "b"]);
        assert_eq!(f.since, Some(1_793_491_200_000));
        assert!(f.metrics[0].holds(Some(0.9)) && !f.metrics[0].holds(Some(0.91)) && !f.metrics[0].holds(None));
        assert!(!f.metrics[0].holds(Some(f64::NAN)));
        assert_eq!(DatasetFilter::from_pairs([]).unwrap(), DatasetFilter::default());
        // An empty value (a script's unset variable) is refused, not taken as no filter.
        for key in ["team", "motion", "since", " ,"] {
            let key = key.trim_matches([' ', ',']);
            if key.is_empty() {
                continue;
            }
            let e = DatasetFilter::from_pairs([(key, "")]).unwrap_err();
            assert!(e.starts_with(&format!("{key}: empty")), "{e}");
        }
        assert!(
            DatasetFilter::from_pairs([("team", " , ")])
                .unwrap_err()
                .starts_with("team: empty")
        );
        // As the card writes them, the times select the same again: to the millisecond where
        // they have one (a card to the second selected a submission more).
        for (ms, written) in [
            (1_796_543_696_864, "2026-12-06T07:54:56.864Z"),
            (1_793_491_200_000, "2026-11-01T00:00:00Z"),
        ] {
            let f = DatasetFilter::from_pairs([("since", ms.to_string().as_str())]).unwrap();
            let card = serde_json::to_value(&f).unwrap();
            assert_eq!(card["since"], written);
            let again = DatasetFilter::from_pairs([("since", written)]).unwrap();
            assert_eq!(again.since, Some(ms));
        }
        // The same names in any order, repeated or not, are the same filter (one stored export).
        let a = DatasetFilter::from_pairs([("motion", "squat,stand,squat"), ("team", "b")]).unwrap();
        let b = DatasetFilter::from_pairs([("team", "b"), ("motion", "stand"), ("motion", "squat")]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.motion, ["squat", "stand"]);
        // Statuses and metric bounds too.
        let a = DatasetFilter::from_pairs([
            ("status", "fell,completed"),
            ("metric", "mpjpe_g>1"),
            ("metric", "emd<2"),
        ]);
        let b = DatasetFilter::from_pairs([
            ("metric", "emd<2"),
            ("status", "completed,fell"),
            ("metric", "mpjpe_g>1"),
        ]);
        assert_eq!(a.unwrap(), b.unwrap());
        let many = (0..=MAX_FILTER_VALUES)
            .map(|i| format!("m{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let err = DatasetFilter::from_pairs([("motion", many.as_str())]).unwrap_err();
        assert!(
            err.contains("motion: 1001 values, more than the limit of 1000"),
            "{err}"
        );
    }

    #[test]
    fn ranges_that_select_nothing_and_single_keys_given_twice_are_refused() {
        let err = DatasetFilter::from_pairs([("since", "2026-11-02"), ("until", "2026-11-01")]).unwrap_err();
        assert!(err.starts_with("since: must be before until"), "{err}");
        let err = DatasetFilter::from_pairs([("since", "2026-11-01"), ("until", "2026-11-01")]).unwrap_err();
        assert!(err.starts_with("since:"), "{err}");
        for key in ["success", "since", "until"] {
            let value = if key == "success" { "true" } else { "2026-11-01" };
            let err = DatasetFilter::from_pairs([(key, value), (key, value)]).unwrap_err();
            assert_eq!(err, format!("{key}: given twice; it takes one value"));
        }
    }

    #[test]
    fn bad_filters_name_the_key() {
        for (pair, want) in [
            (("status", "running"), "status: expected completed"),
            (("success", "maybe"), "success: expected true or false"),
            (("metric", "emd"), "metric: expected NAME OP NUMBER"),
            (("metric", "<=3"), "no metric name"),
            (("metric", "emd<=abc"), "expected a finite number"),
            (("since", "yesterday"), "since: expected an RFC 3339 time"),
            // The dataset card writes these times: humantime panics outside 1970-9999.
            (("since", "-1"), "since: expected a time from 1970-01-01 to 9999-12-31"),
            (
                ("until", "300000000000000"),
                "until: expected a time from 1970-01-01 to 9999-12-31",
            ),
            (("colour", "red"), "unknown filter \"colour\""),
        ] {
            let err = DatasetFilter::from_pairs([pair]).unwrap_err();
            assert!(err.contains(want), "{pair:?}: {err}");
        }
    }
}
