//! The command-line options every agent program shares: the SDK's examples, `arena-bfm agent`
//! and `arena-ppo agent` flatten [`SessionArgs`] into their own arguments, so all of them take
//! the same flags with the same meaning and defaults (the Python SDK's `arena-agent` has its
//! own spelling of some: docs/sdk-python.md). Behind the default `cli` feature (clap).

use crate::agent::Agent;
use crate::client::{self, ClientConfig, ClientError, ClientEvent, DEFAULT_SERVER, Mode};
use crate::protocol::{Encoding, ResetEpisode};
use std::sync::{Arc, Mutex};

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
    #[arg(long, env = "ARENA_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Protocol: WebSocket (ws) or gRPC [default: from the server's scheme: grpc for
    /// grpc://, else ws].
    #[arg(long, value_enum)]
    pub transport: Option<Transport>,
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
    /// unfinished episodes run. `--submission-id` is the same flag (the Python SDK's spelling).
    #[arg(long, value_name = "ID", visible_alias = "submission-id")]
    pub submission: Option<String>,
    /// Practice this motion instead of submitting (repeat for several); nothing is stored.
    #[arg(long, value_name = "MOTION")]
    pub practice: Vec<String>,
    /// Largest batch per request (0 = the server's limit).
    #[arg(long, default_value_t = 0)]
    pub max_batch: u32,
    /// Connection attempts after a lost connection before giving up (the backoff doubles from
    /// 0.2 s to 5 s; a connection on which an episode finished starts the count again). After
    /// the server said it is stopping (a deploy, a restart), attempts count only once it has
    /// not taken a session for 300 s.
    #[arg(long, default_value_t = 10)]
    pub max_reconnects: u32,
    /// Agent name shown on the leaderboard [default: the program's]. `--agent-name` is the same
    /// flag (the Python SDK's spelling).
    #[arg(long, visible_alias = "agent-name")]
    pub name: Option<String>,
    /// Ask for whole `reference_goal` groups in every request instead of each row once
    /// (docs/protocol.md §5; the agent sees the same values either way, with about 4.6 times
    /// more bytes on the wire for BFM-Zero's benchmarks).
    #[arg(long)]
    pub whole_goal_rows: bool,
    /// Skip the check before a new submission: by default the program first connects in
    /// practice mode (nothing is stored; one connect in the team's request rate) and refuses to submit when the agent cannot
    /// serve the session's spec (a submission counts against a phase's quota once made). A
    /// private phase offers no practice: there the check cannot run and the submission's own
    /// session finds out.
    #[arg(long)]
    pub no_check: bool,
}

/// Parses the program's command line as `P` with every option that takes a value taking a
/// negative number too: clap reads `--fps -5` as an unknown flag `-5` otherwise, where the
/// option's own range check says what is wrong with it. What the arena's programs parse with.
pub fn try_parse<P: clap::Parser>() -> Result<P, clap::Error> {
    try_parse_from(std::env::args_os())
}

/// [`try_parse`] of the given arguments (the program's name first).
pub fn try_parse_from<P: clap::Parser>(
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> Result<P, clap::Error> {
    fn negative_numbers_as_values(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|arg| match arg.get_action().takes_values() {
            true => arg.allow_negative_numbers(true),
            false => arg,
        })
        .mut_subcommands(negative_numbers_as_values)
    }
    let mut command = negative_numbers_as_values(P::command());
    let mut matches = command.try_get_matches_from_mut(args)?;
    P::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut command))
}

/// [`try_parse`], printing clap's answer and exiting as clap does (help, version, errors).
pub fn parse<P: clap::Parser>() -> P {
    try_parse().unwrap_or_else(|e| e.exit())
}

/// A command line that cannot run as given (conflicting or malformed options): the programs
/// exit 2 for it, as for the options clap itself refuses, and 1 for a run that went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The exit code for a run's error: 2 when it is a [`UsageError`] (anywhere in its chain), else 1.
pub fn exit_code(error: &anyhow::Error) -> std::process::ExitCode {
    match error.chain().any(|e| e.is::<UsageError>()) {
        true => std::process::ExitCode::from(2),
        false => std::process::ExitCode::FAILURE,
    }
}

