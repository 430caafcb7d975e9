//! What the pages show of one stored episode, computed from its trajectory file: tracking errors
//! over time (downsampled for plots) and the replay (simulated and reference body poses at 50 Hz,
//! by the simulator's own forward kinematics). Also the episodes table as CSV, and a re-score of
//! stored episodes with the current metric code. No HTTP here.

use arena_bench::metrics::NON_WRIST_BODIES;
use arena_data::trajectory_file::EpisodeRecord;
use arena_sim::SimError;
use arena_sim::kinematics::Kinematics;
use arena_sim::robot::{NUM_BODIES, RobotConfig};
use serde::Serialize;

const NQ: usize = 36;
const BODY_W: usize = 93;

/// Mean distance (mm) between simulated and reference positions of the 24 non-wrist bodies in
/// row `k`: the per-frame term of `mpjpe_g`.
fn body_error_mm(r: &EpisodeRecord, k: usize) -> f64 {
    let (sim, reference) = (&r.rows.body_pos[k * BODY_W..], &r.rows.ref_body_pos[k * BODY_W..]);
    let sum: f64 = NON_WRIST_BODIES
        .iter()
        .map(|&b| {
            (0..3)
                .map(|i| (sim[3 * b + i] - reference[3 * b + i]).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .sum();
    1000.0 * sum / NON_WRIST_BODIES.len() as f64
}

/// Mean absolute joint-angle difference (rad) in row `k`.
fn joint_error_rad(r: &EpisodeRecord, k: usize) -> f64 {
    let (q, q_ref) = (
        &r.rows.qpos[k * NQ + 7..(k + 1) * NQ],
        &r.rows.ref_qpos[k * NQ + 7..(k + 1) * NQ],
    );
    q.iter().zip(q_ref).map(|(a, b)| (a - b).abs()).sum::<f64>() / q.len() as f64
}

fn round4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

/// Tracking errors over time, at most `max_points` rows (every k-th row, the last always kept).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EpisodeSeries {
    /// Seconds from the episode's start.
    pub times: Vec<f64>,
    pub body_error_mm: Vec<f64>,
    pub joint_error_rad: Vec<f64>,
    pub root_height_m: Vec<f64>,
    pub ref_root_height_m: Vec<f64>,
}

/// Row indices for at most `max_points` (≥ 2) points, evenly spread, the first and last rows
/// always among them.
fn sampled_rows(rows: usize, max_points: usize) -> Vec<usize> {
    let points = max_points.max(2);
    if rows <= points {
        return (0..rows).collect();
    }
    // Strictly increasing: consecutive targets are (rows − 1)/(points − 1) > 1 rows apart.
    (0..points)
        .map(|k| ((k * (rows - 1)) as f64 / (points - 1) as f64).round() as usize)
        .collect()
}

pub fn series(r: &EpisodeRecord, max_points: usize) -> EpisodeSeries {
    let rows = sampled_rows(r.num_rows(), max_points);
    let t0 = r.rows.times.first().copied().unwrap_or(0.0);
    EpisodeSeries {
        times: rows.iter().map(|&k| round4(r.rows.times[k] - t0)).collect(),
        body_error_mm: rows.iter().map(|&k| round4(body_error_mm(r, k))).collect(),
        joint_error_rad: rows.iter().map(|&k| round4(joint_error_rad(r, k))).collect(),
        root_height_m: rows.iter().map(|&k| round4(r.rows.qpos[k * NQ + 2])).collect(),
        ref_root_height_m: rows.iter().map(|&k| round4(r.rows.ref_qpos[k * NQ + 2])).collect(),
    }
}

/// Body poses of every row (the model's 30 bodies, MuJoCo order), frame-major.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Poses {
    /// rows × 30 × 3
    pub pos: Vec<f64>,
    /// rows × 30 × 4 (wxyz)
    pub quat: Vec<f64>,
}

/// The replay of an episode: the simulated robot and its reference, 50 rows per second.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Replay {
    pub fps: f64,
    pub frames: usize,
    /// Names of the 30 bodies, in the order of `/api/v1/robot`.
    pub bodies: Vec<String>,
    pub times: Vec<f64>,
    pub sim: Poses,
    #[serde(rename = "ref")]
    pub reference: Poses,
    pub body_error_mm: Vec<f64>,
    pub joint_error_rad: Vec<f64>,
    /// Per frame, 29 values each (G1 joint order): the PD targets the motors tracked (rad) and
    /// the torques they applied (N·m); empty for trajectories recorded before they were stored.
    pub joint_targets: Vec<f64>,
    pub joint_torques: Vec<f64>,
}

