//! `arena admin` against a real `arena serve` (issue 16, item 5): an organiser's whole round from
//! a terminal, with `--json` output, and clear errors for a bad token, a bad flag value and a
//! server that is not there.

mod common;

use arena_sdk::agents::ReplayAgent;
use common::server::{ADMIN, ServerProc};
use common::{arena, ok, tmp};
use serde_json::Value;

fn admin(server: &ServerProc, args: &[&str]) -> std::process::Output {
    let url = format!("http://{}", server.addr);
    let mut all = vec!["admin", "--server", &url, "--admin-token", ADMIN];
    all.extend_from_slice(args);
    arena(&all)
}

fn admin_json(server: &ServerProc, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&ok(&admin(server, &all))).unwrap()
}

#[test]
fn an_organiser_runs_a_challenge_from_the_terminal() {
    let dir = tmp("admin-cli");
    let server = ServerProc::start(&dir.join("data"), &[]);

    let c = admin_json(&server, &["challenges", "create", "--id", "cup", "--title", "G1 Cup"]);
    assert_eq!(c["id"], "cup");
    let p = admin_json(
        &server,
        &[
            "phases",
            "create",
            "--challenge",
            "cup",
            "--id",
            "dev",
            "--benchmark",
            "g1-smoke",
            "--starts-at",
            "2026-01-01T00:00:00Z",
            "--ends-at",
            "2099-01-01T00:00:00Z",
            "--leaderboard",
            "public",
            "--max-per-day",
            "5",
        ],
    );
    assert_eq!(p["state"], "open");
    assert_eq!(p["max_submissions_per_day"], 5);
    // 0 is refused (no limit or no submissions?): `none` lifts the limit.
    let out = admin(&server, &["phases", "update", "dev", "--max-per-day", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("`none` for no limit"), "{err}");
    let updated = admin_json(&server, &["phases", "update", "dev", "--max-per-day", "none"]);
    assert_eq!(updated["max_submissions_per_day"], Value::Null);
    // Groups set, then lifted again.
    let updated = admin_json(&server, &["phases", "update", "dev", "--groups", "state"]);
    assert_eq!(updated["observation_groups"], serde_json::json!(["state"]));
    let updated = admin_json(&server, &["phases", "update", "dev", "--groups", "all"]);
    assert_eq!(updated["observation_groups"], Value::Null);
    // An id is one path segment: "dev?" names no phase (it updated "dev" before).
    let out = admin(&server, &["phases", "update", "dev?", "--max-total", "3"]);
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let unchanged = admin_json(&server, &["phases", "list", "--challenge", "cup"]);
    assert_eq!(unchanged["phases"][0]["id"], "dev", "{unchanged}");
    assert_eq!(
        unchanged["phases"][0]["max_submissions_total"],
        Value::Null,
        "{unchanged}"
    );
    let listed = ok(&admin(&server, &["phases", "list", "--challenge", "cup"]));
    assert!(listed.lines().next().unwrap().starts_with("id"), "{listed}");
    assert!(
        listed.contains("dev") && listed.contains("g1-smoke") && listed.contains("open"),
        "{listed}"
    );

    let team = admin_json(
        &server,
        &["teams", "create", "alpha", "--member", "Ada <ada@example.org>"],
    );
    let token = team["token"].as_str().unwrap().to_string();
    let team_id = team["team"]["id"].to_string();
    assert_eq!(team["members"][0]["email"], "ada@example.org");
    let extra = admin_json(&server, &["tokens", "create", &team_id, "--label", "laptop"]);
    let token_id = extra["token_info"]["id"].as_str().unwrap().to_string();
    let revoked = admin_json(&server, &["tokens", "revoke", &team_id, &token_id]);
    assert!(revoked["token_info"]["revoked_at"].is_i64());
    let tokens = ok(&admin(&server, &["tokens", "list", &team_id]));
    assert_eq!(tokens.lines().count(), 3, "{tokens}");
    // A team by its name too (issue 39); an unknown name is an error naming the teams there are.
    let by_name = admin_json(&server, &["tokens", "create", "alpha", "--label", "by-name"]);
    assert_eq!(by_name["token_info"]["label"], "by-name");
    assert_eq!(ok(&admin(&server, &["tokens", "list", "alpha"])).lines().count(), 4);
    let shown = ok(&admin(&server, &["teams", "show", "alpha"]));
    assert!(shown.contains("team alpha"), "{shown}");
    // A name that reads as an id with a sign would have `tokens create +1` mint a token for
    // team 1: such names are refused.
    for name in ["+1", "+007"] {
        let out = admin(&server, &["teams", "create", name]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("reads as a team id"),
            "{name}: {stderr}"
        );
    }
    let unknown = admin(&server, &["tokens", "list", "alpah"]);
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("no team named \"alpah\"") && stderr.contains("alpha"),
        "{stderr}"
    );

    // The team submits in the phase; the organiser marks it a baseline and re-scores it.
    let id = server.submit(&token, &mut ReplayAgent::new(), "replay", Some("dev"));
    let listed = ok(&admin(&server, &["submissions", "list"]));
    assert!(listed.contains(&id) && listed.contains("COMPLETED"), "{listed}");
    // Lists carry the leaderboard row's numbers (issue 39): scored of all, failed, success, score.
    let row = listed.lines().find(|l| l.contains(&id)).unwrap();
    assert!(
        row.contains("6/6") && row.contains("0% success") && row.contains("emd 0."),
        "{listed}"
    );
    // The team sees the same for its own submissions, and the quota it has used and left.
    let (_, mine) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(mine["submissions"][0]["scores"]["scored"], 6, "{mine}");
    assert_eq!(mine["submissions"][0]["results_hidden"], false);
    assert_eq!(mine["quotas"][0]["phase"], "dev", "{mine}");
    assert_eq!(mine["quotas"][0]["used_total"], 1);
    assert_eq!(
        mine["quotas"][0]["left_today"],
        Value::Null,
        "no daily limit left after the update"
    );
    let b = admin_json(&server, &["submissions", "baseline", &id]);
    assert_eq!(b["baseline"], true);
    let r = admin_json(&server, &["submissions", "rescore", &id]);
    assert_eq!(r["rescored_episodes"], 6);
    let shown = ok(&admin(&server, &["submissions", "show", &id]));
    assert!(shown.contains("6 finished"), "{shown}");
    let unmarked = ok(&admin(&server, &["submissions", "baseline", &id, "--off"]));
    assert!(unmarked.contains("is not a baseline"), "{unmarked}");

    // Errors say what was wrong.
    let out = admin(&server, &["submissions", "cancel", &id]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("409") && err.contains("already COMPLETED"), "{err}");
    let url = format!("http://{}", server.addr);
    let out = arena(&["admin", "--server", &url, "--admin-token", "wrong", "teams", "list"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = admin(&server, &["teams", "create", "beta", "--member", "no email"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected \"Name <email>\""));
    let out = admin(
        &server,
        &[
            "phases",
            "create",
            "--challenge",
            "cup",
            "--id",
            "late",
            "--benchmark",
            "g1-smoke",
        ],
    );
    // A command line that cannot run exits 2 (as clap's refusals), a failed run 1.
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs --starts-at and --ends-at"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = arena(&[
        "admin",
        "--server",
        "http://127.0.0.1:1",
        "--admin-token",
        "x",
        "teams",
        "list",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is `arena serve` running there?"));
    let out = arena(&["admin", "--server", &url, "teams", "list"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no admin token"));
}
