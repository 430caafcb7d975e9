//! Command-line interface of the `arena` binary.

mod admin;
mod audit;
mod dataset;
mod demo;
pub mod serve;

// The tools that need no server live in their own crate.
pub use arena_tools::check_writable;
use arena_tools::{bench, eval, metrics, motion, sim};

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
    /// Motion tools: generate the built-in motions, inspect a motion file, export a benchmark's
    /// clips as mjlab NPZ.
    #[command(subcommand)]
    Motion(motion::MotionCommand),
    /// Benchmark definitions: list, validate, show.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Metrics on files: EMD between two frame sets, every tracking metric of a rollout.
    #[command(subcommand)]
    Metrics(metrics::MetricsCommand),
    /// The organiser's terminal: challenges, phases, teams, tokens and submissions of a running
    /// server, over its REST API (--server, --admin-token; --json prints the API's JSON).
    Admin(admin::AdminArgs),
    /// Trajectory datasets: export a benchmark's or a phase's episodes (HDF5, jsonl.gz, card).
    #[command(subcommand)]
    Dataset(Box<dataset::DatasetCommand>),
    /// Re-run a submission's stored episodes (seeds, DR draws, recorded actions) on the cpu or
    /// gpu backend and report how each trajectory and its metrics differ from the stored and
    /// published ones; fails when what the server publishes is not the result of the stored file.
    Audit(Box<audit::AuditArgs>),
    /// Run a whole benchmark in-process with a built-in policy (--policy) or an exported ONNX
    /// policy (--onnx); prints per-episode metrics and aggregates, writes the report JSON.
    Eval(eval::EvalArgs),
    /// Run the evaluation server: agent endpoints (WebSocket and gRPC on one port) and the REST API.
    Serve(serve::ServeArgs),
    /// The whole product in one command: an in-process server, the reference-replay agent
    /// through the SDK over a loopback WebSocket, per-motion metrics and the leaderboard.
    Demo(demo::DemoArgs),
    /// (Internal) the server's check of an uploaded policy file, in a child process within a
    /// memory and CPU budget: prints {"problems": [...]}.
    #[command(name = "check-policy-file", hide = true)]
    CheckPolicyFile(CheckPolicyFileArgs),
}

#[derive(Debug, clap::Args)]
pub struct CheckPolicyFileArgs {
    /// The overrides stored with the upload (JSON).
    #[arg(long, default_value = "{}")]
    overrides: String,
    /// The policy file.
    path: std::path::PathBuf,
}

/// An error and its causes on one line, each cause once: libraries often repeat their source in
/// their own message, and anyhow's `{:#}` would print the same text again for every level.
pub fn error_report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Opens the database of a server that has run, for the commands that read one (`dataset
/// export`, `audit`): unlike `serve`, a missing SQLite file is an error rather than a new empty
/// database, so a mistyped `--data-dir` does not report "0 episodes" as a success, and a schema
/// older than this arena's is refused rather than upgraded.
pub async fn open_existing_storage(config: &crate::config::ServerConfig) -> anyhow::Result<crate::storage::Storage> {
    let url = config.database_url();
    if config.database_url.is_empty() {
        let file = config.data_dir.join("arena.db");
        if !file.is_file() {
            anyhow::bail!(
                "no database at {}: --data-dir (ARENA_DATA_DIR, now {}) must be the data folder of a server that has run, or give --database-url",
                file.display(),
                config.data_dir.display()
            );
        }
    }
    // Its schema as it is: an upgrade is `arena serve`'s (a newer binary's export upgraded a live
    // older server's database, which that server then refused at its next start).
    crate::storage::Storage::connect_as_found(&url)
        .await
        .map_err(|e| anyhow::anyhow!("opening the database {}: {e}", crate::storage::redact_url(&url)))
}

impl Cli {
    /// Whether the command only prints and exits (its output may be piped into `head`), as
    /// opposed to the commands that run a server.
    pub fn is_one_shot(&self) -> bool {
        !matches!(self.command, Command::Serve(_) | Command::Demo(_))
    }
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Sim(c) => sim::run(c),
        Command::Motion(c) => motion::run(c),
        Command::Bench(c) => bench::run(c),
        Command::Metrics(c) => metrics::run(c),
        Command::Admin(a) => admin::run(a),
        Command::Dataset(c) => dataset::run(*c),
        Command::Audit(a) => audit::run(*a),
        Command::Eval(a) => eval::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Demo(a) => demo::run(a),
        Command::CheckPolicyFile(a) => crate::policy_check::run_child(&a.path, &a.overrides),
    }
}

#[cfg(test)]
mod tests {
    use super::{Cli, error_report};
    use clap::CommandFactory;

    /// Every argument of every command has its own id, long flag and short flag. clap checks
    /// this only in debug builds and the tests run in release, where two flattened argument
    /// groups defining the same flag would go unnoticed and one of them would be ignored.
    #[test]
    fn no_command_defines_a_flag_twice() {
        fn check(cmd: &clap::Command, path: &str) {
            let (mut ids, mut longs, mut shorts) = (Vec::new(), Vec::new(), Vec::new());
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                assert!(!ids.contains(&id), "`{path}`: argument `{id}` is defined twice");
                ids.push(id);
                if let Some(long) = arg.get_long() {
                    assert!(!longs.contains(&long), "`{path}`: --{long} is defined twice");
                    longs.push(long);
                }
                if let Some(short) = arg.get_short() {
                    assert!(!shorts.contains(&short), "`{path}`: -{short} is defined twice");
                    shorts.push(short);
                }
            }
            for sub in cmd.get_subcommands() {
                check(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        check(&Cli::command(), "arena");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("database: opening x: {source}")]
    struct Wrapping {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = std::io::Error::other("no such table: episodes");
        let e = anyhow::Error::new(Wrapping { source: io }).context("starting the server");
        assert_eq!(
            error_report(&e),
            "starting the server: database: opening x: no such table: episodes"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_report(&plain), "outer: inner");
    }
}
