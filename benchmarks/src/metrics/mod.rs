//! Tracking metrics: named, documented, computed per episode from simulated and reference
//! frames aligned by time. Interface in the seed's shape: `reset` → `update` per frame →
//! `compute`. Formulas, units and directions are listed in `docs/metrics.md` and in
//! [`METRICS`], which is also the registry benchmark files select from.
//!
//! Files: this one holds the frame, the trait, the errors, `create` and `evaluate` and the
//! helpers the metrics share; `registry.rs` the table of metrics; `trajectory.rs` the
//! whole-trajectory metrics (EMD, nDTW); `per_frame.rs` the means of per-frame values;
//! `time_diff.rs` velocity and acceleration errors; `success.rs` PHC success and failure time;
//! `mjlab.rs` mjlab's tracking evaluation (its success rule, terminations and metrics).

pub mod mjlab;
mod per_frame;
mod registry;
mod success;
mod time_diff;
mod trajectory;

pub use registry::{METRICS, metric_info, metric_names};
pub use success::{
    SUCCESS_METRICS, SUCCESS_RULE_METRICS, SUCCESS_RULES, SURVIVAL_METRICS, apply_fall_penalty, scored_until,
    survival_metric_for,
};
pub use trajectory::dtw;

use crate::emd::EmdError;
use crate::spec::Direction;
use mjlab::{MjlabKind, MjlabMetric};
use per_frame::{FrameKind, PerFrame};
use std::collections::BTreeMap;
use success::{Success, SuccessKind};
use time_diff::{TimeDiff, TimeDiffKind};
use trajectory::{Emd, Ndtw};

/// Joints of the G1.
pub const NUM_JOINTS: usize = 29;
/// Bodies recorded per frame: the 30 rigid bodies of the G1 plus the virtual head (index 30),
/// in the simulator's order (`arena_sim::robot::BODY_NAMES`).
pub const NUM_BODIES: usize = 31;
/// Length of the `state` observation.
pub use arena_g1::STATE_DIM;
/// The 24 bodies without the six wrist links (indices 20-22 and 27-29) and without the virtual
/// head: BFM-Zero's `*_xpos` body set.
pub const NON_WRIST_BODIES: [usize; 24] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 23, 24, 25, 26,
];
/// Every recorded body.
pub const ALL_BODIES: [usize; NUM_BODIES] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
];

/// One time-aligned pair of simulated and reference frames.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// Seconds since the episode started.
    pub time: f64,
    /// Joint angles (29, radians).
    pub sim_joints: &'a [f64],
    pub ref_joints: &'a [f64],
    /// World body positions (31 × 3, metres).
    pub sim_bodies: &'a [f64],
    pub ref_bodies: &'a [f64],
    /// `state` observation rows (64); the simulated one is what the agent saw (noise included).
    pub sim_state: &'a [f64],
    pub ref_state: &'a [f64],
    /// World body orientations (31 × 4, (w, x, y, z)), for the metrics that need them
    /// ([`mjlab::needs_orientations`]); empty where no such metric is asked for.
    pub sim_body_quat: &'a [f64],
    pub ref_body_quat: &'a [f64],
    /// Joint velocities (29, rad/s): the robot's (qvel) and the reference motion's; empty where
    /// no metric needs them.
    pub sim_joint_vel: &'a [f64],
    pub ref_joint_vel: &'a [f64],
}

/// Parameters metrics may need; the benchmark file's `[metrics]` section sets them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricConfig {
    /// Columns [lo, hi) of `state` used by the `obs_state_*` metrics.
    pub state_slice: [usize; 2],
    /// PHC success threshold (metres).
    pub success_threshold_m: f64,
    /// nDTW Sakoe-Chiba band half-width in seconds (0 = unconstrained).
    pub ndtw_window_s: f64,
    /// Time between frames (seconds).
    pub frame_dt: f64,
    /// The benchmark's success rule (`ranking.success`, a name of [`SUCCESS_RULES`]): scoring
    /// stops at the first frame that breaks it ([`break_time`]); `None` scores whole episodes.
    pub success_rule: Option<&'static str>,
}

