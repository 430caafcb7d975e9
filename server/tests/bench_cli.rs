//! End-to-end tests of `arena bench`, `arena metrics` and `arena eval`: real processes, real
//! files, real MuJoCo, and POT (through `make test`'s .venv) as the EMD reference.

mod common;

use common::{arena, ok, shared_moves, tmp};
use std::path::Path;
use std::process::Command;

#[test]
fn bench_list_show_and_validate() {
    let out = ok(&arena(&["bench", "list", "--json"]));
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert!(
        names.contains(&"g1-smoke") && names.contains(&"g1-moves-dance"),
        "{names:?}"
    );
    let show = ok(&arena(&["bench", "show", "g1-smoke", "--json"]));
    let spec: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(spec["ranking"]["primary"], "emd");
    let text = ok(&arena(&["bench", "show", "g1-moves-dance"]));
    assert!(text.contains("dance__*.csv") && text.contains("CC-BY-4.0"), "{text}");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks");
    let files: Vec<String> = ["g1-smoke.toml", "g1-moves-dance.toml"]
        .iter()
        .map(|f| shipped.join(f).to_string_lossy().into_owned())
        .collect();
    let out = ok(&arena(&["bench", "validate", &files[0], &files[1]]));
    assert_eq!(out.matches(": ok").count(), 2, "{out}");
    // `benchmarks/*.toml`, the folder's crate manifest included: skipped, as the listing does.
    let manifest = shipped.join("Cargo.toml").to_string_lossy().into_owned();
    let out = ok(&arena(&["bench", "validate", &manifest, &files[0]]));
    assert!(out.contains("Cargo.toml: skipped: a Cargo manifest"), "{out}");
}

