//! arena-sdk: everything a participant needs to connect an agent to a MimicArena server.
//! The wire protocol v1 (one schema, JSON and protobuf encodings), the [`Agent`] trait, the
//! observation layout a session announces, and WebSocket and gRPC clients that run submissions
//! and practice sessions. It carries no simulator: the local runner (an agent against an
//! in-process simulator) is in `arena-runner`.

pub mod agent;
pub mod agents;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod goal_rows;
pub mod grpc_codec;
pub mod layout;
pub mod protocol;
pub mod tracker;

pub use agent::{Agent, Batch};
pub use client::{ClientConfig, ClientError, ClientEvent, Mode, RunSummary};
pub use layout::ObservationLayout;
