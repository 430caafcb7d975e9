//! arena-bfm: the BFM-Zero (FB-CPR-Aux) baseline on libtorch.
//!
//! One responsibility: train and run MimicArena's baseline agent. The only crate that links
//! libtorch (through `tch`); the server never depends on it.
//! - [`config`]: model sizes (presets) and the agent's hyper-parameters;
//! - [`params`] (from arena-torch), [`nn`]: named parameters and the networks of BFM_ZERO_FACTS §5.1-5.2;
//! - [`normalizer`], [`model`]: observation/aux-reward normalisers and the whole model;
//! - [`optim`] (from arena-torch), [`update`]: Adam and one agent update (§5.5-5.6);
//! - [`buffers`]: online, expert and z replay buffers; [`aux_rewards`]: the §4.2 terms;
//! - [`train_config`], [`train`], [`train_log`]: the training loop on the project's
//!   `TrackingEnv` and its CSV logs;
//! - [`agent`]: the tracking agent behind the SDK's `Agent` trait;
//! - [`oracle_io`]: the update's inputs as files, for the PyTorch oracle and the benchmark;
//! - [`checkpoint`]: the released BFM-Zero checkpoint layout.

pub mod agent;
pub mod aux_rewards;
pub mod buffers;
pub mod checkpoint;
pub mod config;
pub mod model;
pub mod nn;
pub mod normalizer;
pub mod oracle_io;
pub mod train;
pub mod train_config;
pub mod train_log;
pub mod update;

/// Named parameters and Adam live in the crate both baselines share.
pub use arena_torch::{optim, params};
