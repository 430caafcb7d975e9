//! Every g1-moves clip loads, inspects and builds a motion (FK, velocities).

mod common;

use arena_sim::RobotConfig;
use arena_sim::kinematics::Kinematics;
use arena_sim::motion::{Motion, inspect};

#[test]
fn every_g1_moves_clip_loads_and_inspects() {
    let Some(dir) = common::shared("motions/g1-moves") else {
        return;
    };
    let clips = arena_data::read_clip_dir(&dir, 60.0).unwrap();
    assert_eq!(clips.len(), 32);
    let mut kin = Kinematics::new(&RobotConfig::default()).unwrap();
    let mut total = 0.0;
    for clip in &clips {
        let report = inspect(clip, &kin);
        assert!(report.frames >= 2 && report.duration_s > 7.0, "{}", clip.name);
        assert!(
            report.root_height_min > 0.3 && report.root_height_max < 1.2,
            "{}",
            clip.name
        );
        assert!(report.problems.is_empty(), "{}: {:?}", clip.name, report.problems);
        let m = Motion::from_clip(clip, &mut kin).unwrap();
        assert!(
            m.body_vel
                .iter()
                .chain(&m.body_ang_vel)
                .chain(&m.dof_vel)
                .all(|v| v.is_finite())
        );
        total += clip.duration_s();
        assert!(["dance", "bonus"].contains(&clip.category.as_str()));
    }
    assert!(
        (total / 60.0 - 17.7).abs() < 0.1,
        "17.7 minutes in all, got {:.2}",
        total / 60.0
    );
}

/// The recorder builds reference `state` rows from pose_at + velocities_at; they must equal the
/// rows built from the full state_at.
#[test]
fn reference_state_row_from_parts_matches_state_at() {
    use arena_sim::handler::NQ;
    use arena_sim::motion::{MotionLibrary, MotionState};
    use arena_sim::observation::{STATE_DIM, reference_state_row, reference_state_row_from};
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    for m in &library.motions {
        for t in [0.0, 0.013, 0.5, 1.234, m.length_s] {
            let mut s = MotionState::default();
            m.state_at(t, &mut s);
            let mut full = [0.0f32; STATE_DIM];
            reference_state_row(&s, &robot, &mut full);
            let (mut qpos, mut body) = ([0.0; NQ], vec![0.0; 93]);
            m.pose_at(t, &mut qpos, &mut body);
            let (mut dof_vel, mut w) = ([0.0; 29], [0.0; 3]);
            m.velocities_at(t, &mut dof_vel, &mut w);
            let mut parts = [0.0f32; STATE_DIM];
            reference_state_row_from(&qpos, &dof_vel, &w, &robot, &mut parts);
            assert_eq!(full, parts, "{} at t = {t}", m.name);
        }
    }
}

/// The replay policy reads only the reference joints (`joint_pos_at`): the very numbers of
/// `pose_at`'s qpos, at frames, between frames and past either end.
#[test]
fn joint_pos_at_is_pose_at_s_joints() {
    use arena_sim::handler::NQ;
    use arena_sim::motion::MotionLibrary;
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    for m in &library.motions {
        for t in [
            -0.1,
            0.0,
            0.013,
            0.02,
            0.5,
            1.234,
            m.length_s - 0.007,
            m.length_s,
            m.length_s + 1.0,
        ] {
            let (mut qpos, mut body) = ([0.0; NQ], vec![0.0; 93]);
            m.pose_at(t, &mut qpos, &mut body);
            let mut joints = [f64::NAN; 29];
            m.joint_pos_at(t, &mut joints);
            assert_eq!(joints[..], qpos[7..], "{} at t = {t}", m.name);
        }
    }
}

/// The tracking command's groups read `command_at`: the very numbers of `state_at`'s qpos,
/// joint velocities and anchor body, for every body as the anchor, at frames, between frames
/// and past either end.
#[test]
fn command_at_is_state_at_s_command_and_anchor() {
    use arena_sim::motion::{MotionLibrary, MotionState};
    use arena_sim::robot::NUM_BODIES_EXT;
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    for m in &library.motions {
        for t in [-0.1, 0.0, 0.013, 0.5, 1.234, m.length_s - 0.007, m.length_s + 1.0] {
            let mut whole = MotionState::default();
            m.state_at(t, &mut whole);
            for anchor in 0..NUM_BODIES_EXT {
                let mut command = MotionState::default();
                command.qpos.fill(f64::NAN);
                command.command_joint_vel.fill(f64::NAN);
                m.command_at(t, anchor, &mut command);
                let at = format!("{} at t = {t}, anchor {anchor}", m.name);
                assert_eq!(command.qpos, whole.qpos, "{at}");
                assert_eq!(command.command_joint_vel, whole.command_joint_vel, "{at}");
                assert_eq!(command.body_pos[anchor], whole.body_pos[anchor], "{at}");
                assert_eq!(command.body_rot[anchor], whole.body_rot[anchor], "{at}");
            }
        }
    }
}
