//! The `arena` binary: see `arena --help`.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

fn main() -> std::process::ExitCode {
    // Empty means `python3`, as docs/server.md says of `gpu_python` (clap refused an empty
    // value, so a templated `ARENA_GPU_PYTHON=` stopped every command, the CPU backend's too).
    if std::env::var_os("ARENA_GPU_PYTHON").is_some_and(|v| v.is_empty()) {
        // SAFETY: the process has one thread yet; nothing reads the environment concurrently.
        unsafe { std::env::remove_var("ARENA_GPU_PYTHON") };
    }
    // The WebSocket library's TRACE events print whole frames, and a Connect frame carries the
    // team's token: those are dropped whatever ARENA_LOG asks for (tokens never reach the log).
    let no_frame_dumps = tracing_subscriber::filter::filter_fn(|meta| {
        !(*meta.level() == tracing::Level::TRACE
            && (meta.target().starts_with("tungstenite") || meta.target().starts_with("tokio_tungstenite")))
    });
    // A filter that does not parse says so (it used to fall back to `warn` in silence).
    let filter = match tracing_subscriber::EnvFilter::try_from_env("ARENA_LOG") {
        Ok(filter) => filter,
        Err(e) => {
            if std::env::var_os("ARENA_LOG").is_some() {
                eprintln!("warning: ARENA_LOG is not a log filter ({e}): logging warnings only");
            }
            "warn".into()
        }
    };
    let arena_log = std::env::var("ARENA_LOG");
    if let Some(note) = arena_log.as_deref().ok().and_then(log_filter_note) {
        eprintln!("{note}");
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .finish()
        .with(no_frame_dumps)
        .init();
    let args = match arena_sdk::cli::try_parse::<arena_server::cli::Cli>() {
        Ok(args) => args,
        Err(e) => {
            let note = env_source_note(&e);
            // Printed as clap prints it (help and version included), then the note.
            let _ = e.print();
            if let Some(note) = note {
                eprintln!("{note}");
            }
            std::process::exit(e.exit_code());
        }
    };
    if args.is_one_shot() {
        quiet_on_closed_pipe();
    } else if arena_log.is_err() && std::env::var_os("RUST_LOG").is_some() {
        // A server's operator, who set the usual variable by habit (not every scripted command).
        eprintln!("note: RUST_LOG is not read: ARENA_LOG sets the log filter (e.g. ARENA_LOG=info)");
    }
    match arena_server::cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", arena_server::cli::error_report(&e));
            // 2 for a command line that cannot run as given, as for what clap refuses.
            arena_sdk::cli::exit_code(&e)
        }
    }
}

/// A filter that parses yet logs next to nothing: a bare word that is no level is a target's
/// name (`ARENA_LOG=verbose` logged only target `verbose`: no warning, no error, in silence).
fn log_filter_note(value: &str) -> Option<String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let directives: Vec<&str> = value.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
    if directives
        .iter()
        .any(|d| LEVELS.contains(&d.to_ascii_lowercase().as_str()))
    {
        return None;
    }
    let bare: Vec<&str> = directives
        .into_iter()
        .filter(|d| !d.contains('=') && !d.contains('[') && !d.contains("::"))
        .collect();
    (!bare.is_empty()).then(|| {
        format!(
            "note: ARENA_LOG={value}: {} is taken for a target's name, not a level (error, warn, info, debug, \
             trace): nothing else is logged, warnings and errors included",
            bare.join(", ")
        )
    })
}

/// A bad value clap read from an option's environment variable is reported under the flag's
/// name (`invalid value 'abc' for '--lanes <LANES>'`) though nobody typed the flag: name the
/// variable it came from.
fn env_source_note(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let typed = std::env::args().any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    if typed {
        return None;
    }
    fn env_of(cmd: &clap::Command, long: &str) -> Option<String> {
        cmd.get_arguments()
            .find(|a| a.get_long() == Some(long))
            .and_then(|a| a.get_env())
            .map(|v| v.to_string_lossy().into_owned())
            .or_else(|| cmd.get_subcommands().find_map(|sub| env_of(sub, long)))
    }
    let var = env_of(&<arena_server::cli::Cli as clap::CommandFactory>::command(), long)?;
    std::env::var_os(&var)?;
    Some(format!(
        "note: the value came from the environment variable {var} (the command line has no --{long})"
    ))
}

/// `arena … | head`: when the reader goes away, end quietly as Unix tools do (killed by SIGPIPE)
/// instead of panicking in `println!` (Rust ignores SIGPIPE, so a write fails with EPIPE). Only
/// for one-shot commands: a server keeps ignoring it, so a client that disconnects mid-write is
/// an error on that socket, not the end of the process.
fn quiet_on_closed_pipe() {
    // SAFETY: resets one signal's disposition to its default before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_filter_of_no_level_is_told() {
        assert!(
            log_filter_note("verbose")
                .unwrap()
                .contains("verbose is taken for a target's name")
        );
        for fine in ["info", "warn,arena_server=debug", "arena_server::api=trace", "DEBUG"] {
            assert_eq!(log_filter_note(fine), None, "{fine}");
        }
    }
}
