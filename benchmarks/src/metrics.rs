//! Tracking metrics: named, documented, computed per episode from simulated and reference
//! frames aligned by time. Interface in the seed's shape: `reset` → `update` per frame →
//! `compute`. Formulas, units and directions are listed in `docs/metrics.md` and in
//! [`METRICS`], which is also the registry benchmark files select from.

use crate::emd::{self, EmdError};
use crate::spec::Direction;
use std::collections::{BTreeMap, VecDeque};

/// Joints of the G1.
pub const NUM_JOINTS: usize = 29;
/// Bodies recorded per frame: the 30 rigid bodies of the G1 plus the virtual head (index 30),
/// in the simulator's order (`arena_sim::robot::BODY_NAMES`).
pub const NUM_BODIES: usize = 31;
/// Length of the `state` observation.
pub const STATE_DIM: usize = 64;
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
}

impl Default for MetricConfig {
    fn default() -> Self {
        MetricConfig {
            state_slice: [0, 23],
            success_threshold_m: 0.5,
            ndtw_window_s: 1.0,
            frame_dt: 0.02,
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
    /// The episode's value from the frames seen so far.
    fn compute(&self) -> Result<f64, MetricError>;
}

/// Which numbers of a frame a metric looks at.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Feature {
    Joints,
    StateSlice,
    /// The 24 non-wrist bodies flattened to 72 values.
    Xpos24,
}

/// The registry: every metric by name, in documentation order.
pub const METRICS: &[MetricInfo] = &[
    info(
        "emd",
        "Earth mover's distance between the sets of joint-angle frames (BFM-Zero `emd`); ignores timing",
        "exact OT cost between uniform distributions on the rows of q (T×29) and q* (T×29), ground cost ‖q_t − q*_s‖₂",
        "rad",
        Direction::Lower,
    ),
    info(
        "distance",
        "Mean joint-angle distance per frame (BFM-Zero `distance`)",
        "mean_t ‖q_t − q*_t‖₂",
        "rad",
        Direction::Lower,
    ),
    info(
        "proximity",
        "Share of frames close to the reference, with a linear margin (BFM-Zero `proximity`, bound 2, margin 2)",
        "mean_t [1 if d_t ≤ 2; (4 − d_t)/2 if 2 < d_t ≤ 4; 0 otherwise], d_t = ‖q_t − q*_t‖₂",
        "fraction (0-1)",
        Direction::Higher,
    ),
    info(
        "mpjpe_l",
        "Joint-angle error ×1000 (BFM-Zero `mpjpe_l`; on joint angles, not 3-D positions)",
        "1000 · mean_t ‖q_t − q*_t‖₂",
        "mrad",
        Direction::Lower,
    ),
    info(
        "vel_dist",
        "Joint velocity error: differences between consecutive frames",
        "1000 · mean_t ‖(q_{t+1} − q_t) − (q*_{t+1} − q*_t)‖₂",
        "mrad/frame",
        Direction::Lower,
    ),
    info(
        "accel_dist",
        "Joint acceleration error: second differences between consecutive frames",
        "1000 · mean_t ‖(q_{t+2} − 2q_{t+1} + q_t) − (q*_{t+2} − 2q*_{t+1} + q*_t)‖₂",
        "mrad/frame²",
        Direction::Lower,
    ),
    info(
        "bfm_vel_dist",
        "BFM-Zero's published `vel_dist`: differences along the JOINT axis of each frame, not along time",
        "1000 · mean_t ‖D q_t − D q*_t‖₂, (D q)_k = q_{k+1} − q_k over joints k = 0..27",
        "mrad",
        Direction::Lower,
    ),
    info(
        "bfm_accel_dist",
        "BFM-Zero's published `accel_dist`: second differences along the JOINT axis, ×100",
        "100 · mean_t ‖D² q_t − D² q*_t‖₂ over joints k = 0..26",
        "rad/100",
        Direction::Lower,
    ),
    info(
        "obs_state_emd",
        "EMD on a slice of the `state` observation (default 0..23, BFM-Zero `obs_state_emd`)",
        "exact OT cost between the rows of s[lo..hi] and s*[lo..hi]",
        "rad",
        Direction::Lower,
    ),
    info(
        "obs_state_distance",
        "Mean distance on the `state` slice (BFM-Zero `obs_state_distance`)",
        "mean_t ‖s_t[lo..hi] − s*_t[lo..hi]‖₂",
        "rad",
        Direction::Lower,
    ),
    info(
        "obs_state_proximity",
        "Proximity (bound 2, margin 2) on the `state` slice (BFM-Zero `obs_state_proximity`)",
        "as proximity, with d_t = ‖s_t[lo..hi] − s*_t[lo..hi]‖₂",
        "fraction (0-1)",
        Direction::Higher,
    ),
    info(
        "emd_xpos",
        "EMD between the sets of body-position frames (24 non-wrist bodies flattened to 72 values)",
        "exact OT cost between the rows of p (T×72) and p* (T×72)",
        "m",
        Direction::Lower,
    ),
    info(
        "mpjpe_g",
        "Global body-position error over the 24 non-wrist bodies (MPJPE, world frame)",
        "1000 · mean_{t,b} ‖p_{t,b} − p*_{t,b}‖₂",
        "mm",
        Direction::Lower,
    ),
    info(
        "mpjpe_g_all",
        "Global body-position error over all 31 bodies (30 links and the virtual head)",
        "1000 · mean_{t,b} ‖p_{t,b} − p*_{t,b}‖₂",
        "mm",
        Direction::Lower,
    ),
    info(
        "mpjpe_rr",
        "Root-relative body-position error over the 24 non-wrist bodies (PHC `mpjpe_l`)",
        "1000 · mean_{t,b} ‖(p_{t,b} − p_{t,root}) − (p*_{t,b} − p*_{t,root})‖₂",
        "mm",
        Direction::Lower,
    ),
    info(
        "mpjpe_rr_all",
        "Root-relative body-position error over all 31 bodies",
        "1000 · mean_{t,b} ‖(p_{t,b} − p_{t,root}) − (p*_{t,b} − p*_{t,root})‖₂",
        "mm",
        Direction::Lower,
    ),
    info(
        "body_vel_dist",
        "Body velocity error over the 24 non-wrist bodies (PHC `vel_dist`): differences between frames",
        "1000 · mean_{t,b} ‖Δp_{t,b} − Δp*_{t,b}‖₂, Δp_t = p_{t+1} − p_t",
        "mm/frame",
        Direction::Lower,
    ),
    info(
        "body_accel_dist",
        "Body acceleration error over the 24 non-wrist bodies (PHC `accel_dist`)",
        "1000 · mean_{t,b} ‖Δ²p_{t,b} − Δ²p*_{t,b}‖₂, Δ²p_t = p_{t+2} − 2p_{t+1} + p_t",
        "mm/frame²",
        Direction::Lower,
    ),
    info(
        "success",
        "PHC success: both success_phc_linf and success_phc_mean hold",
        "success_phc_linf · success_phc_mean",
        "0 or 1",
        Direction::Higher,
    ),
    info(
        "success_phc_linf",
        "Every non-wrist body within the threshold (default 0.5 m) of its reference in every frame",
        "1 if max_{t,b} ‖p_{t,b} − p*_{t,b}‖₂ ≤ θ else 0",
        "0 or 1",
        Direction::Higher,
    ),
    info(
        "success_phc_mean",
        "Mean non-wrist body error within the threshold (default 0.5 m) in every frame",
        "1 if max_t mean_b ‖p_{t,b} − p*_{t,b}‖₂ ≤ θ else 0",
        "0 or 1",
        Direction::Higher,
    ),
    info(
        "failure_time_s",
        "Time of the first frame that breaks either success criterion; the episode's length if none does",
        "min { t : max_b e_{t,b} > θ or mean_b e_{t,b} > θ }, else the last frame's time",
        "s",
        Direction::Higher,
    ),
    info(
        "ndtw",
        "Normalised dynamic time warping on the non-wrist body positions: similarity robust to small timing lag",
        "exp(−DTW(p, p*) / (T* · θ)), DTW step cost mean_b ‖p_{i,b} − p*_{j,b}‖₂, band ±window",
        "similarity (0-1]",
        Direction::Higher,
    ),
];

const fn info(
    name: &'static str,
    description: &'static str,
    formula: &'static str,
    units: &'static str,
    direction: Direction,
) -> MetricInfo {
    MetricInfo {
        name,
        description,
        formula,
        units,
        direction,
    }
}

/// The 0/1 success metrics: the ones a benchmark may rank by (`ranking.success`) and the ones a
/// fall sets to 0.
pub const SUCCESS_METRICS: [&str; 3] = ["success", "success_phc_linf", "success_phc_mean"];

/// The defined penalty of a fall: an episode that the benchmark's fall rule ended is never a
/// success, whatever its frames up to the fall show, and it failed no later than `fell_at_s`
/// (seconds from the episode's start). Metrics not computed for the episode stay absent.
pub fn apply_fall_penalty(metrics: &mut BTreeMap<String, f64>, fell_at_s: f64) {
    for name in SUCCESS_METRICS {
        if let Some(v) = metrics.get_mut(name) {
            *v = 0.0;
        }
    }
    if let Some(t) = metrics.get_mut("failure_time_s") {
        *t = t.min(fell_at_s);
    }
}

/// Names of every registered metric.
pub fn metric_names() -> Vec<&'static str> {
    METRICS.iter().map(|m| m.name).collect()
}

