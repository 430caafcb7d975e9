//! A fall is scored (issue 38 §3): once an episode breaks its benchmark's success rule, its
//! score is fixed at the break. Three orders, under both success rules: an agent that keeps
//! trying after the break, one that sends NaN right after it (it must score exactly the same,
//! as a fall), and one that sends NaN while still tracking (unscored failure, as before).

use arena_bench::aggregate::EpisodeStatus;
use arena_bench::metrics::{self, MetricConfig, NUM_JOINTS};
use arena_data::TrajectoryRows;
use arena_runner::episode::score_finished;
use arena_sim::env::{self, EpisodeAssignment, TrackingEnv, TrackingEnvConfig, Trajectory};
use arena_sim::motion::MotionLibrary;
use arena_sim::{CONTROL_DT, RobotConfig};
use std::sync::Arc;

/// Runs the built-in squat with every joint pushed to the end of its range (the robot folds
/// and falls), switching to NaN actions from step `nan_from` on; stops after `steps` steps or
/// when the env fails. Returns the trajectory and how the env ended.
fn collapse(steps: usize, nan_from: Option<usize>) -> (Trajectory, EpisodeStatus, Option<String>) {
    let robot = RobotConfig::default();
    let library = Arc::new(MotionLibrary::from_clips(&MotionLibrary::builtin_clips(&robot).unwrap(), &robot).unwrap());
    let motion = library.motions.iter().position(|m| m.name == "squat").unwrap();
    let mut env = TrackingEnv::new(
        TrackingEnvConfig {
            threads: 1,
            ..Default::default()
        },
        library,
    )
    .unwrap();
    let assignment = EpisodeAssignment {
        motion,
        start_time: 0.0,
        seed: 3,
        dr_level: Default::default(),
    };
    env.reset(&[(0, assignment)]).unwrap();
    let push: Vec<f32> = (0..NUM_JOINTS).map(|j| if j % 2 == 0 { 1.0 } else { -1.0 }).collect();
    for k in 0..steps {
        if env.infos()[0].status != env::EpisodeStatus::Running {
            break;
        }
        let action = if nan_from.is_some_and(|n| k >= n) {
            vec![f32::NAN; NUM_JOINTS]
        } else {
            push.clone()
        };
        env.step(&action).unwrap();
    }
    env.stop(0);
    let (status, reason) = match env.infos()[0].status.clone() {
        env::EpisodeStatus::Failed(r) => (EpisodeStatus::Failed, Some(r)),
        _ => (EpisodeStatus::Completed, None),
    };
    (env.take_trajectory(0), status, reason)
}

/// The first `n` rows of an episode.
fn first_rows(rows: &TrajectoryRows, n: usize) -> TrajectoryRows {
    let t = rows.len();
    let mut first = rows.clone();
    let cut = |values: &mut Vec<f64>| {
        let width = values.len() / t;
        values.truncate(n * width);
    };
    first.arrays_mut().into_iter().for_each(cut);
    first.optional_arrays_mut().into_iter().for_each(cut);
    first
}

fn config(rule: &'static str) -> MetricConfig {
    MetricConfig {
        success_rule: Some(rule),
        ..MetricConfig::default()
    }
}

