//! arena-sdk: everything a participant needs to connect an agent to a MimicArena server.
//! The wire protocol v1 (one schema, JSON and protobuf encodings), the [`Agent`] trait, a
//! WebSocket client that runs submissions and practice sessions, and a local runner that drives
//! an agent against an in-process simulator with no server.

pub mod agent;
pub mod agents;
pub mod client;
pub mod episode;
pub mod local;
pub mod protocol;

pub use agent::{Agent, Batch};
pub use client::{ClientConfig, ClientError, ClientEvent, Mode, RunSummary};
