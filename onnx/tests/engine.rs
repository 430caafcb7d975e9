//! The hosted engine (tract) against onnxruntime, the engine the field exports for: the two
//! committed policies on observations at their normalisers' scale (mean ± a few standard
//! deviations, so actions are of order 1), batches of 1, 5 and 64, must agree within 1e-5
//! (issue 40 §2). onnxruntime runs in the repository's Python environment (`make deps`);
//! without one the comparison is skipped with a reason, and with ARENA_PYTHON set it must run.
//! Files the engine cannot run are refused with the path and the reason.

use arena_onnx::Engine;
use std::path::{Path, PathBuf};
use std::process::Command;

fn policies() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints");
    ["g1-smoke", "g1-moves-dance"]
        .iter()
        .map(|n| root.join(n).join("policy.onnx"))
        .collect()
}

fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ARENA_PYTHON") {
        return Some(p.into());
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let ok = venv.exists()
        && Command::new(&venv)
            .args(["-c", "import onnx, onnxruntime"])
            .status()
            .is_ok_and(|s| s.success());
    ok.then_some(venv)
}

/// Runs `script` with `args` in `python`: the JSON it prints.
fn run_python(python: &Path, script: &str, args: &[PathBuf]) -> serde_json::Value {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A JSON array of numbers as float32.
fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

const ONNXRUNTIME: &str = r#"
import json, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
out = []
for path in sys.argv[1:]:
    model = onnx.load(path)
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    mean, scale = init["obs_mean"], init["obs_denominator"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for rows in (1, 5, 64):
        obs = (mean + scale * rng.normal(0.0, 1.5, (rows, mean.size))).astype(np.float32)
        times = rng.integers(1, 500, (rows, 1)).astype(np.float32)
        actions = session.run(["actions"], {"obs": obs, "time_step": times})[0]
        out.append({"path": path, "rows": rows, "obs": obs.ravel().tolist(),
                    "times": times.ravel().tolist(), "actions": actions.ravel().tolist()})
print(json.dumps(out))
"#;

#[test]
fn tract_matches_onnxruntime_on_the_committed_policies() {
    let Some(python) = python() else {
        eprintln!("skipped: no Python with onnx and onnxruntime (run `make deps`, or set ARENA_PYTHON)");
        return;
    };
    let paths = policies();
    let cases = run_python(&python, ONNXRUNTIME, &paths);
    let mut worst = 0.0f32;
    for case in cases.as_array().unwrap() {
        let path = PathBuf::from(case["path"].as_str().unwrap());
        let engine = Engine::load(&path).unwrap();
        assert!(engine.batched() && engine.takes_time_step(), "{engine:?}");
        assert_eq!((engine.obs_size(), engine.action_size()), (160, 29));
        let rows = case["rows"].as_u64().unwrap() as usize;
        let got = engine
            .run(&floats(&case["obs"]), &floats(&case["times"]), rows)
            .unwrap();
        let want = floats(&case["actions"]);
        assert_eq!(got.len(), want.len());
        let largest = want.iter().fold(0.0f32, |m, a| m.max(a.abs()));
        assert!(largest > 0.1 && largest < 20.0, "actions of order 1: {largest}");
        let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(
            diff <= 1e-5,
            "{}, {rows} rows: tract differs from onnxruntime by {diff:e}",
            path.display()
        );
        worst = worst.max(diff);
    }
    eprintln!("largest difference from onnxruntime: {worst:e}");
}

#[test]
fn files_it_cannot_run_are_refused_with_the_path_and_why() {
    let dir = std::env::temp_dir().join(format!("arena-onnx-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.onnx");
    let e = Engine::load(&missing).unwrap_err().to_string();
    assert!(e.contains("missing.onnx"), "{e}");
    let garbage = dir.join("garbage.onnx");
    std::fs::write(&garbage, b"not a protobuf at all \xff\xfe").unwrap();
    let e = Engine::load(&garbage).unwrap_err().to_string();
    assert!(e.contains("garbage.onnx") && e.contains("not a model"), "{e}");
    // Wrong sizes at run time are an error, not a panic.
    let engine = Engine::load(&policies()[0]).unwrap();
    let e = engine.run(&[0.0; 10], &[1.0], 1).unwrap_err().to_string();
    assert!(e.contains("10 observation values"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A policy declaring float64 observations and actions and an int64 `time_step` that indexes a
/// table (`Gather`), as an exporter may write one: the engine feeds the declared types, as the
/// Python runner feeds onnxruntime, and the two agree.
const DECLARED_TYPES: &str = r#"
import json, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(3)
w = rng.normal(0.0, 0.1, (160, 29))
table = rng.normal(0.0, 1.0, (600, 29))
graph = helper.make_graph(
    [helper.make_node("MatMul", ["obs", "W"], ["h"]),
     helper.make_node("Squeeze", ["time_step", "axis1"], ["t"]),
     helper.make_node("Gather", ["table", "t"], ["offset"], axis=0),
     helper.make_node("Add", ["h", "offset"], ["actions"])],
    "declared_types",
    [helper.make_tensor_value_info("obs", TensorProto.DOUBLE, ["batch", 160]),
     helper.make_tensor_value_info("time_step", TensorProto.INT64, ["batch", 1])],
    [helper.make_tensor_value_info("actions", TensorProto.DOUBLE, ["batch", 29])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(table, "table"),
     numpy_helper.from_array(np.array([1], np.int64), "axis1")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.save(model, sys.argv[1])
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
obs = rng.normal(0.0, 1.0, (7, 160)).astype(np.float32)
times = rng.integers(1, 600, (7, 1)).astype(np.float32)
actions = session.run(["actions"], {"obs": obs.astype(np.float64), "time_step": times.astype(np.int64)})[0]
print(json.dumps({"obs": obs.ravel().tolist(), "times": times.ravel().tolist(), "actions": actions.ravel().tolist()}))
"#;

#[test]
fn declared_input_and_output_types_are_fed_as_onnxruntime_takes_them() {
    let Some(python) = python() else {
        eprintln!("skipped: no Python with onnx and onnxruntime (run `make deps`, or set ARENA_PYTHON)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("arena-onnx-types-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("declared-types.onnx");
    let case = run_python(&python, DECLARED_TYPES, std::slice::from_ref(&path));
    let engine = Engine::load(&path).unwrap();
    assert!(engine.batched() && engine.takes_time_step(), "{engine:?}");
    let got = engine.run(&floats(&case["obs"]), &floats(&case["times"]), 7).unwrap();
    let want = floats(&case["actions"]);
    assert_eq!(got.len(), want.len());
    let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    eprintln!("float64 / int64 policy: largest difference from onnxruntime {diff:e}");
    // onnxruntime's float64 actions rounded to float32: the same to float32's precision.
    assert!(diff <= 1e-5, "tract differs from onnxruntime by {diff:e}");
    std::fs::remove_dir_all(&dir).ok();
}
