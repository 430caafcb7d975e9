//! The arena's scoring of mjlab's tracking metrics (`arena_runner::episode::score_trajectory`,
//! `arena_bench::metrics::mjlab`) against mjlab 1.6.0's own functions
//! (`benchmarks/oracle/mjlab_metrics_oracle.py` runs its `compute_*` metrics, `bad_*`
//! terminations and `update_relative_body_poses` on the same recorded episodes): close tracking
//! (the reference with every joint a little off), the same made to drift (a growing rigid yaw
//! and horizontal offset of the whole robot, as a policy without world position drifts), a
//! robot that sinks by stages, and two simulated ones: a collapse and the open-loop replay,
//! which falls. The largest differences are printed.
//!
//! Here because arena-ppo trains against the same termination definition. Needs Python with
//! torch (`make deps-torch`) and mjlab's unpacked wheel (`scripts/bootstrap-mjlab.sh`); without
//! them the test prints why and skips, unless ARENA_REQUIRE_TORCH_ORACLE=1 (`make test`).

use arena_bench::metrics::mjlab::{MJLAB_METRICS, TRACKED_BODIES};
use arena_bench::metrics::{MetricConfig, NUM_JOINTS};
use arena_runner::episode::score_trajectory;
use arena_sim::env::{EpisodeAssignment, TrackingEnv, TrackingEnvConfig, Trajectory};
use arena_sim::handler::{NQ, NV};
use arena_sim::kinematics::Kinematics;
use arena_sim::motion::MotionLibrary;
use arena_sim::observation::STATE_DIM;
use arena_sim::policy::{Policy, ReplayPolicy};
use arena_sim::robot::NUM_BODIES_EXT;
use arena_sim::{CONTROL_DT, RobotConfig};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Runs `steps` control steps of `motion` from `start_s` with `policy`, recording.
fn record(
    library: &Arc<MotionLibrary>,
    motion: &str,
    start_s: f64,
    steps: usize,
    policy: &mut dyn Policy,
) -> Trajectory {
    let index = library
        .motions
        .iter()
        .position(|m| m.name == motion)
        .unwrap_or_else(|| panic!("no built-in motion {motion}"));
    let mut env = TrackingEnv::new(
        TrackingEnvConfig {
            threads: 1,
            ..Default::default()
        },
        library.clone(),
    )
    .unwrap();
    let assignment = EpisodeAssignment {
        motion: index,
        start_time: start_s,
        seed: 7,
        dr_level: Default::default(),
    };
    env.reset(&[(0, assignment)]).unwrap();
    let mut actions = vec![0.0f32; NUM_JOINTS];
    for _ in 0..steps {
        if env.infos()[0].status != arena_sim::env::EpisodeStatus::Running {
            break;
        }
        policy.act(&env, &mut actions);
        env.step(&actions).unwrap();
    }
    env.stop(0);
    env.take_trajectory(0)
}

/// Sends every joint to the end of its action range: the robot folds and falls.
struct Collapse;

impl Policy for Collapse {
    fn act(&mut self, _env: &TrackingEnv, actions: &mut [f32]) {
        for (j, a) in actions.iter_mut().enumerate() {
            *a = if j % 2 == 0 { 1.0 } else { -1.0 };
        }
    }
}

fn quat_mul(a: &[f64], b: &[f64]) -> [f64; 4] {
    arena_bench::metrics::mjlab::quat_mul(&[a[0], a[1], a[2], a[3]], &[b[0], b[1], b[2], b[3]])
}

/// The whole robot turned by `yaw(k)` about the world z axis through the origin and moved by
/// `shift(k)`, row by row: a drift of its world pose with the same motion.
fn drift(t: &Trajectory, yaw: impl Fn(usize) -> f64, shift: impl Fn(usize) -> [f64; 2]) -> Trajectory {
    let mut out = t.clone();
    for k in 0..t.len() {
        let (a, [dx, dy]) = (yaw(k), shift(k));
        let q = [(a / 2.0).cos(), 0.0, 0.0, (a / 2.0).sin()];
        let (c, s) = (a.cos(), a.sin());
        let move_point = |p: &mut [f64]| {
            let (x, y) = (p[0], p[1]);
            p[0] = c * x - s * y + dx;
            p[1] = s * x + c * y + dy;
        };
        move_point(&mut out.rows.qpos[k * NQ..k * NQ + 3]);
        let root = quat_mul(&q, &t.rows.qpos[k * NQ + 3..k * NQ + 7]);
        out.rows.qpos[k * NQ + 3..k * NQ + 7].copy_from_slice(&root);
        for b in 0..NUM_BODIES_EXT {
            let i = k * 3 * NUM_BODIES_EXT + 3 * b;
            move_point(&mut out.rows.body_pos[i..i + 3]);
        }
    }
    out
}

