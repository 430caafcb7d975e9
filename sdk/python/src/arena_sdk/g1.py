"""The Unitree G1 (29 DOF) as the arena presents it: its joint order and the robot-interface
observation groups (docs/protocol.md §5). Plain data, shared by the policy runner and by agents
that read those groups themselves. The server's table is the Rust crate `arena-g1`;
`runner/tests/observation_groups.rs` checks that these agree with it."""

from __future__ import annotations

#: The arena's joint order: actions, joint targets, gains and the joint parts of every group.
JOINT_NAMES: tuple[str, ...] = (
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
)
NUM_JOINTS = len(JOINT_NAMES)

#: The body the `motion_anchor_*` groups are relative to unless the benchmark names another
#: (`EpisodeSpec.anchor_body`; BeyondMimic's and holosoma's default anchor).
ANCHOR_BODY = "torso_link"

#: The action mode in which an action is 29 absolute joint position targets (rad).
JOINT_POSITION_MODE = "joint_position"

#: Robot-interface groups and their sizes. Joint parts are in the G1 order above, float32.
#: imu / imu_torso: orientation quaternion wxyz (world), gyroscope (rad/s, body frame),
#: accelerometer (m/s², body frame); motors: positions, velocities, applied torques;
#: motion_command: reference joint positions then velocities.
ROBOT_GROUPS: dict[str, int] = {
    "imu": 10,
    "imu_torso": 10,
    "motors": 3 * NUM_JOINTS,
    "base_lin_vel": 3,
    "motion_command": 2 * NUM_JOINTS,
    "motion_anchor_pos_b": 3,
    "motion_anchor_ori_b": 6,
    "motion_anchor_pose_w": 7,
}
