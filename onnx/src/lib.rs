//! arena-onnx: exported G1 tracking policies run in Rust, for the server to evaluate an uploaded
//! ONNX file itself (issue 40). `engine`: a model loaded once and run on batches of observation
//! rows with tract (pure Rust: no native library to ship or to trust with a hostile file), after
//! `checks` (size, operators, external data: what an uploaded file must be);
//! `config`: the file's metadata in the mjlab / BeyondMimic or holosoma convention, with
//! overrides, resolved into what the arena needs; `terms`: the policy's observation terms from
//! the arena's robot-interface groups; `agent`: all of it as an `arena_sdk::Agent`.

pub mod agent;
pub mod checks;
pub mod config;
pub mod engine;
pub mod terms;

pub use agent::{OnnxAgent, OnnxPolicy};
pub use checks::{Limits, check_model};
pub use config::{PolicyConfig, PolicyOverrides, Supply, UnsupportedPolicy};
pub use engine::{Engine, EngineError};