/// A close tracker of the reference that `t` recorded: each row the reference pose with every
/// joint a few centiradians off (and its joint velocities off by a few tenths), body positions
/// by forward kinematics of that pose. (The open-loop replay falls within a second, so clean
/// tracking is built from the reference itself.)
fn close_tracker(t: &Trajectory, kin: &mut Kinematics) -> Trajectory {
    let mut out = t.clone();
    let w = 3 * NUM_BODIES_EXT;
    for k in 0..t.len() {
        let qpos = &mut out.rows.qpos[k * NQ..(k + 1) * NQ];
        qpos.copy_from_slice(&t.rows.ref_qpos[k * NQ..(k + 1) * NQ]);
        for j in 0..NUM_JOINTS {
            qpos[7 + j] += 0.03 * (0.37 * (k + 3 * j) as f64).sin();
        }
        let poses = kin.body_poses(qpos);
        out.rows.body_pos[k * w..(k + 1) * w].copy_from_slice(poses.pos.as_flattened());
        for j in 0..NUM_JOINTS {
            out.rows.qvel[k * NV + 6 + j] =
                t.rows.ref_state[k * STATE_DIM + NUM_JOINTS + j] + 0.3 * (0.21 * (2 * k + j) as f64).cos();
        }
    }
    out
}

/// One episode as the oracle reads it: the 14 tracked bodies' poses (orientations by forward
/// kinematics, as the arena's scoring gets them), the robot's joint velocities, the clip's 50 Hz
/// joint positions with the episode's first frame (the oracle takes the reference's velocities
/// from them as mjlab's `csv_to_npz.py` does), times and the arena's values.
fn exchange(
    name: &str,
    t: &Trajectory,
    library: &MotionLibrary,
    kin: &mut Kinematics,
    arena: &serde_json::Value,
) -> serde_json::Value {
    let w = 3 * NUM_BODIES_EXT;
    let bodies = |pos: &[f64], qpos: &[f64], kin: &mut Kinematics| {
        let mut p = Vec::new();
        let mut q = Vec::new();
        for k in 0..t.len() {
            let poses = kin.body_poses(&qpos[k * NQ..(k + 1) * NQ]);
            p.push(
                TRACKED_BODIES
                    .map(|b| pos[k * w + 3 * b..k * w + 3 * b + 3].to_vec())
                    .to_vec(),
            );
            q.push(TRACKED_BODIES.map(|b| poses.rot[b].to_vec()).to_vec());
        }
        (p, q)
    };
    let (robot_pos, robot_quat) = bodies(&t.rows.body_pos, &t.rows.qpos, kin);
    let (ref_pos, ref_quat) = bodies(&t.rows.ref_body_pos, &t.rows.ref_qpos, kin);
    let robot_vel: Vec<Vec<f64>> = (0..t.len())
        .map(|k| t.rows.qvel[k * NV + 6..(k + 1) * NV].to_vec())
        .collect();
    let motion = &library.motions[t.motion];
    assert_eq!(
        motion.fps,
        1.0 / CONTROL_DT,
        "the library's clips are at the control rate"
    );
    let clip_joint_pos: Vec<Vec<f64>> = (0..motion.num_frames)
        .map(|f| motion.qpos[f * NQ + 7..(f + 1) * NQ].to_vec())
        .collect();
    let first_frame = (t.start_time * motion.fps).round() as usize;
    assert!(
        (first_frame as f64 / motion.fps - t.start_time).abs() < 1e-12,
        "an episode starts on a frame"
    );
    json!({
        "name": name,
        "times": t.rows.times,
        "robot_body_pos_w": robot_pos,
        "robot_body_quat_w": robot_quat,
        "body_pos_w": ref_pos,
        "body_quat_w": ref_quat,
        "robot_joint_vel": robot_vel,
        "clip_joint_pos": clip_joint_pos,
        "clip_first_frame": first_frame,
        "clip_fps": motion.fps,
        "arena": arena,
    })
}

