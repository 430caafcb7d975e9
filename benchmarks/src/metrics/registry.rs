//! The registry of metrics: name, description, formula, units and direction of each, in
//! documentation order (`docs/metrics.md` follows it).

use super::MetricInfo;
use crate::spec::Direction;

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
        "PHC's strict success (its strict_eval): both success_phc_linf and success_phc_mean hold",
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
    info(
        "mjlab_success",
        "mjlab's success (mjlab 1.6.0 tracking evaluation): the episode ends without a BeyondMimic termination (anchor height, anchor tilt, end-effector height)",
        "1 if no step t ≥ 1 has |z_a − z*_a| > 0.25 or |g_z(q_a) − g_z(q*_a)| > 0.8 or max_e |z_e − z*_e| > 0.25, else 0 (a = torso_link, e = ankle rolls and wrist yaws)",
        "0 or 1",
        Direction::Higher,
    ),
    info(
        "mjlab_failure_time_s",
        "Time of the first step that breaks mjlab's success (a BeyondMimic termination); the episode's length if none does",
        "min { t : a termination holds at t }, else the last frame's time",
        "s",
        Direction::Higher,
    ),
    info(
        "mpkpe",
        "mjlab `mpkpe`: world-frame position error of the tracking task's 14 bodies, up to the first termination",
        "mean_t mean_b ‖p*_{t,b} − p_{t,b}‖₂ over mjlab's 14 bodies, t = 1..first termination",
        "m",
        Direction::Lower,
    ),
    info(
        "r_mpkpe",
        "mjlab `r_mpkpe`: 14-body position error against the reference re-anchored on the robot's anchor (yaw and horizontal position of the previous step's torso_link, reference heights)",
        "mean_t mean_b ‖p̂*_{t,b} − p_{t,b}‖₂, p̂* = Δp + R(Δψ)(p* − p*_a), t = 1..first termination",
        "m",
        Direction::Lower,
    ),
    info(
        "joint_vel_error",
        "mjlab `joint_vel_error`: root-mean-square joint velocity error, up to the first termination",
        "mean_t sqrt(mean_j (q̇*_{t,j} − q̇_{t,j})²)",
        "rad/s",
        Direction::Lower,
    ),
    info(
        "ee_pos_error",
        "mjlab `ee_pos_error`: position error of the four end effectors (ankle rolls, wrist yaws) against the re-anchored reference",
        "mean_t mean_e ‖p̂*_{t,e} − p_{t,e}‖₂, t = 1..first termination",
        "m",
        Direction::Lower,
    ),
    info(
        "ee_ori_error",
        "mjlab `ee_ori_error`: orientation error of the four end effectors against the re-anchored reference",
        "mean_t mean_e angle(Δq ⊗ q*_{t,e}, q_{t,e}), angle = 2·atan2(‖v‖, |w|) of the quotient, t = 1..first termination",
        "rad",
        Direction::Lower,
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

/// Names of every registered metric.
pub fn metric_names() -> Vec<&'static str> {
    METRICS.iter().map(|m| m.name).collect()
}

/// The registry entry for `name`.
pub fn metric_info(name: &str) -> Option<&'static MetricInfo> {
    METRICS.iter().find(|m| m.name == name)
}
