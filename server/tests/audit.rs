//! `arena audit` on a real submission: its stored episodes re-run with their recorded actions
//! are bit-exact on the backend that recorded them (the CPU), and on the GPU backend (MJX on
//! JAX's CPU backend in double precision; MuJoCo Warp on Warp's CPU device in single precision)
//! they stay within the documented sim-to-sim tolerances.

mod common;

use arena_sdk::agents::ReplayAgent;
use common::server::ServerProc;
use common::{arena, ok, tmp};
use serde_json::Value;

fn audit(server: &ServerProc, id: &str, extra: &[&str]) -> Value {
    let data = server.data_dir.to_str().unwrap().to_string();
    let mut args = vec!["audit", id, "--data-dir", &data, "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&arena(&args))).unwrap()
}

#[test]
fn stored_episodes_rerun_bit_exact_on_the_cpu_and_close_on_the_gpu_backend() {
    let dir = tmp("audit");
    let server = ServerProc::start(&dir.join("data"), &[]);
    let token = server.team("alpha");
    let id = server.submit(&token, &mut ReplayAgent::new(), "replay", None);

    let cpu = audit(&server, &id, &["--backend", "cpu", "--require-exact"]);
    let episodes = cpu["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 6);
    assert_eq!(cpu["bit_exact"], 6);
    for e in episodes {
        assert_eq!(e["recorded_status"], e["rerun_status"], "{e}");
        assert_eq!(e["max_qpos"], 0.0, "{e}");
        for (name, pair) in e["metrics"].as_object().unwrap() {
            assert_eq!(pair[0], pair[1], "{name} of episode {}", e["episode"]);
        }
    }
    assert_eq!(cpu["benchmark_changed_episodes"], serde_json::json!([]));
    let one = audit(&server, &id, &["--backend", "cpu", "--episodes", "1"]);
    assert_eq!(one["episodes"].as_array().unwrap().len(), 1);
    // A benchmark file edited since the run (DR level and seed): the audit still re-runs the
    // stored episodes bit-exact, and says which ones today's file defines otherwise.
    let edited = dir.join("edited-benchmarks");
    std::fs::create_dir_all(&edited).unwrap();
    let smoke =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml"))
            .unwrap();
    let smoke = smoke
        .replace("dr_level = 0", "dr_level = 2")
        .replace("seed = 0", "seed = 8");
    std::fs::write(edited.join("g1-smoke.toml"), smoke).unwrap();
    let data = server.data_dir.to_str().unwrap();
    let args = [
        "audit",
        &id,
        "--data-dir",
        data,
        "--benchmarks-dir",
        edited.to_str().unwrap(),
    ];
    let out = arena(&[&args[..], &["--episodes", "0,1", "--json"]].concat());
    let report: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(report["bit_exact"], 2);
    assert_eq!(report["benchmark_changed_episodes"], serde_json::json!([0, 1]));
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(
        note.contains("now defines episode 0 differently") && note.contains("DR level 0 → 2") && note.contains("seed"),
        "{note}"
    );
    let out = arena(&[
        "audit",
        &id,
        "--data-dir",
        server.data_dir.to_str().unwrap(),
        "--episodes",
        "99",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("episode_00099 is not stored"));
    let out = arena(&["audit", "nope", "--data-dir", server.data_dir.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no submission \"nope\""));

    published_results_are_checked_against_the_stored_file(&server, &id);

    let Some(python) = common::gpu_python() else { return };
    let on_cpu_device = |extra: &[&str]| {
        let mut args = vec!["--backend", "gpu", "--gpu-device", "cpu", "--gpu-python", &python];
        args.extend_from_slice(extra);
        audit(&server, &id, &args)
    };
    let gpu = on_cpu_device(&["--gpu-x64"]);
    // The tolerances of docs/gpu-backend.md: the first steps agree to rounding; contacts that
    // open or close a step apart then amplify differences, so episode metrics agree to a few
    // percent and every episode ends the same way.
    assert_close(&gpu, 1e-9, 1e-5);

    let warp = on_cpu_device(&["--gpu-impl", "warp"]);
    // Single precision from the first step (7e-4 after one step, as MJX's JAX path in float32
    // gives too); the same end status and EMD within 5 %, as above.
    assert_close(&warp, 5e-3, 5e-3);
}

/// Every re-run episode of an audit: no error, the stored end status, |Δqpos| below `tol_1`
/// after 1 step and `tol_10` after 10, and EMD within 5 % of the stored value.
fn assert_close(audit: &Value, tol_1: f64, tol_10: f64) {
    for e in audit["episodes"].as_array().unwrap() {
        print_episode(e);
        assert!(e["error"].is_null(), "{e}");
        assert_eq!(e["recorded_status"], e["rerun_status"], "{e}");
        assert!(e["qpos_divergence"]["1"].as_f64().unwrap() < tol_1, "{e}");
        assert!(e["qpos_divergence"]["10"].as_f64().unwrap() < tol_10, "{e}");
        let emd = &e["metrics"]["emd"];
        let (stored, again) = (emd[0].as_f64().unwrap(), emd[1].as_f64().unwrap());
        assert!((again - stored).abs() < 0.05 * stored, "emd {stored} vs {again}: {e}");
    }
}

fn print_episode(e: &Value) {
    eprintln!(
        "episode {} {}: {} → {}, Δqpos {}, Δbody max {:.3e}, emd {}",
        e["episode"],
        e["motion"],
        e["recorded_status"],
        e["rerun_status"],
        e["qpos_divergence"],
        e["max_body_pos"].as_f64().unwrap(),
        e["metrics"]["emd"]
    );
}

/// The audit checks that what the server publishes is the result of the stored file, whatever
/// backend re-runs it: a metric edited in the database, a file of another submission under this
/// one's name, an episode's run missing from the file, a reference altered in it each fail the
/// audit (exit status 1, the disagreement named), without `--require-exact`. Each is undone
/// before the next.
fn published_results_are_checked_against_the_stored_file(server: &ServerProc, id: &str) {
    use arena_data::trajectory_file::{self, TrajectoryFile};
    let data = server.data_dir.to_str().unwrap().to_string();
    let failed_audit = |expected: &str| {
        let out = arena(&["audit", id, "--data-dir", &data, "--backend", "cpu"]);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "expected {expected:?} in: {stderr}");
        stderr
    };

    // A metric of episode 2 edited in the database: the results API serves it, the audit names it.
    let url = format!("sqlite://{}", server.data_dir.join("arena.db").display());
    let sql = |statement: String| {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query(&statement).execute(&mut c).await.unwrap();
        })
    };
    sql(format!(
        // "emd":0.43… becomes "emd":10.43… (text edits: SQLite's JSON functions would round
        // every value to 15 digits, and the undoing would not give the same bits back).
        "UPDATE episodes SET metrics_json = replace(metrics_json, '\"emd\":', '\"emd\":1') \
         WHERE submission_id = '{id}' AND idx = 2"
    ));
    let said = failed_audit("episode 2: emd");
    assert!(
        said.contains("(database) vs") && said.contains("scored from its trajectory file"),
        "{said}"
    );
    // The report still gives the old value: that is a disagreement of its own.
    assert!(said.contains("the report's episode ep0002: emd"), "{said}");
    sql(format!(
        "UPDATE episodes SET metrics_json = replace(metrics_json, '\"emd\":1', '\"emd\":') \
         WHERE submission_id = '{id}' AND idx = 2"
    ));

    // The stored file rewritten: another submission's name, one run left out, a reference edited.
    let path = server.data_dir.join("trajectories").join(format!("{id}.h5"));
    let original = server.data_dir.join("original.h5");
    std::fs::copy(&path, &original).unwrap();
    let rewrite = |submission: &str, edit: &dyn Fn(&mut trajectory_file::EpisodeRecord) -> bool| {
        std::fs::remove_file(&path).unwrap();
        let mut file = TrajectoryFile::open_or_create(&path, submission, "g1-smoke").unwrap();
        for name in trajectory_file::episode_names(&original).unwrap() {
            let mut record = trajectory_file::read_episode(&original, &name).unwrap();
            if edit(&mut record) {
                file.write_episode(&record).unwrap();
            }
        }
    };
    rewrite("sub-someone-else", &|_| true);
    let out = arena(&["audit", id, "--data-dir", &data, "--backend", "cpu"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("is the trajectory file of submission \"sub-someone-else\""),
        "{stderr}"
    );
    // A rescore does not score another submission's file as this one's.
    let (status, _, v) = server.call(
        "POST",
        &format!("/api/v1/submissions/{id}/rescore"),
        Some(common::server::ADMIN),
        None,
    );
    assert_eq!(status, 409, "{v}");
    assert!(
        v.to_string().contains("is submission \\\"sub-someone-else\\\"'s"),
        "{v}"
    );
    rewrite(id, &|r| r.episode != 3);
    failed_audit("episode 3: the database holds its result (");
    rewrite(id, &|r| {
        if r.episode == 4 {
            let last = r.rows.ref_qpos.len() - 1;
            r.rows.ref_qpos[last] += 0.2;
        }
        true
    });
    failed_audit("episode 4: the stored reference is not what the benchmark's motion");
    std::fs::rename(&original, &path).unwrap();
    // Everything back: the audit passes, scoring what is published.
    let back = audit(server, id, &["--backend", "cpu", "--require-exact"]);
    assert_eq!(back["scores_published"], 6);
    assert_eq!(back["disagreements"], serde_json::json!([]));
}
