//! The example agents' exit codes (docs/sdk-rust.md): 2 for options that cannot run together,
//! as for those clap refuses; 1 for a run that went wrong. The examples are built by `cargo
//! test` beside the test binaries.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> Option<PathBuf> {
    let deps = std::env::current_exe().ok()?.parent()?.to_path_buf();
    let path = deps.parent()?.join("examples").join(name);
    if path.is_file() {
        return Some(path);
    }
    eprintln!("skipped: no {} (cargo test builds the examples)", path.display());
    None
}

fn run(args: &[&str]) -> Option<(i32, String)> {
    let out = Command::new(example("replay")?)
        .args(args)
        .env_remove("ARENA_SERVER")
        .output()
        .unwrap();
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn options_that_cannot_run_together_exit_2_and_a_failed_run_1() {
    let Some((code, err)) = run(&["--token", "t", "--practice", "stand", "--submission-id", "sub-1"]) else {
        return;
    };
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--practice runs no submission"), "{err}");
    let (code, err) = run(&["--token", "t", "--server", "grpc://127.0.0.1:1", "--encoding", "json"]).unwrap();
    assert_eq!(code, 2, "{err}");
    // clap's own refusal: the same code.
    let (code, _) = run(&["--token", "t", "--max-reconnects", "-1"]).unwrap();
    assert_eq!(code, 2);
    // Nobody listens on port 1: the run fails (unreachable), exit 1.
    let (code, err) = run(&[
        "--token",
        "t",
        "--server",
        "http://127.0.0.1:1",
        "--max-reconnects",
        "0",
    ])
    .unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error:"), "{err}");
}
