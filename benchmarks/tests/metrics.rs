//! Metric formulas on hand-computed cases.

use arena_bench::metrics::{self, Frame, MetricConfig, NUM_BODIES, NUM_JOINTS, STATE_DIM};
use std::collections::BTreeMap;

/// An episode as owned arrays; `frames()` lends them out as metric frames.
#[derive(Default)]
struct Episode {
    sim_joints: Vec<Vec<f64>>,
    ref_joints: Vec<Vec<f64>>,
    sim_bodies: Vec<Vec<f64>>,
    ref_bodies: Vec<Vec<f64>>,
    sim_state: Vec<Vec<f64>>,
    ref_state: Vec<Vec<f64>>,
    sim_quat: Vec<Vec<f64>>,
    ref_quat: Vec<Vec<f64>>,
    sim_vel: Vec<Vec<f64>>,
    ref_vel: Vec<Vec<f64>>,
}

impl Episode {
    /// `t` identical frames at rest: zero joints, bodies on a line, zero state.
    fn still(t: usize) -> Self {
        let bodies: Vec<f64> = (0..NUM_BODIES).flat_map(|b| [0.1 * b as f64, 0.0, 1.0]).collect();
        let mut e = Episode::default();
        for _ in 0..t {
            e.sim_joints.push(vec![0.0; NUM_JOINTS]);
            e.ref_joints.push(vec![0.0; NUM_JOINTS]);
            e.sim_bodies.push(bodies.clone());
            e.ref_bodies.push(bodies.clone());
            e.sim_state.push(vec![0.0; STATE_DIM]);
            e.ref_state.push(vec![0.0; STATE_DIM]);
            let upright: Vec<f64> = (0..NUM_BODIES).flat_map(|_| [1.0, 0.0, 0.0, 0.0]).collect();
            e.sim_quat.push(upright.clone());
            e.ref_quat.push(upright);
            e.sim_vel.push(vec![0.0; NUM_JOINTS]);
            e.ref_vel.push(vec![0.0; NUM_JOINTS]);
        }
        e
    }

    fn frames(&self) -> impl Iterator<Item = Frame<'_>> {
        (0..self.sim_joints.len()).map(|k| Frame {
            time: 0.02 * k as f64,
            sim_joints: &self.sim_joints[k],
            ref_joints: &self.ref_joints[k],
            sim_bodies: &self.sim_bodies[k],
            ref_bodies: &self.ref_bodies[k],
            sim_state: &self.sim_state[k],
            ref_state: &self.ref_state[k],
            sim_body_quat: &self.sim_quat[k],
            ref_body_quat: &self.ref_quat[k],
            sim_joint_vel: &self.sim_vel[k],
            ref_joint_vel: &self.ref_vel[k],
        })
    }

    fn eval(&self, names: &[&str]) -> BTreeMap<String, f64> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        metrics::evaluate(&names, &MetricConfig::default(), self.frames()).unwrap()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn perfect_tracking_scores_perfectly() {
    let e = Episode::still(10);
    let all = metrics::metric_names();
    let v = e.eval(&all);
    for name in all {
        let want = match metrics::metric_info(name).unwrap().direction {
            arena_bench::spec::Direction::Lower => 0.0,
            arena_bench::spec::Direction::Higher if name.ends_with("failure_time_s") => 0.18,
            arena_bench::spec::Direction::Higher => 1.0,
        };
        assert!(close(v[name], want), "{name} = {}, expected {want}", v[name]);
    }
}

#[test]
fn joint_angle_metrics_by_hand() {
    // Joint 0 off by 3 and joint 1 by 4 in every frame: ‖·‖ = 5.
    let mut e = Episode::still(4);
    for q in &mut e.sim_joints {
        q[0] = 3.0;
        q[1] = 4.0;
    }
    let v = e.eval(&[
        "distance",
        "mpjpe_l",
        "proximity",
        "emd",
        "vel_dist",
        "accel_dist",
        "bfm_vel_dist",
    ]);
    assert!(close(v["distance"], 5.0));
    assert!(close(v["mpjpe_l"], 5000.0));
    assert!(close(v["proximity"], 0.0)); // 5 > bound + margin
    assert!(close(v["emd"], 5.0));
    // A constant offset has no velocity or acceleration error along time...
    assert!(close(v["vel_dist"], 0.0) && close(v["accel_dist"], 0.0));
    // ...but along the joint axis: D(q − q*) = (4 − 3, 0 − 4, 0, ...) → ‖(1, −4)‖ = √17.
    assert!(close(v["bfm_vel_dist"], 1000.0 * 17f64.sqrt()), "{}", v["bfm_vel_dist"]);
}