#[test]
fn a_fall_stays_a_scored_fall_whatever_the_agent_does_next() {
    let names: Vec<String> = metrics::metric_names().iter().map(|s| s.to_string()).collect();
    let steps = (2.0 / CONTROL_DT) as usize;
    for rule in ["success", "mjlab_success"] {
        let config = config(rule);
        let (kept_trying, status, _) = collapse(steps, None);
        assert_eq!(status, EpisodeStatus::Completed);
        // Where the rule breaks: the row the score stops at.
        let (status_a, scores_a, _) = score_finished(&kept_trying.rows, status, None, &names, &config);
        assert_eq!(status_a, EpisodeStatus::Completed, "{rule}: ran its window");
        assert_eq!(scores_a[rule], 0.0, "{rule}: the collapse breaks the rule");
        let survival = metrics::survival_metric_for(rule);
        let break_s = scores_a[survival];
        let break_row = (break_s / CONTROL_DT).round() as usize;
        assert!(
            break_row >= 1 && break_row + 10 < kept_trying.len(),
            "{rule}: breaks at {break_s} s"
        );
        println!(
            "{rule}: broken at row {break_row} ({break_s:.2} s) of {}",
            kept_trying.len()
        );

        // NaN right after the break: a fall, scored exactly as the agent that kept trying.
        let (nan_after, status, reason) = collapse(steps, Some(break_row));
        assert_eq!(status, EpisodeStatus::Failed, "{rule}: the env fails the NaN");
        assert!(reason.as_deref().unwrap().contains("non-finite"), "{reason:?}");
        let (status_b, scores_b, reason_b) = score_finished(&nan_after.rows, status, reason, &names, &config);
        assert_eq!(status_b, EpisodeStatus::Fell, "{rule}: {reason_b:?}");
        let reason_b = reason_b.unwrap();
        assert!(
            reason_b.contains("non-finite") && reason_b.contains(&format!("after the episode had broken {rule}")),
            "{reason_b}"
        );
        // Every metric the ranked rule stops is the same to the bit. The other success rule
        // judges every recorded row, and mjlab's metrics run to mjlab's own termination (as
        // mjlab's evaluation does): those read what they read on the rows the NaN run has, plus
        // the fall penalty (a fall is no success, and failed by its last row).
        let n = nan_after.len();
        assert_eq!(nan_after.rows.times[..], kept_trying.rows.times[..n]);
        let (_, scores_t, _) = score_finished(&first_rows(&kept_trying.rows, n), status_a, None, &names, &config);
        let last_s = nan_after.rows.times[n - 1] - nan_after.rows.times[0];
        assert_eq!(scores_a.keys().collect::<Vec<_>>(), scores_b.keys().collect::<Vec<_>>());
        for (name, a) in &scores_a {
            let b = scores_b[name];
            let name = name.as_str();
            let other_rule = name != rule && name != survival;
            let own_stop = other_rule
                && (metrics::SUCCESS_METRICS.contains(&name)
                    || metrics::SURVIVAL_METRICS.contains(&name)
                    || metrics::mjlab::MJLAB_METRICS.contains(&name));
            let same = if own_stop {
                let on_its_rows = scores_t[name];
                if metrics::SUCCESS_METRICS.contains(&name) {
                    b == 0.0
                } else if metrics::SURVIVAL_METRICS.contains(&name) {
                    b == on_its_rows.min(last_s)
                } else {
                    b.to_bits() == on_its_rows.to_bits()
                }
            } else {
                a.to_bits() == b.to_bits()
            };
            assert!(same, "{rule}: {name}: kept trying {a}, NaN after the break {b}");
        }

        // NaN while still tracking: an unscored failure, as before.
        let (nan_early, status, reason) = collapse(steps, Some(1));
        let (status_c, scores_c, reason_c) = score_finished(&nan_early.rows, status, reason, &names, &config);
        assert_eq!(status_c, EpisodeStatus::Failed, "{rule}: {reason_c:?}");
        assert!(scores_c.is_empty());
        assert!(reason_c.unwrap().starts_with("non-finite action"));
    }
}

/// A robot that tracks every joint and height but drifts sideways breaks PHC's rule (a body
/// 0.5 m off) and never an mjlab termination (heights and tilt only): on a PHC-ranked benchmark
/// mjlab's metrics still read as mjlab's evaluation reads them, over the whole episode, while
/// the others stop at PHC's break.
#[test]
fn mjlab_metrics_run_to_mjlab_s_own_termination() {
    let names: Vec<String> = metrics::metric_names().iter().map(|s| s.to_string()).collect();
    let (mut drifting, status, _) = collapse((2.0 / CONTROL_DT) as usize, None);
    let rows = &mut drifting.rows;
    rows.qpos.clone_from(&rows.ref_qpos);
    rows.body_pos.clone_from(&rows.ref_body_pos);
    for k in 0..rows.len() {
        let drift = 0.012 * k as f64;
        rows.qpos[k * 36] += drift;
        for body in rows.body_pos[k * 93..(k + 1) * 93].chunks_mut(3) {
            body[0] += drift;
        }
    }
    let (_, by_phc, _) = score_finished(&drifting.rows, status, None, &names, &config("success"));
    let (_, whole, _) = score_finished(&drifting.rows, status, None, &names, &MetricConfig::default());
    let break_s = by_phc["failure_time_s"];
    assert!(
        break_s > 0.5 && break_s < 1.5,
        "PHC's rule breaks mid-episode: {break_s}"
    );
    assert_eq!(by_phc["mjlab_success"], 1.0, "no mjlab termination");
    for name in metrics::mjlab::MJLAB_METRICS {
        assert_eq!(
            by_phc[name].to_bits(),
            whole[name].to_bits(),
            "{name}: cut at PHC's break"
        );
    }
    assert!(
        by_phc["mpkpe"] > 0.3,
        "the drift counts to the end: {}",
        by_phc["mpkpe"]
    );
    assert!(by_phc["mpjpe_g"] < whole["mpjpe_g"], "PHC's metrics stop at its break");
}

