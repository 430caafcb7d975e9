//! Command-line flags shared by the example agents.

use arena_sdk::client::{self, ClientConfig, Mode};
use arena_sdk::protocol::{Encoding, ResetEpisode};
use clap::Parser;

#[derive(Debug, Parser)]
pub struct Flags {
    /// Agent endpoint of the server: `ws://HOST:PORT/api/v1/agent` (WebSocket) or
    /// `grpc://HOST:PORT` (gRPC).
    #[arg(long, default_value = "ws://127.0.0.1:8080/api/v1/agent")]
    pub server: String,
    /// Team token (ask the server's admin).
    #[arg(long, env = "ARENA_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Benchmark to run [default: g1-smoke, or with --phase the phase's].
    #[arg(long)]
    pub benchmark: Option<String>,
    /// Challenge phase to submit to (its benchmark applies).
    #[arg(long, default_value = "")]
    pub phase: String,
    /// Resume (or attach to) an existing submission instead of starting one.
    #[arg(long)]
    pub submission: Option<String>,
    /// Practice this motion instead of submitting (repeat for several); nothing is stored.
    #[arg(long)]
    pub practice: Vec<String>,
    /// WebSocket encoding (gRPC is always protobuf).
    #[arg(long, default_value = "binary", value_parser = ["binary", "json"])]
    pub encoding: String,
    /// Largest batch per request (0 = the server's limit).
    #[arg(long, default_value_t = 0)]
    pub max_batch: u32,
}

/// Runs `agent` as the flags say and prints each finished episode.
pub fn run(agent: &mut dyn arena_sdk::Agent, name: &str) -> std::process::ExitCode {
    // Reconnects and server errors are printed as events (`print_event`); the log adds the rest.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("ARENA_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let flags = Flags::parse();
    // A phase names its own benchmark: the default applies only without one.
    let benchmark = flags.benchmark.clone().unwrap_or_else(|| {
        if flags.phase.is_empty() {
            "g1-smoke".into()
        } else {
            String::new()
        }
    });
    let mode = if flags.practice.is_empty() {
        Mode::Submission {
            benchmark: benchmark.clone(),
            submission_id: flags.submission.clone(),
        }
    } else {
        Mode::Practice {
            benchmark: benchmark.clone(),
            episodes: flags
                .practice
                .iter()
                .map(|m| ResetEpisode {
                    motion: m.clone(),
                    ..Default::default()
                })
                .collect(),
        }
    };
    let mut config = ClientConfig::new(&flags.server, &flags.token, mode);
    config.agent_name = name.into();
    config.max_batch = flags.max_batch;
    config.phase = flags.phase.clone();
    config.encoding = if flags.encoding == "json" {
        Encoding::Json
    } else {
        Encoding::Binary
    };
    let result = client::run_blocking(&config, agent, &mut client::print_event);
    match result {
        Ok(summary) => match client::report_done(&summary) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
