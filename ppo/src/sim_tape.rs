//! The simulator calls of a training run, recorded so that they can be replayed on the
//! simulator alone: `examples/training_throughput.rs` measures "the simulator stepping the same
//! envs" this way. A standing robot is not the same work: training's policies flail, fall and
//! lie on the ground, and MuJoCo takes about 1.5 times as long per step there (the smoke
//! configuration's first iterations: 12,500 replayed against 18,600 standing env steps/s). Replaying the same resets, start states and commands
//! from the same fresh env gives the same contacts, which the replay checks state for state.

use arena_sim::env::{EpisodeAssignment, TrackingEnv};
use arena_sim::handler::{Field, NQ, NV};
use std::time::Instant;

/// One call on the training's `TrackingEnv`, with its arguments.
#[derive(Debug, Clone)]
enum SimCall {
    ResetWithStartStates(Vec<(usize, EpisodeAssignment)>, Vec<(usize, [f64; NQ], [f64; NV])>),
    Step(Vec<f32>),
    Stop(usize),
    /// Where the timed part of a replay begins ([`SimTape::mark`]).
    Mark,
}

/// The calls in order, from the env's creation on.
#[derive(Debug, Clone, Default)]
pub struct SimTape {
    calls: Vec<SimCall>,
}

/// What a replay of the calls after the last mark cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replayed {
    pub seconds: f64,
    /// Control steps of every env after the mark (the env count times the `step` calls).
    pub env_steps: u64,
}

impl SimTape {
    pub(crate) fn reset_with_start_states(
        &mut self,
        assignments: &[(usize, EpisodeAssignment)],
        states: &[(usize, [f64; NQ], [f64; NV])],
    ) {
        self.calls
            .push(SimCall::ResetWithStartStates(assignments.to_vec(), states.to_vec()));
    }

    pub(crate) fn step(&mut self, commands: &[f32]) {
        self.calls.push(SimCall::Step(commands.to_vec()));
    }

    pub(crate) fn stop(&mut self, env: usize) {
        self.calls.push(SimCall::Stop(env));
    }

    /// Calls recorded after this are the timed part of a replay (e.g. after a warm-up).
    pub fn mark(&mut self) {
        self.calls.push(SimCall::Mark);
    }

    /// Replays every call on `env`, a fresh env made with the recorded env's configuration,
    /// and times those after the last mark.
    pub fn replay(&self, env: &mut TrackingEnv) -> anyhow::Result<Replayed> {
        let timed_from = self.calls.iter().rposition(|c| matches!(c, SimCall::Mark)).unwrap_or(0);
        let mut started = Instant::now();
        let mut steps = 0u64;
        for (k, call) in self.calls.iter().enumerate() {
            if k == timed_from {
                started = Instant::now();
            }
            match call {
                SimCall::ResetWithStartStates(assignments, states) => {
                    env.reset_with_start_states(assignments, states)?;
                }
                SimCall::Step(commands) => {
                    env.step(commands)?;
                    if k > timed_from {
                        steps += env.num_envs() as u64;
                    }
                }
                SimCall::Stop(e) => env.stop(*e),
                SimCall::Mark => {}
            }
        }
        Ok(Replayed {
            seconds: started.elapsed().as_secs_f64(),
            env_steps: steps,
        })
    }
}

/// The first env whose state differs between `a` and `b` (bit for bit), with the field; `None`
/// when every env's qpos and qvel are equal.
pub fn first_difference(a: &TrackingEnv, b: &TrackingEnv) -> Option<String> {
    if a.num_envs() != b.num_envs() {
        return Some(format!("{} envs against {}", a.num_envs(), b.num_envs()));
    }
    for e in 0..a.num_envs() {
        for (field, width) in [(Field::Qpos, NQ), (Field::Qvel, NV)] {
            let (mut x, mut y) = (vec![0.0; width], vec![0.0; width]);
            a.handler().read_env_into(e, field, &mut x);
            b.handler().read_env_into(e, field, &mut y);
            if x.iter().zip(&y).any(|(p, q)| p.to_bits() != q.to_bits()) {
                return Some(format!("env {e}: {field:?} differs"));
            }
        }
    }
    None
}
