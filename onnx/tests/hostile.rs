//! Issue 40 §2, hostile files: each is refused with a reason that names what is wrong, before
//! the graph is built (operators, sizes, external data) or when the model's inputs cannot be
//! fed; a model whose outputs are not finite runs and its actions are not finite (the server fails those
//! episodes as non-finite actions), never a panic. The files are written from ONNX's protobuf
//! types (`hostile_models`, shared with the server's upload test).

mod hostile_models;

use arena_onnx::{Engine, Limits, OnnxAgent, OnnxPolicy, PolicyOverrides, Supply};
use arena_sdk::protocol::{EpisodeInfo, EpisodeSpec, ObservationGroup};
use arena_sdk::{Agent, Batch, ObservationLayout};
use hostile_models::*;
use prost::Message;
use std::path::PathBuf;
use tract_onnx::pb::ModelProto;

/// One folder for the process; tests run in parallel, so each removes only its own files.
fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("arena-onnx-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(model: &ModelProto, name: &str) -> PathBuf {
    let path = dir().join(name);
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

#[test]
fn a_plain_mlp_loads_and_runs() {
    let path = write(&plain(node("Identity", &["h"], &["actions"]), vec![]), "plain.onnx");
    let engine = Engine::load(&path).unwrap();
    let out = engine.run(&[1.0; 2 * 160], &[1.0, 2.0], 2).unwrap();
    assert!(out.iter().all(|v| (v - 1.6).abs() < 1e-4), "{out:?}");
}

/// Each refused operator and custom domain by name, a subgraph, sizes beyond the limits (from
/// the header alone, before anything is built), 10,000 nodes, external data, inputs it cannot
/// feed, sizes the metadata disagrees with: every refusal names the file and the reason.
#[test]
fn every_hostile_file_is_refused_with_its_reason() {
    let cases = refused_files();
    assert!(cases.len() >= REFUSED_OPERATORS.len() + 10);
    for case in cases {
        let path = write(&case.model, &case.name);
        let text = OnnxPolicy::load(&path, &PolicyOverrides::default(), Supply::AgentOptions)
            .expect_err(&case.name)
            .to_string();
        assert!(text.contains(&case.name), "names the file: {text}");
        assert!(text.contains(&case.because), "{}: {text}", case.name);
        std::fs::remove_file(&path).ok();
    }
}

/// The action output is found by the name the file declares (`actions`), wherever it is in the
/// list: a node's name is its producer's, which never matched, and output 0 ran instead.
#[test]
fn the_output_named_actions_runs_whichever_comes_first() {
    let mut model = policy(
        vec![
            node("MatMul", &["obs", "W"], &["actions"]),
            node("MatMul", &["obs", "V"], &["value"]),
        ],
        vec![
            tensor("W", &[160, 29], vec![0.01; 160 * 29]),
            tensor("V", &[160, 1], vec![0.5; 160]),
        ],
        vec![obs_input()],
    );
    let graph = model.graph.as_mut().unwrap();
    graph.output.insert(0, value("value", &[None, Some(1)]));
    let path = write(&model, "two-outputs.onnx");
    let engine = Engine::load(&path).unwrap();
    let out = engine.run(&[1.0; 160], &[1.0], 1).unwrap();
    assert_eq!(out.len(), 29, "the actions, not the value");
    assert!(out.iter().all(|v| (v - 1.6).abs() < 1e-4), "{out:?}");
    OnnxPolicy::load(&path, &PolicyOverrides::default(), Supply::AgentOptions).unwrap();
}

/// A batch larger than a call may hold runs in chunks, with the same actions as in one call.
#[test]
fn batches_beyond_the_call_limit_run_in_chunks() {
    let path = write(&slow_policy(), "chunked.onnx");
    let whole = Engine::load(&path).unwrap();
    assert!(whole.chunk_rows() >= 64, "{whole:?}");
    // The slow policy's 65 layers 1024 wide make about 68 k values a row (its weights live
    // inside tract's optimised products): 300 k values hold four rows.
    let tight = Limits {
        max_values_per_call: 300_000,
        ..Limits::default()
    };
    let chunked = Engine::load_within(&path, &tight).unwrap();
    assert_eq!(chunked.chunk_rows(), 4, "{chunked:?}");
    let rows = 10;
    let obs: Vec<f32> = (0..rows * 160).map(|i| ((i % 13) as f32 - 6.0) / 6.0).collect();
    let times: Vec<f32> = (0..rows).map(|i| i as f32).collect();
    assert_eq!(
        chunked.run(&obs, &times, rows).unwrap(),
        whole.run(&obs, &times, rows).unwrap()
    );
    let none = Limits {
        max_values_per_call: 1_000,
        ..Limits::default()
    };
    let e = Engine::load_within(&path, &none).unwrap_err().to_string();
    assert!(e.contains("more than the limit of 1000"), "{e}");
    let costly = Limits {
        max_fma_per_row: 1_000_000,
        ..Limits::default()
    };
    let e = Engine::load_within(&path, &costly).unwrap_err().to_string();
    assert!(e.contains("multiply-adds, more than the limit of 1000000"), "{e}");
}

/// A model of a fixed batch of one runs one row per call, and its output may be the row's
/// values in any shape (`[29]` here), as before the output's shape was checked.
#[test]
fn a_fixed_batch_model_may_give_its_row_in_any_shape() {
    let path = write(
        &policy(
            vec![
                node("MatMul", &["obs", "W"], &["h"]),
                node("Squeeze", &["h", "zero_i"], &["actions"]),
            ],
            vec![
                tensor("W", &[160, 29], vec![0.01; 160 * 29]),
                int64_tensor("zero_i", &[0]),
            ],
            vec![value("obs", &[Some(1), Some(160)])],
        ),
        "fixed-row.onnx",
    );
    let engine = Engine::load(&path).unwrap();
    assert!(!engine.batched());
    let out = engine.run(&[1.0; 3 * 160], &[1.0, 2.0, 3.0], 3).unwrap();
    assert_eq!(out.len(), 3 * 29);
    assert!(out.iter().all(|v| (v - 1.6).abs() < 1e-4), "{out:?}");
}

#[test]
fn a_file_over_the_size_limit_is_refused() {
    let path = write(&plain(node("Identity", &["h"], &["actions"]), vec![]), "small.onnx");
    let tiny = Limits {
        max_file_bytes: 100,
        ..Limits::default()
    };
    let e = Engine::load_within(&path, &tiny).unwrap_err().to_string();
    assert!(e.contains("more than the limit of 100"), "{e}");
}

/// The session of a benchmark with the robot's interface and BeyondMimic's command terms.
fn robot_interface_spec() -> EpisodeSpec {
    let groups = [
        ("motion_command", 58),
        ("motion_anchor_pos_b", 3),
        ("motion_anchor_ori_b", 6),
        ("base_lin_vel", 3),
        ("imu", 10),
        ("motors", 87),
    ];
    EpisodeSpec {
        observations: groups
            .iter()
            .map(|(n, s)| ObservationGroup {
                name: n.to_string(),
                size: *s,
            })
            .collect(),
        action_size: 29,
        action_mode: "joint_position".into(),
        anchor_body: "torso_link".into(),
        ..Default::default()
    }
}

#[test]
fn non_finite_outputs_become_non_finite_actions_not_a_panic() {
    let path = write(&non_finite_policy(), "nan.onnx");
    let mut agent = OnnxAgent::new(OnnxPolicy::load(&path, &PolicyOverrides::default(), Supply::AgentOptions).unwrap());
    let spec = robot_interface_spec();
    assert_eq!(agent.check(&spec), Ok(()));
    agent.configure(&spec);
    agent.reset(&[EpisodeInfo {
        episode_id: 3,
        ..Default::default()
    }]);
    let layout = ObservationLayout::from_spec(&spec);
    let mut observations = vec![0.0f32; layout.size()];
    observations[layout.group("imu").unwrap().start] = 1.0;
    let batch = Batch {
        step: 0,
        episodes: &[3],
        episode_steps: &[0],
        observations: &observations,
        layout: &layout,
    };
    let mut actions = vec![0.0f32; 29];
    agent.act(&batch, &mut actions);
    assert!(actions.iter().all(|a| !a.is_finite()), "{actions:?}");
    std::fs::remove_file(&path).ok();
}

/// A model that runs on zeros but not on the observations of an episode (an index taken from
/// the observation): the engine's error, not a panic, and the agent says it has failed, so
/// that the client stops instead of sending actions it does not have.
#[test]
fn a_model_failing_mid_run_is_the_agents_failure() {
    // Its own file: other tests remove the shared folder when they end.
    let path = std::env::temp_dir().join(format!("arena-onnx-index-{}.onnx", std::process::id()));
    std::fs::write(&path, index_from_observation_policy().encode_to_vec()).unwrap();
    let engine = Engine::load(&path).expect("it runs on zeros");
    let e = engine.run(&[3.0; 160], &[1.0], 1).unwrap_err().to_string();
    eprintln!("{e}");
    assert!(e.contains("arena-onnx-index"), "names the file: {e}");
    let mut agent = OnnxAgent::new(OnnxPolicy::load(&path, &PolicyOverrides::default(), Supply::AgentOptions).unwrap());
    assert_eq!(agent.failure(), None);
    let spec = robot_interface_spec();
    agent.configure(&spec);
    let layout = ObservationLayout::from_spec(&spec);
    let observations = vec![3.0; layout.size()];
    let batch = Batch {
        step: 0,
        episodes: &[0],
        episode_steps: &[0],
        observations: &observations,
        layout: &layout,
    };
    let mut actions = vec![0.0; 29];
    agent.act(&batch, &mut actions);
    assert!(
        agent
            .failure()
            .is_some_and(|f| f.contains("tract panicked running the model")),
        "{:?}",
        agent.failure()
    );
    std::fs::remove_file(&path).ok();
}
