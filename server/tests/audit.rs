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