#[test]
fn bad_benchmark_files_name_file_key_and_expectation() {
    let dir = tmp("badbench");
    let bad = dir.join("bad.toml");
    let good =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml")).unwrap();
    for (from, to, key) in [
        ("dr_level = 0", "dr_level = 9", "episodes.dr_level"),
        ("primary = \"emd\"", "primary = \"speed\"", "ranking.primary"),
        ("dr_level = 0", "dr_levle = 0", "dr_levle"),
    ] {
        assert!(good.contains(from), "{from}");
        std::fs::write(&bad, good.replacen(from, to, 1)).unwrap();
        let out = arena(&["bench", "validate", bad.to_str().unwrap()]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("bad.toml") && err.contains(key), "{key}: {err}");
    }
    // Several wrong sections: every one is reported, not only the first.
    let several = good
        .replacen("dr_level = 0", "dr_level = 9", 1)
        .replacen("primary = \"emd\"", "primary = \"speed\"", 1)
        .replacen("version = 1", "version = 0", 1);
    std::fs::write(&bad, several).unwrap();
    let out = arena(&["bench", "validate", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    for key in ["version", "episodes.dr_level", "ranking.primary"] {
        assert!(err.contains(&format!(" {key}: ")), "{key}: {err}");
    }
    let out = arena(&["bench", "show", "no-such-benchmark"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("g1-smoke"), "{err}");
    // With --motions-root the clips are loaded too: a folder without them is caught now.
    let empty = dir.join("no-motions");
    std::fs::create_dir_all(&empty).unwrap();
    let root = empty.to_str().unwrap();
    let out = arena(&["bench", "validate", "g1-moves-dance", "--motions-root", root]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("motions: ") && err.contains("dance__*.csv") && err.contains("--motions-root"),
        "{err}"
    );
    let out = ok(&arena(&["bench", "validate", "g1-smoke", "--motions-root", root]));
    assert!(out.contains("ok (g1-smoke v1; 6 motions, 6 episodes)"), "{out}");
    // A copy that keeps the name, in the folder: the server would offer neither file, so
    // validate refuses it. Outside the folder it may be meant to replace its namesake: checked
    // against the files given with it only.
    let folder = dir.join("folder");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("g1-smoke.toml"), &good).unwrap();
    let dir_flag = folder.to_str().unwrap();
    let copy = folder.join("g1-smoke-v2.toml");
    std::fs::write(&copy, &good).unwrap();
    let out = arena(&[
        "bench",
        "validate",
        copy.to_str().unwrap(),
        "--benchmarks-dir",
        dir_flag,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("g1-smoke-v2.toml") && err.contains("\"g1-smoke\" is also") && err.contains("g1-smoke.toml"),
        "{err}"
    );
    // `bench list` marks both files of the one name.
    let listed = ok(&arena(&["bench", "list", "--benchmarks-dir", dir_flag]));
    assert_eq!(listed.matches("INVALID (g1-smoke").count(), 2, "{listed}");
    assert!(listed.contains("is also g1-smoke-v2.toml's"), "{listed}");
    // A name asked for that no valid file has names the folder's unreadable files: one of them
    // may be it under another file name.
    std::fs::write(folder.join("zzz.toml"), "name = \"zzz-other\"\nsed = 0\n").unwrap();
    let out = arena(&["bench", "show", "zzz-other", "--benchmarks-dir", dir_flag]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("zzz.toml"), "{err}");
    std::fs::remove_file(folder.join("zzz.toml")).unwrap();
    std::fs::remove_file(&copy).unwrap();
    let elsewhere = dir.join("g1-smoke-edited.toml");
    std::fs::write(&elsewhere, &good).unwrap();
    ok(&arena(&[
        "bench",
        "validate",
        elsewhere.to_str().unwrap(),
        "--benchmarks-dir",
        dir_flag,
    ]));
    let (a, b) = (dir.join("a.toml"), dir.join("b.toml"));
    let renamed = good.replacen("name = \"g1-smoke\"", "name = \"mine\"", 1);
    std::fs::write(&a, &renamed).unwrap();
    std::fs::write(&b, &renamed).unwrap();
    let out = ok(&arena(&[
        "bench",
        "validate",
        a.to_str().unwrap(),
        "--benchmarks-dir",
        dir_flag,
    ]));
    assert!(out.contains("ok (mine v1; 6 motions, 6 episodes)"), "{out}");
    let out = arena(&[
        "bench",
        "validate",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--benchmarks-dir",
        dir_flag,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("b.toml") && err.contains("\"mine\" is also"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn eval_g1_smoke_end_to_end() {
    let dir = tmp("eval");
    let report_path = dir.join("report.json.gz");
    let out = ok(&arena(&[
        "eval",
        "--benchmark",
        "g1-smoke",
        "--policy",
        "replay",
        "--report",
        report_path.to_str().unwrap(),
    ]));
    for motion in [
        "stand",
        "squat",
        "arm_wave",
        "torso_twist",
        "weight_shift",
        "step_in_place",
    ] {
        assert!(out.contains(motion), "{motion} missing:\n{out}");
    }
    assert!(
        out.contains("aggregates over the 6 scored of 6 episodes (0 failed unscored"),
        "{out}"
    );
    // The gzip report has the seed's fields, one entry per episode and every metric.
    let file = std::fs::File::open(&report_path).unwrap();
    let report: serde_json::Value = serde_json::from_reader(flate2::read::GzDecoder::new(file)).unwrap();
    for key in [
        "benchmark",
        "timestamp",
        "config",
        "episodes",
        "aggregated",
        "failed_episodes",
    ] {
        assert!(report.get(key).is_some(), "report lacks {key}");
    }
    assert_eq!(report["benchmark"], "g1-smoke");
    let episodes = report["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 6);
    // The engine that ran them, as a server's report names its engines.
    let engines = report["config"]["engines"].as_array().expect("config.engines");
    assert_eq!(engines.len(), 1, "{engines:?}");
    assert!(
        engines[0]["engine"].as_str().unwrap().starts_with("cpu (MuJoCo 3."),
        "{engines:?}"
    );
    assert_eq!(engines[0]["episodes"], 6);
    assert_eq!(report["aggregated"]["emd"]["count"], 6);
    assert_eq!(report["format_version"], 4);
    assert_eq!(report["units"]["mpjpe_g"], "mm");
    assert_eq!(report["units"]["r_mpkpe"], "m");
    for e in episodes {
        assert_eq!(e["status"], "completed");
        // Scoring stopped where the fall broke PHC's rule, and the report says where.
        assert_eq!(e["scored_until_s"], e["metrics"]["failure_time_s"]);
        assert_eq!(
            e["metrics"].as_object().unwrap().len(),
            arena_bench::metrics::metric_names().len()
        );
        // Replay cannot balance: the robot falls, so PHC success fails within the first second.
        assert_eq!(e["metrics"]["success"], 0.0);
        assert!(e["metrics"]["failure_time_s"].as_f64().unwrap() < 2.0);
        assert!(e["metrics"]["emd"].as_f64().unwrap() > 0.0);
    }
    // The zero policy is scored too, and the two policies differ.
    let json = ok(&arena(&[
        "eval",
        "--benchmark",
        "g1-smoke",
        "--policy",
        "zero",
        "--json",
    ]));
    let zero: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_ne!(zero["aggregated"]["emd"]["mean"], report["aggregated"]["emd"]["mean"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn eval_with_a_missing_motions_root_says_how_to_set_it() {
    let out = arena(&[
        "eval",
        "--benchmark",
        "g1-moves-dance",
        "--policy",
        "zero",
        "--motions-root",
        "/nonexistent",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("/nonexistent") && err.contains("--motions-root"),
        "{err}"
    );
}

/// A server whose motions folder does not exist stops at start naming the key, rather than
/// listing benchmarks that fail at their first session.
#[test]
fn serve_with_a_missing_motions_root_stops_at_start() {
    let dir = tmp("serve-motions-root");
    let out = arena(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--data-dir",
        dir.to_str().unwrap(),
        "--motions-root",
        "/nonexistent/motions",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("motions_root: /nonexistent/motions is not a folder"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn metrics_emd_and_track_on_files() {
    let dir = tmp("metrics");
    // Two 1-D sets {0, 10} and {1, 11}: EMD 1.
    let (a, b) = (dir.join("a.csv"), dir.join("b.csv"));
    std::fs::write(&a, "0\n10\n").unwrap();
    std::fs::write(&b, "# comment lines are skipped\n11\n1\n").unwrap();
    let out = ok(&arena(&[
        "metrics",
        "emd",
        "--a",
        a.to_str().unwrap(),
        "--b",
        b.to_str().unwrap(),
        "--columns",
        "0:1",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!((v["emd"].as_f64().unwrap() - 1.0).abs() < 1e-12, "{v}");
    // Bad input: a non-number names file, line and column; columns past the end are refused.
    std::fs::write(&b, "1\nx\n").unwrap();
    let out = arena(&[
        "metrics",
        "emd",
        "--a",
        a.to_str().unwrap(),
        "--b",
        b.to_str().unwrap(),
        "--columns",
        "0:1",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("b.csv:2:1"));
    let out = arena(&["metrics", "emd", "--a", a.to_str().unwrap(), "--b", a.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("columns 7:36"));
    // A rollout against the motion it tracked: every metric, and EMD of a G1 file with itself is 0.
    ok(&arena(&["motion", "generate", "--out", dir.to_str().unwrap()]));
    let squat = dir.join("builtin__squat.csv");
    let rollout = dir.join("rollout.csv");
    ok(&arena(&[
        "sim",
        "rollout",
        "--motion",
        squat.to_str().unwrap(),
        "--fps",
        "50",
        "--policy",
        "replay",
        "--out",
        rollout.to_str().unwrap(),
    ]));
    let out = ok(&arena(&[
        "metrics",
        "track",
        "--sim",
        rollout.to_str().unwrap(),
        "--ref",
        squat.to_str().unwrap(),
        "--fps",
        "50",
        "--json",
    ]));
    let m: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(m.as_object().unwrap().len(), arena_bench::metrics::metric_names().len());
    assert!(m["mpjpe_g"].as_f64().unwrap() > 100.0, "the replayed robot falls: {m}");
    // The wrong --fps makes the reference shorter than the rollout: scored, with a warning.
    let track = |fps: &str| {
        let args = [
            "metrics",
            "track",
            "--sim",
            rollout.to_str().unwrap(),
            "--ref",
            squat.to_str().unwrap(),
        ];
        arena(&[&args[..], &["--fps", fps, "--json"]].concat())
    };
    let warned = track("100");
    assert!(warned.status.success());
    let err = String::from_utf8_lossy(&warned.stderr);
    assert!(
        err.contains("warning: the rollout runs to") && err.contains("at 100 fps"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&track("50").stderr).is_empty());
    // The same reference as an NPZ (which carries its frame rate): the same metrics.
    let npz_dir = dir.join("npz");
    ok(&arena(&[
        "motion",
        "export",
        "--benchmark",
        "g1-smoke",
        "--out",
        npz_dir.to_str().unwrap(),
    ]));
    let from_npz = ok(&arena(&[
        "metrics",
        "track",
        "--sim",
        rollout.to_str().unwrap(),
        "--ref",
        npz_dir.join("builtin__squat.npz").to_str().unwrap(),
        "--json",
    ]));
    let n: serde_json::Value = serde_json::from_str(&from_npz).unwrap();
    // float32 in the NPZ: the same to a few parts in a million.
    let (a, b) = (m["mpjpe_g"].as_f64().unwrap(), n["mpjpe_g"].as_f64().unwrap());
    assert!((a - b).abs() <= 1e-3 * a.abs(), "{a} against {b}");
    // The default columns follow the file kind: joints of the rollout (8:37) vs the motion (7:36).
    let out = ok(&arena(&[
        "metrics",
        "emd",
        "--a",
        rollout.to_str().unwrap(),
        "--b",
        squat.to_str().unwrap(),
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["dim"], 29);
    assert!(
        (v["emd"].as_f64().unwrap() - m["emd"].as_f64().unwrap()).abs() < 0.05,
        "{v} vs {m}"
    );
    let out = ok(&arena(&[
        "metrics",
        "emd",
        "--a",
        squat.to_str().unwrap(),
        "--b",
        squat.to_str().unwrap(),
    ]));
    assert_eq!(out.trim().parse::<f64>().unwrap(), 0.0);
    std::fs::remove_dir_all(dir).ok();
}

/// EMD equals POT's `ot.emd2` within 1e-9 relative on random and real trajectories, equal and
/// unequal sizes (python/emd_vs_pot.py).
#[test]
fn emd_equals_pot() {
    let Ok(python) = std::env::var("ARENA_PYTHON") else {
        eprintln!("skipped: ARENA_PYTHON is not set (run through `make test`, which installs .venv)");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/emd_vs_pot.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).args(["--arena", env!("CARGO_BIN_EXE_arena")]);
    if let Some(moves) = shared_moves() {
        cmd.arg("--moves").arg(moves);
    }
    let out = cmd.output().expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("equal to POT within 1e-9"), "{stdout}");
}

/// Must show: the dance benchmark runs on the real clips through the motions root.
#[test]
fn eval_g1_moves_dance_with_replay() {
    let Some(moves) = shared_moves() else { return };
    let dir = tmp("dance");
    let report_path = dir.join("dance.json");
    let out = ok(&arena(&[
        "eval",
        "--benchmark",
        "g1-moves-dance",
        "--policy",
        "replay",
        "--motions-root",
        moves.to_str().unwrap(),
        "--report",
        report_path.to_str().unwrap(),
    ]));
    assert!(
        out.contains("J_Dance0_StepTouch") && out.contains("aggregates over the 28 scored of 28 episodes"),
        "{out}"
    );
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
    assert_eq!(report["episodes"].as_array().unwrap().len(), 28);
    assert_eq!(report["groups"]["dance"]["emd"]["count"], 28);
    assert!(report["failed_episodes"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn validate_takes_names_as_well_as_files() {
    let out = common::arena(&["bench", "validate", "g1-smoke", "g1-moves-dance"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("g1-smoke.toml: ok (g1-smoke v") && stdout.contains("g1-moves-dance.toml: ok"),
        "{stdout}"
    );
    let out = common::arena(&["bench", "validate", "no-such-benchmark"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-benchmark"));
}
