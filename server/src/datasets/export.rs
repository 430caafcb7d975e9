//! Writing a [`Selection`]: HDF5 in BFM-Zero's buffer layout (`arena_data::buffer_export`) or
//! gzip-compressed JSON lines, reading one episode at a time from the submissions' trajectory
//! files and recomputing `privileged_state` from the recorded states
//! (`arena_sim::recorded`). Blocking code: call it from a blocking thread.

use super::{Selected, Selection};
use crate::storage::{EpisodeRow, EpisodeState};
use anyhow::Context;
use arena_data::buffer_export::{BufferExportWriter, EpisodeRows, ExportCounts, ExportedEpisode};
use arena_data::trajectory_file::EpisodeRecord;
use arena_sim::RobotConfig;
use arena_sim::observation::PRIVILEGED_STATE_DIM;
use arena_sim::recorded::RecordedObserver;
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;

/// The two download formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Hdf5,
    JsonlGz,
}

impl ExportFormat {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "hdf5" | "h5" => Ok(Self::Hdf5),
            "jsonl.gz" | "jsonl" => Ok(Self::JsonlGz),
            other => Err(format!("format: expected hdf5 or jsonl.gz, got {other:?}")),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Self::Hdf5 => "h5",
            Self::JsonlGz => "jsonl.gz",
        }
    }
}

/// The keys of an export and what they hold, for the card and the docs; `joint_position`: the
/// benchmark's actions are absolute joint targets (unitree_sdk2's LowCmd) rather than BFM-Zero's
/// normalised actions; `groups`: the observation groups the benchmark sends its agents, since the
/// dataset's two observations are BFM-Zero's, computed from the simulated robot whatever the
/// agents were sent.
pub fn layout_description(joint_position: bool, groups: &[String]) -> Value {
    let action = if joint_position {
        "f32 (N, 29): the absolute joint position targets (rad, G1 order) the agent sent for the row (zeros on an episode's first row; feed-forward torques are not included)"
    } else {
        "f32 (N, 29): the normalised action that produced the row (zeros on an episode's first row); the joint targets it gave are about q0 + clip(action, -1, 1) · action_scale: at DR ≥ 1 the default pose carries the episode's drawn offsets, and a control delay applies them later; jsonl.gz `pd_target` holds the targets the motors tracked"
    };
    let seen = |group: &str| match groups.iter().any(|g| g == group) {
        true => "the agents were sent it",
        false => "the agents of this benchmark were NOT sent it",
    };
    let state = format!(
        "f32 (N, 64): BFM-Zero's `state` of the simulated robot (dof_pos - q0, dof_vel, projected gravity, body-frame angular velocity x 0.25; with the DR level's observation noise), computed at every row; {}",
        seen("state")
    );
    let privileged = format!(
        "f32 (N, 463): BFM-Zero's `privileged_state` (max_local_self) of the simulated robot, recomputed from qpos and qvel (body positions at the bodies' origins, linear velocities at their centres of mass); {}",
        seen("privileged_state")
    );
    let joint_names: Vec<&str> = arena_sim::robot::JOINT_NAMES.to_vec();
    let mut body_names: Vec<&str> = arena_sim::robot::BODY_NAMES.to_vec();
    body_names.push(arena_sim::robot::HEAD_NAME);
    json!({
        "hdf5": {
            "observation-state": state,
            "observation-privileged_state": privileged,
            "action": action,
            "qpos": "f32 (N, 36): root xyz (m, world), root quaternion wxyz, 29 joint angles (rad, `joint_names` order)",
            "qvel": "f32 (N, 35): root linear velocity (m/s, world), root angular velocity (rad/s, body frame), 29 joint velocities (rad/s)",
            "terminated": "bool (N): true on the last row of a FELL episode (the fall rule ended it, or an error after the success rule broke made it a scored fall: the robot may still stand there)",
            "truncated": "bool (N): true on the last row of every other episode",
            "episodes/start, episodes/stop": "i64 (E): rows [start, stop) of each episode",
            "episodes/id, submission, team, motion, status": "str (E)",
        },
        "jsonl.gz": {
            "per episode": "id, submission, team, agent, engine, motion, category, status, reason, seed (decimal string), dr_level, start_s, duration_s, metrics, control_hz, rows",
            "per row": "observation.state and observation.privileged_state, action, pd_target (the joint targets, rad), torque (the applied joint torques, N·m), qpos, qvel, terminated, truncated: the HDF5's arrays (pd_target and torque are in jsonl.gz only; empty lists for runs recorded before they were kept)",
        },
        "not included": "the other observation groups the agents were sent, the reference motion the robot tracked (rebuild it from the motion's name and start_s at 50 Hz: `arena motion export` writes the benchmark's clips), and the joint-position mode's feed-forward torques; the submissions' trajectory files hold the reference rows",
        "agent_observation_groups": groups,
        "rows": "one row per control step at 50 Hz, row 0 the reset state; row k's action is the one that led to row k, so (observation, action, next observation) triples pair row k with the action of row k + 1",
        "joint_names": joint_names,
        "body_names": body_names,
    })
}

