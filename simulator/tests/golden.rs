//! Golden rollout: 50 replay steps of the built-in squat at DR level 2 must reproduce the
//! stored trajectory (qpos per control step) to 1e-12. This pins the whole control, DR and
//! recording path against unintended change. After an intended change, regenerate with
//! `ARENA_BLESS=1 cargo test --release -p arena-sim --test golden` and review the diff.

use arena_data::NUM_JOINTS;
use arena_sim::RobotConfig;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, TrackingEnv, TrackingEnvConfig};
use arena_sim::handler::NQ;
use arena_sim::motion::MotionLibrary;
use arena_sim::policy::{Policy, ReplayPolicy};
use std::path::PathBuf;
use std::sync::Arc;

#[test]
fn squat_replay_matches_golden_trajectory() {
    let robot = RobotConfig::default();
    let lib = Arc::new(MotionLibrary::from_clips(&MotionLibrary::builtin_clips(&robot).unwrap(), &robot).unwrap());
    let mut env = TrackingEnv::new(TrackingEnvConfig::default(), lib).unwrap();
    let a = EpisodeAssignment {
        motion: 1,
        start_time: 0.0,
        seed: 2024,
        dr_level: DrLevel::L2,
    };
    env.reset(&[(0, a)]).unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = [0.0f32; NUM_JOINTS];
    for _ in 0..50 {
        policy.act(&env, &mut actions);
        env.step(&actions).unwrap();
    }
    let qpos = &env.trajectory(0).rows.qpos;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/squat_replay_l2.csv");
    if std::env::var_os("ARENA_BLESS").is_some() {
        let text: Vec<String> = qpos
            .chunks(NQ)
            .map(|r| r.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(","))
            .collect();
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
    }
    let golden: Vec<f64> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .flat_map(|l| l.split(',').map(|v| v.parse::<f64>().unwrap()).collect::<Vec<_>>())
        .collect();
    assert_eq!(golden.len(), qpos.len());
    let worst = golden.iter().zip(qpos).map(|(g, q)| (g - q).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-12, "trajectory moved from the golden file by {worst:e}");
}
