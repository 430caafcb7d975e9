//! arena-bfm: the BFM-Zero (FB-CPR-Aux) baseline on libtorch.
//!
//! One responsibility: train and run MimicArena's baseline agent. The only crate that links
//! libtorch (through `tch`); the server never depends on it.
//! - [`config`]: model sizes (presets) and the agent's hyper-parameters;
//! - [`params`], [`nn`]: named parameters and the networks of BFM_ZERO_FACTS §5.1-5.2;
//! - [`normalizer`], [`model`]: observation/aux-reward normalisers and the whole model;
//! - [`optim`], [`update`]: Adam and one agent update (§5.5-5.6);
//! - [`checkpoint`]: the released BFM-Zero checkpoint layout.

pub mod buffers;
pub mod checkpoint;
pub mod config;
pub mod model;
pub mod nn;
pub mod normalizer;
pub mod optim;
pub mod params;
pub mod update;
