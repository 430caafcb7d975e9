//! End to end over real sockets: a real `arena serve` process, the SDK's WebSocket client (or a
//! raw protocol client for misbehaviour), results through the REST API, the database and the
//! HDF5 file.

mod common;

use arena_data::{episode_part, trajectory_file};
use arena_runner::local::{LocalOptions, run_local};
use arena_sdk::agents::ReplayAgent;
use arena_sdk::client::{self, ClientConfig, ClientEvent, Mode};
use arena_sdk::protocol::{Encoding, ResetEpisode};
use common::server::{ADMIN, PgDb, ServerProc};
use common::tmp;
use serde_json::Value;
use std::path::Path;

fn submit(url: &str, token: &str, encoding: Encoding) -> client::RunSummary {
    let mut config = ClientConfig::new(
        url,
        token,
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: None,
        },
    );
    config.encoding = encoding;
    config.agent_name = "replay-test".into();
    client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).expect("submission completes")
}

/// The full path on one database engine and transport (`url`); asserts everything.
fn complete_g1_smoke(server: &ServerProc, url: &str) {
    let token = server.team("alpha");
    let summary = submit(url, &token, Encoding::Binary);
    assert_eq!(summary.submission_status, "COMPLETED");
    assert_eq!(summary.episodes.len(), 6);
    // The server's count of every episode, sent with the end of the submission.
    assert_eq!(summary.final_counts, Some(client::FinalCounts { scored: 6, failed: 0 }));
    let id = summary.submission_id.clone();
    // An agent that comes back to it (its connection lost as the submission ended) is told the
    // submission finished, with the same counts: its CLI's exit status depends on them.
    let again = ClientConfig::new(
        url,
        &token,
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: Some(id.clone()),
        },
    );
    let late = client::run_blocking(&again, &mut ReplayAgent::new(), &mut |_| {}).expect("told it finished");
    assert_eq!(
        (late.submission_status.as_str(), late.episodes.len(), late.final_counts),
        ("COMPLETED", 0, summary.final_counts)
    );

    // Results in the database, through the REST API.
    let (status, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
    assert_eq!(status, 200, "{results}");
    let episodes = results["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 6);
    for e in episodes {
        assert_eq!(e["status"], "COMPLETED", "{e}");
        assert_eq!(e["attempts"], 1);
        assert!(e["metrics"]["emd"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(results["aggregated"]["emd"]["count"], 6);
    assert_eq!(
        results["group_counts"]["builtin"],
        serde_json::json!({"episodes": 6, "scored": 6, "unscored": 0}),
        "{results}"
    );

    // Remote replay scores exactly what the local runner scores.
    let spec = arena_bench::spec::find_benchmark(
        "g1-smoke",
        &arena_bench::spec::shipped_dir(),
        &arena_bench::metrics::metric_names(),
    )
    .unwrap()
    .1;
    let clips = arena_runner::episode::benchmark_clips(&spec, std::path::Path::new("."), &Default::default()).unwrap();
    let local = run_local(
        &spec,
        &clips,
        &mut ReplayAgent::new(),
        &LocalOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    for r in local.episodes() {
        let idx: usize = r.episode_id[2..].parse().unwrap();
        let remote = &episodes[idx]["metrics"];
        for (name, v) in &r.metrics {
            let got = remote[name].as_f64().unwrap_or(f64::NAN);
            // Same physics, observations and scoring; stored and served JSON round-trips exactly.
            assert!(
                got == *v || (got.is_nan() && v.is_nan()),
                "{name} of episode {idx}: local {v}, remote {got}"
            );
        }
    }

    // Leaderboard lists it.
    let (status, board) = server.get("/api/v1/leaderboards/g1-smoke", None);
    assert_eq!(status, 200);
    assert_eq!(board["entries"][0]["submission_id"], id.as_str(), "{board}");
    assert_eq!(board["entries"][0]["team"], "alpha");
    assert_eq!(board["entries"][0]["scored_episodes"], 6);

    // Report JSON with the seed's fields.
    let (status, report) = server.get(&format!("/api/v1/submissions/{id}/report"), Some(&token));
    assert_eq!(status, 200);
    for key in [
        "benchmark",
        "timestamp",
        "config",
        "episodes",
        "aggregated",
        "groups",
        "group_counts",
        "failed_episodes",
    ] {
        assert!(report.get(key).is_some(), "report lacks {key}");
    }
    assert_eq!(report["episodes"].as_array().unwrap().len(), 6);
    // Each category's statistics say what they are over and what they leave out.
    let builtin = &report["group_counts"]["builtin"];
    assert_eq!(builtin["episodes"], 6, "{report}");
    assert_eq!(
        builtin["scored"], report["groups"]["builtin"]["emd"]["count"],
        "{report}"
    );
    assert_eq!(
        builtin["unscored"].as_u64().unwrap() as usize,
        report["failed_episodes"].as_array().unwrap().len()
    );
    // Replay falls: scoring stopped where PHC's rule broke, and the report says where, as the
    // local run does (the trajectory file too, below).
    assert_eq!(report["format_version"], 4);
    assert_eq!(report["episodes"][1]["episode_id"], "ep0001");
    let stopped = report["episodes"][1]["scored_until_s"]
        .as_f64()
        .expect("replay breaks the success rule");
    let local_stop = local
        .episodes()
        .iter()
        .find(|e| e.episode_id == "ep0001")
        .unwrap()
        .scored_until_s;
    assert_eq!(Some(stopped), local_stop);
    assert!(stopped > 0.0 && stopped < 2.0, "{stopped}");
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(server.data_dir.join(format!("reports/{id}.json"))).unwrap())
            .unwrap();
    assert_eq!(on_disk["aggregated"], report["aggregated"]);

    // The trajectory download is the HDF5 file with the documented datasets.
    let (status, bytes) = common::server::http(
        server.addr,
        "GET",
        &format!("/api/v1/submissions/{id}/trajectories"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200);
    let file = server.data_dir.join("download.h5");
    std::fs::write(&file, bytes).unwrap();
    let (sub, bench) = trajectory_file::read_header(&file).unwrap();
    assert_eq!((sub.as_str(), bench.as_str()), (id.as_str(), "g1-smoke"));
    let names = trajectory_file::episode_names(&file).unwrap();
    assert_eq!(names.len(), 6);
    let ep = trajectory_file::read_episode(&file, &names[1]).unwrap();
    assert_eq!(ep.motion, "squat");
    assert_eq!(ep.status, "completed");
    assert_eq!(ep.scored_until_s, Some(stopped));
    let t = ep.rows.times.len();
    assert_eq!(t, 301);
    for (name, width) in trajectory_file::DATASETS {
        let len = match name {
            "times" => ep.rows.times.len(),
            "qpos" => ep.rows.qpos.len(),
            "qvel" => ep.rows.qvel.len(),
            "body_pos" => ep.rows.body_pos.len(),
            "actions" => ep.rows.actions.len(),
            "ref_qpos" => ep.rows.ref_qpos.len(),
            "ref_body_pos" => ep.rows.ref_body_pos.len(),
            "state" => ep.rows.state.len(),
            "ref_state" => ep.rows.ref_state.len(),
            other => panic!("undocumented dataset {other}"),
        };
        assert_eq!(len, t * width, "{name}");
    }

    // Another team cannot read it; no token is refused.
    let other = server.team("beta");
    assert_eq!(server.get(&format!("/api/v1/submissions/{id}"), Some(&other)).0, 404);
    assert_eq!(server.get(&format!("/api/v1/submissions/{id}"), None).0, 401);
    assert_eq!(
        server.get("/api/v1/submissions", Some(&other)).1["submissions"],
        serde_json::json!([])
    );
}

#[test]
fn sdk_client_completes_g1_smoke_on_sqlite() {
    let dir = tmp("e2e-sqlite");
    let server = ServerProc::start(&dir, &[]);
    let (status, health) = server.get("/api/v1/health", None);
    assert_eq!((status, health["database"].as_str()), (200, Some("sqlite")));
    complete_g1_smoke(&server, &server.ws_url());
    std::fs::remove_dir_all(&dir).ok();
}

/// The same submission over gRPC (same port, HTTP/2), and the standard gRPC health service.
#[test]
fn grpc_transport_completes_g1_smoke() {
    let dir = tmp("e2e-grpc");
    let server = ServerProc::start(&dir, &[]);
    complete_g1_smoke(&server, &server.grpc_url());
    use tonic_health::pb::health_check_response::ServingStatus;
    assert_eq!(grpc_health(server.addr), [ServingStatus::Serving; 2]);
    std::fs::remove_dir_all(&dir).ok();
}

/// What gRPC's standard health service says of the server ("") and of the agent gateway.
fn grpc_health(addr: std::net::SocketAddr) -> Vec<tonic_health::pb::health_check_response::ServingStatus> {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = HealthClient::new(channel);
        let mut said = Vec::new();
        for service in ["", "arena.v1.AgentGateway"] {
            let answer = health
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap()
                .into_inner();
            said.push(answer.status());
        }
        said
    })
}

/// A server whose data directory's disk has less room than `min_free_disk_mb` says it cannot
/// serve, in both health checks (the operator walkthrough: both said ok through a full disk,
/// and gRPC's said SERVING through a database outage too).
#[test]
fn both_health_checks_say_when_the_disk_is_full() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let dir = tmp("e2e-disk-health");
    // More than any disk has.
    let server = ServerProc::start(&dir, &["--min-free-disk-mb", "1000000000"]);
    let (status, body) = server.get("/api/v1/health", None);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("the server's disk is full")),
        "{body}"
    );
    let (_, body) = server.get("/api/v1/health", Some(ADMIN));
    let detail = body["error"].as_str().unwrap_or_default();
    assert!(
        detail.contains("MB free, under min_free_disk_mb (1000000000)"),
        "{body}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while grpc_health(server.addr) != [ServingStatus::NotServing; 2] {
        assert!(std::time::Instant::now() < deadline, "{:?}", grpc_health(server.addr));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Each ended lane's `warm_start` (its timings line), in the log's order.
fn lanes_warm_starts(log: &str) -> Vec<bool> {
    log.lines()
        .filter_map(|l| l.find(" lane {").map(|k| &l[k + 6..]))
        .map(|json| {
            serde_json::from_str::<Value>(json).unwrap()["warm_start"]
                .as_bool()
                .unwrap()
        })
        .collect()
}

/// The lanes' simulators outlive their session: the next session's lanes take them over
/// (`warm_start` in the lane's timings) and score every episode exactly as the first did.
#[test]
fn a_later_session_takes_over_the_simulators_and_scores_the_same() {
    let dir = tmp("e2e-warm");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("warm");
    let url = server.ws_url();
    let metrics = |summary: &client::RunSummary| -> Vec<Value> {
        let id = &summary.submission_id;
        let (status, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
        assert_eq!(status, 200, "{results}");
        results["episodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["metrics"].clone())
            .collect()
    };
    let first = submit(&url, &token, Encoding::Binary);
    let second = submit(&url, &token, Encoding::Binary);
    assert_eq!(second.submission_status, "COMPLETED");
    assert_eq!(
        metrics(&first),
        metrics(&second),
        "a simulator taken over scores as a fresh one"
    );
    // Each lane logs its timings when it ends: the first session's lanes started their own
    // simulators, the second's took them over.
    let log = server.log_text();
    let warm = lanes_warm_starts(&log);
    assert_eq!(warm, vec![false, false, true, true], "{log}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `--prewarm`: the server starts the simulators of a fresh submission's lanes with itself,
/// and the first session's lanes take them over (`warm_start`).
#[test]
fn prewarmed_simulators_serve_the_first_session() {
    let dir = tmp("e2e-prewarm");
    let server = ServerProc::start(&dir, &["--prewarm", "g1-smoke"]);
    let kept = || server.log_text().matches("prewarm: benchmark g1-smoke").count();
    let waited = std::time::Instant::now();
    while kept() < 2 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "two lanes' simulators are started: {}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // No warning of the prewarm's (the start's own about benchmarks whose motion files this
    // test does not give, g1-moves, are not about it).
    let log = server.log_text();
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && !l.contains("cannot be loaded here")),
        "{log}"
    );
    let token = server.team("prewarm");
    let summary = submit(&server.ws_url(), &token, Encoding::Binary);
    assert_eq!(summary.submission_status, "COMPLETED");
    let log = server.log_text();
    let warm = lanes_warm_starts(&log);
    assert_eq!(warm, vec![true, true], "{log}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sdk_client_completes_g1_smoke_on_postgres() {
    let Some(db) = PgDb::create("e2e") else { return };
    let dir = tmp("e2e-postgres");
    let server = ServerProc::start(&dir, &["--database-url", &db.url]);
    let (status, health) = server.get("/api/v1/health", None);
    assert_eq!((status, health["database"].as_str()), (200, Some("postgres")));
    complete_g1_smoke(&server, &server.ws_url());
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// A practice run of more episodes than may wait to start at once (`PRACTICE_WAITING`)
/// completes: the SDK asks for more as episodes start instead of all at once (before, the
/// server refused the 1025th request and the run ended with `invalid_message`).
/// An agent that cannot serve the session's spec says so as it disconnects
/// (`agent_cannot_serve`): the submission it created, with no episode finished, ends FAILED with
/// that reason instead of waiting a day as RUNNING.
#[test]
fn a_submission_whose_agent_cannot_serve_it_ends_failed() {
    struct Refuses(ReplayAgent, String);
    impl arena_sdk::Agent for Refuses {
        fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
            self.0.configure(spec)
        }
        fn check(&self, _spec: &arena_sdk::protocol::EpisodeSpec) -> Result<(), String> {
            Err(self.1.clone())
        }
        fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
            self.0.reset(episodes)
        }
        fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
            self.0.act(batch, actions)
        }
    }
    let dir = tmp("e2e-unserved");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("unserved");
    let config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: None,
        },
    );
    let mut id = String::new();
    let err = client::run_blocking(
        &config,
        &mut Refuses(ReplayAgent::new(), "no such observation group here".into()),
        &mut |e| {
            if let ClientEvent::Connected(c) = e {
                id = c.submission_id.clone();
            }
        },
    )
    .unwrap_err();
    assert!(matches!(err, client::ClientError::Agent(_)), "{err}");
    // The server ends it as it reads the disconnect; the session's end follows at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let submission = loop {
        let (status, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
        assert_eq!(status, 200, "{s}");
        if s["status"] != "RUNNING" || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(submission["status"], "FAILED", "{submission}");
    let error = submission["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the agent could not serve this session") && error.contains("no such observation group here"),
        "{submission}"
    );
    // Its session ended as the agent's own doing, not an organiser's cancel.
    let outcome = loop {
        let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
        let outcome = s["sessions"][0]["outcome"].clone();
        if !outcome.is_null() || std::time::Instant::now() > deadline {
            break outcome;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(outcome, "agent_cannot_serve");
    // An agent's reason is its own text: kept short and escaped (line breaks forged log lines
    // and table rows, ESC coloured the organiser's terminal, and 16 MiB of it went into every
    // episode's row).
    let hostile = format!(
        "bad\n2026-12-07T00:00:00Z ERROR forged \u{1b}[31m\u{202e}{}",
        "B".repeat(100_000)
    );
    let mut hostile_id = String::new();
    let _ = client::run_blocking(&config, &mut Refuses(ReplayAgent::new(), hostile), &mut |e| {
        if let ClientEvent::Connected(c) = e {
            hostile_id = c.submission_id.clone();
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (submission, results) = loop {
        let (_, s) = server.get(&format!("/api/v1/submissions/{hostile_id}"), Some(&token));
        if s["status"] != "RUNNING" || std::time::Instant::now() > deadline {
            let (_, r) = server.get(&format!("/api/v1/submissions/{hostile_id}/results"), Some(&token));
            break (s, r);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let error = submission["error"].as_str().unwrap_or_default();
    assert_eq!(submission["status"], "FAILED", "{submission}");
    assert!(
        error.contains("bad\\n2026") && error.contains("\\u{1b}[31m\\u{202e}BBB") && error.contains("(100"),
        "{error}"
    );
    assert!(
        !error.contains(['\n', '\u{1b}', '\u{202e}']) && error.len() < 1000,
        "{error}"
    );
    for episode in results["episodes"].as_array().expect("episodes") {
        let reason = episode["reason"].as_str().unwrap_or_default();
        assert!(reason.len() < 1000 && !reason.contains('\n'), "{reason}");
    }
    // Checked first on a practice connection (the SDK's command line does), it makes no
    // submission at all: nothing counts against a quota.
    let mut checked = config.clone();
    checked.spec_check = true;
    let mut connected = false;
    let err = client::run_blocking(
        &checked,
        &mut Refuses(ReplayAgent::new(), "no such observation group here".into()),
        &mut |e| {
            connected |= matches!(e, ClientEvent::Connected(_));
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err, client::ClientError::Agent(why) if why.contains("no such observation group here") && why.contains("no submission was made")),
        "{err}"
    );
    assert!(!connected, "no submission session should open");
    let (status, listed) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["submissions"].as_array().map(Vec::len),
        Some(2),
        "the two above: {listed}"
    );
    // An agent that can serve it runs as before after the check.
    let summary = client::run_blocking(&checked, &mut ReplayAgent::new(), &mut |_| {}).expect("checked, then run");
    assert_eq!(summary.submission_status, "COMPLETED");
    // A refusal the submission would meet too is the check's answer (an unknown benchmark).
    let mut unknown = checked.clone();
    unknown.mode = Mode::Submission {
        benchmark: "no-such-benchmark".into(),
        submission_id: None,
    };
    let err = client::run_blocking(&unknown, &mut ReplayAgent::new(), &mut |_| {}).unwrap_err();
    assert!(
        matches!(&err, client::ClientError::Refused { code, .. } if code == "unknown_benchmark"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_practice_run_longer_than_the_waiting_bound_completes() {
    let dir = tmp("e2e-practice-many");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("many");
    let asked = arena_sdk::protocol::PRACTICE_WAITING + 40;
    let episode = ResetEpisode {
        motion: "stand".into(),
        duration_s: 0.04,
        ..Default::default()
    };
    let config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: vec![episode; asked],
        },
    );
    let practice = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).unwrap();
    assert_eq!(practice.episodes.len(), asked);
    assert!(practice.episodes.iter().all(|e| e.status == "completed"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn json_encoding_and_practice_sessions() {
    let dir = tmp("e2e-json");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("gamma");
    // A submission over JSON text frames.
    let summary = submit(&server.ws_url(), &token, Encoding::Json);
    assert_eq!(
        (summary.submission_status.as_str(), summary.episodes.len()),
        ("COMPLETED", 6)
    );
    // A practice session: two requested episodes, nothing stored.
    let mut config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: vec![
                ResetEpisode {
                    motion: "squat".into(),
                    start_s: 1.0,
                    duration_s: 2.0,
                    seed: 3,
                },
                ResetEpisode {
                    motion: "stand".into(),
                    ..Default::default()
                },
            ],
        },
    );
    config.encoding = Encoding::Json;
    let practice = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).unwrap();
    assert_eq!(practice.episodes.len(), 2);
    let squat = practice.episodes.iter().find(|e| e.episode_id == 0).unwrap();
    assert_eq!((squat.status.as_str(), squat.steps), ("completed", 100));
    assert!(squat.metrics.contains_key("emd"));
    let (_, list) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(
        list["submissions"].as_array().unwrap().len(),
        1,
        "practice is not stored"
    );
    // A NaN action cannot go over JSON (it would be written as null and the whole frame
    // refused): the client stops, naming the episode and the value; over the binary encoding the
    // server fails that episode alone.
    struct NanAt3(ReplayAgent);
    impl arena_sdk::Agent for NanAt3 {
        fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
            self.0.configure(spec)
        }
        fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
            self.0.reset(episodes)
        }
        fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
            self.0.act(batch, actions);
            if batch.episode_steps.first() == Some(&3) {
                actions[2] = f32::NAN;
            }
        }
    }
    let mut config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: vec![ResetEpisode {
                motion: "stand".into(),
                ..Default::default()
            }],
        },
    );
    config.encoding = Encoding::Json;
    let err = client::run_blocking(&config, &mut NanAt3(ReplayAgent::new()), &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, client::ClientError::AgentFailed(ref r) if r.contains("value 2: NaN") && r.contains("JSON cannot carry it")),
        "{err}"
    );
    config.encoding = Encoding::Binary;
    let practice = client::run_blocking(&config, &mut NanAt3(ReplayAgent::new()), &mut |_| {}).unwrap();
    assert_eq!(practice.episodes[0].status, "failed", "{:?}", practice.episodes[0]);
    assert!(
        practice.episodes[0].reason.contains("non-finite"),
        "{:?}",
        practice.episodes[0]
    );
    // A practice request for a motion the benchmark lacks is refused, not waited on forever.
    let mut config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: vec![ResetEpisode {
                motion: "moonwalk".into(),
                ..Default::default()
            }],
        },
    );
    config.encoding = Encoding::Binary;
    let err = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("unknown_motion"), "{err}");
    // Benchmarks are names, never paths: nothing of another file is read or echoed.
    let (status, body) = common::server::http(server.addr, "GET", "/api/v1/leaderboards/%2Fetc%2Fpasswd", None, None);
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("root:"), "{body}");
    let (status, v) = server.post("/api/v1/submissions", Some(&token), r#"{"benchmark": "/etc/passwd"}"#);
    assert_eq!(status, 404);
    assert!(!v.to_string().contains("root:"), "{v}");
    // A bad token and an unknown benchmark are refused with their codes.
    let mut bad = ClientConfig::new(
        server.ws_url(),
        "nope",
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: None,
        },
    );
    let err = client::run_blocking(&bad, &mut ReplayAgent::new(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("unauthorized"), "{err}");
    bad.token = token.clone();
    bad.mode = Mode::Submission {
        benchmark: "../../etc/passwd".into(),
        submission_id: None,
    };
    let err = client::run_blocking(&bad, &mut ReplayAgent::new(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("unknown_benchmark"), "{err}");
    assert!(!err.to_string().contains("root:"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Checks the `reference_goal` rows an agent receives against the simulator's reference
/// observations of the episode's motion (row k of step t = reference row start/dt + t + k).
struct GoalChecker {
    references: std::collections::HashMap<String, arena_sim::observation::ReferenceObservations>,
    episodes: std::collections::HashMap<u32, (String, f64)>,
    group_size: usize,
    /// The session's `spec.reference_goal_once`.
    sent_once: bool,
    rows_checked: usize,
}

impl GoalChecker {
    fn new() -> Self {
        let names = arena_bench::metrics::metric_names();
        let spec = arena_bench::spec::find_benchmark("g1-smoke", &arena_bench::spec::shipped_dir(), &names)
            .unwrap()
            .1;
        let robot = arena_sim::RobotConfig::default();
        let clips = arena_runner::episode::benchmark_clips(&spec, std::path::Path::new("."), &robot).unwrap();
        let library = arena_sim::motion::MotionLibrary::from_clips(&clips, &robot).unwrap();
        let references = library
            .motions
            .iter()
            .map(|m| {
                (
                    m.name.clone(),
                    arena_sim::observation::reference_observations(m, &robot),
                )
            })
            .collect();
        Self {
            references,
            episodes: Default::default(),
            group_size: 0,
            sent_once: false,
            rows_checked: 0,
        }
    }
}

impl arena_sdk::Agent for GoalChecker {
    fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
        let g = spec.observations.iter().find(|g| g.name == "reference_goal");
        self.group_size = g.map_or(0, |g| g.size as usize);
        self.sent_once = spec.reference_goal_once;
    }
    fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
        for e in episodes {
            self.episodes.insert(e.episode_id, (e.motion.clone(), e.start_s));
        }
    }
    fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
        use arena_sdk::layout::REFERENCE_GOAL_ROW;
        use arena_sim::observation::{PRIVILEGED_STATE_DIM, STATE_DIM};
        actions.fill(0.0);
        let range = batch.layout.group("reference_goal").expect("the group is sent");
        assert_eq!(range.len(), 8 * REFERENCE_GOAL_ROW);
        for i in 0..batch.len() {
            let (motion, start_s) = &self.episodes[&batch.episodes[i]];
            let reference = &self.references[motion];
            let step = batch.episode_steps[i] as usize;
            let goal = &batch.observation(i)[range.clone()];
            for (k, row) in goal.chunks_exact(REFERENCE_GOAL_ROW).enumerate() {
                let index = (start_s / arena_sim::CONTROL_DT).round() as usize + step + k + 1;
                if index >= reference.rows {
                    continue;
                }
                let want = reference.state[index * STATE_DIM..(index + 1) * STATE_DIM]
                    .iter()
                    .chain(
                        &reference.privileged_state[index * PRIVILEGED_STATE_DIM..(index + 1) * PRIVILEGED_STATE_DIM],
                    );
                for (j, (got, want)) in row.iter().zip(want).enumerate() {
                    // Exact from a start at 0 (every encoding carries f32 exactly); from a later
                    // start the time sum may differ in its last bit.
                    let tol = if *start_s == 0.0 {
                        0.0
                    } else {
                        1e-5 * want.abs().max(1.0)
                    };
                    assert!(
                        (got - want).abs() <= tol,
                        "{motion} step {step} row {} value {j}: {got} vs {want}",
                        k + 1
                    );
                }
                self.rows_checked += 1;
            }
        }
    }
}

/// The `reference_goal` group (8 × 527 values in g1-smoke) arrives intact over WebSocket binary,
/// WebSocket JSON and gRPC, in whole rows and with each row sent once (docs/protocol.md §5),
/// the client rebuilding the group: the agent sees the same rows either way.
#[test]
fn reference_goal_rows_arrive_over_every_transport() {
    let dir = tmp("e2e-goal");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("epsilon");
    let transports = [
        (server.ws_url(), Encoding::Binary),
        (server.ws_url(), Encoding::Json),
        (server.grpc_url(), Encoding::Binary),
    ];
    for ((url, encoding), once) in transports.into_iter().flat_map(|t| [(t.clone(), true), (t, false)]) {
        let mut config = ClientConfig::new(
            url.clone(),
            &token,
            Mode::Practice {
                benchmark: "g1-smoke".into(),
                episodes: vec![
                    ResetEpisode {
                        motion: "squat".into(),
                        duration_s: 0.5,
                        ..Default::default()
                    },
                    ResetEpisode {
                        motion: "arm_wave".into(),
                        start_s: 1.0,
                        duration_s: 0.3,
                        seed: 1,
                    },
                ],
            },
        );
        config.encoding = encoding;
        config.max_reconnects = 0;
        config.reference_goal_once = once;
        let mut agent = GoalChecker::new();
        let summary = client::run_blocking(&config, &mut agent, &mut |_| {}).unwrap();
        assert_eq!(summary.episodes.len(), 2, "{url} {encoding:?} {once}");
        assert!(
            summary.episodes.iter().all(|e| e.status == "completed"),
            "{url} {encoding:?} {once}: {:?}",
            summary.episodes
        );
        assert_eq!(agent.sent_once, once, "{url} {encoding:?}: granted as asked");
        assert_eq!(agent.group_size, 8 * 527, "{url} {encoding:?} {once}: announced size");
        // (25 + 15) steps × 8 rows, all inside the motions.
        assert_eq!(agent.rows_checked, 40 * 8, "{url} {encoding:?} {once}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// How a test stops the server mid-submission, and what that stop must leave.
struct StopCase {
    name: &'static str,
    stop: fn(&mut ServerProc),
    /// The agent's connection: gRPC, or else WebSocket.
    grpc: bool,
    /// The column that counts the cut run (1), and the one that must stay 0.
    counted: (&'static str, &'static str),
    /// Why the client heard its session end, when the server says it.
    told: Option<&'static str>,
}

/// The server is killed with SIGKILL mid-submission and restarted on the same port; the SDK
/// client reconnects and resumes; every episode is counted exactly once. The run the kill cut
/// short is a server fault, not the agent's.
#[test]
fn submission_survives_server_sigkill() {
    submission_survives_a_stop(StopCase {
        name: "e2e-kill",
        stop: ServerProc::kill9,
        grpc: false,
        counted: ("server_faults", "uncharged_runs"),
        told: None,
    });
}

/// The same with SIGTERM (a deploy): the server gives the run back as it stops, charged to
/// nobody and not a server fault either, and tells the agent why its session ends.
#[test]
fn submission_survives_server_sigterm() {
    submission_survives_a_stop(StopCase {
        name: "e2e-term",
        stop: ServerProc::terminate,
        grpc: false,
        counted: ("uncharged_runs", "server_faults"),
        told: Some("server ended the session: shutdown"),
    });
}

/// SIGHUP (the operator walkthrough: its terminal closed, or a "reload" by habit, killed the
/// server at once, each running episode a server fault) stops it as SIGTERM does.
#[test]
fn submission_survives_server_sighup() {
    submission_survives_a_stop(StopCase {
        name: "e2e-hup",
        stop: ServerProc::hangup,
        grpc: false,
        counted: ("uncharged_runs", "server_faults"),
        told: Some("server ended the session: shutdown"),
    });
}

/// SIGTERM with the agent on gRPC: its stream is ended with `disconnect {shutdown}` at once
/// (before, the HTTP/2 graceful shutdown waited for it while the lane stepped runs already
/// given back, and the session ended `episodes_pending`).
#[test]
fn submission_survives_server_sigterm_over_grpc() {
    submission_survives_a_stop(StopCase {
        name: "e2e-term-grpc",
        stop: ServerProc::terminate,
        grpc: true,
        counted: ("uncharged_runs", "server_faults"),
        told: Some("server ended the session: shutdown"),
    });
}

/// A submission whose server is stopped mid-run (with an episode running) and restarted on the
/// same port: the episode cut short counts one run under `case.counted.0`, none under
/// `case.counted.1`.
fn submission_survives_a_stop(case: StopCase) {
    let dir = tmp(case.name);
    let bind = format!("127.0.0.1:{}", common::cluster::free_port());
    let args = ["--bind", bind.as_str(), "--lanes", "1", "--max-batch", "1"];
    let mut server = ServerProc::start(&dir, &args);
    let token = server.team("delta");
    let (ends_tx, ends_rx) = std::sync::mpsc::channel::<u32>();
    let url = if case.grpc { server.grpc_url() } else { server.ws_url() };
    let told = case.told.is_some();
    let client = std::thread::spawn(move || {
        let mut config = ClientConfig::new(
            url,
            token,
            Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: None,
            },
        );
        // A server that says it is stopping is waited for without counting the attempts
        // (`restart_wait`): no attempt at all is needed for that. One that just vanishes is.
        config.max_reconnects = if told { 0 } else { 40 };
        config.initial_backoff = std::time::Duration::from_millis(100);
        config.max_backoff = std::time::Duration::from_millis(500);
        let mut agent = SlowReplay(ReplayAgent::new());
        let mut lost = Vec::new();
        let summary = client::run_blocking(&config, &mut agent, &mut |e| match e {
            ClientEvent::EpisodeEnd(e) => {
                let _ = ends_tx.send(e.episode_id);
            }
            ClientEvent::Reconnecting { error, .. } => lost.push(error.to_string()),
            _ => {}
        });
        (summary, lost)
    });
    // Two episodes done, the third running: kill.
    for _ in 0..2 {
        ends_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("episodes finish");
    }
    // Until the next one runs (so that the kill cuts one short), then kill.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, list) = server.get("/api/v1/submissions", Some(ADMIN));
        let id = list["submissions"][0]["id"].as_str().unwrap_or_default().to_string();
        let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
        let running = results["episodes"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["status"] == "RUNNING"));
        if running {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no episode ran after the second: {results}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (case.stop)(&mut server);
    let server = ServerProc::start(&dir, &args);
    let (summary, lost) = client.join().unwrap();
    let summary = summary.expect("the client resumes after the restart");
    if let Some(told) = case.told {
        assert_eq!(lost.first().map(String::as_str), Some(told), "{lost:?}");
    }
    assert_eq!(summary.submission_status, "COMPLETED");
    assert!(summary.reconnects >= 1);
    let id = summary.submission_id;
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    let episodes = results["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 6);
    for e in episodes {
        assert_eq!(e["status"], "COMPLETED", "{e}");
    }
    // The run the stop cut short (one lane of one episode) was not the agent's: counted
    // apart, under its own number, and not among the re-runs charged to the agent.
    let cut: Vec<&Value> = episodes.iter().filter(|e| e[case.counted.0] != 0).collect();
    assert_eq!(cut.len(), 1, "{episodes:?}");
    assert_eq!(
        (&cut[0][case.counted.0], &cut[0]["attempts"]),
        (&serde_json::json!(1), &serde_json::json!(2))
    );
    assert!(episodes.iter().all(|e| e[case.counted.1] == 0), "{episodes:?}");
    let (_, sub) = server.get(&format!("/api/v1/submissions/{id}"), Some(ADMIN));
    assert_eq!(sub["attempts"]["reruns"], 0, "{sub}");
    let (status, csv) = common::server::http(
        server.addr,
        "GET",
        &format!("/api/v1/submissions/{id}/episodes.csv"),
        Some(ADMIN),
        None,
    );
    let csv = String::from_utf8_lossy(&csv);
    assert_eq!(status, 200, "{csv}");
    assert!(
        csv.starts_with(
            "idx,motion,category,start_s,duration_s,seed,dr_level,status,attempts,server_faults,uncharged_runs,steps,reason"
        ),
        "{csv}"
    );
    let (_, report) = server.get(&format!("/api/v1/submissions/{id}/report"), Some(ADMIN));
    let mut ids: Vec<&str> = report["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["episode_id"].as_str().unwrap())
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 6, "every episode exactly once: {ids:?}");
    assert_eq!(report["aggregated"]["emd"]["count"], 6);
    server.wait_merged(&id, ADMIN, std::time::Duration::from_secs(60));
    let file = dir.join(format!("trajectories/{id}.h5"));
    assert_eq!(trajectory_file::episode_names(&file).unwrap().len(), 6);
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// Replay that takes a little time per step, so a submission lasts long enough to be killed.
struct SlowReplay(ReplayAgent);

impl arena_sdk::Agent for SlowReplay {
    fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
        self.0.configure(spec);
    }
    fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
        self.0.reset(episodes);
    }
    fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
        std::thread::sleep(std::time::Duration::from_micros(700));
        self.0.act(batch, actions);
    }
}

#[test]
fn a_benchmark_that_cannot_load_is_refused_without_server_paths() {
    let dir = common::tmp("broken-benchmark");
    let benchmarks = dir.join("benchmarks");
    std::fs::create_dir_all(&benchmarks).unwrap();
    let smoke =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml")).unwrap();
    let broken = smoke.replace("name = \"g1-smoke\"", "name = \"broken\"").replace(
        "builtin = [\"stand\", \"squat\", \"arm_wave\", \"torso_twist\", \"weight_shift\", \"step_in_place\"]",
        "dir = \"no-such-folder\"\nfps = 30",
    );
    std::fs::write(benchmarks.join("broken.toml"), broken).unwrap();
    std::fs::write(benchmarks.join("g1-smoke.toml"), &smoke).unwrap();
    let server = ServerProc::start(&dir.join("data"), &["--benchmarks-dir", benchmarks.to_str().unwrap()]);
    let token = server.team("alpha");
    let mut config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Submission {
            benchmark: "broken".into(),
            submission_id: None,
        },
    );
    // A benchmark the server cannot load is a permanent refusal: the client stops at once
    // instead of reconnecting (issue 30: it retried 11 times over about 30 s).
    let mut reconnects = 0;
    let err = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |e| {
        reconnects += u32::from(matches!(e, client::ClientEvent::Reconnecting { .. }))
    })
    .unwrap_err();
    assert!(
        matches!(&err, client::ClientError::Refused { code, .. } if code == "benchmark_unavailable"),
        "{err}"
    );
    assert_eq!(reconnects, 0, "no reconnect after a permanent refusal");
    let err = err.to_string();
    assert!(err.contains("benchmark broken cannot be loaded on the server"), "{err}");
    assert!(
        !err.contains(dir.to_str().unwrap()) && !err.contains("no-such-folder"),
        "{err}"
    );
    assert!(server.log_text().contains("no-such-folder"), "the log has the details");
    // REST says the same, without server paths: a broken benchmark is a 503
    // benchmark_unavailable (as for the agent), an unknown one a 404 with the names there are,
    // a missing web asset a 404 naming its URL.
    let (status, v) = server.post("/api/v1/submissions", Some(&token), "{\"benchmark\": \"broken\"}");
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (503, Some("benchmark_unavailable")),
        "{v}"
    );
    // The start said which benchmark cannot be loaded.
    let waited = std::time::Instant::now();
    while !server.log_text().contains("benchmark broken cannot be loaded here") {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(30),
            "{}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The listing says which benchmarks run here, once the start has loaded them: the broken
    // one is listed (its page says why) but not available.
    let listing = loop {
        let (status, listing) = server.get("/api/v1/benchmarks", None);
        assert_eq!(status, 200, "{listing}");
        if listing["benchmarks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| !b["available"].is_null())
        {
            break listing;
        }
        assert!(waited.elapsed() < std::time::Duration::from_secs(60), "{listing}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let row = |name: &str| {
        listing["benchmarks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed: {listing}"))
            .clone()
    };
    assert_eq!(row("g1-smoke")["available"], true, "{listing}");
    assert!(row("g1-smoke").get("unavailable").is_none(), "{listing}");
    assert_eq!(row("broken")["available"], false, "{listing}");
    assert!(
        row("broken")["unavailable"]
            .as_str()
            .unwrap()
            .contains("benchmark broken cannot be loaded on the server"),
        "{listing}"
    );
    let (status, details) = server.get("/api/v1/benchmarks/broken", None);
    assert_eq!(status, 200, "{details}");
    assert!(details["motion_list"].is_null(), "{details}");
    let (status, unknown) = server.get("/api/v1/benchmarks/nope", None);
    assert_eq!(status, 404, "{unknown}");
    // The names offered are those that run here.
    assert!(unknown.to_string().contains("available: g1-smoke ("), "{unknown}");
    let (status, asset) = server.get("/static/nope.js", None);
    assert_eq!(status, 404, "{asset}");
    assert!(asset.to_string().contains("no file /static/nope.js"), "{asset}");
    // (The benchmark file's own `dir = "no-such-folder"` is part of its public details.)
    assert!(
        details["motions_error"]
            .as_str()
            .unwrap()
            .contains("cannot be loaded on the server")
    );
    for answer in [&v, &details, &unknown, &asset] {
        let text = answer.to_string();
        assert!(
            !text.contains(dir.to_str().unwrap()) && !text.contains("/web/"),
            "{text}"
        );
    }
    assert!(
        v.to_string()
            .contains("benchmark broken cannot be loaded on the server"),
        "{v}"
    );
    // An unknown name is the agent's mistake: its code, the names there are, no folder.
    config.mode = Mode::Submission {
        benchmark: "nope".into(),
        submission_id: None,
    };
    let err = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown_benchmark") && err.contains("available: g1-smoke ("),
        "{err}"
    );
    assert!(!err.contains(dir.to_str().unwrap()), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 30 §2: a phase cannot open on a benchmark whose motions the server lacks, and a server
/// that starts with such a phase (its clips removed since) warns about it at start.
#[test]
fn a_phase_cannot_open_on_a_benchmark_the_server_cannot_load() {
    let dir = common::tmp("unloadable-phase");
    let benchmarks = dir.join("benchmarks");
    let motions = dir.join("motions");
    std::fs::create_dir_all(&benchmarks).unwrap();
    let generated = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args(["motion", "generate", "--out"])
        .arg(motions.join("clips"))
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
    let smoke =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml")).unwrap();
    let builtin =
        "builtin = [\"stand\", \"squat\", \"arm_wave\", \"torso_twist\", \"weight_shift\", \"step_in_place\"]";
    let on_disk = smoke
        .replace("name = \"g1-smoke\"", "name = \"on-disk\"")
        .replace(builtin, "dir = \"clips\"\nfps = 50");
    std::fs::write(benchmarks.join("on-disk.toml"), &on_disk).unwrap();
    let missing = on_disk
        .replace("name = \"on-disk\"", "name = \"missing\"")
        .replace("dir = \"clips\"", "dir = \"not-installed\"");
    std::fs::write(benchmarks.join("missing.toml"), missing).unwrap();
    let args = [
        "--benchmarks-dir",
        benchmarks.to_str().unwrap(),
        "--motions-root",
        motions.to_str().unwrap(),
    ];
    let mut server = ServerProc::start(&dir.join("data"), &args);
    let (status, v) = server.post(
        "/api/v1/challenges",
        Some(ADMIN),
        "{\"id\": \"cup\", \"title\": \"Cup\"}",
    );
    assert_eq!(status, 201, "{v}");
    let phase = |id: &str, benchmark: &str| {
        format!(
            "{{\"id\": \"{id}\", \"benchmark\": \"{benchmark}\", \"starts_at\": \"2020-01-01T00:00:00Z\", \"ends_at\": \"2100-01-01T00:00:00Z\"}}"
        )
    };
    let (status, v) = server.post("/api/v1/challenges/cup/phases", Some(ADMIN), &phase("dance", "missing"));
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("missing cannot be run on this server") && message.contains("not-installed"),
        "names the benchmark and what is missing: {v}"
    );
    assert!(!message.contains(dir.to_str().unwrap()), "no server path: {message}");
    let (status, _) = server.get("/api/v1/phases/dance", Some(ADMIN));
    assert_eq!(status, 404, "no phase was created");
    let (status, v) = server.post("/api/v1/challenges/cup/phases", Some(ADMIN), &phase("ok", "on-disk"));
    assert_eq!(status, 201, "a loadable benchmark opens: {v}");
    // (The start names the `missing` benchmark, offered but not loadable; no phase runs it.)
    assert!(
        !server
            .log_text()
            .contains("runs benchmark on-disk, which cannot be loaded here")
    );
    let waited = std::time::Instant::now();
    while !server.log_text().contains("benchmark missing cannot be loaded here") {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(30),
            "{}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // The clips go; the next start says which phase is affected.
    server.kill9();
    std::fs::remove_dir_all(motions.join("clips")).unwrap();
    let server = ServerProc::start(&dir.join("data"), &args);
    let log = server.log_text();
    assert!(
        log.contains("warning: phase ok (challenge cup) runs benchmark on-disk, which cannot be loaded here"),
        "{log}"
    );
    // The organiser's own log names the folders as they are.
    assert!(log.contains(motions.to_str().unwrap()), "{log}");
    // The file itself broken: the log names it and the key, and the phase's
    // board is the server's problem (503), not an unknown name (404).
    drop(server);
    std::fs::write(
        benchmarks.join("on-disk.toml"),
        on_disk.replace("[episodes]", "[episodes]\nsed = 0"),
    )
    .unwrap();
    let server = ServerProc::start(&dir.join("data"), &args);
    let log = server.log_text();
    assert!(
        log.contains("runs benchmark on-disk, which cannot be loaded here")
            && log.contains("on-disk.toml: episodes.sed: unknown field"),
        "{log}"
    );
    let (status, v) = server.get("/api/v1/phases/ok/leaderboard", None);
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "benchmark_unavailable", "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// What a test keeps the store from writing, for one submission: a folder in the object's
/// place.
#[derive(Clone, Copy)]
enum Refused {
    /// Its report: its completion fails, and it stays RUNNING.
    Report,
    /// Its merged trajectory file: its merge fails (after its completion, or when it fails).
    Merged,
}

/// A g1-smoke submission whose objects in `refused` cannot be written (a folder holds each
/// one's name), and the client configuration that runs it once: (token, id, the folders in
/// `refused`'s order, config).
fn refused_submission(
    server: &ServerProc,
    data: &std::path::Path,
    refused: &[Refused],
) -> (String, String, Vec<std::path::PathBuf>, ClientConfig) {
    refused_submission_of(server, data, refused, "alpha")
}

/// [`refused_submission`] for a team of its own, `team`.
fn refused_submission_of(
    server: &ServerProc,
    data: &std::path::Path,
    refused: &[Refused],
    team: &str,
) -> (String, String, Vec<std::path::PathBuf>, ClientConfig) {
    let token = server.team(team);
    let (status, created) = server.post("/api/v1/submissions", Some(&token), "{\"benchmark\": \"g1-smoke\"}");
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let blockers: Vec<_> = refused
        .iter()
        .map(|what| {
            let blocker = match what {
                Refused::Report => data.join("reports").join(format!("{id}.json")),
                Refused::Merged => data.join("trajectories").join(format!("{id}.h5")),
            };
            std::fs::create_dir_all(&blocker).unwrap();
            std::fs::write(blocker.join("keep"), b"x").unwrap();
            blocker
        })
        .collect();
    let mut config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: Some(id.clone()),
        },
    );
    config.max_reconnects = 0;
    (token, id, blockers, config)
}

/// Submission `id`'s trajectory download answers 503 `not_merged_yet` with a `Retry-After`,
/// saying its runs are not merged yet.
fn assert_not_merged_yet(server: &ServerProc, id: &str, token: &str) {
    let (status, head, v) = server.call(
        "GET",
        &format!("/api/v1/submissions/{id}/trajectories"),
        Some(token),
        None,
    );
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (503, Some("not_merged_yet")),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not merged into one yet"), "{v}");
    let retry = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("retry-after:")
            .map(|v| v.trim().to_string())
    });
    assert!(
        retry
            .as_deref()
            .and_then(|s| s.parse::<u32>().ok())
            .is_some_and(|s| (1..=5).contains(&s)),
        "{head}"
    );
}

