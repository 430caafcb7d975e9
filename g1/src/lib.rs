//! The Unitree G1 (29 DOF) as every part of the arena sees it: its joint and body names, and the
//! one table of the observation groups an agent may be granted (name, values per episode, what
//! produces it, what it holds). The benchmark schema, the simulator's terms, the runner that
//! fills observations, the Rust SDK and (by a test) the Python SDK read their facts from here, so
//! they cannot disagree. Plain constants, no dependencies: the participant's SDK builds it too.
//! The groups are defined in full in docs/protocol.md §5 and docs/observations.md.

/// Actuated joints.
pub const NUM_JOINTS: usize = 29;
/// Values of a MuJoCo `qpos` row: root position (3), root quaternion wxyz (4), the 29 joints.
pub const QPOS_WIDTH: usize = 7 + NUM_JOINTS;

/// The joint order of actions, joint targets, gains, motion files (G1 CSV) and the joint parts
/// of every observation group (unitree_sdk2's motor order).
pub const JOINT_NAMES: [&str; NUM_JOINTS] = [
    "left_hip_pitch_joint",
    "left_hip_roll_joint",
    "left_hip_yaw_joint",
    "left_knee_joint",
    "left_ankle_pitch_joint",
    "left_ankle_roll_joint",
    "right_hip_pitch_joint",
    "right_hip_roll_joint",
    "right_hip_yaw_joint",
    "right_knee_joint",
    "right_ankle_pitch_joint",
    "right_ankle_roll_joint",
    "waist_yaw_joint",
    "waist_roll_joint",
    "waist_pitch_joint",
    "left_shoulder_pitch_joint",
    "left_shoulder_roll_joint",
    "left_shoulder_yaw_joint",
    "left_elbow_joint",
    "left_wrist_roll_joint",
    "left_wrist_pitch_joint",
    "left_wrist_yaw_joint",
    "right_shoulder_pitch_joint",
    "right_shoulder_roll_joint",
    "right_shoulder_yaw_joint",
    "right_elbow_joint",
    "right_wrist_roll_joint",
    "right_wrist_pitch_joint",
    "right_wrist_yaw_joint",
];

/// The 30 bodies in MuJoCo's body order (depth-first over the model tree, pelvis first): the
/// order of BFM-Zero's body tensors and of mjlab's motion files.
pub const BODY_NAMES: [&str; 30] = [
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

/// `state`: BFM-Zero's proprioception.
pub const STATE_DIM: usize = 64;
/// `privileged_state`: BFM-Zero's body-level state.
pub const PRIVILEGED_STATE_DIM: usize = 463;
/// `last_action`.
pub const LAST_ACTION_DIM: usize = NUM_JOINTS;
/// Control steps in `history_actor`.
pub const HISTORY_FRAMES: usize = 4;
/// `history_actor`: per frame actions, root angular velocity, joint positions and velocities,
/// projected gravity.
pub const HISTORY_ACTOR_DIM: usize = HISTORY_FRAMES * (3 * NUM_JOINTS + 3 + 3);
/// `imu`, `imu_torso`: quaternion wxyz, gyroscope, accelerometer.
pub const IMU_DIM: usize = 10;
/// `motors`: positions, velocities, applied torques.
pub const MOTORS_DIM: usize = 3 * NUM_JOINTS;
pub const BASE_LIN_VEL_DIM: usize = 3;
/// `motion_command`: reference joint positions, then velocities.
pub const MOTION_COMMAND_DIM: usize = 2 * NUM_JOINTS;
pub const MOTION_ANCHOR_POS_DIM: usize = 3;
pub const MOTION_ANCHOR_ORI_DIM: usize = 6;
pub const MOTION_ANCHOR_POSE_DIM: usize = 7;

/// The group of future reference poses (a reference `qpos` per frame), sent when a benchmark's
/// `reference_horizon` H > 0; H frames.
pub const REFERENCE_GROUP: &str = "reference";
/// Values per frame of [`REFERENCE_GROUP`].
pub const REFERENCE_FRAME_SIZE: usize = QPOS_WIDTH;
/// The group of future reference observation rows (BFM-Zero's goal input), sent when a
/// benchmark's `reference_goal_horizon` H > 0; H rows.
pub const REFERENCE_GOAL_GROUP: &str = "reference_goal";
/// Values per row of [`REFERENCE_GOAL_GROUP`]: the reference's `state`, then its `privileged_state`.
pub const REFERENCE_GOAL_ROW: usize = STATE_DIM + PRIVILEGED_STATE_DIM;

/// An observation group a benchmark may grant (`[observations] groups`), besides the two
/// reference groups whose size follows the benchmark's horizons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    State,
    PrivilegedState,
    LastAction,
    HistoryActor,
    Imu,
    ImuTorso,
    Motors,
    BaseLinVel,
    MotionCommand,
    MotionAnchorPosB,
    MotionAnchorOriB,
    MotionAnchorPoseW,
}

/// What produces a group's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The tracking environment's BFM-Zero observation terms (noise from DR level 2 on).
    BfmZero,
    /// The robot's own interface (unitree_sdk2's LowState, the pelvis velocity of a state
    /// estimator), read from the simulator; no synthetic noise.
    Robot,
    /// The tracking command in BeyondMimic's and mjlab's convention, from the reference at the
    /// command time (and the robot's anchor for the relative terms).
    Command,
}

