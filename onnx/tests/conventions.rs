//! Issue 40 §2, one definition of the conventions: the Rust reading of a policy's metadata
//! (mjlab / BeyondMimic and holosoma) and its observation rows must be the Python SDK's, which
//! runs policies remotely (`arena-agent onnx`). For each case both sides get the same metadata,
//! session layout, arena rows and previous actions; the resolved configurations must agree and
//! the observation rows must be identical to the bit, and broken metadata must give the same
//! problems. The Python SDK runs in the repository's environment (skipped with a reason
//! without one; with ARENA_PYTHON set it must run).

use arena_g1::{GROUPS, Group, JOINT_NAMES, NUM_JOINTS};
use arena_onnx::Engine;
use arena_onnx::config::{PolicyConfig, PolicyOverrides, Supply};
use arena_onnx::terms::ObservationBuilder;
use arena_sdk::ObservationLayout;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ARENA_PYTHON") {
        return Some(p.into());
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    venv.exists().then_some(venv)
}

/// A deterministic stream of numbers in [-1, 1).
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

fn csv(values: &[f64]) -> String {
    values.iter().map(|v| format!("{v}")).collect::<Vec<_>>().join(",")
}

/// The committed tracker's metadata (mjlab convention).
fn committed() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-smoke/policy.onnx");
    Engine::load(&path).unwrap().metadata().clone()
}

