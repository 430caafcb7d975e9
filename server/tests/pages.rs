//! The web pages in a real Chromium (issue 16): a real `arena serve` with a real submission, then
//! `web/tests/pages.mjs` (playwright-core) visits every page, fails on any console error, checks
//! the leaderboard row, the 3-D replay's pixels, a policy file handed in through a phase page's
//! upload form and its hosted submission's page, the organiser creating a challenge and phases
//! (on another benchmark, so g1-smoke stays open outside phases), a pending submission polled
//! and cancelled, and a dataset download, and leaves a screenshot of each page in
//! `target/web-screenshots/`.
//!
//! Needs Node.js, `web/node_modules` and Chromium (`bash scripts/browser.sh` installs the last
//! two; `make test` runs it and sets ARENA_REQUIRE_BROWSER=1 so that a missing piece fails).

mod common;

use arena_sdk::agents::ReplayAgent;
use common::server::{ADMIN, ServerProc};
use common::tmp;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Why the browser test cannot run here, if it cannot.
fn missing_piece() -> Option<String> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        return Some(format!(
            "no Chromium at {chromium} (bash scripts/browser.sh installs it)"
        ));
    }
    if !repo().join("web/node_modules/playwright-core").is_dir() || !repo().join("web/node_modules/three").is_dir() {
        return Some("web/node_modules is not installed (bash scripts/browser.sh npm)".into());
    }
    match std::process::Command::new("node").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("no node on PATH".into()),
    }
}

#[test]
fn every_page_loads_and_works_in_chromium() {
    if let Some(why) = missing_piece() {
        if std::env::var("ARENA_REQUIRE_BROWSER").as_deref() == Ok("1") {
            panic!("the browser test cannot run: {why}");
        }
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tmp("pages");
    // g1-smoke, and a copy that the test's phases run: a private phase makes its benchmark a
    // hidden test set, which would hide g1-smoke's episodes from the team views under test.
    let benchmarks = dir.join("benchmarks");
    std::fs::create_dir_all(&benchmarks).unwrap();
    let smoke = std::fs::read_to_string(repo().join("benchmarks/g1-smoke.toml")).unwrap();
    std::fs::write(benchmarks.join("g1-smoke.toml"), &smoke).unwrap();
    std::fs::write(
        benchmarks.join("g1-smoke-phases.toml"),
        smoke.replace("name = \"g1-smoke\"", "name = \"g1-smoke-phases\""),
    )
    .unwrap();
    // A joint-position benchmark for the hosted upload through the phase page.
    std::fs::copy(
        repo().join("benchmarks/g1-smoke-robot.toml"),
        benchmarks.join("g1-smoke-robot.toml"),
    )
    .unwrap();
    // A hidden test set: its pages show scores without motions, durations or times.
    std::fs::write(
        benchmarks.join("g1-smoke-hidden.toml"),
        smoke
            .replace("name = \"g1-smoke\"", "name = \"g1-smoke-hidden\"")
            .replace("hidden = false", "hidden = true"),
    )
    .unwrap();
    let server = ServerProc::start(&dir.join("data"), &["--benchmarks-dir", benchmarks.to_str().unwrap()]);
    let token = server.team("walkers");
    let submission = server.submit(&token, &mut ReplayAgent::new(), "replay", None);
    let mut config = arena_sdk::ClientConfig::new(
        server.ws_url(),
        &token,
        arena_sdk::Mode::Submission {
            benchmark: "g1-smoke-hidden".into(),
            submission_id: None,
        },
    );
    config.agent_name = "replay".into();
    let hidden = arena_sdk::client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {})
        .expect("the hidden benchmark's submission runs");
    assert_eq!(hidden.submission_status, "COMPLETED");

    let shots = repo().join("target/web-screenshots");
    let out = std::process::Command::new("node")
        .arg(repo().join("web/tests/pages.mjs"))
        .args(["--base", &format!("http://{}", server.addr)])
        .args(["--admin", ADMIN, "--team", &token])
        .args(["--submission", &submission, "--benchmark", "g1-smoke"])
        .arg("--policy")
        .arg(repo().join("ppo/checkpoints/g1-smoke/policy.onnx"))
        .args(["--hosted-benchmark", "g1-smoke-robot"])
        .args([
            "--hidden-submission",
            &hidden.submission_id,
            "--hidden-benchmark",
            "g1-smoke-hidden",
        ])
        .arg("--out")
        .arg(&shots)
        .env("QUIET", "1")
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser test failed (screenshots in {}):\n{stdout}\n{stderr}\nserver log: {}",
        shots.display(),
        server.log_text()
    );
    std::fs::remove_dir_all(&dir).ok();
}
