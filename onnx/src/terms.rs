//! A tracking policy's observation terms (the mjlab / BeyondMimic and holosoma names) computed
//! from the arena's robot-interface groups, and the observation rows they make in the policy's
//! own term order and joint order. The same definitions as the Python SDK's
//! `arena_sdk.observation_terms` (`tests/conventions.rs` requires identical rows), written once
//! per language because the remote runner is Python and the hosted one Rust.

use arena_g1::{Group, NUM_JOINTS};
use arena_sdk::ObservationLayout;
use arena_sdk::protocol::EpisodeSpec;
use std::ops::Range;

/// What the arena computes a term from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSource {
    /// The arena's name of the quantity (the mjlab name where one exists).
    pub name: &'static str,
    /// Values per episode.
    pub size: usize,
    /// Arena groups it reads (none: the policy's own previous action).
    pub groups: &'static [Group],
    /// How it is computed, for people.
    pub description: &'static str,
    /// Relative to the policy's anchor body, which must then be the session's.
    pub needs_anchor: bool,
}

const J: usize = NUM_JOINTS;

/// The quantities a policy can observe, by the arena's name.
pub const SOURCES: [TermSource; 9] = [
    TermSource {
        name: "motion_command",
        size: 2 * J,
        groups: &[Group::MotionCommand],
        description: "motion_command: reference joint positions then velocities (policy joint order)",
        needs_anchor: false,
    },
    TermSource {
        name: "motion_anchor_pos_b",
        size: 3,
        groups: &[Group::MotionAnchorPosB],
        description: "motion_anchor_pos_b: reference anchor position in the robot anchor's frame",
        needs_anchor: true,
    },
    TermSource {
        name: "motion_anchor_ori_b",
        size: 6,
        groups: &[Group::MotionAnchorOriB],
        description: "motion_anchor_ori_b: first two columns of R_robot_anchor^T R_reference_anchor",
        needs_anchor: true,
    },
    TermSource {
        name: "base_lin_vel",
        size: 3,
        groups: &[Group::BaseLinVel],
        description: "base_lin_vel: pelvis linear velocity, pelvis frame",
        needs_anchor: false,
    },
    TermSource {
        name: "base_ang_vel",
        size: 3,
        groups: &[Group::Imu],
        description: "imu[4:7]: pelvis gyroscope",
        needs_anchor: false,
    },
    TermSource {
        name: "projected_gravity",
        size: 3,
        groups: &[Group::Imu],
        description: "R_pelvis^T (0, 0, -1) from the imu quaternion imu[0:4]",
        needs_anchor: false,
    },
    TermSource {
        name: "joint_pos",
        size: J,
        groups: &[Group::Motors],
        description: "motors[0:29] - default_joint_pos (policy joint order)",
        needs_anchor: false,
    },
    TermSource {
        name: "joint_vel",
        size: J,
        groups: &[Group::Motors],
        description: "motors[29:58] (policy joint order)",
        needs_anchor: false,
    },
    TermSource {
        name: "actions",
        size: J,
        groups: &[],
        description: "the policy's previous raw output (zeros at an episode's start)",
        needs_anchor: false,
    },
];

/// Term names as the exporters write them → the arena's quantity: mjlab / BeyondMimic first,
/// then mjlab's interim `motion_ref_*` names (which holosoma uses too), then holosoma's.
pub const TERM_ALIASES: [(&str, &str); 15] = [
    ("command", "motion_command"),
    ("motion_command", "motion_command"),
    ("motion_anchor_pos_b", "motion_anchor_pos_b"),
    ("motion_anchor_ori_b", "motion_anchor_ori_b"),
    ("motion_ref_pos_b", "motion_anchor_pos_b"),
    ("motion_ref_ori_b", "motion_anchor_ori_b"),
    ("base_lin_vel", "base_lin_vel"),
    ("base_ang_vel", "base_ang_vel"),
    ("projected_gravity", "projected_gravity"),
    ("joint_pos", "joint_pos"),
    ("dof_pos", "joint_pos"),
    ("joint_vel", "joint_vel"),
    ("dof_vel", "joint_vel"),
    ("actions", "actions"),
    ("last_action", "actions"),
];

/// The quantity behind a policy's term name; None when the arena cannot provide it.
pub fn term_source(name: &str) -> Option<&'static TermSource> {
    let (_, canonical) = TERM_ALIASES.iter().find(|(alias, _)| *alias == name)?;
    SOURCES.iter().find(|s| s.name == *canonical)
}

/// One term of a policy's observation vector.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservationTerm {
    /// The name the policy's metadata uses.
    pub name: String,
    pub source: &'static TermSource,
    /// Multiplied in after computing: one value, or one per value of the term; empty = 1.
    pub scale: Vec<f32>,
    /// (low, high) clip after scaling.
    pub clip: Option<(f32, f32)>,
}

impl ObservationTerm {
    pub fn size(&self) -> usize {
        self.source.size
    }
}

/// Assembles a policy's observation rows from the arena's groups. `policy_to_g1[p]` is the G1
/// index of the policy's joint p; `default_joint_pos` is in the policy's joint order (what
/// `joint_pos` is relative to, as in training).
#[derive(Debug, Clone)]
pub struct ObservationBuilder {
    terms: Vec<ObservationTerm>,
    policy_to_g1: Vec<usize>,
    default_joint_pos: Vec<f32>,
    size: usize,
    /// Where each group the terms read sits in a session's row (set by `bind`).
    ranges: Vec<(Group, Range<usize>)>,
}

