//! The command-line options every agent program shares: the SDK's examples, `arena-bfm agent`
//! and `arena-ppo agent` flatten [`SessionArgs`] into their own arguments, so all of them take
//! the same flags with the same meaning and defaults (the Python SDK's `arena-agent` has its
//! own spelling of some: docs/sdk-python.md). Behind the default `cli` feature (clap).

use crate::agent::Agent;
use crate::client::{self, ClientConfig, DEFAULT_SERVER, Mode};
use crate::protocol::{Encoding, ResetEpisode};

/// The agent protocol's transport: WebSocket (protobuf in binary frames, or JSON with
/// `--encoding json`) or gRPC (HTTP/2, always protobuf).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Transport {
    #[default]
    Ws,
    Grpc,
}

/// Where the server is, who the team is, and what to run.
#[derive(Debug, Clone, clap::Args)]
pub struct SessionArgs {
    /// Server: http://HOST:PORT (its base URL), HOST:PORT, ws://HOST:PORT/api/v1/agent or
    /// grpc://HOST:PORT (no TLS; a grpc:// server means --transport grpc).
    #[arg(long, default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Protocol: WebSocket (ws) or gRPC.
    #[arg(long, value_enum, default_value = "ws")]
    pub transport: Transport,
    /// WebSocket encoding (gRPC is always protobuf).
    #[arg(long, default_value = "binary", value_parser = ["binary", "json"])]
    pub encoding: String,
    /// Team token (ask the server's organiser).
    #[arg(long, env = "ARENA_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Benchmark to run [default: the program's, or with --phase the phase's].
    #[arg(long)]
    pub benchmark: Option<String>,
    /// Challenge phase to submit to (its benchmark applies).
    #[arg(long, default_value = "")]
    pub phase: String,
    /// Resume (or attach to) an existing submission instead of starting one; only its
    /// unfinished episodes run.
    #[arg(long, value_name = "ID")]
    pub submission: Option<String>,
    /// Practice this motion instead of submitting (repeat for several); nothing is stored.
    #[arg(long, value_name = "MOTION")]
    pub practice: Vec<String>,
    /// Largest batch per request (0 = the server's limit).
    #[arg(long, default_value_t = 0)]
    pub max_batch: u32,
    /// Agent name shown on the leaderboard [default: the program's].
    #[arg(long)]
    pub name: Option<String>,
}

impl SessionArgs {
    /// The client's configuration. `default_benchmark` applies without `--benchmark` and
    /// `--phase` (a phase names its own benchmark); `default_name` without `--name`.
    pub fn client_config(&self, default_benchmark: &str, default_name: &str) -> Result<ClientConfig, String> {
        let grpc = self.transport == Transport::Grpc || self.server.starts_with("grpc://");
        if grpc && self.encoding == "json" {
            return Err("--encoding json is for WebSocket: gRPC always carries protobuf (drop --encoding, or use --transport ws)".into());
        }
        let url = client::endpoint(&self.server, grpc)?;
        let benchmark = match (&self.benchmark, self.phase.is_empty()) {
            (Some(b), _) => b.clone(),
            (None, true) => default_benchmark.to_string(),
            (None, false) => String::new(),
        };
        let mode = if self.practice.is_empty() {
            Mode::Submission {
                benchmark,
                submission_id: self.submission.clone(),
            }
        } else {
            if self.submission.is_some() {
                return Err("--practice runs no submission: drop --submission".into());
            }
            Mode::Practice {
                benchmark,
                episodes: self
                    .practice
                    .iter()
                    .map(|m| ResetEpisode {
                        motion: m.clone(),
                        ..Default::default()
                    })
                    .collect(),
            }
        };
        let mut config = ClientConfig::new(url, &self.token, mode);
        config.agent_name = self.name.clone().unwrap_or_else(|| default_name.to_string());
        config.phase = self.phase.clone();
        config.max_batch = self.max_batch;
        config.encoding = if self.encoding == "json" {
            Encoding::Json
        } else {
            Encoding::Binary
        };
        Ok(config)
    }
}

/// Runs `agent` as `config` says, printing each finished episode and the end of the run; an
/// error says why the run did not end well (including a submission that ended FAILED).
pub fn run(config: &ClientConfig, agent: &mut dyn Agent) -> Result<(), String> {
    let summary = client::run_blocking(config, agent, &mut client::print_event).map_err(|e| e.to_string())?;
    client::report_done(&summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        session: SessionArgs,
    }

    fn config(args: &[&str]) -> Result<ClientConfig, String> {
        let cli = Cli::try_parse_from(["agent", "--token", "t"].iter().chain(args)).map_err(|e| e.to_string())?;
        cli.session.client_config("g1-smoke", "prog")
    }

    #[test]
    fn defaults_and_overrides() {
        let c = config(&[]).unwrap();
        assert_eq!(c.url, "ws://127.0.0.1:8080/api/v1/agent");
        assert_eq!(
            (c.agent_name.as_str(), c.encoding, c.max_batch),
            ("prog", Encoding::Binary, 0)
        );
        assert!(matches!(&c.mode, Mode::Submission { benchmark, submission_id: None } if benchmark == "g1-smoke"));
        // A phase names its own benchmark.
        let c = config(&["--phase", "final"]).unwrap();
        assert!(matches!(&c.mode, Mode::Submission { benchmark, .. } if benchmark.is_empty()));
        assert_eq!(c.phase, "final");
        let c = config(&["--server", "grpc://h:1", "--name", "mine", "--submission", "sub-1"]).unwrap();
        assert_eq!((c.url.as_str(), c.agent_name.as_str()), ("grpc://h:1", "mine"));
        assert!(matches!(&c.mode, Mode::Submission { submission_id: Some(s), .. } if s == "sub-1"));
        let c = config(&["--server", "http://h:1", "--transport", "grpc"]).unwrap();
        assert_eq!((c.url.as_str(), c.encoding), ("grpc://h:1", Encoding::Binary));
        // JSON is a WebSocket encoding: asked for with gRPC, it is a usage error, not ignored.
        for args in [
            &["--server", "http://h:1", "--transport", "grpc", "--encoding", "json"][..],
            &["--server", "grpc://h:1", "--encoding", "json"][..],
        ] {
            assert!(
                config(args).unwrap_err().contains("--encoding json is for WebSocket"),
                "{args:?}"
            );
        }
        let c = config(&["--practice", "stand", "--practice", "squat", "--benchmark", "b"]).unwrap();
        assert!(matches!(&c.mode, Mode::Practice { benchmark, episodes } if benchmark == "b" && episodes.len() == 2));
        assert!(
            config(&["--practice", "stand", "--submission", "s"])
                .unwrap_err()
                .contains("--practice")
        );
        assert!(config(&["--server", "https://h:1"]).unwrap_err().contains("https://"));
    }
}
