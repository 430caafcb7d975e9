//! Issue 40 §2, hostile files: each is refused with a reason that names what is wrong, before
//! the graph is built (operators, sizes, external data) or when the model's inputs cannot be
//! fed; a model whose outputs are not finite runs and its actions are not finite (the server fails those
//! episodes as non-finite actions), never a panic. The files are written from ONNX's protobuf
//! types (`hostile_models`, shared with the server's upload test).

mod hostile_models;

use arena_onnx::{Engine, Limits, OnnxAgent, OnnxPolicy, PolicyOverrides};
use arena_sdk::protocol::{EpisodeInfo, EpisodeSpec, ObservationGroup};
use arena_sdk::{Agent, Batch, ObservationLayout};
use hostile_models::*;
use prost::Message;
use std::path::PathBuf;
use tract_onnx::pb::ModelProto;

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
        let text = OnnxPolicy::load(&path, &PolicyOverrides::default())
            .expect_err(&case.name)
            .to_string();
        assert!(text.contains(&case.name), "names the file: {text}");
        assert!(text.contains(&case.because), "{}: {text}", case.name);
    }
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

#[test]
fn non_finite_outputs_become_non_finite_actions_not_a_panic() {
    let path = write(&non_finite_policy(), "nan.onnx");
    let mut agent = OnnxAgent::new(OnnxPolicy::load(&path, &PolicyOverrides::default()).unwrap());
    let groups = [
        ("motion_command", 58),
        ("motion_anchor_pos_b", 3),
        ("motion_anchor_ori_b", 6),
        ("base_lin_vel", 3),
        ("imu", 10),
        ("motors", 87),
    ];
    let spec = EpisodeSpec {
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
    };
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
    std::fs::remove_dir_all(dir()).ok();
}