/// One row of [`GROUPS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupInfo {
    pub group: Group,
    /// The name in benchmark files and the protocol (BeyondMimic / mjlab term names for the
    /// command groups).
    pub name: &'static str,
    /// Values per episode and observation (f32).
    pub size: usize,
    pub source: Source,
    /// One line: what the values are.
    pub summary: &'static str,
}

/// Every group a benchmark may grant, in the order docs/protocol.md §5 lists them.
pub const GROUPS: [GroupInfo; 12] = [
    GroupInfo {
        group: Group::State,
        name: "state",
        size: STATE_DIM,
        source: Source::BfmZero,
        summary: "joint positions relative to the default pose, joint velocities, projected gravity, body-frame root angular velocity × 0.25",
    },
    GroupInfo {
        group: Group::PrivilegedState,
        name: "privileged_state",
        size: PRIVILEGED_STATE_DIM,
        source: Source::BfmZero,
        summary: "root height, body positions, rotations and velocities in the root's heading frame",
    },
    GroupInfo {
        group: Group::LastAction,
        name: "last_action",
        size: LAST_ACTION_DIM,
        source: Source::BfmZero,
        summary: "clip(5·a, −5, 5) of the action that produced this observation",
    },
    GroupInfo {
        group: Group::HistoryActor,
        name: "history_actor",
        size: HISTORY_ACTOR_DIM,
        source: Source::BfmZero,
        summary: "the 4 previous control steps: actions, root angular velocity, joint positions and velocities, projected gravity",
    },
    GroupInfo {
        group: Group::Imu,
        name: "imu",
        size: IMU_DIM,
        source: Source::Robot,
        summary: "pelvis IMU: orientation wxyz (world), gyroscope (rad/s), accelerometer (m/s²)",
    },
    GroupInfo {
        group: Group::ImuTorso,
        name: "imu_torso",
        size: IMU_DIM,
        source: Source::Robot,
        summary: "torso IMU: orientation wxyz (world), gyroscope (rad/s), accelerometer (m/s²)",
    },
    GroupInfo {
        group: Group::Motors,
        name: "motors",
        size: MOTORS_DIM,
        source: Source::Robot,
        summary: "joint positions (rad, absolute), velocities (rad/s), applied torques (N·m)",
    },
    GroupInfo {
        group: Group::BaseLinVel,
        name: "base_lin_vel",
        size: BASE_LIN_VEL_DIM,
        source: Source::Robot,
        summary: "pelvis linear velocity in the pelvis frame (m/s)",
    },
    GroupInfo {
        group: Group::MotionCommand,
        name: "motion_command",
        size: MOTION_COMMAND_DIM,
        source: Source::Command,
        summary: "reference joint positions (rad) then velocities (rad/s) at the command time",
    },
    GroupInfo {
        group: Group::MotionAnchorPosB,
        name: "motion_anchor_pos_b",
        size: MOTION_ANCHOR_POS_DIM,
        source: Source::Command,
        summary: "reference anchor position in the robot anchor's frame (m)",
    },
    GroupInfo {
        group: Group::MotionAnchorOriB,
        name: "motion_anchor_ori_b",
        size: MOTION_ANCHOR_ORI_DIM,
        source: Source::Command,
        summary: "first two columns of R_robotᵀ·R_reference of the anchor, row by row",
    },
    GroupInfo {
        group: Group::MotionAnchorPoseW,
        name: "motion_anchor_pose_w",
        size: MOTION_ANCHOR_POSE_DIM,
        source: Source::Command,
        summary: "reference anchor position (m) and orientation wxyz in the world",
    },
];

/// The names of [`GROUPS`], in order.
pub const GROUP_NAMES: [&str; GROUPS.len()] = {
    let mut names = [""; GROUPS.len()];
    let mut i = 0;
    while i < GROUPS.len() {
        names[i] = GROUPS[i].name;
        i += 1;
    }
    names
};

impl Group {
    /// The group named `name` (the reference groups are not in the table).
    pub fn from_name(name: &str) -> Option<Group> {
        GROUPS.iter().find(|g| g.name == name).map(|g| g.group)
    }

    pub fn info(self) -> &'static GroupInfo {
        GROUPS
            .iter()
            .find(|g| g.group == self)
            .expect("every group has a row in GROUPS (a unit test checks)")
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn size(self) -> usize {
        self.info().size
    }

    pub fn source(self) -> Source {
        self.info().source
    }

    /// Whether the group reads the IMU accelerometers (the model is compiled with them).
    pub fn reads_accelerometers(self) -> bool {
        matches!(self, Group::Imu | Group::ImuTorso)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_has_one_row_and_a_unique_name() {
        for (i, row) in GROUPS.iter().enumerate() {
            assert_eq!(Group::from_name(row.name), Some(row.group));
            assert_eq!(row.group.info(), row, "{}", row.name);
            assert_eq!(
                GROUPS.iter().filter(|r| r.group == row.group).count(),
                1,
                "{}",
                row.name
            );
            assert_eq!(GROUP_NAMES[i], row.name);
        }
        assert_eq!(Group::from_name(REFERENCE_GROUP), None);
        assert_eq!(Group::from_name(REFERENCE_GOAL_GROUP), None);
        assert_eq!(
            (HISTORY_ACTOR_DIM, REFERENCE_GOAL_ROW, REFERENCE_FRAME_SIZE),
            (372, 527, 36)
        );
        assert_eq!(BODY_NAMES[15], "torso_link");
    }
}