impl ObservationBuilder {
    pub fn new(terms: Vec<ObservationTerm>, policy_to_g1: Vec<usize>, default_joint_pos: &[f64]) -> Self {
        let size = terms.iter().map(ObservationTerm::size).sum();
        Self {
            terms,
            policy_to_g1,
            default_joint_pos: default_joint_pos.iter().map(|v| *v as f32).collect(),
            size,
            ranges: Vec::new(),
        }
    }

    /// Values per observation row.
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn terms(&self) -> &[ObservationTerm] {
        &self.terms
    }

    /// The arena groups the terms read, in first-use order.
    pub fn groups(&self) -> Vec<Group> {
        let mut seen = Vec::new();
        for g in self.terms.iter().flat_map(|t| t.source.groups) {
            if !seen.contains(g) {
                seen.push(*g);
            }
        }
        seen
    }

    /// What is missing from a session's groups (empty: the policy can run on it).
    pub fn check(&self, spec: &EpisodeSpec) -> Vec<String> {
        let layout = ObservationLayout::from_spec(spec);
        let sent = if spec.observations.is_empty() {
            "none".to_string()
        } else {
            spec.observations
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut problems = Vec::new();
        for group in self.groups() {
            let users: Vec<&str> = self
                .terms
                .iter()
                .filter(|t| t.source.groups.contains(&group))
                .map(|t| t.name.as_str())
                .collect();
            match layout.group(group.name()) {
                None => problems.push(format!(
                    "the benchmark does not send the observation group '{}' (needed by {}; it sends: {sent})",
                    group.name(),
                    users.join(", ")
                )),
                Some(r) if r.len() != group.size() => problems.push(format!(
                    "observation group '{}' has {} values, expected {}",
                    group.name(),
                    r.len(),
                    group.size()
                )),
                Some(_) => {}
            }
        }
        problems
    }

    /// Takes the group offsets of a session (`check` first).
    pub fn bind(&mut self, layout: &ObservationLayout) {
        self.ranges = self
            .groups()
            .into_iter()
            .filter_map(|g| layout.group(g.name()).map(|r| (g, r)))
            .collect();
    }

    fn group<'a>(&self, row: &'a [f32], group: Group) -> &'a [f32] {
        let (_, r) = self
            .ranges
            .iter()
            .find(|(g, _)| *g == group)
            .expect("bind() took every group check() requires");
        &row[r.clone()]
    }

    /// One observation row (`size()` values) from one arena row and the policy's previous raw
    /// action (policy joint order).
    pub fn build_row(&self, row: &[f32], previous: &[f32], out: &mut [f32]) {
        let mut col = 0;
        let j = &self.policy_to_g1;
        for term in &self.terms {
            let dst = &mut out[col..col + term.size()];
            match term.source.name {
                "motion_command" => {
                    let command = self.group(row, Group::MotionCommand);
                    for (p, g) in j.iter().enumerate() {
                        dst[p] = command[*g];
                        dst[J + p] = command[J + *g];
                    }
                }
                "motion_anchor_pos_b" => dst.copy_from_slice(self.group(row, Group::MotionAnchorPosB)),
                "motion_anchor_ori_b" => dst.copy_from_slice(self.group(row, Group::MotionAnchorOriB)),
                "base_lin_vel" => dst.copy_from_slice(self.group(row, Group::BaseLinVel)),
                "base_ang_vel" => dst.copy_from_slice(&self.group(row, Group::Imu)[4..7]),
                "projected_gravity" => {
                    let q = self.group(row, Group::Imu);
                    dst.copy_from_slice(&projected_gravity([q[0], q[1], q[2], q[3]]));
                }
                "joint_pos" => {
                    let motors = self.group(row, Group::Motors);
                    for (p, g) in j.iter().enumerate() {
                        dst[p] = motors[*g] - self.default_joint_pos[p];
                    }
                }
                "joint_vel" => {
                    let motors = self.group(row, Group::Motors);
                    for (p, g) in j.iter().enumerate() {
                        dst[p] = motors[J + *g];
                    }
                }
                _ => dst.copy_from_slice(previous),
            }
            match term.scale.len() {
                0 => {}
                1 => dst.iter_mut().for_each(|v| *v *= term.scale[0]),
                _ => dst.iter_mut().zip(&term.scale).for_each(|(v, s)| *v *= s),
            }
            if let Some((lo, hi)) = term.clip {
                dst.iter_mut().for_each(|v| *v = v.clamp(lo, hi));
            }
            col += term.size();
        }
    }
}

/// R(q)ᵀ·(0, 0, −1) for a quaternion wxyz: gravity's direction in the body frame, computed in
/// double precision after normalising (the arena sends the quaternion as float32).
pub fn projected_gravity(q: [f32; 4]) -> [f32; 3] {
    let n = q.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
    let [w, x, y, z] = q.map(|v| f64::from(v) / n);
    // Rᵀe_z is the third row of R; gravity points along −e_z.
    [
        -(2.0 * (x * z - w * y)) as f32,
        -(2.0 * (y * z + w * x)) as f32,
        -(1.0 - 2.0 * (x * x + y * y)) as f32,
    ]
}