/// Reads a final episode of a submission (`trajectory_store::StoredEpisodes::read`).
pub type EpisodeSource<'a> = dyn Fn(&str, &EpisodeRow) -> anyhow::Result<EpisodeRecord> + Sync + 'a;

/// Episodes loaded ahead of the writer (bounds the memory of an export).
const LOAD_AHEAD: usize = 4;

/// One episode loaded for export: the stored record and its recomputed privileged_state.
struct Loaded {
    record: EpisodeRecord,
    privileged: Vec<f32>,
}

fn load(observer: &mut RecordedObserver, record: EpisodeRecord) -> anyhow::Result<Loaded> {
    let mut privileged = vec![0.0f32; record.num_rows() * PRIVILEGED_STATE_DIM];
    let level = arena_sim::dr::DrLevel::try_from(record.dr_level.min(255) as u8)
        .map_err(|e| anyhow::anyhow!("dr_level {}: {e}", record.dr_level))?;
    observer.privileged_states(
        level,
        record.seed,
        &record.rows.qpos,
        &record.rows.qvel,
        &mut privileged,
    )?;
    Ok(Loaded { record, privileged })
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|x| *x as f32).collect()
}

/// Every (submission, episode) of the selection, loaded in order; `each` gets them one by one.
/// A loader thread reads and recomputes up to [`LOAD_AHEAD`] episodes ahead while `each` writes,
/// so reading, MuJoCo and compression overlap.
fn for_each_episode(
    selection: &Selection,
    episodes: &EpisodeSource<'_>,
    mut each: impl FnMut(&Selected, &EpisodeRow, Loaded) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<anyhow::Result<(usize, usize, Loaded)>>(LOAD_AHEAD);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut observer = match RecordedObserver::new(RobotConfig::default()) {
                Ok(o) => o,
                Err(e) => {
                    let _ = tx.send(Err(e.into()));
                    return;
                }
            };
            for (p, part) in selection.parts.iter().enumerate() {
                for (e, row) in part.episodes.iter().enumerate() {
                    let loaded = episodes(&part.submission.id, row)
                        .and_then(|record| load(&mut observer, record))
                        .with_context(|| format!("submission {} episode {}", part.submission.id, row.idx));
                    let failed = loaded.is_err();
                    // A closed channel: the writer stopped (its own error); stop too.
                    if tx.send(loaded.map(|l| (p, e, l))).is_err() || failed {
                        return;
                    }
                }
            }
        });
        for item in rx {
            let (p, e, loaded) = item?;
            let part = &selection.parts[p];
            each(part, &part.episodes[e], loaded)?;
        }
        Ok(())
    })
}

fn episode_id(part: &Selected, row: &EpisodeRow) -> String {
    format!("{}/{}", part.submission.id, row.idx)
}

/// Writes the selection to `path` as HDF5 (buffer layout) with `card` as its `card` attribute.
pub fn export_hdf5(
    selection: &Selection,
    episodes: &EpisodeSource<'_>,
    path: &Path,
    card: &Value,
) -> anyhow::Result<ExportCounts> {
    let mut writer = BufferExportWriter::create(path)?;
    for_each_episode(selection, episodes, |part, row, loaded| {
        let r = &loaded.record;
        let (state, action, qpos, qvel) = (
            f32s(&r.rows.state),
            f32s(&r.rows.actions),
            f32s(&r.rows.qpos),
            f32s(&r.rows.qvel),
        );
        writer.append(
            &ExportedEpisode {
                id: episode_id(part, row),
                submission: part.submission.id.clone(),
                team: part.submission.team_name.clone(),
                motion: row.motion.clone(),
                status: row.status.word().to_string(),
            },
            &EpisodeRows {
                rows: r.num_rows(),
                state: &state,
                privileged_state: &loaded.privileged,
                action: &action,
                qpos: &qpos,
                qvel: &qvel,
                terminated: row.status == EpisodeState::Fell,
            },
        )?;
        Ok(())
    })?;
    Ok(writer.finish(&serde_json::to_string(card)?)?)
}