/// mjlab metadata in a joint order of its own, with every term, per-term scales and clips.
fn mjlab_reordered(n: &mut Numbers) -> BTreeMap<String, String> {
    let order: Vec<usize> = (0..NUM_JOINTS).rev().collect();
    let names: Vec<&str> = order.iter().map(|g| JOINT_NAMES[*g]).collect();
    let per_joint = |n: &mut Numbers, lo: f64, hi: f64| -> Vec<f64> {
        (0..NUM_JOINTS)
            .map(|_| lo + (hi - lo) * (n.next() + 1.0) / 2.0)
            .collect()
    };
    let terms = "command,motion_anchor_pos_b,motion_anchor_ori_b,base_lin_vel,base_ang_vel,projected_gravity,joint_pos,joint_vel,actions";
    let scales = "1,1,1,0.5,0.25,1,1,0.05,1";
    let clips = "-inf;inf,-inf;inf,-inf;inf,-2;2,-inf;inf,-inf;inf,-inf;inf,-3;3,-inf;inf";
    [
        ("joint_names", names.join(",")),
        ("observation_names", terms.to_string()),
        ("default_joint_pos", csv(&per_joint(n, -0.5, 0.5))),
        ("action_scale", csv(&per_joint(n, 0.1, 0.6))),
        ("joint_stiffness", csv(&per_joint(n, 20.0, 120.0))),
        ("joint_damping", csv(&per_joint(n, 1.0, 8.0))),
        ("anchor_body_name", "torso_link".to_string()),
        ("observation_terms_scale", scales.to_string()),
        ("observation_terms_clip", clips.to_string()),
        ("observation_dims", "58,3,6,3,3,3,29,29,29".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// holosoma metadata: JSON values, terms in the experiment config (sorted by name), the
/// per-joint action scale from effort / kp, clipped actions.
fn holosoma(n: &mut Numbers) -> BTreeMap<String, String> {
    let order: Vec<usize> = (0..NUM_JOINTS).map(|p| (p * 7) % NUM_JOINTS).collect();
    let names: Vec<&str> = order.iter().map(|g| JOINT_NAMES[*g]).collect();
    let kp: Vec<f64> = (0..NUM_JOINTS)
        .map(|p| if p == 3 { 0.0 } else { 40.0 + 3.0 * p as f64 })
        .collect();
    let kd: Vec<f64> = (0..NUM_JOINTS).map(|p| 2.0 + 0.1 * p as f64).collect();
    let effort: Vec<f64> = (0..NUM_JOINTS).map(|p| 50.0 + 2.0 * p as f64).collect();
    let defaults: serde_json::Map<String, Value> = names
        .iter()
        .map(|name| (name.to_string(), json!(n.next() * 0.4)))
        .collect();
    let config = json!({
        "robot": {
            "init_state": {"default_joint_angles": defaults},
            "control": {"action_scale": 0.25, "action_scales_by_effort_limit_over_p_gain": true,
                        "clip_actions": true, "action_clip_value": 4.0},
            "dof_effort_limit_list": effort,
        },
        "observation": {"groups": {"actor_obs": {"history_length": 1, "terms": {
            "motion_command": {"scale": 1.0},
            "motion_ref_ori_b": {},
            "base_ang_vel": {"scale": 0.25, "clip": [-5.0, 5.0]},
            "projected_gravity": {},
            "dof_pos": {},
            "dof_vel": {"scale": 0.05},
            "actions": {"clip": [-3.0, 3.0]},
        }}}},
        "command": {"setup_terms": {"motion_command": {"params": {"motion_config": {"body_name_ref": ["torso_link"]}}}}},
    });
    [
        ("dof_names", json!(names)),
        ("kp", json!(kp)),
        ("kd", json!(kd)),
        ("experiment_config", config),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// holosoma metadata whose clip_actions bound is negative (a.clamp(-c, c) would panic).
fn holosoma_negative_clip(n: &mut Numbers) -> BTreeMap<String, String> {
    let mut props = holosoma(n);
    let mut config: Value = serde_json::from_str(&props["experiment_config"]).unwrap();
    config["robot"]["control"]["action_clip_value"] = json!(-1.5);
    props.insert("experiment_config".into(), config.to_string());
    props
}

/// mjlab metadata with a NaN scale, and holosoma metadata with a scale list holding a string:
/// a NaN in every row, refused by name.
fn non_finite_scales(n: &mut Numbers) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut mjlab = mjlab_reordered(n);
    let scales = mjlab["observation_terms_scale"].clone();
    let (_, rest) = scales.split_once(',').unwrap();
    mjlab.insert("observation_terms_scale".into(), format!("nan,{rest}"));
    let mut holosoma = holosoma(n);
    let mut config: Value = serde_json::from_str(&holosoma["experiment_config"]).unwrap();
    let mut list = vec![json!(0.05); NUM_JOINTS];
    list[4] = json!("0.05");
    config["observation"]["groups"]["actor_obs"]["terms"]["dof_vel"]["scale"] = json!(list);
    holosoma.insert("experiment_config".into(), config.to_string());
    (mjlab, holosoma)
}

#[test]
fn non_finite_scales_are_refused_by_term() {
    let (mjlab, holosoma) = non_finite_scales(&mut Numbers(11));
    for (props, term) in [(mjlab, "'command'"), (holosoma, "'dof_vel'")] {
        let e = PolicyConfig::from_metadata(&props, &PolicyOverrides::default(), Supply::AgentOptions, "the policy")
            .unwrap_err();
        let expected = format!("observation term {term}: its scale holds a value that is not a finite number");
        assert!(e.problems.contains(&expected), "{:?}", e.problems);
    }
}

#[test]
fn a_negative_action_clip_is_refused_with_its_key_and_value() {
    let props = holosoma_negative_clip(&mut Numbers(7));
    let e = PolicyConfig::from_metadata(&props, &PolicyOverrides::default(), Supply::AgentOptions, "the policy")
        .unwrap_err();
    assert_eq!(
        e.problems,
        ["experiment_config.robot.control.action_clip_value is -1.5; clip_actions needs a number >= 0"]
    );
}

/// A key that is there but unreadable is reported once, as unreadable, not also as missing.
#[test]
fn an_unreadable_key_is_not_also_missing() {
    let mut props = committed();
    props.insert("default_joint_pos".into(), "[-0.312, 0.0]".into());
    let e = PolicyConfig::from_metadata(&props, &PolicyOverrides::default(), Supply::AgentOptions, "the policy")
        .unwrap_err();
    assert_eq!(e.problems.len(), 1, "{:?}", e.problems);
    assert!(
        e.problems[0].starts_with("metadata key 'default_joint_pos' is not a comma-separated list of numbers"),
        "{:?}",
        e.problems
    );
    // A negative scale is refused like a negative gain (Python's reading says the same).
    let mut negative = committed();
    negative.insert("action_scale".into(), "-0.25".into());
    let e = PolicyConfig::from_metadata(
        &negative,
        &PolicyOverrides::default(),
        Supply::AgentOptions,
        "the policy",
    )
    .unwrap_err();
    assert_eq!(e.problems, ["action_scale has negative values"]);
    // Absent, it is missing.
    props.remove("default_joint_pos");
    let e = PolicyConfig::from_metadata(&props, &PolicyOverrides::default(), Supply::AgentOptions, "the policy")
        .unwrap_err();
    assert_eq!(
        e.problems,
        ["no default joint positions: metadata key 'default_joint_pos' is missing (give --default-joint-pos)"]
    );
    // The hint names where the caller takes the value: an upload's overrides, or nowhere.
    let upload = PolicyConfig::from_metadata(
        &props,
        &PolicyOverrides::default(),
        Supply::UploadOverrides,
        "the policy",
    );
    assert_eq!(
        upload.unwrap_err().problems,
        ["no default joint positions: metadata key 'default_joint_pos' is missing (give overrides.default_joint_pos)"]
    );
    let eval = PolicyConfig::from_metadata(&props, &PolicyOverrides::default(), Supply::FileOnly, "the policy");
    assert_eq!(
        eval.unwrap_err().problems,
        [
            "no default joint positions: metadata key 'default_joint_pos' is missing (add it to the file's metadata, \
             or run the file with arena-agent onnx --default-joint-pos)"
        ]
    );
}

/// Metadata with several problems at once.
fn broken() -> BTreeMap<String, String> {
    [
        ("joint_names", format!("{},elbow_of_doom", JOINT_NAMES[..28].join(","))),
        ("observation_names", "command,joint_pos,lidar_scan".to_string()),
        ("default_joint_pos", csv(&[0.0; 29])),
        ("joint_stiffness", csv(&[50.0; 29])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The session: every robot group, in an order of its own, after BFM-Zero's `state`.
fn layout() -> Vec<(String, usize)> {
    let mut groups: Vec<(String, usize)> = vec![("state".into(), 64)];
    for g in [
        Group::Motors,
        Group::MotionAnchorOriB,
        Group::Imu,
        Group::MotionCommand,
        Group::BaseLinVel,
        Group::MotionAnchorPosB,
        Group::ImuTorso,
    ] {
        groups.push((g.name().into(), g.size()));
    }
    assert!(
        groups
            .iter()
            .all(|(n, s)| n == "state" || GROUPS.iter().any(|g| g.name == n && g.size == *s))
    );
    groups
}

fn rows(n: &mut Numbers, layout: &ObservationLayout, count: usize) -> Vec<Vec<f32>> {
    (0..count)
        .map(|_| {
            let mut row: Vec<f32> = (0..layout.size()).map(|_| (n.next() * 3.0) as f32).collect();
            // A unit-ish quaternion, as the IMU sends (not exactly unit: float32).
            let imu = layout.group("imu").unwrap();
            let q: Vec<f64> = (0..4).map(|_| n.next()).collect();
            let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
            for k in 0..4 {
                row[imu.start + k] = (q[k] / norm) as f32;
            }
            row
        })
        .collect()
}

const PYTHON: &str = r#"
import json, sys
import numpy as np
from arena_sdk.agent import ObservationGroup, ObservationLayout
from arena_sdk.observation_terms import ObservationBuilder
from arena_sdk.policy_config import PolicyConfig, UnsupportedPolicyError
out = []
for case in json.load(sys.stdin):
    try:
        c = PolicyConfig.from_metadata(case["props"])
    except UnsupportedPolicyError as e:
        out.append({"problems": e.problems})
        continue
    terms = [{"name": t.name, "source": t.source.name,
              "scale": None if t.scale is None else np.atleast_1d(np.asarray(t.scale, np.float32)).tolist(),
              "clip": None if t.clip is None else [float(np.float32(t.clip[0])), float(np.float32(t.clip[1]))]}
             for t in c.observation_terms]
    gains = c.gains_g1()
    b = ObservationBuilder(c.observation_terms, c.policy_to_g1, c.default_joint_pos)
    b.bind(ObservationLayout([ObservationGroup(n, s) for n, s in case["layout"]]))
    obs = b.build(np.asarray(case["rows"], np.float32), np.asarray(case["previous"], np.float32))
    out.append({"convention": c.convention, "joint_names": list(c.joint_names),
                "default_joint_pos": c.default_joint_pos.tolist(), "action_scale": c.action_scale.tolist(),
                "gains": None if gains is None else [list(gains[0]), list(gains[1])],
                "anchor_body": c.anchor_body, "action_clip": c.action_clip, "terms": terms,
                "obs": obs.astype(np.float32).ravel().tolist()})
print(json.dumps(out))
"#;

#[test]
fn metadata_and_observation_rows_are_the_python_sdks() {
    let Some(python) = python() else {
        eprintln!("skipped: no Python environment for the Python SDK (run `make deps`, or set ARENA_PYTHON)");
        return;
    };
    let mut n = Numbers(0x5EED_1234_ABCD_0001);
    let groups = layout();
    let session = ObservationLayout::from_groups(groups.iter().map(|(g, s)| (g.clone(), *s)));
    let cases: Vec<(&str, BTreeMap<String, String>)> = vec![
        ("the committed tracker (mjlab)", committed()),
        (
            "mjlab, own joint order, every term, scales and clips",
            mjlab_reordered(&mut n),
        ),
        ("holosoma", holosoma(&mut n)),
        ("broken metadata", broken()),
        ("holosoma, negative action clip", holosoma_negative_clip(&mut n)),
    ];
    let (mjlab_nan, holosoma_string) = non_finite_scales(&mut n);
    // Another tool's key beside holosoma's, not JSON: read past. A per-term list one entry
    // short: refused by both, in the same words.
    let mut holosoma_tagged = holosoma(&mut n);
    holosoma_tagged.insert("exported_by".into(), "some tool v1".into());
    let mut mjlab_short = committed();
    let terms = mjlab_short["observation_names"].split(',').count();
    mjlab_short.insert("observation_terms_scale".into(), vec!["1.0"; terms - 1].join(","));
    // Clips that are no range: a NaN bound, a reversed pair.
    let mut mjlab_bad_clips = committed();
    let mut clips = vec!["-inf;inf"; terms];
    clips[0] = "nan;nan";
    clips[1] = "1;-1";
    mjlab_bad_clips.insert("observation_terms_clip".into(), clips.join(","));
    let cases = [
        cases,
        vec![
            ("mjlab, a NaN scale", mjlab_nan),
            ("holosoma, a scale that is not a number", holosoma_string),
            ("holosoma, another tool's key", holosoma_tagged),
            ("mjlab, a per-term list one short", mjlab_short),
            ("mjlab, clips that are no range", mjlab_bad_clips),
        ],
    ]
    .concat();
    let mut inputs = Vec::new();
    for (_, props) in &cases {
        let arena_rows = rows(&mut n, &session, 6);
        let previous: Vec<Vec<f32>> = (0..6)
            .map(|_| (0..NUM_JOINTS).map(|_| n.next() as f32).collect())
            .collect();
        inputs.push(json!({"props": props, "layout": groups, "rows": arena_rows, "previous": previous}));
    }
    let sdk_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/python/src");
    let mut child = Command::new(&python)
        .args(["-c", PYTHON])
        .env("PYTHONPATH", &sdk_src)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::from(inputs.clone()).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let f32s = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    let f64s = |v: &Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    for ((what, props), (input, theirs)) in cases.iter().zip(inputs.iter().zip(&theirs)) {
        let ours = PolicyConfig::from_metadata(props, &PolicyOverrides::default(), Supply::AgentOptions, "the policy");
        let config = match (ours, theirs.get("problems")) {
            (Err(e), Some(p)) => {
                let p: Vec<&str> = p.as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
                assert_eq!(e.problems, p, "{what}: the same problems");
                continue;
            }
            (Ok(c), None) => c,
            (ours, _) => panic!("{what}: Rust {ours:?}, Python {theirs}"),
        };
        assert_eq!(config.convention, theirs["convention"], "{what}");
        assert_eq!(json!(config.joint_names), theirs["joint_names"], "{what}");
        assert_eq!(config.default_joint_pos, f64s(&theirs["default_joint_pos"]), "{what}");
        assert_eq!(config.action_scale, f64s(&theirs["action_scale"]), "{what}");
        let gains = config.gains_g1().map(|(kp, kd)| json!([kp, kd])).unwrap_or(Value::Null);
        assert_eq!(gains, theirs["gains"], "{what}");
        assert_eq!(config.anchor_body, theirs["anchor_body"], "{what}");
        assert_eq!(json!(config.action_clip), theirs["action_clip"], "{what}");
        for (t, p) in config.observation_terms.iter().zip(theirs["terms"].as_array().unwrap()) {
            assert_eq!(
                (t.name.as_str(), t.source.name),
                (p["name"].as_str().unwrap(), p["source"].as_str().unwrap())
            );
            let scale = if p["scale"].is_null() {
                vec![]
            } else {
                f32s(&p["scale"])
            };
            assert_eq!(t.scale, scale, "{what}: {}", t.name);
            let clip = p["clip"]
                .as_array()
                .map(|c| (c[0].as_f64().unwrap() as f32, c[1].as_f64().unwrap() as f32));
            assert_eq!(t.clip, clip, "{what}: {}", t.name);
        }
        let mut builder = ObservationBuilder::new(
            config.observation_terms.clone(),
            config.policy_to_g1(),
            &config.default_joint_pos,
        );
        builder.bind(&session);
        let want = f32s(&theirs["obs"]);
        let size = builder.size();
        assert_eq!(want.len(), 6 * size, "{what}");
        for (i, (row, previous)) in input["rows"]
            .as_array()
            .unwrap()
            .iter()
            .zip(input["previous"].as_array().unwrap())
            .enumerate()
        {
            let mut got = vec![0.0f32; size];
            builder.build_row(&f32s(row), &f32s(previous), &mut got);
            let same = got
                .iter()
                .zip(&want[i * size..(i + 1) * size])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{what}, row {i}:\n  rust   {got:?}\n  python {:?}",
                &want[i * size..(i + 1) * size]
            );
        }
    }
}