#[test]
fn mjlab_metrics_match_mjlabs_own_functions() {
    let Some((python, pythonpath)) = arena_torch::python::oracle_python_or_skip(&repo_root()) else {
        return;
    };
    let mjlab = repo_root().join("third_party/mjlab-1.6.0");
    if !mjlab.join("mjlab").is_dir() {
        let why = format!("{} is missing (scripts/bootstrap-mjlab.sh fetches it)", mjlab.display());
        assert!(std::env::var("ARENA_REQUIRE_TORCH_ORACLE").is_err(), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let robot = RobotConfig::default();
    let library = Arc::new(MotionLibrary::from_clips(&MotionLibrary::builtin_clips(&robot).unwrap(), &robot).unwrap());
    let steps = (3.0 / CONTROL_DT) as usize;
    let mut kin = Kinematics::new(&robot).unwrap();
    let wave = record(&library, "arm_wave", 0.0, steps, &mut ReplayPolicy);
    let stepping = record(&library, "step_in_place", 0.5, steps, &mut ReplayPolicy);
    let clean_wave = close_tracker(&wave, &mut kin);
    let clean_steps = close_tracker(&stepping, &mut kin);
    let fall = record(&library, "squat", 0.0, steps, &mut Collapse);
    // Drift: 0.3 rad of yaw and 0.6 m sideways over three seconds, on the close tracker.
    let drifting = drift(
        &clean_steps,
        |k| 0.1 * k as f64 * CONTROL_DT,
        |k| [0.05 * k as f64 * CONTROL_DT, 0.2 * k as f64 * CONTROL_DT],
    );
    // Sinking: the robot lowered 5 cm more every 10 rows, so a height termination fires late.
    let mut sinking = clean_wave.clone();
    for k in 0..sinking.len() {
        let dz = 0.05 * (k / 10) as f64;
        sinking.rows.qpos[k * NQ + 2] -= dz;
        for b in 0..NUM_BODIES_EXT {
            sinking.rows.body_pos[k * 3 * NUM_BODIES_EXT + 3 * b + 2] -= dz;
        }
    }
    let names: Vec<String> = MJLAB_METRICS.iter().map(|s| s.to_string()).collect();
    let config = MetricConfig::default();
    let mut episodes = Vec::new();
    let mut terminated = Vec::new();
    for (name, t) in [
        ("clean arm_wave", &clean_wave),
        ("clean step_in_place", &clean_steps),
        ("drifting step_in_place", &drifting),
        ("collapse on squat", &fall),
        ("sinking arm_wave", &sinking),
        ("open-loop replay", &stepping),
    ] {
        let values = score_trajectory(&t.rows, &names, &config).unwrap();
        terminated.push((name, values["mjlab_success"] == 0.0));
        episodes.push(exchange(name, t, &library, &mut kin, &json!(values)));
    }
    // The cases are what they say: the clean and drifting replays succeed, the others do not.
    assert_eq!(
        terminated,
        [
            ("clean arm_wave", false),
            ("clean step_in_place", false),
            ("drifting step_in_place", false),
            ("collapse on squat", true),
            ("sinking arm_wave", true),
            ("open-loop replay", true),
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("episodes.json");
    std::fs::write(&input, serde_json::to_string(&json!({ "episodes": episodes })).unwrap()).unwrap();
    let report = dir.path().join("report.json");
    let out = Command::new(&python)
        .arg(repo_root().join("benchmarks/oracle/mjlab_metrics_oracle.py"))
        .arg(&input)
        .arg("--mjlab")
        .arg(&mjlab)
        .args(["--tol", "1e-9", "--report"])
        .arg(&report)
        .env("PYTHONPATH", &pythonpath)
        .output()
        .expect("run the mjlab oracle");
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the arena and mjlab 1.6.0 disagree (table above)");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    assert_eq!(report["episodes"], 6);
}
