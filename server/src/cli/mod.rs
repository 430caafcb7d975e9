//! Command-line interface of the `arena` binary.

mod bench;
mod demo;
mod eval;
mod metrics;
mod motion;
pub mod serve;
pub(crate) mod sim;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "arena",
    version,
    about = "MimicArena: evaluation server for humanoid motion tracking (Unitree G1, 29 DOF)",
    long_about = "MimicArena: evaluation server for humanoid motion tracking (Unitree G1, 29 DOF).\n\n\
        Simulation runs MuJoCo 3.17 at 200 Hz with 50 Hz actions. Motions are G1 CSV files \
        (root xyz, root quaternion xyzw, 29 joint angles; frame rate given with --fps).\n\
        Set ARENA_LOG=info (or debug) for logs."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulator tools: export the robot model, roll out one episode, measure throughput.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Motion tools: generate the built-in motions, inspect a motion file.
    #[command(subcommand)]
    Motion(motion::MotionCommand),
    /// Benchmark definitions: list, validate, show.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Metrics on files: EMD between two frame sets, every tracking metric of a rollout.
    #[command(subcommand)]
    Metrics(metrics::MetricsCommand),
    /// Run a whole benchmark in-process with a built-in policy; prints per-episode metrics and
    /// aggregates, writes the report JSON.
    Eval(eval::EvalArgs),
    /// Run the evaluation server: agent endpoints (WebSocket and gRPC on one port) and the REST API.
    Serve(serve::ServeArgs),
    /// The whole product in one command: an in-process server, the reference-replay agent
    /// through the SDK over a loopback WebSocket, per-motion metrics and the leaderboard.
    Demo(demo::DemoArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Sim(c) => sim::run(c),
        Command::Motion(c) => motion::run(c),
        Command::Bench(c) => bench::run(c),
        Command::Metrics(c) => metrics::run(c),
        Command::Eval(a) => eval::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Demo(a) => demo::run(a),
    }
}
