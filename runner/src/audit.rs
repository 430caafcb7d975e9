//! Audits of stored episodes: each recorded episode is run again from its own start (motion,
//! start time, seed, DR level) with its recorded actions, open loop, on a chosen backend, and
//! the new trajectory is compared with the stored one row by row and re-scored. On the backend
//! that recorded it the re-run is bit-exact (the CPU backend is deterministic); on the other it
//! measures how far the two physics implementations drift apart on real submissions.

use crate::episode;
use crate::gains::SessionGains;
use arena_bench::aggregate::EpisodeStatus;
use arena_bench::spec::BenchmarkSpec;
use arena_data::NUM_JOINTS;
use arena_data::trajectory_file::EpisodeRecord;
use arena_sim::SimBackend;
use arena_sim::dr::DrLevel;
use arena_sim::env::{self, EpisodeAssignment, TrackingEnv, TrackingEnvConfig, Trajectory};
use arena_sim::handler::NQ;
use arena_sim::motion::MotionLibrary;
use arena_sim::robot::NUM_BODIES_EXT;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Control steps after which divergence is reported (when the episode is that long).
pub const CHECKPOINTS: [usize; 4] = [1, 10, 50, 250];

/// One episode's audit.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodeAudit {
    pub episode: u32,
    pub motion: String,
    pub recorded_status: String,
    pub rerun_status: String,
    /// Rows of the recording and of the re-run (row 0 is the reset state).
    pub recorded_rows: usize,
    pub rerun_rows: usize,
    /// Every qpos, qvel and body position of every row equal to the bit.
    pub bit_exact: bool,
    /// The stored reference rows (times, `ref_qpos`, `ref_body_pos`, `ref_state`) equal to the
    /// bit to those the benchmark's motion gives the re-run. The physics plays no part in them:
    /// on any backend a difference says the motion (or the stored file) changed since the run.
    pub reference_exact: bool,
    /// The largest difference between the stored reference values and the re-run's (0 when
    /// exact; a machine whose maths library rounds otherwise than the server's differs in the
    /// last bits; infinite when the stored rows are missing).
    pub reference_max_diff: f64,
    /// Largest |Δqpos| in the rows up to each checkpoint step that both runs reached.
    pub qpos_divergence: BTreeMap<usize, f64>,
    /// Largest |Δqpos| and |Δbody position| (m) over all rows both runs reached.
    pub max_qpos: f64,
    pub max_body_pos: f64,
    /// Metric → (recorded, re-run), both scored by the benchmark's metric code: `arena audit`
    /// puts the value the server publishes (the database's) in place of the recorded one.
    pub metrics: BTreeMap<String, (f64, f64)>,
    /// Why the episode could not be re-run (unknown motion, bad record).
    pub error: Option<String>,
}

