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
    let flags = Flags::parse();
    let result = flags
        .session
        .client_config("g1-smoke", name)
        .and_then(|config| arena_sdk::cli::run(&config, agent));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
