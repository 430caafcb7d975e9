//! A policy's default pose (the joint positions its actions are offsets from) against the G1's
//! joint ranges, before any episode runs. The simulator refuses a joint-position target farther
//! than [`TARGET_RANGE_MARGIN`] outside a joint's range (a broken action, not an overshoot), so a
//! default pose beyond it (an export in degrees, a pose in another joint order) would fail every
//! episode at its first step.

use arena_g1::{JOINT_NAMES, NUM_JOINTS};
use arena_sim::RobotConfig;
use arena_sim::env::TARGET_RANGE_MARGIN;
use arena_sim::kinematics::Kinematics;
use std::sync::OnceLock;

/// Each joint's range (rad, G1 order) in the arena's G1 model; `None` if the model does not
/// compile here (then nothing is checked: the episodes would say why).
fn joint_ranges() -> Option<&'static [[f64; 2]; NUM_JOINTS]> {
    static RANGES: OnceLock<Option<[[f64; 2]; NUM_JOINTS]>> = OnceLock::new();
    RANGES
        .get_or_init(|| Kinematics::new(&RobotConfig::default()).ok().map(|k| *k.joint_limits()))
        .as_ref()
}

/// Every joint of `default_g1` (rad, G1 order) the simulator could never command to, each
/// named with its value and the widened range; empty when the pose is usable.
pub fn default_pose_problems(default_g1: &[f64]) -> Vec<String> {
    let Some(ranges) = joint_ranges() else {
        return Vec::new();
    };
    let far: Vec<String> = default_g1
        .iter()
        .zip(ranges)
        .zip(JOINT_NAMES)
        .filter(|((q, [lo, hi]), _)| !(lo - TARGET_RANGE_MARGIN..=hi + TARGET_RANGE_MARGIN).contains(*q))
        .map(|((q, [lo, hi]), name)| format!("{name} {q} rad (range [{lo:.4}, {hi:.4}])"))
        .collect();
    if far.is_empty() {
        return far;
    }
    vec![format!(
        "the default joint positions lie farther than π outside the joints' ranges, so every target \
         would be refused at the first step (radians expected; is the export in degrees or in \
         another joint order?): {}",
        far.join(", ")
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pose_in_degrees_is_refused_naming_the_joints() {
        let stand = [0.0; NUM_JOINTS];
        assert!(default_pose_problems(&stand).is_empty());
        let knee = JOINT_NAMES.iter().position(|n| *n == "left_knee_joint").unwrap();
        let mut degrees = stand;
        degrees[knee] = 0.3_f64.to_degrees();
        let problems = default_pose_problems(&degrees);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("left_knee_joint 17.18"), "{problems:?}");
        assert!(!problems[0].contains("right_knee_joint"), "{problems:?}");
        // Within π of the range is a policy's business, not a broken file.
        let mut near = stand;
        near[knee] = -1.0;
        assert!(default_pose_problems(&near).is_empty());
    }
}
