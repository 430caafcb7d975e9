//! arena-ppo: a PPO motion tracker in the BeyondMimic recipe (as mjlab reimplements it), trained
//! on the project's own simulator and served through the arena's robot interface.
//! - [`config`]: the training configuration (TOML, validated naming the key);
//! - [`mdp`]: observations, rewards and terminations, term by term (docs/ppo-tracker.md §2-5);
//! - [`sampler`]: adaptive sampling of start frames by failure rate (§6.2);
//! - [`envs`]: the tracking MDP on `TrackingEnv` in the joint-position action mode;
//! - [`sim_tape`]: the envs' simulator calls, recorded to replay them on the simulator alone
//!   (the training throughput benchmark's reference);
//! - [`policy`]: the actor-critic with empirical normalisers (rsl_rl's);
//! - [`ppo`]: rollout storage, GAE and the PPO update (rsl_rl 3.0.0's);
//! - `side_by_side`: the actor's and the critic's halves of libtorch work on two threads;
//! - [`train`]: the loop, logs, evaluation, checkpoints and exact resume; the trained actor is
//!   served by the SDK's plain-Rust `arena_sdk::tracker::TrackerAgent`;
//! - [`onnx`]: the actor as ONNX in the mjlab convention;
//! - [`oracle_io`]: one update's inputs as the PyTorch oracle reads them (parity test, benchmark).
//!
//! The libtorch pieces shared with the BFM-Zero baseline (parameters, Adam, run folders, logs)
//! come from `arena-torch`.

pub mod config;
pub mod envs;
pub mod mdp;
pub mod onnx;
pub mod oracle_io;
pub mod policy;
pub mod ppo;
pub mod sampler;
mod side_by_side;
pub mod sim_tape;
pub mod train;