/// The lines of g1-smoke's dataset export (`jsonl.gz`, every completed submission's episodes).
fn exported_episodes(server: &ServerProc) -> Vec<Value> {
    use std::io::Read;
    let (status, gz) = common::server::http(
        server.addr,
        "GET",
        "/api/v1/datasets/benchmarks/g1-smoke/jsonl.gz",
        Some(ADMIN),
        None,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&gz));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("a truncated export ({e}): {}", server.log_text()));
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Waits (at most 30 s) for submission `id`'s per-episode folder `parts` to be removed, which
/// follows the storing of its merged file.
fn assert_parts_removed(parts: &std::path::Path, id: &str) {
    let waited = std::time::Instant::now();
    while parts.exists() && waited.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!parts.exists(), "{id}: the parts were kept");
}

/// Polls submission `id`'s trajectory download until it answers 200 (at most a minute).
fn wait_for_trajectories(server: &ServerProc, id: &str, token: &str) {
    let waited = std::time::Instant::now();
    while trajectories_status(server, id, token) != 200 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "{}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_store_failure_at_the_end_reaches_the_agent_without_server_paths() {
    // The report cannot be written (a folder holds its name), so the run ends on a server
    // error after every episode is stored. The agent is told that, and where the details are;
    // the log has them; nothing is lost: the submission stays resumable.
    let dir = tmp("store-failure-at-end");
    let data = dir.join("data");
    let server = ServerProc::start(&data, &["--object-store-retry-s", "1"]);
    let (token, id, blockers, config) = refused_submission(&server, &data, &[Refused::Report]);
    let mut told = Vec::new();
    let ended = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |event| {
        if let ClientEvent::ServerError(e) = event {
            told.push(format!("{}: {}", e.code, e.message));
        }
    });
    assert!(ended.is_err(), "the session ends on the error");
    let err = told.join("\n");
    assert!(err.contains("server error") && err.contains("server's log"), "{err}");
    assert!(!err.contains(data.to_str().unwrap()) && !err.contains(".json"), "{err}");
    assert!(
        server.log_text().contains(&format!("{id}.json")),
        "the log has the details"
    );
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(s["status"], "RUNNING", "{s}");
    // Every episode is final: a restart completes it without waiting for an agent (issue 30
    // §7: a server killed between the last episode and the completion left it RUNNING), and
    // merges its runs.
    let mut server = server;
    server.kill9();
    std::fs::remove_dir_all(&blockers[0]).unwrap();
    let server = ServerProc::start(&data, &["--object-store-retry-s", "1"]);
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(s["status"], "COMPLETED", "{s}\n{}", server.log_text());
    let (status, _) = server.get(&format!("/api/v1/submissions/{id}/report"), Some(&token));
    assert_eq!(status, 200);
    wait_for_trajectories(&server, &id, &token);
    let merged = trajectory_file::episode_names(&data.join("trajectories").join(format!("{id}.h5"))).unwrap();
    assert_eq!(merged.len() as i64, s["episodes_total"].as_i64().unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

/// A submission is COMPLETED (and its agent told) before its runs are merged into one file. A
/// merge that fails then (the store refuses the merged file) keeps the runs, one file each: the
/// download says they are not merged yet, the pages still read each episode from its own file,
/// and the next start merges them. A second submission's merged file is, by then, one of the
/// one-file layout holding only its first 3 episodes (an upgrade during its run): its runs are
/// merged too, not deleted as if that file held them.
#[test]
fn a_completed_submission_whose_merge_failed_is_merged_at_the_next_start() {
    let dir = tmp("unmerged-completed");
    let data = dir.join("data");
    let server = ServerProc::start(&data, &["--object-store-retry-s", "1"]);
    let (token, id, blockers, config) = refused_submission(&server, &data, &[Refused::Merged]);
    let ran = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).expect("the submission completes");
    assert_eq!(ran.submission_status, "COMPLETED");
    let (_, report) = server.get(&format!("/api/v1/submissions/{id}/report"), Some(&token));
    assert_eq!(report["aggregated"]["emd"]["count"], 6, "{report}");
    // The download waits for this server's merge, which fails on the folder in the way.
    assert_not_merged_yet(&server, &id, &token);
    assert!(
        server.log_text().contains("merging its trajectories failed"),
        "{}",
        server.log_text()
    );
    let (status, series) = server.get(
        &format!("/api/v1/submissions/{id}/episodes/0/series?points=10"),
        Some(&token),
    );
    assert_eq!(status, 200, "an episode read from its own file: {series}");
    let parts = data.join("trajectories").join(&id);
    assert_eq!(std::fs::read_dir(&parts).unwrap().count(), 6, "the runs are kept");
    // Dataset exports read each episode from its own file meanwhile.
    let exported = exported_episodes(&server);
    assert_eq!(exported.len(), 6, "{exported:?}");
    for (e, line) in exported.iter().enumerate() {
        assert_eq!(line["id"], format!("{id}/{e}"));
        assert_eq!(
            line["qpos"].as_array().unwrap().len() as i64,
            line["rows"].as_i64().unwrap()
        );
    }
    let (status, h5) = common::server::http(
        server.addr,
        "GET",
        "/api/v1/datasets/benchmarks/g1-smoke/hdf5",
        Some(ADMIN),
        None,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&h5));
    let (token_b, id_b, blockers_b, config_b) = refused_submission_of(&server, &data, &[Refused::Merged], "beta");
    client::run_blocking(&config_b, &mut ReplayAgent::new(), &mut |_| {}).expect("the submission completes");
    assert_not_merged_yet(&server, &id_b, &token_b);
    let mut server = server;
    server.kill9();
    std::fs::remove_dir_all(&blockers[0]).unwrap();
    std::fs::remove_dir_all(&blockers_b[0]).unwrap();
    let parts_b = data.join("trajectories").join(&id_b);
    let mut legacy = trajectory_file::TrajectoryFile::open_or_create(&blockers_b[0], &id_b, "g1-smoke").unwrap();
    let mut runs: Vec<_> = std::fs::read_dir(&parts_b)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    runs.sort();
    for run in &runs[..3] {
        legacy
            .write_episode(&episode_part::read(&std::fs::read(run).unwrap()).unwrap())
            .unwrap();
    }
    assert_eq!(trajectory_file::episode_names(&blockers_b[0]).unwrap().len(), 3);
    let server = ServerProc::start(&data, &["--object-store-retry-s", "1"]);
    for (id, token, merged, parts) in [
        (&id, &token, &blockers[0], &parts),
        (&id_b, &token_b, &blockers_b[0], &parts_b),
    ] {
        wait_for_trajectories(&server, id, token);
        assert_eq!(trajectory_file::episode_names(merged).unwrap().len(), 6, "{id}");
        assert_parts_removed(parts, id);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A running server merges a completed submission left unmerged once it ended
/// `unmerged_sweep_s` ago (here a second): a replica that stopped between the completion and
/// its merge, or a merge whose retries ran out, no longer waits for some server's restart.
#[test]
fn a_running_server_merges_a_submission_left_unmerged() {
    let dir = tmp("unmerged-sweep");
    let data = dir.join("data");
    let server = ServerProc::start(&data, &["--object-store-retry-s", "1", "--unmerged-sweep-s", "1"]);
    let (token, id, blockers, config) = refused_submission(&server, &data, &[Refused::Merged]);
    client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).expect("the submission completes");
    assert_not_merged_yet(&server, &id, &token);
    std::fs::remove_dir_all(&blockers[0]).unwrap();
    // Long before the failed merge's own retry (a minute after it failed).
    let waited = std::time::Instant::now();
    while trajectories_status(&server, &id, &token) != 200 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(30),
            "{}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let log = server.log_text();
    assert!(
        log.contains(&format!(
            "submission {id}: the runs of this completed submission are merged now"
        )),
        "{log}"
    );
    assert_eq!(trajectory_file::episode_names(&blockers[0]).unwrap().len(), 6);
    assert_parts_removed(&data.join("trajectories").join(&id), &id);
    std::fs::remove_dir_all(&dir).ok();
}

