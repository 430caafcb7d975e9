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
