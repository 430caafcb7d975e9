//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// `../shared/<rel>` beside the checkout, or None (with the reason printed) when absent.
pub fn shared(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared").join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipped: {} is not present (../shared beside the checkout)",
            p.display()
        );
        None
    }
}

use arena_data::NUM_JOINTS;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, EpisodeStatus, TrackingEnv, Trajectory};
use arena_sim::policy::{Policy, ReplayPolicy};

/// Whether two recordings hold the same rows, bit for bit, in every array.
pub fn same_recording(a: &Trajectory, b: &Trajectory) -> bool {
    let eq = |x: &[f64], y: &[f64]| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
    let (a, b) = (&a.rows, &b.rows);
    a.arrays().iter().zip(b.arrays()).all(|(x, y)| eq(x, y))
        && a.optional_arrays()
            .iter()
            .zip(b.optional_arrays())
            .all(|(x, y)| eq(x, y))
}

/// Every recording an env made in a scenario that ends episodes every way a run does: envs
/// that follow their reference and envs whose actions throw them down (the fall rule ends
/// them), one that gets a non-finite action (failed), one stopped at a window's end, and envs
/// reset to a new episode as soon as theirs ended (`env` needs a fall rule for the falls).
/// Each recording is taken when its episode ends, and the running ones' at the end.
pub fn recordings_of_a_mixed_run(env: &mut TrackingEnv, steps: usize) -> Vec<(usize, EpisodeStatus, Trajectory)> {
    let (n, motions) = (env.num_envs(), env.library().len());
    let assignment = |e: usize, round: usize| EpisodeAssignment {
        motion: (e + round) % motions,
        start_time: 0.1 * round as f64,
        seed: 7 + 31 * e as u64 + round as u64,
        dr_level: if e.is_multiple_of(2) { DrLevel::L3 } else { DrLevel::L1 },
    };
    let mut round = vec![0usize; n];
    let all: Vec<_> = (0..n).map(|e| (e, assignment(e, 0))).collect();
    env.reset(&all).unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; n * NUM_JOINTS];
    let mut taken = Vec::new();
    for step in 0..steps {
        policy.act(env, &mut actions);
        for e in (0..n).filter(|e| e % 3 == 2) {
            // Thrown down: every joint at its limit.
            actions[e * NUM_JOINTS..(e + 1) * NUM_JOINTS].fill(1.0);
        }
        if step == 7 {
            actions[NUM_JOINTS] = f32::NAN;
        }
        env.step(&actions).unwrap();
        if step == 11 {
            env.stop(0);
        }
        let ended: Vec<usize> = (0..n).filter(|&e| env.infos()[e].status.is_done()).collect();
        for &e in &ended {
            taken.push((e, env.infos()[e].status.clone(), env.take_trajectory(e)));
            round[e] += 1;
        }
        let again: Vec<_> = ended.iter().map(|&e| (e, assignment(e, round[e]))).collect();
        if !again.is_empty() {
            env.reset(&again).unwrap();
        }
    }
    for e in 0..n {
        taken.push((e, env.infos()[e].status.clone(), env.take_trajectory(e)));
    }
    taken
}