impl SessionArgs {
    /// The client's configuration. `default_benchmark` applies without `--benchmark`, `--phase`
    /// and `--submission` (a phase and a submission name their own benchmark); `default_name`
    /// without `--name`.
    pub fn client_config(&self, default_benchmark: &str, default_name: &str) -> Result<ClientConfig, UsageError> {
        let grpc_url = self.server.starts_with("grpc://");
        let grpc = match self.transport {
            Some(Transport::Ws) if grpc_url => {
                return Err(UsageError(format!(
                    "--server {} is a gRPC address but --transport ws was asked for: drop --transport, or give http://HOST:PORT",
                    self.server
                )));
            }
            Some(Transport::Ws) => false,
            Some(Transport::Grpc) => true,
            None => grpc_url,
        };
        if grpc && self.encoding == "json" {
            return Err(UsageError(
                "--encoding json is for WebSocket: gRPC always carries protobuf (drop --encoding, or use --transport ws)"
                    .into(),
            ));
        }
        let url = client::endpoint(&self.server, grpc).map_err(UsageError)?;
        // Resuming a submission of another benchmark with the program's default was refused
        // ("runs benchmark X, not g1-smoke"): the hint after a lost run says `--submission ID`.
        let benchmark = match (&self.benchmark, self.phase.is_empty() && self.submission.is_none()) {
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
                return Err(UsageError("--practice runs no submission: drop --submission".into()));
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
        config.max_reconnects = self.max_reconnects;
        config.reference_goal_once = !self.whole_goal_rows;
        config.spec_check = !self.no_check;
        config.encoding = if self.encoding == "json" {
            Encoding::Json
        } else {
            Encoding::Binary
        };
        Ok(config)
    }
}

/// Runs `agent` as `config` says, printing each finished episode and the end of the run; an
/// error says why the run did not end well (including a submission that ended FAILED) and, when
/// a submission was left RUNNING, how to finish it.
pub fn run(config: &ClientConfig, agent: &mut dyn Agent) -> Result<(), String> {
    let submission = Arc::new(Mutex::new(String::new()));
    say_how_to_resume_on_interrupt(submission.clone(), config.mode.clone());
    let gains_given = !config.gain_preset.is_empty() || !config.joint_stiffness.is_empty();
    let result = client::run_blocking(config, agent, &mut |event| {
        if let ClientEvent::Connected(c) = &event {
            lock(&submission).clone_from(&c.submission_id);
            let normalized = c.spec.as_ref().is_some_and(|s| s.action_mode != "joint_position");
            if gains_given && normalized {
                // The protocol ignores gains in the normalized mode: said, not passed in silence.
                eprintln!(
                    "note: {} takes normalized actions and applies its own PD gains: the gains given are ignored",
                    c.benchmark
                );
            }
        }
        client::print_event(event)
    });
    let submission = lock(&submission).clone();
    match result {
        Ok(summary) => client::report_done(&summary),
        Err(e) => Err(with_resume_hint(e.to_string(), &e, &submission, &config.mode)),
    }
}

fn lock(submission: &Mutex<String>) -> std::sync::MutexGuard<'_, String> {
    submission.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Ctrl-C (SIGINT) ends the program with 130, as a shell expects, after saying that the
/// submission is left RUNNING and how to finish it (the server sees the connection close and
/// puts the episodes it was running back in the queue). Its own thread waits for the signal,
/// so the client's runtime is not involved; without the handler the program would die silent.
fn say_how_to_resume_on_interrupt(submission: Arc<Mutex<String>>, mode: Mode) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return;
    };
    // Listened for from here, before the run connects: registered on the thread below, a
    // signal sent at once would still have killed the program silently.
    #[cfg(unix)]
    let interrupt = {
        let _entered = runtime.enter();
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            Ok(signal) => signal,
            Err(e) => {
                tracing::debug!("no Ctrl-C handler: {e}");
                return;
            }
        }
    };
    let waiting = std::thread::Builder::new().name("interrupt".into()).spawn(move || {
        #[cfg(unix)]
        let received = {
            let mut interrupt = interrupt;
            runtime.block_on(interrupt.recv()).is_some()
        };
        #[cfg(not(unix))]
        let received = runtime.block_on(tokio::signal::ctrl_c()).is_ok();
        if !received {
            return;
        }
        let submission = lock(&submission).clone();
        let hint = with_hint_for("interrupted".into(), &submission, &mode, false);
        eprintln!("\nerror: {hint}");
        std::process::exit(130);
    });
    if let Err(e) = waiting {
        tracing::debug!("no Ctrl-C handler: {e}");
    }
}

/// `message`, and for a submission the error left RUNNING, the flag that finishes it: its
/// finished episodes are kept and only the rest run again.
fn with_resume_hint(message: String, error: &ClientError, submission: &str, mode: &Mode) -> String {
    if matches!(error, ClientError::Refused { .. } | ClientError::Config(_)) {
        return message;
    }
    with_hint_for(message, submission, mode, matches!(error, ClientError::Agent(_)))
}

