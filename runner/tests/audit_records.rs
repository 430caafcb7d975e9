//! The audit of episodes that ended for the agent's reasons (a timeout after some steps, a NaN
//! action at the first step): on the backend that recorded them the re-run is bit-exact, stops
//! where each recording ended (a one-row record at once), and scores as the recording did.

use arena_bench::spec::{MotionSource, find_benchmark, shipped_dir};
use arena_data::trajectory_file::EpisodeRecord;
use arena_runner::audit::{STOPPED, audit};
use arena_runner::episode;
use arena_sim::SimBackend;
use arena_sim::env::TrackingEnv;
use arena_sim::motion::MotionLibrary;
use std::path::Path;
use std::sync::Arc;

#[test]
fn episodes_ended_by_the_agent_rerun_bit_exact_and_score_as_recorded() {
    let names = arena_bench::metrics::metric_names();
    let (_, mut spec) = find_benchmark("g1-smoke", &shipped_dir(), &names).unwrap();
    spec.motions.source = MotionSource::Builtin(vec!["squat".into(), "arm_wave".into()]);
    let config = episode::env_config(&spec, None, 2, 1);
    let clips = episode::benchmark_clips(&spec, Path::new("."), &config.robot).unwrap();
    let library = Arc::new(MotionLibrary::from_clips(&clips, &config.robot).unwrap());
    let episodes = spec
        .expand_episodes(&library.motions.iter().map(|m| m.length_s).collect::<Vec<_>>())
        .unwrap();
    // Record: episode 0 runs 30 steps of small actions and then "times out"; episode 1 failed
    // at its first action (its record holds the reset row alone).
    let mut env = TrackingEnv::new(config, library.clone()).unwrap();
    let starts: Vec<_> = episodes
        .iter()
        .take(2)
        .enumerate()
        .map(|(slot, ep)| (slot, episode::assignment(&spec, ep).unwrap()))
        .collect();
    env.reset(&starts).unwrap();
    env.stop(1);
    let one_row = env.trajectory(1).clone();
    let width = env.action_width();
    for step in 0..30 {
        let actions: Vec<f32> = (0..2 * width).map(|k| 0.05 * ((k + step) as f32 * 0.7).sin()).collect();
        env.step(&actions).unwrap();
    }
    env.stop(0);
    let record = |slot: usize, rows, status: &str, reason: &str| EpisodeRecord {
        episode: slot as u32,
        motion: library.motions[episodes[slot].motion].name.clone(),
        category: library.motions[episodes[slot].motion].category.clone(),
        seed: episodes[slot].seed,
        dr_level: u32::from(spec.episodes.dr_level),
        status: status.into(),
        reason: reason.into(),
        start_s: episodes[slot].start_s,
        duration_s: episodes[slot].duration_s,
        scored_until_s: None,
        rows,
    };
    let records = [
        record(0, env.trajectory(0).rows.clone(), "timeout", "no action within 500 ms"),
        record(1, one_row.rows, "failed", "step 0: non-finite action for episode 1"),
    ];
    assert_eq!((records[0].num_rows(), records[1].num_rows()), (31, 1));
    let audits = audit(&spec, None, &library, &records, &SimBackend::Cpu, 2, 1, &mut |_, _| {}).unwrap();
    for (a, r) in audits.iter().zip(&records) {
        assert!(a.error.is_none(), "{a:?}");
        assert!(a.bit_exact, "episode {}: {a:?}", a.episode);
        assert_eq!(a.rerun_rows, r.num_rows(), "episode {}", a.episode);
        assert!(a.rerun_status.starts_with(STOPPED), "{}", a.rerun_status);
        assert!(a.rerun_status.contains(&r.status), "{}", a.rerun_status);
        for (name, (stored, again)) in &a.metrics {
            assert!(
                stored.to_bits() == again.to_bits(),
                "episode {} {name}: {stored} stored, {again} re-run",
                a.episode
            );
        }
    }
}
