//! Every reward term, termination and observation of the tracking MDP against an independent
//! computation (`ppo/oracle/check_mdp_terms.py`, numpy, written from docs/ppo-tracker.md §2-5) on
//! states recorded from the arena's simulator: a g1-smoke motion tracked by a random policy in the
//! joint-position mode, so the robot drifts, tilts and falls and the terms take varied values.

use arena_data::NUM_JOINTS;
use arena_ppo::config::{RewardConfig, TerminationConfig};
use arena_ppo::envs::{joint_ranges, perturbed_start};
use arena_ppo::mdp::{self, ACTOR_DIM, CRITIC_DIM, RobotFrame};
use arena_sim::dr::DrLevel;
use arena_sim::env::{ActionMode, EpisodeAssignment, TrackingEnv, TrackingEnvConfig};
use arena_sim::motion::{MotionLibrary, MotionState};
use arena_sim::{CONTROL_DT, GainSet, RobotConfig};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn python() -> Option<PathBuf> {
    let venv = repo_root().join(".venv/bin/python");
    venv.exists().then_some(venv)
}

fn state_json(s: &MotionState) -> serde_json::Value {
    serde_json::json!({
        "body_pos": s.body_pos, "body_rot": s.body_rot, "body_vel": s.body_vel,
        "body_ang_vel": s.body_ang_vel, "qpos": s.qpos.to_vec(), "dof_vel": s.dof_vel.to_vec(),
        "command_joint_vel": s.command_joint_vel.to_vec(),
    })
}

#[test]
fn terms_match_an_independent_computation() {
    let Some(python) = python() else {
        if std::env::var("ARENA_REQUIRE_TORCH_ORACLE").is_ok() {
            panic!(".venv/bin/python is missing (make deps installs it)");
        }
        eprintln!("skipped: .venv/bin/python is missing (run `make test`, which installs it)");
        return;
    };
    let robot = RobotConfig::new(GainSet::Armature);
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = Arc::new(MotionLibrary::from_clips(&clips, &robot).unwrap());
    let mut env = TrackingEnv::new(
        TrackingEnvConfig {
            robot: robot.clone(),
            num_envs: 1,
            threads: 1,
            record: false,
            action_mode: ActionMode::JointPosition,
            ..Default::default()
        },
        library.clone(),
    )
    .unwrap();
    let soft = mdp::soft_limits(&joint_ranges().unwrap());
    let motion = library.motions.iter().position(|m| m.name == "squat").unwrap_or(0);
    let start = 0.4;
    env.reset(&[(
        0,
        EpisodeAssignment {
            motion,
            start_time: start,
            seed: 3,
            dr_level: DrLevel::L0,
        },
    )])
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut reference = MotionState::default();
    library.motions[motion].state_at(start, &mut reference);
    let (qpos, qvel) = perturbed_start(&reference, (1.0, 1.0, 1.0), &soft, &mut rng);
    env.set_start_states(&[(0, qpos, qvel)]).unwrap();
    let rewards = RewardConfig::default();
    let terminations = TerminationConfig::default();
    let default_pose = mdp::POLICY_DEFAULT_POSE;
    let mut last = [0.0f32; NUM_JOINTS];
    let mut frame = RobotFrame::read(env.handler(), 0);
    let mut records = Vec::new();
    let mut fired = [false; 3];
    for step in 0..60 {
        // Observation at step k: the reference the action must reach (t + 0.02).
        let t_next = start + (step + 1) as f64 * CONTROL_DT;
        library.motions[motion].state_at(t_next, &mut reference);
        let mut actor = [0.0f32; ACTOR_DIM];
        let mut critic = [0.0f32; CRITIC_DIM];
        mdp::actor_observation(&frame, &reference, &default_pose, &last, &mut actor);
        mdp::critic_observation(&frame, &reference, &default_pose, &last, &mut critic);
        let observed = (frame.clone(), reference.clone());
        let align = frame.anchor_pose();
        let action: Vec<f32> = (0..NUM_JOINTS).map(|_| rng.random_range(-1.5..1.5)).collect();
        let mut command = vec![0.0f32; 2 * NUM_JOINTS];
        for j in 0..NUM_JOINTS {
            command[j] = (default_pose[j] + 0.25 * robot.effort[j] / robot.kp[j] * action[j] as f64) as f32;
        }
        env.step(&command).unwrap();
        frame = RobotFrame::read(env.handler(), 0);
        let terms = mdp::reward_terms(&frame, &reference, align, &action, &last, &soft, &rewards);
        let done = mdp::terminations(&frame, &reference, &terminations);
        for k in 0..3 {
            fired[k] |= done.flags[k];
        }
        records.push(serde_json::json!({
            "observed": {"qpos": observed.0.readout.qpos.to_vec(), "qvel": observed.0.readout.qvel.to_vec(),
                         "body_pos": observed.0.readout.body_pos.to_vec(), "body_rot": observed.0.readout.body_rot.to_vec()},
            "observed_reference": state_json(&observed.1),
            "after": {"qpos": frame.readout.qpos.to_vec(), "body_pos": frame.readout.body_pos.to_vec(),
                      "body_rot": frame.readout.body_rot.to_vec(), "body_vel": frame.body_vel.to_vec(),
                      "body_ang_vel": frame.readout.body_ang_vel.to_vec(), "contact_force": frame.contact_force.to_vec()},
            "action": action, "last_action": last.to_vec(),
            "actor": actor.to_vec(), "critic": critic.to_vec(),
            "rewards": terms.values.to_vec(), "reward_total": terms.total(&rewards),
            "terminations": done.flags.to_vec(),
        }));
        last.copy_from_slice(&action);
    }
    assert!(
        fired.iter().any(|f| *f),
        "no termination fired: the recording does not exercise them"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mdp.json");
    let soft_json: Vec<[f64; 2]> = soft.iter().map(|(a, b)| [*a, *b]).collect();
    std::fs::write(
        &path,
        serde_json::json!({
            "records": records, "default_pose": default_pose.to_vec(), "soft_limits": soft_json,
            "tracked_bodies": mdp::TRACKED_BODIES, "end_effectors": mdp::END_EFFECTORS, "anchor": mdp::ANCHOR,
            "rewards": rewards, "terminations": terminations, "dt": CONTROL_DT,
        })
        .to_string(),
    )
    .unwrap();
    let script = repo_root().join("ppo/oracle/check_mdp_terms.py");
    let out = Command::new(python).arg(&script).arg(&path).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "{text}");
}