#[test]
fn proximity_margin_is_linear() {
    assert_eq!(metrics::proximity_of(1.9), 1.0);
    assert_eq!(metrics::proximity_of(2.0), 1.0);
    assert!(close(metrics::proximity_of(3.0), 0.5));
    assert_eq!(metrics::proximity_of(4.0), 0.0);
    assert_eq!(metrics::proximity_of(4.1), 0.0);
}

#[test]
fn emd_ignores_timing_but_distance_does_not() {
    // Reference joint 0 ramps 0, 1, 2, 3; simulation plays it backwards.
    let mut e = Episode::still(4);
    for k in 0..4 {
        e.ref_joints[k][0] = k as f64;
        e.sim_joints[k][0] = (3 - k) as f64;
    }
    let v = e.eval(&["emd", "distance", "vel_dist", "accel_dist"]);
    assert!(close(v["emd"], 0.0), "same set of frames: {}", v["emd"]);
    assert!(close(v["distance"], (3.0 + 1.0 + 1.0 + 3.0) / 4.0));
    // Velocities +1 vs −1 per frame: error 2 rad/frame → 2000 mrad/frame; no acceleration.
    assert!(close(v["vel_dist"], 2000.0));
    assert!(close(v["accel_dist"], 0.0));
}

#[test]
fn acceleration_along_time_by_hand() {
    // Simulated joint 2 follows k², reference stays 0: second difference 2 every frame.
    let mut e = Episode::still(5);
    for k in 0..5 {
        e.sim_joints[k][2] = (k * k) as f64;
    }
    let v = e.eval(&["accel_dist", "vel_dist"]);
    assert!(close(v["accel_dist"], 2000.0));
    // First differences 1, 3, 5, 7 → mean 4.
    assert!(close(v["vel_dist"], 4000.0));
}

#[test]
fn differences_along_time_are_undefined_on_too_few_frames() {
    // An episode scored to its first step has one frame: no velocity error can be formed, and
    // a zero there would flatter the mean of an agent that fell at once. Two frames make a
    // velocity error but no acceleration error.
    let time_diffs = ["vel_dist", "accel_dist", "body_vel_dist", "body_accel_dist"];
    let mut one = Episode::still(1);
    one.sim_joints[0][0] = 1.0;
    let v = one.eval(&[&time_diffs[..], &["distance", "bfm_vel_dist"]].concat());
    assert_eq!(v.keys().collect::<Vec<_>>(), ["bfm_vel_dist", "distance"], "{v:?}");
    let mut two = Episode::still(2);
    two.sim_joints[1][0] = 1.0;
    two.sim_bodies[1][0] += 0.5;
    let v = two.eval(&time_diffs);
    assert_eq!(v.keys().collect::<Vec<_>>(), ["body_vel_dist", "vel_dist"], "{v:?}");
    assert!(
        close(v["vel_dist"], 1000.0) && close(v["body_vel_dist"], 500.0 / 24.0),
        "{v:?}"
    );
    // The streaming interface says the same: no value, and no error.
    let mut m = metrics::create("accel_dist", &MetricConfig::default()).unwrap();
    for f in two.frames() {
        m.update(&f).unwrap();
    }
    assert_eq!(m.compute().unwrap(), None);
    m.reset();
    assert!(m.compute().is_err(), "no frames at all is still an error");
}

#[test]
fn bfm_accel_dist_uses_the_joint_axis_and_factor_100() {
    let mut e = Episode::still(2);
    for q in &mut e.sim_joints {
        q[1] = 1.0; // D² over joints: (q2 − 2q1 + q0) = −2 at k = 0, +1 at k = 1 → ‖(−2, 1)‖ = √5
    }
    let v = e.eval(&["bfm_accel_dist"]);
    assert!(
        close(v["bfm_accel_dist"], 100.0 * 5f64.sqrt()),
        "{}",
        v["bfm_accel_dist"]
    );
}

#[test]
fn body_position_errors_global_and_root_relative() {
    // Whole simulated body shifted 0.3 m in x: global error 300 mm, root-relative 0.
    let mut e = Episode::still(3);
    for p in &mut e.sim_bodies {
        for b in 0..NUM_BODIES {
            p[3 * b] += 0.3;
        }
    }
    let v = e.eval(&[
        "mpjpe_g",
        "mpjpe_g_all",
        "mpjpe_rr",
        "mpjpe_rr_all",
        "success",
        "emd_xpos",
    ]);
    assert!(close(v["mpjpe_g"], 300.0) && close(v["mpjpe_g_all"], 300.0));
    assert!(close(v["mpjpe_rr"], 0.0) && close(v["mpjpe_rr_all"], 0.0));
    assert_eq!(v["success"], 1.0);
    // 24 bodies each 0.3 m off in x: the 72-D frame distance is 0.3·√24.
    assert!(close(v["emd_xpos"], 0.3 * 24f64.sqrt()));
}

