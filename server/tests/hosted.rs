//! Issue 40: hosted evaluation. A team uploads an exported policy (the committed tracker's ONNX
//! file); the server checks it against the benchmark, stores it, runs it itself (no agent
//! connected) to COMPLETED, and its per-episode results are those of the same file run by
//! `OnnxAgent` in process. Files that cannot run are refused with every problem, before any
//! submission is created or counted; the server stays healthy.

mod common;
#[path = "../../onnx/tests/hostile_models/mod.rs"]
mod hostile_models;

use arena_bench::spec::{find_benchmark, shipped_dir};
use arena_onnx::{OnnxAgent, OnnxPolicy, PolicyOverrides, Supply};
use arena_runner::episode;
use arena_runner::local::{LocalOptions, run_local};
use common::server::ServerProc;
use common::tmp;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-smoke/policy.onnx")
}

fn upload(server: &ServerProc, query: &str, token: &str, body: &[u8]) -> (u16, Value) {
    server.upload_policy(query, token, body)
}

/// Percent-encodes a query value.
fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn submissions(server: &ServerProc, token: &str) -> usize {
    let (_, v) = server.get("/api/v1/submissions", Some(token));
    v["submissions"].as_array().map_or(0, Vec::len)
}

#[test]
fn an_uploaded_policy_is_evaluated_by_the_server() {
    let dir = tmp("hosted");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("uploaders");
    let file = std::fs::read(committed()).unwrap();

    // Refused, every problem at once, nothing created or counted.
    let (status, v) = upload(
        &server,
        "benchmark=g1-smoke-robot&file_name=x.onnx",
        &token,
        b"not an onnx file",
    );
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("unsupported_policy")),
        "{v}"
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("not a model"), "{v}");
    let (status, v) = upload(&server, "benchmark=g1-smoke&file_name=policy.onnx", &token, &file);
    assert_eq!(status, 422, "{v}");
    let problems: Vec<&str> = v["error"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        problems.iter().any(|p| p.contains("action mode is 'normalized'")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("does not send the observation group 'motion_command'")),
        "{problems:?}"
    );
    // Gains beyond the benchmark's bounds and another anchor body (through the overrides a
    // file's metadata can be completed with), both listed at once.
    let overrides = serde_json::json!({"joint_stiffness": vec![1000.0; 29], "anchor_body": "pelvis"});
    let query = format!(
        "benchmark=g1-smoke-robot&file_name=policy.onnx&overrides={}",
        url_encode(&overrides.to_string())
    );
    let (status, v) = upload(&server, &query, &token, &file);
    assert_eq!(status, 422, "{v}");
    let problems = v["error"]["problems"].to_string();
    assert!(problems.contains("above this benchmark's kp_max"), "{problems}");
    assert!(problems.contains("the policy's anchor body is 'pelvis'"), "{problems}");
    for (bad, why) in [
        (r#"{"action_scal": [0.5]}"#, "unknown field `action_scal`"),
        (r#"{"action_scale": 0.5}"#, "expected a sequence"),
    ] {
        let query = format!("benchmark=g1-smoke-robot&overrides={}", url_encode(bad));
        let (status, v) = upload(&server, &query, &token, &file);
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(status == 400 && message.contains(why), "{bad}: {status} {v}");
    }
    let (status, _) = upload(&server, "benchmark=g1-smoke-robot", &token, b"");
    assert_eq!(status, 400);
    // A file without gains names the preset it was trained with, or is refused (it ran on the
    // benchmark's default gains unsaid); the hints name the upload's overrides, not options of
    // the remote runner.
    let without = |keys: &[&str]| {
        let mut model = hostile_models::plain(hostile_models::node("Identity", &["h"], &["actions"]), vec![]);
        model.metadata_props.retain(|p| !keys.contains(&p.key.as_str()));
        prost::Message::encode_to_vec(&model)
    };
    let bare = without(&["joint_stiffness", "joint_damping"]);
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &token, &bare);
    assert_eq!(status, 422, "{v}");
    let problems = v["error"]["problems"].to_string();
    assert!(
        problems.contains("it has no PD gains") && problems.contains("gain_preset"),
        "{problems}"
    );
    let (status, v) = upload(
        &server,
        "benchmark=g1-smoke-robot",
        &token,
        &without(&["default_joint_pos"]),
    );
    assert_eq!(status, 422, "{v}");
    let problems = v["error"]["problems"].to_string();
    assert!(
        problems.contains("(give overrides.default_joint_pos)") && !problems.contains("--"),
        "{problems}"
    );
    // A default pose in degrees would fail every episode at its first step: refused up front.
    let degrees = serde_json::json!({"default_joint_pos": vec![20.0; 29]});
    let query = format!(
        "benchmark=g1-smoke-robot&overrides={}",
        url_encode(&degrees.to_string())
    );
    let (status, v) = upload(&server, &query, &token, &file);
    assert_eq!(status, 422, "{v}");
    let problems = v["error"]["problems"].to_string();
    assert!(
        problems.contains("farther than π outside the joints' ranges") && problems.contains("left_knee_joint 20 rad"),
        "{problems}"
    );
    let overrides = serde_json::json!({"gain_preset": "nope"});
    let query = format!(
        "benchmark=g1-smoke-robot&overrides={}",
        url_encode(&overrides.to_string())
    );
    let (status, v) = upload(&server, &query, &token, &bare);
    assert_eq!(status, 422, "{v}");
    let problems = v["error"]["problems"].to_string();
    assert!(
        problems.contains("nope") && problems.contains("is not offered by this benchmark"),
        "{problems}"
    );
    assert_eq!(submissions(&server, &token), 0, "a refused file creates no submission");

    // Accepted: stored, named after its run, evaluated to the end with no agent connected.
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot&file_name=policy.onnx", &token, &file);
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(v["agent_name"], "arena-ppo/g1-smoke-robot", "{v}");
    assert_eq!(v["hosted"]["bytes"], file.len(), "{v}");
    let sha = v["hosted"]["sha256"].as_str().unwrap();
    // How it maps onto the arena, as `arena-agent onnx --show` prints it (the submission page).
    let mapping = &v["hosted"]["mapping"];
    assert_eq!(mapping["convention"], "mjlab", "{mapping}");
    assert_eq!(mapping["terms"][0]["name"], "command", "{mapping}");
    assert_eq!(mapping["terms"][0]["columns"], serde_json::json!([0, 58]), "{mapping}");
    assert_eq!(
        mapping["joint_stiffness"].as_array().map(Vec::len),
        Some(29),
        "{mapping}"
    );
    let submission = server.wait_final(&id, &token, Duration::from_secs(300));
    assert_eq!(submission["status"], "COMPLETED", "{submission}");
    let sessions = submission["sessions"].as_array().unwrap();
    assert_eq!(sessions[0]["outcome"], "completed", "{submission}");
    assert_eq!(submission["hosted"]["sha256"], sha, "{submission}");
    let (status, head, body) = common::server::request(
        server.addr,
        "GET",
        &format!("/api/v1/submissions/{id}/policy"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("filename=\"policy.onnx\""), "{head}");
    let etag = |head: &str| {
        head.lines()
            .find(|l| l.to_ascii_lowercase().starts_with("etag:"))
            .map(str::to_string)
    };
    let tag = etag(&head);
    // The file's hash, not the store's inode and time, which told when it was written.
    assert_eq!(tag.as_deref(), Some(format!("etag: \"{sha}\"").as_str()), "{head}");
    // Another team hands in the same file: stored once, the first submission's file (and its
    // download tag, which told when the other team uploaded) untouched.
    let copycat = server.team("copycats");
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot&file_name=mine.onnx", &copycat, &file);
    assert_eq!(status, 201, "{v}");
    let (_, again, _) = common::server::request(
        server.addr,
        "GET",
        &format!("/api/v1/submissions/{id}/policy"),
        Some(&token),
        None,
    );
    assert_eq!(etag(&again), tag, "{again}");
    assert_eq!(
        body, file,
        "the organiser and the team can download the file as uploaded"
    );
    let url = format!("http://{}", server.addr);
    let shown = common::ok(&common::arena(&[
        "admin",
        "--server",
        &url,
        "--admin-token",
        common::server::ADMIN,
        "submissions",
        "show",
        &id,
    ]));
    assert!(
        shown.contains(&format!(
            "hosted policy: policy.onnx ({} bytes, sha256 {sha}",
            file.len()
        )),
        "{shown}"
    );
    let stored = dir.join(format!("policies/{sha}.onnx"));
    assert_eq!(
        std::fs::read(&stored).ok(),
        Some(file.clone()),
        "kept content-addressed: {}",
        stored.display()
    );

    // The same per-episode results as the file run in process by the same engine.
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
    let hosted: Vec<&Value> = results["episodes"].as_array().unwrap().iter().collect();
    let names = arena_bench::metrics::metric_names();
    let (_, spec) = find_benchmark("g1-smoke-robot", &shipped_dir(), &names).unwrap();
    let clips = episode::benchmark_clips(&spec, Path::new("."), &arena_sim::RobotConfig::default()).unwrap();
    let mut agent =
        OnnxAgent::new(OnnxPolicy::load(&committed(), &PolicyOverrides::default(), Supply::AgentOptions).unwrap());
    let options = LocalOptions {
        batch: 1,
        threads: 1,
        ..Default::default()
    };
    let local = run_local(&spec, &clips, &mut agent, &options, &mut |_, _, _| {}).unwrap();
    assert_eq!(hosted.len(), local.episodes().len());
    for (h, l) in hosted.iter().zip(local.episodes()) {
        assert_eq!(h["motion"], l.motion.as_str());
        for key in ["mpjpe_g", "mjlab_success", "emd"] {
            let (a, b) = (h["metrics"][key].as_f64().unwrap(), l.metrics[key]);
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{} {key}: hosted {a}, in process {b}",
                l.motion
            );
        }
    }
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 40 §3: a phase that takes hosted submissions only refuses every route by which a
/// participant's agent would receive its motions (a remote session over WebSocket and gRPC, a
/// practice session, a submission created for an agent), and takes an uploaded file.
#[test]
fn a_hosted_only_phase_streams_its_motions_to_no_agent() {
    let dir = tmp("hosted-only");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("uploaders");
    let admin = common::server::ADMIN;
    let (status, v) = server.post("/api/v1/challenges", Some(admin), r#"{"id": "cup", "title": "Cup"}"#);
    assert_eq!(status, 201, "{v}");
    let now = arena_server::storage::now_ms();
    let body = serde_json::json!({
        "id": "final", "benchmark": "g1-smoke-robot", "hosted_only": true, "leaderboard": "private",
        "starts_at": arena_server::access::rfc3339(now - 3_600_000),
        "ends_at": arena_server::access::rfc3339(now + 3_600_000),
    });
    let (status, phase) = server.post("/api/v1/challenges/cup/phases", Some(admin), &body.to_string());
    assert_eq!(status, 201, "{phase}");
    assert_eq!(phase["hosted_only"], true, "{phase}");
    let (status, v) = server.post("/api/v1/challenges/cup/phases", Some(admin), r#"{"id": "x", "benchmark": "g1-smoke", "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2027-01-01T00:00:00Z", "hosted_only": "yes"}"#);
    assert_eq!(
        (
            status,
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("hosted_only: expected true or false")
        ),
        (400, true),
        "{v}"
    );

    // Every agent route is refused, saying how to hand in the file.
    let (status, v) = server.post("/api/v1/submissions", Some(&token), r#"{"phase": "final"}"#);
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("takes hosted submissions only"),
        "{v}"
    );
    // The benchmark named without its phase: refused, saying at once that the phase takes
    // files (it said "run it through its phase", which refused in turn).
    let (status, v) = server.post(
        "/api/v1/submissions",
        Some(&token),
        r#"{"benchmark": "g1-smoke-robot"}"#,
    );
    assert_eq!(status, 403, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("belongs to challenge phase(s) final") && message.contains("takes hosted submissions only"),
        "{v}"
    );
    for url in [server.ws_url(), format!("grpc://{}", server.addr)] {
        for practice in [false, true] {
            let mode = if practice {
                arena_sdk::Mode::Practice {
                    benchmark: String::new(),
                    episodes: vec![arena_sdk::protocol::ResetEpisode {
                        motion: "squat".into(),
                        ..Default::default()
                    }],
                }
            } else {
                arena_sdk::Mode::Submission {
                    benchmark: String::new(),
                    submission_id: None,
                }
            };
            let mut config = arena_sdk::ClientConfig::new(url.clone(), &token, mode);
            config.phase = "final".into();
            let e = arena_sdk::client::run_blocking(&config, &mut arena_sdk::agents::ZeroAgent::default(), &mut |_| {})
                .expect_err("refused");
            let text = e.to_string();
            assert!(
                text.contains("takes hosted submissions only") || text.contains("practice is not"),
                "{url} practice={practice}: {text}"
            );
        }
    }

    // The file goes in and is evaluated.
    let file = std::fs::read(committed()).unwrap();
    let (status, v) = upload(&server, "phase=final&file_name=policy.onnx", &token, &file);
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["phase"], "final", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let started = Instant::now();
    loop {
        let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
        if s["status"] == "COMPLETED" {
            break;
        }
        assert!(
            s["status"] != "FAILED" && started.elapsed() < Duration::from_secs(300),
            "{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // While the phase is private, no route the team or a visitor can reach names a motion or
    // tells its length (the pages draw from these).
    let clips = {
        let names = arena_bench::metrics::metric_names();
        let (_, spec) = find_benchmark("g1-smoke-robot", &shipped_dir(), &names).unwrap();
        episode::benchmark_clips(&spec, Path::new("."), &arena_sim::RobotConfig::default()).unwrap()
    };
    let mut seen = String::new();
    for (path, expected) in [
        ("/api/v1/benchmarks/g1-smoke-robot".to_string(), 200),
        ("/api/v1/benchmarks".into(), 200),
        (format!("/api/v1/submissions/{id}"), 200),
        ("/api/v1/submissions".into(), 200),
        ("/api/v1/phases/final".into(), 200),
        ("/api/v1/challenges/cup".into(), 200),
        (format!("/api/v1/submissions/{id}/results"), 403),
        (format!("/api/v1/submissions/{id}/report"), 403),
        (format!("/api/v1/submissions/{id}/trajectories"), 403),
        (format!("/api/v1/submissions/{id}/episodes.csv"), 403),
        (format!("/api/v1/submissions/{id}/episodes/0/series"), 403),
        (format!("/api/v1/submissions/{id}/episodes/0/replay"), 403),
        ("/api/v1/phases/final/leaderboard".into(), 403),
        ("/api/v1/leaderboards/g1-smoke-robot".into(), 200),
        ("/api/v1/datasets/phases/final/hdf5".into(), 403),
        ("/api/v1/datasets/benchmarks/g1-smoke-robot/hdf5".into(), 403),
    ] {
        for who in [Some(token.as_str()), None] {
            let (status, _, body) = common::server::request(server.addr, "GET", &path, who, None);
            let body = String::from_utf8_lossy(&body).into_owned();
            if who.is_some() || status == 200 {
                assert!(
                    status == expected || (who.is_none() && status == 401),
                    "{path} as {who:?}: {status} {body}"
                );
            }
            seen.push_str(&body);
        }
    }
    for clip in &clips {
        assert!(
            !seen.contains(&format!("\"{}\"", clip.name)),
            "{} is named: {seen}",
            clip.name
        );
    }
    assert!(!seen.contains("\"duration_s\":"), "no motion's duration: {seen}");
    let (_, admin_view) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(admin));
    assert_eq!(
        admin_view["episodes"].as_array().map(Vec::len),
        Some(clips.len()),
        "the organiser sees every episode: {admin_view}"
    );
    // An organiser can open the phase to agents again.
    let (status, _, v) = server.call(
        "PATCH",
        "/api/v1/phases/final",
        Some(admin),
        Some(r#"{"hosted_only": false}"#),
    );
    assert_eq!((status, &v["hosted_only"]), (200, &serde_json::json!(false)), "{v}");
    let (status, v) = server.post("/api/v1/submissions", Some(&token), r#"{"phase": "final"}"#);
    assert_eq!(status, 201, "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A hosted run survives a server killed in the middle of it: the restarted server resumes it
/// (no agent will reconnect for it), and every episode ends exactly once.
#[test]
fn a_hosted_run_resumes_after_a_crash() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/motions/g1-moves");
    if !root.is_dir() {
        eprintln!("skipped: {} is absent (the dance benchmark's motions)", root.display());
        return;
    }
    let dir = tmp("hosted-crash");
    let root = root.to_str().unwrap().to_string();
    let args = ["--motions-root", root.as_str(), "--lanes", "1", "--max-batch", "4"];
    let mut server = ServerProc::start(&dir, &args);
    let token = server.team("uploaders");
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-moves-dance/policy.onnx");
    let file = std::fs::read(policy).unwrap();
    let (status, v) = upload(
        &server,
        "benchmark=g1-moves-dance-robot&file_name=policy.onnx",
        &token,
        &file,
    );
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let total = v["episodes_total"].as_u64().unwrap();
    let started = Instant::now();
    loop {
        let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
        let finished = s["progress"]["finished"].as_u64().unwrap_or(0);
        assert!(
            s["status"] == "RUNNING" || s["status"] == "PENDING",
            "finished before the crash: {s}"
        );
        if finished >= 2 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "{s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill9();
    let server = ServerProc::start(&dir, &args);
    let s = server.wait_final(&id, &token, Duration::from_secs(600));
    assert_eq!(s["status"], "COMPLETED", "{s}");
    assert_eq!(s["progress"]["finished"].as_u64(), Some(total), "{s}");
    let sessions = s["sessions"].as_array().unwrap();
    assert!(sessions.len() >= 2, "a session before the crash and one after: {s}");
    assert_eq!(sessions.last().unwrap()["outcome"], "completed", "{s}");
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
    let episodes = results["episodes"].as_array().unwrap();
    assert_eq!(episodes.len() as u64, total);
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 40 §2 through the server: every hostile file is refused at upload (422 with its reason,
/// nothing created or counted), a file over the size limit gets 413, and a file whose outputs are
/// not finite runs and fails its episodes as non-finite actions. After each, the server answers
/// and still evaluates a good policy.
#[test]
fn hostile_uploads_are_refused_and_the_server_stays_healthy() {
    use prost::Message;
    let dir = tmp("hosted-hostile");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("hostile");
    let healthy = |after: &str| {
        let (status, v) = server.get("/api/v1/health", None);
        assert_eq!(
            (status, &v["status"]),
            (200, &serde_json::json!("ok")),
            "after {after}: {v}"
        );
        let (status, _) = server.get("/api/v1/benchmarks/g1-smoke-robot", Some(&token));
        assert_eq!(status, 200, "after {after}");
    };
    for case in hostile_models::refused_files() {
        let (status, v) = upload(
            &server,
            &format!("benchmark=g1-smoke-robot&file_name={}", case.name),
            &token,
            &case.model.encode_to_vec(),
        );
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (422, Some("unsupported_policy")),
            "{}: {v}",
            case.name
        );
        let problems = v["error"]["problems"].to_string();
        assert!(problems.contains(&case.because), "{}: {problems}", case.name);
        healthy(&case.name);
    }
    // Past every check of the decoded file, the decoding itself: a node of 5 M empty attributes
    // (10 MiB, two bytes each on the wire) decodes into gigabytes, and an allocation failure
    // aborts the process that decodes it. The server's checker is a child within a budget: the
    // upload is refused saying which, and the server stays up.
    let bomb = {
        let mut bytes = hostile_models::non_finite_policy().encode_to_vec();
        let node: Vec<u8> = [0x2a, 0x00].repeat(5 << 20);
        let mut graph = vec![0x0a];
        prost::encoding::encode_varint(node.len() as u64, &mut graph);
        graph.extend(&node);
        // ModelProto.graph (field 7) again: a message field's second occurrence merges into the
        // first, adding the node.
        bytes.push(0x3a);
        prost::encoding::encode_varint(graph.len() as u64, &mut bytes);
        bytes.extend(&graph);
        bytes
    };
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot&file_name=bomb.onnx", &token, &bomb);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("unsupported_policy")),
        "{v}"
    );
    assert!(
        v["error"]["problems"]
            .to_string()
            .contains("needed more than 2 GiB of memory"),
        "{v}"
    );
    healthy("a file that decodes into gigabytes");
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &token, &vec![0u8; (64 << 20) + 1]);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (413, Some("payload_too_large")),
        "{v}"
    );
    healthy("a file over 64 MiB");
    // A body that breaks off (here a chunk size that is not hexadecimal, half a file in): 400
    // with the reason, and the half written to the scratch folder is gone.
    let broken = {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        let half = vec![7u8; 100_000];
        let mut request = format!(
            "POST /api/v1/submissions/hosted?benchmark=g1-smoke-robot HTTP/1.1\r\nHost: arena\r\n\
             Authorization: Bearer {token}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n",
            half.len()
        )
        .into_bytes();
        request.extend(&half);
        request.extend(b"\r\nzz\r\n");
        stream.write_all(&request).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    };
    assert!(broken.starts_with("HTTP/1.1 400"), "{broken}");
    assert!(broken.contains("the request body could not be read"), "{broken}");
    let scratch: Vec<_> = std::fs::read_dir(dir.join("scratch"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(scratch.is_empty(), "left in the scratch folder: {scratch:?}");
    healthy("a body that broke off");
    assert_eq!(submissions(&server, &token), 0, "a refused file creates nothing");

    // Accepted (its metadata and shapes are right), then every action is NaN or infinite.
    let (status, v) = upload(
        &server,
        "benchmark=g1-smoke-robot&file_name=nan.onnx",
        &token,
        &hostile_models::non_finite_policy().encode_to_vec(),
    );
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let s = server.wait_final(&id, &token, Duration::from_secs(300));
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
    for e in results["episodes"].as_array().unwrap() {
        assert_eq!(e["status"], "FAILED", "{s}\n{e}");
        assert!(e["reason"].as_str().unwrap().contains("non-finite action"), "{e}");
    }
    healthy("a policy with non-finite outputs");
    let good = std::fs::read(committed()).unwrap();
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &token, &good);
    assert_eq!(status, 201, "{v}");
    let s = server.wait_final(v["id"].as_str().unwrap(), &token, Duration::from_secs(300));
    assert_eq!(s["status"], "COMPLETED", "{s}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A team over its phase's quota is refused before its file is checked or stored: an upload
/// answered 429 leaves no policy file behind (before, every such upload was kept).
#[test]
fn an_upload_over_the_quota_stores_nothing() {
    let dir = tmp("hosted-quota");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("thrifty");
    let admin = common::server::ADMIN;
    let (status, v) = server.post("/api/v1/challenges", Some(admin), r#"{"id": "cup", "title": "Cup"}"#);
    assert_eq!(status, 201, "{v}");
    let now = arena_server::storage::now_ms();
    let body = serde_json::json!({
        "id": "once", "benchmark": "g1-smoke-robot", "max_submissions_total": 1,
        "starts_at": arena_server::access::rfc3339(now - 3_600_000),
        "ends_at": arena_server::access::rfc3339(now + 3_600_000),
    });
    let (status, v) = server.post("/api/v1/challenges/cup/phases", Some(admin), &body.to_string());
    assert_eq!(status, 201, "{v}");
    let (status, v) = server.post("/api/v1/submissions", Some(&token), r#"{"phase": "once"}"#);
    assert_eq!(status, 201, "{v}");
    let good = std::fs::read(committed()).unwrap();
    let (status, v) = upload(&server, "phase=once&file_name=policy.onnx", &token, &good);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (429, Some("quota_exceeded")),
        "{v}"
    );
    let policies = dir.join("policies");
    let kept: Vec<_> = std::fs::read_dir(&policies)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(
        kept.is_empty(),
        "{:?}",
        kept.iter().map(|e| e.path()).collect::<Vec<_>>()
    );
    assert_eq!(submissions(&server, &token), 1);
    // The refusal comes before the file: a client that waits for `100 Continue` (curl) is
    // answered at once, its body never sent; one that sends its body whole (Python's urllib)
    // gets to send it (read and dropped) and then reads the answer.
    use std::io::{Read, Write};
    let request = |expect: bool| {
        format!(
            "POST /api/v1/submissions/hosted?phase=once HTTP/1.1\r\nHost: arena\r\nAuthorization: Bearer {token}\r\n\
             Content-Length: {}\r\n{}Connection: close\r\n\r\n",
            20 << 20,
            if expect { "Expect: 100-continue\r\n" } else { "" }
        )
    };
    let mut waiting = std::net::TcpStream::connect(server.addr).unwrap();
    waiting.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    waiting.write_all(request(true).as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = waiting.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("quota_exceeded"), "{answer}");
    let mut sending = std::net::TcpStream::connect(server.addr).unwrap();
    sending.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    sending.write_all(request(false).as_bytes()).unwrap();
    sending
        .write_all(&vec![7u8; 20 << 20])
        .expect("the whole body is taken");
    let mut answer = String::new();
    let _ = sending.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    // So is a query the server cannot read (an unknown key), answered after the body too.
    let mut sending = std::net::TcpStream::connect(server.addr).unwrap();
    sending.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = request(false).replace("?phase=once", "?phase=once&colour=blue");
    sending.write_all(head.as_bytes()).unwrap();
    sending
        .write_all(&vec![7u8; 20 << 20])
        .expect("the whole body is taken");
    let mut answer = String::new();
    let _ = sending.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("colour"), "{answer}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A policy too slow for the step deadline fails as a slow remote agent does: its episodes end
/// as timeouts with the deadline in the reason, the server stays healthy, and the next hosted
/// run (one place: `--hosted-runs 1`, so it waited for the slow one) completes.
#[test]
fn a_slow_policy_times_out_like_a_slow_agent() {
    use prost::Message;
    let dir = tmp("hosted-slow");
    // 2 ms a step: the slow policy takes far longer (about 134 MFLOP a row on one thread).
    let server = ServerProc::start(&dir, &["--step-timeout-s", "0.002", "--hosted-runs", "1"]);
    let token = server.team("slow");
    let (status, v) = upload(
        &server,
        "benchmark=g1-smoke-robot&file_name=slow.onnx",
        &token,
        &hostile_models::slow_policy().encode_to_vec(),
    );
    assert_eq!(status, 201, "{v}");
    let slow = v["id"].as_str().unwrap().to_string();
    let good = std::fs::read(committed()).unwrap();
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &token, &good);
    assert_eq!(status, 201, "{v}");
    let next = v["id"].as_str().unwrap().to_string();
    server.wait_final(&slow, &token, Duration::from_secs(300));
    let (_, results) = server.get(&format!("/api/v1/submissions/{slow}/results"), Some(&token));
    let episodes = results["episodes"].as_array().unwrap();
    assert!(!episodes.is_empty());
    for e in episodes {
        assert_eq!(e["status"], "TIMEOUT", "{e}");
        assert!(e["reason"].as_str().unwrap().contains("step deadline"), "{e}");
        assert!(
            e["reason"]
                .as_str()
                .unwrap()
                .contains("the policy runs on the server, whose CPU other runs share"),
            "{e}"
        );
    }
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    // The good one ran after it, in the same place; at 2 ms a step it may also time out on a
    // loaded machine, but it ends.
    let s = server.wait_final(&next, &token, Duration::from_secs(300));
    assert!(["COMPLETED", "FAILED"].contains(&s["status"].as_str().unwrap()), "{s}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The server's queue of hosted runs is its own business, not the team's: an upload accepted
/// while its phase was open runs even after the phase closes (before, its run was refused
/// `phase_closed` at every try and the submission waited until it expired). A run that can
/// never start (the phase's groups changed so that the policy cannot serve them) fails at once
/// with the reason, and no agent of the team may attach to a hosted submission.
#[test]
fn hosted_runs_the_queue_took_in_time_and_fails_those_that_cannot_run() {
    use prost::Message;
    let dir = tmp("hosted-queue");
    // One place, taken first by four runs of a slow policy (about 2 s each here, every
    // episode run to its end within the 10 s deadline) while the others wait: uploads and
    // changes take well under a second.
    let server = ServerProc::start(&dir, &["--hosted-runs", "1", "--step-timeout-s", "10"]);
    let token = server.team("queued");
    let admin = common::server::ADMIN;
    let (status, v) = server.post("/api/v1/challenges", Some(admin), r#"{"id": "cup", "title": "Cup"}"#);
    assert_eq!(status, 201, "{v}");
    let now = arena_server::storage::now_ms();
    for id in ["closing", "changing"] {
        let body = serde_json::json!({
            "id": id, "benchmark": "g1-smoke-robot",
            "starts_at": arena_server::access::rfc3339(now - 3_600_000),
            "ends_at": arena_server::access::rfc3339(now + 3_600_000),
        });
        let (status, v) = server.post("/api/v1/challenges/cup/phases", Some(admin), &body.to_string());
        assert_eq!(status, 201, "{v}");
    }
    let slow = hostile_models::slow_policy().encode_to_vec();
    let slow: Vec<String> = (0..4)
        .map(|_| {
            let (status, v) = upload(&server, "phase=closing&file_name=slow.onnx", &token, &slow);
            assert_eq!(status, 201, "{v}");
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    let good = std::fs::read(committed()).unwrap();
    let (status, v) = upload(&server, "phase=closing", &token, &good);
    assert_eq!(status, 201, "{v}");
    let in_time = v["id"].as_str().unwrap().to_string();
    let (status, v) = upload(&server, "phase=changing", &token, &good);
    assert_eq!(status, 201, "{v}");
    let changed = v["id"].as_str().unwrap().to_string();
    let (status, _, v) = server.call(
        "PATCH",
        "/api/v1/phases/closing",
        Some(admin),
        Some(
            &serde_json::json!({"ends_at": arena_server::access::rfc3339(arena_server::storage::now_ms())}).to_string(),
        ),
    );
    assert_eq!(status, 200, "{v}");
    let (status, _, v) = server.call(
        "PATCH",
        "/api/v1/phases/changing",
        Some(admin),
        Some(r#"{"observation_groups": ["imu"]}"#),
    );
    assert_eq!(status, 200, "{v}");
    // The organiser is told that an upload waiting in the phase meets the new groups when it runs.
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("1 hosted submission(s) of phase changing have not finished") && warnings.contains(&changed),
        "{v}"
    );
    let (_, waiting) = server.get(&format!("/api/v1/submissions/{in_time}"), Some(&token));
    assert_eq!(
        waiting["status"], "PENDING",
        "the slow run should still hold the place: {waiting}"
    );
    // The admin's health tells the run holding the place from those waiting for it.
    let (_, health) = server.get("/api/v1/health", Some(admin));
    let load = &health["load"];
    // (Between two slow runs the place may be free a moment: at most one, never the queue.)
    let (running, queued) = (load["hosted_runs"].as_u64(), load["hosted_runs_waiting"].as_u64());
    assert!(running <= Some(1), "{health}");
    assert!(running.zip(queued).is_some_and(|(r, w)| r + w >= 3), "{health}");
    // No agent is awaited: it waits for a place.
    assert_eq!(
        (&waiting["awaiting_agent"], &waiting["awaiting_hosted_place"]),
        (&serde_json::json!(false), &serde_json::json!(true)),
        "{waiting}"
    );
    let (_, listed) = server.get("/api/v1/submissions", Some(&token));
    let row = listed["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == in_time.as_str());
    assert_eq!(
        row.map(|s| (&s["awaiting_agent"], &s["awaiting_hosted_place"])),
        Some((&serde_json::json!(false), &serde_json::json!(true))),
        "{listed}"
    );

    // The team's own agent may not run the uploaded file's submission (in an open phase).
    let config = arena_sdk::ClientConfig::new(
        server.ws_url(),
        &token,
        arena_sdk::Mode::Submission {
            benchmark: String::new(),
            submission_id: Some(changed.clone()),
        },
    );
    let e = arena_sdk::client::run_blocking(&config, &mut arena_sdk::agents::ZeroAgent::default(), &mut |_| {})
        .expect_err("an agent attached to a hosted submission");
    assert!(
        matches!(&e, arena_sdk::client::ClientError::Refused { code, message, .. }
            if code == "forbidden" && message.contains("is a hosted submission")),
        "{e}"
    );

    for id in &slow {
        let s = server.wait_final(id, &token, Duration::from_secs(300));
        assert_eq!(s["status"], "COMPLETED", "{s}");
    }
    let s = server.wait_final(&in_time, &token, Duration::from_secs(300));
    assert_eq!(s["status"], "COMPLETED", "{s}");
    let s = server.wait_final(&changed, &token, Duration::from_secs(300));
    assert_eq!(s["status"], "FAILED", "{s}");
    let reason = s["error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the hosted policy cannot run") && reason.contains("cannot serve"),
        "{s}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A policy that loads and runs on zeros but fails on an episode's observations (an index
/// taken from them, out of range: tract panics) fails its submission with that reason. Before,
/// its episodes were played with NaN actions and failed as "non-finite action", the model's
/// error only in the log.
#[test]
fn a_policy_failing_mid_run_fails_its_submission_with_the_reason() {
    use prost::Message;
    let dir = tmp("hosted-mid-run");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("brittle");
    let file = hostile_models::index_from_observation_policy().encode_to_vec();
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot&file_name=index.onnx", &token, &file);
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let s = server.wait_final(&id, &token, Duration::from_secs(300));
    assert_eq!(s["status"], "FAILED", "{s}");
    let error = s["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the agent failed") && error.contains("tract panicked running the model"),
        "{s}"
    );
    assert!(
        !error.contains(&dir.display().to_string()),
        "a server path in the reason: {error}"
    );
    // In a private phase the model's error could tell something of the hidden motions (a value
    // it computed from them): withheld from the team, kept in the log.
    let admin = common::server::ADMIN;
    let (status, v) = server.post("/api/v1/challenges", Some(admin), r#"{"id": "cup", "title": "Cup"}"#);
    assert_eq!(status, 201, "{v}");
    let now = arena_server::storage::now_ms();
    let body = serde_json::json!({
        "id": "final", "benchmark": "g1-smoke-robot", "leaderboard": "private",
        "starts_at": arena_server::access::rfc3339(now - 3_600_000),
        "ends_at": arena_server::access::rfc3339(now + 3_600_000),
    });
    let (status, v) = server.post("/api/v1/challenges/cup/phases", Some(admin), &body.to_string());
    assert_eq!(status, 201, "{v}");
    let (status, v) = upload(&server, "phase=final&file_name=index.onnx", &token, &file);
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let s = server.wait_final(&id, &token, Duration::from_secs(300));
    assert_eq!(s["status"], "FAILED", "{s}");
    let error = s["error"].as_str().unwrap_or_default();
    assert!(error.contains("withheld") && !error.contains("tract"), "{s}");
    assert!(
        server
            .log_text()
            .contains("the hosted policy failed: the agent failed: tract panicked")
    );
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// The team's request rate counts what the team sends, not the server's run of its upload: a
/// team that used its rate polling its results has its hosted run start at once (it was
/// refused `rate_limited` and waited, holding one of the server's hosted places).
#[test]
fn a_hosted_run_is_not_held_by_its_teams_request_rate() {
    let dir = tmp("hosted-rate");
    let server = ServerProc::start(&dir, &["--requests-per-minute", "3"]);
    let token = server.team("pollers");
    // Two requests, then the upload uses the last of the team's three a minute.
    for _ in 0..2 {
        let (status, v) = server.get("/api/v1/submissions", Some(&token));
        assert_eq!(status, 200, "{v}");
    }
    let good = std::fs::read(committed()).unwrap();
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &token, &good);
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let (status, v) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(status, 429, "the team's rate is used up: {v}");
    let s = server.wait_final(&id, common::server::ADMIN, Duration::from_secs(300));
    assert_eq!(s["status"], "COMPLETED", "{s}");
    let log = server.log_text();
    assert!(
        !log.contains("rate limited"),
        "the hosted run waited for the team's rate: {log}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A check the server itself could not make (here its checker exits without an answer) is the
/// server's fault: `503 unavailable`, nothing created, not the file's refusal.
#[test]
fn an_upload_the_server_cannot_check_is_its_fault_not_the_files() {
    let dir = tmp("hosted-checker");
    let server = ServerProc::start_with_env(&dir, &[], &[("ARENA_POLICY_CHECKER", "/bin/false")]);
    let token = server.team("unlucky");
    let good = std::fs::read(committed()).unwrap();
    let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &token, &good);
    assert_eq!((status, v["error"]["code"].as_str()), (503, Some("unavailable")), "{v}");
    assert_eq!(submissions(&server, &token), 0);
    assert!(
        server.log_text().contains("the policy checker"),
        "{}",
        server.log_text()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// One team's uploads are checked one at a time: two slow files of one team leave the other
/// check place to other teams (each check may take a minute; two of one team's held both places
/// while another team's upload waited behind them). The slowness is a checker that sleeps for a
/// file carrying a marker, then runs the real check.
#[test]
fn one_teams_slow_uploads_leave_a_check_place_to_other_teams() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp("hosted-check-turns");
    std::fs::create_dir_all(&dir).unwrap();
    let checker = dir.join("slow-checker.sh");
    // `check-policy-file --overrides JSON FILE`: the file is the fourth argument.
    std::fs::write(
        &checker,
        format!(
            "#!/bin/sh\nif grep -aq slow-check-marker \"$4\"; then sleep 8; fi\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_arena")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&checker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = ServerProc::start_with_env(&dir, &[], &[("ARENA_POLICY_CHECKER", checker.to_str().unwrap())]);
    let (patient, other) = (server.team("patient"), server.team("other"));
    let good = std::fs::read(committed()).unwrap();
    // The same model with an unknown protobuf field (number 999) carrying the marker: ONNX
    // readers skip it.
    let mut slow = good.clone();
    let marker = b"slow-check-marker";
    slow.extend_from_slice(&[0xBA, 0x3E, marker.len() as u8]);
    slow.extend_from_slice(marker);
    let started = Instant::now();
    let done: Vec<(&str, u16, Duration)> = std::thread::scope(|s| {
        let slow_ones: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &patient, &slow);
                    assert!(status == 201, "{v}");
                    ("slow", status, started.elapsed())
                })
            })
            .collect();
        // Both slow uploads are in (sent and waiting or checked) before the other team's.
        std::thread::sleep(Duration::from_secs(1));
        let (status, v) = upload(&server, "benchmark=g1-smoke-robot", &other, &good);
        assert_eq!(status, 201, "{v}");
        let mut done = vec![("other", status, started.elapsed())];
        done.extend(slow_ones.into_iter().map(|h| h.join().unwrap()));
        done
    });
    let other_done = done[0].2;
    let mut slow_done: Vec<Duration> = done[1..].iter().map(|d| d.2).collect();
    slow_done.sort();
    eprintln!("other team's upload answered at {other_done:?}; the slow ones at {slow_done:?}");
    assert!(
        other_done < slow_done[0],
        "the other team's upload waited behind the slow team's checks: {done:?}"
    );
    // One at a time for the slow team: the second's check began when the first's ended.
    assert!(
        slow_done[1] - slow_done[0] >= Duration::from_secs(7),
        "the slow team's two checks ran at once: {done:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
