//! Issue 39 §3: the one table of observation groups (`arena_g1::GROUPS`) is what every layer
//! uses. Each group alone runs through the benchmark schema (a benchmark file granting it), the
//! runner (its plan and a row filled on a real env), the Rust SDK (the layout a `connected`
//! message announces, through the protocol's JSON) and the Python SDK (its layout of that
//! announcement, its own table of the robot's groups and its joint order).

use arena_bench::spec::{BenchmarkSpec, shipped_dir};
use arena_g1::{GROUPS, GroupInfo, JOINT_NAMES, Source};
use arena_runner::episode::{self, ObservationPlan, ReferenceScratch};
use arena_sdk::ObservationLayout;
use arena_sdk::protocol::{self, Connected, Encoding, Frame, Msg};
use arena_sim::env::{EpisodeAssignment, TrackingEnv};
use arena_sim::motion::MotionLibrary;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// A shipped benchmark granting `group` alone and no reference groups: BFM-Zero's groups on
/// `g1-smoke` (normalised actions, whose `last_action` they carry), the robot's own and the
/// command on `g1-smoke-robot` (joint-position actions).
fn benchmark_granting(info: &GroupInfo) -> BenchmarkSpec {
    let base = if info.source == Source::BfmZero {
        "g1-smoke"
    } else {
        "g1-smoke-robot"
    };
    let path = shipped_dir().join(format!("{base}.toml"));
    let mut text = String::new();
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        let key = line.split('=').next().unwrap_or_default().trim();
        match key {
            "reference_horizon" | "reference_goal_horizon" => text.push_str(&format!("{key} = 0\n")),
            _ => text.push_str(&format!("{line}\n")),
        }
    }
    let start = text.find("\ngroups = [").expect("the file lists its groups") + 1;
    let end = start + text[start..].find(']').unwrap() + 1;
    let text = format!("{}groups = [\"{}\"]{}", &text[..start], info.name, &text[end..]);
    let names = arena_bench::metrics::metric_names();
    BenchmarkSpec::parse(&text, &path, &names).unwrap_or_else(|e| panic!("{}: {e}", info.name))
}

/// The layout a session of `spec` announces, as a client decodes it from the protocol's JSON.
fn announced(spec: &BenchmarkSpec) -> protocol::EpisodeSpec {
    let connected = Msg::Connected(Connected {
        spec: Some(episode::episode_spec(spec, None, 1, 1, 1.0)),
        ..Default::default()
    });
    let Frame::Text(json) = protocol::encode(&connected, Encoding::Json) else {
        panic!("JSON encodes as text")
    };
    match protocol::decode_json(&json).unwrap() {
        Msg::Connected(c) => c.spec.unwrap(),
        other => panic!("{other:?}"),
    }
}

/// The observation row after two control steps of `squat` (joint-position actions: the
/// reference's joints as targets).
fn filled_row(spec: &BenchmarkSpec) -> Vec<f32> {
    let plan = ObservationPlan::for_spec(spec);
    let config = episode::env_config(spec, None, 1, 1);
    let robot = config.robot.clone();
    let clips = episode::benchmark_clips(spec, Path::new("."), &robot).unwrap();
    let library = Arc::new(MotionLibrary::from_clips(&clips, &robot).unwrap());
    let motion = library.motions.iter().position(|m| m.name == "squat").unwrap();
    let mut env = TrackingEnv::new(config, library.clone()).unwrap();
    let assignment = EpisodeAssignment {
        motion,
        start_time: 0.0,
        seed: 7,
        dr_level: arena_sim::dr::DrLevel::L0,
    };
    env.reset(&[(0, assignment)]).unwrap();
    let mut action = vec![0.0f32; env.action_width()];
    let mut state = arena_sim::motion::MotionState::default();
    for step in 1..=2 {
        library.motions[motion].state_at(step as f64 * arena_sim::CONTROL_DT, &mut state);
        if spec.action.mode == arena_bench::spec::ActionMode::Normalized {
            // Normalised actions: a small bend of every joint.
            action.fill(0.1);
        } else {
            for (a, q) in action.iter_mut().zip(&state.qpos[7..]) {
                *a = *q as f32;
            }
        }
        env.step(&action).unwrap();
    }
    let mut row = vec![f32::NAN; plan.size()];
    plan.fill(&env, 0, &mut ReferenceScratch::default(), &mut row);
    row
}

fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ARENA_PYTHON") {
        return Some(p.into());
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    venv.exists().then_some(venv)
}

#[test]
fn every_group_of_the_table_runs_through_the_schema_the_runner_and_both_sdks() {
    let mut announcements = Vec::new();
    for info in GROUPS {
        let spec = benchmark_granting(&info);
        assert_eq!(spec.observations.groups, [info.name]);
        assert_eq!(spec.observations.granted().collect::<Vec<_>>(), [info.group]);
        // The runner: the plan's layout and a filled row.
        let plan = ObservationPlan::for_spec(&spec);
        let groups: Vec<_> = plan.layout().groups().map(|(n, r)| (n.to_string(), r)).collect();
        assert_eq!(groups, [(info.name.to_string(), 0..info.size)], "{}", info.name);
        let row = filled_row(&spec);
        assert!(row.iter().all(|v| v.is_finite()), "{}: {row:?}", info.name);
        assert!(row.iter().any(|v| *v != 0.0), "{}: all zeros", info.name);
        // The Rust SDK: what a client reads off `connected`.
        let es = announced(&spec);
        let layout = ObservationLayout::from_spec(&es);
        assert_eq!(layout.group(info.name), Some(0..info.size), "{}", info.name);
        assert_eq!(layout.size(), info.size);
        announcements.push(serde_json::json!({
            "name": info.name,
            "size": info.size,
            "robot": info.source != Source::BfmZero,
            "announced": es.observations.iter().map(|g| (g.name.clone(), g.size)).collect::<Vec<_>>(),
        }));
    }
    // The Python SDK.
    let Some(python) = python() else {
        eprintln!("skipped the Python SDK half: no ARENA_PYTHON and no .venv (run `make deps`)");
        return;
    };
    let script = r#"
import json, sys
from arena_sdk.agent import ObservationGroup, ObservationLayout
from arena_sdk import g1
out = []
for case in json.loads(sys.argv[1]):
    layout = ObservationLayout([ObservationGroup(n, s) for n, s in case["announced"]])
    sl = layout[case["name"]]
    out.append({"name": case["name"], "python_layout": sl.stop - sl.start,
                "python_table": g1.ROBOT_GROUPS.get(case["name"])})
print(json.dumps({"groups": out, "robot_groups": sorted(g1.ROBOT_GROUPS), "joints": list(g1.JOINT_NAMES)}))
"#;
    let sdk_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/python/src");
    let out = Command::new(&python)
        .args([
            "-c",
            script,
            &serde_json::Value::from(announcements.clone()).to_string(),
        ])
        .env("PYTHONPATH", &sdk_src)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (case, py) in announcements.iter().zip(got["groups"].as_array().unwrap()) {
        assert_eq!(py["python_layout"], case["size"], "{py}");
        // The Python SDK's table holds the robot's groups (BFM-Zero's it reads off the layout).
        let expected = if case["robot"] == true {
            case["size"].clone()
        } else {
            serde_json::Value::Null
        };
        assert_eq!(py["python_table"], expected, "{py}");
    }
    let mut robot: Vec<&str> = GROUPS
        .iter()
        .filter(|g| g.source != Source::BfmZero)
        .map(|g| g.name)
        .collect();
    robot.sort();
    assert_eq!(
        got["robot_groups"],
        serde_json::json!(robot),
        "no group the table lacks"
    );
    assert_eq!(got["joints"], serde_json::json!(JOINT_NAMES));
}