#[test]
fn wrist_bodies_only_count_in_the_all_body_variants() {
    // Left wrist yaw link (index 22) off by 0.62 m: the 24-body metrics do not see it.
    let mut e = Episode::still(2);
    for p in &mut e.sim_bodies {
        p[3 * 22 + 2] += 0.62;
    }
    let v = e.eval(&["mpjpe_g", "mpjpe_g_all", "success_phc_linf"]);
    assert!(close(v["mpjpe_g"], 0.0));
    assert!(close(v["mpjpe_g_all"], 620.0 / 31.0));
    assert_eq!(v["success_phc_linf"], 1.0);
}

#[test]
fn success_criteria_and_failure_time() {
    // From frame 3 on, one body (the left knee, index 4) is 0.6 m off: linf fails, the mean
    // (0.6 / 24 = 0.025 m) does not.
    let mut e = Episode::still(6);
    for k in 3..6 {
        e.sim_bodies[k][3 * 4 + 1] += 0.6;
    }
    let v = e.eval(&["success", "success_phc_linf", "success_phc_mean", "failure_time_s"]);
    assert_eq!(v["success_phc_linf"], 0.0);
    assert_eq!(v["success_phc_mean"], 1.0);
    assert_eq!(v["success"], 0.0);
    assert!(close(v["failure_time_s"], 0.06));
    // Everything 0.55 m off in z from frame 1: both criteria fail at 0.02 s.
    let mut e = Episode::still(4);
    for k in 1..4 {
        for b in 0..NUM_BODIES {
            e.sim_bodies[k][3 * b + 2] += 0.55;
        }
    }
    let v = e.eval(&["success_phc_mean", "failure_time_s"]);
    assert_eq!(v["success_phc_mean"], 0.0);
    assert!(close(v["failure_time_s"], 0.02));
}

#[test]
fn state_slice_metrics_use_only_the_slice() {
    let mut e = Episode::still(3);
    for s in &mut e.sim_state {
        s[0] = 0.3; // inside the default slice 0..23
        s[40] = 100.0; // outside
    }
    let v = e.eval(&["obs_state_distance", "obs_state_emd", "obs_state_proximity"]);
    assert!(close(v["obs_state_distance"], 0.3));
    assert!(close(v["obs_state_emd"], 0.3));
    assert_eq!(v["obs_state_proximity"], 1.0);
    let config = MetricConfig {
        state_slice: [30, 45],
        ..MetricConfig::default()
    };
    let v = metrics::evaluate(&["obs_state_distance".to_string()], &config, e.frames()).unwrap();
    assert!(close(v["obs_state_distance"], 100.0));
}

#[test]
fn ndtw_tolerates_lag_better_than_per_frame_error() {
    // The reference moves the whole body along x at 1 cm per frame; the simulation does the
    // same 5 frames late. DTW aligns the lag away except at the start.
    let t = 100;
    let mut e = Episode::still(t);
    for k in 0..t {
        let lagged = k.saturating_sub(5) as f64;
        for b in 0..NUM_BODIES {
            e.ref_bodies[k][3 * b] += 0.01 * k as f64;
            e.sim_bodies[k][3 * b] += 0.01 * lagged;
        }
    }
    let v = e.eval(&["ndtw", "mpjpe_g"]);
    assert!(close(v["mpjpe_g"], 50.0 - 0.15 * 1000.0 / 100.0), "{}", v["mpjpe_g"]);
    // Per-frame error 0.05 m would give exp(−0.05/0.5) = 0.905; DTW does better.
    assert!(v["ndtw"] > 0.98 && v["ndtw"] < 1.0, "{}", v["ndtw"]);
    // Exact DTW on a tiny case: x = (0, 1, 2), y = (0, 0, 1, 2) in 1-D, cost |a − b|: 0.
    let d = metrics::dtw(&[0.0, 1.0, 2.0], &[0.0, 0.0, 1.0, 2.0], 1, None, |a, b| {
        (a[0] - b[0]).abs()
    });
    assert_eq!(d, 0.0);
    let d = metrics::dtw(&[0.0, 1.0], &[1.0, 2.0], 1, None, |a, b| (a[0] - b[0]).abs());
    assert_eq!(d, 2.0); // (0→1) + (1→2) or (0→1)+(1→1)+(1→2)... best is 1 + 0 + 1 = 2
    // A band wider than any index is unconstrained, not an overflow that leaves no path.
    let wide = metrics::dtw(&[0.0, 1.0, 2.0], &[0.0, 0.0, 1.0, 2.0], 1, Some(usize::MAX), |a, b| {
        (a[0] - b[0]).abs()
    });
    assert_eq!(wide, 0.0);
}

