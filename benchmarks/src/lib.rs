//! arena-bench: how a tracking run is scored, and what a benchmark is.
//!
//! One responsibility: turn recorded episodes (plain arrays of simulated and reference frames)
//! into named metric values, aggregate them over a benchmark, and read the benchmark
//! definitions (`benchmarks/*.toml`) that say which motions, rules and metrics make a benchmark.
//! Nothing here runs physics; the server feeds trajectories in.

pub mod emd;
pub mod spec;
