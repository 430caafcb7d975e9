//! The robot-interface groups and the joint-position torque law against an independent
//! computation in MuJoCo's Python bindings (`python/check_robot_interface.py`): a recorded
//! episode of `g1-smoke-robot` with the agent's own gains and feed-forward torques is re-run
//! there from its first state with the PD law written from the protocol's definition, and
//! every group of every step is recomputed from MuJoCo (xquat, mj_objectVelocity, the
//! accelerometer site sensor, FK of the reference).

use arena_bench::spec::{BenchmarkSpec, find_benchmark, shipped_dir};
use arena_data::NUM_JOINTS;
use arena_runner::episode::{self, ReferenceScratch};
use arena_runner::gains::{DeclaredGains, resolve};
use arena_sim::CONTROL_DT;
use arena_sim::env::{EpisodeAssignment, TrackingEnv};
use arena_sim::motion::{MotionLibrary, MotionState};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

const STEPS: usize = 30;

fn spec() -> BenchmarkSpec {
    let names = arena_bench::metrics::metric_names();
    find_benchmark("g1-smoke-robot", &shipped_dir(), &names).unwrap().1
}

fn python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if !venv.exists() {
        return None;
    }
    let ok = Command::new(&venv)
        .args(["-c", "import mujoco, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(venv)
}

#[test]
fn robot_groups_and_torque_law_match_an_independent_mujoco_computation() {
    let Some(python) = python() else {
        eprintln!("skipped: .venv with mujoco and numpy missing (run `make deps`)");
        return;
    };
    let spec = spec();
    // Gains of the agent's own (within the benchmark's bounds, equal to no preset).
    let armature = arena_sim::RobotConfig::new(arena_sim::GainSet::Armature);
    let declared = DeclaredGains {
        kp: armature.kp.iter().map(|k| k * 1.3).collect(),
        kd: armature.kd.iter().map(|k| k * 0.8).collect(),
        preset: String::new(),
    };
    let gains = resolve(&spec.action, &declared).unwrap();
    assert_eq!(gains.preset, None);
    let mut config = episode::env_config(&spec, Some(&gains), 1, 1);
    config.record = true;
    let robot = config.robot.clone();
    let clips = episode::benchmark_clips(&spec, Path::new("."), &robot).unwrap();
    let library = Arc::new(MotionLibrary::from_clips(&clips, &robot).unwrap());
    let motion = library.motions.iter().position(|m| m.name == "squat").unwrap();
    let mut env = TrackingEnv::new(config, library.clone()).unwrap();
    env.set_torque_logging(true).unwrap();
    env.reset(&[(
        0,
        EpisodeAssignment {
            motion,
            start_time: 0.0,
            seed: 0,
            dr_level: arena_sim::dr::DrLevel::L0,
        },
    )])
    .unwrap();
    let plan = episode::ObservationPlan::for_spec(&spec);
    let layout = plan.layout();
    let mut scratch = ReferenceScratch::default();
    let mut rows = Vec::new();
    let mut commands = Vec::new();
    let mut references = Vec::new();
    let mut row = vec![0.0f32; layout.size()];
    let mut state = MotionState::default();
    for step in 0..=STEPS {
        plan.fill(&env, 0, &mut scratch, &mut row);
        rows.push(row.clone());
        // The command is the reference of the next control step (the frame the action must reach).
        let t = (env.infos()[0].step + 1) as f64 * CONTROL_DT;
        library.motions[motion].state_at(t, &mut state);
        references.push((state.qpos.to_vec(), state.command_joint_vel.to_vec()));
        if step == STEPS {
            break;
        }
        // Targets: that reference plus a wobble; feed-forward on a few joints.
        let mut command = vec![0.0f32; 2 * NUM_JOINTS];
        for j in 0..NUM_JOINTS {
            command[j] = (state.qpos[7 + j] + 0.05 * ((step + j) as f64 * 0.7).sin()) as f32;
        }
        for j in [3, 9, 15, 18] {
            command[NUM_JOINTS + j] = (3.0 * (step as f64 * 0.3).cos()) as f32;
        }
        env.step(&command).unwrap();
        assert!(
            !env.infos()[0].status.is_done(),
            "step {step}: {:?}",
            env.infos()[0].status
        );
        commands.push(command);
    }
    let torques = env.handler().torque_log(0).unwrap().to_vec();
    let trajectory = env.trajectory(0);
    let dump = serde_json::json!({
        "model_xml": robot.mjcf(),
        "kp": robot.kp.to_vec(),
        "kd": robot.kd.to_vec(),
        "effort": robot.effort.to_vec(),
        "qpos0": trajectory.rows.qpos[..arena_sim::handler::NQ].to_vec(),
        "qvel0": trajectory.rows.qvel[..arena_sim::handler::NV].to_vec(),
        "commands": commands,
        "torque_log": torques,
        "groups": layout.groups().map(|(n, r)| (n.to_string(), r.start, r.end)).collect::<Vec<_>>(),
        "rows": rows,
        "reference_qpos": references.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        "reference_joint_vel": references.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
        "anchor_body": spec.observations.anchor_body,
    });
    let dir = std::env::temp_dir().join(format!("arena-robot-interface-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("episode.json");
    std::fs::write(&path, dump.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/check_robot_interface.py");
    let out = Command::new(python).arg(&script).arg(&path).output().unwrap();
    if std::env::var_os("KEEP_DUMP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the independent check failed:\n{report}");
    assert!(report.contains("all groups match"), "{report}");
}
