//! Trajectory datasets: the episodes of a benchmark or a phase, filtered, exported as HDF5 in
//! BFM-Zero's replay-buffer layout or as `jsonl.gz` (one episode per line), with a dataset card
//! that says where every row came from.
//!
//! This module knows nothing of HTTP: [`select`] picks the episodes from the database (the
//! caller decides whose submissions may be read), [`card`] describes them, and [`export`]
//! writes them to any `Write` (`jsonl.gz`) or a file (HDF5), one episode in memory at a time.
//! The REST API (`api.rs`) and `arena dataset export` both call it.

pub mod export;
pub mod filter;
pub mod streams;
pub mod writing;

pub use export::{ExportFormat, export_hdf5, export_jsonl_gz};
pub use filter::{DatasetFilter, MetricBound};

use crate::access;
use crate::results::{engine_counts, engines_json, stored_a_run};
use crate::storage::{EpisodeRow, Storage, StorageError, Submission, SubmissionStatus};
use arena_bench::spec::BenchmarkSpec;
use serde::Serialize;
use serde_json::{Value, json};

/// What a dataset is drawn from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every completed submission of a benchmark.
    Benchmark(String),
    /// The completed submissions of one challenge phase (its benchmark is the phase's).
    Phase { id: String, benchmark: String },
}

impl Scope {
    pub fn benchmark(&self) -> &str {
        match self {
            Scope::Benchmark(b) | Scope::Phase { benchmark: b, .. } => b,
        }
    }
}

/// One submission's part of a dataset: the submission and its included episodes.
#[derive(Debug, Clone)]
pub struct Selected {
    pub submission: Submission,
    pub episodes: Vec<EpisodeRow>,
}

/// The episodes of a dataset, in export order (submissions by creation time, episodes by index).
#[derive(Debug, Clone)]
pub struct Selection {
    pub scope: Scope,
    pub filter: DatasetFilter,
    /// The metric `success` filters on.
    pub success_metric: String,
    pub parts: Vec<Selected>,
    /// Selected episodes whose stored run the object store lost, left out of `parts`.
    pub missing: Vec<MissingRuns>,
    /// What the scope held before the filters: its readable COMPLETED submissions of the
    /// benchmark's current version and their final episodes, for the card's denominators.
    pub in_scope: InScope,
}

/// What a dataset's scope held, and what it left out, before and beside its filters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InScope {
    /// Readable COMPLETED submissions of the benchmark file's current version.
    pub submissions: usize,
    /// Their episodes (every final one, whatever its status).
    pub episodes: usize,
    /// Readable COMPLETED submissions left out because they ran under another version of the
    /// benchmark file (results the file says are not comparable, as the leaderboards do).
    pub other_versions: usize,
    /// Selected episodes left out because the object store lost the run their results count
    /// ([`leave_out_missing_runs`]; the card lists them under `missing_runs`).
    pub missing_runs: usize,
}

/// Episodes of one submission left out of a dataset for want of their stored run.
#[derive(Debug, Clone, Serialize)]
pub struct MissingRuns {
    pub submission: String,
    pub episodes: Vec<i64>,
}

impl Selection {
    pub fn episodes(&self) -> usize {
        self.parts.iter().map(|p| p.episodes.len()).sum()
    }

    /// Rows of the export: each episode's recorded rows (steps + the reset row); none for an
    /// episode given up without a stored run (FAILED after its last attempt), whose group is
    /// empty.
    pub fn rows(&self) -> usize {
        self.parts
            .iter()
            .flat_map(|p| &p.episodes)
            .map(|e| match stored_a_run(e) {
                true => e.steps.max(0) as usize + 1,
                false => 0,
            })
            .sum()
    }
}

