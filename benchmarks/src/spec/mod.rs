//! Benchmark definitions: the typed, validated schema of `benchmarks/*.toml`.
//!
//! A benchmark fixes which motions are tracked, how they are cut into episodes, what the agent
//! may observe, when an episode counts as a fall, which metrics are computed and how agents are
//! ranked. `benchmarks/g1-smoke.toml` documents every key.
//!
//! Parsing has two phases so that every error names the file, the dotted key and what was
//! expected: serde reads the file into raw structs of optional fields (`deny_unknown_fields`
//! catches typos, serde reports type errors), then `parse::Check` applies defaults and range checks.

use arena_data::{DataError, Manifest, MotionClip, Split, builtin_motion_names, read_g1_csv};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The simulator's control rate; benchmarks cannot change it.
pub const CONTROL_HZ: u32 = 50;
/// Observation groups an agent may be granted: BFM-Zero's, then the robot's own interface (the
/// IMUs, the motors, the pelvis velocity) and the tracking command in mjlab's convention.
pub const OBSERVATION_GROUPS: [&str; 12] = [
    "state",
    "privileged_state",
    "last_action",
    "history_actor",
    "imu",
    "imu_torso",
    "motors",
    "base_lin_vel",
    "motion_command",
    "motion_anchor_pos_b",
    "motion_anchor_ori_b",
    "motion_anchor_pose_w",
];
/// The G1's bodies that can anchor the tracking command (MuJoCo body order, pelvis first).
pub const ANCHOR_BODIES: [&str; 30] = [
    "pelvis",
    "left_hip_pitch_link",
    "left_hip_roll_link",
    "left_hip_yaw_link",
    "left_knee_link",
    "left_ankle_pitch_link",
    "left_ankle_roll_link",
    "right_hip_pitch_link",
    "right_hip_roll_link",
    "right_hip_yaw_link",
    "right_knee_link",
    "right_ankle_pitch_link",
    "right_ankle_roll_link",
    "waist_yaw_link",
    "waist_roll_link",
    "torso_link",
    "left_shoulder_pitch_link",
    "left_shoulder_roll_link",
    "left_shoulder_yaw_link",
    "left_elbow_link",
    "left_wrist_roll_link",
    "left_wrist_pitch_link",
    "left_wrist_yaw_link",
    "right_shoulder_pitch_link",
    "right_shoulder_roll_link",
    "right_shoulder_yaw_link",
    "right_elbow_link",
    "right_wrist_roll_link",
    "right_wrist_pitch_link",
    "right_wrist_yaw_link",
];
/// Named PD gain sets a joint-position benchmark may offer: `armature` (BeyondMimic / mjlab)
/// and `arena` (the normalized mode's, BFM-Zero's).
pub const GAIN_PRESETS: [&str; 2] = ["armature", "arena"];
/// Groups granted when `[observations] groups` is absent.
pub const DEFAULT_OBSERVATION_GROUPS: [&str; 3] = ["state", "last_action", "history_actor"];
/// Largest `reference_horizon` (5 s of future frames at the control rate).
pub const MAX_REFERENCE_HORIZON: u32 = 250;
/// Largest `reference_goal_horizon` (5 s of future reference rows at the control rate).
pub const MAX_REFERENCE_GOAL_HORIZON: u32 = 250;
/// Environment variable naming the motions root (the command line's `--motions-root`).
pub const MOTIONS_ROOT_ENV: &str = "ARENA_MOTIONS_ROOT";

/// Length of the `state` observation, the upper bound of `metrics.state_slice`.
const STATE_DIM: usize = 64;
/// Tolerance of window arithmetic, so a window ending exactly at the clip's end is kept.
const WINDOW_EPS: f64 = 1e-9;