#[test]
fn metric_interface_resets_between_episodes() {
    let config = MetricConfig::default();
    let mut m = metrics::create("distance", &config).unwrap();
    let mut bad = Episode::still(2);
    bad.sim_joints[0][0] = 10.0;
    for f in bad.frames() {
        m.update(&f).unwrap();
    }
    assert!(close(m.compute().unwrap().unwrap(), 5.0));
    m.reset();
    assert!(m.compute().is_err(), "no frames after reset");
    for f in Episode::still(2).frames() {
        m.update(&f).unwrap();
    }
    assert_eq!(m.compute().unwrap(), Some(0.0));
}

#[test]
fn bad_input_is_a_clear_error() {
    let config = MetricConfig::default();
    let err = metrics::create("mpjpe", &config).err().unwrap().to_string();
    assert!(
        err.contains("unknown metric \"mpjpe\"") && err.contains("mpjpe_g"),
        "{err}"
    );
    let bad_slice = MetricConfig {
        state_slice: [10, 70],
        ..config
    };
    assert!(metrics::create("obs_state_emd", &bad_slice).is_err());
    let mut m = metrics::create("emd", &config).unwrap();
    let e = Episode::still(1);
    let mut f = e.frames().next().unwrap();
    let short = [0.0; 3];
    f.sim_joints = &short;
    let err = m.update(&f).unwrap_err().to_string();
    assert!(err.contains("simulated joints") && err.contains("expected 29"), "{err}");
    assert!(m.compute().is_err());
}

#[test]
fn docs_describe_every_metric() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).unwrap();
    for name in metrics::metric_names() {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/metrics.md does not describe {name}"
        );
    }
}

#[test]
fn mjlab_metrics_by_hand() {
    // The robot stands 1 m beside the reference (x + 1) and its joint 0 turns at 2.9 rad/s
    // the reference does not; from row 5 it is also 0.3 m lower, which the anchor-height
    // termination (0.25 m) ends at row 5 (t = 0.1 s).
    let mut e = Episode::still(10);
    for (k, bodies) in e.sim_bodies.iter_mut().enumerate() {
        for b in 0..NUM_BODIES {
            bodies[3 * b] += 1.0;
            if k >= 5 {
                bodies[3 * b + 2] -= 0.3;
            }
        }
    }
    for v in &mut e.sim_vel {
        v[0] = 2.9;
    }
    let all = metrics::mjlab::MJLAB_METRICS;
    let v = e.eval(&all);
    // Steps 1..=5 count (row 0 is the reset pose; the terminating step is the last).
    let expected = [
        ("mjlab_success", 0.0),
        ("mjlab_failure_time_s", 0.1),
        ("mpkpe", (4.0 + 1.09f64.sqrt()) / 5.0),
        // Re-anchored on the robot's previous anchor: the horizontal offset is gone, the drop is not.
        ("r_mpkpe", 0.3 / 5.0),
        ("joint_vel_error", 2.9 / 29f64.sqrt()),
        ("ee_pos_error", 0.3 / 5.0),
        ("ee_ori_error", 0.0),
    ];
    for (name, want) in expected {
        assert!(close(v[name], want), "{name} = {}, expected {want}", v[name]);
    }
    // Without the drop: success, and the failure time is the episode's length.
    let mut e2 = Episode::still(10);
    for bodies in &mut e2.sim_bodies {
        for b in 0..NUM_BODIES {
            bodies[3 * b] += 1.0;
        }
    }
    let v = e2.eval(&all);
    assert_eq!((v["mjlab_success"], v["mpkpe"], v["r_mpkpe"]), (1.0, 1.0, 0.0));
    assert!(close(v["mjlab_failure_time_s"], 0.18));
    // Frames without orientations are refused with what is missing.
    let mut bare = Episode::still(3);
    bare.sim_quat = vec![Vec::new(); 3];
    let names = vec!["mpkpe".to_string()];
    let err = metrics::evaluate(&names, &MetricConfig::default(), bare.frames()).unwrap_err();
    assert!(err.to_string().contains("simulated body orientations"), "{err}");
}
