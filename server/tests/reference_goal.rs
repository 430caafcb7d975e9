//! The `reference_goal` observation group through the SDK's local runner: an agent receives
//! H × 527 values per step, and row k of step t is the simulator's reference observation
//! (`arena_sim::observation::reference_observations`) of motion time start + (t + k)·dt,
//! frozen at the motion's last frame past its end.

use arena_bench::spec::{BenchmarkSpec, MotionSource, Window, find_benchmark, shipped_dir};
use arena_data::MotionClip;
use arena_runner::episode;
use arena_runner::local::{LocalOptions, run_local};
use arena_sdk::Agent;
use arena_sdk::agent::Batch;
use arena_sdk::layout::{REFERENCE_GOAL_GROUP, REFERENCE_GOAL_ROW};
use arena_sdk::protocol::{EpisodeInfo, EpisodeSpec};
use arena_sim::motion::MotionLibrary;
use arena_sim::observation::{PRIVILEGED_STATE_DIM, ReferenceObservations, STATE_DIM, reference_observations};
use arena_sim::{CONTROL_DT, RobotConfig};
use std::collections::HashMap;
use std::path::Path;

fn smoke() -> BenchmarkSpec {
    find_benchmark("g1-smoke", &shipped_dir(), &arena_bench::metrics::metric_names())
        .unwrap()
        .1
}

fn clips(spec: &BenchmarkSpec) -> Vec<MotionClip> {
    episode::benchmark_clips(spec, Path::new("."), &RobotConfig::default()).unwrap()
}

/// Largest |a − b| / max(1, |b|).
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// Checks every `reference_goal` row it receives against the motion's reference observations.
struct GoalChecker {
    horizon: usize,
    /// Motion name → (reference observations, motion length in seconds).
    references: HashMap<String, (ReferenceObservations, f64)>,
    /// Episode id → (motion name, start time).
    episodes: HashMap<u32, (String, f64)>,
    /// Largest relative difference of the rows compared with a tolerance (non-zero starts).
    max_diff: f32,
    exact_rows: usize,
    near_rows: usize,
    frozen_rows: usize,
}

impl GoalChecker {
    fn new(spec: &BenchmarkSpec, clips: &[MotionClip]) -> Self {
        let robot = RobotConfig::default();
        let library = MotionLibrary::from_clips(clips, &robot).unwrap();
        let references = library
            .motions
            .iter()
            .map(|m| (m.name.clone(), (reference_observations(m, &robot), m.length_s)))
            .collect();
        Self {
            horizon: spec.observations.reference_goal_horizon as usize,
            references,
            episodes: HashMap::new(),
            max_diff: 0.0,
            exact_rows: 0,
            near_rows: 0,
            frozen_rows: 0,
        }
    }
}

impl Agent for GoalChecker {
    fn configure(&mut self, spec: &EpisodeSpec) {
        let group = spec.observations.iter().find(|g| g.name == REFERENCE_GOAL_GROUP);
        assert_eq!(
            group.map(|g| g.size as usize),
            Some(self.horizon * REFERENCE_GOAL_ROW),
            "announced groups: {:?}",
            spec.observations
        );
        assert_eq!(
            spec.observations.last().unwrap().name,
            REFERENCE_GOAL_GROUP,
            "the last group"
        );
    }