// ---------------------------------------------------------------------------------------------
// Public, validated types

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchmarkSpec {
    pub name: String,
    pub version: u32,
    pub description: String,
    pub task: Task,
    pub motions: MotionSet,
    pub episodes: EpisodeRules,
    pub limits: Limits,
    pub fall: FallSpec,
    pub observations: ObservationAccess,
    pub metrics: MetricSelection,
    pub ranking: Ranking,
    /// How actions drive the robot (`[action]`; normalized when absent).
    #[serde(default)]
    pub action: ActionRules,
}

/// `[action]`: the action mode and, in the joint-position mode, which PD gains agents may use.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ActionRules {
    pub mode: ActionMode,
    /// The preset a session gets when its agent declares no gains (joint-position mode).
    pub gains: String,
    /// Presets an agent may pick by name or by declaring their values (includes `gains`).
    pub presets: Vec<String>,
    /// Per-joint bounds on declared gains (29 each, G1 order); `None`: only the presets.
    pub kp_max: Option<Vec<f64>>,
    pub kd_max: Option<Vec<f64>>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ActionMode {
    /// BFM-Zero's normalised actions with the arena's gains.
    #[default]
    Normalized,
    /// Absolute joint position targets (and optional feed-forward torques) with the agent's
    /// declared gains: unitree_sdk2's LowCmd semantics.
    JointPosition,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    Tracking,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum MotionSource {
    /// Names from [`arena_data::builtin_motion_names`]; generated by the simulator.
    Builtin(Vec<String>),
    /// G1 CSV files relative to the motions root.
    Files(Vec<PathBuf>),
    /// A folder relative to the motions root; `pattern` filters file names (one `*` wildcard),
    /// all `*.csv` when absent.
    Dir { dir: PathBuf, pattern: Option<String> },
    /// An arena-data manifest relative to the motions root.
    Manifest(PathBuf),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MotionSet {
    pub source: MotionSource,
    /// Frame rate of files/dir clips; for a manifest, overrides the manifest's rates when set.
    pub fps: Option<f64>,
    pub split: SplitFilter,
    /// Where the clips come from and their licence, as dataset cards and pages quote it.
    #[serde(default)]
    pub attribution: Option<String>,
    /// A hidden test set: the motions' names, durations and references never reach teams
    /// (pages, REST, practice, `episode_start`), while the episodes run as usual. A benchmark
    /// used by a private phase is hidden the same way until the phase ends (the server decides
    /// that; this is the benchmark's own flag).
    #[serde(default)]
    pub hidden: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum SplitFilter {
    #[default]
    All,
    Train,
    Val,
    Test,
}

impl SplitFilter {
    pub fn as_str(self) -> &'static str {
        match self {
            SplitFilter::All => "all",
            SplitFilter::Train => "train",
            SplitFilter::Val => "val",
            SplitFilter::Test => "test",
        }
    }

    /// The arena-data split this keeps, `None` for all.
    pub fn split(self) -> Option<Split> {
        match self {
            SplitFilter::All => None,
            SplitFilter::Train => Some(Split::Train),
            SplitFilter::Val => Some(Split::Val),
            SplitFilter::Test => Some(Split::Test),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    Whole,
    Sliding { length_s: f64, stride_s: f64 },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EpisodeRules {
    pub window: Window,
    pub repeats: u32,
    pub dr_level: u8,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    pub control_hz: u32,
    /// 0 = no limit.
    pub max_episode_s: f64,
    pub step_timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum FallSpec {
    None,
    /// Fall when the root is lower than this many metres.
    MinRootHeight(f64),
    /// Fall when a body is further than this many metres from its reference.
    MaxBodyDeviation(f64),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ObservationAccess {
    pub groups: Vec<String>,
    pub reference_horizon: u32,
    /// Future reference rows (state | privileged_state of the reference, BFM-Zero's backward
    /// observation) sent each step as the `reference_goal` group; 0 = not sent.
    #[serde(default)]
    pub reference_goal_horizon: u32,
    pub reveal_reference: bool,
    pub hide_motion_names: bool,
    /// The body whose pose the `motion_anchor_*` groups relate (BeyondMimic's anchor).
    #[serde(default = "default_anchor_body")]
    pub anchor_body: String,
}

fn default_anchor_body() -> String {
    "torso_link".to_string()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MetricSelection {
    pub list: Vec<String>,
    /// Half-open range `[lo, hi)` of the `state` observation used by the `obs_state_*` metrics.
    pub state_slice: [usize; 2],
    pub success_threshold_m: f64,
    /// 0 = unconstrained warping.
    pub ndtw_window_s: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Lower,
    Higher,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Ranking {
    /// A 0/1 success metric whose rate over all of a submission's episodes ranks first (a
    /// fall, failure or timeout counts as not successful); `None` ranks by `primary` alone.
    #[serde(default)]
    pub success: Option<String>,
    /// The time-to-failure metric (`failure_time_s`) whose mean ranks right after the success
    /// rate and the count of scored episodes, before `primary`: among agents that fail, the one
    /// that stays up longer ranks higher, whatever its joint angles. `None`: not ranked by it.
    #[serde(default)]
    pub survival: Option<String>,
    pub primary: String,
    /// `None`: the metric's own direction.
    pub direction: Option<Direction>,
    pub tie_breakers: Vec<String>,
}

impl Ranking {
    /// The primary metric's direction: `direction`, else the metric's own, else lower.
    pub fn primary_direction(&self) -> Direction {
        self.direction
            .or_else(|| crate::metrics::metric_info(&self.primary).map(|m| m.direction))
            .unwrap_or(Direction::Lower)
    }

    /// The ranking rule in one sentence, for people (`arena bench show`, the benchmark page).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(success) = &self.success {
            s.push_str(&format!(
                "highest {success} rate over all episodes first (a fall, failure or timeout is not a success), then "
            ));
        }
        s.push_str("most scored episodes, then ");
        if let Some(survival) = &self.survival {
            s.push_str(&format!("highest mean {survival} (staying up longer), then "));
        }
        let word = match self.primary_direction() {
            Direction::Lower => "lowest",
            Direction::Higher => "highest",
        };
        s.push_str(&format!("{word} mean {}", self.primary));
        for t in &self.tie_breakers {
            s.push_str(&format!(", then mean {t}"));
        }
        s.push_str(", then the earlier finish");
        s
    }
}

/// One episode of a benchmark run: a window of one motion, one repeat.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Episode {
    /// Position in the list returned by [`BenchmarkSpec::expand_episodes`].
    pub index: usize,
    /// Index into the motion list.
    pub motion: usize,
    pub start_s: f64,
    pub duration_s: f64,
    pub repeat: u32,
    /// See [`episode_seed`].
    pub seed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    // The cause is part of the message, not a `source`: error chains would print it twice.
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    /// TOML syntax, or a schema error toml could not attribute to a key.
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {key}: {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error(transparent)]
    Data(#[from] DataError),
    /// More than one section of a file is wrong: each problem on its own line.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Several(Vec<SpecError>),
    #[error(
        "benchmark {name}: its motions are built in; the simulator generates them (it has the kinematics), \
         they are not read from the motions root"
    )]
    BuiltinMotions { name: String },
    #[error(
        "motions root {root} is not a folder; set the motions root with `--motions-root` or the \
         {MOTIONS_ROOT_ENV} environment variable"
    )]
    MissingMotionsRoot { root: PathBuf },
    #[error("{path}: {message}")]
    NoClips { path: PathBuf, message: String },
    #[error(
        "no benchmark named {name:?} in {}; available: {}",
        folder_or_missing(dir),
        list_or_none(available)
    )]
    UnknownBenchmark {
        name: String,
        dir: PathBuf,
        available: Vec<String>,
    },
}

fn folder_or_missing(dir: &std::path::Path) -> String {
    if dir.is_dir() {
        dir.display().to_string()
    } else {
        format!("{} (no such folder)", dir.display())
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

mod episodes;
mod motions;
mod parse;
mod registry;
#[cfg(test)]
mod tests;

pub use episodes::episode_seed;
pub use registry::{find_benchmark, list_benchmarks, shipped_dir};