impl Default for MetricConfig {
    fn default() -> Self {
        MetricConfig {
            state_slice: [0, 23],
            success_threshold_m: 0.5,
            ndtw_window_s: 1.0,
            frame_dt: 0.02,
            success_rule: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricError {
    #[error("unknown metric {name:?}; known metrics: {}", known.join(", "))]
    Unknown { name: String, known: Vec<String> },
    #[error("metric {metric}: no frames")]
    NoFrames { metric: &'static str },
    #[error("metric {metric}: {message}")]
    BadFrame { metric: &'static str, message: String },
    #[error("metric {metric}: {source}")]
    Emd {
        metric: &'static str,
        #[source]
        source: EmdError,
    },
    #[error("forward kinematics for body orientations: {0}")]
    Kinematics(String),
    #[error("state slice {lo}..{hi} is outside the {STATE_DIM}-value state")]
    BadStateSlice { lo: usize, hi: usize },
}

/// What a metric is, for the registry, `--help`-style listings and docs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub formula: &'static str,
    pub units: &'static str,
    pub direction: Direction,
}

/// A metric computed over one episode.
pub trait Metric: Send {
    fn info(&self) -> &'static MetricInfo;
    /// Forgets every frame seen (start of a new episode).
    fn reset(&mut self);
    /// Takes the next frame.
    fn update(&mut self, frame: &Frame<'_>) -> Result<(), MetricError>;
    /// The episode's value from the frames seen so far; `None` where the metric is not
    /// defined on so few frames (a velocity error needs two, an acceleration error three): the
    /// episode then has no value for it and the metric's statistics are over fewer episodes.
    fn compute(&self) -> Result<Option<f64>, MetricError>;
}

/// Which numbers of a frame a metric looks at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Feature {
    Joints,
    StateSlice,
    /// The 24 non-wrist bodies flattened to 72 values.
    Xpos24,
}

/// Builds the metric called `name`.
pub fn create(name: &str, config: &MetricConfig) -> Result<Box<dyn Metric>, MetricError> {
    let info = metric_info(name).ok_or_else(|| MetricError::Unknown {
        name: name.to_string(),
        known: metric_names().iter().map(|s| s.to_string()).collect(),
    })?;
    let [lo, hi] = config.state_slice;
    if !(lo < hi && hi <= STATE_DIM) {
        return Err(MetricError::BadStateSlice { lo, hi });
    }
    let c = *config;
    Ok(match name {
        "emd" => Box::new(Emd::new(info, Feature::Joints, c)),
        "obs_state_emd" => Box::new(Emd::new(info, Feature::StateSlice, c)),
        "emd_xpos" => Box::new(Emd::new(info, Feature::Xpos24, c)),
        "distance" => Box::new(PerFrame::new(info, c, FrameKind::Distance(Feature::Joints, 1.0))),
        "mpjpe_l" => Box::new(PerFrame::new(info, c, FrameKind::Distance(Feature::Joints, 1000.0))),
        "obs_state_distance" => Box::new(PerFrame::new(info, c, FrameKind::Distance(Feature::StateSlice, 1.0))),
        "proximity" => Box::new(PerFrame::new(info, c, FrameKind::Proximity(Feature::Joints))),
        "obs_state_proximity" => Box::new(PerFrame::new(info, c, FrameKind::Proximity(Feature::StateSlice))),
        "bfm_vel_dist" => Box::new(PerFrame::new(info, c, FrameKind::JointAxisDiff(1, 1000.0))),
        "bfm_accel_dist" => Box::new(PerFrame::new(info, c, FrameKind::JointAxisDiff(2, 100.0))),
        "mpjpe_g" => Box::new(PerFrame::new(info, c, FrameKind::BodyError(&NON_WRIST_BODIES, false))),
        "mpjpe_g_all" => Box::new(PerFrame::new(info, c, FrameKind::BodyError(&ALL_BODIES, false))),
        "mpjpe_rr" => Box::new(PerFrame::new(info, c, FrameKind::BodyError(&NON_WRIST_BODIES, true))),
        "mpjpe_rr_all" => Box::new(PerFrame::new(info, c, FrameKind::BodyError(&ALL_BODIES, true))),
        "vel_dist" => Box::new(TimeDiff::new(info, TimeDiffKind::Joints, 1)),
        "accel_dist" => Box::new(TimeDiff::new(info, TimeDiffKind::Joints, 2)),
        "body_vel_dist" => Box::new(TimeDiff::new(info, TimeDiffKind::Bodies, 1)),
        "body_accel_dist" => Box::new(TimeDiff::new(info, TimeDiffKind::Bodies, 2)),
        "success" => Box::new(Success::new(info, c, SuccessKind::Both)),
        "success_phc_linf" => Box::new(Success::new(info, c, SuccessKind::Linf)),
        "success_phc_mean" => Box::new(Success::new(info, c, SuccessKind::Mean)),
        "failure_time_s" => Box::new(Success::new(info, c, SuccessKind::FailureTime)),
        "ndtw" => Box::new(Ndtw::new(info, c)),
        "mjlab_success" => Box::new(MjlabMetric::new(info, c, MjlabKind::Success)),
        "mjlab_failure_time_s" => Box::new(MjlabMetric::new(info, c, MjlabKind::FailureTime)),
        "mpkpe" => Box::new(MjlabMetric::new(info, c, MjlabKind::Mpkpe)),
        "r_mpkpe" => Box::new(MjlabMetric::new(info, c, MjlabKind::RMpkpe)),
        "joint_vel_error" => Box::new(MjlabMetric::new(info, c, MjlabKind::JointVelError)),
        "ee_pos_error" => Box::new(MjlabMetric::new(info, c, MjlabKind::EePosError)),
        "ee_ori_error" => Box::new(MjlabMetric::new(info, c, MjlabKind::EeOriError)),
        _ => unreachable!("every registered metric has a constructor"),
    })
}

/// Runs the named metrics over an episode's frames: the whole-trajectory form of the interface.
/// A metric not defined on so few frames ([`Metric::compute`] gives `None`) is left out of the
/// map.
pub fn evaluate<'a>(
    names: &[String],
    config: &MetricConfig,
    frames: impl IntoIterator<Item = Frame<'a>>,
) -> Result<BTreeMap<String, f64>, MetricError> {
    let mut metrics = names.iter().map(|n| create(n, config)).collect::<Result<Vec<_>, _>>()?;
    for f in frames {
        for m in &mut metrics {
            m.update(&f)?;
        }
    }
    let mut values = BTreeMap::new();
    for m in &metrics {
        if let Some(v) = m.compute()? {
            values.insert(m.info().name.to_string(), v);
        }
    }
    Ok(values)
}

/// The time (from the episode's start) of the first frame that breaks success metric `rule` (a
/// name of [`SUCCESS_METRICS`]; a benchmark's rule is one of [`SUCCESS_RULES`]), or `None` if
/// the rule holds in every frame. Once a rule is broken nothing later can mend it, so a
/// benchmark's scoring stops there.
pub fn break_time<'a>(
    rule: &str,
    config: &MetricConfig,
    frames: impl IntoIterator<Item = Frame<'a>>,
) -> Result<Option<f64>, MetricError> {
    let not_a_rule = || MetricError::Unknown {
        name: rule.to_string(),
        known: SUCCESS_METRICS.iter().map(|s| s.to_string()).collect(),
    };
    let info = metric_info(rule).ok_or_else(not_a_rule)?;
    let c = *config;
    let mut rule: Box<dyn SuccessRule> = match rule {
        "mjlab_success" => Box::new(MjlabMetric::new(info, c, MjlabKind::Success)),
        "success" => Box::new(Success::new(info, c, SuccessKind::Both)),
        "success_phc_linf" => Box::new(Success::new(info, c, SuccessKind::Linf)),
        "success_phc_mean" => Box::new(Success::new(info, c, SuccessKind::Mean)),
        _ => return Err(not_a_rule()),
    };
    for f in frames {
        rule.update(&f)?;
        if rule.broken() {
            return Ok(Some(f.time));
        }
    }
    Ok(None)
}

/// A 0/1 success metric that can say, frame by frame, whether it is already lost.
trait SuccessRule: Metric {
    fn broken(&self) -> bool;
}

impl SuccessRule for Success {
    fn broken(&self) -> bool {
        !self.holds()
    }
}

impl SuccessRule for MjlabMetric {
    fn broken(&self) -> bool {
        self.terminated()
    }
}

pub(super) fn check_frame(metric: &'static str, f: &Frame<'_>) -> Result<(), MetricError> {
    let sizes = [
        ("simulated joints", f.sim_joints.len(), NUM_JOINTS),
        ("reference joints", f.ref_joints.len(), NUM_JOINTS),
        ("simulated bodies", f.sim_bodies.len(), 3 * NUM_BODIES),
        ("reference bodies", f.ref_bodies.len(), 3 * NUM_BODIES),
        ("simulated state", f.sim_state.len(), STATE_DIM),
        ("reference state", f.ref_state.len(), STATE_DIM),
    ];
    check_sizes(metric, f, &sizes)
}

/// Each (what, got, expected) of a frame: the first mismatch as an error naming the field.
pub(super) fn check_sizes(
    metric: &'static str,
    f: &Frame<'_>,
    sizes: &[(&str, usize, usize)],
) -> Result<(), MetricError> {
    for &(what, got, want) in sizes {
        if got != want {
            return Err(MetricError::BadFrame {
                metric,
                message: format!("{what} at t = {:.3} s: {got} values, expected {want}", f.time),
            });
        }
    }
    Ok(())
}

pub(super) fn feature_into(feature: Feature, config: &MetricConfig, f: &Frame<'_>, sim: bool, out: &mut Vec<f64>) {
    match feature {
        Feature::Joints => out.extend_from_slice(if sim { f.sim_joints } else { f.ref_joints }),
        Feature::StateSlice => {
            let [lo, hi] = config.state_slice;
            out.extend_from_slice(&(if sim { f.sim_state } else { f.ref_state })[lo..hi]);
        }
        Feature::Xpos24 => {
            let bodies = if sim { f.sim_bodies } else { f.ref_bodies };
            for &b in &NON_WRIST_BODIES {
                out.extend_from_slice(&bodies[3 * b..3 * b + 3]);
            }
        }
    }
}

pub(super) fn norm_of_difference(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
}

pub(super) fn body_error(f: &Frame<'_>, b: usize, root_relative: bool) -> f64 {
    let mut s = 0.0;
    for c in 0..3 {
        let mut d = f.sim_bodies[3 * b + c] - f.ref_bodies[3 * b + c];
        if root_relative {
            d -= f.sim_bodies[c] - f.ref_bodies[c];
        }
        s += d * d;
    }
    s.sqrt()
}

/// Proximity with bound 2 and margin 2 (facts §7.2).
pub fn proximity_of(distance: f64) -> f64 {
    const BOUND: f64 = 2.0;
    const MARGIN: f64 = 2.0;
    if distance <= BOUND {
        1.0
    } else if distance <= BOUND + MARGIN {
        (BOUND + MARGIN - distance) / MARGIN
    } else {
        0.0
    }
}