/// Leaves out of the selection the episodes whose counted run is stored nowhere (the object
/// store lost it: restored from an older backup, a file deleted), and says so in the card: one
/// such episode made every HDF5 export of its benchmark fail (500) and cut the `jsonl.gz` stream
/// short after its 200. A submission whose merged file is whole costs one read of it.
pub async fn leave_out_missing_runs(
    objects: &crate::objects::Objects,
    selection: &mut Selection,
) -> Result<(), crate::objects::ObjectError> {
    for part in &mut selection.parts {
        let missing = crate::trajectory_store::runs_missing(objects, &part.submission.id, &part.episodes).await?;
        if missing.is_empty() {
            continue;
        }
        tracing::warn!(
            "submission {}: the stored runs of episodes {missing:?} are missing from the object store; left out of a dataset",
            part.submission.id
        );
        part.episodes.retain(|e| !missing.contains(&e.idx));
        selection.in_scope.missing_runs += missing.len();
        selection.missing.push(MissingRuns {
            submission: part.submission.id.clone(),
            episodes: missing,
        });
    }
    selection.parts.retain(|p| !p.episodes.is_empty());
    Ok(())
}

/// Errors of a dataset request that are the caller's to fix.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{0}")]
    BadFilter(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Picks the episodes of `scope` that pass `filter`, from the COMPLETED submissions for which
/// `readable` holds (the caller's access rule: an admin reads all, a team its own visible ones).
pub async fn select(
    storage: &Storage,
    spec: &BenchmarkSpec,
    scope: Scope,
    filter: DatasetFilter,
    readable: impl Fn(&Submission) -> bool,
) -> Result<Selection, DatasetError> {
    for name in filter.metric_names() {
        if !spec.metrics.list.iter().any(|m| m == name) {
            return Err(DatasetError::BadFilter(format!(
                "metric: benchmark {} computes no metric {name:?}; it computes {}",
                spec.name,
                spec.metrics.list.join(", ")
            )));
        }
    }
    let success_metric = spec.ranking.success.clone().unwrap_or_else(|| "success".into());
    // A success rule's metric is computed whatever `metrics.list` says.
    let computed = spec.ranking.success.is_some() || spec.metrics.list.contains(&success_metric);
    if filter.success.is_some() && !computed {
        // Otherwise `success=true` would select nothing and `success=false` everything.
        return Err(DatasetError::BadFilter(format!(
            "success: benchmark {} has no success metric ({success_metric:?} is not among {})",
            spec.name,
            spec.metrics.list.join(", ")
        )));
    }
    let submissions = match &scope {
        Scope::Benchmark(b) => storage.completed_submissions(b).await?,
        Scope::Phase { id, .. } => storage.completed_submissions_of_phase(id).await?,
    };
    let current = |s: &Submission| s.benchmark_version.is_none_or(|v| v == i64::from(spec.version));
    let (mut submissions, other_versions): (Vec<Submission>, Vec<Submission>) = submissions
        .into_iter()
        .filter(|s| s.status == SubmissionStatus::Completed && readable(s))
        .partition(current);
    // Every episode of a COMPLETED submission is final: its row's total counts them.
    let in_scope = InScope {
        submissions: submissions.len(),
        episodes: submissions.iter().map(|s| s.episodes_total.max(0) as usize).sum(),
        other_versions: other_versions.len(),
        missing_runs: 0,
    };
    submissions.retain(|s| filter.admits_submission(s));
    submissions.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
    let mut parts = Vec::new();
    for s in submissions {
        let mut episodes = storage.episodes(&s.id).await?;
        episodes.retain(|e| filter.admits_episode(e, &success_metric));
        episodes.sort_by_key(|e| e.idx);
        if !episodes.is_empty() {
            parts.push(Selected {
                submission: s,
                episodes,
            });
        }
    }
    Ok(Selection {
        scope,
        filter,
        success_metric,
        parts,
        missing: Vec::new(),
        in_scope,
    })
}

/// Everything the card says about the simulator the selection's episodes ran in. `engine` is
/// the one engine of every stored run, or, where they differ, all of them; `engines` counts
/// the runs of each.
fn simulator_settings(spec: &BenchmarkSpec, selection: &Selection) -> Value {
    let engines = engine_counts(selection.parts.iter().flat_map(|p| &p.episodes));
    let engine = match engines.as_slice() {
        [] => Value::Null,
        [(one, _)] => json!(one),
        several => json!(format!(
            "mixed: {}",
            several.iter().map(|(e, _)| *e).collect::<Vec<_>>().join("; ")
        )),
    };
    let engines = engines_json(&engines);
    json!({
        "engine": engine,
        "engines": engines,
        "robot": "Unitree G1, 29 DOF (the project's MJCF: arena sim export-model --robot g1)",
        "physics_dt_s": arena_sim::PHYSICS_DT,
        "decimation": arena_sim::DECIMATION,
        "control_hz": 1.0 / arena_sim::CONTROL_DT,
        "dr_level": spec.episodes.dr_level,
        "fall_rule": spec.fall,
        "observation_groups": spec.observations.groups,
    })
}

/// One submission as the card lists it.
#[derive(Debug, Serialize)]
struct CardSubmission<'a> {
    id: &'a str,
    team: &'a str,
    agent: &'a str,
    created_at: String,
    finished_at: Option<String>,
    /// The version of the benchmark file it ran under.
    benchmark_version: Option<i64>,
    /// The phase it was submitted to (`None`: the benchmark outside phases).
    phase: Option<&'a str>,
    episodes: usize,
}

