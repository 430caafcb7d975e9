//! arena-onnx: exported G1 tracking policies run in Rust, for the server to evaluate an uploaded
//! ONNX file itself (issue 40). `engine`: a model loaded once and run on batches of observation
//! rows with tract (pure Rust: no native library to ship or to trust with a hostile file).

pub mod engine;

pub use engine::{Engine, EngineError};