    fn reset(&mut self, episodes: &[EpisodeInfo]) {
        for e in episodes {
            self.episodes.insert(e.episode_id, (e.motion.clone(), e.start_s));
        }
    }

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        actions.fill(0.0);
        let range = batch
            .layout
            .group(REFERENCE_GOAL_GROUP)
            .expect("reference_goal is sent");
        assert_eq!(range.len(), self.horizon * REFERENCE_GOAL_ROW);
        assert_eq!(range.end, batch.layout.size(), "reference_goal comes last");
        for i in 0..batch.len() {
            let (motion, start_s) = &self.episodes[&batch.episodes[i]];
            let (reference, length_s) = &self.references[motion];
            let step = batch.episode_steps[i] as usize;
            let goal = &batch.observation(i)[range.clone()];
            let mut frozen: Option<&[f32]> = None;
            for k in 1..=self.horizon {
                let row = &goal[(k - 1) * REFERENCE_GOAL_ROW..k * REFERENCE_GOAL_ROW];
                let (state, privileged) = row.split_at(STATE_DIM);
                let time = start_s + (step + k) as f64 * CONTROL_DT;
                // The reference observation row at this time, when it is one of the motion's rows.
                let index = (time / CONTROL_DT).round() as usize;
                if index < reference.rows {
                    let want_state = &reference.state[index * STATE_DIM..(index + 1) * STATE_DIM];
                    let want_priv =
                        &reference.privileged_state[index * PRIVILEGED_STATE_DIM..(index + 1) * PRIVILEGED_STATE_DIM];
                    if *start_s == 0.0 {
                        // Same time arithmetic as reference_observations: bit-for-bit equal.
                        assert_eq!(state, want_state, "{motion} step {step} row {k}: state");
                        assert_eq!(privileged, want_priv, "{motion} step {step} row {k}: privileged_state");
                        self.exact_rows += 1;
                    } else {
                        // start + n·dt and (start/dt + n)·dt may differ in the last bit.
                        let diff = rel_diff(state, want_state).max(rel_diff(privileged, want_priv));
                        assert!(
                            diff <= 1e-5,
                            "{motion} from {start_s} s, step {step} row {k}: off by {diff}"
                        );
                        self.max_diff = self.max_diff.max(diff);
                        self.near_rows += 1;
                    }
                }
                if time >= *length_s - 1e-9 {
                    // Past the end every row is the motion's last frame.
                    match frozen {
                        None => frozen = Some(row),
                        Some(first) => {
                            let diff = rel_diff(row, first);
                            assert!(diff <= 1e-6, "{motion} step {step} row {k}: not frozen ({diff})");
                        }
                    }
                    self.frozen_rows += 1;
                }
            }
        }
    }
}

#[test]
fn local_runner_sends_reference_rows_of_the_backward_observation() {
    let mut spec = smoke();
    assert_eq!(spec.observations.reference_goal_horizon, 8);
    // Whole clips from 0: rows equal reference_observations exactly, and the ends freeze.
    spec.motions.source = MotionSource::Builtin(vec!["squat".into(), "arm_wave".into()]);
    let clips = clips(&spec);
    let mut agent = GoalChecker::new(&spec, &clips);
    let options = LocalOptions {
        batch: 2,
        threads: 1,
        ..Default::default()
    };
    let aggregator = run_local(&spec, &clips, &mut agent, &options, &mut |_, _, _| {}).unwrap();
    assert_eq!(aggregator.episodes().len(), 2);
    // 6 s clips: 300 steps × 8 rows, of which those inside the 300 reference rows compare.
    assert!(agent.exact_rows > 2 * 280 * 8, "{} rows compared", agent.exact_rows);
    assert!(agent.frozen_rows >= 2 * 8, "{} frozen rows", agent.frozen_rows);
    assert_eq!(agent.near_rows, 0);
}

#[test]
fn reference_rows_follow_a_window_that_starts_late() {
    let mut spec = smoke();
    spec.motions.source = MotionSource::Builtin(vec!["torso_twist".into()]);
    spec.episodes.window = Window::Sliding {
        length_s: 1.0,
        stride_s: 2.5,
    };
    let clips = clips(&spec);
    let mut agent = GoalChecker::new(&spec, &clips);
    let options = LocalOptions {
        batch: 3,
        threads: 1,
        ..Default::default()
    };
    let aggregator = run_local(&spec, &clips, &mut agent, &options, &mut |_, _, _| {}).unwrap();
    // Windows start at 0, 2.5 and 5 s.
    let starts: Vec<f64> = aggregator.episodes().iter().map(|e| e.start_s).collect();
    assert!(starts.contains(&2.5) && starts.contains(&5.0), "{starts:?}");
    assert!(agent.near_rows > 0 && agent.exact_rows > 0);
    // A window ending at the clip's end looks past it: its last rows freeze.
    assert!(agent.frozen_rows > 0);
    assert!(agent.max_diff <= 1e-5, "{}", agent.max_diff);
}
