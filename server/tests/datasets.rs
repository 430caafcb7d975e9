//! Trajectory datasets end to end (issue 16, item 3): two teams' real submissions to a real
//! `arena serve`, then `GET /api/v1/datasets/...` and `arena dataset export` with filters. The
//! HDF5 download is loaded from Python with h5py into a buffer-shaped dict
//! (`tests/python/load_dataset.py`), and counts and filters are compared with the database as
//! the results API reports it.

mod common;

use arena_data::trajectory_file;
use arena_sdk::agents::{ReplayAgent, ZeroAgent};
use common::server::{ADMIN, ServerProc, header_of, http, request_with};
use common::{arena, ok, tmp};
use serde_json::Value;
use std::io::Read;

/// (episode index, steps, emd, status) of a submission's episodes, from the results API.
fn episodes(server: &ServerProc, id: &str) -> Vec<(i64, i64, f64, String)> {
    let (status, v) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    assert_eq!(status, 200, "{v}");
    v["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["idx"].as_i64().unwrap(),
                e["steps"].as_i64().unwrap(),
                e["metrics"]["emd"].as_f64().unwrap(),
                e["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn card(server: &ServerProc, query: &str, token: &str) -> (u16, Value) {
    server.get(
        &format!("/api/v1/datasets/benchmarks/g1-smoke/card{query}"),
        Some(token),
    )
}

fn python() -> Option<String> {
    match std::env::var("ARENA_PYTHON") {
        Ok(p) => Some(p),
        Err(_) => {
            eprintln!("skipped the h5py half: ARENA_PYTHON is not set (run through `make test`)");
            None
        }
    }
}

/// Runs the h5py loader on an export and returns its summary.
fn load_with_h5py(python: &str, path: &std::path::Path) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/load_dataset.py");
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "h5py could not load {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A stored download (`whole`, as a GET of `path` gave it) answers byte ranges: the rest of it
/// from an offset, its end, a range conditional on its `ETag` (`If-Range`; a stale tag gets the
/// whole file), and 416 for a range past its end. `changes`: the file can change under its name
/// (a dataset's export), so a range is answered only with `If-Range`; a `HEAD` carries the tag.
fn ranges_resume_the_download(server: &ServerProc, path: &str, whole: &[u8], changes: bool) {
    let request =
        |method, headers: &[(&str, &str)]| request_with(server.addr, method, path, Some(ADMIN), None, headers);
    let (status, head, body) = request("GET", &[]);
    assert_eq!((status, body.as_slice()), (200, whole));
    assert_eq!(header_of(&head, "accept-ranges").as_deref(), Some("bytes"), "{head}");
    let tag = header_of(&head, "etag").expect("an ETag");
    let n = whole.len();
    assert!(n > 200, "{n} bytes");
    let (status, head, _) = request("HEAD", &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(header_of(&head, "etag").as_ref(), Some(&tag), "HEAD: {head}");
    assert_eq!(
        header_of(&head, "accept-ranges").as_deref(),
        Some("bytes"),
        "HEAD: {head}"
    );
    assert_eq!(header_of(&head, "content-length"), Some(n.to_string()), "HEAD: {head}");
    // Ranges as a resuming client sends them: with If-Range where the file can change.
    let get = |range: &str| match changes {
        true => request("GET", &[("Range", range), ("If-Range", &tag)]),
        false => request("GET", &[("Range", range)]),
    };
    if changes {
        let (status, _, all) = request("GET", &[("Range", "bytes=100-")]);
        assert_eq!(
            (status, all.as_slice()),
            (200, whole),
            "no If-Range (curl -C -): the whole file, never a splice"
        );
    }

    let (status, head, rest) = get("bytes=100-");
    assert_eq!(status, 206, "{head}");
    assert_eq!(
        header_of(&head, "content-range"),
        Some(format!("bytes 100-{}/{n}", n - 1))
    );
    assert_eq!(header_of(&head, "content-length"), Some((n - 100).to_string()));
    assert!(rest == whole[100..], "the rest differs");

    let (status, _, end) = get("bytes=-10");
    assert_eq!((status, end.as_slice()), (206, &whole[n - 10..]));

    let (status, head, first) = request("GET", &[("Range", "bytes=0-99"), ("If-Range", &tag)]);
    assert_eq!((status, first.as_slice()), (206, &whole[..100]), "{head}");
    let (status, _, all) = request("GET", &[("Range", "bytes=0-99"), ("If-Range", "\"stale\"")]);
    assert_eq!(
        (status, all.as_slice()),
        (200, whole),
        "a stale If-Range gets the whole file"
    );

    let past = format!("bytes={n}-");
    let (status, head, body) = get(&past);
    assert_eq!(status, 416, "{head}");
    assert_eq!(header_of(&head, "content-range"), Some(format!("bytes */{n}")));
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["code"], "range_not_satisfiable", "{error}");
}

#[test]
fn datasets_filter_export_and_load_into_a_buffer() {
    let dir = tmp("datasets");
    let server = ServerProc::start(&dir.join("data"), &[]);
    let alpha = server.team("alpha");
    let beta = server.team("beta");
    let a = server.submit(&alpha, &mut ReplayAgent::new(), "replay", None);
    let b = server.submit(&beta, &mut ZeroAgent::default(), "zero", None);
    let (ea, eb) = (episodes(&server, &a), episodes(&server, &b));
    let rows_of = |eps: &[(i64, i64, f64, String)]| eps.iter().map(|e| e.1 + 1).sum::<i64>();

    // The whole benchmark, as the admin sees it.
    let (status, all) = card(&server, "", ADMIN);
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["format"], "mimicarena-dataset-card");
    assert_eq!(all["counts"]["submissions"], 2);
    assert_eq!(all["counts"]["teams"], 2);
    assert_eq!(all["counts"]["episodes"], 12);
    assert_eq!(all["counts"]["rows"], rows_of(&ea) + rows_of(&eb));
    // Over what the counts are taken, and what the scope left out (none of another version).
    assert_eq!(
        all["counts"]["in_scope"],
        serde_json::json!({"submissions": 2, "episodes": 12, "other_versions": 0, "missing_runs": 0})
    );
    assert_eq!(all["submissions"][0]["benchmark_version"], 1);
    assert_eq!(all["benchmark"]["version"], 1);
    assert!(all["motions"]["attribution"].as_str().unwrap().contains("MimicArena"));
    assert_eq!(all["simulator"]["control_hz"], 50.0);
    // The engine is the one every episode recorded at its commit: this server's CPU MuJoCo.
    let engine = all["simulator"]["engine"].as_str().unwrap();
    assert!(engine.starts_with("cpu (MuJoCo 3."), "{engine}");
    assert_eq!(
        all["simulator"]["engines"],
        serde_json::json!([{"engine": engine, "episodes": 12}])
    );
    let (_, results) = server.get(&format!("/api/v1/submissions/{a}/results"), Some(ADMIN));
    assert!(
        results["episodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["engine"] == engine),
        "{results}"
    );
    // The submission's report says which simulator produced its numbers.
    let (status, report) = server.get(&format!("/api/v1/submissions/{a}/report"), Some(ADMIN));
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["config"]["engines"],
        serde_json::json!([{"engine": engine, "episodes": 6}])
    );

    // A team reads its own submissions only.
    let (_, own) = card(&server, "", &alpha);
    assert_eq!(own["counts"]["episodes"], 6);
    assert_eq!(own["submissions"][0]["id"], a.as_str());

    // Filters, against the database's values.
    let median = {
        let mut v: Vec<f64> = ea.iter().map(|e| e.2).collect();
        v.sort_by(f64::total_cmp);
        v[2]
    };
    let want: Vec<&(i64, i64, f64, String)> = ea.iter().filter(|e| e.2 <= median).collect();
    let query = format!("?team=alpha&metric=emd%3C%3D{median}");
    let (_, low) = card(&server, &query, ADMIN);
    assert_eq!(low["counts"]["episodes"], want.len(), "{low}");
    assert_eq!(
        low["counts"]["in_scope"]["episodes"], 12,
        "the filters' denominator: {low}"
    );
    assert_eq!(low["counts"]["rows"], want.iter().map(|e| e.1 + 1).sum::<i64>());
    assert_eq!(low["filters"]["metrics"][0]["op"], "<=");
    // The card's filters in the words the filter takes, to be pasted back.
    assert_eq!(
        low["filters"]["status"],
        serde_json::json!(["completed", "fell"]),
        "{low}"
    );
    let (_, two) = card(&server, "?motion=stand,squat", ADMIN);
    assert_eq!(two["counts"]["episodes"], 4);
    assert_eq!(two["motions"]["names"], serde_json::json!(["squat", "stand"]));
    // Replay and zero actions both fall: nothing succeeds.
    let (_, ok_eps) = card(&server, "?success=true", ADMIN);
    assert_eq!(ok_eps["counts"]["episodes"], 0);
    let (_, failed) = card(&server, "?status=failed,timeout", ADMIN);
    assert_eq!(failed["counts"]["episodes"], 0);

    // Clear errors.
    for (query, code, needle) in [
        ("?metric=emd", 400, "metric: expected NAME OP NUMBER"),
        ("?metric=colour%3C3", 400, "computes no metric \"colour\""),
        ("?status=running", 400, "status: expected completed"),
        ("?size=3", 400, "unknown filter \"size\""),
        ("?since=2026-11-02&until=2026-11-01", 400, "since: must be before until"),
    ] {
        let (status, v) = card(&server, query, ADMIN);
        assert_eq!(status, code, "{query}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(needle), "{query}: {v}");
    }
    let (status, v) = server.get("/api/v1/datasets/benchmarks/g1-smoke/zip", Some(ADMIN));
    assert_eq!(status, 404, "{v}");
    let (status, _) = server.get("/api/v1/datasets/benchmarks/nope/card", Some(ADMIN));
    assert_eq!(status, 404);
    let (status, _) = server.get("/api/v1/datasets/benchmarks/g1-smoke/card", None);
    assert_eq!(status, 401);

    // jsonl.gz: one line per episode, streamed.
    let (status, gz) = http(
        server.addr,
        "GET",
        &format!("/api/v1/datasets/benchmarks/g1-smoke/jsonl.gz{query}"),
        Some(ADMIN),
        None,
    );
    assert_eq!(status, 200);
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut text).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), want.len());
    for (line, e) in lines.iter().zip(&want) {
        assert_eq!(line["id"], format!("{a}/{}", e.0));
        assert_eq!(line["rows"], e.1 + 1);
        assert_eq!(line["engine"], engine);
        // As in the results: a decimal string (a u64 exceeds JSON numbers' exact range).
        assert!(
            line["seed"].as_str().is_some_and(|s| s.parse::<u64>().is_ok()),
            "{}",
            line["seed"]
        );
        assert_eq!(line["qpos"].as_array().unwrap().len() as i64, e.1 + 1);
        assert_eq!(
            line["observation"]["privileged_state"][0].as_array().unwrap().len(),
            463
        );
        assert!(line["metrics"]["emd"].as_f64().unwrap() <= median);
    }

    // HDF5 over HTTP, and the same export from the command line.
    let (status, h5) = http(
        server.addr,
        "GET",
        &format!("/api/v1/datasets/benchmarks/g1-smoke/hdf5{query}"),
        Some(ADMIN),
        None,
    );
    assert_eq!(status, 200);
    let downloaded = dir.join("download.h5");
    std::fs::write(&downloaded, &h5).unwrap();
    // Kept in the object store (here the data directory) and served again from there: the same
    // request gives the same bytes without a second export.
    let exports = || -> Vec<_> {
        std::fs::read_dir(dir.join("data").join("exports"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    assert_eq!(exports().len(), 1, "{:?}", exports());
    let (status, again) = http(
        server.addr,
        "GET",
        &format!("/api/v1/datasets/benchmarks/g1-smoke/hdf5{query}"),
        Some(ADMIN),
        None,
    );
    assert_eq!(status, 200);
    assert!(again == h5, "a second download differs");
    ranges_resume_the_download(
        &server,
        &format!("/api/v1/datasets/benchmarks/g1-smoke/hdf5{query}"),
        &h5,
        true,
    );
    // A submission's trajectory file, the same way.
    let path = format!("/api/v1/submissions/{a}/trajectories");
    let (status, whole) = http(server.addr, "GET", &path, Some(ADMIN), None);
    assert_eq!(status, 200);
    ranges_resume_the_download(&server, &path, &whole, false);
    assert_eq!(exports().len(), 1, "{:?}", exports());
    // The same query from team alpha selects the same episodes, but its card counts what alpha
    // may read (its own submission): another stored file, not the admin's, whose card counted
    // every team's submissions.
    let (status, alpha_h5) = http(
        server.addr,
        "GET",
        &format!("/api/v1/datasets/benchmarks/g1-smoke/hdf5{query}"),
        Some(&alpha),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(exports().len(), 2, "{:?}", exports());
    let alpha_downloaded = dir.join("alpha.h5");
    std::fs::write(&alpha_downloaded, &alpha_h5).unwrap();
    let (_, alpha_low) = card(&server, &query, &alpha);
    assert_eq!(alpha_low["counts"]["in_scope"]["episodes"], 6, "{alpha_low}");
    let exported = dir.join("cli.h5");
    let card_path = dir.join("cli-card.json");
    let data_dir = dir.join("data");
    let out = ok(&arena(&[
        "dataset",
        "export",
        "--benchmark",
        "g1-smoke",
        "--team",
        "alpha",
        "--metric",
        &format!("emd<={median}"),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--out",
        exported.to_str().unwrap(),
        "--card",
        card_path.to_str().unwrap(),
        "--json",
    ]));
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["episodes"], want.len());
    // To a device (the counts only): written in place, where a `.partial` file beside it and
    // a rename over it used to fail (or, as root, replace /dev/null with a file).
    let counted = ok(&arena(&[
        "dataset",
        "export",
        "--benchmark",
        "g1-smoke",
        "--team",
        "alpha",
        "--metric",
        &format!("emd<={median}"),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--format",
        "jsonl.gz",
        "--out",
        "/dev/null",
        "--json",
    ]));
    let counted: Value = serde_json::from_str(&counted).unwrap();
    assert_eq!(counted["episodes"], want.len());
    // A mistyped team is refused, naming the teams there (it wrote an empty dataset, exit 0).
    let mistyped = arena(&[
        "dataset",
        "export",
        "--benchmark",
        "g1-smoke",
        "--team",
        "alpah",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--out",
        dir.join("mistyped.h5").to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&mistyped.stderr);
    assert_eq!(mistyped.status.code(), Some(1), "{said}");
    assert!(
        said.contains("--team: no team named \"alpah\"") && said.contains("alpha"),
        "{said}"
    );
    assert!(!dir.join("mistyped.h5").exists());
    assert!(
        !std::path::Path::new("/dev/null").is_file(),
        "/dev/null was replaced by a file"
    );
    let cli_card: Value = serde_json::from_str(&std::fs::read_to_string(&card_path).unwrap()).unwrap();
    assert_eq!(cli_card["counts"], low["counts"]);

    // The stored trajectory's first row, as the export must carry it.
    let first = trajectory_file::read_episode(
        &data_dir.join("trajectories").join(format!("{a}.h5")),
        &trajectory_file::episode_group_name(want[0].0 as u32),
    )
    .unwrap();
    let Some(python) = python() else { return };
    let from_alpha = load_with_h5py(&python, &alpha_downloaded);
    assert_eq!(from_alpha["card_counts"], alpha_low["counts"]);
    for path in [&downloaded, &exported] {
        let loaded = load_with_h5py(&python, path);
        assert_eq!(loaded["format"], "mimicarena-buffer");
        assert_eq!(loaded["episodes"], want.len());
        assert_eq!(loaded["rows"], low["counts"]["rows"]);
        assert_eq!(loaded["card_counts"], low["counts"]);
        let ids: Vec<String> = want.iter().map(|e| format!("{a}/{}", e.0)).collect();
        assert_eq!(loaded["ids"], serde_json::json!(ids));
        let lengths: Vec<i64> = want.iter().map(|e| e.1 + 1).collect();
        assert_eq!(loaded["lengths"], serde_json::json!(lengths));
        let qpos: Vec<f64> = serde_json::from_value(loaded["first_qpos"].clone()).unwrap();
        for (x, y) in qpos.iter().zip(&first.rows.qpos[..36]) {
            assert_eq!(*x as f32, *y as f32);
        }
    }
}

#[test]
fn dataset_export_refuses_bad_arguments_before_work() {
    let dir = tmp("datasets-cli");
    let out = arena(&[
        "dataset",
        "export",
        "--benchmark",
        "g1-smoke",
        "--metric",
        "emd",
        "--out",
        dir.join("x.h5").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("metric: expected NAME OP NUMBER"));
    let out = arena(&[
        "dataset",
        "export",
        "--benchmark",
        "g1-smoke",
        "--format",
        "hdf5",
        "--out",
        "-",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("HDF5 needs a file"));
    let out = arena(&[
        "dataset",
        "export",
        "--benchmark",
        "g1-smoke",
        "--out",
        dir.join("missing-folder/x.h5").to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot write"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A data folder that holds no server's database (a typo) is an error, not "0 episodes";
    // nothing is created there. `audit` reads the same way.
    let missing = dir.join("no-such-data");
    for args in [
        vec!["dataset", "export", "--benchmark", "g1-smoke", "--out"],
        vec!["audit", "some-submission"],
    ] {
        let out_file = dir.join("y.h5");
        let mut args = args;
        if args[0] == "dataset" {
            args.push(out_file.to_str().unwrap());
        }
        args.extend(["--data-dir", missing.to_str().unwrap()]);
        let out = arena(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no database at") && stderr.contains("--data-dir"),
            "{stderr}"
        );
        assert!(!missing.exists() && !out_file.exists(), "{args:?}");
    }
}

/// `success=` on a benchmark that computes no success metric is refused (it selected nothing
/// for `true` and everything for `false`, with a 200).
#[test]
fn a_success_filter_needs_a_success_metric() {
    let dir = tmp("datasets-no-success");
    let benchmarks = dir.join("benchmarks");
    std::fs::create_dir_all(&benchmarks).unwrap();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml");
    let text = std::fs::read_to_string(shipped).unwrap();
    let start = text.find("[metrics]").unwrap();
    let end = text.find("state_slice = [0").unwrap();
    let text = format!(
        "{}[metrics]\nlist = [\"emd\", \"mpjpe_g\"]\n{}",
        &text[..start],
        &text[end..]
    )
    .replace("name = \"g1-smoke\"", "name = \"no-success\"")
    .replace("success = \"success\"\n", "")
    .replace("survival = \"failure_time_s\"\n", "");
    std::fs::write(benchmarks.join("no-success.toml"), text).unwrap();
    let server = ServerProc::start(&dir.join("data"), &["--benchmarks-dir", benchmarks.to_str().unwrap()]);
    let (status, v) = server.get("/api/v1/datasets/benchmarks/no-success/card?success=true", Some(ADMIN));
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("success: benchmark no-success has no success metric"),
        "{v}"
    );
    let (status, v) = server.get("/api/v1/datasets/benchmarks/no-success/card", Some(ADMIN));
    assert_eq!(status, 200, "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A HEAD request (`curl -I`) answers the headers a GET would, without writing the export: it
/// used to run the whole HDF5 export (the GET handler with its body dropped).
#[test]
fn a_head_request_writes_no_export() {
    let dir = tmp("datasets-head");
    let server = ServerProc::start(&dir.join("data"), &[]);
    let team = server.team("heads");
    server.submit(&team, &mut ReplayAgent::new(), "replay", None);
    let path = "/api/v1/datasets/benchmarks/g1-smoke/hdf5";
    let exports = dir.join("data").join("exports");
    let stored = || std::fs::read_dir(&exports).map_or(0, |d| d.count());
    let (status, head, body) = http_head(&server, path);
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("application/x-hdf5") && !head.to_ascii_lowercase().contains("content-length"),
        "{head}"
    );
    assert!(body.is_empty());
    assert_eq!(stored(), 0, "HEAD wrote an export");
    let (status, _, file) = common::server::request(server.addr, "GET", path, Some(ADMIN), None);
    assert_eq!(status, 200);
    assert_eq!(stored(), 1);
    // Once stored, HEAD says its length.
    let (_, head, _) = http_head(&server, path);
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-length: {}", file.len())),
        "{head}"
    );
    let (status, head, body) = http_head(&server, "/api/v1/datasets/benchmarks/g1-smoke/jsonl.gz");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("application/gzip") && body.is_empty(), "{head}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A submission whose stored runs the object store lost (its merged file deleted) is left out
/// of the datasets, and their card says so: one such episode made every HDF5 export of the
/// benchmark a 500 and cut the `jsonl.gz` stream short after its 200.
#[test]
fn runs_missing_from_the_store_are_left_out_and_told() {
    use std::io::Read;
    let dir = tmp("datasets-missing");
    let data = dir.join("data");
    let server = ServerProc::start(&data, &[]);
    let team = server.team("lossy");
    let kept = server.submit(&team, &mut ReplayAgent::new(), "replay", None);
    let lost = server.submit(&team, &mut ReplayAgent::new(), "replay", None);
    let merged = data.join("trajectories").join(format!("{lost}.h5"));
    let waited = std::time::Instant::now();
    while !merged.is_file() {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "{lost} was never merged"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::fs::remove_file(&merged).unwrap();
    let (status, v) = card(&server, "", &team);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["counts"]["in_scope"]["missing_runs"], 6, "{v}");
    assert_eq!(v["counts"]["episodes"], 6, "{v}");
    assert_eq!(v["missing_runs"][0]["submission"], lost.as_str(), "{v}");
    assert_eq!(
        v["missing_runs"][0]["episodes"].as_array().map(Vec::len),
        Some(6),
        "{v}"
    );
    assert_eq!(v["submissions"][0]["id"], kept.as_str(), "{v}");
    let (status, _, file) = common::server::request(
        server.addr,
        "GET",
        "/api/v1/datasets/benchmarks/g1-smoke/hdf5",
        Some(&team),
        None,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&file));
    assert!(file.starts_with(b"\x89HDF"), "an HDF5 file");
    let (status, _, gz) = common::server::request(
        server.addr,
        "GET",
        "/api/v1/datasets/benchmarks/g1-smoke/jsonl.gz",
        Some(&team),
        None,
    );
    assert_eq!(status, 200);
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("a whole gzip stream");
    assert_eq!(text.lines().count(), 6, "the kept submission's episodes");
    assert!(text.lines().all(|l| l.contains(&kept)), "only {kept}");
}

fn http_head(server: &ServerProc, path: &str) -> (u16, String, Vec<u8>) {
    common::server::request(server.addr, "HEAD", path, Some(ADMIN), None)
}

/// Stored HDF5 exports stay within `export_cache_mb`: every filter text makes a file of its
/// own, and they were kept for good. The oldest goes first; the one being downloaded stays.
#[test]
fn stored_exports_are_bounded() {
    let dir = tmp("datasets-cache");
    let server = ServerProc::start(&dir.join("data"), &["--export-cache-mb", "1"]);
    let alpha = server.team("alpha");
    server.submit(&alpha, &mut ReplayAgent::new(), "replay", None);
    let exports = || -> Vec<(String, u64)> {
        let mut files: Vec<_> = std::fs::read_dir(dir.join("data").join("exports"))
            .map(|d| {
                d.flatten()
                    .map(|e| {
                        (
                            e.file_name().to_string_lossy().into_owned(),
                            e.metadata().unwrap().len(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    };
    let download = |query: &str| {
        let path = format!("/api/v1/datasets/benchmarks/g1-smoke/hdf5{query}");
        let (status, body) = http(server.addr, "GET", &path, Some(ADMIN), None);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        body
    };
    let first = download("");
    let kept = exports();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0].1 > 600_000,
        "the test needs exports over half the cap: {kept:?}"
    );
    // The same episodes under another filter text: another file, and the first one goes.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let second = download("?metric=emd%3C%3D1000");
    let now = exports();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0].0, kept[0].0, "the older export was kept, the newer removed");
    assert!(first.len() > 600_000 && second.len() > 600_000);
    assert!(
        server.log_text().contains("dataset export exports/"),
        "the removal is logged"
    );
}

/// The same HDF5 export asked for twice at once is written once, and both downloads get it
/// (before, both requests wrote the whole file, each replacing the other's).
#[test]
fn an_export_asked_for_twice_at_once_is_written_once() {
    let dir = tmp("datasets-together");
    let server = ServerProc::start(&dir.join("data"), &[]);
    let alpha = server.team("alpha");
    server.submit(&alpha, &mut ReplayAgent::new(), "replay", None);
    let addr = server.addr;
    let downloads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                http(
                    addr,
                    "GET",
                    "/api/v1/datasets/benchmarks/g1-smoke/hdf5",
                    Some(ADMIN),
                    None,
                )
            })
        })
        .collect();
    let bodies: Vec<Vec<u8>> = downloads
        .into_iter()
        .map(|d| {
            let (status, body) = d.join().unwrap();
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            body
        })
        .collect();
    assert_eq!(bodies[0], bodies[1]);
    let log = server.log_text();
    assert_eq!(log.matches(" written in ").count(), 1, "{log}");
    let scratch: Vec<_> = std::fs::read_dir(dir.join("data").join("scratch"))
        .map(|d| d.flatten().filter(|e| e.path().is_file()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(scratch.is_empty(), "left in the scratch folder: {scratch:?}");
}

/// `jsonl.gz` downloads beyond `dataset_streams` wait for a place and are then served whole: at
/// one place, four at once and then one after another all come back complete and alike (a place
/// not given back when its stream ends would leave the next download waiting, then refused).
#[test]
fn streamed_downloads_beyond_the_limit_wait_their_turn() {
    let dir = tmp("datasets-streams");
    let server = ServerProc::start(&dir.join("data"), &["--dataset-streams", "1"]);
    let alpha = server.team("alpha");
    let id = server.submit(&alpha, &mut ReplayAgent::new(), "replay", None);
    let addr = server.addr;
    let path = "/api/v1/datasets/benchmarks/g1-smoke/jsonl.gz";
    let download = move || http(addr, "GET", path, Some(ADMIN), None);
    let (status, first) = download();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&first));
    let together: Vec<_> = (0..4).map(|_| std::thread::spawn(download)).collect();
    let mut bodies: Vec<Vec<u8>> = together
        .into_iter()
        .map(|d| d.join().unwrap())
        .map(|(status, body)| {
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            body
        })
        .collect();
    for _ in 0..2 {
        let (status, body) = download();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        bodies.push(body);
    }
    let text = |gz: &[u8]| {
        let mut text = String::new();
        flate2::read::GzDecoder::new(gz).read_to_string(&mut text).unwrap();
        text
    };
    let want = text(&first);
    assert_eq!(want.lines().count(), episodes(&server, &id).len());
    for body in &bodies {
        assert!(text(body) == want, "a download came back different");
    }
    std::fs::remove_dir_all(&dir).ok();
}
