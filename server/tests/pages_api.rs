//! The REST calls the web pages use (issue 16, item 2), against a real `arena serve` with a
//! real submission: benchmark details, the robot geometry, an episode's series and replay, CSV
//! exports, the baseline flag on the leaderboard, re-score and cancel, and who may do what.

mod common;

use arena_data::trajectory_file;
use arena_sdk::agents::ReplayAgent;
use common::server::{ADMIN, ServerProc, http};
use common::tmp;

#[test]
fn page_endpoints_on_a_real_submission() {
    let dir = tmp("pages-api");
    let server = ServerProc::start(&dir.join("data"), &[]);
    let alpha = server.team("alpha");
    let beta = server.team("beta");
    let id = server.submit(&alpha, &mut ReplayAgent::new(), "replay", None);

    // Benchmark details for its page.
    let (status, b) = server.get("/api/v1/benchmarks/g1-smoke", None);
    assert_eq!(status, 200, "{b}");
    assert!(
        b["ranking_rule"].as_str().unwrap().starts_with("highest success rate"),
        "{b}"
    );
    let stand = b["motion_list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "stand")
        .unwrap();
    assert!(stand["duration_s"].as_f64().unwrap() > 1.0);
    let emd = b["metric_info"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "emd")
        .unwrap();
    assert_eq!(emd["direction"], "lower");
    assert_eq!(
        b["metric_info"].as_array().unwrap().len(),
        b["metrics"]["list"].as_array().unwrap().len()
    );

    // Who a token is.
    assert_eq!(server.get("/api/v1/whoami", None).1["role"], "anonymous");
    assert_eq!(server.get("/api/v1/whoami", Some(ADMIN)).1["role"], "admin");
    let (_, me) = server.get("/api/v1/whoami", Some(&alpha));
    assert_eq!(
        (me["role"].as_str(), me["team"]["name"].as_str()),
        (Some("team"), Some("alpha"))
    );
    assert_eq!(server.get("/api/v1/whoami", Some("at_nope")).0, 401);

    // Robot geometry.
    let (status, robot) = server.get("/api/v1/robot", None);
    assert_eq!(status, 200);
    assert_eq!(robot["bodies"].as_array().unwrap().len(), 30);
    assert_eq!(robot["bodies"][0]["name"], "pelvis");
    assert!(
        robot["geoms"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["type"] == "capsule")
    );

    // Series and replay of episode 0, against the stored trajectory.
    let record = trajectory_file::read_episode(
        &dir.join("data/trajectories").join(format!("{id}.h5")),
        &trajectory_file::episode_group_name(0),
    )
    .unwrap();
    let rows = record.num_rows();
    let (status, series) = server.get(
        &format!("/api/v1/submissions/{id}/episodes/0/series?points=50"),
        Some(&alpha),
    );
    assert_eq!(status, 200, "{series}");
    let times = series["times"].as_array().unwrap();
    assert_eq!(times.len(), rows.min(50));
    assert_eq!(times[0], 0.0);
    // Replay falls: the root ends far below the reference's.
    let last = series["root_height_m"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_f64()
        .unwrap();
    let ref_last = series["ref_root_height_m"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(last < ref_last - 0.3, "{last} vs {ref_last}");
    let (status, replay) = server.get(&format!("/api/v1/submissions/{id}/episodes/0/replay"), Some(&alpha));
    assert_eq!(status, 200);
    assert_eq!(replay["frames"], rows);
    assert_eq!(replay["sim"]["pos"].as_array().unwrap().len(), rows * 30 * 3);
    assert_eq!(replay["ref"]["quat"].as_array().unwrap().len(), rows * 30 * 4);
    // The pelvis is the free root: its replayed position is the stored qpos root, per frame.
    for k in [0, rows / 2, rows - 1] {
        for i in 0..3 {
            let got = replay["sim"]["pos"][k * 90 + i].as_f64().unwrap();
            assert!((got - record.rows.qpos[k * 36 + i]).abs() < 1e-4, "frame {k} axis {i}");
        }
    }
    // Bad URLs get the API's JSON error body, naming what was wrong (axum's own answer is
    // plain text).
    for (path, want, names) in [
        (format!("/api/v1/submissions/{id}/episodes/99/replay"), 404, "not 99"),
        (
            format!("/api/v1/submissions/{id}/episodes/0/series?points=1"),
            400,
            "points",
        ),
        (
            format!("/api/v1/submissions/{id}/episodes/0/series?points=abc"),
            400,
            "\"abc\"",
        ),
        (
            format!("/api/v1/submissions/{id}/episodes/abc/replay"),
            400,
            "episode index",
        ),
        (format!("/api/v1/submissions/{id}/episodes/-1/series"), 404, "not -1"),
    ] {
        let (status, v) = server.get(&path, Some(&alpha));
        assert_eq!(status, want, "{path}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_else(|| panic!("{path}: {v}"));
        assert!(message.contains(names), "{path}: {message}");
    }
    // A body over the limit (50 MiB announced, issue 30 §7) gets the JSON error body too.
    let (status, body) = oversized_post(server.addr, "/api/v1/submissions", &alpha, 50 << 20);
    assert_eq!(status, 413, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("2 MiB"), "{v}");
    // Another team does not see it.
    let (status, _) = server.get(&format!("/api/v1/submissions/{id}/episodes/0/replay"), Some(&beta));
    assert_eq!(status, 404);

    // CSV exports.
    let (status, csv) = http(
        server.addr,
        "GET",
        &format!("/api/v1/submissions/{id}/episodes.csv"),
        Some(&alpha),
        None,
    );
    assert_eq!(status, 200);
    let csv = String::from_utf8(csv).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(&header[..3], ["idx", "motion", "category"]);
    assert!(header.contains(&"emd"));
    assert_eq!(lines.count(), 6);
    let (status, mine) = http(server.addr, "GET", "/api/v1/submissions.csv", Some(&alpha), None);
    assert_eq!(status, 200);
    let mine = String::from_utf8(mine).unwrap();
    assert_eq!(mine.lines().count(), 2, "{mine}");
    assert!(mine.contains(&id) && mine.contains(",emd,"), "{mine}");
    let (_, theirs) = http(server.addr, "GET", "/api/v1/submissions.csv", Some(&beta), None);
    assert_eq!(String::from_utf8(theirs).unwrap().lines().count(), 1);

    // Baseline: admin only, shown on the leaderboard.
    let path = format!("/api/v1/submissions/{id}");
    let (status, _, _) = server.call("PATCH", &path, Some(&alpha), Some("{\"baseline\": true}"));
    assert_eq!(status, 403);
    let (status, _, v) = server.call("PATCH", &path, Some(ADMIN), Some("{\"baseline\": \"yes\"}"));
    assert_eq!(status, 400, "{v}");
    let (status, _, v) = server.call("PATCH", &path, Some(ADMIN), Some("{\"baseline\": true}"));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["baseline"], true);
    let (_, board) = server.get("/api/v1/leaderboards/g1-smoke", None);
    assert_eq!(board["entries"][0]["baseline"], true, "{board}");
    assert_eq!(board["success_metric"], "success");

    // Re-score: the same metrics again (scoring is deterministic), the report rebuilt.
    let (_, before) = server.get(&format!("{path}/results"), Some(ADMIN));
    let (_, report_before) = server.get(&format!("{path}/report"), Some(ADMIN));
    let (status, _, v) = server.call("POST", &format!("{path}/rescore"), Some(ADMIN), None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["rescored_episodes"], 6);
    let (_, after) = server.get(&format!("{path}/results"), Some(ADMIN));
    assert_eq!(before["aggregated"], after["aggregated"]);
    // The report keeps when it was evaluated and says it was scored again, and from what.
    let (_, report) = server.get(&format!("{path}/report"), Some(ADMIN));
    assert_eq!(report["timestamp"], report_before["timestamp"]);
    let stamp = &report["config"]["rescored"];
    assert!(stamp["at"].is_string() && stamp["times"] == 1, "{stamp}");
    assert_eq!(stamp["first_at"], stamp["at"]);
    assert_eq!(stamp["format_version_before"], report_before["format_version"]);
    let (status, _, _) = server.call("POST", &format!("{path}/rescore"), Some(ADMIN), None);
    assert_eq!(status, 200);
    let (_, report) = server.get(&format!("{path}/report"), Some(ADMIN));
    let again = &report["config"]["rescored"];
    assert_eq!(
        (&again["times"], &again["first_at"]),
        (&2.into(), &stamp["at"]),
        "{again}"
    );
    let (status, _, _) = server.call("POST", &format!("{path}/rescore"), Some(&alpha), None);
    assert_eq!(status, 403);

    // Cancel: a finished submission cannot be; a PENDING one becomes FAILED with its episodes.
    let (status, _, v) = server.call("POST", &format!("{path}/cancel"), Some(ADMIN), None);
    assert_eq!(status, 409, "{v}");
    let (status, pending) = server.post("/api/v1/submissions", Some(&beta), "{\"benchmark\": \"g1-smoke\"}");
    assert_eq!(status, 201, "{pending}");
    let pid = pending["id"].as_str().unwrap();
    let (status, _, v) = server.call("POST", &format!("/api/v1/submissions/{pid}/cancel"), Some(ADMIN), None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "FAILED");
    assert_eq!(v["error"], "cancelled by the organiser");
    let (_, r) = server.get(&format!("/api/v1/submissions/{pid}/results"), Some(&beta));
    let eps = r["episodes"].as_array().unwrap();
    assert_eq!(eps.len(), 6);
    assert!(
        eps.iter()
            .all(|e| e["status"] == "FAILED" && e["reason"] == "cancelled by the organiser"),
        "{r}"
    );
    // Its trajectory file is written all the same (issue 39): every episode listed with its
    // status and reason (none ran, so no rows), and no per-run file is left.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let bytes = loop {
        let (status, bytes) = common::server::http(
            server.addr,
            "GET",
            &format!("/api/v1/submissions/{pid}/trajectories"),
            Some(&beta),
            None,
        );
        if status == 200 || std::time::Instant::now() > deadline {
            assert_eq!(status, 200, "the cancelled submission's trajectory file");
            break bytes;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let file = dir.join("cancelled.h5");
    std::fs::write(&file, bytes).unwrap();
    let names = arena_data::trajectory_file::episode_names(&file).unwrap();
    assert_eq!(names.len(), 6);
    let first = arena_data::trajectory_file::read_episode(&file, &names[0]).unwrap();
    assert_eq!(
        (first.status.as_str(), first.reason.as_str(), first.rows.times.len()),
        ("failed", "cancelled by the organiser", 0)
    );
    // An agent attaching to it hears that it is FAILED, not COMPLETED, and runs nothing.
    let config = arena_sdk::ClientConfig::new(
        server.ws_url(),
        &beta,
        arena_sdk::Mode::Submission {
            benchmark: String::new(),
            submission_id: Some(pid.to_string()),
        },
    );
    let summary = arena_sdk::client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).unwrap();
    assert_eq!(summary.submission_status, "FAILED");
    assert!(summary.episodes.is_empty());
    let (status, _, _) = server.call("POST", "/api/v1/submissions/sub-nope/cancel", Some(ADMIN), None);
    assert_eq!(status, 404);
}

/// POSTs a body of `size` bytes (written in chunks until the server stops reading) and returns
/// the status and the response body.
fn oversized_post(addr: std::net::SocketAddr, path: &str, token: &str, size: usize) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..size / chunk.len() {
        if s.write_all(&chunk).is_err() {
            break; // the server answered and closed without reading the rest
        }
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}