/// `message` and, for a submission left RUNNING, how to finish it (`cannot_serve`: the agent
/// told the server it cannot serve the benchmark).
fn with_hint_for(message: String, submission: &str, mode: &Mode, cannot_serve: bool) -> String {
    let left_running = !submission.is_empty() && matches!(mode, Mode::Submission { .. });
    if left_running && cannot_serve {
        // The client told the server (`agent_cannot_serve`): resuming with the same agent
        // would fail the same way.
        return format!(
            "{message}
submission {submission}: the server ends it FAILED if it had finished no episode; one with finished episodes stays RUNNING for an agent that serves the benchmark (--submission {submission})"
        );
    }
    match left_running {
        true => format!(
            "{message}\nsubmission {submission} is left RUNNING with its finished episodes kept: run again with \
             --submission {submission} to finish it"
        ),
        false => message,
    }
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
        cli.session.client_config("g1-smoke", "prog").map_err(|e| e.0)
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
        // A submission names its own benchmark too (the program's default was refused for any
        // other: the resume hint after a lost run gives `--submission ID` alone).
        assert!(
            matches!(&c.mode, Mode::Submission { submission_id: Some(s), benchmark } if s == "sub-1" && benchmark.is_empty())
        );
        let c = config(&["--submission", "sub-1", "--benchmark", "b"]).unwrap();
        assert!(matches!(&c.mode, Mode::Submission { benchmark, .. } if benchmark == "b"));
        let c = config(&["--server", "http://h:1", "--transport", "grpc"]).unwrap();
        assert_eq!((c.url.as_str(), c.encoding), ("grpc://h:1", Encoding::Binary));
        // A grpc:// address with --transport ws is a contradiction, refused (it ran gRPC).
        assert!(
            config(&["--server", "grpc://h:1", "--transport", "ws"])
                .unwrap_err()
                .contains("is a gRPC address but --transport ws")
        );
        assert_eq!(
            config(&["--server", "h:1", "--transport", "ws"]).unwrap().url,
            "ws://h:1/api/v1/agent"
        );
        // The command line checks a new submission's spec first, unless --no-check.
        assert!(config(&[]).unwrap().spec_check);
        assert!(!config(&["--no-check"]).unwrap().spec_check);
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

    #[test]
    fn a_negative_number_is_a_value_its_option_judges() {
        #[derive(Debug, Parser)]
        struct Numbers {
            #[arg(long)]
            signed: Option<i32>,
            #[arg(long)]
            unsigned: Option<u32>,
            #[command(subcommand)]
            sub: Option<Sub>,
        }
        #[derive(Debug, clap::Subcommand)]
        enum Sub {
            Run {
                #[arg(long)]
                fps: f64,
            },
        }
        let n: Numbers = try_parse_from(["p", "--signed", "-5"]).unwrap();
        assert_eq!(n.signed, Some(-5));
        let e = try_parse_from::<Numbers>(["p", "--unsigned", "-5"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid value '-5' for '--unsigned"), "{e}");
        let n: Numbers = try_parse_from(["p", "run", "--fps", "-2.5"]).unwrap();
        assert!(matches!(n.sub, Some(Sub::Run { fps }) if fps == -2.5));
        // Without the setting clap reads it as a flag.
        assert!(Numbers::try_parse_from(["p", "--signed", "-5"]).is_err());
    }

    #[test]
    fn the_python_sdks_spellings_and_reconnects() {
        let c = config(&[
            "--submission-id",
            "sub-2",
            "--agent-name",
            "theirs",
            "--max-reconnects",
            "3",
        ])
        .unwrap();
        assert!(matches!(&c.mode, Mode::Submission { submission_id: Some(s), .. } if s == "sub-2"));
        assert_eq!((c.agent_name.as_str(), c.max_reconnects), ("theirs", 3));
        assert_eq!(config(&[]).unwrap().max_reconnects, 10);
    }

    #[test]
    fn usage_errors_exit_2_and_other_errors_1() {
        let usage = anyhow::Error::new(UsageError("--practice runs no submission".into())).context("agent");
        assert_eq!(exit_code(&usage), std::process::ExitCode::from(2));
        assert_eq!(
            exit_code(&anyhow::anyhow!("the server went away")),
            std::process::ExitCode::FAILURE
        );
    }

    #[test]
    fn a_submission_left_running_says_how_to_finish_it() {
        let submission = Mode::Submission {
            benchmark: "b".into(),
            submission_id: None,
        };
        let lost = ClientError::Unreachable {
            attempts: 11,
            last_error: "refused".into(),
        };
        let hint = with_resume_hint("gave up".into(), &lost, "sub-9", &submission);
        assert!(
            hint.starts_with("gave up\n") && hint.contains("--submission sub-9"),
            "{hint}"
        );
        // Before a submission exists, after a refusal, or in practice, there is nothing to resume.
        assert_eq!(with_resume_hint("x".into(), &lost, "", &submission), "x");
        let refused = ClientError::Refused {
            code: "quota_exceeded".into(),
            message: String::new(),
            limit: 1,
            resets_at: String::new(),
        };
        assert_eq!(with_resume_hint("x".into(), &refused, "sub-9", &submission), "x");
        let practice = Mode::Practice {
            benchmark: "b".into(),
            episodes: vec![],
        };
        assert_eq!(with_resume_hint("x".into(), &lost, "sub-9", &practice), "x");
    }
}