/// The dataset card: provenance, filters, counts, simulator settings, motion licences.
pub fn card(selection: &Selection, spec: &BenchmarkSpec, now_ms: i64) -> Value {
    let mut teams: Vec<&str> = selection
        .parts
        .iter()
        .map(|p| p.submission.team_name.as_str())
        .collect();
    teams.sort_unstable();
    teams.dedup();
    let mut motions: Vec<&str> = selection
        .parts
        .iter()
        .flat_map(|p| p.episodes.iter().map(|e| e.motion.as_str()))
        .collect();
    motions.sort_unstable();
    motions.dedup();
    let steps: i64 = selection
        .parts
        .iter()
        .flat_map(|p| &p.episodes)
        .map(|e| e.steps.max(0))
        .sum();
    let submissions: Vec<CardSubmission> = selection
        .parts
        .iter()
        .map(|p| CardSubmission {
            id: &p.submission.id,
            team: &p.submission.team_name,
            agent: &p.submission.agent_name,
            created_at: access::rfc3339_exact(p.submission.created_at),
            finished_at: p.submission.finished_at.map(access::rfc3339_exact),
            benchmark_version: p.submission.benchmark_version,
            phase: p.submission.phase_id.as_deref(),
            episodes: p.episodes.len(),
        })
        .collect();
    let scope = match &selection.scope {
        Scope::Benchmark(b) => json!({"benchmark": b}),
        Scope::Phase { id, benchmark } => json!({"phase": id, "benchmark": benchmark}),
    };
    json!({
        "format": "mimicarena-dataset-card",
        "version": 1,
        "created_at": access::rfc3339(now_ms),
        "server": {"name": "MimicArena", "version": env!("CARGO_PKG_VERSION")},
        "scope": scope,
        "benchmark": {
            "name": spec.name,
            "version": spec.version,
            "description": spec.description,
        },
        "filters": selection.filter,
        "success_metric": selection.success_metric,
        "counts": {
            "submissions": selection.parts.len(),
            "teams": teams.len(),
            "episodes": selection.episodes(),
            "rows": selection.rows(),
            "steps": steps,
            // Divided, not multiplied by 0.02: the nearest double to the decimal (6.6, not
            // 6.6000000000000005).
            "duration_s": steps as f64 / (1.0 / arena_sim::CONTROL_DT).round(),
            // Over what the counts above are taken, and what the scope left out.
            "in_scope": selection.in_scope,
        },
        "teams": teams,
        "submissions": submissions,
        // Counted by their results but not in the data: their runs are missing from the store.
        "missing_runs": selection.missing,
        "simulator": simulator_settings(spec, selection),
        "motions": {
            "names": motions,
            "attribution": spec.motions.attribution,
        },
        "layout": export::layout_description(
            spec.action.mode == arena_bench::spec::ActionMode::JointPosition,
            &spec.observations.groups,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::ENGINE_NOT_RECORDED;
    use crate::storage::EpisodeState;

    fn row(status: EpisodeState, steps: i64, committed: bool) -> EpisodeRow {
        EpisodeRow {
            idx: 0,
            motion: "squat".into(),
            category: String::new(),
            start_s: 0.0,
            duration_s: 1.0,
            seed: 0,
            dr_level: 0,
            status,
            attempts: 3,
            server_faults: 0,
            uncharged_runs: 0,
            steps,
            metrics: Default::default(),
            reason: None,
            updated_at: 0,
            agent_name: None,
            engine: None,
            committed_by: committed.then(|| "r1".to_string()),
        }
    }

    /// One submission's `episodes`, selected.
    fn selection(episodes: Vec<EpisodeRow>) -> Selection {
        Selection {
            scope: Scope::Benchmark("b".into()),
            filter: DatasetFilter::default(),
            success_metric: "success".into(),
            parts: vec![Selected {
                submission: Submission {
                    id: "sub-1".into(),
                    team_id: 1,
                    team_name: "t".into(),
                    benchmark: "b".into(),
                    agent_name: "a".into(),
                    status: SubmissionStatus::Completed,
                    episodes_total: 5,
                    created_at: 0,
                    started_at: None,
                    finished_at: None,
                    report_json: None,
                    error: None,
                    phase_id: None,
                    baseline: false,
                    benchmark_version: Some(1),
                    summary_json: None,
                },
                episodes,
            }],
            missing: Vec::new(),
            in_scope: InScope::default(),
        }
    }

    /// A FAILED episode given up after its attempts has no stored run, and so no rows in the
    /// export (its group is empty); one whose run was committed has its reset row and steps.
    #[test]
    fn rows_count_what_the_export_writes() {
        let selection = selection(vec![
            row(EpisodeState::Completed, 10, true),
            row(EpisodeState::Fell, 4, true),
            row(EpisodeState::Failed, 0, false),
            row(EpisodeState::Failed, 0, true),
            row(EpisodeState::Timeout, 7, true),
        ]);
        // 11 + 5 rows, none for the given-up episode, the reset row alone, 8.
        assert_eq!(selection.rows(), 25);
    }

    /// The card names the engines the stored runs recorded, with their counts; runs stored
    /// before engines were recorded are said to be so, and episodes without a run count for none.
    #[test]
    fn the_card_names_the_engines_that_ran() {
        let ran_on = |engine: Option<&str>, committed: bool| EpisodeRow {
            engine: engine.map(str::to_string),
            ..row(EpisodeState::Completed, 5, committed)
        };
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../benchmarks/g1-smoke.toml"));
        let text = std::fs::read_to_string(path).unwrap();
        let spec = BenchmarkSpec::parse(&text, path, &arena_bench::metrics::metric_names()).unwrap();
        let cpu = "cpu (MuJoCo 3.17.0)";
        // An episode given up on after its attempts has no stored run.
        let given_up = row(EpisodeState::Failed, 0, false);
        let one = selection(vec![ran_on(Some(cpu), true), ran_on(Some(cpu), true), given_up]);
        let sim = simulator_settings(&spec, &one);
        assert_eq!(sim["engine"], cpu);
        assert_eq!(sim["engines"], json!([{"engine": cpu, "episodes": 2}]));
        // A scored run committed before servers recorded who committed it is stored all the same.
        let sim = simulator_settings(&spec, &selection(vec![ran_on(None, false)]));
        assert_eq!(sim["engine"], ENGINE_NOT_RECORDED);
        assert_eq!(sim["engines"], json!([{"engine": ENGINE_NOT_RECORDED, "episodes": 1}]));

        let gpu = "gpu (warp on cuda:0)";
        let mixed = selection(vec![
            ran_on(Some(gpu), true),
            ran_on(Some(cpu), true),
            ran_on(Some(gpu), true),
            ran_on(None, true),
        ]);
        let sim = simulator_settings(&spec, &mixed);
        assert_eq!(sim["engine"], format!("mixed: {gpu}; {cpu}; {ENGINE_NOT_RECORDED}"));
        assert_eq!(
            sim["engines"],
            json!([
                {"engine": gpu, "episodes": 2},
                {"engine": cpu, "episodes": 1},
                {"engine": ENGINE_NOT_RECORDED, "episodes": 1},
            ])
        );
        assert_eq!(simulator_settings(&spec, &selection(vec![]))["engine"], Value::Null);
    }
}