/// The registry entry for `name`.
pub fn metric_info(name: &str) -> Option<&'static MetricInfo> {
    METRICS.iter().find(|m| m.name == name)
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
        _ => unreachable!("every registered metric has a constructor"),
    })
}

/// Runs the named metrics over an episode's frames: the whole-trajectory form of the interface.
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
    metrics
        .iter()
        .map(|m| Ok((m.info().name.to_string(), m.compute()?)))
        .collect()
}

fn check_frame(metric: &'static str, f: &Frame<'_>) -> Result<(), MetricError> {
    let sizes = [
        ("simulated joints", f.sim_joints.len(), NUM_JOINTS),
        ("reference joints", f.ref_joints.len(), NUM_JOINTS),
        ("simulated bodies", f.sim_bodies.len(), 3 * NUM_BODIES),
        ("reference bodies", f.ref_bodies.len(), 3 * NUM_BODIES),
        ("simulated state", f.sim_state.len(), STATE_DIM),
        ("reference state", f.ref_state.len(), STATE_DIM),
    ];
    for (what, got, want) in sizes {
        if got != want {
            return Err(MetricError::BadFrame {
                metric,
                message: format!("{what} at t = {:.3} s: {got} values, expected {want}", f.time),
            });
        }
    }
    Ok(())
}

