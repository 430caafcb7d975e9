//! Issue 40 §2, hostile files: each is refused with a reason that names what is wrong, before
//! the graph is built (operators, sizes, external data) or when the model's inputs cannot be
//! fed; a model whose outputs are not finite runs and its actions are not finite (the server fails those
//! episodes as non-finite actions), never a panic. The files are written here from ONNX's
//! protobuf types.

use arena_onnx::{Engine, Limits, OnnxAgent, OnnxPolicy, PolicyOverrides};
use arena_sdk::protocol::{EpisodeInfo, EpisodeSpec, ObservationGroup};
use arena_sdk::{Agent, Batch, ObservationLayout};
use prost::Message;
use std::path::{Path, PathBuf};
use tract_onnx::pb::tensor_proto::{DataLocation, DataType};
use tract_onnx::pb::tensor_shape_proto::{Dimension, dimension};
use tract_onnx::pb::type_proto;
use tract_onnx::pb::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("arena-onnx-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn value(name: &str, dims: &[Option<i64>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Some(v) => dimension::Value::DimValue(*v),
                None => dimension::Value::DimParam("batch".into()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outputs.first().unwrap_or(&"")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn tensor(name: &str, dims: &[i64], values: Vec<f32>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: DataType::Float as i32,
        float_data: values,
        ..Default::default()
    }
}

/// obs [batch, 160] → MatMul by W [160, 29] → `last` node → actions [batch, 29], with the
/// committed tracker's metadata.
fn policy(nodes: Vec<NodeProto>, initializers: Vec<TensorProto>, inputs: Vec<ValueInfoProto>) -> ModelProto {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-smoke/policy.onnx");
    let metadata = Engine::load(&committed)
        .unwrap()
        .metadata()
        .iter()
        .map(|(k, v)| StringStringEntryProto {
            key: k.clone(),
            value: v.clone(),
        })
        .collect();
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        metadata_props: metadata,
        graph: Some(GraphProto {
            name: "policy".into(),
            node: nodes,
            initializer: initializers,
            input: inputs,
            output: vec![value("actions", &[None, Some(29)])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn obs_input() -> ValueInfoProto {
    value("obs", &[None, Some(160)])
}

fn plain(last: NodeProto, extra: Vec<TensorProto>) -> ModelProto {
    let mut inits = vec![tensor("W", &[160, 29], vec![0.01; 160 * 29])];
    inits.extend(extra);
    policy(
        vec![node("MatMul", &["obs", "W"], &["h"]), last],
        inits,
        vec![obs_input()],
    )
}

fn write(model: &ModelProto, name: &str) -> PathBuf {
    let path = dir().join(name);
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

fn refusal(path: &Path) -> String {
    let e = Engine::load(path).expect_err("refused");
    let text = e.to_string();
    assert!(
        text.contains(path.file_name().unwrap().to_str().unwrap()),
        "names the file: {text}"
    );
    text
}

#[test]
fn a_plain_mlp_loads_and_runs() {
    let path = write(&plain(node("Identity", &["h"], &["actions"]), vec![]), "plain.onnx");
    let engine = Engine::load(&path).unwrap();
    let out = engine.run(&[1.0; 2 * 160], &[1.0, 2.0], 2).unwrap();
    assert!(out.iter().all(|v| (v - 1.6).abs() < 1e-4), "{out:?}");
}

#[test]
fn each_refused_operator_is_named() {
    for op in [
        "Loop",
        "If",
        "Scan",
        "ConstantOfShape",
        "Expand",
        "Range",
        "Tile",
        "NonZero",
        "Resize",
    ] {
        let path = write(&plain(node(op, &["h"], &["actions"]), vec![]), &format!("{op}.onnx"));
        let text = refusal(&path);
        assert!(
            text.contains(&format!("operators a policy may not use: {op}")),
            "{op}: {text}"
        );
    }
    let mut custom = node("FusedGemm", &["h"], &["actions"]);
    custom.domain = "com.microsoft".into();
    let mut model = plain(custom, vec![]);
    model.opset_import.push(OperatorSetIdProto {
        domain: "com.microsoft".into(),
        version: 1,
    });
    let text = refusal(&write(&model, "custom.onnx"));
    assert!(
        text.contains("com.microsoft.FusedGemm") && text.contains("custom domain 'com.microsoft'"),
        "{text}"
    );
    // A subgraph in an attribute, even on an allowed operator.
    let mut sneaky = node("Identity", &["h"], &["actions"]);
    sneaky.attribute.push(AttributeProto {
        name: "body".into(),
        g: Some(GraphProto::default()),
        ..Default::default()
    });
    let text = refusal(&write(&plain(sneaky, vec![]), "subgraph.onnx"));
    assert!(text.contains("subgraph"), "{text}");
}

#[test]
fn sizes_beyond_the_limits_are_refused_before_anything_is_built() {
    // Dimensions claimed without the data: refused from the header alone.
    let huge_dim = plain(
        node("Add", &["h", "B"], &["actions"]),
        vec![tensor("B", &[1 << 21, 29], vec![])],
    );
    let text = refusal(&write(&huge_dim, "huge-dim.onnx"));
    assert!(text.contains("initializer 'B' has a dimension of 2097152"), "{text}");
    let many = plain(
        node("Add", &["h", "B"], &["actions"]),
        vec![tensor("B", &[4096, 4097], vec![])],
    );
    let text = refusal(&write(&many, "huge-params.onnx"));
    assert!(text.contains("parameters, more than the limit"), "{text}");
    // 10,000 nodes.
    let mut nodes = vec![node("MatMul", &["obs", "W"], &["x0"])];
    for k in 0..10_000 {
        let (a, b) = (format!("x{k}"), format!("x{}", k + 1));
        nodes.push(node("Identity", &[&a], &[&b]));
    }
    nodes.push(node("Identity", &["x10000"], &["actions"]));
    let long = policy(
        nodes,
        vec![tensor("W", &[160, 29], vec![0.0; 160 * 29])],
        vec![obs_input()],
    );
    let text = refusal(&write(&long, "long.onnx"));
    assert!(text.contains("10002 nodes, more than the limit of 2000"), "{text}");
    // External data.
    let mut outside = tensor("B", &[29], vec![]);
    outside.data_location = Some(DataLocation::External as i32);
    outside.external_data.push(StringStringEntryProto {
        key: "location".into(),
        value: "/etc/passwd".into(),
    });
    let text = refusal(&write(
        &plain(node("Add", &["h", "B"], &["actions"]), vec![outside]),
        "external.onnx",
    ));
    assert!(text.contains("initializer 'B' is stored outside the file"), "{text}");
    // The file itself.
    let path = write(&plain(node("Identity", &["h"], &["actions"]), vec![]), "small.onnx");
    let tiny = Limits {
        max_file_bytes: 100,
        ..Limits::default()
    };
    let e = Engine::load_within(&path, &tiny).unwrap_err().to_string();
    assert!(e.contains("more than the limit of 100"), "{e}");
}

#[test]
fn inputs_it_cannot_feed_are_refused() {
    let two = policy(
        vec![
            node("Add", &["obs", "extra"], &["s"]),
            node("MatMul", &["s", "W"], &["actions"]),
        ],
        vec![tensor("W", &[160, 29], vec![0.0; 160 * 29])],
        vec![obs_input(), value("extra", &[None, Some(160)])],
    );
    let text = refusal(&write(&two, "two-inputs.onnx"));
    assert!(
        text.contains("expected one observation input") && text.contains("extra"),
        "{text}"
    );
    let fixed = policy(
        vec![node("MatMul", &["obs", "W"], &["actions"])],
        vec![tensor("W", &[160, 29], vec![0.0; 160 * 29])],
        vec![value("obs", &[Some(4), Some(160)])],
    );
    let text = refusal(&write(&fixed, "fixed-batch.onnx"));
    assert!(text.contains("fixed batch of 4"), "{text}");
    let rank3 = policy(
        vec![node("Identity", &["obs"], &["actions"])],
        vec![],
        vec![value("obs", &[None, Some(2), Some(160)])],
    );
    let text = refusal(&write(&rank3, "rank3.onnx"));
    assert!(text.contains("expected [batch, observation size]"), "{text}");
    // Sizes the metadata does not agree with: 100 observation values for 160.
    let narrow = policy(
        vec![node("MatMul", &["obs", "W"], &["actions"])],
        vec![tensor("W", &[100, 29], vec![0.0; 100 * 29])],
        vec![value("obs", &[None, Some(100)])],
    );
    let e = OnnxPolicy::load(&write(&narrow, "narrow.onnx"), &PolicyOverrides::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("the model takes 100 observation values; the policy's terms make 160"),
        "{e}"
    );
}

#[test]
fn non_finite_outputs_become_non_finite_actions_not_a_panic() {
    // x / 0 in every output: infinite or NaN.
    let model = plain(
        node("Div", &["h", "Z"], &["actions"]),
        vec![tensor("Z", &[29], vec![0.0; 29])],
    );
    let path = write(&model, "nan.onnx");
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