/// A failed submission whose runs could not be merged when it failed (the store refused the
/// merged file) is merged at the next start; before, its parts stayed and its trajectories were
/// a 404 "has no trajectories" for good. Meanwhile the download says (503) they are being merged.
#[test]
fn a_failed_submission_left_unmerged_is_merged_at_the_next_start() {
    let dir = tmp("unmerged-failed");
    let data = dir.join("data");
    let server = ServerProc::start(&data, &["--object-store-retry-s", "1"]);
    // Its completion fails (the report), so the organiser can cancel it; then its merge fails.
    let (token, id, blockers, config) = refused_submission(&server, &data, &[Refused::Report, Refused::Merged]);
    assert!(client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).is_err());
    let (status, v) = server.post(
        &format!("/api/v1/submissions/{id}/cancel"),
        Some(common::server::ADMIN),
        "",
    );
    assert_eq!(status, 200, "{v}");
    // The merge at cancel time fails on the folder in the way (after the 1 s of retries).
    let waited = std::time::Instant::now();
    while !server.log_text().contains("merging the runs of a cancelled submission") {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "{}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_not_merged_yet(&server, &id, &token);
    // A counted run the store lost: no retry makes the file, and both answers say so.
    let folder = data.join("trajectories").join(&id);
    let part = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "part"))
        .expect("a stored run");
    let name = part.file_name().unwrap().to_str().unwrap().to_string();
    let idx: i64 = name[2..7].parse().unwrap();
    let aside = dir.join("aside.part");
    std::fs::rename(&part, &aside).unwrap();
    let trajectories = format!("/api/v1/submissions/{id}/trajectories");
    let (status, _, v) = server.call("GET", &trajectories, Some(&token), None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("runs_missing")),
        "{v}"
    );
    let said = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains(&format!("episodes {idx}")) && said.contains("missing from the object store"),
        "{v}"
    );
    let series = format!("/api/v1/submissions/{id}/episodes/{idx}/series");
    let (status, _, v) = server.call("GET", &series, Some(&token), None);
    assert_eq!(status, 404, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("its result counts, but its stored trajectory is missing"),
        "{v}"
    );
    std::fs::rename(&aside, &part).unwrap();
    assert_not_merged_yet(&server, &id, &token);
    let mut server = server;
    server.kill9();
    std::fs::remove_dir_all(&blockers[1]).unwrap();
    let server = ServerProc::start(&data, &["--object-store-retry-s", "1"]);
    wait_for_trajectories(&server, &id, &token);
    assert_eq!(trajectory_file::episode_names(&blockers[1]).unwrap().len(), 6);
    // Deleted just after the merged file is stored (which the download saw).
    assert_parts_removed(&data.join("trajectories").join(&id), &id);
    std::fs::remove_dir_all(&dir).ok();
}