fn feature_into(feature: Feature, config: &MetricConfig, f: &Frame<'_>, sim: bool, out: &mut Vec<f64>) {
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

fn norm_of_difference(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
}

fn body_error(f: &Frame<'_>, b: usize, root_relative: bool) -> f64 {
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

/// Both sides' frames of one feature, collected for a whole-trajectory metric.
#[derive(Default)]
struct FrameSets {
    sim: Vec<f64>,
    reference: Vec<f64>,
}

impl FrameSets {
    fn clear(&mut self) {
        self.sim.clear();
        self.reference.clear();
    }

    fn push(
        &mut self,
        metric: &'static str,
        feature: Feature,
        config: &MetricConfig,
        f: &Frame<'_>,
    ) -> Result<(), MetricError> {
        check_frame(metric, f)?;
        feature_into(feature, config, f, true, &mut self.sim);
        feature_into(feature, config, f, false, &mut self.reference);
        Ok(())
    }
}

/// EMD over a feature: collects both frame sets, solves once in `compute`.
struct Emd {
    info: &'static MetricInfo,
    feature: Feature,
    config: MetricConfig,
    frames: FrameSets,
    dim: usize,
}

impl Emd {
    fn new(info: &'static MetricInfo, feature: Feature, config: MetricConfig) -> Self {
        let dim = match feature {
            Feature::Joints => NUM_JOINTS,
            Feature::StateSlice => config.state_slice[1] - config.state_slice[0],
            Feature::Xpos24 => 3 * NON_WRIST_BODIES.len(),
        };
        Emd {
            info,
            feature,
            config,
            frames: FrameSets::default(),
            dim,
        }
    }
}

impl Metric for Emd {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.frames.clear();
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        self.frames.push(self.info.name, self.feature, &self.config, f)
    }

    fn compute(&self) -> Result<f64, MetricError> {
        if self.frames.sim.is_empty() {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        emd::emd(&self.frames.sim, &self.frames.reference, self.dim).map_err(|source| MetricError::Emd {
            metric: self.info.name,
            source,
        })
    }
}

/// What a per-frame metric averages.
#[derive(Debug, Clone, Copy)]
enum FrameKind {
    /// scale · ‖x − y‖ on a feature.
    Distance(Feature, f64),
    Proximity(Feature),
    /// scale · ‖D^order x − D^order y‖, differences along the joint axis (BFM-Zero quirk §10.4).
    JointAxisDiff(usize, f64),
    /// 1000 · mean over the bodies of the per-body position error, optionally root-relative.
    BodyError(&'static [usize], bool),
}

/// A metric that is the mean over frames of a per-frame value.
struct PerFrame {
    info: &'static MetricInfo,
    config: MetricConfig,
    kind: FrameKind,
    sum: f64,
    count: usize,
    scratch: (Vec<f64>, Vec<f64>),
}

impl PerFrame {
    fn new(info: &'static MetricInfo, config: MetricConfig, kind: FrameKind) -> Self {
        PerFrame {
            info,
            config,
            kind,
            sum: 0.0,
            count: 0,
            scratch: (Vec::new(), Vec::new()),
        }
    }
}

/// Differences of `order` along the joint axis, written into `out`.
fn joint_axis_diff(q: &[f64], order: usize, out: &mut Vec<f64>) {
    out.clear();
    out.extend_from_slice(q);
    for _ in 0..order {
        for k in 0..out.len() - 1 {
            out[k] = out[k + 1] - out[k];
        }
        out.pop();
    }
}

impl Metric for PerFrame {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.sum = 0.0;
        self.count = 0;
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        check_frame(self.info.name, f)?;
        let (x, y) = &mut self.scratch;
        let value = match self.kind {
            FrameKind::Distance(feature, _) | FrameKind::Proximity(feature) => {
                x.clear();
                y.clear();
                feature_into(feature, &self.config, f, true, x);
                feature_into(feature, &self.config, f, false, y);
                let d = norm_of_difference(x, y);
                match self.kind {
                    FrameKind::Distance(_, scale) => scale * d,
                    _ => proximity_of(d),
                }
            }
            FrameKind::JointAxisDiff(order, scale) => {
                joint_axis_diff(f.sim_joints, order, x);
                joint_axis_diff(f.ref_joints, order, y);
                scale * norm_of_difference(x, y)
            }
            FrameKind::BodyError(bodies, root_relative) => {
                let total: f64 = bodies.iter().map(|&b| body_error(f, b, root_relative)).sum();
                1000.0 * total / bodies.len() as f64
            }
        };
        self.sum += value;
        self.count += 1;
        Ok(())
    }

    fn compute(&self) -> Result<f64, MetricError> {
        if self.count == 0 {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        Ok(self.sum / self.count as f64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum TimeDiffKind {
    /// One 29-D norm per frame.
    Joints,
    /// Mean of per-body norms over the 24 non-wrist bodies.
    Bodies,
}

/// Velocity (order 1) or acceleration (order 2) error along time, ×1000, keeping the last
/// `order` frames.
struct TimeDiff {
    info: &'static MetricInfo,
    kind: TimeDiffKind,
    order: usize,
    /// Last frames' (sim − ref) features, newest last.
    history: VecDeque<Vec<f64>>,
    sum: f64,
    count: usize,
}

impl TimeDiff {
    fn new(info: &'static MetricInfo, kind: TimeDiffKind, order: usize) -> Self {
        TimeDiff {
            info,
            kind,
            order,
            history: VecDeque::new(),
            sum: 0.0,
            count: 0,
        }
    }
}

impl Metric for TimeDiff {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.history.clear();
        self.sum = 0.0;
        self.count = 0;
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        check_frame(self.info.name, f)?;
        // Δx − Δy = Δ(x − y): difference the per-frame error, which needs only one vector.
        // The oldest buffer is reused for the newest frame (no allocation per frame).
        let mut err = if self.history.len() > self.order {
            self.history.pop_front().expect("non-empty")
        } else {
            Vec::new()
        };
        err.clear();
        match self.kind {
            TimeDiffKind::Joints => err.extend(f.sim_joints.iter().zip(f.ref_joints).map(|(a, b)| a - b)),
            TimeDiffKind::Bodies => err.extend(
                NON_WRIST_BODIES
                    .iter()
                    .flat_map(|&b| (0..3).map(move |c| f.sim_bodies[3 * b + c] - f.ref_bodies[3 * b + c])),
            ),
        }
        self.history.push_back(err);
        if self.history.len() == self.order + 1 {
            let h = &self.history;
            let diff = |k: usize| match self.order {
                1 => h[1][k] - h[0][k],
                _ => h[2][k] - 2.0 * h[1][k] + h[0][k],
            };
            let len = h[0].len();
            let value = match self.kind {
                TimeDiffKind::Joints => (0..len).map(|k| diff(k).powi(2)).sum::<f64>().sqrt(),
                TimeDiffKind::Bodies => {
                    (0..len / 3)
                        .map(|b| (diff(3 * b).powi(2) + diff(3 * b + 1).powi(2) + diff(3 * b + 2).powi(2)).sqrt())
                        .sum::<f64>()
                        / NON_WRIST_BODIES.len() as f64
                }
            };
            self.sum += 1000.0 * value;
            self.count += 1;
        }
        Ok(())
    }

    fn compute(&self) -> Result<f64, MetricError> {
        if self.count == 0 {
            // Too short an episode to difference is no error: no motion, no motion error.
            return if self.history.is_empty() {
                Err(MetricError::NoFrames { metric: self.info.name })
            } else {
                Ok(0.0)
            };
        }
        Ok(self.sum / self.count as f64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum SuccessKind {
    Both,
    Linf,
    Mean,
    FailureTime,
}

/// PHC success criteria on the non-wrist bodies, and the time of the first failing frame.
struct Success {
    info: &'static MetricInfo,
    threshold: f64,
    kind: SuccessKind,
    frames: usize,
    linf_ok: bool,
    mean_ok: bool,
    first_failure: Option<f64>,
    last_time: f64,
}

impl Success {
    fn new(info: &'static MetricInfo, config: MetricConfig, kind: SuccessKind) -> Self {
        Success {
            info,
            threshold: config.success_threshold_m,
            kind,
            frames: 0,
            linf_ok: true,
            mean_ok: true,
            first_failure: None,
            last_time: 0.0,
        }
    }
}

impl Metric for Success {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.frames = 0;
        self.linf_ok = true;
        self.mean_ok = true;
        self.first_failure = None;
        self.last_time = 0.0;
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        check_frame(self.info.name, f)?;
        let (mut max, mut sum) = (0.0f64, 0.0);
        for &b in &NON_WRIST_BODIES {
            let e = body_error(f, b, false);
            max = max.max(e);
            sum += e;
        }
        let mean = sum / NON_WRIST_BODIES.len() as f64;
        let linf = max <= self.threshold;
        let mean_ok = mean <= self.threshold;
        self.linf_ok &= linf;
        self.mean_ok &= mean_ok;
        if !(linf && mean_ok) && self.first_failure.is_none() {
            self.first_failure = Some(f.time);
        }
        self.frames += 1;
        self.last_time = f.time;
        Ok(())
    }

    fn compute(&self) -> Result<f64, MetricError> {
        if self.frames == 0 {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        Ok(match self.kind {
            SuccessKind::Both => flag(self.linf_ok && self.mean_ok),
            SuccessKind::Linf => flag(self.linf_ok),
            SuccessKind::Mean => flag(self.mean_ok),
            SuccessKind::FailureTime => self.first_failure.unwrap_or(self.last_time),
        })
    }
}

/// nDTW (Ilharco et al. 2019, as used for trajectories in VLN): exp(−DTW / (T_ref · θ)).
struct Ndtw {
    info: &'static MetricInfo,
    config: MetricConfig,
    frames: FrameSets,
}

impl Ndtw {
    fn new(info: &'static MetricInfo, config: MetricConfig) -> Self {
        Ndtw {
            info,
            config,
            frames: FrameSets::default(),
        }
    }
}

/// Mean per-body distance between two 24-body frames (72 values each).
fn mean_body_distance(x: &[f64], y: &[f64]) -> f64 {
    x.chunks_exact(3)
        .zip(y.chunks_exact(3))
        .map(|(p, q)| ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt())
        .sum::<f64>()
        / (x.len() / 3) as f64
}

/// DTW cost between two frame sequences (rows of `dim`), with a Sakoe-Chiba band of `band`
/// frames around the (rescaled) diagonal; `None` means unconstrained.
pub fn dtw(x: &[f64], y: &[f64], dim: usize, band: Option<usize>, cost: impl Fn(&[f64], &[f64]) -> f64) -> f64 {
    let (n, m) = (x.len() / dim, y.len() / dim);
    if n == 0 || m == 0 {
        return f64::INFINITY;
    }
    // The band must at least cover the length difference, or no path exists.
    let band = band.map(|w| w.max(n.abs_diff(m)));
    let mut prev = vec![f64::INFINITY; m + 1];
    let mut cur = vec![f64::INFINITY; m + 1];
    prev[0] = 0.0;
    for i in 1..=n {
        cur.fill(f64::INFINITY);
        let centre = (i * m) / n;
        let (lo, hi) = match band {
            Some(w) => (centre.saturating_sub(w).max(1), (centre + w).min(m)),
            None => (1, m),
        };
        for j in lo..=hi {
            let c = cost(&x[(i - 1) * dim..i * dim], &y[(j - 1) * dim..j * dim]);
            cur[j] = c + prev[j].min(cur[j - 1]).min(prev[j - 1]);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[m]
}

impl Metric for Ndtw {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.frames.clear();
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        self.frames.push(self.info.name, Feature::Xpos24, &self.config, f)
    }

    fn compute(&self) -> Result<f64, MetricError> {
        if self.frames.sim.is_empty() {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        let dim = 3 * NON_WRIST_BODIES.len();
        let band = (self.config.ndtw_window_s > 0.0)
            .then(|| (self.config.ndtw_window_s / self.config.frame_dt).round() as usize);
        let d = dtw(&self.frames.sim, &self.frames.reference, dim, band, mean_body_distance);
        let frames = (self.frames.reference.len() / dim) as f64;
        Ok((-d / (frames * self.config.success_threshold_m)).exp())
    }
}
