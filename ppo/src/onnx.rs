//! The actor as an ONNX model in the mjlab convention (docs/ppo-tracker.md §10): inputs `obs`
//! [batch, 160] and `time_step` [batch, 1] (float; the tracker does not read it), output
//! `actions` [batch, 29] (the mean action, clamped where training clamps its targets:
//! `TrackerCard::joint_target_range`); the empirical normaliser is baked in; metadata as mjlab's
//! `attach_onnx_metadata` writes it, with numbers in full precision instead of 3 decimals.
//!
//! The file is written with the subset of the ONNX protobuf schema it needs (message and field
//! numbers of onnx.proto), so no Python is involved.

use crate::mdp::{ACTOR_DIM, TRACKED_BODY_NAMES};
use crate::policy::{ActorCritic, NORMALIZER_EPS};
use anyhow::Context;
use arena_data::NUM_JOINTS;
use arena_sdk::tracker::TrackerCard;
use prost::Message;
use std::path::Path;
use tch::Tensor;

/// ONNX IR version 8 with opset 17: read by onnxruntime ≥ 1.14 and the field's deploy tools.
const IR_VERSION: i64 = 8;
const OPSET: i64 = 17;
const FLOAT: i32 = 1;
const ATTRIBUTE_FLOAT: i32 = 1;
const ATTRIBUTE_INT: i32 = 2;

#[derive(Clone, PartialEq, Message)]
struct ModelProto {
    #[prost(int64, tag = "1")]
    ir_version: i64,
    #[prost(string, tag = "2")]
    producer_name: String,
    #[prost(string, tag = "3")]
    producer_version: String,
    #[prost(string, tag = "6")]
    doc_string: String,
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "8")]
    opset_import: Vec<OperatorSetIdProto>,
    #[prost(message, repeated, tag = "14")]
    metadata_props: Vec<StringStringEntryProto>,
}

#[derive(Clone, PartialEq, Message)]
struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(int64, tag = "2")]
    version: i64,
}

#[derive(Clone, PartialEq, Message)]
struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    output: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    output: Vec<String>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    op_type: String,
    #[prost(message, repeated, tag = "5")]
    attribute: Vec<AttributeProto>,
}

#[derive(Clone, PartialEq, Message)]
struct AttributeProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(float, tag = "2")]
    f: f32,
    #[prost(int64, tag = "3")]
    i: i64,
    #[prost(int32, tag = "20")]
    r#type: i32,
}

#[derive(Clone, PartialEq, Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "vec", tag = "9")]
    raw_data: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct ValueInfoProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    r#type: Option<TypeProto>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeProto {
    #[prost(message, optional, tag = "1")]
    tensor_type: Option<TensorTypeProto>,
}

#[derive(Clone, PartialEq, Message)]
struct TensorTypeProto {
    #[prost(int32, tag = "1")]
    elem_type: i32,
    #[prost(message, optional, tag = "2")]
    shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, Message)]
struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    dim: Vec<Dimension>,
}

#[derive(Clone, PartialEq, Message)]
struct Dimension {
    #[prost(int64, optional, tag = "1")]
    dim_value: Option<i64>,
    #[prost(string, optional, tag = "2")]
    dim_param: Option<String>,
}

/// A float input or output of shape [batch, width].
fn batched(name: &str, width: i64) -> ValueInfoProto {
    let dim = vec![
        Dimension {
            dim_value: None,
            dim_param: Some("batch".into()),
        },
        Dimension {
            dim_value: Some(width),
            dim_param: None,
        },
    ];
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
    }
}

