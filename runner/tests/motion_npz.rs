//! Motions as NPZ: a benchmark's reference exported in the mjlab layout imports back within
//! 1e-6 (float32 storage), and files written independently (MuJoCo's Python bindings: FK of
//! joint angles chosen there) import in the mjlab layout and holosoma's variant, while a file
//! whose unnamed joints are in another order is refused with the reason.

use arena_data::{NUM_COLUMNS, read_npz_motion, write_npz_motion};
use arena_sim::CONTROL_DT;
use arena_sim::RobotConfig;
use arena_sim::motion::{MotionLibrary, MotionState};
use std::path::{Path, PathBuf};
use std::process::Command;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("arena-npz-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn export_then_import_reproduces_the_reference() {
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    let mut kin = arena_sim::kinematics::Kinematics::new(&robot).unwrap();
    let dir = temp_dir("roundtrip");
    let (mut a, mut b) = (MotionState::default(), MotionState::default());
    for motion in &library.motions {
        let path = dir.join(format!("{}__{}.npz", motion.category, motion.name));
        write_npz_motion(&path, &motion.to_npz(&mut kin)).unwrap();
        let clip = read_npz_motion(&path).unwrap();
        assert_eq!((clip.name.as_str(), clip.fps), (motion.name.as_str(), 50.0));
        // The import passes the forward-kinematics check of its stored bodies.
        let back = MotionLibrary::from_clips(&[clip], &robot).unwrap();
        let again = &back.motions[0];
        assert_eq!(again.num_frames, motion.num_frames);
        let mut worst = 0.0f64;
        for k in 0..motion.num_frames {
            let t = k as f64 * CONTROL_DT;
            motion.state_at(t, &mut a);
            again.state_at(t, &mut b);
            for (x, y) in a.qpos.iter().zip(&b.qpos) {
                worst = worst.max((x - y).abs());
            }
            for (p, q) in a.body_pos.iter().zip(&b.body_pos) {
                for c in 0..3 {
                    worst = worst.max((p[c] - q[c]).abs());
                }
            }
        }
        assert!(
            worst < 1e-6,
            "{}: reference differs by {worst:e} after export and import",
            motion.name
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The export's velocities are those mjlab's `csv_to_npz.py` writes: `joint_vel` is
/// `torch.gradient` of `joint_pos` at 50 fps (central inside, one-sided at the ends), and the
/// pelvis's link velocities are the root's: the gradient of its position and the rotation from
/// the frame before to the one after (the checks `csv_to_npz.py` itself asserts).
#[test]
fn the_export_has_mjlabs_velocities() {
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    let mut kin = arena_sim::kinematics::Kinematics::new(&robot).unwrap();
    let motion = library.motions.iter().find(|m| m.name == "arm_wave").unwrap();
    let npz = motion.to_npz(&mut kin);
    let (t, j, dt) = (npz.frames, 29, CONTROL_DT);
    let q = |k: usize, i: usize| npz.joint_pos[k * j + i];
    let mut worst = 0.0f64;
    for k in 0..t {
        let (a, b) = (k.saturating_sub(1), (k + 1).min(t - 1));
        for i in 0..j {
            let gradient = (q(b, i) - q(a, i)) / ((b - a) as f64 * dt);
            worst = worst.max((npz.joint_vel[k * j + i] - gradient).abs());
        }
    }
    assert!(
        worst < 1e-9,
        "joint_vel differs from torch.gradient of joint_pos by {worst:e} rad/s"
    );
    // The pelvis (body 0): its link velocity is the root's, by the same differences.
    let nb = npz.body_names.len();
    let p = |k: usize, c: usize| npz.body_pos_w[(k * nb) * 3 + c];
    let quat = |k: usize| -> [f64; 4] { npz.body_quat_w[(k * nb) * 4..(k * nb) * 4 + 4].try_into().unwrap() };
    for k in [0, 1, t / 2, t - 1] {
        let (a, b) = (k.saturating_sub(1), (k + 1).min(t - 1));
        for c in 0..3 {
            let gradient = (p(b, c) - p(a, c)) / ((b - a) as f64 * dt);
            let v = npz.body_lin_vel_w[(k * nb) * 3 + c];
            assert!(
                (v - gradient).abs() < 1e-9,
                "frame {k}: pelvis linear velocity {v} vs {gradient}"
            );
        }
        let m = k.clamp(1, t - 2);
        let turn = arena_sim::math::quat_to_rotvec(&arena_sim::math::quat_mul(
            &quat(m + 1),
            &arena_sim::math::quat_conj(&quat(m - 1)),
        ));
        for c in 0..3 {
            let w = npz.body_ang_vel_w[(k * nb) * 3 + c];
            assert!(
                (w - turn[c] / (2.0 * dt)).abs() < 1e-9,
                "frame {k}: pelvis angular velocity {w}"
            );
        }
    }
    // The motion library's own velocities (BFM-Zero's forward difference) are left as they are.
    let forward = (q(1, 18) - q(0, 18)) / dt;
    assert!((motion.dof_vel[18] - forward).abs() < 1e-9);
}

fn python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let ok = venv.exists()
        && Command::new(&venv)
            .args(["-c", "import mujoco, numpy"])
            .status()
            .is_ok_and(|s| s.success());
    ok.then_some(venv)
}

#[test]
fn files_written_by_an_independent_script_import() {
    let Some(python) = python() else {
        eprintln!("skipped: .venv with mujoco and numpy missing (run `make deps`)");
        return;
    };
    let robot = RobotConfig::default();
    let dir = temp_dir("independent");
    let model = dir.join("g1.xml");
    std::fs::write(&model, robot.mjcf()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/write_npz_motions.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(&model)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("truth.json")).unwrap()).unwrap();
    let truth: Vec<f64> = truth["qpos"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
        .collect();
    for name in ["mjlab", "holosoma"] {
        let clip = read_npz_motion(&dir.join(format!("{name}.npz"))).unwrap();
        assert_eq!(
            (clip.fps, clip.num_frames()),
            (30.0, truth.len() / NUM_COLUMNS),
            "{name}"
        );
        let worst = clip
            .qpos
            .iter()
            .zip(&truth)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        // float32 storage of angles up to a few radians.
        assert!(worst < 1e-6, "{name}: qpos differs by {worst:e}");
        MotionLibrary::from_clips(&[clip], &robot).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Unnamed joints in another order read, then fail the forward-kinematics check.
    let clip = read_npz_motion(&dir.join("isaac_order.npz")).unwrap();
    let err = MotionLibrary::from_clips(&[clip], &robot).unwrap_err().to_string();
    assert!(
        err.contains("does not reproduce body_pos_w") && err.contains("another order"),
        "{err}"
    );
    // Files whose joint order cannot be established are refused when read.
    let arrays = arena_data::npz::read_npz(&dir.join("mjlab.npz")).unwrap();
    let mut cut = Vec::new();
    for (key, array) in &arrays {
        let mut array = array.clone();
        if key == "joint_pos" {
            let t = array.shape[0];
            let values = array.numbers().unwrap();
            let kept: Vec<f64> = values.chunks(29).flat_map(|row| row[..28].to_vec()).collect();
            array = arena_data::npz::NpyArray::f32(vec![t, 28], kept);
        }
        cut.push((key.as_str(), array));
    }
    let bad = dir.join("cut.npz");
    arena_data::npz::write_npz(&bad, &cut).unwrap();
    let err = read_npz_motion(&bad).unwrap_err().to_string();
    assert!(
        err.contains("joint order cannot be established") && err.contains("28 columns"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A clip the readers take but the simulator cannot play (one frame, from an NPZ: the NPZ reader
/// only refuses none) is refused by `load_benchmark`, what both the server and `arena bench
/// validate --motions-root` load with; before, the validator read the clips only and said "ok".
#[test]
fn load_benchmark_makes_the_servers_checks() {
    use arena_bench::metrics::metric_names;
    use arena_bench::spec::BenchmarkSpec;
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    let mut kin = arena_sim::kinematics::Kinematics::new(&robot).unwrap();
    let mut one = library.motions[1].to_npz(&mut kin);
    let bodies = one.body_names.len();
    one.frames = 1;
    one.joint_pos.truncate(29);
    one.joint_vel.truncate(29);
    one.body_pos_w.truncate(bodies * 3);
    one.body_quat_w.truncate(bodies * 4);
    one.body_lin_vel_w.truncate(bodies * 3);
    one.body_ang_vel_w.truncate(bodies * 3);
    let dir = temp_dir("one-frame");
    write_npz_motion(&dir.join("still__one.npz"), &one).unwrap();
    let smoke = std::fs::read_to_string(arena_bench::spec::shipped_dir().join("g1-smoke.toml")).unwrap();
    let text = smoke.replace("name = \"g1-smoke\"", "name = \"one-frame\"").replace(
        "builtin = [\"stand\", \"squat\", \"arm_wave\", \"torso_twist\", \"weight_shift\", \"step_in_place\"]",
        "dir = \".\"\npattern = \"still__*.npz\"",
    );
    assert_ne!(text, smoke);
    let file = dir.join("one-frame.toml");
    std::fs::write(&file, text).unwrap();
    let spec = BenchmarkSpec::read(&file, &metric_names()).unwrap();
    assert_eq!(
        arena_runner::episode::benchmark_clips(&spec, &dir, &robot)
            .unwrap()
            .len(),
        1
    );
    let e = arena_runner::episode::load_benchmark(&spec, &dir, &robot).unwrap_err();
    assert!(format!("{e:#}").contains("needs at least 2 frames"), "{e:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the NPZ reader takes is checked as the CSV reader checks it: the root's quaternion
/// must be a unit one (a zero one passed the witness and made NaN of every resampled frame),
/// and every body's position must be finite, not only the root's.
#[test]
fn npz_quaternions_and_bodies_are_checked() {
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    let mut kin = arena_sim::kinematics::Kinematics::new(&robot).unwrap();
    let good = library.motions[1].to_npz(&mut kin);
    let pelvis = good.body_names.iter().position(|n| n == "pelvis").unwrap();
    let bodies = good.body_names.len();
    let dir = temp_dir("npz-checks");
    let mut zero = good.clone();
    let q = (3 * bodies + pelvis) * 4;
    zero.body_quat_w[q..q + 4].fill(0.0);
    write_npz_motion(&dir.join("zero.npz"), &zero).unwrap();
    let e = read_npz_motion(&dir.join("zero.npz")).unwrap_err().to_string();
    assert!(e.contains("quaternion of frame 3 has norm 0.000000"), "{e}");
    let mut nan = good.clone();
    let other = (pelvis + 5) % bodies;
    nan.body_pos_w[(2 * bodies + other) * 3] = f64::NAN;
    write_npz_motion(&dir.join("nan.npz"), &nan).unwrap();
    let e = read_npz_motion(&dir.join("nan.npz")).unwrap_err().to_string();
    assert!(e.contains("body_pos_w: frame 2 holds a non-finite value"), "{e}");
    // Quaternions stored (x, y, z, w): named as such, not as another joint order.
    let mut xyzw = good.clone();
    for q in xyzw.body_quat_w.chunks_mut(4) {
        q.rotate_left(1);
    }
    write_npz_motion(&dir.join("xyzw.npz"), &xyzw).unwrap();
    let clip = read_npz_motion(&dir.join("xyzw.npz")).unwrap();
    let e = MotionLibrary::from_clips(&[clip], &robot).unwrap_err().to_string();
    assert!(e.contains("quaternions in (x, y, z, w) order"), "{e}");
    // A frame rate its own velocities contradict: 50 fps frames declared at 25.
    let moving = (library.motions.iter())
        .map(|m| m.to_npz(&mut kin))
        .max_by(|a, b| {
            let speed = |m: &arena_data::NpzMotionOut| m.joint_vel.iter().map(|v| v * v).sum::<f64>();
            speed(a).total_cmp(&speed(b))
        })
        .unwrap();
    let mut slow = moving.clone();
    slow.fps = 25.0;
    write_npz_motion(&dir.join("slow.npz"), &slow).unwrap();
    let e = read_npz_motion(&dir.join("slow.npz")).unwrap_err().to_string();
    assert!(e.contains("joint_vel is 2.0") && e.contains("(fps 50.0)"), "{e}");
    // Velocities that do not follow the joints (zeros) say nothing about the rate.
    let mut still = slow.clone();
    still.joint_vel.fill(0.0);
    write_npz_motion(&dir.join("still.npz"), &still).unwrap();
    read_npz_motion(&dir.join("still.npz")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