/// Re-runs `records` (episodes of one submission of `spec`, run with `gains` in the
/// joint-position mode) on `backend`, `batch` at a time. `progress` gets (episodes done,
/// episodes in all).
#[allow(clippy::too_many_arguments)]
pub fn audit(
    spec: &BenchmarkSpec,
    gains: Option<&SessionGains>,
    library: &Arc<MotionLibrary>,
    records: &[EpisodeRecord],
    backend: &SimBackend,
    batch: usize,
    threads: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> anyhow::Result<Vec<EpisodeAudit>> {
    let joint_position = spec.action.mode == arena_bench::spec::ActionMode::JointPosition;
    anyhow::ensure!(
        !joint_position || gains.is_some(),
        "benchmark {} uses the joint-position action mode and the submission has no stored gains \
         (submissions run before the gains were stored cannot be re-run)",
        spec.name
    );
    let metric_config = episode::metric_config(spec);
    let mut out = Vec::with_capacity(records.len());
    let mut runnable = Vec::new();
    for record in records {
        match assignment_of(library, record) {
            Ok(a) => runnable.push((record, a)),
            Err(e) => out.push(failed_audit(record, e)),
        }
    }
    let batch = batch.clamp(1, runnable.len().max(1));
    let config = TrackingEnvConfig {
        backend: backend.clone(),
        ..episode::env_config(spec, gains, batch, threads)
    };
    let mut env = TrackingEnv::new(config, library.clone())?;
    let mut done = out.len();
    progress(done, records.len());
    for chunk in runnable.chunks(batch) {
        let starts: Vec<(usize, EpisodeAssignment)> = chunk.iter().enumerate().map(|(s, (_, a))| (s, *a)).collect();
        for slot in chunk.len()..batch {
            env.stop(slot);
        }
        env.reset(&starts)?;
        // A record of its reset row alone (its episode failed at the first action) has nothing
        // to re-run: stopped now, or it would step on with zero actions.
        for (slot, (record, _)) in chunk.iter().enumerate() {
            if record.num_rows() <= 1 {
                env.stop(slot);
            }
        }
        let longest = chunk.iter().map(|(r, _)| r.num_rows()).max().unwrap_or(0);
        // Joint-position rows: the recorded targets, then the recorded feed-forward torques.
        let width = env.action_width();
        let mut actions = vec![0.0f32; batch * width];
        for row in 1..longest {
            actions.fill(0.0);
            for (slot, (record, _)) in chunk.iter().enumerate() {
                if row < record.num_rows() {
                    let recorded = &record.rows.actions[row * NUM_JOINTS..(row + 1) * NUM_JOINTS];
                    for (a, r) in actions[slot * width..].iter_mut().zip(recorded) {
                        *a = *r as f32;
                    }
                    if let Some(ff) = record.rows.feedforward.get(row * NUM_JOINTS..(row + 1) * NUM_JOINTS) {
                        for (a, r) in actions[slot * width + NUM_JOINTS..].iter_mut().zip(ff) {
                            *a = *r as f32;
                        }
                    }
                }
            }
            env.step(&actions)?;
            // A recording that ends here (its window, its fall, its timeout) ends the re-run.
            for (slot, (record, _)) in chunk.iter().enumerate() {
                if row + 1 == record.num_rows() {
                    env.stop(slot);
                }
            }
        }
        for (slot, (record, _)) in chunk.iter().enumerate() {
            out.push(compare(
                record,
                env.trajectory(slot),
                rerun_status(&env, slot, record),
                spec,
                &metric_config,
            ));
        }
        done += chunk.len();
        progress(done, records.len());
    }
    out.sort_by_key(|a| a.episode);
    Ok(out)
}

fn assignment_of(library: &MotionLibrary, record: &EpisodeRecord) -> Result<EpisodeAssignment, String> {
    let motion = library
        .motions
        .iter()
        .position(|m| m.name == record.motion)
        .ok_or_else(|| format!("motion {:?} is not in the benchmark's library", record.motion))?;
    let dr_level = u8::try_from(record.dr_level)
        .ok()
        .and_then(|l| DrLevel::try_from(l).ok())
        .ok_or_else(|| format!("DR level {} is not 0-3", record.dr_level))?;
    let rows = record.num_rows();
    if rows == 0 || record.rows.actions.len() != rows * NUM_JOINTS || record.rows.qpos.len() != rows * NQ {
        return Err(format!(
            "the record's arrays do not have {rows} rows of actions (29) and qpos ({NQ})"
        ));
    }
    Ok(EpisodeAssignment {
        motion,
        start_time: record.start_s,
        seed: record.seed,
        dr_level,
    })
}

fn failed_audit(record: &EpisodeRecord, error: String) -> EpisodeAudit {
    EpisodeAudit {
        episode: record.episode,
        motion: record.motion.clone(),
        recorded_status: record.status.clone(),
        rerun_status: String::new(),
        recorded_rows: record.num_rows(),
        rerun_rows: 0,
        bit_exact: false,
        reference_exact: false,
        reference_max_diff: f64::NAN,
        qpos_divergence: BTreeMap::new(),
        max_qpos: f64::NAN,
        max_body_pos: f64::NAN,
        metrics: BTreeMap::new(),
        error: Some(error),
    }
}

/// Said of a re-run stopped where its recording ended, that ended otherwise than by its window.
pub const STOPPED: &str = "stopped";

/// The re-run's status in the protocol's words (`failed: reason` keeps the reason). A re-run
/// that neither fell nor failed was stopped where its recording ended: `completed` when the
/// recording completed (its window ended there), else [`STOPPED`] — the recording ended for a
/// reason the physics does not decide (the agent's timeout or error, a scored fall after one),
/// or, on another backend, one the re-run did not reproduce (its fall).
fn rerun_status(env: &TrackingEnv, slot: usize, record: &EpisodeRecord) -> String {
    match &env.infos()[slot].status {
        env::EpisodeStatus::Fell => "fell".into(),
        env::EpisodeStatus::Failed(reason) => format!("failed: {reason}"),
        _ if scored_status(&record.status) == EpisodeStatus::Completed => "completed".into(),
        _ => format!("{STOPPED}: where the recording ended ({})", record.status),
    }
}

fn scored_status(word: &str) -> EpisodeStatus {
    match word.split(':').next().unwrap_or_default() {
        "fell" => EpisodeStatus::Fell,
        "failed" => EpisodeStatus::Failed,
        "timeout" => EpisodeStatus::Timeout,
        _ => EpisodeStatus::Completed,
    }
}

fn compare(
    record: &EpisodeRecord,
    rerun: &Trajectory,
    rerun_status: String,
    spec: &BenchmarkSpec,
    metric_config: &arena_bench::metrics::MetricConfig,
) -> EpisodeAudit {
    let rows = record.num_rows().min(rerun.len());
    let w = 3 * NUM_BODIES_EXT;
    let bits = |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let bit_exact = record.num_rows() == rerun.len()
        && bits(&record.rows.qpos, &rerun.rows.qpos)
        && bits(&record.rows.qvel, &rerun.rows.qvel)
        && bits(&record.rows.body_pos, &rerun.rows.body_pos);
    // Over the rows both runs have (a re-run that fell sooner is the physics' business); a
    // file written before `ref_state` was recorded has none to compare.
    let prefix = |a: &[f64], b: &[f64], width: usize| {
        let n = rows * width;
        a.len() >= n && b.len() >= n && bits(&a[..n], &b[..n])
    };
    let state_width = rerun.rows.ref_state.len() / rerun.len().max(1);
    let reference_exact = prefix(&record.rows.times, &rerun.rows.times, 1)
        && prefix(&record.rows.ref_qpos, &rerun.rows.ref_qpos, NQ)
        && prefix(&record.rows.ref_body_pos, &rerun.rows.ref_body_pos, w)
        && (record.rows.ref_state.is_empty() || prefix(&record.rows.ref_state, &rerun.rows.ref_state, state_width));
    let largest = |a: &[f64], b: &[f64], width: usize| {
        let n = rows * width;
        if a.len() < n || b.len() < n {
            return f64::INFINITY;
        }
        a[..n]
            .iter()
            .zip(&b[..n])
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    let reference_max_diff = [
        largest(&record.rows.times, &rerun.rows.times, 1),
        largest(&record.rows.ref_qpos, &rerun.rows.ref_qpos, NQ),
        largest(&record.rows.ref_body_pos, &rerun.rows.ref_body_pos, w),
        match record.rows.ref_state.is_empty() {
            true => 0.0,
            false => largest(&record.rows.ref_state, &rerun.rows.ref_state, state_width),
        },
    ]
    .into_iter()
    .fold(0.0, f64::max);
    let row_diff = |a: &[f64], b: &[f64], width: usize, k: usize| {
        a[k * width..(k + 1) * width]
            .iter()
            .zip(&b[k * width..(k + 1) * width])
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    let mut qpos_divergence = BTreeMap::new();
    let (mut max_qpos, mut max_body_pos) = (0.0f64, 0.0f64);
    for k in 0..rows {
        max_qpos = max_qpos.max(row_diff(&record.rows.qpos, &rerun.rows.qpos, NQ, k));
        max_body_pos = max_body_pos.max(row_diff(&record.rows.body_pos, &rerun.rows.body_pos, w, k));
        if CHECKPOINTS.contains(&k) {
            qpos_divergence.insert(k, max_qpos);
        }
    }
    let names = &spec.metrics.list;
    let reason = (!record.reason.is_empty()).then(|| record.reason.clone());
    let recorded_as = scored_status(&record.status);
    let (_, recorded, _) = episode::score_finished(&record.rows, recorded_as, reason.clone(), names, metric_config);
    // A re-run stopped where its recording ended is scored as the recording was (the same
    // status, the same fall penalty or none), so a bit-exact re-run scores the same.
    let rerun_as = match rerun_status.starts_with(STOPPED) {
        true => recorded_as,
        false => scored_status(&rerun_status),
    };
    let (_, again, _) = episode::score_finished(&rerun.rows, rerun_as, reason, names, metric_config);
    let metrics = names
        .iter()
        .map(|n| {
            let get = |m: &BTreeMap<String, f64>| m.get(n).copied().unwrap_or(f64::NAN);
            (n.clone(), (get(&recorded), get(&again)))
        })
        .collect();
    EpisodeAudit {
        episode: record.episode,
        motion: record.motion.clone(),
        recorded_status: record.status.clone(),
        rerun_status,
        recorded_rows: record.num_rows(),
        rerun_rows: rerun.len(),
        bit_exact,
        reference_exact,
        reference_max_diff,
        qpos_divergence,
        max_qpos,
        max_body_pos,
        metrics,
        error: None,
    }
}
