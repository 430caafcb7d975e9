//! arena-bench: how a tracking run is scored, and what a benchmark is.
//!
//! One responsibility: turn recorded episodes (plain arrays of simulated and reference frames)
//! into named metric values, aggregate them over a benchmark, and read the benchmark
//! definitions (`benchmarks/*.toml`) that say which motions, rules and metrics make a benchmark.
//! Nothing here runs physics; the server feeds trajectories in.
//!
//! - [`emd`]: the exact earth mover's distance solver.
//! - [`metrics`]: the metric registry (EMD, MPJPE family, velocity errors, success, nDTW, ...).
//! - [`aggregate`]: MetricsAggregator, statistics and the report JSON.
//! - [`priority`]: EMD-based prioritised motion sampling for training.
//! - [`spec`]: the benchmark file schema, its validation and episode expansion.

pub mod aggregate;
pub mod emd;
pub mod install;
pub mod metrics;
pub mod priority;
pub mod spec;
