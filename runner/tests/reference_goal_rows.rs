//! A plan made for an env's slots keeps each slot's `reference_goal` rows between fills and
//! computes only the rows a step lacks; its rows must be the very values of a plan that
//! computes every row each time, through episodes that run on, end, restart on the same
//! motion and start, and start elsewhere (another motion, another start time) in the slot.

use arena_bench::spec::{find_benchmark, shipped_dir};
use arena_runner::episode::{self, ObservationPlan, ReferenceScratch};
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, TrackingEnv};
use arena_sim::motion::MotionLibrary;
use std::path::Path;
use std::sync::Arc;

#[test]
fn kept_reference_goal_rows_equal_rows_computed_each_step() {
    let names = arena_bench::metrics::metric_names();
    // g1-smoke sends `reference_goal` (horizon 8) beside the `reference` frames.
    let (_, spec) = find_benchmark("g1-smoke", &shipped_dir(), &names).unwrap();
    assert!(
        spec.observations.reference_goal_horizon > 1,
        "the test needs a horizon of several rows"
    );
    let slots = 3;
    let config = episode::env_config(&spec, None, slots, 1);
    let robot = config.robot.clone();
    let clips = episode::benchmark_clips(&spec, Path::new("."), &robot).unwrap();
    let library = Arc::new(MotionLibrary::from_clips(&clips, &robot).unwrap());
    let motion = |name: &str| library.motions.iter().position(|m| m.name == name).unwrap();
    let at = |name: &str, start_time: f64, seed: u64| EpisodeAssignment {
        motion: motion(name),
        start_time,
        seed,
        dr_level: DrLevel::L0,
    };
    let mut env = TrackingEnv::new(config, library.clone()).unwrap();
    let kept = ObservationPlan::for_slots(&spec, slots);
    let fresh = ObservationPlan::for_spec(&spec);
    let mut scratch = ReferenceScratch::default();
    env.reset(&[
        (0, at("squat", 0.0, 1)),
        (1, at("arm_wave", 0.3, 2)),
        (2, at("stand", 0.0, 3)),
    ])
    .unwrap();
    // Slot 0 runs on to its motion's end and past it; slot 1 restarts on the same motion and
    // start, then on other starts; slot 2 moves to other motions. Restarts one step apart
    // replace rows an episode's first fill kept by rows of the same episode steps.
    let restarts: &[(usize, usize, EpisodeAssignment)] = &[
        (12, 1, at("arm_wave", 0.3, 4)),
        (20, 2, at("squat", 0.5, 5)),
        (27, 1, at("arm_wave", 0.46, 6)),
        // One step apart: the same motion from another start, then another motion.
        (28, 1, at("arm_wave", 0.3, 9)),
        (31, 2, at("squat", 0.0, 7)),
        (32, 2, at("torso_twist", 0.0, 8)),
    ];
    let size = kept.size();
    let steps = (library.motions[motion("squat")].length_s / arena_sim::CONTROL_DT) as usize + 12;
    let actions = vec![0.0f32; slots * env.action_width()];
    let mut compared = 0;
    for step in 0..steps {
        for (when, slot, assignment) in restarts {
            if *when == step {
                env.reset(&[(*slot, *assignment)]).unwrap();
            }
        }
        for slot in 0..slots {
            let mut want = vec![f32::NAN; size];
            fresh.fill(&env, slot, &mut scratch, &mut want);
            // Twice in one step: the second fill reads every row from the kept ones.
            for _ in 0..2 {
                let mut got = vec![f32::NAN; size];
                kept.fill(&env, slot, &mut scratch, &mut got);
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "step {step}, slot {slot}: the kept rows differ from rows computed afresh"
                );
                compared += 1;
            }
        }
        env.step(&actions).unwrap();
    }
    assert_eq!(compared, 2 * slots * steps);
}
