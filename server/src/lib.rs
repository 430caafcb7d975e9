//! arena-server: the evaluation server behind the `arena` binary. The orchestrator runs a
//! benchmark's episodes for a connected agent, the gateway speaks protocol v1 over WebSocket,
//! the REST API serves submissions, results and leaderboards, storage keeps metadata (SQLite or
//! PostgreSQL), objects keeps trajectories (HDF5) and reports (a folder or an S3 bucket); the command line also drives the simulator, motion,
//! benchmark and metric tools.

pub mod access;
pub mod api;
pub mod app;
pub mod attachments;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod connections;
pub mod datasets;
pub mod episode_views;
pub mod gateway;
pub mod health;
pub mod hosted;
pub mod leaderboard;
pub mod memory;
pub mod objects;
pub mod orchestrator;
pub mod outbox;
pub mod policy_check;
pub mod proxy_protocol;
pub mod refusal;
pub mod replica_lock;
pub mod results;
pub mod session_stop;
pub mod state;
pub mod storage;
pub mod team_sessions;
pub mod trajectory_store;
pub mod upload_checks;
pub mod web;
pub mod writes_in_flight;