#[test]
fn without_a_success_rule_whole_episodes_are_scored_and_errors_stay_unscored() {
    let names: Vec<String> = ["emd", "mpjpe_g", "success"].iter().map(|s| s.to_string()).collect();
    let steps = (2.0 / CONTROL_DT) as usize;
    let (whole, status, _) = collapse(steps, None);
    let none = MetricConfig::default();
    let (_, all_rows, _) = score_finished(&whole.rows, status, None, &names, &none);
    let (_, to_break, _) = score_finished(&whole.rows, status, None, &names, &config("success"));
    assert_ne!(all_rows["emd"], to_break["emd"], "the rule stops scoring at the break");
    // Each success rule judges every frame: ranked by mjlab's rule, PHC's success is what a
    // PHC-ranked benchmark gives, not a pass on the frames before mjlab's break.
    let both: Vec<String> = [
        "emd",
        "success",
        "failure_time_s",
        "mjlab_success",
        "mjlab_failure_time_s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (_, by_phc, _) = score_finished(&whole.rows, status, None, &both, &config("success"));
    let (_, by_mjlab, _) = score_finished(&whole.rows, status, None, &both, &config("mjlab_success"));
    for name in ["success", "failure_time_s", "mjlab_success", "mjlab_failure_time_s"] {
        assert_eq!(by_phc[name], by_mjlab[name], "{name}");
    }
    let (nan_after, status, reason) = collapse(steps, Some(60));
    let (status, scores, _) = score_finished(&nan_after.rows, status, reason, &names, &none);
    assert_eq!((status, scores.len()), (EpisodeStatus::Failed, 0));
}

#[test]
fn an_episode_of_one_step_has_no_acceleration_error_and_the_statistics_say_so() {
    use arena_bench::aggregate::{EpisodeResult, MetricsAggregator};
    let names: Vec<String> = metrics::metric_names().iter().map(|s| s.to_string()).collect();
    let none = MetricConfig::default();
    let (short, status, _) = collapse(1, None);
    let (long, _, _) = collapse(10, None);
    let (s1, one_step, _) = score_finished(&short.rows, status, None, &names, &none);
    let (s10, ten_steps, _) = score_finished(&long.rows, status, None, &names, &none);
    assert_eq!((s1, s10), (EpisodeStatus::Completed, EpisodeStatus::Completed));
    // One step: two frames (the reset row and the step's), a velocity but no acceleration to
    // difference, so no value for the latter (it read 0 before).
    let time_diffs = ["accel_dist", "body_accel_dist"];
    assert!(one_step["vel_dist"] > 0.0 && one_step["body_vel_dist"] > 0.0);
    for name in &names {
        let undefined = time_diffs.contains(&name.as_str());
        assert_eq!(one_step.contains_key(name), !undefined, "{name} after one step");
        assert!(ten_steps.contains_key(name), "{name} after ten steps");
    }
    let mut aggregator = MetricsAggregator::new();
    for (id, metrics) in [("ep0000", one_step), ("ep0001", ten_steps)] {
        aggregator.add_episode(EpisodeResult {
            episode_id: id.into(),
            motion: "squat".into(),
            category: "all".into(),
            status: EpisodeStatus::Completed,
            metrics,
            num_steps: 1,
            start_s: 0.0,
            duration_s: 0.2,
            seed: 3,
            dr_level: 0,
            reason: None,
            scored_until_s: None,
        });
    }
    let stats = aggregator.aggregated();
    assert_eq!(stats["emd"].count, 2);
    for name in time_diffs {
        assert_eq!(stats[name].count, 1, "{name} is over the episode that has it");
        assert!(stats[name].mean > 0.0, "{name}: the one value, not halved by a zero");
    }
}

/// A fall's time is the steps it took on the control clock, without the subtraction's noise:
/// one step after a 5.0 s start read 0.019999999999999574 s, which `failure_time_s >= 0.02`
/// (a dataset filter) left out.
#[test]
fn a_failure_time_is_a_whole_number_of_control_steps() {
    let names: Vec<String> = ["failure_time_s", "mjlab_failure_time_s", "success"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (trajectory, _, _) = collapse(10, None);
    for steps in [1usize, 3, 10] {
        let mut rows = first_rows(&trajectory.rows, steps + 1);
        for (k, t) in rows.times.iter_mut().enumerate() {
            *t = 5.0 + k as f64 * CONTROL_DT;
        }
        assert_ne!(
            rows.times[steps] - rows.times[0],
            steps as f64 / 50.0,
            "the noise this test is about"
        );
        let (status, m, _) = score_finished(&rows, EpisodeStatus::Fell, None, &names, &MetricConfig::default());
        assert_eq!(status, EpisodeStatus::Fell);
        for name in ["failure_time_s", "mjlab_failure_time_s"] {
            // At most the fall's time; earlier where the rule broke first (both, at 10).
            let t = m[name];
            let whole_steps = (t * 50.0).round();
            assert!(
                whole_steps >= 1.0 && whole_steps <= steps as f64,
                "{name} after {steps} steps: {t}"
            );
            assert_eq!(t, whole_steps / 50.0, "{name} after {steps} steps");
        }
        if steps == 1 {
            assert_eq!(m["failure_time_s"], 0.02, "a fall at the first step");
        }
        assert_eq!(m["success"], 0.0);
    }
}