fn poses(kinematics: &mut Kinematics, qpos: &[f64]) -> Poses {
    let rows = qpos.len() / NQ;
    let mut out = Poses {
        pos: Vec::with_capacity(rows * NUM_BODIES * 3),
        quat: Vec::with_capacity(rows * NUM_BODIES * 4),
    };
    for row in qpos.chunks_exact(NQ) {
        let p = kinematics.body_poses(row);
        for b in 0..NUM_BODIES {
            out.pos.extend(p.pos[b].iter().map(|v| round4(*v)));
            out.quat.extend(p.rot[b].iter().map(|v| round4(*v)));
        }
    }
    out
}

/// The replay of `r`, with body names from `geometry` (`arena_sim::geometry`).
pub fn replay(r: &EpisodeRecord, bodies: Vec<String>) -> Result<Replay, SimError> {
    let mut kinematics = Kinematics::new(&RobotConfig::default())?;
    let t0 = r.rows.times.first().copied().unwrap_or(0.0);
    let rows = r.num_rows();
    Ok(Replay {
        fps: 1.0 / arena_sim::CONTROL_DT,
        frames: rows,
        bodies,
        times: r.rows.times.iter().map(|t| round4(t - t0)).collect(),
        sim: poses(&mut kinematics, &r.rows.qpos),
        reference: poses(&mut kinematics, &r.rows.ref_qpos),
        body_error_mm: (0..rows).map(|k| round4(body_error_mm(r, k))).collect(),
        joint_error_rad: (0..rows).map(|k| round4(joint_error_rad(r, k))).collect(),
        joint_targets: r.rows.targets.iter().map(|v| round4(*v)).collect(),
        joint_torques: r.rows.torques.iter().map(|v| round4(*v)).collect(),
    })
}

/// A CSV text field: quoted when it holds a comma, quote or line break. Text a spreadsheet would
/// take for a formula (a leading `=`, `+`, `-`, `@`, tab or carriage return: an agent name such as
/// `=HYPERLINK(…)` in the admin's export) gets a leading apostrophe, which spreadsheets show as
/// text (OWASP's advice for CSV injection).
pub fn csv_field(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        return format!("\"'{}\"", s.replace('"', "\"\""));
    }
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_keeps_the_ends_and_the_limit() {
        assert_eq!(sampled_rows(0, 10), Vec::<usize>::new());
        assert_eq!(sampled_rows(5, 10), [0, 1, 2, 3, 4]);
        for rows in 1..300 {
            for points in [2, 3, 7, 50, 100] {
                let s = sampled_rows(rows, points);
                assert_eq!(s.len(), rows.min(points), "{rows} rows, {points} points");
                assert!(s[0] == 0 && *s.last().unwrap() == rows - 1, "{s:?}");
                assert!(s.windows(2).all(|w| w[0] < w[1]), "{s:?}");
            }
        }
        assert_eq!(sampled_rows(5, 2), [0, 4]);
        assert_eq!(sampled_rows(1001, 5), [0, 250, 500, 750, 1000]);
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("stand"), "stand");
        assert_eq!(csv_field("step 3: a, b"), "\"step 3: a, b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_field("@sum"), "\"'@sum\"");
        assert_eq!(csv_field("a-b"), "a-b");
    }
}