/// A float32 initializer from a tensor (little-endian raw data).
fn initializer(name: &str, t: &Tensor) -> anyhow::Result<TensorProto> {
    let t = t.detach().to_kind(tch::Kind::Float).contiguous();
    let values = Vec::<f32>::try_from(t.view([-1])).context("reading a tensor")?;
    Ok(TensorProto {
        dims: t.size(),
        data_type: FLOAT,
        name: name.into(),
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: format!("{op}_{output}"),
        op_type: op.into(),
        attribute,
    }
}

/// mjlab's metadata (every value a string; lists comma-joined).
pub fn metadata(card: &TrackerCard) -> Vec<(String, String)> {
    let nums = |v: &[f64]| v.iter().map(|x| format!("{x}")).collect::<Vec<_>>().join(",");
    vec![
        ("run_path".into(), format!("arena-ppo/{}", card.benchmark)),
        ("joint_names".into(), card.joint_names.join(",")),
        ("joint_stiffness".into(), nums(&card.joint_stiffness)),
        ("joint_damping".into(), nums(&card.joint_damping)),
        ("default_joint_pos".into(), nums(&card.default_joint_pos)),
        ("command_names".into(), "motion".into()),
        ("observation_names".into(), card.observation_names.join(",")),
        ("action_scale".into(), nums(&card.action_scale)),
        ("anchor_body_name".into(), card.anchor_body_name.clone()),
        ("body_names".into(), TRACKED_BODY_NAMES.join(",")),
    ]
}

/// The clamp training applies to targets (`TrackerCard::joint_target_range`) in action units,
/// lower and upper per joint (default + scale·a increases with a, scale > 0): a runtime that
/// computes default + scale·action, as mjlab's does, then sends the targets the policy was
/// trained with. `None` for a card without ranges.
pub fn action_bounds(card: &TrackerCard) -> Option<(Vec<f32>, Vec<f32>)> {
    if card.joint_target_range.is_empty() {
        return None;
    }
    let bound = |k: usize| -> Vec<f32> {
        (0..NUM_JOINTS)
            .map(|j| ((card.joint_target_range[j][k] - card.default_joint_pos[j]) / card.action_scale[j]) as f32)
            .collect()
    };
    Some((bound(0), bound(1)))
}

/// Writes the actor (normaliser included, mean action) as ONNX.
pub fn export(model: &ActorCritic, card: &TrackerCard, out: &Path) -> anyhow::Result<()> {
    let _guard = tch::no_grad_guard();
    let mut inits = vec![
        initializer("obs_mean", &model.actor_norm.mean)?,
        initializer("obs_denominator", &(&model.actor_norm.std + NORMALIZER_EPS))?,
    ];
    let mut nodes = vec![
        node("Sub", &["obs", "obs_mean"], "obs_centred", vec![]),
        node("Div", &["obs_centred", "obs_denominator"], "x0", vec![]),
    ];
    let layers = model.actor.layers();
    let mut x = "x0".to_string();
    for (k, (w, b)) in layers.iter().enumerate() {
        let (wn, bn) = (format!("actor.{}.weight", 2 * k), format!("actor.{}.bias", 2 * k));
        inits.push(initializer(&wn, w)?);
        inits.push(initializer(&bn, b)?);
        let last = k + 1 == layers.len();
        let y = if last {
            "mean_action".to_string()
        } else {
            format!("h{k}")
        };
        let trans_b = AttributeProto {
            name: "transB".into(),
            i: 1,
            r#type: ATTRIBUTE_INT,
            ..Default::default()
        };
        nodes.push(node("Gemm", &[&x, &wn, &bn], &y, vec![trans_b]));
        if last {
            x = y;
        } else {
            let a = format!("a{k}");
            let alpha = AttributeProto {
                name: "alpha".into(),
                f: 1.0,
                r#type: ATTRIBUTE_FLOAT,
                ..Default::default()
            };
            nodes.push(node("Elu", &[&y], &a, vec![alpha]));
            x = a;
        }
    }
    debug_assert_eq!(x, "mean_action");
    match action_bounds(card) {
        None => nodes.push(node("Identity", &["mean_action"], "actions", vec![])),
        Some((lower, upper)) => {
            inits.push(initializer("action_lower", &Tensor::from_slice(&lower))?);
            inits.push(initializer("action_upper", &Tensor::from_slice(&upper))?);
            nodes.push(node("Max", &["mean_action", "action_lower"], "action_floored", vec![]));
            nodes.push(node("Min", &["action_floored", "action_upper"], "actions", vec![]));
        }
    }
    let graph = GraphProto {
        node: nodes,
        name: "arena_ppo_actor".into(),
        initializer: inits,
        input: vec![batched("obs", ACTOR_DIM as i64), batched("time_step", 1)],
        output: vec![batched("actions", NUM_JOINTS as i64)],
    };
    let model_proto = ModelProto {
        ir_version: IR_VERSION,
        producer_name: "arena-ppo".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: "PPO motion tracker (BeyondMimic recipe) trained in MimicArena; mjlab ONNX convention".into(),
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: OPSET,
        }],
        metadata_props: metadata(card)
            .into_iter()
            .map(|(key, value)| StringStringEntryProto { key, value })
            .collect(),
    };
    std::fs::write(out, model_proto.encode_to_vec()).with_context(|| format!("writing {}", out.display()))
}
