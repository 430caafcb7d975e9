//! The training's simulator calls, replayed on a fresh env, end in the same state bit for bit
//! (the training throughput benchmark's like-for-like reference), and a replay that makes one
//! more call is told apart.

use arena_bench::metrics::metric_names;
use arena_bench::spec;
use arena_ppo::config::PpoTrainConfig;
use arena_ppo::envs::TrackerEnvs;
use arena_ppo::sim_tape::first_difference;
use arena_sim::RobotConfig;
use arena_sim::env::TrackingEnv;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::Arc;

#[test]
fn a_replay_of_the_recorded_calls_ends_in_the_same_state() {
    let mut config = PpoTrainConfig::default();
    for o in ["env.num_envs=6", "env.threads=2", "dr.level=2"] {
        config.set(o).unwrap();
    }
    let (_, spec) = spec::find_benchmark("g1-smoke-robot", &spec::shipped_dir(), &metric_names()).unwrap();
    let clips = arena_runner::episode::benchmark_clips(&spec, Path::new("."), &RobotConfig::default()).unwrap();
    let mut envs = TrackerEnvs::new(&config, &spec, &clips).unwrap();
    envs.record_sim_calls();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    envs.reset_all(&mut rng).unwrap();
    let warm_up = 5;
    let (mut ended, mut steps) = (0, 0);
    // Large random actions: robots fall, so episodes end and restart during the recording.
    while ended < 3 || steps < 40 {
        if steps == warm_up {
            envs.sim_tape().unwrap().mark();
        }
        let actions: Vec<f32> = (0..6 * 29).map(|_| rng.random_range(-2.0..2.0)).collect();
        ended += envs
            .step(&actions, &mut rng)
            .unwrap()
            .dones
            .iter()
            .filter(|d| **d)
            .count();
        steps += 1;
        assert!(steps < 500, "no episode ended in 500 steps");
    }
    let tape = envs.sim_tape().unwrap().clone();
    let library = Arc::new(envs.library().clone());
    let mut replay = TrackingEnv::new(envs.sim_config().unwrap(), library.clone()).unwrap();
    let replayed = tape.replay(&mut replay).unwrap();
    assert_eq!(first_difference(envs.sim(), &replay), None);
    assert_eq!(
        replayed.env_steps,
        6 * (steps - warm_up) as u64,
        "only steps after the mark are timed"
    );

    // One step more is a different state, and the check says which env.
    let mut longer = TrackingEnv::new(envs.sim_config().unwrap(), library).unwrap();
    tape.replay(&mut longer).unwrap();
    let hold: Vec<f32> = (0..6)
        .flat_map(|e| {
            let mut q = [0.0; 36];
            longer
                .handler()
                .read_env_into(e, arena_sim::handler::Field::Qpos, &mut q);
            q[7..].iter().map(|v| *v as f32).chain([0.0; 29]).collect::<Vec<_>>()
        })
        .collect();
    longer.step(&hold).unwrap();
    let why = first_difference(envs.sim(), &longer).expect("an extra step shows");
    assert!(why.starts_with("env "), "{why}");
}
