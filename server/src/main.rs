//! arena-server: the `arena` binary. For now its command line drives the simulator
//! (`arena sim ...`), the motion tools (`arena motion ...`), benchmark definitions and metrics
//! (`arena bench ...`, `arena metrics ...`), in-process evaluation (`arena eval`) and the demo
//! run (`arena demo`); the evaluation server itself arrives with later issues.

mod cli;
mod eval;

use clap::Parser;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("ARENA_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
