//! What the example agents share: the SDK's session options (`arena_sdk::cli`) and running.

use arena_sdk::cli::SessionArgs;
use clap::Parser;

#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    session: SessionArgs,
}

/// Runs `agent` as the flags say and prints each finished episode.
pub fn run(agent: &mut dyn arena_sdk::Agent, name: &str) -> std::process::ExitCode {
    // Reconnects and server errors are printed as events (`print_event`); the log adds the rest.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("ARENA_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let flags: Flags = arena_sdk::cli::parse();
    // Options that conflict exit 2, as those clap refuses; a run that went wrong exits 1.
    let config = match flags.session.client_config("g1-smoke", name) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match arena_sdk::cli::run(&config, agent) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