/// Rows of a `width`-wide array as nested JSON lists.
fn rows_json(values: &[f64], width: usize) -> Value {
    Value::Array(
        values
            .chunks_exact(width)
            .map(|r| Value::Array(r.iter().map(|v| json!(*v as f32)).collect()))
            .collect(),
    )
}

fn rows_json_f32(values: &[f32], width: usize) -> Value {
    Value::Array(
        values
            .chunks_exact(width)
            .map(|r| Value::Array(r.iter().map(|v| json!(v)).collect()))
            .collect(),
    )
}

/// Writes the selection as gzip-compressed JSON lines to `out`, one episode per line, and
/// returns the counts. `out` receives compressed bytes as they are made.
pub fn export_jsonl_gz(
    selection: &Selection,
    episodes: &EpisodeSource<'_>,
    out: impl Write,
) -> anyhow::Result<ExportCounts> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    let mut counts = ExportCounts::default();
    for_each_episode(selection, episodes, |part, row, loaded| {
        let r = &loaded.record;
        let n = r.num_rows();
        let mut terminated = vec![false; n];
        let mut truncated = vec![false; n];
        if n > 0 {
            if row.status == EpisodeState::Fell {
                terminated[n - 1] = true;
            } else {
                truncated[n - 1] = true;
            }
        }
        let line = json!({
            "id": episode_id(part, row),
            "submission": part.submission.id,
            "team": part.submission.team_name,
            "agent": part.submission.agent_name,
            // The simulator that ran it (null: stored before engines were recorded).
            "engine": row.engine,
            "motion": row.motion,
            "category": row.category,
            "status": row.status.word(),
            "reason": row.reason,
            // A decimal string, as in the results: a u64 exceeds JSON numbers' exact range.
            "seed": row.seed.to_string(),
            "dr_level": row.dr_level,
            "start_s": row.start_s,
            "duration_s": row.duration_s,
            "metrics": row.metrics.iter().filter(|(_, v)| v.is_finite()).collect::<std::collections::BTreeMap<_, _>>(),
            "control_hz": 1.0 / arena_sim::CONTROL_DT,
            "rows": n,
            "observation": {
                "state": rows_json(&r.rows.state, 64),
                "privileged_state": rows_json_f32(&loaded.privileged, PRIVILEGED_STATE_DIM),
            },
            "action": rows_json(&r.rows.actions, 29),
            // Recorded since the joint-position mode (empty lists in older trajectory files).
            "pd_target": rows_json(&r.rows.targets, 29),
            "torque": rows_json(&r.rows.torques, 29),
            "qpos": rows_json(&r.rows.qpos, 36),
            "qvel": rows_json(&r.rows.qvel, 35),
            "terminated": terminated,
            "truncated": truncated,
        });
        serde_json::to_writer(&mut gz, &line)?;
        gz.write_all(b"\n")?;
        counts.episodes += 1;
        counts.rows += n;
        Ok(())
    })?;
    gz.finish()?.flush()?;
    Ok(counts)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_card_says_what_action_holds_in_each_action_mode() {
        let groups = ["imu".to_string(), "motors".to_string()];
        let normalized = super::layout_description(false, &["state".to_string()]);
        let joint = super::layout_description(true, &groups);
        assert!(
            normalized["hdf5"]["action"]
                .as_str()
                .unwrap()
                .contains("normalised action")
        );
        let joint = joint["hdf5"]["action"].as_str().unwrap();
        assert!(
            joint.contains("absolute joint position targets (rad") && !joint.contains("normalised"),
            "{joint}"
        );
        // Whether the agents saw the dataset's observations is said, per benchmark.
        let state_of = |layout: &serde_json::Value| layout["hdf5"]["observation-state"].as_str().unwrap().to_string();
        assert!(state_of(&normalized).ends_with("the agents were sent it"));
        let robot = super::layout_description(true, &groups);
        assert!(state_of(&robot).contains("were NOT sent it"), "{}", state_of(&robot));
        assert_eq!(robot["agent_observation_groups"], serde_json::json!(["imu", "motors"]));
        assert_eq!(robot["joint_names"].as_array().unwrap().len(), 29);
        assert_eq!(robot["body_names"].as_array().unwrap().len(), 31);
    }
}