/// The parts a server writes while its episodes run (`trajectory_store::part_draft`) hold the
/// same records as parts written whole when each episode ends (`--buffered-parts`, which turns
/// the drafts off): the same submission on two servers, each kept from merging so that its
/// parts stay, read back and compared bit for bit.
#[test]
fn parts_begun_while_episodes_run_hold_what_parts_written_whole_hold() {
    let dir = tmp("drafted-parts");
    let parts_of = |name: &str, flags: &[&str]| {
        let data = dir.join(name);
        let mut args = vec!["--object-store-retry-s", "1"];
        args.extend_from_slice(flags);
        let mut server = ServerProc::start(&data, &args);
        let (_, id, _blockers, config) = refused_submission(&server, &data, &[Refused::Merged]);
        client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).expect("the submission completes");
        // Its merge fails after the completion (after the 1 s of retries): the parts stay.
        let waited = std::time::Instant::now();
        while !server.log_text().contains("merging its trajectories failed") {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(60),
                "{}",
                server.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        server.kill9();
        let folder = data.join("trajectories").join(&id);
        let mut parts: Vec<(String, Vec<u8>)> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        parts.sort();
        parts
    };
    let drafted = parts_of("drafted", &[]);
    let whole = parts_of("whole", &["--buffered-parts"]);
    let names = |parts: &[(String, Vec<u8>)]| parts.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&drafted), names(&whole));
    assert_eq!(drafted.len(), 6, "{:?}", names(&drafted));
    for ((name, d), (_, w)) in drafted.iter().zip(&whole) {
        let (d_rec, w_rec) = (episode_part::read(d).unwrap(), episode_part::read(w).unwrap());
        assert!(d_rec.num_rows() > 16, "{name}: {} rows", d_rec.num_rows());
        // The drafted part's first block holds the first rows handed over (16 or more, not all).
        let first_block = u64::from_le_bytes(d[8..16].try_into().unwrap()) as usize;
        assert!(
            (16..d_rec.num_rows()).contains(&first_block),
            "{name}: a first block of {first_block} rows, {} in all",
            d_rec.num_rows()
        );
        assert_eq!(
            u64::from_le_bytes(w[8..16].try_into().unwrap()) as usize,
            w_rec.num_rows()
        );
        let bits = |r: &arena_data::trajectory_file::EpisodeRecord| {
            let rows = &r.rows;
            rows.arrays()
                .into_iter()
                .chain(rows.optional_arrays())
                .map(|a| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        assert!(bits(&d_rec) == bits(&w_rec), "{name}: the rows differ");
        let fields = |r: &arena_data::trajectory_file::EpisodeRecord| {
            (
                r.episode,
                r.motion.clone(),
                r.status.clone(),
                r.reason.clone(),
                r.seed,
                r.scored_until_s,
            )
        };
        assert_eq!(fields(&d_rec), fields(&w_rec), "{name}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Answers its third request two seconds late (each lane's first request has a 30 s set-up
/// grace, so the third is the first that can miss the deadline).
struct LateOnce {
    inner: ReplayAgent,
    requests: usize,
}

impl arena_sdk::Agent for LateOnce {
    fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
        self.inner.configure(spec);
    }
    fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
        self.inner.reset(episodes);
    }
    fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
        self.requests += 1;
        if self.requests == 3 {
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        self.inner.act(batch, actions);
    }
}

#[test]
fn a_late_answer_loses_nothing_the_server_sent() {
    // Every episode times out while the agent sleeps; the server ends them, completes the
    // submission and closes before the late answer goes out. The EpisodeEnds and the Disconnect
    // it sent first still reach the summary, over both transports, with no reconnect.
    let dir = tmp("late-answer");
    // One lane, so the missed request holds every episode (with two, the other lane's could
    // finish while the agent sleeps, and the server would not close).
    let server = ServerProc::start(&dir.join("data"), &["--step-timeout-s", "0.3", "--lanes", "1"]);
    let token = server.team("late");
    for url in [server.ws_url(), server.grpc_url()] {
        let mut config = ClientConfig::new(
            url.clone(),
            &token,
            Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: None,
            },
        );
        config.max_batch = 6;
        let mut agent = LateOnce {
            inner: ReplayAgent::new(),
            requests: 0,
        };
        let summary = client::run_blocking(&config, &mut agent, &mut |_| {}).unwrap();
        assert_eq!(summary.submission_status, "COMPLETED", "{url}");
        assert_eq!(summary.reconnects, 0, "{url}");
        let mut ends: Vec<(u32, String)> = summary
            .episodes
            .iter()
            .map(|e| (e.episode_id, e.status.clone()))
            .collect();
        ends.sort();
        assert_eq!(
            ends,
            (0..6).map(|i| (i, "timeout".to_string())).collect::<Vec<_>>(),
            "{url}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_server_names_the_problems_of_its_benchmarks_folder_at_start() {
    let dir = common::tmp("benchmark-problems");
    let benchmarks = dir.join("benchmarks");
    std::fs::create_dir_all(&benchmarks).unwrap();
    let smoke =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml")).unwrap();
    std::fs::write(benchmarks.join("g1-smoke.toml"), &smoke).unwrap();
    std::fs::write(
        benchmarks.join("copy.toml"),
        smoke.replace("name = \"g1-smoke\"", "name = \"twin\""),
    )
    .unwrap();
    std::fs::write(
        benchmarks.join("copy2.toml"),
        smoke.replace("name = \"g1-smoke\"", "name = \"twin\""),
    )
    .unwrap();
    std::fs::write(benchmarks.join("typo.toml"), "name = \"typo\"\nversoin = 1\n").unwrap();
    let no_pages = dir.join("no-pages");
    let server = ServerProc::start(
        &dir.join("data"),
        &[
            "--benchmarks-dir",
            benchmarks.to_str().unwrap(),
            "--web-dir",
            no_pages.to_str().unwrap(),
        ],
    );
    let log = server.log_text();
    assert!(log.contains("warning: ") && log.contains("typo.toml"), "{log}");
    // A mistyped pages folder is said at start, not at the first page request.
    assert!(log.contains("no-pages has no index.html"), "{log}");
    assert!(
        log.contains("benchmark name \"twin\" is used by 2 files") && log.contains("none of them is offered"),
        "{log}"
    );
    // Only the benchmark a team can run is listed.
    let (status, list) = server.get("/api/v1/benchmarks", None);
    assert_eq!(status, 200, "{list}");
    let names: Vec<&str> = list["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["g1-smoke"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 30 §2: a submission nobody runs (its agent crashed, or never came) says it waits for
/// its agent, and after the organiser's `idle_submission_expiry_s` it ends FAILED with the
/// reason; a submission that an agent runs is not touched.
#[test]
fn an_abandoned_submission_waits_for_its_agent_then_expires() {
    let dir = tmp("idle-expiry");
    let server = ServerProc::start(&dir.join("data"), &["--idle-submission-expiry-s", "2"]);
    let token = server.team("gone");
    let (status, created) = server.post("/api/v1/submissions", Some(&token), "{\"benchmark\": \"g1-smoke\"}");
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(
        (s["status"].as_str(), s["awaiting_agent"].as_bool()),
        (Some("PENDING"), Some(true)),
        "{s}"
    );
    assert_eq!(s["idle_expiry_s"], 2.0, "{s}");
    // Meanwhile another team's agent runs a whole submission: it completes.
    let other = server.team("busy");
    let ran = submit(&server.ws_url(), &other, Encoding::Binary);
    assert_eq!(ran.submission_status, "COMPLETED");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let s = loop {
        let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
        if s["status"] == "FAILED" || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(s["status"], "FAILED", "{s}");
    assert_eq!(s["awaiting_agent"], false, "{s}");
    let reason = s["error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("abandoned") && reason.contains("idle_submission_expiry_s"),
        "{s}"
    );
    let (_, done) = server.get(&format!("/api/v1/submissions/{}", ran.submission_id), Some(&other));
    assert_eq!(done["status"], "COMPLETED", "{done}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The server's own downtime is not its agents' idleness: a submission left waiting while the
/// server was down longer than the expiry is not abandoned as the server starts again (an agent
/// waiting out the restart found it FAILED), only once its idle time with a server up reaches
/// the expiry.
#[test]
fn a_restart_starts_the_idle_period_again() {
    let dir = tmp("idle-restart");
    let data = dir.join("data");
    let mut server = ServerProc::start(&data, &["--idle-submission-expiry-s", "4"]);
    let token = server.team("patient");
    let (status, created) = server.post("/api/v1/submissions", Some(&token), "{\"benchmark\": \"g1-smoke\"}");
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    server.terminate();
    // Down longer than the expiry.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let server = ServerProc::start(&data, &["--idle-submission-expiry-s", "4"]);
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(
        (s["status"].as_str(), s["awaiting_agent"].as_bool()),
        (Some("PENDING"), Some(true)),
        "{s}\n{}",
        server.log_text()
    );
    // Idle for the expiry with a server up, nobody ran it: abandoned then.
    let s = server.wait_final(&id, &token, std::time::Duration::from_secs(30));
    assert_eq!(s["status"], "FAILED", "{s}");
    assert!(s["error"].as_str().unwrap_or_default().contains("abandoned"), "{s}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The status of a submission's merged-trajectory download.
fn trajectories_status(server: &ServerProc, id: &str, token: &str) -> u16 {
    let path = format!("/api/v1/submissions/{id}/trajectories");
    server.call("GET", &path, Some(token), None).0
}

/// A submission whose every episode ran but whose completion failed (its report could not be
/// stored) is not "abandoned" by the idle expiry: once the store works again, the expiry
/// loop completes it. Before, it ended FAILED, its results off every leaderboard.
#[test]
fn a_submission_whose_completion_failed_is_completed_not_abandoned() {
    let dir = tmp("idle-complete");
    let data = dir.join("data");
    let server = ServerProc::start(
        &data,
        &["--idle-submission-expiry-s", "2", "--object-store-retry-s", "0"],
    );
    let token = server.team("unlucky");
    let (status, created) = server.post("/api/v1/submissions", Some(&token), "{\"benchmark\": \"g1-smoke\"}");
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    // A folder where the report goes: storing it fails until the folder is gone.
    let blocker = data.join("reports").join(format!("{id}.json"));
    std::fs::create_dir_all(blocker.join("in-the-way")).unwrap();
    let mut config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: Some(id.clone()),
        },
    );
    config.max_reconnects = 0;
    let ran = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {});
    assert!(ran.is_err(), "the completion cannot store the report: {ran:?}");
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(s["status"], "RUNNING", "{s}");
    std::fs::remove_dir_all(&blocker).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let s = loop {
        let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
        if s["status"] != "RUNNING" || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(s["status"], "COMPLETED", "{s}\n{}", server.log_text());
    assert_eq!(trajectories_status(&server, &id, &token), 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// Per-episode files a server left behind after a submission COMPLETED (stopped before it
/// deleted them) go at the next start, as do staged copies a killed server left in the store;
/// the merged file stays.
#[test]
fn a_starting_server_removes_what_a_completed_submission_left_behind() {
    let dir = tmp("leftover-parts");
    let data = dir.join("data");
    let mut server = ServerProc::start(&data, &[]);
    let token = server.team("tidy");
    let ran = submit(&server.ws_url(), &token, Encoding::Binary);
    assert_eq!(ran.submission_status, "COMPLETED");
    let id = ran.submission_id;
    server.wait_merged(&id, &token, std::time::Duration::from_secs(60));
    server.kill9();
    let trajectories = data.join("trajectories");
    let merged = trajectories.join(format!("{id}.h5"));
    assert!(merged.exists());
    let parts = trajectories.join(&id);
    std::fs::create_dir_all(&parts).unwrap();
    // A run nobody counted (its commit never came): the merged file holds the counted one. A
    // counted run stored apart would be merged again instead (the store's file may hold another
    // run under its number, after a database restored from an older backup).
    std::fs::write(parts.join("ep00000-a7.part"), b"left behind").unwrap();
    let staged = trajectories.join(format!("{id}.h5#42"));
    let file = std::fs::File::create(&staged).unwrap();
    file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .unwrap();
    let server = ServerProc::start(&data, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while parts.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!parts.exists(), "{}", server.log_text());
    assert!(!staged.exists() && merged.exists());
    assert_eq!(trajectories_status(&server, &id, &token), 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// A practice run whose server goes away asks the next one only for the episodes that had not
/// ended: before, the Rust SDK asked for every episode again and stopped once as many had
/// ended, so a finished one ran twice and the unfinished one never did.
#[test]
fn a_practice_run_resumes_with_the_episodes_not_yet_ended() {
    let dir = tmp("e2e-practice-resume");
    let bind = format!("127.0.0.1:{}", common::cluster::free_port());
    let server = std::sync::Arc::new(std::sync::Mutex::new(ServerProc::start(&dir, &["--bind", &bind])));
    let token = server.lock().unwrap().team("resumer");
    let mut config = ClientConfig::new(
        format!("ws://{bind}/api/v1/agent"),
        &token,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: vec![
                ResetEpisode {
                    motion: "stand".into(),
                    duration_s: 0.5,
                    ..Default::default()
                },
                ResetEpisode {
                    motion: "squat".into(),
                    duration_s: 6.0,
                    ..Default::default()
                },
            ],
        },
    );
    config.initial_backoff = std::time::Duration::from_millis(200);
    config.max_reconnects = 20;
    let mut restarted = false;
    let summary = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |event| {
        // The first episode has ended, the second runs: the server stops, another starts.
        if let ClientEvent::EpisodeEnd(_) = event
            && !restarted
        {
            restarted = true;
            let mut s = server.lock().unwrap();
            s.kill9();
            *s = ServerProc::start(&dir, &["--bind", &bind]);
        }
    })
    .unwrap();
    assert!(restarted);
    let steps: Vec<u32> = summary.episodes.iter().map(|e| e.steps).collect();
    assert_eq!(steps, [25, 300], "stand once, then squat whole");
    assert!(summary.reconnects >= 1);
    // Practice with nothing to practise is refused at once, not waited on forever.
    let empty = ClientConfig::new(
        format!("ws://{bind}/api/v1/agent"),
        &token,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: Vec::new(),
        },
    );
    let err = client::run_blocking(&empty, &mut ReplayAgent::new(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("give at least one episode"), "{err}");
}

/// A submission the organiser cancels while its episodes run has them stopped at once: the
/// agent is asked for nothing more and told the submission's end, where before the lanes ran
/// every episode in flight to its end (a whole clip) for results that would not be counted.
#[test]
fn a_cancel_stops_the_episodes_in_flight() {
    use std::sync::{Arc, Mutex};
    /// Replays the reference; at its `cancel_at`-th action it cancels its own submission (as the
    /// organiser), then counts the actions it is still asked for.
    struct CancelsMidway {
        inner: ReplayAgent,
        addr: std::net::SocketAddr,
        submission: Arc<Mutex<String>>,
        acts: usize,
        cancel_at: usize,
        after_cancel: usize,
    }
    impl arena_sdk::Agent for CancelsMidway {
        fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
            self.inner.configure(spec)
        }
        fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
            self.inner.reset(episodes)
        }
        fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
            self.acts += 1;
            if self.acts > self.cancel_at {
                self.after_cancel += 1;
            }
            self.inner.act(batch, actions);
            if self.acts == self.cancel_at {
                let id = self.submission.lock().unwrap().clone();
                let path = format!("/api/v1/submissions/{id}/cancel");
                let (status, body) = common::server::http(self.addr, "POST", &path, Some(ADMIN), Some(""));
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            }
        }
    }
    let dir = tmp("e2e-cancel-in-flight");
    let server = ServerProc::start(&dir, &["--lanes", "1", "--max-batch", "2"]);
    let token = server.team("cancelled");
    // The address the server prints, as a participant pastes it: its agent endpoint.
    let config = ClientConfig::new(
        format!("http://{}", server.addr),
        &token,
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: None,
        },
    );
    let submission = Arc::new(Mutex::new(String::new()));
    let mut agent = CancelsMidway {
        inner: ReplayAgent::new(),
        addr: server.addr,
        submission: submission.clone(),
        acts: 0,
        cancel_at: 20,
        after_cancel: 0,
    };
    let seen = submission.clone();
    let outcome = client::run_blocking(&config, &mut agent, &mut |e| {
        if let ClientEvent::Connected(c) = e {
            *seen.lock().unwrap() = c.submission_id.clone();
        }
    });
    eprintln!(
        "after the cancel the agent was asked {} more times: {outcome:?}",
        agent.after_cancel
    );
    assert!(agent.acts >= 20, "the cancel was made");
    // The step whose answer was under way when the cancel came may still be asked for.
    assert!(
        agent.after_cancel <= 1,
        "the lane ran its episodes on after the cancel: {} more actions asked for",
        agent.after_cancel
    );
    let id = submission.lock().unwrap().clone();
    let (status, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(ADMIN));
    assert_eq!((status, s["status"].as_str()), (200, Some("FAILED")), "{s}");
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    let episodes = results["episodes"].as_array().unwrap();
    assert!(
        episodes
            .iter()
            .all(|e| e["status"] == "FAILED" && e["reason"] == "cancelled by the organiser"),
        "{results}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// An `act` that blocks past the session's silence limit: the server times the episodes out and
/// ends the submission while the client is busy, its heartbeats, EpisodeEnds and Disconnect
/// waiting in the socket. The client reads them before it judges the server silent: every
/// episode's end and the server's counts reach the summary (a random pick of the client's
/// timer called the server silent, dropped them, reconnected to a finished submission and
/// reported it COMPLETED with nothing to say it scored nothing: the Rust SDK walkthrough).
#[test]
fn what_the_server_sent_during_a_long_act_is_read_first() {
    struct StallsOnce {
        inner: ReplayAgent,
        acts: usize,
    }
    impl arena_sdk::Agent for StallsOnce {
        fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
            self.inner.configure(spec)
        }
        fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
            self.inner.reset(episodes)
        }
        fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
            self.acts += 1;
            if self.acts == 5 {
                // Past the step deadline (1 s) and the silence limit (3 s).
                std::thread::sleep(std::time::Duration::from_secs(6));
            }
            self.inner.act(batch, actions)
        }
    }
    let dir = tmp("e2e-long-act");
    // One lane holding all six episodes: the stall times every one of them out, however late
    // a second lane would have started its own (on a loaded machine it had not, and the session
    // ended for silence with three of them still to run).
    let server = ServerProc::start(
        &dir,
        &[
            "--lanes",
            "1",
            "--max-batch",
            "6",
            "--step-timeout-s",
            "1",
            "--heartbeat-interval-s",
            "1",
            "--heartbeat-timeout-s",
            "3",
        ],
    );
    let token = server.team("stalling");
    // Both transports: the race was in the client's loop, whatever carries the frames.
    for url in [server.ws_url(), server.grpc_url()] {
        let config = ClientConfig::new(
            &url,
            &token,
            Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: None,
            },
        );
        let mut agent = StallsOnce {
            inner: ReplayAgent::new(),
            acts: 0,
        };
        let summary = client::run_blocking(&config, &mut agent, &mut |_| {}).expect("the run ends");
        eprintln!("{url}: {summary:?}");
        assert_eq!(summary.reconnects, 0, "the server was called silent: {summary:?}");
        assert_eq!(summary.episodes.len(), 6, "{summary:?}");
        assert!(summary.episodes.iter().all(|e| e.status == "timeout"), "{summary:?}");
        assert_eq!(
            summary.final_counts,
            Some(client::FinalCounts { scored: 0, failed: 6 }),
            "{summary:?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// An agent whose `act` panics fails its run as its `failure()` would: the client tells the
/// server why (its `disconnect`), returns `AgentFailed`, and the submission waits to be resumed
/// with the agent's words in its episodes' reasons (the Rust SDK walkthrough: the panic unwound
/// through the client, the server heard nothing, and the CLI gave no resume hint).
#[test]
fn a_panic_in_act_is_the_agents_failure() {
    struct PanicsAtThree(ReplayAgent, usize);
    impl arena_sdk::Agent for PanicsAtThree {
        fn configure(&mut self, spec: &arena_sdk::protocol::EpisodeSpec) {
            self.0.configure(spec)
        }
        fn reset(&mut self, episodes: &[arena_sdk::protocol::EpisodeInfo]) {
            self.0.reset(episodes)
        }
        fn act(&mut self, batch: &arena_sdk::Batch<'_>, actions: &mut [f32]) {
            self.1 += 1;
            assert!(self.1 < 3, "the policy's tensor has the wrong shape");
            self.0.act(batch, actions)
        }
    }
    let dir = tmp("e2e-act-panics");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("panicky");
    let config = ClientConfig::new(
        server.ws_url(),
        &token,
        Mode::Submission {
            benchmark: "g1-smoke".into(),
            submission_id: None,
        },
    );
    let mut id = String::new();
    let err = client::run_blocking(&config, &mut PanicsAtThree(ReplayAgent::new(), 0), &mut |e| {
        if let ClientEvent::Connected(c) = e {
            id = c.submission_id.clone();
        }
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, client::ClientError::AgentFailed(_)) && text.contains("its act panicked: the policy's tensor"),
        "{text}"
    );
    // The server heard why: the episodes it gave back say so.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
        let told = results["episodes"].as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e["reason"].as_str().is_some_and(|r| r.contains("panicked")))
        });
        if told {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{results}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(s["status"], "RUNNING", "left to be resumed: {s}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The SDK's example agent (built by `cargo test --workspace` beside the test binaries).
fn sdk_example(name: &str) -> Option<std::path::PathBuf> {
    let deps = std::env::current_exe().ok()?.parent()?.to_path_buf();
    let path = deps.parent()?.join("examples").join(name);
    if path.is_file() {
        return Some(path);
    }
    eprintln!(
        "skipped: no {} (`cargo test --workspace` builds the SDK's examples)",
        path.display()
    );
    None
}

/// Ctrl-C of a Rust agent program mid-submission: exit 130 with the flag that finishes the
/// submission it leaves RUNNING (the Rust SDK walkthrough: it died silent).
#[test]
fn an_interrupted_agent_program_says_how_to_finish_its_submission() {
    use std::io::BufRead;
    let Some(replay) = sdk_example("replay") else {
        return;
    };
    let dir = tmp("e2e-interrupt");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("interrupted");
    let mut agent = std::process::Command::new(replay)
        .args([
            "--server",
            &server.ws_url(),
            "--token",
            &token,
            "--benchmark",
            "g1-smoke",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(agent.stdout.take().unwrap()).lines();
    let connected = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("connected:"))
        .expect("the agent connects");
    let id = connected
        .split_whitespace()
        .find(|w| w.starts_with("sub-"))
        .map(|w| w.trim_end_matches(',').to_string())
        .unwrap_or_else(|| panic!("a submission id in {connected:?}"));
    // SAFETY: kill(2) on a child this test started and has not waited for.
    assert_eq!(unsafe { libc::kill(agent.id() as i32, libc::SIGINT) }, 0);
    let out = agent.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted") && err.contains(&format!("run again with --submission {id}")),
        "{err}"
    );
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(s["status"], "RUNNING", "left to be resumed: {s}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A data folder that cannot take the episodes' files for a while (the operator walkthrough: a
/// full disk) delays their commits and costs them nothing once it can again: the writes are
/// retried as the object store's are, not charged as server faults at once (which failed two
/// episodes of a team for good within seconds, its agent reconnecting quickly).
#[test]
fn episode_files_that_cannot_be_written_for_a_while_are_retried_not_charged() {
    let dir = tmp("e2e-no-room");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("roomless");
    // Both places an episode's file can go, the store's folder and the scratch folder, are
    // files until a write of one has failed.
    let blocked = [dir.join("trajectories"), dir.join("scratch")];
    for path in &blocked {
        if path.is_dir() {
            std::fs::remove_dir_all(path).unwrap();
        }
        std::fs::write(path, b"not a folder").unwrap();
    }
    // Freed once a write has failed and is being retried (however long the run takes to get there).
    let (freed, log) = (blocked.clone(), server.log.clone());
    let freeing = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("failed, retrying in")
        {
            assert!(std::time::Instant::now() < deadline, "no write was retried");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        for path in &freed {
            std::fs::remove_file(path).unwrap();
            std::fs::create_dir_all(path).unwrap();
        }
    });
    let summary = submit(&server.ws_url(), &token, Encoding::Binary);
    freeing.join().unwrap();
    assert_eq!(
        (summary.submission_status.as_str(), summary.final_counts),
        ("COMPLETED", Some(client::FinalCounts { scored: 6, failed: 0 })),
        "{}",
        server.log_text()
    );
    let id = &summary.submission_id;
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
    for e in results["episodes"].as_array().unwrap() {
        assert_eq!(e["attempts"], 1, "{e}");
    }
    let log = server.log_text();
    assert!(log.contains("failed, retrying in"), "{log}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A stopped server leaves its whole SQLite database in `arena.db`: the write-ahead log is
/// written into it (the operator walkthrough: after a clean stop the file alone had no tables,
/// the classic "stop, then copy arena.db" backup copied nothing).
#[test]
fn a_stopped_server_leaves_its_database_in_one_file() {
    let dir = tmp("e2e-checkpoint");
    let mut server = ServerProc::start(&dir, &[]);
    server.team("kept");
    server.terminate();
    let wal = dir.join("arena.db-wal");
    assert!(
        std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
        "{} holds what arena.db lacks",
        wal.display()
    );
    // The file alone, copied elsewhere, is the database.
    let copy = dir.join("copy.db");
    std::fs::copy(dir.join("arena.db"), &copy).unwrap();
    let names: Vec<String> = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use sqlx::Connection;
        let url = format!("sqlite://{}?mode=ro", copy.display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT name FROM teams")
            .fetch_all(&mut conn)
            .await
            .unwrap()
    });
    assert_eq!(names, ["kept"]);
    std::fs::remove_dir_all(&dir).ok();
}
